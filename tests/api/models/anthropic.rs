//! Anthropic as an upstream: chat (plain and streamed) translated to the
//! Messages API of the stub upstream and back, the provider's headers and
//! settings, retries and fallbacks across dialects, and model aliases.

use crate::common::models::*;
use crate::common::stub::{calling, tool_call};
use crate::common::{api_code, client};
use gatehouse_stub_upstream::Script;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The env's providers, plus `claude` (anthropic, key `sk-ant-upstream`) on the stub.
async fn anthropic_env() -> Env {
    let env = env().await;
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "claude", "type": "anthropic", "base_url": env.stub.url(),
                    "api_key": "sk-ant-upstream", "timeout_s": 5}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    env
}

async fn admin_error(r: reqwest::Response) -> (StatusCode, Value) {
    let s = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (s, v["detail"].clone())
}

/// `Some(field)` when the `/api` error's message names `'field'` (that shape has no `param`).
fn named<'a>(detail: &Value, field: &'a str) -> Option<&'a str> {
    let message = detail["message"].as_str().unwrap_or_default();
    message.contains(&format!("'{field}'")).then_some(field)
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn chat_to_an_anthropic_provider_goes_as_messages_with_its_key_and_comes_back_as_chat() {
    let env = anthropic_env().await;
    env.model("claude-a", "chat", "claude", "claude-up-1").await;
    env.stub.script(
        "claude-up-1",
        Script {
            content: Some("Hello from Claude".into()),
            usage: Some((10, 5)),
            cache_tokens: Some((100, 20)),
            ..Script::default()
        },
    );
    let body = json!({"model": "claude-a", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "use tools"},
            {"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "user", "content": "and tomorrow?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": "auto", "parallel_tool_calls": false, "stop": ["END"], "user": "u-42",
        "temperature": 0.5, "seed": 7, "logprobs": true});
    let r = client()
        .post(env.app.u("/v1/chat/completions"))
        .bearer_auth(&env.key)
        .header("x-app", "cli")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "claude");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "claude-a");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from Claude");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // One convention: prompt = input + cache read + cache creation.
    assert_eq!(v["usage"]["prompt_tokens"], 130);
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 100);

    let seen = env.stub.requests_for_model("claude-up-1");
    assert_eq!(seen.len(), 1);
    let sent = &seen[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(
        sent.body,
        json!({"model": "claude-up-1", "system": "be brief\n\nuse tools", "max_tokens": 4096,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "rain"},
                    {"type": "text", "text": "and tomorrow?"}]}],
            "stop_sequences": ["END"], "metadata": {"user_id": "u-42"}, "temperature": 0.5,
            "tools": [{"name": "get_weather", "description": "Weather",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}}),
        "seed and logprobs dropped, the rest translated"
    );
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-upstream"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert!(sent.header("x-request-id").is_some_and(|id| !id.is_empty()));
    for absent in ["authorization", "anthropic-beta", "x-app"] {
        assert_eq!(sent.header(absent), None, "{absent} is not sent");
    }
    assert!(
        sent.headers.values().all(|h| !h.contains("gtk_")),
        "the client's API key never goes upstream"
    );

    // The usage record names the model's id and the convention's prompt.
    let row = wait_usage(&env, "model", "claude-a", 1).await;
    assert_eq!(row["prompt_tokens"], 130);

    // The dropped members are counted by name.
    let metrics = client()
        .get(env.app.u("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("gatehouse_translation_dropped_total{field=\"seed\"}")
            && metrics.contains("gatehouse_translation_dropped_total{field=\"logprobs\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_streamed_chat_from_an_anthropic_provider_arrives_as_chat_chunks() {
    let env = anthropic_env().await;
    env.model("claude-s", "chat", "claude", "claude-up-s").await;
    let mut script = calling(vec![
        tool_call("toolu_1", "get_weather", r#"{"city":"Oslo","days":2}"#),
        tool_call("toolu_2", "now", ""),
    ]);
    script.content = Some("Let me check.".into());
    script.chunk_size = 5;
    script.usage = Some((7, 9));
    script.cache_tokens = Some((3, 2));
    env.stub.script("claude-up-s", script);

    let body = json!({"model": "claude-s", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "weather?"}]});
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, "content-type").starts_with("text/event-stream"));
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last().unwrap(), "[DONE]");
    let chunks = &chunks[..chunks.len() - 1];
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks
        .iter()
        .all(|c| c["model"] == "claude-s" && c["object"] == "chat.completion.chunk"));
    assert_eq!(assembled_content(chunks), "Let me check.");
    assert!(
        chunks
            .iter()
            .filter(|c| c["choices"][0]["delta"]["content"].is_string())
            .count()
            >= 3,
        "text arrives in pieces"
    );
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(
        calls[0],
        &json!({"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}})
    );
    let args0: String = calls
        .iter()
        .filter(|c| c["index"] == 0)
        .filter_map(|c| c["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args0, r#"{"city":"Oslo","days":2}"#);
    assert!(
        calls.iter().filter(|c| c["index"] == 0).count() > 2,
        "arguments in pieces"
    );
    let second: Vec<&&Value> = calls.iter().filter(|c| c["index"] == 1).collect();
    assert_eq!(
        (
            second[0]["id"].as_str(),
            second[0]["function"]["name"].as_str()
        ),
        (Some("toolu_2"), Some("now"))
    );
    assert_eq!(
        second.last().unwrap()["function"]["arguments"],
        "{}",
        "a tool without arguments gets {{}}"
    );
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(|_| c))
        .collect();
    assert_eq!(finish.len(), 1);
    assert_eq!(finish[0]["choices"][0]["finish_reason"], "tool_calls");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 12);
    assert_eq!(usage["usage"]["completion_tokens"], 9);
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 3);

    let sent = &env.stub.requests_for_model("claude-up-s")[0];
    assert_eq!(sent.body["stream"], true);
    assert!(
        sent.body.get("stream_options").is_none(),
        "not a Messages member"
    );
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
    let row = wait_usage(&env, "model", "claude-s", 1).await;
    assert_eq!(
        (
            row["prompt_tokens"].as_i64(),
            row["completion_tokens"].as_i64()
        ),
        (Some(12), Some(9))
    );

    // Without include_usage the client gets no usage chunk, as on chat.
    let body = json!({"model": "claude-s", "stream": true, "messages": [{"role": "user", "content": "again"}]});
    let chunks = payloads(&sse_events(env.post("/v1/chat/completions", &body).await).await);
    assert!(
        chunks
            .iter()
            .all(|c| c.get("usage").is_none_or(Value::is_null)),
        "{chunks:?}"
    );
    assert_eq!(chunks.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_the_chat_stream_with_chats_error() {
    let env = anthropic_env().await;
    env.model("claude-e", "chat", "claude", "claude-up-e").await;
    let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-up-e", "content": [], "usage": {"input_tokens": 4, "output_tokens": 1}}});
    env.stub.script(
        "claude-up-e",
        Script {
            stream_events: Some(vec![
                format!("event: message_start\ndata: {start}"),
                r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
                    .into(),
                r#"event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Part"}}"#
                    .into(),
                r#"event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
                    .into(),
            ]),
            ..Script::default()
        },
    );
    let body = json!({"model": "claude-e", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(assembled_content(&chunks), "Part");
    let err = chunks
        .iter()
        .find(|c| c.get("error").is_some())
        .expect("an error message");
    assert_eq!(err["error"]["code"], "upstream_error");
    assert_eq!(err["error"]["message"], "Overloaded");
    assert_eq!(chunks.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn max_tokens_comes_from_the_request_else_the_models_default_and_n_above_one_is_refused() {
    let env = anthropic_env().await;
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "claude-m", "kind": "chat", "provider": "claude", "upstream_model": "claude-up-m",
                    "max_tokens_default": 77}),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(r.json::<Value>().await.unwrap()["max_tokens_default"], 77);
    let msg = json!([{"role": "user", "content": "hi"}]);
    for (extra, want) in [
        (json!({}), 77),
        (json!({"max_tokens": 5}), 5),
        (json!({"max_tokens": 5, "max_completion_tokens": 6}), 6),
    ] {
        env.stub.clear();
        let mut body = json!({"model": "claude-m", "messages": msg});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        assert_eq!(env.post("/v1/chat/completions", &body).await.status(), 200);
        assert_eq!(
            env.stub.requests_for_model("claude-up-m")[0].body["max_tokens"],
            want,
            "{extra}"
        );
    }
    env.stub.clear();
    let (s, e) = v1_error(
        env.post(
            "/v1/chat/completions",
            &json!({"model": "claude-m", "messages": msg, "n": 2}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str(), e["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("validation_error"), Some("n"))
    );
    assert!(env.stub.requests_for_model("claude-up-m").is_empty());

    // The default's limits: 1 and 1,000,000 accepted, 0 and one more refused.
    for (n, ok) in [(1, true), (1_000_000, true), (0, false), (1_000_001, false)] {
        let r = env
            .app
            .patch(
                "/api/admin/models/claude-m",
                &env.admin,
                &json!({"max_tokens_default": n}),
            )
            .await;
        if ok {
            assert_eq!(r.status(), 200, "{n}");
        } else {
            let (s, d) = admin_error(r).await;
            assert_eq!(
                (s, named(&d, "max_tokens_default")),
                (StatusCode::BAD_REQUEST, Some("max_tokens_default")),
                "{n}"
            );
        }
    }
}

#[tokio::test]
async fn the_clients_anthropic_version_wins_over_the_providers_and_betas_never_go_on_chat() {
    let env = env().await;
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "claude-v", "type": "anthropic", "base_url": env.stub.url(),
                    "anthropic_version": "2024-10-22", "beta_headers": "forward"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.model("claude-v", "chat", "claude-v", "claude-up-v")
        .await;
    let body = json!({"model": "claude-v", "messages": [{"role": "user", "content": "hi"}]});
    let send = |version: Option<&'static str>| {
        let mut req = client()
            .post(env.app.u("/v1/chat/completions"))
            .bearer_auth(&env.key)
            .header("anthropic-beta", "interleaved-thinking-2025-05-14")
            .json(&body);
        if let Some(v) = version {
            req = req.header("anthropic-version", v);
        }
        req.send()
    };
    assert_eq!(send(None).await.unwrap().status(), 200);
    assert_eq!(send(Some("2099-01-01")).await.unwrap().status(), 200);
    let seen = env.stub.requests_for_model("claude-up-v");
    assert_eq!(seen[0].header("anthropic-version"), Some("2024-10-22"));
    assert_eq!(seen[1].header("anthropic-version"), Some("2099-01-01"));
    assert!(
        seen.iter().all(|s| s.header("anthropic-beta").is_none()),
        "translated chat sends no beta"
    );
    assert!(
        seen.iter().all(|s| s.header("x-api-key").is_none()),
        "no key configured, none sent"
    );

    // An openai provider never gets anthropic-* headers.
    env.model("plain", "chat", "openai", "gpt-up").await;
    let r = client()
        .post(env.app.u("/v1/chat/completions"))
        .bearer_auth(&env.key)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "x")
        .json(&json!({"model": "plain", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let sent = &env.stub.requests_for_model("gpt-up")[0];
    assert!(
        sent.headers
            .keys()
            .all(|h| !h.starts_with("anthropic-") && h != "x-api-key"),
        "{:?}",
        sent.headers
    );
}

#[tokio::test]
async fn anthropic_providers_keep_their_settings_and_refuse_bad_ones() {
    let env = env().await;
    let base = env.stub.url();
    for (name, beta, shown) in [
        ("c-fwd", None, json!("forward")),
        ("c-drop", Some(json!("drop")), json!("drop")),
        ("c-list", Some(json!(["a-1", "b-2"])), json!(["a-1", "b-2"])),
    ] {
        let mut p = json!({"name": name, "type": "anthropic", "base_url": base, "api_key": "sk-ant-secret"});
        if let Some(b) = beta {
            p["beta_headers"] = b;
        }
        let r = env.app.post("/api/admin/providers", &env.admin, &p).await;
        assert_eq!(r.status(), 201, "{name}");
        let v: Value = env
            .app
            .get(&format!("/api/admin/providers/{name}"), &env.admin)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["type"], "anthropic");
        assert_eq!(v["anthropic_version"], "2023-06-01");
        assert_eq!(v["beta_headers"], shown, "{name}");
        assert_eq!(v["has_api_key"], true);
        assert!(
            !v.to_string().contains("sk-ant-secret"),
            "the key is never shown"
        );
    }
    let list = env
        .app
        .get("/api/admin/providers", &env.admin)
        .await
        .text()
        .await
        .unwrap();
    assert!(!list.contains("sk-ant-secret"));

    for (bad, param) in [
        (json!({"beta_headers": "keep"}), "beta_headers"),
        (json!({"beta_headers": 3}), "beta_headers"),
        (json!({"beta_headers": ["a,b"]}), "beta_headers"),
        (json!({"anthropic_version": ""}), "anthropic_version"),
    ] {
        let mut p = json!({"name": "c-bad", "type": "anthropic", "base_url": base});
        for (k, v) in bad.as_object().unwrap() {
            p[k] = v.clone();
        }
        let (s, d) = admin_error(env.app.post("/api/admin/providers", &env.admin, &p).await).await;
        assert_eq!(
            (s, d["code"].as_str(), named(&d, param)),
            (
                StatusCode::BAD_REQUEST,
                Some("validation_error"),
                Some(param)
            ),
            "{bad}"
        );
        assert!(d["message"].as_str().unwrap().contains(param));
    }
    // The settings belong to anthropic providers only.
    let p = json!({"name": "o-beta", "type": "openai", "base_url": base, "beta_headers": "drop"});
    let (s, d) = admin_error(env.app.post("/api/admin/providers", &env.admin, &p).await).await;
    assert_eq!(
        (s, named(&d, "beta_headers")),
        (StatusCode::BAD_REQUEST, Some("beta_headers"))
    );

    // Embeddings and scoring models cannot target it.
    for kind in ["embeddings", "scoring"] {
        let m = json!({"id": format!("m-{kind}"), "kind": kind, "provider": "c-fwd", "upstream_model": "x"});
        let (s, d) = admin_error(env.app.post("/api/admin/models", &env.admin, &m).await).await;
        assert_eq!(
            (s, d["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("validation_error")),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn status_529_from_anthropic_falls_back_to_an_openai_model_and_back() {
    let env = anthropic_env().await;
    // Anthropic first, overloaded: its fallback on the openai provider answers.
    env.model("gpt-b", "chat", "openai", "gpt-up-b").await;
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "claude-f", "kind": "chat", "provider": "claude", "upstream_model": "claude-up-f",
                    "fallbacks": ["gpt-b"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.stub.script(
        "claude-up-f",
        Script {
            status: Some(529),
            error_message: Some("Overloaded".into()),
            ..Script::default()
        },
    );
    let body = json!({"model": "claude-f", "messages": [{"role": "user", "content": "hi"}]});
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "openai");
    assert_eq!(header(&r, "x-gatehouse-attempts"), "2");
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["model"], "gpt-b",
        "a fallback's answer names the fallback"
    );
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hi");
    assert_eq!(env.stub.requests_for_model("claude-up-f").len(), 1);

    // OpenAI first, failing: its fallback on the anthropic provider answers, streamed too.
    env.model("claude-ok", "chat", "claude", "claude-up-ok")
        .await;
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "gpt-f", "kind": "chat", "provider": "openai", "upstream_model": "gpt-up-f",
                    "fallbacks": ["claude-ok"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.stub.script("gpt-up-f", Script::status(503));
    let body = json!({"model": "gpt-f", "messages": [{"role": "user", "content": "hello"}]});
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "claude");
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (
            v["model"].as_str(),
            v["choices"][0]["message"]["content"].as_str()
        ),
        (Some("claude-ok"), Some("echo: hello"))
    );
    let mut body = body;
    body["stream"] = json!(true);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(header(&r, "x-gatehouse-provider"), "claude");
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(assembled_content(&chunks), "echo: hello");
    assert_eq!(chunks.last().unwrap(), "[DONE]");
    assert_eq!(env.stub.requests_for_model("claude-up-ok").len(), 2);
    assert!(env
        .stub
        .requests_for_model("claude-up-ok")
        .iter()
        .all(|r| r.path == "/v1/messages"));
}

#[tokio::test]
async fn anthropic_errors_keep_their_status_and_message_on_chat() {
    let env = anthropic_env().await;
    env.model("claude-x", "chat", "claude", "claude-up-x").await;
    env.stub.script(
        "claude-up-x",
        Script {
            status: Some(400),
            error_message: Some("messages: text content blocks must be non-empty".into()),
            ..Script::default()
        },
    );
    let body = json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]});
    let (s, e) = v1_error(env.post("/v1/chat/completions", &body).await).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(e["code"], "upstream_error");
    assert_eq!(
        e["message"],
        "messages: text content blocks must be non-empty"
    );
}

#[tokio::test]
async fn aliases_resolve_by_id_then_exact_then_longest_wildcard_and_the_answer_names_them() {
    let env = anthropic_env().await;
    let add = |id: &'static str, upstream: &'static str, aliases: Value| {
        let app = &env.app;
        let admin = env.admin.clone();
        async move {
            app.post(
                "/api/admin/models",
                &admin,
                &json!({"id": id, "kind": "chat", "provider": "claude", "upstream_model": upstream, "aliases": aliases}),
            )
            .await
        }
    };
    let r = add(
        "sonnet",
        "claude-up-sonnet",
        json!(["claude-sonnet-*", "claude-3-7-sonnet-latest"]),
    )
    .await;
    assert_eq!(r.status(), 201);
    assert_eq!(
        r.json::<Value>().await.unwrap()["aliases"],
        json!(["claude-sonnet-*", "claude-3-7-sonnet-latest"])
    );
    assert_eq!(
        add("sonnet-45", "claude-up-45", json!(["claude-sonnet-4-5*"]))
            .await
            .status(),
        201
    );
    assert_eq!(
        add(
            "haiku",
            "claude-up-haiku",
            json!(["claude-haiku-*", "claude-*"])
        )
        .await
        .status(),
        201
    );

    // A key allowed only the ids may use their aliases.
    let key = env
        .app
        .api_key(
            &env.admin,
            json!({"name": "ids", "models": ["sonnet", "sonnet-45"]}),
        )
        .await;
    for (name, upstream) in [
        ("claude-sonnet-4-0", "claude-up-sonnet"),
        ("claude-sonnet-4-5-20250929", "claude-up-45"),
        ("claude-3-7-sonnet-latest", "claude-up-sonnet"),
        ("sonnet", "claude-up-sonnet"),
    ] {
        env.stub.clear();
        let body = json!({"model": name, "messages": [{"role": "user", "content": "hi"}]});
        let r = env.post_with("/v1/chat/completions", &key, &body).await;
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(r.json::<Value>().await.unwrap()["model"], name);
        assert_eq!(
            env.stub.requests_for_model(upstream).len(),
            1,
            "{name} → {upstream}"
        );
        // Streams name it too.
        let mut body = body;
        body["stream"] = json!(true);
        let chunks =
            payloads(&sse_events(env.post_with("/v1/chat/completions", &key, &body).await).await);
        assert!(
            chunks
                .iter()
                .filter(|c| c.is_object())
                .all(|c| c["model"] == name),
            "{name}"
        );
    }
    // Usage records name the ids.
    wait_usage(&env, "model", "sonnet", 6).await;
    wait_usage(&env, "model", "sonnet-45", 2).await;
    assert!(usage_row(&env, "model", "claude-sonnet-4-0")
        .await
        .is_none());

    // The catch-all wildcard belongs to a model the key may not use.
    let body = json!({"model": "claude-opus-4", "messages": [{"role": "user", "content": "hi"}]});
    let (s, e) = v1_error(env.post_with("/v1/chat/completions", &key, &body).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("model_not_allowed"))
    );
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.json::<Value>().await.unwrap()["model"], "claude-opus-4");
    assert_eq!(env.stub.requests_for_model("claude-up-haiku").len(), 1);
    // An unknown name stays unknown.
    let body = json!({"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        v1_error(env.post("/v1/chat/completions", &body).await)
            .await
            .1["code"],
        "model_not_found"
    );
}

#[tokio::test]
async fn aliases_are_checked_at_their_limits_and_for_clashes() {
    let env = anthropic_env().await;
    let model = |id: &str, aliases: Value| json!({"id": id, "kind": "chat", "provider": "claude", "upstream_model": "u", "aliases": aliases});
    let (app, admin) = (&env.app, &env.admin);
    let post = |v: Value| async move { app.post("/api/admin/models", admin, &v).await };
    let at_limit: Vec<String> = (0..32).map(|i| format!("n-{i}")).collect();
    assert_eq!(post(model("m32", json!(at_limit))).await.status(), 201);
    let past: Vec<String> = (0..33).map(|i| format!("p-{i}")).collect();
    let (s, d) = admin_error(post(model("m33", json!(past))).await).await;
    assert_eq!(
        (s, named(&d, "aliases")),
        (StatusCode::BAD_REQUEST, Some("aliases"))
    );
    assert!(d["message"].as_str().unwrap().contains("aliases"));

    let long = "a".repeat(256);
    assert_eq!(post(model("m256", json!([long]))).await.status(), 201);
    let too_long = "b".repeat(257);
    for (bad, why) in [
        (json!([too_long]), "257 characters"),
        (json!(["*"]), "a lone star"),
        (json!(["a*b"]), "a star inside"),
        (json!(["a**"]), "two stars"),
        (json!(["x", "x"]), "twice"),
        (json!(["m32"]), "another model's id"),
        (json!(["n-3"]), "another model's alias"),
        (json!(["mine"]), "its own id"),
    ] {
        let (s, d) = admin_error(post(model("mine", bad)).await).await;
        assert_eq!(
            (s, d["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("validation_error")),
            "{why}"
        );
        assert!(named(&d, "aliases").is_some(), "{why}: {d}");
        assert!(
            d["message"].as_str().unwrap().contains("aliases"),
            "{why}: {d}"
        );
    }
    assert_eq!(
        post(model("c*", json!([]))).await.status(),
        400,
        "an id is no wildcard"
    );
    // A model id equal to an existing alias.
    let (s, d) = admin_error(post(model("n-5", json!([]))).await).await;
    assert_eq!((s, named(&d, "id")), (StatusCode::BAD_REQUEST, Some("id")));
    // PATCH with [] removes them; the names are free again.
    let r = env
        .app
        .patch("/api/admin/models/m32", &env.admin, &json!({"aliases": []}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["aliases"], json!([]));
    assert_eq!(post(model("n-5", json!([]))).await.status(), 201);
    let v: Value = env
        .app
        .get("/api/admin/models/m256", &env.admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            v["aliases"][0].as_str().map(str::len),
            v["max_tokens_default"].as_i64()
        ),
        (Some(256), Some(4096))
    );
}

#[tokio::test]
async fn an_alias_change_applies_to_the_next_request() {
    let env = anthropic_env().await;
    env.model("sonnet", "chat", "claude", "claude-up-a").await;
    let body =
        json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        v1_error(env.post("/v1/chat/completions", &body).await)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let r = env
        .app
        .patch(
            "/api/admin/models/sonnet",
            &env.admin,
            &json!({"aliases": ["claude-sonnet-*"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        api_code(env.app.get("/api/admin/models/nope", &env.admin).await)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn agent_chat_reaches_an_anthropic_model_plain_and_streamed_with_tool_rules() {
    use crate::common::agent_chat::{chat_json, chat_stream, data_messages, sign_in};
    let env = anthropic_env().await;
    env.model("m-helper", "chat", "claude", "claude-up-agent")
        .await;
    env.app
        .add_agent(
            &env.admin,
            "helper",
            "m-helper",
            json!({"instructions": "You help."}),
        )
        .await;
    let token = sign_in(&env, "ada@example.com", "helper").await;
    let mut script = calling(vec![tool_call("toolu_a", "lookup", r#"{"q":"x"}"#)]);
    script.content = Some("Looking.".into());
    env.stub.script("claude-up-agent", script);
    let body = json!({"model": "ignored", "messages": [{"role": "user", "content": "find x"}],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]});
    let v = chat_json(&env, "helper", &token, &body, &[]).await;
    assert_eq!(v["model"], "m-helper");
    assert_eq!(v["choices"][0]["message"]["content"], "Looking.");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"q":"x"}"#
    );
    let sent = &env.stub.requests_for_model("claude-up-agent")[0];
    assert_eq!(sent.path, "/v1/messages");
    assert!(
        sent.body["system"].as_str().unwrap().contains("You help."),
        "{}",
        sent.body
    );
    assert_eq!(sent.body["tools"][0]["name"], "lookup");
    assert!(
        sent.headers.values().all(|h| !h.contains(&token)),
        "the access token never goes upstream"
    );

    let chunks = data_messages(&chat_stream(&env, "helper", &token, &body, &[]).await);
    assert_eq!(assembled_content(&chunks), "Looking.");
    let args: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, r#"{"q":"x"}"#);
    assert_eq!(chunks.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn embeddings_and_rerank_resolve_aliases_and_name_them_in_the_answer() {
    let env = env().await;
    for (id, kind, upstream, alias) in [
        ("emb", "embeddings", "up-emb", "text-embedding-*"),
        ("rr", "scoring", "up-rr", "rerank-latest"),
    ] {
        let r = env
            .app
            .post(
                "/api/admin/models",
                &env.admin,
                &json!({"id": id, "kind": kind, "provider": "openai", "upstream_model": upstream, "aliases": [alias]}),
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    let r = env
        .post(
            "/v1/embeddings",
            &json!({"model": "text-embedding-3-small", "input": "hi"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap()["model"],
        "text-embedding-3-small"
    );
    assert_eq!(env.stub.requests_for_model("up-emb").len(), 1);
    let r = env
        .post(
            "/v1/rerank",
            &json!({"model": "rerank-latest", "query": "q", "documents": ["a", "b"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["model"], "rerank-latest");
    wait_usage(&env, "model", "emb", 1).await;
    wait_usage(&env, "model", "rr", 1).await;
}

#[tokio::test]
async fn an_anthropic_provider_and_aliases_from_the_config_file_serve_chat_at_start() {
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[providers]]
name = "claude"
type = "anthropic"
base_url = "{}"
api_key = "sk-ant-file"
anthropic_version = "2024-10-22"
beta_headers = ["beta-a"]

[[models]]
id = "sonnet"
kind = "chat"
provider = "claude"
upstream_model = "claude-up-file"
aliases = ["claude-sonnet-*"]
max_tokens_default = 321
"#,
            stub.url()
        ),
    )
    .unwrap();
    let p = path.clone();
    let app = crate::common::spawn_app_with(move |s| s.config_file = Some(p)).await;
    let admin = app.admin_token().await;
    let v: Value = app
        .get("/api/admin/providers/claude", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (v["anthropic_version"].clone(), v["beta_headers"].clone()),
        (json!("2024-10-22"), json!(["beta-a"]))
    );
    let key = app.api_key(&admin, json!({"name": "k"})).await;
    let r = app
        .post(
            "/v1/chat/completions",
            &key,
            &json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap()["model"],
        "claude-sonnet-4-5"
    );
    let sent = &stub.requests_for_model("claude-up-file")[0];
    assert_eq!(sent.body["max_tokens"], 321);
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-file"));
    assert_eq!(sent.header("anthropic-version"), Some("2024-10-22"));
}
