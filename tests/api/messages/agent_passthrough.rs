//! `/v1/agents/{agent}/messages` when the agent's model runs on an
//! `anthropic` provider: the ruled body passes through in Messages form
//! (thinking and `cache_control` kept, held tools removed, PII tokenized),
//! and the agent's answer-side rules read the upstream's Messages answer
//! and events (approvals on `tool_use` blocks, PII restored across deltas,
//! AG-UI after `message_start`), thinking blocks relayed intact.

use gatehouse_stub_upstream::Script;
use serde_json::{json, Value};

use super::*;
use crate::common::agent_chat::{agent_scene, agui_events};
use crate::common::models::{poll, sse_events};
use crate::common::scene::Scene;

const EMAIL: &str = "jane.doe@example.com";

/// An agent (instructions, contract Read/Edit/Bash, tokenize_reversible,
/// `extra` fields) whose model runs on the anthropic provider `claude` (the
/// stub's Messages route, model `s.upstream`), with a manifest classing
/// Read/Edit/Bash as read/write/execute.
async fn claude_scene(extra: Value) -> Scene {
    let mut fields = json!({"name": "Coder", "instructions": "You are careful.",
        "tool_contract": ["Read", "Edit", "Bash"],
        "pii": {"mode": "tokenize_reversible", "user_choosable": false, "terms": []}});
    for (k, v) in extra.as_object().unwrap() {
        fields[k] = v.clone();
    }
    let s = agent_scene("coder@acme", "claude-agent-up", fields, "dev@example.com").await;
    let r = s
        .app
        .post(
            "/api/admin/providers",
            &s.admin,
            &json!({"name": "claude", "type": "anthropic", "base_url": s.stub.url(),
                    "api_key": "sk-ant", "timeout_s": 5}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = s
        .app
        .patch(
            &format!("/api/admin/models/{}", s.model_id),
            &s.admin,
            &json!({"provider": "claude"}),
        )
        .await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let manifest = json!({"app_name": "Claude Code", "app_version": "2.1", "sdk": "none", "tools": [
        {"name": "Read", "description": "read", "parameters": {"type": "object"}, "class": "read"},
        {"name": "Edit", "description": "edit", "parameters": {"type": "object"}, "class": "write"},
        {"name": "Bash", "description": "run", "parameters": {"type": "object"}, "class": "execute"}]});
    let r = s.app.put(&s.path("manifest"), &s.access, &manifest).await;
    assert_eq!(r.status(), 200);
    s
}

async fn post(s: &Scene, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = s
        .app
        .client
        .post(s.app.u(&s.path("v1/messages?beta=true")))
        .header("x-api-key", &s.access)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "interleaved-thinking-2025-05-14")
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// What Claude Code sends: thinking, cache_control, a server tool, a tool
/// outside the contract, and an email in the user's text.
fn claude_code_body() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
        "system": [{"type": "text", "text": "You are Claude Code.",
                    "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {"name": "Read", "input_schema": {"type": "object"}},
            {"name": "Edit", "input_schema": {"type": "object"}},
            {"name": "Bash", "input_schema": {"type": "object"}},
            {"name": "Deploy", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
        ],
        "messages": [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run ls.", "signature": "sig-abc"},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "."}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt",
                 "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": format!("mail it to {EMAIL}")}
            ]}
        ]
    })
}

/// (api, prompt, completion, cache read, cache write) of the usage records.
async fn usage_rows(s: &Scene, n: usize) -> Vec<(Option<String>, i64, i64, i64, i64)> {
    poll(10, || async {
        let rows: Vec<(Option<String>, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT api, prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens
             FROM usage_records ORDER BY at",
        )
        .fetch_all(&s.app.app().store.pool)
        .await
        .unwrap();
        (rows.len() >= n).then_some(rows)
    })
    .await
}

async fn stored_arguments(s: &Scene) -> Vec<String> {
    sqlx::query_scalar("SELECT arguments FROM approvals ORDER BY created_at")
        .fetch_all(&s.app.app().store.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_agent_message_to_an_anthropic_model_passes_through_with_the_agents_rules() {
    let s = claude_scene(json!({"default_tool_mode": "ask"})).await;
    let answer = json!({
        "id": "msg_up_1", "type": "message", "role": "assistant", "model": "claude-agent-up",
        "content": [
            {"type": "thinking", "thinking": "Mail [EMAIL_1] after editing.", "signature": "sig-up"},
            {"type": "text", "text": "Writing to [EMAIL_1]."},
            {"type": "tool_use", "id": "toolu_r", "name": "Read", "input": {"path": "a.txt"}},
            {"type": "tool_use", "id": "toolu_e", "name": "Edit",
             "input": {"path": "a.txt", "text": "to [EMAIL_1]"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 7,
                  "cache_read_input_tokens": 100, "cache_creation_input_tokens": 30}
    });
    s.stub.script(
        &s.upstream,
        Script {
            body: Some(answer.to_string()),
            ..Script::default()
        },
    );
    let conv = (
        "X-Claude-Code-Session-Id",
        "5d1f0c9e-1111-4a2b-8c3d-000000000003",
    );
    let r = post(&s, &claude_code_body(), &[conv]).await;
    assert_eq!(r.status(), 200);
    let h = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(h("x-gatehouse-provider").as_deref(), Some("claude"));
    assert_eq!(
        h("x-service-held-tools").as_deref(),
        Some("Deploy,web_search")
    );
    assert_eq!(
        h("x-gatehouse-dropped-tools"),
        None,
        "nothing is translated"
    );
    let mut v: Value = r.json().await.unwrap();

    // Upstream: the client's body in Messages form, only the model, the
    // agent's rules' edits (instructions and token note first in system,
    // held tools removed, the email tokenized) changed.
    let seen = s.stub.requests_for_model(&s.upstream);
    assert_eq!(seen.len(), 1);
    let sent = &seen[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.query.as_deref(), Some("beta=true"));
    assert_eq!(sent.header("x-api-key"), Some("sk-ant"));
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    let mut expected = claude_code_body();
    expected["model"] = json!("claude-agent-up");
    expected["system"] = json!([
        {"type": "text", "text": "You are careful."},
        {"type": "text", "text": gatehouse::pii::TOKEN_NOTE},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]);
    expected["tools"] = json!([
        {"name": "Read", "input_schema": {"type": "object"}},
        {"name": "Edit", "input_schema": {"type": "object"}},
        {"name": "Bash", "input_schema": {"type": "object"}}]);
    expected["messages"][2]["content"][1]["text"] = json!("mail it to [EMAIL_1]");
    assert_eq!(sent.body, expected);
    assert!(!sent.raw_body.contains(EMAIL));

    // The answer: thinking as it came (tokens and signature untouched),
    // text and the tool input restored, an approval for the write tool.
    let approvals = v
        .as_object_mut()
        .unwrap()
        .remove("approvals")
        .expect("approvals");
    let mut restored = answer.clone();
    restored["model"] = json!(s.model_id);
    restored["content"][1]["text"] = json!(format!("Writing to {EMAIL}."));
    restored["content"][3]["input"]["text"] = json!(format!("to {EMAIL}"));
    assert_eq!(v, restored);
    let approvals = approvals.as_array().unwrap();
    assert_eq!(approvals.len(), 1, "Read needs none: {approvals:?}");
    assert_eq!(approvals[0]["tool_call_id"], "toolu_e");
    assert_eq!(approvals[0]["tool"], "Edit");
    let args: Value = serde_json::from_str(approvals[0]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        json!({"path": "a.txt", "text": format!("to {EMAIL}")})
    );
    // The database keeps the token, never the value.
    let stored = stored_arguments(&s).await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].contains("[EMAIL_1]") && !stored[0].contains(EMAIL));

    // A tool_result for the pending call: 409 before anything goes upstream.
    let mut follow = claude_code_body();
    follow["messages"] = json!([
        {"role": "user", "content": "edit"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "tool_use", "id": "toolu_e", "name": "Edit", "input": {"path": "a.txt"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_e", "content": "edited"}]}]);
    let (status, e) = anthropic_error(post(&s, &follow, &[conv]).await).await;
    assert_eq!(
        (status, e["code"].as_str()),
        (409, Some("approval_pending"))
    );
    assert_eq!(s.stub.requests_for_model(&s.upstream).len(), 1);
    // Denied: the result goes upstream as the fixed text, marked an error,
    // the thinking before its call as it came.
    let id = approvals[0]["id"].as_str().unwrap();
    let r = s
        .app
        .post(
            &s.path(&format!("approvals/{id}")),
            &s.access,
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    s.stub.unscript(&s.upstream);
    assert_eq!(post(&s, &follow, &[conv]).await.status(), 200);
    let sent = &s.stub.requests_for_model(&s.upstream)[1].body;
    assert_eq!(sent["messages"][1], follow["messages"][1]);
    assert_eq!(
        sent["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_e",
               "content": "The user denied this tool call.", "is_error": true})
    );

    // Usage: prompt = input + cache read + cache write; cache kept apart.
    let rows = usage_rows(&s, 1).await;
    assert_eq!(rows[0], (Some("messages".into()), 142, 7, 100, 30));
}

fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}")
}

fn text_delta(index: u64, text: &str) -> (&'static str, Value) {
    (
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index,
               "delta": {"type": "text_delta", "text": text}}),
    )
}

fn json_delta(index: u64, piece: &str) -> (&'static str, Value) {
    (
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index,
               "delta": {"type": "input_json_delta", "partial_json": piece}}),
    )
}

/// A stream with a thinking block, text with a token split across deltas,
/// and a Bash tool_use whose input has a token split across deltas.
fn upstream_stream() -> Vec<(&'static str, Value)> {
    let stop = |i: u64| {
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        )
    };
    vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {
            "id": "msg_up_2", "type": "message", "role": "assistant", "model": "claude-agent-up",
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
            "delta": {"type": "thinking_delta", "thinking": "Mail [EMAIL_1] now."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": "sig-stream"}}),
        ),
        stop(0),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        ),
        text_delta(1, "Mailing [EMA"),
        text_delta(1, "IL_1"),
        text_delta(1, "] now."),
        stop(1),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {}}}),
        ),
        json_delta(2, "{\"cmd\": \"mail [EM"),
        json_delta(2, "AIL_"),
        json_delta(2, "1]\"}"),
        stop(2),
        (
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 9}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

#[tokio::test]
async fn a_streamed_agent_message_keeps_thinking_restores_split_tokens_and_asks_approval() {
    let s = claude_scene(json!({"default_tool_mode": "ask"})).await;
    let upstream = upstream_stream();
    s.stub.script(
        &s.upstream,
        Script {
            stream_events: Some(upstream.iter().map(|(e, d)| sse(e, d.clone())).collect()),
            ..Script::default()
        },
    );
    let mut body = claude_code_body();
    body["stream"] = json!(true);
    let conv = ("X-Service-Conversation-Id", "c-stream");
    let r = post(&s, &body, &[conv, ("X-Service-Events", "ag-ui")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()
            .get("x-service-held-tools")
            .and_then(|v| v.to_str().ok()),
        Some("Deploy,web_search")
    );
    let events = sse_events(r).await;
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.event.as_deref().expect("every frame is named"))
        .collect();
    let messages: Vec<(String, Value)> = events
        .iter()
        .filter(|e| e.event.as_deref() != Some("ag-ui"))
        .map(|e| {
            (
                e.event.clone().unwrap(),
                serde_json::from_str(&e.data).unwrap(),
            )
        })
        .collect();

    // Message events: the upstream's, the thinking block as it came (its
    // token untouched), tokens restored in text and tool input.
    assert_eq!(names[0], "message_start");
    assert_eq!(messages[0].1["message"]["model"], s.model_id.as_str());
    assert_eq!(messages[0].1["message"]["id"], "msg_up_2");
    let thinking: Vec<&Value> = messages
        .iter()
        .map(|(_, d)| d)
        .filter(|d| d["index"] == 0)
        .collect();
    assert_eq!(
        thinking,
        upstream[2..6].iter().map(|(_, d)| d).collect::<Vec<_>>(),
        "the thinking block relayed intact"
    );
    assert_eq!(streamed_text(&messages), format!("Mailing {EMAIL} now."));
    let json: String = messages
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap(),
        json!({"cmd": format!("mail {EMAIL}")})
    );
    // The approvals event just before message_stop, after message_delta.
    let n = names.len();
    assert_eq!(&names[n - 2..], &["service.approvals", "message_stop"]);
    let approvals: Value = serde_json::from_str(&events[n - 2].data).unwrap();
    assert_eq!(approvals["type"], "service.approvals");
    assert_eq!(approvals["approvals"][0]["tool_call_id"], "toolu_b");
    assert_eq!(approvals["approvals"][0]["tool"], "Bash");
    let args: Value =
        serde_json::from_str(approvals["approvals"][0]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"cmd": format!("mail {EMAIL}")}));
    let stored = stored_arguments(&s).await;
    assert!(stored[0].contains("[EMAIL_1]") && !stored[0].contains(EMAIL));

    // AG-UI: right after message_start, RUN_FINISHED after message_delta;
    // the tool call named by the block's id, the text by the message's id.
    assert_eq!(names[1], "ag-ui");
    let agui = agui_events(&events);
    assert_eq!(agui[0]["type"], "RUN_STARTED");
    assert_eq!(agui[0]["threadId"], "c-stream");
    assert!(agui
        .iter()
        .any(|e| e["type"] == "CUSTOM" && e["name"] == "service.held_tools"));
    let md = names.iter().position(|e| *e == "message_delta").unwrap();
    let finished = names.iter().rposition(|e| *e == "ag-ui").unwrap();
    assert!(finished > md, "RUN_FINISHED after message_delta");
    assert_eq!(agui.last().unwrap()["type"], "RUN_FINISHED");
    let tc = agui
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .unwrap();
    assert_eq!(
        (tc["toolCallId"].as_str(), tc["toolCallName"].as_str()),
        (Some("toolu_b"), Some("Bash"))
    );
    let text = agui
        .iter()
        .find(|e| e["type"] == "TEXT_MESSAGE_START")
        .unwrap();
    assert_eq!(text["messageId"], "msg_up_2");
    for e in &agui {
        assert!(!e.to_string().contains(EMAIL), "AG-UI carries tokens: {e}");
    }

    // Usage: input and cache from message_start, output from message_delta.
    let rows = usage_rows(&s, 1).await;
    assert_eq!(rows[0], (Some("messages".into()), 47, 9, 40, 2));
}

#[tokio::test]
async fn without_rules_to_apply_a_streamed_agent_message_is_relayed_event_for_event() {
    // Auto mode, no PII protection, no AG-UI: nothing reads the answer.
    let s = claude_scene(json!({"default_tool_mode": "auto", "pii": {"mode": "off"}})).await;
    let upstream = upstream_stream();
    s.stub.script(
        &s.upstream,
        Script {
            stream_events: Some(upstream.iter().map(|(e, d)| sse(e, d.clone())).collect()),
            ..Script::default()
        },
    );
    let mut body = claude_code_body();
    body["stream"] = json!(true);
    let events = messages_events(post(&s, &body, &[]).await).await;
    let mut expected: Vec<(String, Value)> = upstream
        .iter()
        .map(|(e, d)| (e.to_string(), d.clone()))
        .collect();
    expected[0].1["message"]["model"] = json!(s.model_id);
    // The final usage carries the cost (none here: no price is set).
    for (name, data) in expected.iter_mut() {
        if name == "message_delta" {
            data["usage"]["cost_status"] = json!("unpriced");
        }
    }
    assert_eq!(events, expected);
    assert_eq!(
        s.stub.requests_for_model(&s.upstream)[0].body["messages"][2]["content"][1]["text"],
        format!("mail it to {EMAIL}")
    );
}

#[tokio::test]
async fn a_cut_agent_stream_ends_with_run_error_and_one_error_event() {
    let s = claude_scene(json!({"default_tool_mode": "ask"})).await;
    s.stub.script(
        &s.upstream,
        Script {
            content: Some("a long answer in many pieces".into()),
            chunk_size: 2,
            close_after_chunks: Some(5),
            ..Script::default()
        },
    );
    let mut body = messages_body("x", "hi");
    body["stream"] = json!(true);
    let r = post(&s, &body, &[("X-Service-Events", "ag-ui")]).await;
    assert_eq!(r.status(), 200);
    let events = sse_events(r).await;
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.event.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"error"), "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "error").count(), 1);
    assert!(!names.contains(&"message_stop"));
    let error: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(error["error"]["type"], "api_error");
    let agui = agui_events(&events);
    assert_eq!(agui.last().unwrap()["type"], "RUN_ERROR");
    assert_eq!(
        names[names.len() - 2],
        "ag-ui",
        "RUN_ERROR precedes the error"
    );
}
