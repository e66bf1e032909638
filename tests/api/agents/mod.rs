//! Agents and the routes of a signed-in agent app, by area. Here: the common
//! scene as the agent-route tests name it, what they do on it, and the bodies
//! they send.

mod admin;
mod approvals;
mod chat;
mod events;
mod holding;
mod manifest;
mod mcp;
mod tools;

use crate::common;

use std::time::Duration;

use common::models::{payloads, poll, sse_events};
use common::scene::Scene;
use common::stub::{calling, tool_call as call};
use gatehouse_stub_upstream::{Script, ScriptToolCall};
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

const DENIED_TEXT: &str = "The user denied this tool call.";

/// The common scene (`common::scene`), named after `tag`: model `chat-<tag>`
/// (upstream `Up/<tag>-7B`), agent `<tag>@acme` named `Agent <tag>`, with the
/// fields of `agent`, and alice@example.com signed in on a laptop.
async fn env(tag: &str, agent: Value) -> Scene {
    env_with(tag, agent, |_| {}).await
}

/// [`env`] on a server with these settings.
async fn env_with(
    tag: &str,
    agent: Value,
    f: impl FnOnce(&mut gatehouse::config::Settings),
) -> Scene {
    let mut fields = json!({"name": format!("Agent {tag}")});
    for (k, v) in agent.as_object().expect("agent fields").iter() {
        fields[k] = v.clone();
    }
    Scene::new()
        .settings(f)
        .with_model(&format!("chat-{tag}"), &format!("Up/{tag}-7B"))
        .with_agent(&format!("{tag}@acme"), fields)
        .signed_in()
        .await
}

/// What the agent-route tests do on the scene.
impl Scene {
    /// Creates agent other@acme on the same model and signs the user in to
    /// it on a laptop; returns that access token.
    async fn other_agent(&self) -> String {
        self.app
            .add_agent(
                &self.admin,
                "other@acme",
                &self.model_id,
                json!({"name": "Other"}),
            )
            .await;
        let (access, _) = self
            .app
            .sign_in_access(&self.login, "other@acme", "laptop")
            .await;
        access
    }

    /// A chat in this tool mode that must succeed; returns the answer and
    /// the X-Service-Held-Tools header.
    async fn chat_ok(&self, mode: &str, body: &Value) -> (Value, Option<String>) {
        let r = self.chat(&[("X-Service-Tool-Mode", mode)], body).await;
        assert_eq!(r.status(), StatusCode::OK, "agent chat");
        let held = r
            .headers()
            .get("x-service-held-tools")
            .map(|v| v.to_str().expect("ascii").to_string());
        (r.json().await.expect("json"), held)
    }

    async fn put_manifest_as(&self, access: &str, body: &Value) -> Response {
        self.app.put(&self.path("manifest"), access, body).await
    }

    async fn put_manifest(&self, body: &Value) -> Response {
        self.put_manifest_as(&self.access, body).await
    }

    async fn put_manifest_raw(&self, text: String) -> Response {
        self.app
            .client
            .put(self.app.u(&self.path("manifest")))
            .bearer_auth(&self.access)
            .header("content-type", "application/json")
            .body(text)
            .send()
            .await
            .expect("put")
    }

    async fn manifest_ok(&self, body: &Value) -> Value {
        let r = self.put_manifest(body).await;
        assert_eq!(r.status(), StatusCode::OK, "manifest accepted");
        r.json().await.expect("json")
    }

    async fn post_events_as(&self, access: &str, body: &Value) -> Response {
        self.app.post(&self.path("events"), access, body).await
    }

    async fn post_events(&self, body: &Value) -> Response {
        self.post_events_as(&self.access, body).await
    }

    async fn answer(&self, access: &str, id: &str, body: &Value) -> Response {
        self.app
            .post(&self.path(&format!("approvals/{id}")), access, body)
            .await
    }

    async fn admin_get(&self, rest: &str) -> Value {
        let r = self.app.get(&self.admin_path(rest), &self.admin).await;
        assert_eq!(r.status(), StatusCode::OK, "admin GET {rest}");
        r.json().await.expect("json")
    }

    async fn admin_tool_status(&self, name: &str) -> Option<String> {
        let tools = self.admin_get("tools").await;
        tools
            .as_array()
            .expect("tool list")
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["status"].as_str().expect("status").to_string())
    }

    async fn all_events(&self) -> Vec<Value> {
        let v = self.admin_get("events?limit=1000").await;
        v["events"].as_array().expect("events").clone()
    }
}

fn tool(name: &str, class: &str) -> Value {
    json!({
        "name": name,
        "description": format!("The {name} tool."),
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        "class": class,
    })
}

fn manifest(tools: Vec<Value>) -> Value {
    json!({"app_name": "Test App", "app_version": "1.0.0", "sdk": "gatehouse-py/0.5", "tools": tools})
}

/// read_file (read), write_file (write), run (execute).
fn std_manifest() -> Value {
    manifest(vec![
        tool("read_file", "read"),
        tool("write_file", "write"),
        tool("run", "execute"),
    ])
}

fn offered(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n, "description": "d", "parameters": {"type": "object"}}}))
            .collect(),
    )
}

fn chat_body(text: &str, tools: &[&str]) -> Value {
    let mut b = json!({"model": "whatever-the-client-says", "messages": [{"role": "user", "content": text}]});
    if !tools.is_empty() {
        b["tools"] = offered(tools);
    }
    b
}

/// Function names of a body's `tools`; None when the key is absent.
fn tool_names(body: &Value) -> Option<Vec<String>> {
    body.get("tools").map(|t| {
        t.as_array()
            .expect("tools array")
            .iter()
            .map(|t| t["function"]["name"].as_str().expect("name").to_string())
            .collect()
    })
}

fn names(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| s.to_string()).collect())
}

/// Asserts the OpenAI error shape with this status and code; returns the error object.
async fn expect_error(r: Response, status: u16, code: &str) -> Value {
    assert_eq!(r.status().as_u16(), status, "status for {code}");
    // Refusals a retry cannot cure say so: the OpenAI SDKs retry every 409
    // and 429 unless told not to.
    let final_refusal = matches!(
        code,
        "approval_pending" | "approval_already_decided" | "approval_expired" | "budget_exhausted"
    );
    assert_eq!(
        r.headers()
            .get("x-should-retry")
            .and_then(|v| v.to_str().ok()),
        final_refusal.then_some("false"),
        "x-should-retry on {code}"
    );
    let v: Value = r.json().await.expect("error body is JSON");
    let e = v["error"].clone();
    assert_eq!(e["code"], code, "{v}");
    let ty = match status {
        400 | 409 | 413 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        _ => "server_error",
    };
    // 413 is not listed by the contract; the others are.
    if status != 413 {
        assert_eq!(e["type"], ty, "{v}");
    }
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e.get("param").is_some(), "param key present: {v}");
    e
}

fn script_calls(env: &Scene, calls: Vec<ScriptToolCall>) {
    env.stub.script(&env.upstream, calling(calls));
}

/// A follow-up body answering `call_id` (a call of `tool`) with `result`.
fn tool_result_body(call_id: &str, tool: &str, result: &str) -> Value {
    json!({
        "model": "x",
        "messages": [
            {"role": "user", "content": "please do it"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": tool, "arguments": "{\"path\":\"a.txt\"}"}}
            ]},
            {"role": "tool", "tool_call_id": call_id, "content": result}
        ],
        "tools": offered(&["read_file", "write_file", "run"]),
    })
}

fn tool_message_content(sent: &Value) -> Value {
    sent["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool message")["content"]
        .clone()
}

/// A batch of `n` events with ids `<prefix>-0`, `<prefix>-1`, ...
fn events(n: usize, prefix: &str) -> Value {
    json!({"events": (0..n).map(|i| json!({
        "id": format!("{prefix}-{i}"), "type": "tool.run", "time": "2025-01-02T03:04:05Z",
        "conversation_id": "conv-1", "turn_id": "turn:1", "data": {"i": i}
    })).collect::<Vec<_>>()})
}

/// Offered tools of every class, and one the manifest does not declare.
const ALL_OFFERED: [&str; 4] = ["read_file", "write_file", "run", "undeclared"];

/// A chat whose body is this exact text.
async fn chat_raw(env: &Scene, mode: &str, text: &str) -> Response {
    env.app
        .client
        .post(env.app.u(&env.path("chat/completions")))
        .bearer_auth(&env.access)
        .header("content-type", "application/json")
        .header("X-Service-Tool-Mode", mode)
        .body(text.to_string())
        .send()
        .await
        .expect("chat")
}
