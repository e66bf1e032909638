//! Logs as an operator's pipeline reads them (contract "Operations"): a real
//! `gatehouse serve` process with GATEHOUSE_LOG_FORMAT=json, its standard
//! output and error captured whole; one access line per request with the
//! contract's fields; a bad format value refused at start.

use crate::common;

use std::process::Command;

use common::captured::{serve, stop};
use common::procs::free_port;
use common::{client, ADMIN_EMAIL, ADMIN_PASSWORD};
use gatehouse_stub_upstream::Stub;
use serde_json::{json, Value};

async fn post_json(url: &str, token: &str, body: Value) -> Value {
    let r = client()
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.json().await.unwrap()
}

// The server process talks to the stub served on this test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_one_access_line_per_request() {
    let stub = Stub::start().await;
    let s = serve(&[("GATEHOUSE_LOG_FORMAT", "json"), ("GATEHOUSE_LOG", "info")]).await;
    let c = client();
    let url = s.url.clone();

    let login: Value = c
        .post(format!("{url}/api/auth/jwt/login"))
        .form(&[("username", ADMIN_EMAIL), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let admin = login["access_token"].as_str().unwrap().to_string();
    let me: Value = c
        .get(format!("{url}/api/users/me"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let admin_id = me["id"].as_str().unwrap().to_string();
    post_json(
        &format!("{url}/api/admin/providers"),
        &admin,
        json!({"name": "stub", "type": "openai", "base_url": stub.openai_base_url()}),
    )
    .await;
    post_json(
        &format!("{url}/api/admin/models"),
        &admin,
        json!({"id": "chat-model", "kind": "chat", "provider": "stub", "upstream_model": "up-log"}),
    )
    .await;
    let key = post_json(
        &format!("{url}/api/api-keys"),
        &admin,
        json!({"name": "logs"}),
    )
    .await;
    let (key_id, key_secret) = (
        key["id"].as_str().unwrap().to_string(),
        key["key"].as_str().unwrap().to_string(),
    );
    let r = c
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(&key_secret)
        .header("x-request-id", "log-chat-1")
        .json(&json!({"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // An agent chat, for agent and device_id.
    post_json(
        &format!("{url}/api/admin/agents"),
        &admin,
        json!({"address": "log-agent", "name": "L", "model": "chat-model"}),
    )
    .await;
    let sign_in = post_json(
        &format!("{url}/api/agent-tokens"),
        &admin,
        json!({"agent": "log-agent", "device_label": "laptop"}),
    )
    .await;
    let access_token = sign_in["access_token"].as_str().unwrap().to_string();
    let device_id = sign_in["device_id"].as_str().unwrap().to_string();
    let r = c
        .post(format!("{url}/v1/agents/log-agent/chat/completions"))
        .bearer_auth(&access_token)
        .header("x-request-id", "log-agent-1")
        .json(&json!({"messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Refused and unmatched requests write their line too.
    let r = c
        .get(format!("{url}/v1/models"))
        .header("x-request-id", "log-401")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(format!("{url}/no/such/route"))
        .header("x-request-id", "log-404")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let (out, err, _) = stop(s);
    let mut objects = Vec::new();
    for (stream, text) in [("stdout", &out), ("stderr", &err)] {
        for line in text.lines() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{stream} line is not JSON ({e}): {line}"));
            for field in ["timestamp", "level", "target", "message"] {
                assert!(v.get(field).is_some(), "{field} missing: {line}");
            }
            chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str().unwrap())
                .unwrap_or_else(|e| panic!("timestamp not RFC 3339 ({e}): {line}"));
            assert!(v.get("fields").is_none(), "fields at the top level: {line}");
            objects.push(v);
        }
    }
    let access: Vec<&Value> = objects
        .iter()
        .filter(|v| v["message"] == "request")
        .collect();
    let line_of = |id: &str| -> &Value {
        let lines: Vec<&&Value> = access.iter().filter(|v| v["request_id"] == id).collect();
        assert_eq!(lines.len(), 1, "one access line for {id}: {access:#?}");
        lines[0]
    };

    let chat = line_of("log-chat-1");
    assert_eq!(chat["level"], "INFO");
    assert_eq!(chat["method"], "POST");
    assert_eq!(chat["route"], "/v1/chat/completions");
    assert_eq!(chat["status"], 200);
    assert!(chat["latency_ms"].is_number(), "{chat}");
    assert_eq!(chat["user_id"], admin_id.as_str());
    assert_eq!(chat["api_key_id"], key_id.as_str());
    assert_eq!(chat["model"], "chat-model");
    assert_eq!(chat["provider"], "stub");

    let agent = line_of("log-agent-1");
    assert_eq!(agent["route"], "/v1/agents/{agent}/chat/completions");
    assert_eq!(agent["agent"], "log-agent");
    assert_eq!(agent["device_id"], device_id.as_str());
    assert_eq!(agent["user_id"], admin_id.as_str());
    assert_eq!(agent["model"], "chat-model");
    assert_eq!(agent["provider"], "stub");
    assert_eq!(agent["status"], 200);

    let refused = line_of("log-401");
    assert_eq!(refused["status"], 401);
    assert_eq!(refused["route"], "/v1/models");
    assert!(refused.get("user_id").is_none());
    let unmatched = line_of("log-404");
    assert_eq!(unmatched["status"], 404);
    assert_eq!(unmatched["route"], "unmatched");

    // Every request made above has exactly one line (ids made by the gateway included).
    assert_eq!(access.len(), 12, "{access:#?}");

    // No credential shows, not even its last 16 characters.
    let all = format!("{out}{err}");
    for secret in [ADMIN_PASSWORD, &admin, &key_secret, &access_token] {
        let tail = &secret[secret.len().saturating_sub(16)..];
        assert!(!all.contains(tail), "a credential shows in the logs");
    }
}

#[tokio::test]
async fn text_logs_keep_the_banner_and_write_access_lines() {
    let s = serve(&[("GATEHOUSE_LOG", "info")]).await;
    let r = client()
        .get(format!("{}/healthz", s.url))
        .header("x-request-id", "text-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (out, _, _) = stop(s);
    assert!(out.contains("gatehouse listening on http://"), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("text-1"))
        .unwrap_or_else(|| panic!("no access line: {out}"));
    for part in ["request", "route=/healthz", "status=200", "method=GET"] {
        assert!(line.contains(part), "{part} in {line}");
    }
}

#[test]
fn an_unknown_log_format_stops_serve_with_exit_2_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("serve")
        .env(
            "GATEHOUSE_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("g.db").display()),
        )
        .env("GATEHOUSE_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("GATEHOUSE_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("GATEHOUSE_LOG_FORMAT") && err.contains("xml"),
        "{err}"
    );
    assert!(!dir.path().join("g.db").exists(), "nothing started");
}
