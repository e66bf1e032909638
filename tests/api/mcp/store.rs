//! The MCP store on a real database (SQLite, or PostgreSQL when
//! GATEHOUSE_TEST_DATABASE_URL says so): sealed headers, grants cleaned on a
//! server's deletion, the call audit's filters and pages, ended sessions.

use crate::common;

use gatehouse::mcp::audit::{CallFilter, Decision, McpCallRecord};
use gatehouse::mcp::servers::{parse_new, Source};
use gatehouse::mcp::store::McpServerRow;
use gatehouse::mcp::McpGrant;
use serde_json::json;

fn server(name: &str, headers: serde_json::Value) -> gatehouse::mcp::McpServer {
    parse_new(
        &json!({"name": name, "url": "http://127.0.0.1:9/mcp", "headers": headers,
                "tool_classes": {"write_note": "write"}}),
        Source::Api,
        false,
        1000,
    )
    .expect("valid")
}

#[tokio::test]
async fn header_values_are_sealed_at_rest_and_opened_for_upstream_use() {
    let t = common::spawn_app().await;
    let app = t.app();
    let s = server("alpha", json!({"Authorization": "Bearer up-secret-123"}));
    let row = McpServerRow::seal(&s, &app.keyring).expect("seal");
    assert!(app.store.put_mcp_server(&row, false).await.expect("insert"));
    assert!(!app.store.put_mcp_server(&row, false).await.expect("taken"));

    let (stored, names): (Option<String>, String) =
        sqlx::query_as("SELECT headers, header_names FROM mcp_servers WHERE name = 'alpha'")
            .fetch_one(&app.store.pool)
            .await
            .expect("row");
    let stored = stored.expect("sealed headers");
    assert!(!stored.contains("up-secret-123"), "{stored}");
    assert!(gatehouse::secrets::Keyring::is_sealed(&stored));
    assert_eq!(names, r#"["Authorization"]"#);

    let opened = app
        .store
        .list_mcp_servers_opened(&app.keyring)
        .await
        .expect("list");
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].headers["Authorization"], "Bearer up-secret-123");
    assert_eq!(opened[0], s);
}

#[tokio::test]
async fn a_server_change_reaches_the_in_memory_snapshot_on_invalidation() {
    let t = common::spawn_app().await;
    let app = t.app();
    assert!(app.mcp_servers.snapshot().get("alpha").is_none());
    let row = McpServerRow::seal(&server("alpha", json!({})), &app.keyring).expect("seal");
    app.store.put_mcp_server(&row, false).await.expect("insert");
    app.invalidate(gatehouse::runtime::Invalidation::McpServers)
        .await;
    let snap = app.mcp_servers.snapshot();
    assert_eq!(
        snap.get("alpha").map(|s| s.url.as_str()),
        Some("http://127.0.0.1:9/mcp")
    );
    assert_eq!(snap.all().len(), 1);
}

#[tokio::test]
async fn deleting_a_server_removes_its_name_from_every_grant() {
    let t = common::spawn_app().await;
    let app = t.app();
    for name in ["alpha", "beta"] {
        let row = McpServerRow::seal(&server(name, json!({})), &app.keyring).expect("seal");
        app.store.put_mcp_server(&row, false).await.expect("insert");
    }
    let (uid, token) = t.user("u@example.com").await;
    t.api_key(&token, json!({"name": "k"})).await;
    let key_id: String = sqlx::query_scalar("SELECT id FROM api_keys WHERE user_id = $1")
        .bind(&uid)
        .fetch_one(&app.store.pool)
        .await
        .expect("key");
    let both = json!({"servers": ["alpha", "beta"], "tools": {"alpha": ["get_*"]}}).to_string();
    let star = json!({"servers": ["*"]}).to_string();
    app.store
        .set_user_mcp(&uid, Some(&star))
        .await
        .expect("user grant");
    app.store
        .set_api_key_mcp(&uid, &key_id, Some(&both))
        .await
        .expect("key grant")
        .expect("live key");

    let inv = app
        .store
        .delete_mcp_server("alpha")
        .await
        .expect("delete")
        .expect("existed");
    assert!(inv.contains(&gatehouse::runtime::Invalidation::McpServers));
    assert_eq!(
        inv.len(),
        2,
        "the servers and the one key whose grant changed: {inv:?}"
    );
    assert!(app
        .store
        .delete_mcp_server("alpha")
        .await
        .expect("again")
        .is_none());

    let key_grant: Option<String> = sqlx::query_scalar("SELECT mcp FROM api_keys WHERE id = $1")
        .bind(&key_id)
        .fetch_one(&app.store.pool)
        .await
        .expect("key");
    let g = McpGrant::from_db_or_closed(key_grant.as_deref(), "k").expect("grant");
    assert_eq!(
        serde_json::to_value(&g).expect("json"),
        json!({"servers": ["beta"], "tools": {}})
    );
    // "*" is left as it was: it grants later servers of any name.
    let user_grant: Option<String> = sqlx::query_scalar("SELECT mcp FROM users WHERE id = $1")
        .bind(&uid)
        .fetch_one(&app.store.pool)
        .await
        .expect("user");
    assert_eq!(user_grant.as_deref(), Some(star.as_str()));
}

fn record(at: i64, server: &str, decision: Decision, user: &str) -> McpCallRecord {
    let mut r = McpCallRecord::new(
        "add",
        &format!("{server}__add"),
        decision,
        "sha256:00".into(),
    );
    r.created_at = at;
    r.server = Some(server.into());
    r.user_email = Some(user.into());
    r.agent = (user == "b@x.io").then(|| "support".to_string());
    r.api_key_id = (user == "a@x.io").then(|| "k1".to_string());
    r
}

#[tokio::test]
async fn audit_records_list_newest_first_with_filters_and_pages() {
    let t = common::spawn_app().await;
    let store = &t.app().store;
    let mut all = Vec::new();
    for i in 0..10 {
        let (server, decision, user) = match i % 3 {
            0 => ("alpha", Decision::Allowed, "a@x.io"),
            1 => ("beta", Decision::Denied, "b@x.io"),
            _ => ("alpha", Decision::RateLimited, "a@x.io"),
        };
        all.push(record(1_000 + i / 2, server, decision, user));
    }
    store.insert_mcp_calls(&all).await.expect("insert");

    let base = CallFilter {
        limit: 100,
        ..CallFilter::default()
    };
    let got = store.list_mcp_calls(&base).await.expect("list");
    assert_eq!(got.len(), 10);
    let mut want = all.clone();
    want.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    assert_eq!(got, want, "newest first, every field read back");

    // Pages of 3 by cursor cover every record once, in order.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let f = CallFilter {
            limit: 3,
            after: after.clone(),
            ..CallFilter::default()
        };
        let mut page = store.list_mcp_calls(&f).await.expect("page");
        let more = page.len() > 3;
        page.truncate(3);
        after = page.last().map(|r| (r.created_at, r.id.clone()));
        paged.extend(page);
        if !more {
            break;
        }
    }
    assert_eq!(paged, want);

    let only = |f: CallFilter| async move { store.list_mcp_calls(&f).await.expect("list") };
    let beta = only(CallFilter {
        server: Some("beta".into()),
        ..base.clone()
    })
    .await;
    assert_eq!(beta.len(), 3);
    assert!(beta.iter().all(|r| r.server.as_deref() == Some("beta")));
    let denied = only(CallFilter {
        decision: Some(Decision::Denied),
        ..base.clone()
    })
    .await;
    assert_eq!(denied.len(), 3);
    let a = only(CallFilter {
        user: Some("a@x.io".into()),
        ..base.clone()
    })
    .await;
    assert_eq!(a.len(), 7);
    let agent = only(CallFilter {
        agent: Some("support".into()),
        ..base.clone()
    })
    .await;
    assert_eq!(agent.len(), 3);
    let key = only(CallFilter {
        api_key: Some("k1".into()),
        ..base.clone()
    })
    .await;
    assert_eq!(key.len(), 7);
    // from inclusive, to exclusive: created_at 1001 and 1002 (4 records).
    let window = only(CallFilter {
        from: Some(1001),
        to: Some(1003),
        ..base.clone()
    })
    .await;
    assert_eq!(window.len(), 4);
    assert!(window.iter().all(|r| (1001..1003).contains(&r.created_at)));
}

#[tokio::test]
async fn an_ended_session_is_seen_until_its_lifetime_runs_out() {
    let t = common::spawn_app().await;
    let store = &t.app().store;
    let now = gatehouse::store::now_ms();
    // Ids of this run: on PostgreSQL the table is shared with every other
    // test's server, whose purge tick may forget an expired one at any time.
    let (h1, h2) = (format!("h1-{now}"), format!("h2-{now}"));
    assert!(!store.mcp_session_ended(&h1).await.expect("check"));
    store.end_mcp_session(&h1, now + 60_000).await.expect("end");
    store
        .end_mcp_session(&h1, now + 60_000)
        .await
        .expect("ending twice is fine");
    store.end_mcp_session(&h2, now - 1).await.expect("end");
    assert!(store.mcp_session_ended(&h1).await.expect("check"));
    let since = store
        .mcp_sessions_ended_since(now - 1000)
        .await
        .expect("since");
    assert_eq!(since.iter().filter(|(h, _, _)| *h == h1).count(), 1);
    store.purge_mcp_ended_sessions(now).await.expect("purge");
    assert!(store.mcp_session_ended(&h1).await.expect("check"));
    assert!(!store.mcp_session_ended(&h2).await.expect("check"));
}
