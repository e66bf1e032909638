//! Agent routes end to end (issue 5): the manifest and its limits, tool modes
//! and classes, holding by tool contract, approvals and their enforcement,
//! events, the X-Service-* headers, and what reaches the upstream.

use crate::common;

use std::time::Duration;

use common::models::{payloads, poll, sse_events};
use common::stub::{calling, tool_call as call};
use common::*;
use gatehouse_stub_upstream::{Script, ScriptToolCall, Stub};
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

const DENIED_TEXT: &str = "The user denied this tool call.";

/// A gateway, a stub upstream, a chat model on it, one agent and one user
/// signed in to it on one device.
struct Env {
    app: TestApp,
    stub: Stub,
    admin: String,
    address: String,
    model_id: String,
    upstream: String,
    login: String,
    access: String,
    device_id: String,
}

async fn env(tag: &str, agent: Value) -> Env {
    env_with(tag, agent, |_| {}).await
}

/// `tag` names the model, upstream model and agent; `agent` adds agent fields.
async fn env_with(
    tag: &str,
    agent: Value,
    f: impl FnOnce(&mut gatehouse::config::Settings),
) -> Env {
    let app = spawn_app_with(f).await;
    let stub = Stub::start().await;
    let model_id = format!("chat-{tag}");
    let upstream = format!("Up/{tag}-7B");
    app.add_model(
        "openai",
        &stub.openai_base_url(),
        &model_id,
        "chat",
        &upstream,
    )
    .await;
    let admin = app.admin_token().await;
    let address = format!("{tag}@acme");
    let mut fields = json!({"name": format!("Agent {tag}")});
    for (k, v) in agent.as_object().expect("agent fields").iter() {
        fields[k] = v.clone();
    }
    app.add_agent(&admin, &address, &model_id, fields).await;
    let (_, login) = app.user("alice@example.com").await;
    let (access, device_id) = app.sign_in_access(&login, &address, "laptop").await;
    Env {
        app,
        stub,
        admin,
        address,
        model_id,
        upstream,
        login,
        access,
        device_id,
    }
}

impl Env {
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

    fn path(&self, rest: &str) -> String {
        format!("/v1/agents/{}/{rest}", self.address)
    }

    fn admin_path(&self, rest: &str) -> String {
        format!("/api/admin/agents/{}/{rest}", self.address)
    }

    async fn chat_as(&self, access: &str, headers: &[(&str, &str)], body: &Value) -> Response {
        let mut req = self
            .app
            .client
            .post(self.app.u(&self.path("chat/completions")))
            .bearer_auth(access)
            .json(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.expect("chat")
    }

    async fn chat(&self, headers: &[(&str, &str)], body: &Value) -> Response {
        self.chat_as(&self.access, headers, body).await
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

    /// Bodies of the chat requests that reached the stub, in order.
    fn sent(&self) -> Vec<Value> {
        self.stub
            .requests_for_model(&self.upstream)
            .into_iter()
            .map(|r| r.body)
            .collect()
    }

    fn last_sent(&self) -> Value {
        self.sent().pop().expect("a request reached the upstream")
    }

    /// The bytes of the last request the upstream got, as text.
    fn last_sent_text(&self) -> String {
        self.stub
            .requests_for_model(&self.upstream)
            .pop()
            .expect("a request reached the upstream")
            .raw_body
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

fn script_calls(env: &Env, calls: Vec<ScriptToolCall>) {
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

// ---------------------------------------------------------------- manifest

#[tokio::test]
async fn manifest_seen_before_ignores_key_order_and_white_space_and_spans_devices() {
    let env = env("mseen", json!({})).await;
    let first = env.manifest_ok(&std_manifest()).await;
    assert_eq!(first["seen_before"], false);
    let hash = first["manifest_hash"].as_str().expect("hash").to_string();
    let hex = hash.strip_prefix("sha256:").expect("sha256: prefix");
    assert_eq!(hex.len(), 64, "{hash}");
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");

    let again = env.manifest_ok(&std_manifest()).await;
    assert_eq!(again, json!({"seen_before": true, "manifest_hash": hash}));

    // Same content, keys reordered and spaced out.
    let tools: Vec<String> = ["read_file:read", "write_file:write", "run:execute"]
        .iter()
        .map(|nc| {
            let (n, c) = nc.split_once(':').unwrap();
            format!(
                r#"{{ "class" : "{c}",
                     "parameters": {{"required": ["path"], "properties": {{"path": {{"type": "string"}}}}, "type": "object"}},
                     "description": "The {n} tool.", "name": "{n}" }}"#
            )
        })
        .collect();
    let raw = format!(
        "{{\n  \"tools\": [ {} ],\n  \"sdk\": \"gatehouse-py/0.5\",\n\t\"app_version\" : \"1.0.0\",  \"app_name\":\"Test App\"\n}}",
        tools.join(" ,\n ")
    );
    let r = env.put_manifest_raw(raw).await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({"seen_before": true, "manifest_hash": hash}));

    // Another device of the same agent (and user) sends it: seen before.
    let (access2, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    let r = env.put_manifest_as(&access2, &std_manifest()).await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({"seen_before": true, "manifest_hash": hash}));

    // A different manifest is new and hashes differently.
    let mut other = std_manifest();
    other["app_version"] = json!("1.0.1");
    let v = env.manifest_ok(&other).await;
    assert_eq!(v["seen_before"], false);
    assert_ne!(v["manifest_hash"], json!(hash));
}

#[tokio::test]
async fn manifest_seen_before_is_per_agent() {
    let env = env("mper", json!({})).await;
    let other_access = env.other_agent().await;
    assert_eq!(env.manifest_ok(&std_manifest()).await["seen_before"], false);
    let r = env
        .app
        .put(
            "/v1/agents/other@acme/manifest",
            &other_access,
            &std_manifest(),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["seen_before"], false, "another agent never saw it");
}

/// A manifest whose JSON text is exactly `len` bytes, padded with an unknown key.
fn manifest_text_of_len(len: usize) -> String {
    let mut m = std_manifest();
    m["x_padding"] = json!("");
    let base = serde_json::to_string(&m).unwrap().len();
    m["x_padding"] = json!("p".repeat(len - base));
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(text.len(), len);
    text
}

#[tokio::test]
async fn manifest_body_of_512_kb_is_accepted_and_one_byte_more_is_manifest_too_large() {
    let env = env("mbody", json!({})).await;
    let r = env.put_manifest_raw(manifest_text_of_len(524_288)).await;
    assert_eq!(r.status(), StatusCode::OK, "exactly 524,288 bytes");
    let r = env.put_manifest_raw(manifest_text_of_len(524_289)).await;
    expect_error(r, 413, "manifest_too_large").await;
}

#[tokio::test]
async fn manifest_may_list_200_tools_but_not_201() {
    let env = env("mtools", json!({})).await;
    let tools = |n: usize| (0..n).map(|i| tool(&format!("t{i}"), "read")).collect();
    env.manifest_ok(&manifest(tools(200))).await;
    let r = env.put_manifest(&manifest(tools(201))).await;
    let e = expect_error(r, 400, "too_many_tools").await;
    assert_eq!(e["param"], "tools");
}

#[tokio::test]
async fn manifest_may_carry_100_context_entries_but_not_101() {
    let env = env("mctx", json!({})).await;
    let with = |n: usize| {
        let mut m = std_manifest();
        m["context"] = Value::Array(
            (0..n)
                .map(|i| json!({"name": format!("c{i}"), "value": format!("v{i}")}))
                .collect(),
        );
        m
    };
    env.manifest_ok(&with(100)).await;
    let r = env.put_manifest(&with(101)).await;
    expect_error(r, 400, "too_many_context_entries").await;
}

#[tokio::test]
async fn tool_description_limit_is_4000_characters_not_bytes() {
    let env = env("mdesc", json!({})).await;
    let with = |n: usize| {
        let mut t = tool("long_desc", "read");
        t["description"] = json!("é".repeat(n)); // two bytes each
        manifest(vec![tool("read_file", "read"), t])
    };
    env.manifest_ok(&with(4000)).await;
    let r = env.put_manifest(&with(4001)).await;
    let e = expect_error(r, 400, "manifest_invalid").await;
    assert!(
        e["message"].as_str().unwrap().contains("long_desc"),
        "the message names the tool: {e}"
    );
}

#[tokio::test]
async fn tool_parameters_limit_is_32768_bytes_of_compact_json() {
    let env = env("mparams", json!({})).await;
    let params_of_len = |len: usize| {
        let mut p = json!({"type": "object", "description": ""});
        let base = serde_json::to_vec(&p).unwrap().len();
        p["description"] = json!("d".repeat(len - base));
        assert_eq!(serde_json::to_vec(&p).unwrap().len(), len);
        p
    };
    let with = |len: usize| {
        let mut t = tool("big_params", "write");
        t["parameters"] = params_of_len(len);
        manifest(vec![t])
    };
    // Pretty-printed text is longer, but only the compact size counts.
    let pretty = serde_json::to_string_pretty(&with(32_768)).unwrap();
    let r = env.put_manifest_raw(pretty).await;
    assert_eq!(r.status(), StatusCode::OK, "exactly 32,768 bytes compact");
    let r = env.put_manifest(&with(32_769)).await;
    let e = expect_error(r, 400, "manifest_invalid").await;
    assert!(
        e["message"].as_str().unwrap().contains("big_params"),
        "the message names the tool: {e}"
    );
}

#[tokio::test]
async fn malformed_manifests_are_manifest_invalid() {
    let env = env("mbad", json!({})).await;
    let mut bad_class = std_manifest();
    bad_class["tools"][1]["class"] = json!("dangerous");
    let mut no_class = std_manifest();
    no_class["tools"][1]
        .as_object_mut()
        .unwrap()
        .remove("class");
    let mut schema_not_object = std_manifest();
    schema_not_object["tools"][0]["parameters"] = json!("a string");
    let mut schema_bad_type = std_manifest();
    schema_bad_type["tools"][0]["parameters"] = json!({"type": 5});
    let mut schema_bad_properties = std_manifest();
    schema_bad_properties["tools"][0]["parameters"] = json!({"type": "object", "properties": []});
    let duplicate = manifest(vec![tool("read_file", "read"), tool("read_file", "write")]);
    let bad_name = manifest(vec![tool("read file", "read")]);
    let long_name = manifest(vec![tool(&"t".repeat(65), "read")]);
    let mut no_app_name = std_manifest();
    no_app_name.as_object_mut().unwrap().remove("app_name");
    let mut tools_not_list = std_manifest();
    tools_not_list["tools"] = json!({"read_file": "read"});
    for (what, m) in [
        ("bad class", bad_class),
        ("no class", no_class),
        ("parameters not an object", schema_not_object),
        ("schema type of wrong type", schema_bad_type),
        ("schema properties of wrong type", schema_bad_properties),
        ("duplicate names", duplicate),
        ("bad tool name", bad_name),
        ("tool name of 65", long_name),
        ("no app_name", no_app_name),
        ("tools not a list", tools_not_list),
    ] {
        let r = env.put_manifest(&m).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{what}");
        expect_error(r, 400, "manifest_invalid").await;
    }
    let r = env.put_manifest_raw("{not json".into()).await;
    expect_error(r, 400, "manifest_invalid").await;
    // A 64-character name is fine.
    env.manifest_ok(&manifest(vec![tool(&"t".repeat(64), "read")]))
        .await;
}

#[tokio::test]
async fn a_refused_manifest_does_not_replace_the_devices_latest() {
    let env = env("mkeep", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let mut bad = std_manifest();
    bad["tools"][1]["class"] = json!("read");
    bad["tools"][2]["class"] = json!("nope");
    env.put_manifest(&bad).await;
    env.chat_ok("read_only", &chat_body("hi", &["read_file", "write_file"]))
        .await;
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}

// -------------------------------------------------------------- tool modes

const ALL_OFFERED: [&str; 4] = ["read_file", "write_file", "run", "undeclared"];

#[tokio::test]
async fn tool_mode_off_sends_no_tools_upstream() {
    let env = env("modeoff", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let mut body = chat_body("hi", &ALL_OFFERED);
    body["tool_choice"] = json!("auto");
    body["parallel_tool_calls"] = json!(true);
    let (v, held) = env.chat_ok("off", &body).await;
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hi");
    assert_eq!(held, None);
    let sent = env.last_sent();
    assert!(sent.get("tools").is_none(), "{sent}");
    assert!(sent.get("tool_choice").is_none(), "{sent}");
}

/// An app sends the same `tools` list every turn; from the second turn on it
/// is a list the gateway has read before, which it finds in the body without
/// reading it again (`agents::tools`' unit tests check that way against a
/// whole read). What reaches the upstream is the turn's own body all the same.
#[tokio::test]
async fn a_tools_list_sent_again_reaches_the_upstream_like_the_first_time() {
    let env = env("again", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let list = ["read_file", "write_file", "run"];
    let turns = [
        chat_body("first turn", &list),
        {
            let mut b = chat_body("second turn", &list);
            b["tool_choice"] = json!({"type": "function", "function": {"name": "run"}});
            b["messages"][0]["content"] = json!("second \"tools\": turn");
            b
        },
        chat_body("third turn", &["read_file", "write_file", "runs"]),
        chat_body("fourth turn", &list),
    ];
    for (i, body) in turns.iter().enumerate() {
        env.chat_ok("read_only", body).await;
        let sent = env.last_sent();
        assert_eq!(sent["messages"], body["messages"], "turn {i}");
        assert_eq!(sent["model"], json!(env.upstream), "turn {i}");
        assert_eq!(sent["tools"], json!([offered(&list)[0]]), "turn {i}");
        assert!(sent.get("tool_choice").is_none(), "turn {i}: {sent}");
        env.chat_ok("auto", body).await;
        let sent = env.last_sent();
        assert_eq!(sent["tools"], body["tools"], "turn {i}");
        assert_eq!(sent.get("tool_choice"), body.get("tool_choice"), "turn {i}");
    }
}

#[tokio::test]
async fn tool_mode_read_only_sends_only_read_tools() {
    let env = env("modero", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    env.chat_ok("read_only", &chat_body("hi", &ALL_OFFERED))
        .await;
    let sent = env.last_sent();
    assert_eq!(tool_names(&sent), names(&["read_file"]));
    // The kept tool goes up unchanged.
    assert_eq!(sent["tools"][0], offered(&["read_file"])[0]);
}

/// A chat whose body is this exact text.
async fn chat_raw(env: &Env, mode: &str, text: &str) -> Response {
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

#[tokio::test]
async fn kept_tools_reach_the_upstream_exactly_as_the_client_wrote_them() {
    let env = env("toolsraw", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    // Escapes, a float's spelling and key order a JSON tree would not keep.
    let read = r#"{"type":"function","function":{"name":"read_file","description":"Reads \u00e9 \"quoted\"","parameters":{"type":"object","properties":{"n":{"type":"number","default":1.50,"maximum":1e3}},"required":["n"]}}}"#;
    let write =
        r#"{"type":"function","function":{"name":"write_file","parameters":{"type":"object"}}}"#;
    let text = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"tools":[ {read} , {write} ]}}"#
    );
    let r = chat_raw(&env, "read_only", &text).await;
    assert_eq!(r.status(), StatusCode::OK);
    let raw = env.last_sent_text();
    assert!(raw.contains(&format!(r#""tools":[{read}]"#)), "{raw}");
    assert!(!raw.contains("write_file"), "{raw}");
}

#[tokio::test]
async fn a_tool_that_names_itself_twice_or_is_no_function_tool_is_refused_and_reaches_no_upstream()
{
    let env = env("toolstwice", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let before = env.sent().len();
    // Kept tools are not parsed by the gateway: a schema nested past what a
    // parsed body allowed is refused all the same.
    let deep = format!(
        r#"[{{"type":"function","function":{{"name":"read_file","parameters":{}1{}}}}}]"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    for tools in [
        r#"[{"type":"function","function":{"name":"read_file","name":"run"}}]"#,
        r#"[{"type":"function","function":{"name":"read_file"},"function":{"name":"run"}}]"#,
        r#"[["function",{"name":"read_file"}]]"#,
        r#"[{"type":"custom","custom":{"name":"run"},"function":{"name":"read_file"}}]"#,
        &deep,
    ] {
        let text = format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":{tools}}}"#);
        let r = chat_raw(&env, "read_only", &text).await;
        let e = expect_error(r, 400, "validation_error").await;
        assert_eq!(e["param"], "tools", "{tools}");
    }
    assert_eq!(env.sent().len(), before, "nothing reached the upstream");
}

#[tokio::test]
async fn tool_modes_ask_and_auto_send_every_tool_undeclared_ones_included() {
    let env = env("modeall", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    for mode in ["ask", "auto"] {
        env.chat_ok(mode, &chat_body("hi", &ALL_OFFERED)).await;
        assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED), "{mode}");
    }
}

#[tokio::test]
async fn without_the_header_the_agents_default_tool_mode_applies() {
    let env = env("moded", json!({"default_tool_mode": "read_only"})).await;
    env.manifest_ok(&std_manifest()).await;
    let r = env.chat(&[], &chat_body("hi", &ALL_OFFERED)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
    // The header overrides the default.
    env.chat_ok("auto", &chat_body("hi", &ALL_OFFERED)).await;
    assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED));
}

#[tokio::test]
async fn tool_choice_naming_a_removed_tool_is_dropped_and_one_naming_a_kept_tool_stays() {
    let env = env("modechoice", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let choose = |name: &str| {
        let mut b = chat_body("hi", &ALL_OFFERED);
        b["tool_choice"] = json!({"type": "function", "function": {"name": name}});
        b
    };
    env.chat_ok("read_only", &choose("write_file")).await;
    let sent = env.last_sent();
    assert!(sent.get("tool_choice").is_none(), "{sent}");
    assert_eq!(tool_names(&sent), names(&["read_file"]));

    env.chat_ok("read_only", &choose("read_file")).await;
    assert_eq!(
        env.last_sent()["tool_choice"],
        json!({"type": "function", "function": {"name": "read_file"}})
    );
}

#[tokio::test]
async fn classes_come_from_the_devices_latest_manifest() {
    let env = env("modeclass", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    // A second device declares write_file as read; a third declares nothing.
    let (phone, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    let (tablet, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "tablet")
        .await;
    let r = env
        .put_manifest_as(
            &phone,
            &manifest(vec![tool("read_file", "read"), tool("write_file", "read")]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let ro = [("X-Service-Tool-Mode", "read_only")];
    let body = chat_body("hi", &ALL_OFFERED);

    assert_eq!(env.chat_as(&phone, &ro, &body).await.status(), 200);
    assert_eq!(
        tool_names(&env.last_sent()),
        names(&["read_file", "write_file"])
    );
    assert_eq!(env.chat(&ro, &body).await.status(), 200);
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
    // No manifest: every tool counts as execute.
    assert_eq!(env.chat_as(&tablet, &ro, &body).await.status(), 200);
    assert_eq!(tool_names(&env.last_sent()), None);

    // A newer manifest of the first device replaces its classes.
    env.manifest_ok(&manifest(vec![tool("run", "read")])).await;
    assert_eq!(env.chat(&ro, &body).await.status(), 200);
    assert_eq!(tool_names(&env.last_sent()), names(&["run"]));
}

// ----------------------------------------------------------------- holding

#[tokio::test]
async fn a_decided_tool_is_held_again_when_the_device_changes_it() {
    let env = env("rebind", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &["write_file", "run"]);
    for (name, verb) in [("write_file", "accept"), ("run", "reject")] {
        let r = env
            .app
            .post(
                &env.admin_path(&format!("tools/{name}/{verb}")),
                &env.admin,
                &json!({}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    // The same manifest again (keys reordered): decisions stand.
    env.manifest_ok(&std_manifest()).await;
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("accepted")
    );
    assert_eq!(
        env.admin_tool_status("run").await.as_deref(),
        Some("rejected")
    );
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("run"));

    // A new description, a new class, new parameters: held again each time.
    let mut described = tool("write_file", "write");
    described["description"] = json!("Now also deletes files.");
    env.manifest_ok(&manifest(vec![
        tool("read_file", "read"),
        described,
        tool("run", "execute"),
    ]))
    .await;
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("held")
    );
    let tools = env.admin_get("tools").await;
    let wf = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "write_file")
        .unwrap();
    assert_eq!(wf["description"], "Now also deletes files.");
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run"));

    let r = env
        .app
        .post(
            &env.admin_path("tools/write_file/accept"),
            &env.admin,
            &json!({}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut reparam = tool("write_file", "write");
    reparam["description"] = json!("Now also deletes files.");
    reparam["parameters"] = json!({"type": "object", "properties": {"glob": {"type": "string"}}});
    env.manifest_ok(&manifest(vec![
        tool("read_file", "read"),
        reparam,
        tool("run", "write"),
    ]))
    .await;
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("held")
    );
    assert_eq!(env.admin_tool_status("run").await.as_deref(), Some("held"));
    // A contract tool stays trusted by name whatever the device says.
    env.manifest_ok(&manifest(vec![tool("read_file", "execute")]))
        .await;
    let (_, held) = env.chat_ok("auto", &chat_body("hi", &["read_file"])).await;
    assert_eq!(held, None);
}

#[tokio::test]
async fn tools_outside_the_contract_are_held_until_an_admin_accepts_them() {
    let env = env("hold", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &["write_file", "read_file", "undeclared", "run"]);
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,undeclared,run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));

    assert_eq!(
        env.admin_tool_status("read_file").await.as_deref(),
        Some("contract")
    );
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("held")
    );
    assert_eq!(env.admin_tool_status("run").await.as_deref(), Some("held"));
    assert_eq!(
        env.admin_tool_status("undeclared").await.as_deref(),
        Some("held"),
        "a tool offered in chat but missing from the manifest shows too"
    );
    let tools = env.admin_get("tools").await;
    let wf = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "write_file")
        .unwrap();
    assert_eq!(wf["class"], "write");
    assert_eq!(wf["description"], "The write_file tool.");
    assert!(gatehouse::time::parse_rfc3339(wf["first_seen_at"].as_str().unwrap()).is_some());

    let r = env
        .app
        .post(
            &env.admin_path("tools/write_file/accept"),
            &env.admin,
            &json!({}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["name"], "write_file");
    assert_eq!(v["status"], "accepted");

    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("undeclared,run"));
    assert_eq!(
        tool_names(&env.last_sent()),
        names(&["write_file", "read_file"])
    );
}

#[tokio::test]
async fn a_rejected_tool_stays_held_and_named() {
    let env = env("holdrej", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &["read_file", "write_file", "run"]);
    let r = env
        .app
        .post(&env.admin_path("tools/run/reject"), &env.admin, &json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "rejected");
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
    assert_eq!(
        env.admin_tool_status("run").await.as_deref(),
        Some("rejected")
    );

    // Accepted, then rejected again: held again.
    let accept = env.admin_path("tools/write_file/accept");
    let reject = env.admin_path("tools/write_file/reject");
    assert_eq!(
        env.app.post(&accept, &env.admin, &json!({})).await.status(),
        200
    );
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("run"));
    assert_eq!(
        env.app.post(&reject, &env.admin, &json!({})).await.status(),
        200
    );
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}

#[tokio::test]
async fn an_empty_contract_holds_nothing() {
    let env = env("holdnone", json!({"tool_contract": []})).await;
    env.manifest_ok(&std_manifest()).await;
    let (_, held) = env.chat_ok("auto", &chat_body("hi", &ALL_OFFERED)).await;
    assert_eq!(held, None);
    assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED));
}

#[tokio::test]
async fn allow_local_mcp_holds_nothing() {
    let env = env("holdmcp", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &ALL_OFFERED);
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run,undeclared"));

    let r = env
        .app
        .patch(
            &format!("/api/admin/agents/{}", env.address),
            &env.admin,
            &json!({"allow_local_mcp": true}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held, None);
    assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED));
}

#[tokio::test]
async fn held_tools_still_obey_the_tool_mode_once_accepted() {
    let env = env("holdmode", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let accept = env.admin_path("tools/write_file/accept");
    assert_eq!(
        env.app.post(&accept, &env.admin, &json!({})).await.status(),
        200
    );
    let (_, held) = env
        .chat_ok(
            "read_only",
            &chat_body("hi", &["read_file", "write_file", "run"]),
        )
        .await;
    assert_eq!(held.as_deref(), Some("run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}

// --------------------------------------------------------------- approvals

/// An env in ask mode whose upstream answers with calls of write_file,
/// read_file and run.
async fn approvals_env(tag: &str, f: impl FnOnce(&mut gatehouse::config::Settings)) -> Env {
    let env = env_with(tag, json!({"default_tool_mode": "ask"}), f).await;
    env.manifest_ok(&std_manifest()).await;
    script_calls(
        &env,
        vec![
            call("call_w", "write_file", r#"{"path":"a.txt","text":"hi"}"#),
            call("call_r", "read_file", r#"{"path":"b.txt"}"#),
            call("call_x", "run", r#"{"cmd":"ls"}"#),
        ],
    );
    env
}

/// Asks once and returns the approvals of the answer by tool name.
async fn ask(env: &Env) -> Vec<Value> {
    let (v, _) = env
        .chat_ok(
            "ask",
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    env.stub.unscript(&env.upstream);
    v["approvals"].as_array().expect("approvals").clone()
}

#[tokio::test]
async fn ask_mode_asks_approval_for_write_and_execute_calls_but_not_read_calls() {
    let env = approvals_env("apr", |_| {}).await;
    let before = gatehouse::store::now_ms();
    let (v, _) = env
        .chat_ok(
            "ask",
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    // The answer itself is the upstream's, unchanged.
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3);
    let approvals = v["approvals"].as_array().expect("approvals array");
    assert_eq!(approvals.len(), 2, "{approvals:?}");
    let w = &approvals[0];
    assert_eq!(w["tool_call_id"], "call_w");
    assert_eq!(w["tool"], "write_file");
    assert_eq!(w["arguments"], r#"{"path":"a.txt","text":"hi"}"#);
    assert_eq!(w["status"], "pending");
    assert!(w["id"].as_str().is_some_and(|s| !s.is_empty()));
    let exp = gatehouse::time::parse_rfc3339(w["expires_at"].as_str().unwrap()).unwrap();
    assert!(
        exp >= before + 599_000 && exp <= gatehouse::store::now_ms() + 601_000,
        "expires in the approval TTL (600 s)"
    );
    assert_eq!(approvals[1]["tool_call_id"], "call_x");
    assert_eq!(approvals[1]["tool"], "run");
    assert_ne!(approvals[0]["id"], approvals[1]["id"]);

    let listed = env.admin_get("approvals?status=pending").await;
    let mut ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![
        w["id"].as_str().unwrap(),
        approvals[1]["id"].as_str().unwrap(),
    ];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(env.admin_get("approvals?status=approved").await, json!([]));
}

#[tokio::test]
async fn a_call_of_an_undeclared_tool_needs_approval_in_ask_mode() {
    let env = env("aprund", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    script_calls(&env, vec![call("call_u", "undeclared", "{}")]);
    let (v, _) = env.chat_ok("ask", &chat_body("go", &["undeclared"])).await;
    assert_eq!(v["approvals"][0]["tool"], "undeclared");
}

#[tokio::test]
async fn ask_mode_finds_calls_whatever_the_upstream_escapes_and_passes_call_free_answers_as_sent() {
    let env = env("aprraw", json!({"default_tool_mode": "ask"})).await;
    env.manifest_ok(&std_manifest()).await;
    // A server that escapes its keys still gets its calls approved.
    let escaped = r#"{"id":"c1","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool\u005fcalls":[{"id":"call_e","type":"function","function":{"name":"write_file","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    env.stub.script(
        &env.upstream,
        Script {
            body: Some(escaped.into()),
            ..Script::default()
        },
    );
    let (v, _) = env
        .chat_ok("ask", &chat_body("do it", &["write_file"]))
        .await;
    let approvals = v["approvals"].as_array().expect("approvals");
    assert_eq!(approvals.len(), 1, "{v}");
    assert_eq!(approvals[0]["tool_call_id"], "call_e");

    // An answer without calls goes back as the upstream wrote it, `model` aside.
    let plain = r#"{"id":"c2","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"1.50 done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"x_extra":1.50}"#;
    env.stub.script(
        &env.upstream,
        Script {
            body: Some(plain.into()),
            ..Script::default()
        },
    );
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &chat_body("hi", &["write_file"]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.expect("body");
    assert_eq!(
        text,
        plain.replace(r#""model":"up""#, &format!(r#""model":"{}""#, env.model_id))
    );
}

#[tokio::test]
async fn ask_mode_answer_without_write_calls_carries_no_approvals() {
    let env = env("aprread", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    script_calls(&env, vec![call("call_r", "read_file", "{}")]);
    let (v, _) = env.chat_ok("ask", &chat_body("go", &["read_file"])).await;
    assert!(v.get("approvals").is_none(), "{v}");
    assert_eq!(env.admin_get("approvals").await, json!([]));
}

#[tokio::test]
async fn auto_mode_asks_no_approvals() {
    let env = approvals_env("aprauto", |_| {}).await;
    let (v, _) = env
        .chat_ok(
            "auto",
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    assert!(v.get("approvals").is_none(), "{v}");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(env.admin_get("approvals").await, json!([]));
}

#[tokio::test]
async fn streamed_ask_answer_ends_with_an_approvals_chunk_before_done() {
    let env = approvals_env("aprstream", |_| {}).await;
    let mut body = chat_body("do it", &["read_file", "write_file", "run"]);
    body["stream"] = json!(true);
    let r = env.chat(&[("X-Service-Tool-Mode", "ask")], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    let extra = &chunks[chunks.len() - 2];
    assert_eq!(extra["object"], "chat.completion.chunk");
    assert_eq!(extra["choices"], json!([]));
    let approvals = extra["approvals"].as_array().expect("approvals chunk");
    let tools: Vec<&str> = approvals
        .iter()
        .map(|a| a["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["write_file", "run"]);
    assert_eq!(approvals[0]["tool_call_id"], "call_w");
    assert_eq!(approvals[0]["arguments"], r#"{"path":"a.txt","text":"hi"}"#);
    assert_eq!(approvals[0]["status"], "pending");
    assert!(approvals[0]["expires_at"].is_string());
    let first = &chunks[0];
    assert_eq!(extra["id"], first["id"]);
    assert_eq!(extra["created"], first["created"]);
    assert_eq!(extra["model"], env.model_id.as_str());
    for c in &chunks[..chunks.len() - 2] {
        assert!(c.get("approvals").is_none(), "only the last chunk: {c}");
        assert_eq!(c["model"], env.model_id.as_str());
    }
    // Those approvals are real: they can be answered.
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn streamed_answer_without_approvals_has_no_extra_chunk() {
    let env = approvals_env("aprstreamauto", |_| {}).await;
    let mut body = chat_body("do it", &["read_file", "write_file", "run"]);
    body["stream"] = json!(true);
    let r = env.chat(&[("X-Service-Tool-Mode", "auto")], &body).await;
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    for c in &chunks[..chunks.len() - 1] {
        assert!(c.get("approvals").is_none(), "{c}");
        assert!(!c["choices"].as_array().unwrap().is_empty(), "{c}");
    }
}

#[tokio::test]
async fn an_approval_is_decided_once() {
    let env = approvals_env("aprdecide", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(
            &env.access,
            id,
            &json!({"decision": "approve", "reason": "fine"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], id);
    assert_eq!(v["status"], "approved");
    assert_eq!(v["tool_call_id"], "call_w");
    assert_eq!(v["tool"], "write_file");
    assert!(gatehouse::time::parse_rfc3339(v["decided_at"].as_str().unwrap()).is_some());

    for decision in ["approve", "deny"] {
        let r = env
            .answer(&env.access, id, &json!({"decision": decision}))
            .await;
        expect_error(r, 409, "approval_already_decided").await;
    }
    let listed = env.admin_get("approvals?status=approved").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id);
    let pending = env.admin_get("approvals?status=pending").await;
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["tool"], "run");

    let other = approvals[1]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, other, &json!({"decision": "deny"}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "denied");
    assert_eq!(
        env.admin_get("approvals?status=denied").await[0]["id"],
        other
    );
}

#[tokio::test]
async fn unknown_or_another_users_approval_is_not_found() {
    let env = approvals_env("aprnf", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(
            &env.access,
            "apr_does_not_exist",
            &json!({"decision": "approve"}),
        )
        .await;
    expect_error(r, 404, "approval_not_found").await;

    let (_, bob_login) = env.app.user("bob@example.com").await;
    let (bob, _) = env
        .app
        .sign_in_access(&bob_login, &env.address, "bob-laptop")
        .await;
    let r = env.answer(&bob, id, &json!({"decision": "approve"})).await;
    expect_error(r, 404, "approval_not_found").await;
    // Still pending for its owner.
    let r = env
        .answer(&env.access, id, &json!({"decision": "approve"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_bad_decision_is_a_validation_error() {
    let env = approvals_env("aprbad", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    for body in [
        json!({"decision": "maybe"}),
        json!({}),
        json!({"decision": true}),
    ] {
        let r = env.answer(&env.access, id, &body).await;
        expect_error(r, 400, "validation_error").await;
    }
    let r = env
        .answer(&env.access, id, &json!({"decision": "maybe"}))
        .await;
    let e = expect_error(r, 400, "validation_error").await;
    assert_eq!(e["param"], "decision");
    // Nothing was decided.
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_tool_result_for_a_pending_call_is_refused_with_approval_pending() {
    let env = approvals_env("aprpend", |_| {}).await;
    ask(&env).await;
    let n = env.sent().len();
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "written"),
        )
        .await;
    expect_error(r, 409, "approval_pending").await;
    assert_eq!(env.sent().len(), n, "nothing went upstream");
    // A read call needs no approval: its result passes.
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_r", "read_file", "contents"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), "contents");
}

#[tokio::test]
async fn approvals_bind_to_their_conversation() {
    let env = approvals_env("aprconv", |_| {}).await;
    let in_c1 = [
        ("X-Service-Tool-Mode", "ask"),
        ("X-Service-Conversation-Id", "c1"),
    ];
    let in_c2 = [
        ("X-Service-Tool-Mode", "ask"),
        ("X-Service-Conversation-Id", "c2"),
    ];
    let r = env
        .chat(
            &in_c1,
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    env.stub.unscript(&env.upstream);
    let w = v["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["tool"] == "write_file")
        .unwrap()
        .clone();
    // Pending in c1: another conversation (or none) with the same call id is not blocked.
    let r = env
        .chat(&in_c2, &tool_result_body("call_w", "write_file", "from c2"))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), "from c2");
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "no conversation"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    expect_error(
        env.chat(&in_c1, &tool_result_body("call_w", "write_file", "x"))
            .await,
        409,
        "approval_pending",
    )
    .await;
    // Denied in c1 decides nothing in c2.
    let r = env
        .answer(
            &env.access,
            w["id"].as_str().unwrap(),
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .chat(
            &in_c1,
            &tool_result_body("call_w", "write_file", "written anyway"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), DENIED_TEXT);
    let r = env
        .chat(
            &in_c2,
            &tool_result_body("call_w", "write_file", "c2 result"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), "c2 result");
}

#[tokio::test]
async fn a_denied_calls_result_reaches_the_upstream_as_the_fixed_text() {
    let env = approvals_env("aprdeny", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "written anyway"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), DENIED_TEXT);
}

#[tokio::test]
async fn an_approved_calls_result_reaches_the_upstream_unchanged() {
    let env = approvals_env("aprok", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, id, &json!({"decision": "approve"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = tool_result_body("call_w", "write_file", "written");
    let r = env.chat(&[("X-Service-Tool-Mode", "ask")], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    let sent = env.last_sent();
    assert_eq!(tool_message_content(&sent), "written");
    assert_eq!(sent["messages"], body["messages"]);
}

#[tokio::test]
async fn an_expired_approval_cannot_be_answered_and_its_result_counts_as_denied() {
    let env = approvals_env("aprexp", |s| s.approval_ttl = 1).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = env
        .answer(&env.access, id, &json!({"decision": "approve"}))
        .await;
    expect_error(r, 409, "approval_expired").await;
    let expired = env.admin_get("approvals?status=expired").await;
    assert_eq!(expired.as_array().unwrap().len(), 2);
    assert_eq!(env.admin_get("approvals?status=pending").await, json!([]));

    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "written"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), DENIED_TEXT);
}

// ------------------------------------------------------------------ events

fn events(n: usize, prefix: &str) -> Value {
    json!({"events": (0..n).map(|i| json!({
        "id": format!("{prefix}-{i}"), "type": "tool.run", "time": "2025-01-02T03:04:05Z",
        "conversation_id": "conv-1", "turn_id": "turn:1", "data": {"i": i}
    })).collect::<Vec<_>>()})
}

async fn accepted(r: Response) -> Value {
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_batch_of_100_events_is_accepted_and_101_is_too_many() {
    let env = env("ev100", json!({})).await;
    let v = accepted(env.post_events(&events(100, "a")).await).await;
    assert_eq!(v, json!({"accepted": 100, "duplicates": 0}));
    let r = env.post_events(&events(101, "b")).await;
    expect_error(r, 400, "too_many_events").await;
    assert_eq!(env.all_events().await.len(), 100);
    let e = &env.all_events().await[0];
    assert_eq!(e["id"], "a-0");
    assert_eq!(e["type"], "tool.run");
    assert_eq!(e["conversation_id"], "conv-1");
    assert_eq!(e["turn_id"], "turn:1");
    assert_eq!(e["data"], json!({"i": 0}));
    assert_eq!(e["device_id"], env.device_id.as_str());
}

#[tokio::test]
async fn an_empty_or_missing_batch_is_a_validation_error() {
    let env = env("ev0", json!({})).await;
    for body in [json!({"events": []}), json!({}), json!({"events": "x"})] {
        let r = env.post_events(&body).await;
        expect_error(r, 400, "validation_error").await;
    }
}

#[tokio::test]
async fn one_bad_event_refuses_the_whole_batch_and_stores_nothing() {
    let env = env("evbad", json!({})).await;
    let bad_events = [
        json!({"type": ""}),
        json!({"type": "t".repeat(65)}),
        json!({"data": {}}),
        json!({"type": "x", "data": [1]}),
        json!({"type": "x", "time": "yesterday"}),
        json!({"type": "x", "conversation_id": "has space"}),
        json!({"type": "x", "id": "i".repeat(129)}),
        json!("not an object"),
    ];
    for bad in bad_events {
        let mut batch = events(5, "ok");
        batch["events"]
            .as_array_mut()
            .unwrap()
            .insert(3, bad.clone());
        let r = env.post_events(&batch).await;
        expect_error(r, 400, "validation_error").await;
    }
    assert_eq!(env.all_events().await, Vec::<Value>::new());
    // A 64-character type is fine.
    let v = accepted(
        env.post_events(&json!({"events": [{"type": "t".repeat(64)}]}))
            .await,
    )
    .await;
    assert_eq!(v["accepted"], 1);
}

#[tokio::test]
async fn a_retried_batch_is_counted_as_duplicates_and_not_stored_again() {
    let env = env("evdup", json!({})).await;
    assert_eq!(
        accepted(env.post_events(&events(10, "r")).await).await,
        json!({"accepted": 10, "duplicates": 0})
    );
    assert_eq!(
        accepted(env.post_events(&events(10, "r")).await).await,
        json!({"accepted": 0, "duplicates": 10})
    );
    // Half old, half new.
    let mut mixed = events(5, "r");
    mixed["events"]
        .as_array_mut()
        .unwrap()
        .extend(events(3, "s")["events"].as_array().unwrap().clone());
    assert_eq!(
        accepted(env.post_events(&mixed).await).await,
        json!({"accepted": 3, "duplicates": 5})
    );
    // Events without ids are never duplicates.
    let anon = json!({"events": [{"type": "x"}, {"type": "x"}]});
    assert_eq!(accepted(env.post_events(&anon).await).await["accepted"], 2);
    assert_eq!(accepted(env.post_events(&anon).await).await["accepted"], 2);
    assert_eq!(env.all_events().await.len(), 17);
    // The same id from another device is that device's own event.
    let (phone, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    assert_eq!(
        accepted(env.post_events_as(&phone, &events(2, "r")).await).await,
        json!({"accepted": 2, "duplicates": 0})
    );
}

#[tokio::test]
async fn event_data_limit_is_16_kb_of_compact_json() {
    let env = env("evdata", json!({})).await;
    let data_of_len = |len: usize| {
        let mut d = json!({"p": ""});
        let base = serde_json::to_vec(&d).unwrap().len();
        d["p"] = json!("x".repeat(len - base));
        assert_eq!(serde_json::to_vec(&d).unwrap().len(), len);
        d
    };
    let r = env
        .post_events(&json!({"events": [{"type": "big", "data": data_of_len(16_384)}]}))
        .await;
    assert_eq!(accepted(r).await["accepted"], 1);
    let r = env
        .post_events(&json!({"events": [{"type": "big", "data": data_of_len(16_385)}]}))
        .await;
    expect_error(r, 400, "validation_error").await;
    assert_eq!(env.all_events().await.len(), 1);
}

#[tokio::test]
async fn events_body_limit_is_2_mib() {
    let env = env("evbody", json!({})).await;
    let body_of_len = |len: usize| {
        let mut b = json!({"events": [{"type": "x"}], "x_padding": ""});
        let base = serde_json::to_vec(&b).unwrap().len();
        b["x_padding"] = json!("p".repeat(len - base));
        let text = serde_json::to_string(&b).unwrap();
        assert_eq!(text.len(), len);
        text
    };
    let send = |text: String| {
        env.app
            .client
            .post(env.app.u(&env.path("events")))
            .bearer_auth(&env.access)
            .header("content-type", "application/json")
            .body(text)
            .send()
    };
    let r = send(body_of_len(2 * 1024 * 1024)).await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let r = send(body_of_len(2 * 1024 * 1024 + 1)).await.unwrap();
    expect_error(r, 413, "payload_too_large").await;
    assert_eq!(env.all_events().await.len(), 1);
}

#[tokio::test]
async fn admin_event_listing_pages_with_a_cursor_and_filters_by_device() {
    let env = env("evpage", json!({})).await;
    let (phone, phone_id) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    accepted(env.post_events(&events(3, "l")).await).await;
    accepted(env.post_events_as(&phone, &events(2, "p")).await).await;
    accepted(env.post_events(&events(2, "m")).await).await;

    let mut seen = vec![];
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &after {
            Some(a) => format!("events?limit=2&after={a}"),
            None => "events?limit=2".to_string(),
        };
        let v = env.admin_get(&q).await;
        let page = v["events"].as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|e| e["id"].as_str().unwrap().to_string()));
        pages += 1;
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
        assert!(pages < 10, "paging ends");
    }
    assert_eq!(seen, ["l-0", "l-1", "l-2", "p-0", "p-1", "m-0", "m-1"]);
    assert_eq!(pages, 4);

    let v = env.admin_get(&format!("events?device_id={phone_id}")).await;
    let ids: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["p-0", "p-1"]);
    assert_eq!(v["next"], Value::Null);
    let v = env
        .admin_get(&format!("events?device_id={}&limit=3", env.device_id))
        .await;
    assert_eq!(v["events"].as_array().unwrap().len(), 3);
    let v = env
        .admin_get(&format!(
            "events?device_id={}&limit=3&after={}",
            env.device_id,
            v["next"].as_str().unwrap()
        ))
        .await;
    let ids: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m-0", "m-1"]);
}

/// A page of events after `after`: (ids, cursors, next).
async fn events_page(env: &Env, after: &str) -> (Vec<String>, Vec<i64>, Option<String>) {
    let v = env
        .admin_get(&format!("events?limit=7&after={after}"))
        .await;
    let page = v["events"].as_array().unwrap();
    let ids = page
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let cursors = page
        .iter()
        .map(|e| e["cursor"].as_str().unwrap().parse::<i64>().unwrap())
        .collect();
    (ids, cursors, v["next"].as_str().map(str::to_string))
}

#[tokio::test]
async fn paging_returns_every_event_once_in_stored_order_while_others_store() {
    let env = std::sync::Arc::new(env("evrace", json!({})).await);
    let mut writers = Vec::new();
    for w in 0..6 {
        let env = std::sync::Arc::clone(&env);
        writers.push(tokio::spawn(async move {
            let (device, _) = env
                .app
                .sign_in_access(&env.login, &env.address, &format!("device {w}"))
                .await;
            for b in 0..8 {
                accepted(
                    env.post_events_as(&device, &events(5, &format!("w{w}b{b}")))
                        .await,
                )
                .await;
            }
        }));
    }
    // Page all along, resuming from the last event seen when caught up.
    let mut seen: Vec<String> = Vec::new();
    let mut cursors: Vec<i64> = Vec::new();
    let mut after = String::new();
    loop {
        let done = writers.iter().all(|w| w.is_finished());
        let (ids, cs, next) = events_page(&env, &after).await;
        seen.extend(ids);
        if let Some(c) = cs.last() {
            after = c.to_string();
        }
        cursors.extend(cs);
        if next.is_none() {
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(seen.len(), 6 * 8 * 5, "every event exactly once");
    let unique: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice");
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "stored order");
    // Within a batch the order of posting holds.
    for w in 0..6 {
        for b in 0..8 {
            let prefix = format!("w{w}b{b}-");
            let mine: Vec<&String> = seen.iter().filter(|id| id.starts_with(&prefix)).collect();
            let expected: Vec<String> = (0..5).map(|i| format!("{prefix}{i}")).collect();
            assert_eq!(mine, expected.iter().collect::<Vec<_>>());
        }
    }
}

#[tokio::test]
async fn events_survive_a_restart() {
    let mut env = env("evrestart", json!({})).await;
    accepted(env.post_events(&events(4, "d")).await).await;
    env.app.restart().await;
    env.admin = env.app.admin_token().await;
    let all = env.all_events().await;
    assert_eq!(all.len(), 4);
    // And still count as duplicates.
    assert_eq!(
        accepted(env.post_events(&events(4, "d")).await).await,
        json!({"accepted": 0, "duplicates": 4})
    );
}

// ----------------------------------------------------------------- headers

#[tokio::test]
async fn bad_service_header_values_are_invalid_header_naming_the_header() {
    let env = env(
        "hdr",
        json!({"pii": {"mode": "off", "user_choosable": true}}),
    )
    .await;
    let long = "c".repeat(129);
    for (name, value) in [
        ("X-Service-Tool-Mode", "sometimes"),
        ("X-Service-Tool-Mode", "ASK"),
        ("X-Service-Conversation-Id", long.as_str()),
        ("X-Service-Conversation-Id", "has space"),
        ("X-Service-Conversation-Id", "a/b"),
        ("X-Service-Turn-Id", long.as_str()),
        ("X-Service-Turn-Id", "t@1"),
        ("X-Service-PII-Mode", "everything"),
        ("X-Service-Events", "all"),
    ] {
        let r = env.chat(&[(name, value)], &chat_body("hi", &[])).await;
        let e = expect_error(r, 400, "invalid_header").await;
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains(&name.to_lowercase()),
            "the message names {name}: {e}"
        );
    }
    assert!(env.sent().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn conversation_and_turn_ids_of_128_characters_are_accepted() {
    let env = env("hdrok", json!({})).await;
    let id = format!("{}:_.-9", "c".repeat(123));
    assert_eq!(id.len(), 128);
    let r = env
        .chat(
            &[
                ("X-Service-Conversation-Id", &id),
                ("X-Service-Turn-Id", &id),
            ],
            &chat_body("hi", &[]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .chat(
            &[("X-Service-Conversation-Id", &format!("{id}x"))],
            &chat_body("hi", &[]),
        )
        .await;
    expect_error(r, 400, "invalid_header").await;
}

#[tokio::test]
async fn pii_mode_header_is_refused_when_the_agent_does_not_let_the_user_choose() {
    let env = env(
        "hdrpii",
        json!({"pii": {"mode": "redact", "user_choosable": false}}),
    )
    .await;
    for value in ["redact", "tokenize_reversible"] {
        let r = env
            .chat(&[("X-Service-PII-Mode", value)], &chat_body("hi", &[]))
            .await;
        expect_error(r, 400, "pii_mode_not_allowed").await;
    }
    assert!(env.sent().is_empty());
}

#[tokio::test]
async fn pii_mode_header_is_taken_when_the_agent_lets_the_user_choose() {
    let env = env(
        "hdrpiiok",
        json!({"pii": {"mode": "off", "user_choosable": true}}),
    )
    .await;
    let r = env
        .chat(
            &[("X-Service-PII-Mode", "redact")],
            &chat_body("mail me at jane.doe@example.com", &[]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        env.last_sent()["messages"][0]["content"],
        "mail me at [EMAIL]"
    );
}

// ------------------------------------------------------- model and records

#[tokio::test]
async fn the_agents_model_replaces_the_clients_and_instructions_come_first() {
    let env = env(
        "model",
        json!({"instructions": "You are the ACME support agent."}),
    )
    .await;
    let mut body = chat_body("hello", &[]);
    body["messages"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"role": "system", "content": "client system"}));
    body["temperature"] = json!(0.5);
    body["x_vendor"] = json!({"k": 1});
    let (v, _) = env.chat_ok("auto", &body).await;
    assert_eq!(v["model"], env.model_id.as_str());
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hello");

    let sent = env.last_sent();
    assert_eq!(sent["model"], env.upstream.as_str());
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "system", "content": "You are the ACME support agent."},
            {"role": "system", "content": "client system"},
            {"role": "user", "content": "hello"}
        ])
    );
    assert_eq!(sent["temperature"], 0.5);
    assert_eq!(sent["x_vendor"], json!({"k": 1}));

    // Streamed too.
    body["stream"] = json!(true);
    let r = env.chat(&[], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    let chunks = payloads(&sse_events(r).await);
    for c in &chunks[..chunks.len() - 1] {
        assert_eq!(c["model"], env.model_id.as_str());
    }
    assert_eq!(env.last_sent()["model"], env.upstream.as_str());
}

#[tokio::test]
async fn without_pii_protection_each_field_reaches_the_upstream_as_the_client_wrote_it() {
    let env = env("fieldstext", json!({"instructions": "Be \"brief\"."})).await;
    env.manifest_ok(&std_manifest()).await;
    // Spellings a JSON tree would not keep: a float's, an escape, white space
    // inside a value.
    let text = r#"{ "model" : "m", "temperature": 0.50,
        "messages": [ {"role":"user", "content":"h\u00e9 \"q\""} ],
        "x_vendor": {"n": [1.0, 2e2]},
        "tools": [{"type":"function","function":{"name":"read_file"}},{"type":"function","function":{"name":"run"}}],
        "tool_choice": {"type":"function","function":{"name":"run"}} }"#;
    let r = chat_raw(&env, "read_only", text).await;
    assert_eq!(r.status(), StatusCode::OK);
    let raw = env.last_sent_text();
    for written in [
        r#""temperature":0.50"#,
        r#""x_vendor":{"n": [1.0, 2e2]}"#,
        r#"{"role":"user", "content":"h\u00e9 \"q\""}"#,
        r#""tools":[{"type":"function","function":{"name":"read_file"}}]"#,
    ] {
        assert!(raw.contains(written), "{written} in {raw}");
    }
    let sent: Value = serde_json::from_str(&raw).expect("JSON");
    assert_eq!(sent["model"], env.upstream.as_str());
    assert_eq!(
        sent["messages"],
        json!([{"role": "system", "content": "Be \"brief\"."},
               {"role": "user", "content": "h\u{e9} \"q\""}])
    );
    // The tool choice named a tool the rules took out.
    assert!(sent.get("tool_choice").is_none(), "{sent}");
}

#[tokio::test]
async fn without_instructions_the_messages_go_up_unchanged() {
    let env = env("modelnoinst", json!({})).await;
    let body = chat_body("hello", &[]);
    env.chat_ok("auto", &body).await;
    assert_eq!(env.last_sent()["messages"], body["messages"]);
}

#[tokio::test]
async fn the_usage_record_of_an_agent_chat_keeps_conversation_and_turn_ids() {
    let env = env("usage", json!({})).await;
    let r = env
        .chat(
            &[
                ("X-Service-Conversation-Id", "conv-42"),
                ("X-Service-Turn-Id", "turn:7"),
            ],
            &chat_body("hi", &[]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let pool = env.app.app().store.pool.clone();
    let address = env.address.clone();
    let row: (Option<String>, Option<String>, Option<String>, Option<String>, String) =
        poll(10, || {
            let pool = pool.clone();
            let address = address.clone();
            async move {
                sqlx::query_as(
                    "SELECT conversation_id, turn_id, device_id, user_id, model FROM usage_records WHERE agent = $1",
                )
                .bind(address)
                .fetch_optional(&pool)
                .await
                .expect("query")
            }
        })
        .await;
    assert_eq!(row.0.as_deref(), Some("conv-42"));
    assert_eq!(row.1.as_deref(), Some("turn:7"));
    assert_eq!(row.2.as_deref(), Some(env.device_id.as_str()));
    assert!(row.3.is_some());
    assert_eq!(row.4, env.model_id);
}

// ------------------------------------------------------- more edge cases

#[tokio::test]
async fn a_streamed_answer_names_held_tools_in_its_header_too() {
    let env = env("holdstream", json!({"tool_contract": ["read_file"]})).await;
    let mut body = chat_body("hi", &["read_file", "run"]);
    body["stream"] = json!(true);
    let r = env.chat(&[("X-Service-Tool-Mode", "auto")], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()
            .get("x-service-held-tools")
            .and_then(|v| v.to_str().ok()),
        Some("run")
    );
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}

#[tokio::test]
async fn the_approvals_chunk_comes_after_the_usage_chunk_when_usage_is_asked() {
    let env = approvals_env("aprusage", |_| {}).await;
    let mut body = chat_body("do it", &["read_file", "write_file", "run"]);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = env.chat(&[("X-Service-Tool-Mode", "ask")], &body).await;
    let chunks = payloads(&sse_events(r).await);
    let n = chunks.len();
    assert_eq!(chunks[n - 1], json!("[DONE]"));
    assert_eq!(chunks[n - 2]["approvals"].as_array().unwrap().len(), 2);
    assert!(chunks[n - 3]["usage"].is_object(), "{}", chunks[n - 3]);
    assert!(chunks[n - 3].get("approvals").is_none());
}

#[tokio::test]
async fn another_agents_approval_is_not_found() {
    let env = approvals_env("aprother", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let other = env.other_agent().await;
    let r = env
        .app
        .post(
            &format!("/v1/agents/other@acme/approvals/{id}"),
            &other,
            &json!({"decision": "approve"}),
        )
        .await;
    expect_error(r, 404, "approval_not_found").await;
}

#[tokio::test]
async fn admin_agent_data_views_need_an_admin_and_an_existing_agent() {
    let env = env("adm", json!({})).await;
    for path in [
        env.admin_path("tools"),
        env.admin_path("events"),
        env.admin_path("approvals"),
    ] {
        let (s, code) = api_code(env.app.get(&path, &env.login).await).await;
        assert_eq!((s.as_u16(), code.as_str()), (403, "forbidden"), "{path}");
        let missing = path.replace(&env.address, "nobody@acme");
        let (s, code) = api_code(env.app.get(&missing, &env.admin).await).await;
        assert_eq!(
            (s.as_u16(), code.as_str()),
            (404, "agent_not_found"),
            "{missing}"
        );
    }
    let accept = env.admin_path("tools/run/accept");
    let (s, code) = api_code(env.app.post(&accept, &env.login, &json!({})).await).await;
    assert_eq!((s.as_u16(), code.as_str()), (403, "forbidden"));
    for q in ["approvals?status=maybe", "events?limit=0", "events?limit=x"] {
        let (s, code) = api_code(env.app.get(&env.admin_path(q), &env.admin).await).await;
        assert_eq!(
            (s.as_u16(), code.as_str()),
            (400, "validation_error"),
            "{q}"
        );
    }
}

/// Agent chat is served before the router (`http::Dispatch`): the agent in
/// its path is percent-decoded as the router's routes decode it, and a path
/// or method the route does not take is answered as the router answers it.
#[tokio::test]
async fn agent_chat_path_is_decoded_and_near_misses_are_answered_as_by_the_router() {
    let env = env("dispatch", json!({})).await;
    let post = |path: String| {
        env.app
            .client
            .post(env.app.u(&path))
            .bearer_auth(&env.access)
            .json(&chat_body("hi", &[]))
            .send()
    };
    let encoded = env.address.replace('@', "%40");
    let r = post(format!("/v1/agents/{encoded}/chat/completions"))
        .await
        .expect("chat");
    assert_eq!(r.status(), StatusCode::OK, "a percent-encoded agent");
    // Not UTF-8 once decoded: it names no agent, so not this token's.
    let r = post("/v1/agents/%FF/chat/completions".into())
        .await
        .expect("chat");
    expect_error(r, 403, "agent_mismatch").await;
    // The agent decodes, another parameter does not: that one's own error.
    let r = env
        .app
        .client
        .post(env.app.u(&format!("/v1/agents/{encoded}/approvals/%FF")))
        .bearer_auth(&env.access)
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .expect("post");
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "an approval id that does not decode"
    );
    for path in [
        format!("/v1/agents/{}/chat/completions/", env.address),
        format!("/v1/agents/{}/chat/completion", env.address),
    ] {
        let r = post(path.clone()).await.expect("post");
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let r = env
        .app
        .client
        .get(env.app.u(&env.path("chat/completions")))
        .bearer_auth(&env.access)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "method_not_allowed");
    assert_eq!(
        env.stub.requests_for_model(&env.upstream).len(),
        1,
        "only the first reached the upstream"
    );
}

#[tokio::test]
async fn agent_routes_refuse_another_agents_token() {
    let env = env("mismatch", json!({})).await;
    let other = env.other_agent().await;
    let r = env.put_manifest_as(&other, &std_manifest()).await;
    expect_error(r, 403, "agent_mismatch").await;
    let r = env.post_events_as(&other, &events(1, "x")).await;
    expect_error(r, 403, "agent_mismatch").await;
    let r = env.chat_as(&other, &[], &chat_body("hi", &[])).await;
    expect_error(r, 403, "agent_mismatch").await;
    let r = env
        .app
        .put(&env.path("manifest"), &env.login, &std_manifest())
        .await;
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "a login token is not an access token"
    );
}
