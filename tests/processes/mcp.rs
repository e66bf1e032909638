//! The MCP gateway on two servers sharing one PostgreSQL: a session opened
//! on one serves on the other, a grant revoked on one applies on the other
//! within a second, and `DELETE` on one ends the session on the other within
//! a second. Runs when GATEHOUSE_TEST_DATABASE_URL is a PostgreSQL URL.

use crate::common;

use std::time::Duration;

use common::mcp::{refusal, Mcp, Upstream};
use common::procs::{eventually, login, post, spawn_server};
use common::*;
use gatehouse::config::Settings;
use gatehouse::mcp::servers::{parse_new, Source};
use gatehouse::mcp::store::McpServerRow;
use gatehouse::runtime::Invalidation;
use gatehouse::secrets::Keyring;
use gatehouse::store::notify::publish;
use gatehouse::store::{now_ms, Store};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn two_servers_share_sessions_revocations_and_ended_sessions() {
    let db = match std::env::var("GATEHOUSE_TEST_DATABASE_URL") {
        Ok(u) if u.starts_with("postgres") => fresh_database().await.0,
        _ => {
            eprintln!("not applicable on SQLite: set GATEHOUSE_TEST_DATABASE_URL=postgres://...");
            return;
        }
    };
    let alpha = Upstream::start("alpha", &[]).ready().await;
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let admin = login(&c, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let r = post(
        &c,
        &a.url,
        &admin,
        "/api/admin/users",
        &json!({"email": "dev@example.com", "password": "user-password-1"}),
    )
    .await;
    let uid = r.json::<Value>().await.expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let user = login(&c, &a.url, "dev@example.com", "user-password-1").await;
    let r = post(&c, &a.url, &user, "/api/api-keys", &json!({"name": "k"})).await;
    let created: Value = r.json().await.expect("json");
    let key = created["key"].as_str().expect("key").to_string();
    // The server and the grants written as the admin API writes them, and
    // announced to both servers as it announces them.
    let store = Store::connect(&Settings::for_database(&db).db_options())
        .await
        .expect("store");
    let server = parse_new(
        &json!({"name": "alpha", "url": alpha.url}),
        Source::Api,
        false,
        now_ms(),
    )
    .expect("valid");
    let row = McpServerRow::seal(&server, &Keyring::new("unused: no header to seal")).expect("row");
    assert!(store.put_mcp_server(&row, false).await.expect("stored"));
    publish(&store, &Invalidation::McpServers).await;
    let all = json!({"servers": ["*"]}).to_string();
    assert!(store
        .set_user_mcp(&uid, Some(&all))
        .await
        .expect("user grant"));
    publish(&store, &Invalidation::User(uid.clone())).await;
    let hash = store
        .set_api_key_mcp(&uid, created["id"].as_str().expect("id"), Some(&all))
        .await
        .expect("key grant")
        .expect("the key");
    publish(&store, &Invalidation::ApiKey(hash)).await;
    for s in [&a, &b] {
        let url = s.url.clone();
        let k = key.clone();
        let ready = eventually(Duration::from_secs(5), || {
            let mut m = Mcp::at(format!("{url}/mcp"), &k);
            async move {
                m.send(
                    "initialize",
                    json!({"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}),
                )
                .await
                .status()
                    == StatusCode::OK
            }
        })
        .await;
        assert!(ready.is_some(), "{url} did not take the grants");
    }

    // Opened on A, used on B.
    let mut on_a = Mcp::at(format!("{}/mcp", a.url), &key);
    on_a.initialize().await;
    let mut on_b = Mcp::at(format!("{}/mcp", b.url), &key);
    on_b.session = on_a.session.clone();
    let v = on_b.call("alpha__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(v["result"]["content"][0]["text"], "3");

    // The user's grant withdrawn (and announced): B refuses the tool within a second.
    assert!(store.set_user_mcp(&uid, None).await.expect("user grant"));
    publish(&store, &Invalidation::User(uid.clone())).await;
    let took = eventually(Duration::from_secs(1), || {
        let mut m = Mcp::at(format!("{}/mcp", b.url), &key);
        m.session = on_a.session.clone();
        async move {
            let v = m.call("alpha__add", json!({"a": 1, "b": 2})).await;
            v["error"]["message"] == "Unknown tool: alpha__add"
        }
    })
    .await;
    assert!(took.is_some(), "the revocation did not reach B within 1 s");

    // DELETE on A: B refuses the session within a second.
    let r = c
        .delete(format!("{}/mcp", a.url))
        .bearer_auth(&key)
        .header("mcp-session-id", on_a.session.clone().expect("session"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let took = eventually(Duration::from_secs(1), || {
        let mut m = Mcp::at(format!("{}/mcp", b.url), &key);
        m.session = on_a.session.clone();
        async move {
            let r = m.send("ping", json!({})).await;
            if r.status() != StatusCode::NOT_FOUND {
                return false;
            }
            refusal(r).await.2 == "session_not_found"
        }
    })
    .await;
    assert!(
        took.is_some(),
        "the ended session still served on B after 1 s"
    );
}
