//! `/v1/chat/completions` through the relay against the stub upstream:
//! rewriting, pass-through, streaming, cancellation, upstream failures,
//! kind checks, limits and usage records.

use crate::common;

use std::time::{Duration, Instant};

use common::models::*;
use common::stub::{calling, tool_call};
use futures_util::StreamExt;
use gatehouse_stub_upstream::Script;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn chat_body(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn plain_chat_goes_upstream_under_the_upstream_name_and_returns_the_alias() {
    let env = env().await;
    env.model("chat-a", "chat", "openai", "Up/Chat-7B").await;
    let mut body = chat_body("chat-a", "hello there");
    body["temperature"] = json!(0.25);
    body["x_vendor_extension"] = json!({"nested": [1, "two", null]});
    body["tools"] =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);

    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["model"], "chat-a");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hello there");
    assert_eq!(v["usage"]["prompt_tokens"], 10);

    let seen = env.stub.requests_for_model("Up/Chat-7B");
    assert_eq!(seen.len(), 1);
    let sent = &seen[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    let mut expected = body.clone();
    expected["model"] = json!("Up/Chat-7B");
    assert_eq!(sent.body, expected, "every other field unchanged");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-upstream"));
    assert!(
        !sent.raw_body.contains("gtk_") && sent.headers.values().all(|h| !h.contains("gtk_")),
        "the client's API key never goes upstream"
    );
}

/// The model routes are served before the router (`http::Dispatch`) by
/// exact path and method; anything near them is answered as the router
/// answers it, in the contract's error shape.
#[tokio::test]
async fn near_misses_of_the_model_routes_are_answered_as_by_the_router() {
    let env = env().await;
    env.model("chat-a", "chat", "openai", "Up/Chat-7B").await;
    let body = chat_body("chat-a", "hi");
    let r = env.post("/v1/chat/completions?x=1", &body).await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "a query string is not part of the path"
    );
    for path in [
        "/v1/chat/completions/",
        "/v1/chat/completion",
        "/v1/embeddings/",
        "/v1/rerank/",
    ] {
        let (s, e) = v1_error(env.post(path, &body).await).await;
        assert_eq!(
            (s, e["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{path}"
        );
    }
    for path in ["/v1/chat/completions", "/v1/embeddings", "/v1/rerank"] {
        let r = env.app.get(path, &env.key).await;
        let (s, e) = v1_error(r).await;
        assert_eq!(
            (s, e["code"].as_str()),
            (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")),
            "{path}"
        );
    }
    assert_eq!(env.stub.requests_for_model("Up/Chat-7B").len(), 1);
}

#[tokio::test]
async fn a_provider_without_a_key_sends_no_authorization_upstream() {
    let env = env().await;
    env.provider("keyless", "openai", &env.stub.openai_base_url(), None, 5)
        .await;
    env.model("chat-k", "chat", "keyless", "up-keyless").await;
    let r = env
        .post("/v1/chat/completions", &chat_body("chat-k", "x"))
        .await;
    assert_eq!(r.status(), 200);
    let seen = env.stub.requests_for_model("up-keyless");
    assert_eq!(seen[0].header("authorization"), None);
}

#[tokio::test]
async fn tool_calls_come_back_unchanged() {
    let env = env().await;
    env.model("chat-t", "chat", "openai", "up-tools").await;
    env.stub.script(
        "up-tools",
        calling(vec![tool_call(
            "call_1",
            "get_weather",
            r#"{"city":"Paris"}"#,
        )]),
    );
    let v: Value = env
        .post("/v1/chat/completions", &chat_body("chat-t", "weather?"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"],
        json!({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
    );
}

#[tokio::test]
async fn stream_relays_chunks_in_order_with_the_alias_and_without_unrequested_usage() {
    let env = env().await;
    env.model("chat-s", "chat", "openai", "up-stream").await;
    let mut body = chat_body("chat-s", "stream me please");
    body["stream"] = json!(true);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let chunks = payloads(&sse_events(r).await);

    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    let chunks = &chunks[..chunks.len() - 1];
    assert!(chunks.len() >= 3, "{chunks:?}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(assembled_content(chunks), "echo: stream me please");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    for c in chunks {
        assert_eq!(c["model"], "chat-s");
        assert_eq!(c["object"], "chat.completion.chunk");
        assert!(c.get("usage").is_none(), "usage not asked for: {c}");
        assert!(
            !c["choices"].as_array().unwrap().is_empty(),
            "no usage-only chunk"
        );
    }
    // The upstream was asked for usage all the same (for the records).
    let sent = &env.stub.requests_for_model("up-stream")[0];
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(sent.body["stream"], true);
}

#[tokio::test]
async fn stream_carries_usage_when_the_client_asks_for_it() {
    let env = env().await;
    env.model("chat-u", "chat", "openai", "up-usage").await;
    env.stub.script(
        "up-usage",
        Script {
            content: Some("one two three".into()),
            usage: Some((7, 3)),
            ..Script::default()
        },
    );
    let mut body = chat_body("chat-u", "hi");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let chunks = payloads(&sse_events(env.post("/v1/chat/completions", &body).await).await);
    let n = chunks.len();
    assert_eq!(chunks[n - 1], json!("[DONE]"));
    let usage_chunk = &chunks[n - 2];
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(
        usage_chunk["usage"],
        // Unpriced: the cost status without a cost (docs/spend.md).
        json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "cost_status": "unpriced"})
    );
    assert_eq!(usage_chunk["model"], "chat-u");
    assert_eq!(assembled_content(&chunks[..n - 2]), "one two three");
}

#[tokio::test]
async fn the_first_chunk_goes_out_before_the_upstream_stream_ends() {
    let env = env().await;
    env.model("chat-slow", "chat", "openai", "up-slow").await;
    // role, 5 content chunks, finish, usage, [DONE]: 8 pauses of 150 ms.
    env.stub.script(
        "up-slow",
        Script {
            content: Some("abcdefghijklmnopqrst".into()),
            chunk_interval_ms: 150,
            ..Script::default()
        },
    );
    let mut body = chat_body("chat-slow", "x");
    body["stream"] = json!(true);
    let started = Instant::now();
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let first = stream.next().await.unwrap().unwrap();
    let first_at = started.elapsed();
    assert!(
        String::from_utf8_lossy(&first).contains("\"role\":\"assistant\""),
        "{first:?}"
    );
    while stream.next().await.is_some() {}
    let end_at = started.elapsed();
    assert!(
        end_at >= Duration::from_millis(8 * 150),
        "the stream took {end_at:?}"
    );
    // Buffering would put the first byte next to the end.
    assert!(
        first_at * 3 < end_at,
        "first byte after {first_at:?} of {end_at:?}: buffered"
    );
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_upstream_stream() {
    let env = env().await;
    env.model("chat-c", "chat", "openai", "up-cancel").await;
    env.stub.script(
        "up-cancel",
        Script {
            content: Some("x".repeat(400)),
            chunk_interval_ms: 100,
            ..Script::default()
        },
    );
    let mut body = chat_body("chat-c", "x");
    body["stream"] = json!(true);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    stream.next().await.unwrap().unwrap();
    stream.next().await.unwrap().unwrap();
    assert_eq!(env.stub.cancelled_streams(), 0);
    drop(stream);
    poll(5, || async {
        (env.stub.cancelled_streams() == 1).then_some(())
    })
    .await;
    assert_eq!(env.stub.completed_streams(), 0);
    // Recorded as ended by the client (499), which counts as an error.
    let row = wait_usage(&env, "model", "chat-c", 1).await;
    assert_eq!(row["errors"], 1);
}

#[tokio::test]
async fn chat_refuses_models_of_other_kinds_with_advice() {
    let env = env().await;
    env.model("emb", "embeddings", "openai", "up-emb").await;
    env.model("rr", "scoring", "openai", "up-rr").await;
    for (model, advice) in [
        ("emb", "is an embeddings model: send it to /v1/embeddings"),
        ("rr", "is a scoring (rerank) model: send it to /v1/rerank"),
    ] {
        let (s, e) = v1_error(
            env.post("/v1/chat/completions", &chat_body(model, "x"))
                .await,
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert_eq!(e["code"], "model_kind_mismatch");
        assert_eq!(e["param"], "model");
        assert_eq!(e["type"], "invalid_request_error");
        assert!(e["message"].as_str().unwrap().contains(advice), "{e}");
    }
    assert!(env.stub.requests().is_empty());
}

#[tokio::test]
async fn chat_needs_a_string_model_that_exists_and_the_key_allows() {
    let env = env().await;
    env.model("chat-a", "chat", "openai", "up-a").await;
    env.model("chat-b", "chat", "openai", "up-b").await;
    for body in [
        json!({"messages": [{"role": "user", "content": "x"}]}),
        json!({"model": 5, "messages": [{"role": "user", "content": "x"}]}),
        json!({"model": ["chat-a"], "messages": [{"role": "user", "content": "x"}]}),
    ] {
        let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(
            (e["code"].as_str(), e["param"].as_str()),
            (Some("validation_error"), Some("model"))
        );
    }
    let (s, e) = v1_error(
        env.post("/v1/chat/completions", &chat_body("nope", "x"))
            .await,
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("model_not_found"))
    );

    let limited = env
        .app
        .api_key(&env.admin, json!({"name": "limited", "models": ["chat-a"]}))
        .await;
    let r = env
        .post_with("/v1/chat/completions", &limited, &chat_body("chat-b", "x"))
        .await;
    let (s, e) = v1_error(r).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("model_not_allowed"))
    );
    let r = env
        .post_with("/v1/chat/completions", &limited, &chat_body("chat-a", "x"))
        .await;
    assert_eq!(r.status(), 200);

    let r = env
        .app
        .client
        .post(env.app.u("/v1/chat/completions"))
        .json(&chat_body("chat-a", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(v1_error(r).await.1["code"], "invalid_api_key");
}

#[tokio::test]
async fn chat_checks_messages_and_stream_and_the_body_shape() {
    let env = env().await;
    env.model("chat-a", "chat", "openai", "up-a").await;
    for (body, param) in [
        (json!({"model": "chat-a"}), "messages"),
        (json!({"model": "chat-a", "messages": []}), "messages"),
        (
            json!({"model": "chat-a", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
            "stream",
        ),
        (json!(["not", "an", "object"]), "body"),
    ] {
        let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(e["code"], "validation_error");
        assert_eq!(e["param"], param, "{body}");
    }
    let r = env
        .app
        .client
        .post(env.app.u("/v1/chat/completions"))
        .bearer_auth(&env.key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(v1_error(r).await.1["code"], "validation_error");
    assert!(env.stub.requests().is_empty());
}

#[tokio::test]
async fn an_upstream_error_status_passes_through_with_its_message() {
    let env = env().await;
    env.model("chat-e", "chat", "openai", "up-429").await;
    env.stub.script(
        "up-429",
        Script {
            status: Some(429),
            error_message: Some("slow down, friend".into()),
            ..Script::default()
        },
    );
    for stream in [false, true] {
        let mut body = chat_body("chat-e", "x");
        body["stream"] = json!(stream);
        let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
        assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "stream {stream}");
        assert_eq!(e["code"], "upstream_error");
        assert_eq!(e["type"], "rate_limit_error");
        assert_eq!(e["message"], "slow down, friend");
    }
}

#[tokio::test]
async fn an_upstream_answering_garbage_is_a_bad_gateway() {
    let env = env().await;
    env.model("chat-g", "chat", "openai", "up-garbage").await;
    env.stub.script(
        "up-garbage",
        Script {
            garbage: true,
            ..Script::default()
        },
    );
    for stream in [false, true] {
        let mut body = chat_body("chat-g", "x");
        body["stream"] = json!(stream);
        let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
        assert_eq!(s, StatusCode::BAD_GATEWAY, "stream {stream}");
        assert_eq!(e["code"], "upstream_error");
        assert_eq!(e["type"], "server_error");
    }
}

#[tokio::test]
async fn an_unreachable_upstream_is_upstream_unavailable() {
    let env = env().await;
    env.provider("dead", "openai", "http://127.0.0.1:9/v1", None, 5)
        .await;
    env.model("chat-d", "chat", "dead", "up-dead").await;
    for stream in [false, true] {
        let mut body = chat_body("chat-d", "x");
        body["stream"] = json!(stream);
        let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
        assert_eq!(s, StatusCode::BAD_GATEWAY);
        assert_eq!(e["code"], "upstream_unavailable");
    }
}

#[tokio::test]
async fn a_hanging_upstream_times_out_after_the_providers_timeout() {
    let env = env().await;
    env.provider("slow", "openai", &env.stub.openai_base_url(), None, 1)
        .await;
    env.model("chat-h", "chat", "slow", "up-hang").await;
    env.stub.script(
        "up-hang",
        Script {
            hang: true,
            ..Script::default()
        },
    );
    for stream in [false, true] {
        let mut body = chat_body("chat-h", "x");
        body["stream"] = json!(stream);
        let started = Instant::now();
        let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
        let took = started.elapsed();
        assert_eq!(s, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(e["code"], "upstream_timeout");
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_secs(4),
            "{took:?}"
        );
    }
}

#[tokio::test]
async fn a_stream_whose_first_event_never_comes_times_out_as_http_504() {
    let env = env().await;
    env.provider("slow", "openai", &env.stub.openai_base_url(), None, 1)
        .await;
    env.model("chat-w", "chat", "slow", "up-wait").await;
    // Headers come at once; the first chunk after 3 s.
    env.stub.script(
        "up-wait",
        Script {
            delay_ms: 3000,
            ..Script::default()
        },
    );
    let mut body = chat_body("chat-w", "x");
    body["stream"] = json!(true);
    let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::GATEWAY_TIMEOUT, Some("upstream_timeout"))
    );
}

#[tokio::test]
async fn a_stream_that_goes_quiet_ends_with_a_timeout_error_then_done() {
    let env = env().await;
    env.provider("slow", "openai", &env.stub.openai_base_url(), None, 1)
        .await;
    env.model("chat-q", "chat", "slow", "up-quiet").await;
    env.stub.script(
        "up-quiet",
        Script {
            chunk_interval_ms: 2500,
            ..Script::default()
        },
    );
    let mut body = chat_body("chat-q", "x");
    body["stream"] = json!(true);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let chunks = payloads(&sse_events(r).await);
    let n = chunks.len();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[n - 1], json!("[DONE]"));
    assert_eq!(chunks[n - 2]["error"]["code"], "upstream_timeout");
    assert_eq!(chunks[n - 2]["error"]["type"], "server_error");
}

#[tokio::test]
async fn a_stream_cut_off_mid_way_ends_with_an_error_message_then_done() {
    let env = env().await;
    env.model("chat-x", "chat", "openai", "up-cut").await;
    env.stub.script(
        "up-cut",
        Script {
            content: Some("a long answer that will not finish".into()),
            close_after_chunks: Some(2),
            ..Script::default()
        },
    );
    let mut body = chat_body("chat-x", "x");
    body["stream"] = json!(true);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let chunks = payloads(&sse_events(r).await);
    let n = chunks.len();
    assert_eq!(n, 5, "role + 2 chunks + error + [DONE]: {chunks:?}");
    assert_eq!(assembled_content(&chunks[..3]), "a long a");
    assert_eq!(
        chunks[3]["error"],
        json!({
            "message": "The model server closed the stream before it ended.",
            "type": "server_error", "param": null, "code": "upstream_error"
        })
    );
    assert_eq!(chunks[4], json!("[DONE]"));
    let row = wait_usage(&env, "model", "chat-x", 1).await;
    assert_eq!(row["errors"], 1);
}

/// A stream the stub cuts after the role chunk, "one " and "two ", as a
/// client without usage reads it: the status and the payloads.
async fn cut_after_one_two(env: &Env, alias: &str, upstream: &str, script: Script) -> Vec<Value> {
    env.model(alias, "chat", "openai", upstream).await;
    env.stub.script(
        upstream,
        Script {
            content: Some("one two three".into()),
            close_after_chunks: Some(2),
            ..script
        },
    );
    let mut body = chat_body(alias, "x");
    body["stream"] = json!(true);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "the stream began");
    payloads(&sse_events(r).await)
}

/// Role chunk, "one ", "two ", the cut-off error, `[DONE]`.
fn assert_one_two_then_cut_off(chunks: &[Value]) {
    assert_eq!(
        chunks.len(),
        5,
        "role + 2 chunks + error + [DONE]: {chunks:?}"
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(assembled_content(&chunks[..3]), "one two ");
    assert_eq!(chunks[3]["error"]["code"], "upstream_error");
    assert_eq!(
        chunks[3]["error"]["message"],
        "The model server closed the stream before it ended."
    );
    assert_eq!(chunks[4], json!("[DONE]"));
}

#[tokio::test]
async fn a_stream_cut_off_in_the_read_that_brought_its_events_relays_them_before_the_error() {
    let env = env().await;
    // Every event and the drop in one write: one read at the gateway.
    let chunks = cut_after_one_two(
        &env,
        "chat-burst",
        "up-burst",
        Script {
            close_with_last_chunk: true,
            ..Script::default()
        },
    )
    .await;
    assert_one_two_then_cut_off(&chunks);
    assert_eq!(env.stub.requests_for_model("up-burst").len(), 1);
    let row = wait_usage(&env, "model", "chat-burst", 1).await;
    assert_eq!(row["errors"], 1);
}

#[tokio::test]
async fn a_stream_cut_off_with_its_last_event_or_after_it_relays_every_event_before_the_error() {
    let env = env().await;
    // 0.2 s between events: "two " and the drop in one read, or the drop
    // in a read of its own after "two ".
    for (i, together) in [true, false].into_iter().enumerate() {
        let chunks = cut_after_one_two(
            &env,
            &format!("chat-paced-{i}"),
            &format!("up-paced-{i}"),
            Script {
                chunk_interval_ms: 200,
                close_with_last_chunk: together,
                ..Script::default()
            },
        )
        .await;
        assert_one_two_then_cut_off(&chunks);
    }
}

#[tokio::test]
async fn a_stream_cut_off_after_an_event_that_sends_nothing_still_begins_and_ends_with_the_error() {
    let env = env().await;
    env.model("chat-u", "chat", "openai", "up-usage-first")
        .await;
    // A usage-only chunk (dropped: the client did not ask for usage), then
    // the drop in the same read. The event was read: the stream began.
    env.stub.script(
        "up-usage-first",
        Script {
            stream_events: Some(vec![
                r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}"#.into(),
                r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"never"},"finish_reason":null}]}"#.into(),
            ]),
            close_after_chunks: Some(0),
            close_with_last_chunk: true,
            ..Script::default()
        },
    );
    let mut body = chat_body("chat-u", "x");
    body["stream"] = json!(true);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.len(), 2, "error + [DONE]: {chunks:?}");
    assert_eq!(chunks[0]["error"]["code"], "upstream_error");
    assert_eq!(chunks[1], json!("[DONE]"));
}

#[tokio::test]
async fn a_chat_model_on_a_provider_without_chat_is_refused() {
    let env = env().await;
    env.model("chat-tei", "chat", "tei", "whatever").await;
    let (s, e) = v1_error(
        env.post("/v1/chat/completions", &chat_body("chat-tei", "x"))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(e["code"], "provider_unsupported");
    assert!(env.stub.requests().is_empty());
}

#[tokio::test]
async fn chat_bodies_are_limited_to_gatehouse_max_body_bytes() {
    const LIMIT: usize = 4096;
    let env = env_with(|s| s.max_body_bytes = LIMIT).await;
    env.model("chat-a", "chat", "openai", "up-limit").await;
    // A body of exactly `len` bytes, padded in an unknown field.
    let body_of = |len: usize| {
        let mut b = chat_body("chat-a", "x");
        b["pad"] = json!("");
        let base = serde_json::to_vec(&b).unwrap().len();
        b["pad"] = json!("p".repeat(len - base));
        let bytes = serde_json::to_vec(&b).unwrap();
        assert_eq!(bytes.len(), len);
        bytes
    };
    let send = |bytes: Vec<u8>| {
        env.app
            .client
            .post(env.app.u("/v1/chat/completions"))
            .bearer_auth(&env.key)
            .header("content-type", "application/json")
            .body(bytes)
            .send()
    };
    let r = send(body_of(LIMIT)).await.unwrap();
    assert_eq!(r.status(), 200);
    let (s, e) = v1_error(send(body_of(LIMIT + 1)).await.unwrap()).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    assert_eq!(env.stub.requests_for_model("up-limit").len(), 1);
}

#[tokio::test]
async fn chat_usage_is_recorded_with_the_upstreams_tokens() {
    let env = env().await;
    env.model("chat-r", "chat", "openai", "up-rec").await;
    env.stub.script(
        "up-rec",
        Script {
            content: Some("a b c".into()),
            usage: Some((11, 5)),
            ..Script::default()
        },
    );
    let r = env
        .post("/v1/chat/completions", &chat_body("chat-r", "x"))
        .await;
    assert_eq!(r.status(), 200);
    let mut body = chat_body("chat-r", "x");
    body["stream"] = json!(true);
    let events = sse_events(env.post("/v1/chat/completions", &body).await).await;
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let row = wait_usage(&env, "model", "chat-r", 2).await;
    assert_eq!(
        row,
        json!({"key": "chat-r", "requests": 2, "prompt_tokens": 22, "completion_tokens": 10, "errors": 0,
               "cost": "0.000000000", "currency": "USD", "unpriced_requests": 2})
    );
}

/// Hooks as the agent chat route will use them: extra frames before a
/// chunk, dropped chunks, frames at the end and on failure, an edited
/// plain answer.
mod hooks {
    use super::*;
    use gatehouse::error::Error;
    use gatehouse::proxy::{relay, ChatCall, ChatHooks, ChunkAction, SseFrame, UsageContext};

    #[derive(Default)]
    struct Recording {
        chunks_seen: usize,
    }

    impl ChatHooks for Recording {
        async fn on_response(&mut self, response: &mut Value) -> Result<(), Error> {
            tokio::task::yield_now().await;
            response["approvals"] = json!([]);
            Ok(())
        }

        fn on_chunk(&mut self, chunk: &mut Value, before: &mut Vec<SseFrame>) -> ChunkAction {
            self.chunks_seen += 1;
            if self.chunks_seen == 1 {
                before.push(SseFrame::Event {
                    event: "ag-ui".into(),
                    data: json!({"type": "RUN_STARTED"}).to_string(),
                });
                // The role chunk is dropped; the event above still goes out.
                return ChunkAction::Drop;
            }
            chunk["seen"] = json!(self.chunks_seen);
            ChunkAction::Send
        }

        async fn on_stream_end(&mut self, usage: Option<&Value>, out: &mut Vec<u8>) {
            let frames = [
                SseFrame::json(
                    &json!({"choices": [], "approvals": [], "had_usage": usage.is_some()}),
                ),
                SseFrame::Event {
                    event: "ag-ui".into(),
                    data: json!({"type": "RUN_FINISHED"}).to_string(),
                },
            ];
            for f in frames {
                f.write_to(out);
            }
        }

        fn on_stream_error(&mut self, error: &Error) -> Vec<SseFrame> {
            vec![SseFrame::Event {
                event: "ag-ui".into(),
                data: json!({"type": "RUN_ERROR", "message": error.message}).to_string(),
            }]
        }
    }

    async fn call(env: &Env, model: &str, stream: bool) -> axum::response::Response {
        let model = env.app.app().catalog().model(model).cloned().unwrap();
        let mut body = chat_body("ignored", "hooks");
        body["stream"] = json!(stream);
        let Value::Object(body) = body else {
            unreachable!()
        };
        let app = env.app.app();
        let relayed = relay(
            &app.http,
            &app.usage,
            ChatCall {
                model,
                body: gatehouse::wire::chat::body::ChatInput::Tree(body),
                tools: None,
                usage: UsageContext {
                    agent: Some("helper".into()),
                    ..UsageContext::default()
                },
                requested: None,
            },
            Recording::default(),
        )
        .await
        .unwrap();
        gatehouse::http::answers::relayed_response(relayed)
    }

    async fn events(resp: axum::response::Response) -> Vec<gatehouse::wire::sse::SseEvent> {
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let mut p = gatehouse::wire::sse::SseParser::new();
        p.push(&bytes);
        std::iter::from_fn(|| p.next_event()).collect()
    }

    #[tokio::test]
    async fn hooks_edit_plain_answers_and_add_drop_and_end_stream_frames() {
        let env = env().await;
        env.model("chat-h", "chat", "openai", "up-hooks").await;
        let resp = call(&env, "chat-h", false).await;
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["model"], "chat-h");
        assert_eq!(v["approvals"], json!([]));

        let evs = events(call(&env, "chat-h", true).await).await;
        assert_eq!(evs[0].event.as_deref(), Some("ag-ui"));
        assert!(evs[0].data.contains("RUN_STARTED"));
        let n = evs.len();
        assert_eq!(evs[n - 1].data, "[DONE]");
        assert_eq!(evs[n - 2].event.as_deref(), Some("ag-ui"));
        assert!(evs[n - 2].data.contains("RUN_FINISHED"));
        let end: Value = serde_json::from_str(&evs[n - 3].data).unwrap();
        assert_eq!(end["had_usage"], true);
        let chunks = payloads(&evs[1..n - 3]);
        assert!(chunks.iter().all(|c| c["seen"].as_u64() >= Some(2)));
        assert!(chunks
            .iter()
            .all(|c| c["choices"][0]["delta"].get("role").is_none()));
        assert_eq!(assembled_content(&chunks), "echo: hooks");
        // The agent context reaches the usage records.
        let row = wait_usage(&env, "agent", "helper", 2).await;
        assert_eq!(row["errors"], 0);
    }

    #[tokio::test]
    async fn a_failed_stream_sends_the_hooks_frames_before_the_error() {
        let env = env().await;
        env.model("chat-f", "chat", "openai", "up-fail").await;
        env.stub.script(
            "up-fail",
            Script {
                content: Some("never finishes".into()),
                close_after_chunks: Some(1),
                ..Script::default()
            },
        );
        let evs = events(call(&env, "chat-f", true).await).await;
        let n = evs.len();
        assert_eq!(evs[n - 1].data, "[DONE]");
        let err: Value = serde_json::from_str(&evs[n - 2].data).unwrap();
        assert_eq!(err["error"]["code"], "upstream_error");
        assert_eq!(evs[n - 3].event.as_deref(), Some("ag-ui"));
        assert!(evs[n - 3].data.contains("RUN_ERROR"));
    }
}
