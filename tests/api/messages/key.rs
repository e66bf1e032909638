//! `/v1/messages` and `/v1/messages/count_tokens` with an API key.

use serde_json::{json, Value};

use super::*;
use crate::common::models::env;
use crate::common::stub::{calling, tool_call};

#[tokio::test]
async fn a_plain_message_is_translated_to_chat_and_answered_in_messages_shape() {
    let env = env().await;
    env.model("claude-sonnet-4-5", "chat", "openai", "up-msg")
        .await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 50},
        "metadata": {"user_id": "u-7"},
        "stop_sequences": ["STOP"],
        "messages": [{"role": "user", "content": "hello there"}]});
    let r = post_x_api_key(&env, "/v1/messages?beta=true", &env.key, &body).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("request-id").is_some());
    assert_eq!(r.headers()["x-gatehouse-provider"], "openai");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["model"], "claude-sonnet-4-5");
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "echo: hello there"}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["stop_sequence"], Value::Null);
    assert_eq!(v["usage"]["input_tokens"], 10);

    let seen = env.stub.requests_for_model("up-msg");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(
        seen[0].body,
        json!({"model": "up-msg", "max_tokens": 100, "stop": ["STOP"], "user": "u-7",
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "hello there"}]}),
        "Anthropic-only members are not forwarded"
    );
    assert!(seen[0].headers.keys().all(|h| !h.starts_with("anthropic")));
    assert!(!seen[0].raw_body.contains("gtk_"));
}

#[tokio::test]
async fn a_bearer_key_works_too_and_a_missing_one_is_an_authentication_error() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-b").await;
    let r = env.post("/v1/messages", &messages_body("m", "hi")).await;
    assert_eq!(r.status(), 200);
    let r = crate::common::client()
        .post(env.app.u("/v1/messages"))
        .json(&messages_body("m", "hi"))
        .send()
        .await
        .unwrap();
    let (s, e) = anthropic_error(r).await;
    assert_eq!((s, e["type"].as_str()), (401, Some("authentication_error")));
    assert_eq!(e["code"], "invalid_api_key");
    let r = post_x_api_key(&env, "/v1/messages", "gtk_nope", &messages_body("m", "hi")).await;
    assert_eq!(anthropic_error(r).await.0, 401);
}

#[tokio::test]
async fn a_stream_is_anthropic_events_from_message_start_to_message_stop() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-s").await;
    let mut body = messages_body("m", "stream me please now");
    body["stream"] = json!(true);
    let r = post_x_api_key(&env, "/v1/messages", &env.key, &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let ev = messages_events(r).await;
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    assert_eq!(names[names.len() - 2], "message_delta");
    assert!(ev.iter().all(|(n, d)| d["type"] == n.as_str()));
    let start = &ev[0].1["message"];
    assert_eq!(start["model"], "m");
    assert!(start["usage"]["input_tokens"].as_i64().unwrap() >= 1);
    assert_eq!(start["usage"]["output_tokens"], 0);
    assert_eq!(streamed_text(&ev), "echo: stream me please now");
    let deltas = ev
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .count();
    assert!(deltas >= 3, "one text_delta per upstream piece: {deltas}");
    let md = &ev[ev.len() - 2].1;
    assert_eq!(md["delta"]["stop_reason"], "end_turn");
    assert_eq!(md["usage"]["input_tokens"], 10);
    let seen = &env.stub.requests_for_model("up-s")[0];
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn tool_use_round_trips_with_long_names_mapped_back() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-t").await;
    let long = format!("mcp__server__{}", "x".repeat(60));
    let short = gatehouse::wire::messages::to_chat::short_name(&long);
    env.stub.script(
        "up-t",
        calling(vec![tool_call("call.1", &short, r#"{"path":"/etc"}"#)]),
    );
    let body = json!({"model": "m", "max_tokens": 50,
        "tools": [{"name": long, "description": "d", "input_schema": {"type": "object"}},
                  {"type": "web_search_20250305", "name": "web_search"}],
        "messages": [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_0", "name": long, "input": {"a": 1}}]},
            {"role": "user", "content": [{"type": "text", "text": "and?"},
                {"type": "tool_result", "tool_use_id": "toolu_0", "content": "done"}]}]});
    let r = env.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-gatehouse-dropped-tools"], "web_search");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(
        v["content"],
        json!([{"type": "tool_use", "id": "call_1", "name": long, "input": {"path": "/etc"}}])
    );
    let sent = &env.stub.requests_for_model("up-t")[0].body;
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
    assert_eq!(sent["tools"][0]["function"]["name"], short.as_str());
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], short.as_str());
    assert_eq!(
        (msgs[2]["role"].as_str(), msgs[3]["role"].as_str()),
        (Some("tool"), Some("user")),
        "the tool result goes before the user's text"
    );

    // The same answer streamed: tool_use block, input_json_delta pieces.
    let mut body = body;
    body["stream"] = json!(true);
    let ev = messages_events(env.post("/v1/messages", &body).await).await;
    let start = ev
        .iter()
        .find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(
        start.1["content_block"],
        json!({"type": "tool_use", "id": "call_1", "name": long, "input": {}})
    );
    let json: String = ev
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(json, r#"{"path":"/etc"}"#);
    let md = ev.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(md.1["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn bad_inputs_are_invalid_request_errors_naming_the_member() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-v").await;
    env.model("emb", "embeddings", "openai", "up-e").await;
    for (body, param) in [
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        (
            json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "messages": []}),
            "messages",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": "x"}]}),
            "messages",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "system": 5, "messages": [{"role": "user", "content": "x"}]}),
            "system",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "stream": "yes", "messages": [{"role": "user", "content": "x"}]}),
            "stream",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "tools": [{}], "messages": [{"role": "user", "content": "x"}]}),
            "tools",
        ),
        (
            json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}),
            "model",
        ),
    ] {
        let (s, e) = anthropic_error(env.post("/v1/messages", &body).await).await;
        assert_eq!(
            (s, e["type"].as_str()),
            (400, Some("invalid_request_error")),
            "{body}"
        );
        assert_eq!(
            (e["code"].as_str(), e["param"].as_str()),
            (Some("validation_error"), Some(param)),
            "{body}"
        );
    }
    // At the least: max_tokens 1 passes.
    let r = env
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let (s, e) = anthropic_error(env.post("/v1/messages", &messages_body("nope", "x")).await).await;
    assert_eq!(
        (s, e["type"].as_str(), e["code"].as_str()),
        (404, Some("not_found_error"), Some("model_not_found"))
    );
    let (s, e) = anthropic_error(env.post("/v1/messages", &messages_body("emb", "x")).await).await;
    assert_eq!((s, e["code"].as_str()), (400, Some("model_kind_mismatch")));
    let r = crate::common::client()
        .post(env.app.u("/v1/messages"))
        .header("x-api-key", &env.key)
        .header("content-type", "application/json")
        .body("[1]")
        .send()
        .await
        .unwrap();
    let (s, e) = anthropic_error(r).await;
    assert_eq!(
        (s, e["type"].as_str()),
        (400, Some("invalid_request_error"))
    );
    assert!(
        env.stub.requests_for_model("up-v").len() == 1,
        "only the good one went upstream"
    );
}

#[tokio::test]
async fn an_upstream_failure_mid_stream_ends_with_an_error_event_and_no_done() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-cut").await;
    env.stub.script(
        "up-cut",
        gatehouse_stub_upstream::Script {
            content: Some("a long answer that will be cut".into()),
            close_after_chunks: Some(2),
            ..Default::default()
        },
    );
    let mut body = messages_body("m", "x");
    body["stream"] = json!(true);
    let r = env.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200);
    let raw = r.text().await.unwrap();
    assert!(!raw.contains("[DONE]"), "{raw}");
    assert!(raw.starts_with("event: message_start"), "{raw}");
    let last = raw.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: error\ndata: "), "{last}");
    let data: Value = serde_json::from_str(last.split_once("data: ").unwrap().1).unwrap();
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "api_error");
}

#[tokio::test]
async fn an_upstream_error_status_keeps_its_status_in_anthropic_shape() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-429").await;
    env.stub
        .script("up-429", gatehouse_stub_upstream::Script::status(400));
    let (s, e) = anthropic_error(env.post("/v1/messages", &messages_body("m", "x")).await).await;
    assert_eq!(
        (s, e["type"].as_str(), e["code"].as_str()),
        (400, Some("invalid_request_error"), Some("upstream_error"))
    );
}

#[tokio::test]
async fn count_tokens_estimates_and_never_answers_zero() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-c").await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "abcdefgh"}],
        "system": "abcd", "tools": [{"name": "Read", "input_schema": {}}]});
    let r = post_x_api_key(&env, "/v1/messages/count_tokens?beta=true", &env.key, &body).await;
    assert_eq!(r.status(), 200);
    // 8 + 4 + 4 + 2 = 18 characters: 5 tokens.
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"input_tokens": 5}));
    let empty = json!({"model": "m", "messages": [{"role": "user", "content": ""}]});
    let r = env.post("/v1/messages/count_tokens", &empty).await;
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"input_tokens": 1}));
    assert!(
        env.stub.requests_for_model("up-c").is_empty(),
        "nothing goes upstream"
    );
    let (s, e) = anthropic_error(
        env.post(
            "/v1/messages/count_tokens",
            &json!({"model": "m", "messages": []}),
        )
        .await,
    )
    .await;
    assert_eq!((s, e["param"].as_str()), (400, Some("messages")));
}

/// One usage record: (api, model, prompt, completion, cache read, conversation).
type UsageRow = (Option<String>, String, i64, i64, i64, Option<String>);

/// The usage records of the gateway, oldest first.
async fn usage_records(env: &crate::common::models::Env, n: usize) -> Vec<UsageRow> {
    crate::common::models::poll(10, || async {
        let rows: Vec<UsageRow> = sqlx::query_as(
            "SELECT api, model, prompt_tokens, completion_tokens, cache_read_tokens, conversation_id
             FROM usage_records ORDER BY at",
        )
        .fetch_all(&env.app.app().store.pool)
        .await
        .unwrap();
        (rows.len() >= n).then_some(rows)
    })
    .await
}

#[tokio::test]
async fn usage_records_name_the_api_keep_cache_apart_and_take_claude_codes_session() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-u").await;
    env.stub.script(
        "up-u",
        gatehouse_stub_upstream::Script {
            body: Some(
                json!({"id": "c1", "object": "chat.completion", "model": "up-u",
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                    "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35,
                              "prompt_tokens_details": {"cached_tokens": 20}}})
                .to_string(),
            ),
            ..Default::default()
        },
    );
    let r = crate::common::client()
        .post(env.app.u("/v1/messages"))
        .header("x-api-key", &env.key)
        .header(
            "x-claude-code-session-id",
            "5d1f0c9e-1111-4a2b-8c3d-000000000001",
        )
        .json(&messages_body("m", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 20})
    );
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(env.post("/v1/chat/completions", &chat).await.status(), 200);
    let rows = usage_records(&env, 2).await;
    assert_eq!(
        rows[0],
        (
            Some("messages".into()),
            "m".into(),
            30,
            5,
            20,
            Some("5d1f0c9e-1111-4a2b-8c3d-000000000001".into())
        ),
        "prompt includes the cached tokens, kept apart too"
    );
    assert_eq!(rows[1].0.as_deref(), Some("chat"));
}

#[tokio::test]
async fn claude_codes_session_is_the_conversation_at_128_characters_and_ignored_at_129() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-s").await;
    let at_limit = "s".repeat(128);
    for session in [at_limit.clone(), "s".repeat(129)] {
        let r = crate::common::client()
            .post(env.app.u("/v1/messages"))
            .header("x-api-key", &env.key)
            .header("x-claude-code-session-id", &session)
            .json(&messages_body("m", "hi"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "a session id is never refused, only ignored"
        );
    }
    let rows = usage_records(&env, 2).await;
    let conversations: Vec<Option<String>> = rows.into_iter().map(|r| r.5).collect();
    assert_eq!(conversations, vec![Some(at_limit), None]);
}

#[tokio::test]
async fn metrics_count_the_members_dropped_in_translation() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-d").await;
    let mut body = messages_body("m", "x");
    // Members no other test drops (the counter is the process's).
    body["context_management"] = json!({});
    body["container"] = json!("c");
    body["mcp_servers"] = json!([]);
    assert_eq!(env.post("/v1/messages", &body).await.status(), 200);
    let text = crate::common::client()
        .get(env.app.u("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for field in ["context_management", "container", "mcp_servers"] {
        let line = format!("gatehouse_translation_dropped_total{{field=\"{field}\"}} ");
        let n = text
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|n| n.parse::<u64>().ok());
        assert!(n.is_some_and(|n| n >= 1), "{field}: {text}");
    }
}

/// A Messages request to an `anthropic` provider by an alias (passed
/// through, see `passthrough.rs`) is answered naming the alias the client
/// sent, plain and streamed.
#[tokio::test]
async fn a_message_to_an_anthropic_provider_by_an_alias_is_answered_in_messages_shape() {
    let env = env().await;
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "claude", "type": "anthropic", "base_url": env.stub.url(), "api_key": "sk-ant", "timeout_s": 5}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "sonnet", "kind": "chat", "provider": "claude", "upstream_model": "claude-up", "aliases": ["claude-sonnet-*"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.stub.script(
        "claude-up",
        gatehouse_stub_upstream::Script {
            content: Some("Hi from Claude".into()),
            usage: Some((10, 5)),
            cache_tokens: Some((100, 20)),
            ..Default::default()
        },
    );
    let body = messages_body("claude-sonnet-4-5", "hi");
    let r = post_x_api_key(&env, "/v1/messages", &env.key, &body).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["model"], "claude-sonnet-4-5");
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Hi from Claude"}])
    );
    let seen = &env.stub.requests_for_model("claude-up")[0];
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.header("x-api-key"), Some("sk-ant"));
    let mut body = body;
    body["stream"] = json!(true);
    let ev = messages_events(post_x_api_key(&env, "/v1/messages", &env.key, &body).await).await;
    assert_eq!(streamed_text(&ev), "Hi from Claude");
    assert_eq!(ev[0].1["message"]["model"], "claude-sonnet-4-5");
}

async fn get_models(
    env: &crate::common::models::Env,
    query: &str,
    anthropic: bool,
) -> reqwest::Response {
    let mut req = crate::common::client().get(env.app.u(&format!("/v1/models{query}")));
    req = if anthropic {
        req.header("x-api-key", &env.key)
    } else {
        req.bearer_auth(&env.key)
    };
    req.send().await.unwrap()
}

#[tokio::test]
async fn models_asked_anthropics_way_are_chat_models_paged_by_id() {
    let env = env().await;
    for id in ["c-model", "a-model", "b-model"] {
        env.model(id, "chat", "openai", "up").await;
    }
    env.model("emb", "embeddings", "openai", "up-e").await;
    let r = get_models(&env, "", true).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("request-id").is_some());
    let v: Value = r.json().await.unwrap();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec!["a-model", "b-model", "c-model"],
        "chat models only, by id"
    );
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["data"][0]["display_name"], "a-model");
    assert!(v["data"][0]["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        (
            v["has_more"].as_bool(),
            v["first_id"].as_str(),
            v["last_id"].as_str()
        ),
        (Some(false), Some("a-model"), Some("c-model"))
    );
    let v: Value = get_models(&env, "?limit=1&after_id=a-model", true)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"][0]["id"], "b-model");
    assert_eq!(v["has_more"], true);
    let v: Value = get_models(&env, "?limit=1000&after_id=c-model", true)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v,
        json!({"data": [], "has_more": false, "first_id": null, "last_id": null})
    );
    for bad in ["0", "1001"] {
        let (s, e) = anthropic_error(get_models(&env, &format!("?limit={bad}"), true).await).await;
        assert_eq!(
            (s, e["code"].as_str(), e["param"].as_str()),
            (400, Some("validation_error"), Some("limit"))
        );
    }
    // With anthropic-version and Bearer: Anthropic's shape too; Bearer alone: OpenAI's.
    let r = crate::common::client()
        .get(env.app.u("/v1/models"))
        .bearer_auth(&env.key)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert!(r.json::<Value>().await.unwrap().get("has_more").is_some());
    let v: Value = get_models(&env, "", false).await.json().await.unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn count_tokens_has_its_own_per_minute_limit_and_counts_against_no_other() {
    let env = env().await;
    env.model("m", "chat", "openai", "up-l").await;
    let key = env
        .app
        .api_key(
            &env.admin,
            json!({"name": "limited", "limits": {"count_tokens_per_minute": 2, "requests_per_minute": 1}}),
        )
        .await;
    let count = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    for _ in 0..2 {
        let r = post_x_api_key(&env, "/v1/messages/count_tokens", &key, &count).await;
        assert_eq!(r.status(), 200, "at the limit");
    }
    let r = post_x_api_key(&env, "/v1/messages/count_tokens", &key, &count).await;
    assert!(r.headers().get("retry-after").is_some());
    let (s, e) = anthropic_error(r).await;
    assert_eq!(
        (s, e["type"].as_str(), e["code"].as_str()),
        (429, Some("rate_limit_error"), Some("rate_limited"))
    );
    assert_eq!(e["param"], "count_tokens_per_minute");
    // The request limit is untouched by the counts: one message passes, the next is refused.
    let r = post_x_api_key(&env, "/v1/messages", &key, &messages_body("m", "x")).await;
    assert_eq!(r.status(), 200);
    let (s, e) =
        anthropic_error(post_x_api_key(&env, "/v1/messages", &key, &messages_body("m", "x")).await)
            .await;
    assert_eq!((s, e["param"].as_str()), (429, Some("requests_per_minute")));
}

/// A Messages body of exactly `len` bytes (padding in the user's text).
fn body_of_len(len: usize) -> String {
    let head = r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    format!("{head}{}{tail}", "a".repeat(len - head.len() - tail.len()))
}

#[tokio::test]
async fn the_body_limit_takes_a_body_at_it_and_refuses_one_byte_more_in_anthropic_shape() {
    let env = crate::common::models::env_with(|s| s.max_body_bytes = 4096).await;
    env.model("m", "chat", "openai", "up-big").await;
    let send = |text: String| {
        crate::common::client()
            .post(env.app.u("/v1/messages"))
            .header("x-api-key", &env.key)
            .header("content-type", "application/json")
            .body(text)
            .send()
    };
    let r = send(body_of_len(4096)).await.unwrap();
    assert_eq!(r.status(), 200, "at the limit");
    let (s, e) = anthropic_error(send(body_of_len(4097)).await.unwrap()).await;
    assert_eq!(
        (s, e["type"].as_str(), e["code"].as_str()),
        (413, Some("request_too_large"), Some("payload_too_large"))
    );
}

#[tokio::test]
async fn a_failing_model_falls_back_and_the_messages_answer_names_the_fallback() {
    let env = env().await;
    env.model("fb", "chat", "openai", "up-fb").await;
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "main", "kind": "chat", "provider": "openai", "upstream_model": "up-main", "fallbacks": ["fb"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.stub
        .script("up-main", gatehouse_stub_upstream::Script::status(503));
    let r = env
        .post("/v1/messages", &messages_body("main", "hello"))
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["x-gatehouse-attempts"]
            .to_str()
            .unwrap()
            .parse::<u32>()
            .unwrap()
            >= 2
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["model"], "fb");
    assert_eq!(v["content"][0]["text"], "echo: hello");
    let mut body = messages_body("main", "hello");
    body["stream"] = json!(true);
    let ev = messages_events(env.post("/v1/messages", &body).await).await;
    assert_eq!(ev[0].1["message"]["model"], "fb");
    assert_eq!(streamed_text(&ev), "echo: hello");
}
