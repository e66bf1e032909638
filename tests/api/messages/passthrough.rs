//! `/v1/messages` to an `anthropic` provider: the client's body passes
//! through with only `model` replaced (what a translation to chat would
//! drop reaches the upstream), the answer and stream events come back as
//! the upstream sent them with `model` naming the client's name, usage under
//! the one convention, `anthropic-beta` per the provider's `beta_headers`,
//! the provider's errors relayed byte for byte, and fallbacks across dialects.

use gatehouse_stub_upstream::Script;
use serde_json::{json, Value};

use super::*;
use crate::common::models::{env, poll, Env};

/// The env's providers plus `claude` (anthropic, key `sk-ant`) on the stub,
/// and the model `sonnet` on it (upstream `claude-up`, alias `claude-sonnet-*`).
pub(super) async fn claude_env() -> Env {
    let env = env().await;
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "claude", "type": "anthropic", "base_url": env.stub.url(),
                    "api_key": "sk-ant", "timeout_s": 5}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "sonnet", "kind": "chat", "provider": "claude",
                    "upstream_model": "claude-up", "aliases": ["claude-sonnet-*"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env
}

/// What Claude Code sends, and what chat has no place for.
fn rich_body(model: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 32000,
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
        "metadata": {"user_id": "{\"session\":\"s1\"}"},
        "x_future_member": {"kept": [1, 2, 3]},
        "system": [{"type": "text", "text": "You are Claude Code.",
                    "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {"name": "Bash", "description": "Run a command",
             "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
        ],
        "messages": [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run ls.", "signature": "sig-abc"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt",
                 "cache_control": {"type": "ephemeral"}}
            ]}
        ]
    })
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

/// (api, model, prompt, completion, cache read, cache write) of each usage record.
async fn usage_rows(env: &Env, n: usize) -> Vec<(Option<String>, String, i64, i64, i64, i64)> {
    poll(10, || async {
        let rows: Vec<(Option<String>, String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT api, model, prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens
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
async fn a_message_to_an_anthropic_provider_passes_through_with_only_the_model_replaced() {
    let env = claude_env().await;
    let answer = json!({
        "id": "msg_up_1", "type": "message", "role": "assistant", "model": "claude-up",
        "content": [
            {"type": "thinking", "thinking": "Listing is done.", "signature": "sig-up"},
            {"type": "text", "text": "There is a.txt."}
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 7,
                  "cache_read_input_tokens": 100, "cache_creation_input_tokens": 30,
                  "server_tool_use": {"web_search_requests": 0}},
        "x_upstream_member": true
    });
    env.stub.script(
        "claude-up",
        Script {
            body: Some(answer.to_string()),
            ..Script::default()
        },
    );
    let body = rich_body("claude-sonnet-4-5");
    let r = crate::common::client()
        .post(env.app.u("/v1/messages?beta=true"))
        .header("x-api-key", &env.key)
        .header("anthropic-version", "2023-06-01")
        .header(
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14",
        )
        .header("x-app", "cli")
        .header(
            "x-claude-code-session-id",
            "5d1f0c9e-1111-4a2b-8c3d-000000000002",
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), Some("claude"));
    assert_eq!(header(&r, "x-gatehouse-attempts"), Some("1"));
    assert_eq!(
        header(&r, "x-gatehouse-dropped-tools"),
        None,
        "nothing is dropped on a pass-through"
    );
    let v: Value = r.json().await.unwrap();
    let mut expected = answer.clone();
    expected["model"] = json!("claude-sonnet-4-5");
    assert_eq!(v, expected, "the upstream's answer with only model set");

    let seen = env.stub.requests_for_model("claude-up");
    assert_eq!(seen.len(), 1);
    let sent = &seen[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.query.as_deref(), Some("beta=true"));
    let mut upstream_body = body.clone();
    upstream_body["model"] = json!("claude-up");
    assert_eq!(sent.body, upstream_body, "every other member kept");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("claude-code-20250219,interleaved-thinking-2025-05-14")
    );
    for absent in ["authorization", "x-app", "x-claude-code-session-id"] {
        assert_eq!(sent.header(absent), None, "{absent} is not sent");
    }
    assert!(sent.headers.values().all(|h| !h.contains(&env.key)));

    // Usage: prompt = input + cache read + cache creation; cache kept apart.
    let rows = usage_rows(&env, 1).await;
    assert_eq!(
        rows[0],
        (Some("messages".into()), "sonnet".into(), 142, 7, 100, 30)
    );
}

#[tokio::test]
async fn a_passed_through_body_keeps_every_byte_but_its_model() {
    let env = claude_env().await;
    // Written as a client might: spaces, a member order a tree would sort,
    // a number a tree would write as 1.5, an escape it would write as é.
    let text = r#"{ "stream" : false, "model" : "claude-sonnet-4-5", "max_tokens": 64,
        "temperature": 1.50, "messages": [{"role": "user", "content": "caf\u00e9"}],
        "metadata": {"z": 1, "a": 2} }"#;
    let r = env.post_text("/v1/messages", text).await;
    assert_eq!(r.status(), 200);
    let seen = env.stub.requests_for_model("claude-up");
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].raw_body,
        text.replace(r#""claude-sonnet-4-5""#, r#""claude-up""#),
        "the client's bytes, only the model's name replaced"
    );
}

fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}")
}

#[tokio::test]
async fn a_streamed_message_passes_through_event_by_event_with_thinking_intact() {
    let env = claude_env().await;
    let upstream: Vec<(&str, Value)> = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {
            "id": "msg_up_2", "type": "message", "role": "assistant", "model": "claude-up",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 40,
                      "cache_creation_input_tokens": 2}}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me think."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": "sig-stream"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "Done."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 9}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    env.stub.script(
        "claude-up",
        Script {
            stream_events: Some(upstream.iter().map(|(e, d)| sse(e, d.clone())).collect()),
            ..Script::default()
        },
    );
    let mut body = rich_body("claude-sonnet-4-5");
    body["stream"] = json!(true);
    let r = post_x_api_key(&env, "/v1/messages", &env.key, &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), Some("claude"));
    let events = messages_events(r).await;
    let mut expected: Vec<(String, Value)> = upstream
        .iter()
        .map(|(e, d)| (e.to_string(), d.clone()))
        .collect();
    expected[0].1["message"]["model"] = json!("claude-sonnet-4-5");
    // The final usage carries the cost (none here: no price is set).
    expected[9].1["usage"]["cost_status"] = json!("unpriced");
    assert_eq!(
        events, expected,
        "every event, in order, only the model set and the cost status added"
    );

    let sent = &env.stub.requests_for_model("claude-up")[0];
    assert_eq!(sent.body["thinking"], body["thinking"]);
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.header("accept"), Some("text/event-stream"));

    // Input and cache from message_start, output from message_delta.
    let rows = usage_rows(&env, 1).await;
    assert_eq!(
        rows[0],
        (Some("messages".into()), "sonnet".into(), 47, 9, 40, 2)
    );
}

#[tokio::test]
async fn an_error_event_from_the_anthropic_provider_is_relayed_as_it_came() {
    let env = claude_env().await;
    let start = json!({"type": "message_start", "message": {"id": "m", "type": "message",
        "role": "assistant", "model": "claude-up", "content": [],
        "usage": {"input_tokens": 3, "output_tokens": 0}}});
    let error =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    env.stub.script(
        "claude-up",
        Script {
            stream_events: Some(vec![
                sse("message_start", start),
                sse("error", error.clone()),
            ]),
            ..Script::default()
        },
    );
    let mut body = messages_body("sonnet", "hi");
    body["stream"] = json!(true);
    let events = messages_events(post_x_api_key(&env, "/v1/messages", &env.key, &body).await).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names, ["message_start", "error"]);
    assert_eq!(events[0].1["message"]["model"], "sonnet");
    assert_eq!(events[1].1, error);
}

/// An anthropic provider `name` with these `beta_headers` and a model `name`
/// on it (upstream model `{name}-up`).
async fn beta_provider(env: &Env, name: &str, betas: Value) {
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": name, "type": "anthropic", "base_url": env.stub.url(),
                    "api_key": "sk-ant", "beta_headers": betas}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.model(name, "chat", name, &format!("{name}-up")).await;
}

/// The `anthropic-beta` the upstream got when a client sent `sent` to `model`.
async fn beta_upstream(env: &Env, model: &str, sent: &str) -> Option<String> {
    let upstream = format!("{model}-up");
    let before = env.stub.requests_for_model(&upstream).len();
    let r = crate::common::client()
        .post(env.app.u("/v1/messages"))
        .header("x-api-key", &env.key)
        .header("anthropic-beta", sent)
        .json(&messages_body(model, "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = env.stub.requests_for_model(&upstream);
    assert_eq!(seen.len(), before + 1);
    seen[before].header("anthropic-beta").map(str::to_string)
}

#[tokio::test]
async fn anthropic_beta_goes_upstream_per_the_providers_beta_headers() {
    let env = env().await;
    beta_provider(&env, "fwd", json!("forward")).await;
    beta_provider(&env, "listed", json!(["b3", "b1"])).await;
    beta_provider(&env, "dropped", json!("drop")).await;
    assert_eq!(
        beta_upstream(&env, "fwd", "b1,b2,b3").await.as_deref(),
        Some("b1,b2,b3"),
        "forward"
    );
    assert_eq!(
        beta_upstream(&env, "listed", "b1, b2,b3").await.as_deref(),
        Some("b1,b3"),
        "a list keeps the allowed values in the client's order"
    );
    assert_eq!(
        beta_upstream(&env, "listed", "b2").await,
        None,
        "no header when none remain"
    );
    assert_eq!(beta_upstream(&env, "dropped", "b1").await, None, "drop");
}

#[tokio::test]
async fn an_anthropic_providers_error_is_relayed_byte_for_byte() {
    let env = claude_env().await;
    env.stub.script(
        "claude-up",
        Script {
            status: Some(400),
            error_message: Some("messages.1.content.0: thinking blocks need a signature".into()),
            ..Script::default()
        },
    );
    let r = post_x_api_key(
        &env,
        "/v1/messages",
        &env.key,
        &messages_body("sonnet", "hi"),
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_eq!(header(&r, "content-type"), Some("application/json"));
    assert_eq!(header(&r, "x-gatehouse-provider"), Some("claude"));
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "messages.1.content.0: thinking blocks need a signature"},
            "request_id": "req_stub"})
        .to_string(),
        "the upstream's own body, not the gateway's"
    );

    // A 429 keeps its retry-after.
    env.stub.script(
        "claude-up",
        Script {
            status: Some(429),
            error_message: Some("Number of request tokens has exceeded your rate limit".into()),
            ..Script::default()
        },
    );
    let r = post_x_api_key(
        &env,
        "/v1/messages",
        &env.key,
        &messages_body("sonnet", "hi"),
    )
    .await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "retry-after"), Some("1"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["request_id"], "req_stub");
}

#[tokio::test]
async fn a_529_is_relayed_as_it_came_without_a_fallback_and_falls_back_to_openai_with_one() {
    let env = claude_env().await;
    env.stub.script(
        "claude-up",
        Script {
            status: Some(529),
            error_message: Some("Overloaded".into()),
            ..Script::default()
        },
    );
    let r = post_x_api_key(
        &env,
        "/v1/messages",
        &env.key,
        &messages_body("sonnet", "hi"),
    )
    .await;
    assert_eq!(r.status(), 529);
    assert_eq!(header(&r, "retry-after"), Some("1"));
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
            "request_id": "req_stub"})
        .to_string()
    );

    // With a fallback on the openai provider: retried there, translated.
    env.model("gpt-b", "chat", "openai", "gpt-up-b").await;
    let r = env
        .app
        .patch(
            "/api/admin/models/sonnet",
            &env.admin,
            &json!({"fallbacks": ["gpt-b"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let before = env.stub.requests_for_model("claude-up").len();
    let r = post_x_api_key(&env, "/v1/messages", &env.key, &rich_body("sonnet")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), Some("openai"));
    assert_eq!(header(&r, "x-gatehouse-attempts"), Some("2"));
    assert_eq!(
        header(&r, "x-gatehouse-dropped-tools"),
        Some("web_search"),
        "the translated attempt drops the server tool"
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["type"].as_str(), v["model"].as_str()),
        (Some("message"), Some("gpt-b"))
    );
    assert_eq!(env.stub.requests_for_model("claude-up").len(), before + 1);
    let chat = &env.stub.requests_for_model("gpt-up-b")[0];
    assert_eq!(chat.path, "/v1/chat/completions");
    assert!(chat.body.get("thinking").is_none(), "translated to chat");
}

#[tokio::test]
async fn an_openai_model_falling_back_to_an_anthropic_one_passes_through_there() {
    let env = claude_env().await;
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "gpt-f", "kind": "chat", "provider": "openai",
                    "upstream_model": "gpt-up-f", "fallbacks": ["sonnet"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.stub.script("gpt-up-f", Script::status(503));
    env.stub.script("claude-up", Script::content("from Claude"));
    let body = rich_body("gpt-f");
    let r = post_x_api_key(&env, "/v1/messages", &env.key, &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), Some("claude"));
    assert_eq!(header(&r, "x-gatehouse-attempts"), Some("2"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["model"], "sonnet",
        "a fallback's answer names the fallback"
    );
    assert_eq!(v["content"][0]["text"], "from Claude");
    let sent = &env.stub.requests_for_model("claude-up")[0];
    let mut expected = body.clone();
    expected["model"] = json!("claude-up");
    assert_eq!(sent.body, expected, "the fallback got the client's body");

    // Streamed, the fallback's events name it too.
    let mut body = body;
    body["stream"] = json!(true);
    let ev = messages_events(post_x_api_key(&env, "/v1/messages", &env.key, &body).await).await;
    assert_eq!(ev[0].1["message"]["model"], "sonnet");
    assert_eq!(streamed_text(&ev), "from Claude");
    assert_eq!(ev.last().map(|(e, _)| e.as_str()), Some("message_stop"));
}

/// The stub's count: about four characters a token of the body it got.
fn stub_count(body: &Value) -> u64 {
    (body.to_string().chars().count() as u64).div_ceil(4).max(1)
}

#[tokio::test]
async fn count_tokens_to_an_anthropic_target_is_forwarded_and_its_answer_relayed() {
    let env = claude_env().await;
    let mut body = rich_body("claude-sonnet-4-5");
    body.as_object_mut().unwrap().remove("max_tokens");
    let r = crate::common::client()
        .post(env.app.u("/v1/messages/count_tokens?beta=true"))
        .header("x-api-key", &env.key)
        .header("anthropic-beta", "token-counting-2024-11-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let seen = env.stub.requests_for_model("claude-up");
    assert_eq!(seen.len(), 1);
    let sent = &seen[0];
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    assert_eq!(sent.query.as_deref(), Some("beta=true"));
    let mut expected = body.clone();
    expected["model"] = json!("claude-up");
    assert_eq!(sent.body, expected, "only the model replaced");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant"));
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("token-counting-2024-11-01")
    );
    assert_eq!(
        v,
        json!({"input_tokens": stub_count(&sent.body)}),
        "the upstream's count, not the gateway's estimate"
    );

    // Its errors come back unchanged.
    env.stub.script(
        "claude-up",
        Script {
            status: Some(404),
            error_message: Some("model: claude-up".into()),
            ..Script::default()
        },
    );
    let r = post_x_api_key(&env, "/v1/messages/count_tokens", &env.key, &body).await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.text().await.unwrap(),
        json!({"type": "error", "error": {"type": "not_found_error", "message": "model: claude-up"},
            "request_id": "req_stub"})
        .to_string()
    );
}

#[tokio::test]
async fn count_tokens_under_an_agent_on_an_anthropic_model_is_forwarded_with_its_instructions() {
    let s = crate::common::agent_chat::agent_scene(
        "coder@acme",
        "claude-agent-up",
        json!({"name": "Coder", "instructions": "You are careful."}),
        "dev@example.com",
    )
    .await;
    let r = s
        .app
        .post(
            "/api/admin/providers",
            &s.admin,
            &json!({"name": "claude", "type": "anthropic", "base_url": s.stub.url(), "api_key": "sk-ant"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = s
        .app
        .patch(
            &format!("/api/admin/models/{}", s.model_id),
            &s.admin,
            &json!({"provider": "claude", "upstream_model": "claude-agent-up"}),
        )
        .await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let body = json!({"model": "x", "messages": [{"role": "user", "content": "abcd"}]});
    let r = s
        .app
        .client
        .post(s.app.u(&s.path("messages/count_tokens")))
        .bearer_auth(&s.access)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let seen = s.stub.requests_for_model("claude-agent-up");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages/count_tokens");
    assert_eq!(seen[0].body["system"], "You are careful.");
    assert_eq!(v, json!({"input_tokens": stub_count(&seen[0].body)}));
}

#[tokio::test]
async fn a_passed_through_stream_cut_off_midway_ends_with_one_error_event() {
    let env = claude_env().await;
    env.stub.script(
        "claude-up",
        Script {
            content: Some("a long answer in many pieces".into()),
            chunk_size: 2,
            close_after_chunks: Some(4),
            ..Script::default()
        },
    );
    let mut body = messages_body("sonnet", "hi");
    body["stream"] = json!(true);
    let events = messages_events(post_x_api_key(&env, "/v1/messages", &env.key, &body).await).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names.iter().filter(|n| **n == "message_start").count(),
        1,
        "the upstream's message_start only: {names:?}"
    );
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"error"), "{names:?}");
    assert!(!names.contains(&"message_stop"));
    assert_eq!(events.last().unwrap().1["error"]["type"], "api_error");
    assert!(
        !streamed_text(&events).is_empty(),
        "what came before the cut went out"
    );
}
