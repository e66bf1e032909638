//! Agents on `/mcp` end to end: an agent access token in front of a real MCP
//! server (`servers.py`, alpha: `add` read, `write_note` write, `fail`
//! execute), under the agent's tool modes, holding and approvals.

use crate::common;

use common::mcp::*;
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

struct Scene {
    app: TestApp,
    admin: String,
    alpha: Upstream,
    access: String,
    login: String,
}

/// alpha registered; agent `bot@acme` with `agent` fields and every server
/// granted; its user granted every server and signed in on a laptop.
async fn scene(address: &str, agent: Value) -> Scene {
    let alpha = Upstream::start("alpha", &[]).ready().await;
    let app = spawn_app().await;
    let admin = app.admin_token().await;
    add_server(&app, json!({"name": "alpha", "url": alpha.url})).await;
    app.add_model("openai", "http://127.0.0.1:9/v1", "chat-m", "chat", "up")
        .await;
    app.add_agent(&admin, address, "chat-m", agent).await;
    // The agent's `mcp` grant, as the agent's row keeps it (the admin API's
    // `mcp` field on agents is mcp-admin's part).
    {
        let a = app.app();
        let mut row = (*a.agent(address).await.expect("db").expect("agent")).clone();
        row.mcp =
            gatehouse::mcp::McpGrant::from_db_or_closed(Some(r#"{"servers":["*"]}"#), address);
        a.store.upsert_agent(&row.to_row()).await.expect("stored");
        a.invalidate(gatehouse::runtime::Invalidation::Agent(address.to_string()))
            .await;
    }
    let (id, login) = app.user("ann@example.com").await;
    grant_user(&app, &id, json!({"servers": ["*"]})).await;
    let (access, _) = app.sign_in_access(&login, address, "laptop").await;
    Scene {
        app,
        admin,
        alpha,
        access,
        login,
    }
}

/// A request in this tool mode (None: the agent's default).
async fn send(c: &mut Mcp, mode: Option<&str>, method: &str, params: Value) -> reqwest::Response {
    let mut b = c.request(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
    if let Some(m) = mode {
        b = b.header("X-Service-Tool-Mode", m);
    }
    b.send().await.expect("send")
}

/// tools/list in a mode: (names, X-Service-Held-Tools).
async fn list(c: &mut Mcp, mode: Option<&str>) -> (Vec<String>, Option<String>) {
    let r = send(c, mode, "tools/list", json!({})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let held = r
        .headers()
        .get("x-service-held-tools")
        .map(|v| v.to_str().expect("ascii").to_string());
    let v: Value = r.json().await.expect("json");
    let names = v["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect();
    (names, held)
}

async fn call(c: &mut Mcp, mode: Option<&str>, name: &str, args: Value) -> Value {
    let r = send(
        c,
        mode,
        "tools/call",
        json!({"name": name, "arguments": args}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.expect("json")
}

fn assert_unknown(v: &Value, name: &str) {
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["message"], format!("Unknown tool: {name}"));
}

fn upstream_calls(s: &Scene) -> usize {
    s.alpha
        .requests()
        .iter()
        .filter(|r| r["method"] == "tools/call")
        .count()
}

#[tokio::test]
async fn each_tool_mode_lists_and_admits_mcp_tools_by_class() {
    let s = scene("modes@acme", json!({"default_tool_mode": "read_only"})).await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.access);
    c.initialize().await;
    let (names, held) = list(&mut c, None).await;
    assert!(names.contains(&"alpha__add".to_string()), "{names:?}");
    assert!(
        !names.contains(&"alpha__write_note".to_string()),
        "{names:?}"
    );
    assert_eq!(held, None);
    assert!(list(&mut c, Some("off")).await.0.is_empty());
    let (auto, _) = list(&mut c, Some("auto")).await;
    assert!(
        auto.contains(&"alpha__write_note".to_string())
            && auto.contains(&"alpha__fail".to_string())
    );
    assert_unknown(
        &call(&mut c, None, "alpha__write_note", json!({"text": "x"})).await,
        "alpha__write_note",
    );
    assert_unknown(
        &call(&mut c, Some("off"), "alpha__add", json!({"a": 1, "b": 2})).await,
        "alpha__add",
    );
    assert_eq!(
        upstream_calls(&s),
        0,
        "nothing refused reached the upstream"
    );
    let v = call(&mut c, None, "alpha__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(v["result"]["content"][0]["text"], "3");
    let v = call(
        &mut c,
        Some("auto"),
        "alpha__write_note",
        json!({"text": "x"}),
    )
    .await;
    assert!(v.get("result").is_some(), "{v}");
    assert_eq!(upstream_calls(&s), 2);
    // A mode that is not one: 400 invalid_header.
    let r = send(&mut c, Some("sometimes"), "tools/list", json!({})).await;
    let (status, code, data) = refusal(r).await;
    assert_eq!(
        (status, code, data.as_str()),
        (StatusCode::BAD_REQUEST, -32600, "invalid_header")
    );
}

#[tokio::test]
async fn a_held_mcp_tool_is_unknown_and_named_until_an_admin_accepts_it() {
    let s = scene(
        "held@acme",
        json!({"default_tool_mode": "auto", "tool_contract": ["alpha__add"]}),
    )
    .await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.access);
    c.initialize().await;
    let (names, held) = list(&mut c, None).await;
    assert_eq!(names, ["alpha__add"]);
    let held = held.expect("X-Service-Held-Tools");
    assert!(held.split(',').any(|n| n == "alpha__write_note"), "{held}");
    assert_unknown(
        &call(&mut c, None, "alpha__write_note", json!({"text": "x"})).await,
        "alpha__write_note",
    );
    assert_eq!(upstream_calls(&s), 0);
    let tools: Value = s
        .app
        .get("/api/admin/agents/held@acme/tools", &s.admin)
        .await
        .json()
        .await
        .expect("json");
    let w = tools
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "alpha__write_note")
        .expect("listed for admins")
        .clone();
    assert_eq!(
        (w["source"].as_str(), w["server"].as_str()),
        (Some("mcp"), Some("alpha"))
    );
    assert_eq!(
        (w["class"].as_str(), w["status"].as_str()),
        (Some("write"), Some("held"))
    );
    assert_eq!(w["description"], "Writes a note.");
    let r = s
        .app
        .post(
            "/api/admin/agents/held@acme/tools/alpha__write_note/accept",
            &s.admin,
            &json!({}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (names, held) = list(&mut c, None).await;
    assert!(names.contains(&"alpha__write_note".to_string()));
    assert!(!held.unwrap_or_default().contains("alpha__write_note"));
    let v = call(&mut c, None, "alpha__write_note", json!({"text": "x"})).await;
    assert!(v.get("result").is_some(), "{v}");
    assert_eq!(upstream_calls(&s), 1);
}

fn pending_id(v: &Value) -> String {
    let r = &v["result"];
    assert_eq!(r["isError"], true, "{v}");
    let id = r["_meta"]["gatehouse/approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();
    assert_eq!(
        r["content"][0]["text"],
        format!("Approval required: approval {id} is pending. Call the tool again with the same arguments once it is approved.")
    );
    id
}

#[tokio::test]
async fn ask_mode_calls_wait_for_an_approval_and_go_upstream_once_it_is_given() {
    let s = scene("ask@acme", json!({"default_tool_mode": "ask"})).await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.access);
    c.initialize().await;
    let args = json!({"text": "hello"});
    let id = pending_id(&call(&mut c, None, "alpha__write_note", args.clone()).await);
    assert_eq!(
        pending_id(&call(&mut c, None, "alpha__write_note", args.clone()).await),
        id
    );
    assert_eq!(upstream_calls(&s), 0);
    let listed: Value = s
        .app
        .get("/api/admin/agents/ask@acme/approvals", &s.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(listed.as_array().expect("list").len(), 1);
    assert_eq!(listed[0]["source"], "mcp");
    assert_eq!(listed[0]["server"], "alpha");
    assert_eq!(listed[0]["tool"], "alpha__write_note");
    assert_eq!(listed[0]["tool_call_id"], Value::Null);
    assert_eq!(listed[0]["arguments"], r#"{"text":"hello"}"#);
    // A read tool needs none.
    let v = call(&mut c, None, "alpha__add", json!({"a": 2, "b": 2})).await;
    assert_eq!(v["result"]["content"][0]["text"], "4");

    let r = s
        .app
        .post(
            &format!("/api/admin/agents/ask@acme/approvals/{id}"),
            &s.admin,
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v = call(&mut c, None, "alpha__write_note", args.clone()).await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert_eq!(upstream_calls(&s), 2, "the approved call went upstream");
    // Used: the same call asks again, and nothing more goes upstream.
    let next = pending_id(&call(&mut c, None, "alpha__write_note", args.clone()).await);
    assert_ne!(next, id);
    assert_eq!(upstream_calls(&s), 2);

    // The user denies the new one: the denied answer once, then a new approval.
    let r = s
        .app
        .post(
            &format!("/v1/agents/ask@acme/approvals/{next}"),
            &s.access,
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v = call(&mut c, None, "alpha__write_note", args.clone()).await;
    assert_eq!(
        v["result"],
        json!({"isError": true, "content": [{"type": "text", "text": "The user denied this tool call."}]})
    );
    let third = pending_id(&call(&mut c, None, "alpha__write_note", args).await);
    assert_ne!(third, next);
    assert_eq!(upstream_calls(&s), 2);
    let _ = &s.login;
}
