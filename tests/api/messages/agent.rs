//! `/v1/agents/{agent}/messages`: the agent turn read in Messages terms:
//! the agent's model and instructions, tool modes, approvals on tool_use
//! blocks, PII, AG-UI events after message_start, count_tokens.

use gatehouse_stub_upstream::Script;
use serde_json::{json, Value};

use super::*;
use crate::common::agent_chat::{agent_scene, agui_events};
use crate::common::scene::Scene;
use crate::common::stub::{calling, tool_call};

const DENIED: &str = "The user denied this tool call.";

async fn scene(extra: Value) -> Scene {
    let mut fields = json!({"name": "Coder", "instructions": "You are careful."});
    for (k, v) in extra.as_object().unwrap() {
        fields[k] = v.clone();
    }
    let s = agent_scene("coder@acme", "up-coder", fields, "dev@example.com").await;
    let manifest = json!({"app_name": "Claude Code", "app_version": "2.1", "sdk": "none", "tools": [
        {"name": "Read", "description": "read", "parameters": {"type": "object"}, "class": "read"},
        {"name": "Edit", "description": "edit", "parameters": {"type": "object"}, "class": "write"},
        {"name": "Bash", "description": "run", "parameters": {"type": "object"}, "class": "execute"}]});
    let r = s.app.put(&s.path("manifest"), &s.access, &manifest).await;
    assert_eq!(r.status(), 200);
    s
}

fn tools() -> Value {
    json!([{"name": "Read", "input_schema": {"type": "object"}},
           {"name": "Edit", "input_schema": {"type": "object"}},
           {"name": "Bash", "input_schema": {"type": "object"}}])
}

async fn post(s: &Scene, path: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = s
        .app
        .client
        .post(s.app.u(path))
        .header("x-api-key", &s.access)
        .header("anthropic-version", "2023-06-01")
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn the_agents_model_and_instructions_apply_and_both_path_forms_work() {
    let s = scene(json!({})).await;
    let mut body = messages_body("claude-sonnet-4-5", "hi");
    body["system"] = json!([{"type": "text", "text": "From the client."}]);
    for path in [s.path("messages"), s.path("v1/messages?beta=true")] {
        let r = post(&s, &path, &body, &[]).await;
        assert_eq!(r.status(), 200, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v["model"],
            s.model_id.as_str(),
            "the answer names the agent's model"
        );
        assert_eq!(v["content"][0]["text"], "echo: hi");
    }
    let sent = s.last_sent();
    assert_eq!(sent["model"], "up-coder");
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "You are careful.\n\nFrom the client."})
    );
    // Another agent's path: permission_error in Anthropic's shape.
    let (status, e) =
        anthropic_error(post(&s, "/v1/agents/other@acme/messages", &body, &[]).await).await;
    assert_eq!(
        (status, e["type"].as_str()),
        (403, Some("permission_error"))
    );
    assert_eq!(e["code"], "agent_mismatch");
}

#[tokio::test]
async fn mode_off_removes_tools_and_read_only_keeps_read_tools() {
    let s = scene(json!({})).await;
    let mut body = messages_body("x", "go");
    body["tools"] = tools();
    body["tool_choice"] = json!({"type": "tool", "name": "Bash"});
    let r = post(
        &s,
        &s.path("messages"),
        &body,
        &[("X-Service-Tool-Mode", "off")],
    )
    .await;
    assert_eq!(r.status(), 200);
    let sent = s.last_sent();
    assert!(
        sent.get("tools").is_none() && sent.get("tool_choice").is_none(),
        "{sent}"
    );
    let r = post(
        &s,
        &s.path("messages"),
        &body,
        &[("X-Service-Tool-Mode", "read_only")],
    )
    .await;
    assert_eq!(r.status(), 200);
    let sent = s.last_sent();
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["Read"]);
    assert!(
        sent.get("tool_choice").is_none(),
        "the choice named a removed tool"
    );
    let (status, e) = anthropic_error(
        post(
            &s,
            &s.path("messages"),
            &body,
            &[("X-Service-Tool-Mode", "sometimes")],
        )
        .await,
    )
    .await;
    assert_eq!((status, e["code"].as_str()), (400, Some("invalid_header")));
}

#[tokio::test]
async fn the_tool_list_is_checked_at_128_and_by_the_name_rule() {
    let s = scene(json!({})).await;
    let many = |n: usize| {
        (0..n)
            .map(|i| json!({"name": format!("t{i}")}))
            .collect::<Vec<_>>()
    };
    let mut body = messages_body("x", "go");
    body["tools"] = json!(many(128));
    assert_eq!(
        post(&s, &s.path("messages"), &body, &[]).await.status(),
        200
    );
    body["tools"] = json!(many(129));
    let (status, e) = anthropic_error(post(&s, &s.path("messages"), &body, &[]).await).await;
    assert_eq!(
        (status, e["code"].as_str(), e["param"].as_str()),
        (400, Some("too_many_tools"), Some("tools"))
    );
    body["tools"] = json!([{"name": "x".repeat(65)}]);
    let (status, e) = anthropic_error(post(&s, &s.path("messages"), &body, &[]).await).await;
    assert_eq!(
        (status, e["code"].as_str(), e["param"].as_str()),
        (400, Some("validation_error"), Some("tools"))
    );
}

#[tokio::test]
async fn ask_mode_asks_approvals_for_tool_use_blocks_and_holds_their_results() {
    let s = scene(json!({"default_tool_mode": "ask"})).await;
    s.stub.script(
        &s.upstream,
        calling(vec![
            tool_call("call_r", "Read", r#"{"path":"a"}"#),
            tool_call("call_e", "Edit", r#"{"path":"a","text":"b"}"#),
        ]),
    );
    let mut body = messages_body("x", "edit it");
    body["tools"] = tools();
    let conv = [("X-Claude-Code-Session-Id", "sess-1")];
    let r = post(&s, &s.path("messages"), &body, &conv).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"].as_array().unwrap().len(), 2);
    let approvals = v["approvals"].as_array().expect("approvals");
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0]["tool_call_id"], "call_e");
    assert_eq!(approvals[0]["tool"], "Edit");

    // A result for the pending call: 409 approval_pending, in Anthropic's shape.
    s.stub.unscript(&s.upstream);
    let mut follow = body.clone();
    follow["messages"] = json!([
        {"role": "user", "content": "edit it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_e", "name": "Edit", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_e", "content": "edited"}]}]);
    let (status, e) = anthropic_error(post(&s, &s.path("messages"), &follow, &conv).await).await;
    assert_eq!(
        (status, e["type"].as_str(), e["code"].as_str()),
        (409, Some("invalid_request_error"), Some("approval_pending"))
    );

    // Denied: the result goes upstream as the fixed text, marked an error.
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
    let r = post(&s, &s.path("messages"), &follow, &conv).await;
    assert_eq!(r.status(), 200);
    let sent = s.last_sent();
    let tool_msg = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool_msg["content"], format!("[error] {DENIED}"));
}

#[tokio::test]
async fn a_streamed_ask_answer_carries_the_approvals_event_before_message_stop_and_agui_after_message_start(
) {
    let s = scene(json!({"default_tool_mode": "ask"})).await;
    s.stub.script(
        &s.upstream,
        calling(vec![tool_call("call_b", "Bash", r#"{"cmd":"ls"}"#)]),
    );
    let mut body = messages_body("x", "run it");
    body["tools"] = tools();
    body["stream"] = json!(true);
    let r = post(
        &s,
        &s.path("messages"),
        &body,
        &[("X-Service-Events", "ag-ui")],
    )
    .await;
    assert_eq!(r.status(), 200);
    let events = crate::common::models::sse_events(r).await;
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.event.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(names[1], "ag-ui");
    let n = names.len();
    assert_eq!(&names[n - 2..], &["service.approvals", "message_stop"]);
    let md = names.iter().position(|e| *e == "message_delta").unwrap();
    let agui = agui_events(&events);
    assert_eq!(agui[0]["type"], "RUN_STARTED");
    assert_eq!(agui.last().unwrap()["type"], "RUN_FINISHED");
    let finished = names.iter().rposition(|e| *e == "ag-ui").unwrap();
    assert!(finished > md, "RUN_FINISHED after message_delta");
    let tc = agui
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .unwrap();
    assert_eq!(tc["toolCallId"], "call_b");
    let data: Value = serde_json::from_str(&events[n - 2].data).unwrap();
    assert_eq!(data["type"], "service.approvals");
    assert_eq!(data["approvals"][0]["tool_call_id"], "call_b");
    assert!(events.iter().all(|e| e.data != "[DONE]"));
}

#[tokio::test]
async fn pii_is_tokenized_upstream_and_restored_in_plain_and_streamed_text() {
    let s = scene(
        json!({"pii": {"mode": "tokenize_reversible", "user_choosable": false, "terms": []}}),
    )
    .await;
    let email = "jane.doe@example.com";
    s.stub
        .script(&s.upstream, Script::content("Writing to [EMAIL_1] now."));
    let mut body = messages_body("x", &format!("mail {email}"));
    body["messages"][0]["content"] = json!([{"type": "text", "text": format!("mail {email}")}]);
    let conv = [("X-Service-Conversation-Id", "c-pii")];
    let v: Value = post(&s, &s.path("messages"), &body, &conv)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["text"], format!("Writing to {email} now."));
    let raw = &s.stub.requests_for_model(&s.upstream)[0].raw_body;
    assert!(!raw.contains(email), "{raw}");
    assert!(raw.contains("[EMAIL_1]"));
    // Streamed: text_deltas restored across pieces.
    body["stream"] = json!(true);
    s.stub.script(
        &s.upstream,
        Script {
            content: Some("To [EMAIL_1].".into()),
            chunk_size: 3,
            ..Script::default()
        },
    );
    let ev = messages_events(post(&s, &s.path("messages"), &body, &conv).await).await;
    assert_eq!(streamed_text(&ev), format!("To {email}."));
}

#[tokio::test]
async fn count_tokens_under_the_agent_counts_its_instructions_and_records_nothing() {
    let s = scene(json!({})).await;
    let body = json!({"model": "x", "messages": [{"role": "user", "content": "abcd"}]});
    for path in [
        s.path("messages/count_tokens"),
        s.path("v1/messages/count_tokens"),
    ] {
        let r = post(&s, &path, &body, &[]).await;
        assert_eq!(r.status(), 200);
        // "You are careful." (16) + "abcd" (4) = 20 characters: 5 tokens.
        assert_eq!(r.json::<Value>().await.unwrap(), json!({"input_tokens": 5}));
    }
    assert!(s.stub.requests_for_model(&s.upstream).is_empty());
}

#[tokio::test]
async fn pii_tokens_in_tool_use_input_are_restored_plain_and_streamed() {
    let s = scene(json!({"default_tool_mode": "auto",
        "pii": {"mode": "tokenize_reversible", "user_choosable": false, "terms": []}}))
    .await;
    let email = "jane.doe@example.com";
    s.stub.script(
        &s.upstream,
        gatehouse_stub_upstream::Script {
            tool_calls: vec![tool_call("call_m", "Bash", r#"{"cmd":"mail [EMAIL_1]"}"#)],
            chunk_size: 5,
            ..Script::default()
        },
    );
    let mut body = messages_body("x", &format!("mail {email}"));
    body["tools"] = tools();
    let conv = [("X-Service-Conversation-Id", "c-pii-tool")];
    let v: Value = post(&s, &s.path("messages"), &body, &conv)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["content"][0]["input"],
        json!({"cmd": format!("mail {email}")})
    );
    body["stream"] = json!(true);
    let ev = messages_events(post(&s, &s.path("messages"), &body, &conv).await).await;
    let json: String = ev
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap(),
        json!({"cmd": format!("mail {email}")})
    );
    for r in s.stub.requests_for_model(&s.upstream) {
        assert!(!r.raw_body.contains(email));
    }
}
