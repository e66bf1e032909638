//! The MCP gateway end to end (contract: "MCP gateway"): `/mcp` and
//! `/mcp/{server}` in front of real MCP servers written with the official
//! `mcp` Python SDK (`tests/mcp/servers.py`) on loopback ports. The client
//! here is plain HTTP, to reach every error row; the SDK clients are in
//! tests/python/test_mcp_sdk.py and tests/mcp-ts.

use crate::common;

use common::mcp::*;
use common::*;
use gatehouse::config::Settings;
use reqwest::StatusCode;
use serde_json::{json, Value};

struct Scene {
    app: TestApp,
    admin: String,
    alpha: Upstream,
    _beta: Upstream,
    key: String,
}

/// alpha and beta registered (alpha with a header and a configured class),
/// a user and an API key granted every server.
async fn scene_with(f: impl FnOnce(&mut Settings), limits: Value) -> Scene {
    let alpha = Upstream::start("alpha", &[]).ready().await;
    let beta = Upstream::start("beta", &["--json"]).ready().await;
    let app = spawn_app_with(f).await;
    let admin = app.admin_token().await;
    add_server(
        &app,
        json!({"name": "alpha", "url": alpha.url, "timeout_s": 2,
               "headers": {"X-Up": "up-secret"}, "tool_classes": {"echo": "read"}}),
    )
    .await;
    add_server(&app, json!({"name": "beta", "url": beta.url})).await;
    let (_, key) = user_with_key(
        &app,
        "dev@example.com",
        json!({"servers": ["*"]}),
        json!({"servers": ["*"]}),
        limits,
    )
    .await;
    Scene {
        app,
        admin,
        alpha,
        _beta: beta,
        key,
    }
}

async fn scene() -> Scene {
    scene_with(|_| {}, Value::Null).await
}

#[tokio::test]
async fn a_calls_audit_record_is_stored_by_the_time_the_server_has_shut_down() {
    // Audit records wait in memory a moment to share a transaction; a
    // shutdown (a restart) writes what waits before the process ends.
    let mut s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let v = c.call("alpha__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(v["result"]["content"][0]["text"], "3");
    let store = s.app.app().store.clone();
    s.app.server.take().expect("running").shutdown().await;
    let records = store
        .list_mcp_calls(&gatehouse::mcp::audit::CallFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("audit");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].exposed_name, "alpha__add");
    assert_eq!(records[0].outcome.as_deref(), Some("ok"));
}

#[tokio::test]
async fn initialize_answers_the_clients_version_and_gatehouse_with_a_session() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    let result = c.initialize().await;
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(
        result["capabilities"],
        json!({"tools": {"listChanged": false}})
    );
    assert_eq!(result["serverInfo"]["name"], "gatehouse");
    let sid = c.session.clone().expect("session");
    assert!(sid.len() <= 1024 && sid.bytes().all(|b| b.is_ascii_graphic()));
    // An unknown version gets the newest.
    let mut d = Mcp::new(&s.app, "/mcp", &s.key);
    let v = d
        .rpc(
            "initialize",
            json!({"protocolVersion": "2024-11-05", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
    // The upstream got initialize with the server's header, never the client's credential.
    let reqs = s.alpha.requests();
    let init = reqs
        .iter()
        .find(|r| r["method"] == "initialize")
        .expect("initialize reached alpha");
    assert_eq!(init["x-up"], "up-secret");
    assert!(reqs.iter().all(|r| r["authorization"].is_null()));
    assert!(reqs
        .iter()
        .all(|r| r["session"].as_str() != Some(sid.as_str())));
}

#[tokio::test]
async fn tools_list_on_mcp_names_every_granted_tool_by_server_and_tool_with_meta() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let v = c.rpc("tools/list", json!({})).await;
    let tools = v["result"]["tools"].as_array().expect("tools").clone();
    assert!(v["result"].get("nextCursor").is_none());
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    let hashed = {
        use sha2::Digest;
        format!(
            "alpha__read_file_{}",
            &hex::encode(sha2::Sha256::digest(b"read.file"))[..8]
        )
    };
    assert_eq!(
        names,
        vec![
            "alpha__add",
            "alpha__echo",
            "alpha__write_note",
            hashed.as_str(),
            "alpha__big",
            "alpha__slow",
            "alpha__fail",
            "beta__mul"
        ]
    );
    let add = &tools[0];
    assert_eq!(add["description"], "Adds two numbers.");
    assert_eq!(add["annotations"], json!({"readOnlyHint": true}));
    assert_eq!(add["inputSchema"]["required"], json!(["a", "b"]));
    assert_eq!(add["_meta"]["gatehouse/server"], "alpha");
    assert_eq!(add["_meta"]["gatehouse/tool"], "add");
    assert_eq!(add["_meta"]["gatehouse/class"], "read");
    // Configured class, destructiveHint false, and no hints.
    assert_eq!(tools[1]["_meta"]["gatehouse/class"], "read");
    assert_eq!(tools[2]["_meta"]["gatehouse/class"], "write");
    assert_eq!(tools[6]["_meta"]["gatehouse/class"], "execute");
    assert_eq!(tools[3]["_meta"]["gatehouse/tool"], "read.file");
}

#[tokio::test]
async fn a_failing_upstream_is_left_out_of_the_list_and_counted() {
    let s = scene().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    add_server(
        &s.app,
        json!({"name": "down", "url": format!("http://127.0.0.1:{dead}/mcp"), "timeout_s": 1}),
    )
    .await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let names = c.tool_names().await;
    assert!(names.contains(&"alpha__add".to_string()));
    assert!(names.contains(&"beta__mul".to_string()));
    assert!(!names.iter().any(|n| n.starts_with("down__")));
    let metrics = s
        .app
        .client
        .get(s.app.u("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(
            "gatehouse_mcp_upstream_failures_total{server=\"down\",cause=\"unavailable\"}"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn tools_call_goes_upstream_under_the_upstream_name_and_is_audited() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let v = c.call("alpha__add", json!({"b": 3, "a": 2})).await;
    assert_eq!(v["result"]["content"][0]["text"], "5");
    assert_eq!(v["result"]["isError"], false);
    let hashed = {
        use sha2::Digest;
        format!(
            "alpha__read_file_{}",
            &hex::encode(sha2::Sha256::digest(b"read.file"))[..8]
        )
    };
    let v = c.call(&hashed, json!({"path": "/etc/motd"})).await;
    assert_eq!(v["result"]["content"][0]["text"], "contents of /etc/motd");
    // A tool error is a result, not an error.
    let v = c.call("alpha__fail", json!({})).await;
    assert_eq!(v["result"]["isError"], true);
    assert!(v.get("error").is_none());
    let calls: Vec<Value> = s
        .alpha
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "tools/call")
        .collect();
    let tools: Vec<&str> = calls
        .iter()
        .map(|r| r["tool"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(tools, vec!["add", "read.file", "fail"]);
    assert!(calls
        .iter()
        .all(|r| r["x-up"] == "up-secret" && r["authorization"].is_null()));

    // The audit: one record per call, the hash of the canonical arguments, never the arguments.
    let mut records: Vec<Value> = Vec::new();
    for _ in 0..40 {
        records = s
            .app
            .app()
            .store
            .list_mcp_calls(&gatehouse::mcp::audit::CallFilter {
                limit: 100,
                ..Default::default()
            })
            .await
            .expect("audit")
            .iter()
            .map(|r| r.view())
            .collect();
        if records.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(records.len(), 3);
    let add = records
        .iter()
        .find(|r| r["tool"] == "add")
        .expect("add audited");
    let canonical = r#"{"a":2,"b":3}"#;
    let want = {
        use sha2::Digest;
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(canonical.as_bytes()))
        )
    };
    assert_eq!(add["arguments_sha256"], want.as_str());
    assert_eq!(add["exposed_name"], "alpha__add");
    assert_eq!(add["server"], "alpha");
    assert_eq!(add["decision"], "allowed");
    assert_eq!(add["outcome"], "ok");
    assert_eq!(add["class"], "read");
    assert!(add["mode"].is_null());
    let fail = records
        .iter()
        .find(|r| r["tool"] == "fail")
        .expect("fail audited");
    assert_eq!(fail["outcome"], "tool_error");
    let text = serde_json::to_string(&records).expect("text");
    assert!(!text.contains("/etc/motd"));
}

#[tokio::test]
async fn an_unknown_or_ungranted_tool_is_unknown_and_never_goes_upstream() {
    let s = scene().await;
    let (_, key) = user_with_key(
        &s.app,
        "narrow@example.com",
        json!({"servers": ["*"]}),
        json!({"servers": ["alpha"], "tools": {"alpha": ["add"]}}),
        Value::Null,
    )
    .await;
    let mut c = Mcp::new(&s.app, "/mcp", &key);
    c.initialize().await;
    assert_eq!(c.tool_names().await, vec!["alpha__add"]);
    let before = s.alpha.count("tools/call");
    for name in [
        "alpha__echo",
        "beta__mul",
        "alpha__nope",
        "nope",
        "gamma__x",
    ] {
        let v = c.call(name, json!({"text": "hi"})).await;
        assert_eq!(v["error"]["code"], -32602, "{name}");
        assert_eq!(v["error"]["message"], format!("Unknown tool: {name}"));
    }
    let v = c.rpc("tools/call", json!({"arguments": {}})).await;
    assert_eq!(v["error"]["code"], -32602);
    let v = c
        .rpc(
            "tools/call",
            json!({"name": "alpha__add", "arguments": [1]}),
        )
        .await;
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(s.alpha.count("tools/call"), before);
}

#[tokio::test]
async fn the_server_route_names_tools_as_the_upstream_does() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp/beta", &s.key);
    c.initialize().await;
    assert_eq!(c.tool_names().await, vec!["mul"]);
    let v = c.call("mul", json!({"a": 6, "b": 7})).await;
    assert_eq!(v["result"]["content"][0]["text"], "42");
    // A session of /mcp/beta is not one of /mcp.
    let mut other = Mcp::new(&s.app, "/mcp", &s.key);
    other.session = c.session.clone();
    let (st, _, code) = refusal(other.send("ping", json!({})).await).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::NOT_FOUND, "session_not_found")
    );
    // No such server.
    let mut none = Mcp::new(&s.app, "/mcp/gamma", &s.key);
    let (st, code, dcode) = refusal(none.send("ping", json!({})).await).await;
    assert_eq!(
        (st, code, dcode.as_str()),
        (StatusCode::NOT_FOUND, -32600, "mcp_server_not_found")
    );
}

#[tokio::test]
async fn methods_other_than_tools_answer_locally() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    assert_eq!(c.rpc("ping", json!({})).await["result"], json!({}));
    assert_eq!(
        c.rpc("prompts/list", json!({})).await["result"],
        json!({"prompts": []})
    );
    assert_eq!(
        c.rpc("resources/list", json!({})).await["result"],
        json!({"resources": []})
    );
    assert_eq!(
        c.rpc("resources/templates/list", json!({})).await["result"],
        json!({"resourceTemplates": []})
    );
    assert_eq!(
        c.rpc("sampling/createMessage", json!({})).await["error"]["code"],
        -32601
    );
    // Notifications and responses: 202, no body.
    for body in [
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}),
        json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
    ] {
        let r = c.request(&body).send().await.expect("send");
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        assert!(r.bytes().await.expect("body").is_empty());
    }
    // GET: no stream.
    let r = s.app.client.get(s.app.u("/mcp")).send().await.expect("get");
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "POST, DELETE");
    let r = s
        .app
        .client
        .get(s.app.u("/mcp/alpha"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

/// `sid` with its last character changed.
fn tampered(sid: &str) -> String {
    let last = if sid.ends_with('A') { 'B' } else { 'A' };
    format!("{}{last}", &sid[..sid.len() - 1])
}

/// Every row of "Errors on /mcp", each broken alone, and nothing reaches an upstream.
#[tokio::test]
async fn each_error_row_answers_its_status_and_code_and_nothing_reaches_upstream() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let sid = c.session.clone().expect("session");
    let before = s.alpha.requests().len();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let url = s.app.u("/mcp");
    let base = || {
        s.app
            .client
            .post(&url)
            .header("accept", ACCEPT)
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
    };
    // Without Accept and Content-Type, for the rows that set their own.
    let bare = || s.app.client.post(&url).header("mcp-session-id", &sid);
    let login = s.app.admin_token().await;
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, i64, &str)> = vec![
        (
            "no credential",
            s.app.client.post(&url).body(ping.to_string()),
            401,
            -32001,
            "invalid_api_key",
        ),
        (
            "unknown key",
            base().bearer_auth("gtk_nope").body(ping.to_string()),
            401,
            -32001,
            "invalid_api_key",
        ),
        (
            "login token",
            base().bearer_auth(&login).body(ping.to_string()),
            401,
            -32001,
            "invalid_api_key",
        ),
        (
            "a bad key before every other fault",
            bare()
                .bearer_auth("gtk_nope")
                .header("accept", "application/json")
                .body("{nope"),
            401,
            -32001,
            "invalid_api_key",
        ),
        (
            "foreign origin",
            base()
                .bearer_auth(&s.key)
                .header("origin", "http://evil.example")
                .body(ping.to_string()),
            403,
            -32600,
            "origin_not_allowed",
        ),
        (
            "accept json only",
            bare()
                .bearer_auth(&s.key)
                .header("accept", "application/json")
                .header("content-type", "application/json")
                .body(ping.to_string()),
            406,
            -32600,
            "not_acceptable",
        ),
        (
            "text body",
            bare()
                .bearer_auth(&s.key)
                .header("accept", ACCEPT)
                .header("content-type", "text/plain")
                .body(ping.to_string()),
            415,
            -32600,
            "unsupported_media_type",
        ),
        (
            "not json",
            base().bearer_auth(&s.key).body("{nope"),
            400,
            -32700,
            "parse_error",
        ),
        (
            "batch",
            base().bearer_auth(&s.key).body(json!([ping]).to_string()),
            400,
            -32600,
            "invalid_request",
        ),
        (
            "not json-rpc",
            base()
                .bearer_auth(&s.key)
                .body(json!({"id": 1, "method": "ping"}).to_string()),
            400,
            -32600,
            "invalid_request",
        ),
        (
            "bad version",
            base()
                .bearer_auth(&s.key)
                .header("mcp-protocol-version", "2024-01-01")
                .body(ping.to_string()),
            400,
            -32600,
            "unsupported_protocol_version",
        ),
        (
            "no session",
            s.app
                .client
                .post(&url)
                .bearer_auth(&s.key)
                .header("accept", ACCEPT)
                .header("content-type", "application/json")
                .body(ping.to_string()),
            400,
            -32600,
            "session_required",
        ),
        (
            "tampered session",
            s.app
                .client
                .post(&url)
                .header("accept", ACCEPT)
                .header("content-type", "application/json")
                .bearer_auth(&s.key)
                .header("mcp-session-id", tampered(&sid))
                .body(ping.to_string()),
            404,
            -32600,
            "session_not_found",
        ),
        (
            "session 1025 chars",
            s.app
                .client
                .post(&url)
                .header("accept", ACCEPT)
                .header("content-type", "application/json")
                .bearer_auth(&s.key)
                .header("mcp-session-id", "m".repeat(1025))
                .body(ping.to_string()),
            404,
            -32600,
            "session_not_found",
        ),
    ];
    for (what, req, status, code, data) in cases {
        let r = req.send().await.expect("send");
        if status == 401 {
            assert_eq!(r.headers()["www-authenticate"], "Bearer", "{what}");
        }
        let st = r.status().as_u16();
        let body = r.text().await.expect("body");
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(v["jsonrpc"], "2.0", "{what}: {st} {body}");
        let got = (
            st,
            v["error"]["code"].as_i64().unwrap_or(0),
            v["error"]["data"]["code"].as_str().unwrap_or(""),
        );
        assert_eq!(got, (status, code, data), "{what}: {body}");
    }
    // The Origin of the Host asked for passes.
    let host = url.trim_end_matches("/mcp").to_string();
    let r = base()
        .bearer_auth(&s.key)
        .header("origin", host)
        .body(ping.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    let after: Vec<Value> = s.alpha.requests().into_iter().skip(before).collect();
    assert!(
        after.iter().all(|r| r["method"] == "tools/list"),
        "{after:?}"
    );
    assert_eq!(after.len(), 1);
}

#[tokio::test]
async fn the_body_limit_passes_1_mib_and_refuses_one_byte_more() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let body = |size: usize| {
        let head = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#;
        let tail = r#""}}"#;
        format!("{head}{}{tail}", "x".repeat(size - head.len() - tail.len()))
    };
    let at = body(1_048_576);
    assert_eq!(at.len(), 1_048_576);
    let r = c.request(&json!(null)).body(at).send().await.expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    let r = c
        .request(&json!(null))
        .body(body(1_048_577))
        .send()
        .await
        .expect("send");
    let (st, code, d) = refusal(r).await;
    assert_eq!(
        (st.as_u16(), code, d.as_str()),
        (413, -32600, "payload_too_large")
    );
}

#[tokio::test]
async fn the_result_cap_passes_at_the_limit_and_refuses_one_byte_more() {
    const CAP: usize = 4096;
    let s = scene_with(|st| st.mcp_max_result_bytes = CAP, Value::Null).await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let v = c.call("alpha__big", json!({"n": 0})).await;
    let empty = serde_json::to_string(&v["result"]).expect("compact").len();
    let at = CAP - empty;
    let v = c.call("alpha__big", json!({"n": at})).await;
    assert_eq!(
        serde_json::to_string(&v["result"]).expect("compact").len(),
        CAP
    );
    let v = c.call("alpha__big", json!({"n": at + 1})).await;
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(v["error"]["message"], "result too large");
    assert_eq!(v["error"]["data"]["code"], "mcp_result_too_large");
}

#[tokio::test]
async fn a_slow_upstream_times_out_and_is_told_to_cancel() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    let v = c.call("alpha__slow", json!({"seconds": 5})).await;
    assert_eq!(v["error"]["code"], -32603);
    assert_eq!(v["error"]["message"], "upstream timed out: alpha");
    assert_eq!(v["error"]["data"]["code"], "mcp_upstream_timeout");
    let mut cancelled = 0;
    for _ in 0..40 {
        cancelled = s.alpha.count("notifications/cancelled");
        if cancelled > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(cancelled, 1);
}

/// A `tools/call` of `slow` (30 s) in flight through one server, and the
/// client's `notifications/cancelled` for it sent through `via_other`: the
/// same server, or a second one on the same database (a load balancer may
/// send them to different servers). The upstream cancels the call, so it
/// ends now with the upstream's own error.
async fn a_call_is_cancelled_upstream_by_the_client(via_other: bool) {
    let alpha = Upstream::start("alpha", &[]).ready().await;
    let app = spawn_app().await;
    add_server(
        &app,
        json!({"name": "alpha", "url": alpha.url, "timeout_s": 60}),
    )
    .await;
    let (_, key) = user_with_key(
        &app,
        "dev@example.com",
        json!({"servers": ["*"]}),
        json!({"servers": ["*"]}),
        Value::Null,
    )
    .await;
    let other = match via_other {
        true => Some(app_on(&app.settings.database_url, None, |_| {}).await),
        false => None,
    };
    let mut c = Mcp::new(&app, "/mcp", &key);
    c.initialize().await;
    let call = tokio::spawn(
        c.request(
            &json!({"jsonrpc": "2.0", "id": "slow-1", "method": "tools/call",
                          "params": {"name": "alpha__slow", "arguments": {"seconds": 30}}}),
        )
        .send(),
    );
    for _ in 0..200 {
        if alpha.count("tools/call") > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(alpha.count("tools/call"), 1);
    let mut via = Mcp::new(other.as_ref().unwrap_or(&app), "/mcp", &key);
    via.session = c.session.clone();
    let r = via
        .request(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "slow-1", "reason": "the user pressed stop"}}),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let answer = tokio::time::timeout(std::time::Duration::from_secs(15), call)
        .await
        .expect("the call ended long before its 30 s")
        .expect("joined")
        .expect("answered");
    let v: Value = answer.json().await.expect("json");
    assert_eq!(v["id"], "slow-1");
    assert_eq!(v["error"]["message"], "Request cancelled", "{v}");
    assert_eq!(alpha.count("notifications/cancelled"), 1);
}

#[tokio::test]
async fn a_clients_cancel_reaches_the_upstream_running_the_call() {
    a_call_is_cancelled_upstream_by_the_client(false).await;
}

#[tokio::test]
async fn a_clients_cancel_sent_to_another_server_reaches_the_upstream_running_the_call() {
    a_call_is_cancelled_upstream_by_the_client(true).await;
}

#[tokio::test]
async fn mcp_calls_per_minute_admits_the_limit_and_refuses_one_more() {
    let s = scene_with(|_| {}, json!({"mcp_calls_per_minute": 2})).await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    for _ in 0..2 {
        let v = c.call("alpha__add", json!({"a": 1, "b": 1})).await;
        assert_eq!(v["result"]["content"][0]["text"], "2");
    }
    let r = c
        .send(
            "tools/call",
            json!({"name": "alpha__add", "arguments": {"a": 1, "b": 1}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    // The sliding minute, rounded up to whole seconds.
    assert!((1..=61).contains(&retry), "Retry-After {retry}");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], -32000);
    assert_eq!(v["error"]["data"]["code"], "rate_limited");
    assert_eq!(v["error"]["data"]["retry_after_s"], retry);
    // tools/list does not count.
    assert_eq!(c.tool_names().await.len(), 8);
    assert_eq!(s.alpha.count("tools/call"), 2);
}

#[tokio::test]
async fn delete_ends_the_session_and_the_upstream_sessions() {
    let s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    c.tool_names().await;
    let sid = c.session.clone().expect("session");
    // Another credential cannot use or end it.
    let (_, other) = user_with_key(
        &s.app,
        "other@example.com",
        json!({"servers": ["*"]}),
        json!({"servers": ["*"]}),
        Value::Null,
    )
    .await;
    let mut o = Mcp::new(&s.app, "/mcp", &other);
    o.session = Some(sid.clone());
    let (st, _, code) = refusal(o.send("ping", json!({})).await).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::NOT_FOUND, "session_not_found")
    );
    let r = s
        .app
        .client
        .delete(s.app.u("/mcp"))
        .bearer_auth(&s.key)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(r.bytes().await.expect("body").is_empty());
    let (st, _, code) = refusal(c.send("ping", json!({})).await).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::NOT_FOUND, "session_not_found")
    );
    let mut deleted = 0;
    for _ in 0..40 {
        deleted = s
            .alpha
            .requests()
            .iter()
            .filter(|r| r["http"] == "DELETE")
            .count();
        if deleted > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(deleted, 1);
}

#[tokio::test]
async fn an_upstream_that_forgot_its_session_is_initialized_again_once() {
    let mut s = scene().await;
    let mut c = Mcp::new(&s.app, "/mcp", &s.key);
    c.initialize().await;
    assert_eq!(
        c.call("alpha__add", json!({"a": 1, "b": 2})).await["result"]["content"][0]["text"],
        "3"
    );
    // The upstream restarts on the same port: its sessions are gone (404).
    s.alpha.restart().await;
    let v = c.call("alpha__add", json!({"a": 2, "b": 2})).await;
    assert_eq!(v["result"]["content"][0]["text"], "4");
    assert_eq!(s.alpha.count("initialize"), 1);
}

#[tokio::test]
async fn admin_sees_an_upstreams_tools_with_classes_or_502() {
    let s = scene().await;
    let r = s
        .app
        .get("/api/admin/mcp-servers/alpha/tools", &s.admin)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.expect("json");
    let echo = v
        .as_array()
        .expect("list")
        .iter()
        .find(|t| t["name"] == "echo")
        .expect("echo");
    assert_eq!(echo["exposed_name"], "alpha__echo");
    assert_eq!(echo["class"], "read");
    assert_eq!(echo["class_source"], "config");
    assert_eq!(echo["allowed"], true);
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    add_server(
        &s.app,
        json!({"name": "down", "url": format!("http://127.0.0.1:{dead}/mcp")}),
    )
    .await;
    let r = s
        .app
        .get("/api/admin/mcp-servers/down/tools", &s.admin)
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_GATEWAY, "mcp_upstream_unavailable".into())
    );
    let r = s
        .app
        .get("/api/admin/mcp-servers/nope/tools", &s.admin)
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::NOT_FOUND, "mcp_server_not_found".into())
    );
}
