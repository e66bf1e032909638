//! The admin side of the MCP gateway through the real server: MCP servers
//! (API and `[[mcp_servers]]`), header values never shown, the `mcp` grant
//! on keys, users and agents, and the call audit's listing.

use crate::common::{api_code, spawn_app, spawn_app_with, TestApp};

use reqwest::StatusCode;
use serde_json::{json, Value};

const SECRET: &str = "Bearer up-secret-42";

async fn add(t: &TestApp, admin: &str, body: Value) -> reqwest::Response {
    t.post("/api/admin/mcp-servers", admin, &body).await
}

async fn add_ok(t: &TestApp, admin: &str, name: &str) {
    let r = add(
        t,
        admin,
        json!({"name": name, "url": "http://127.0.0.1:9/mcp"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED, "{name}");
}

/// The status, code and message of an `/api` error.
async fn refusal(r: reqwest::Response) -> (StatusCode, String, String) {
    let s = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (
        s,
        v["detail"]["code"].as_str().unwrap_or("").to_string(),
        v["detail"]["message"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test]
async fn an_mcp_server_is_added_listed_read_changed_and_deleted_without_ever_showing_header_values()
{
    let t = spawn_app().await;
    let admin = t.admin_token().await;
    let r = add(
        &t,
        &admin,
        json!({"name": "alpha", "url": "http://127.0.0.1:9001/mcp", "timeout_s": 30,
               "headers": {"X-Api-Key": "k-1", "Authorization": SECRET},
               "tools": ["get_*", "add"], "tool_classes": {"write_note": "write"}}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let text = r.text().await.expect("body");
    assert!(
        !text.contains("up-secret") && !text.contains("k-1"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["name"], "alpha");
    assert_eq!(v["url"], "http://127.0.0.1:9001/mcp");
    assert_eq!(v["transport"], "streamable_http");
    assert_eq!(v["timeout_s"], 30);
    assert_eq!(v["tools"], json!(["get_*", "add"]));
    assert_eq!(v["tool_classes"], json!({"write_note": "write"}));
    assert_eq!(v["header_names"], json!(["Authorization", "X-Api-Key"]));
    assert_eq!(v["source"], "api");
    assert!(v["created_at"].as_str().is_some_and(|s| s.ends_with('Z')));
    assert!(v.get("headers").is_none());

    add_ok(&t, &admin, "beta").await;
    let list = t
        .get("/api/admin/mcp-servers", &admin)
        .await
        .text()
        .await
        .expect("list");
    assert!(!list.contains("up-secret"), "{list}");
    let list: Value = serde_json::from_str(&list).expect("json");
    let names: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    // Defaults of a server given only a name and a URL.
    assert_eq!(list[1]["timeout_s"], 60);
    assert_eq!(list[1]["tools"], json!(["*"]));
    assert_eq!(list[1]["header_names"], json!([]));

    let one: Value = t
        .get("/api/admin/mcp-servers/alpha", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(one, v);

    // PATCH: any field but the name; headers replace them all; the rest stays.
    let r = t
        .patch(
            "/api/admin/mcp-servers/alpha",
            &admin,
            &json!({"timeout_s": 5, "headers": {"X-New": "n"}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let p: Value = r.json().await.expect("json");
    assert_eq!(p["timeout_s"], 5);
    assert_eq!(p["header_names"], json!(["X-New"]));
    assert_eq!(p["tools"], json!(["get_*", "add"]));
    assert_eq!(p["created_at"], v["created_at"]);
    let snap = t.app().mcp_servers.snapshot();
    let alpha = snap.get("alpha").expect("in the snapshot at once");
    assert_eq!(alpha.headers.get("X-New").map(String::as_str), Some("n"));
    assert_eq!(alpha.timeout_s, 5);
    // Leaving headers out keeps them (sealed values are opened and sealed again).
    let r = t
        .patch(
            "/api/admin/mcp-servers/alpha",
            &admin,
            &json!({"url": "https://mcp.example.com/mcp"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        t.app()
            .mcp_servers
            .snapshot()
            .get("alpha")
            .expect("alpha")
            .headers["X-New"],
        "n"
    );

    let r = t.delete("/api/admin/mcp-servers/alpha", &admin).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.text().await.expect("body"), "");
    assert!(t.app().mcp_servers.snapshot().get("alpha").is_none());
    let (s, code) = api_code(t.get("/api/admin/mcp-servers/alpha", &admin).await).await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::NOT_FOUND, "mcp_server_not_found")
    );
}

#[tokio::test]
async fn an_unknown_server_is_404_and_a_taken_name_is_409() {
    let t = spawn_app().await;
    let admin = t.admin_token().await;
    add_ok(&t, &admin, "alpha").await;
    let (s, code) = api_code(
        add(
            &t,
            &admin,
            json!({"name": "alpha", "url": "http://other/mcp"}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::CONFLICT, "mcp_server_exists")
    );
    for r in [
        t.get("/api/admin/mcp-servers/nope", &admin).await,
        t.patch(
            "/api/admin/mcp-servers/nope",
            &admin,
            &json!({"timeout_s": 5}),
        )
        .await,
        t.delete("/api/admin/mcp-servers/nope", &admin).await,
    ] {
        let (s, code) = api_code(r).await;
        assert_eq!(
            (s, code.as_str()),
            (StatusCode::NOT_FOUND, "mcp_server_not_found")
        );
    }
}

#[tokio::test]
async fn mcp_servers_are_for_admins_only() {
    let t = spawn_app().await;
    let (_, user) = t.user("u@example.com").await;
    for r in [
        t.get("/api/admin/mcp-servers", &user).await,
        t.post(
            "/api/admin/mcp-servers",
            &user,
            &json!({"name": "a", "url": "http://x"}),
        )
        .await,
        t.get("/api/admin/mcp/calls", &user).await,
    ] {
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
}

#[tokio::test]
async fn each_bad_field_is_a_validation_error_naming_it_and_each_limit_holds_at_the_limit() {
    let t = spawn_app().await;
    let admin = t.admin_token().await;
    let base = |extra: Value| {
        let mut b = json!({"name": "s", "url": "http://127.0.0.1:9/mcp"});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        b
    };
    let names = |n: usize, prefix: &str| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    };
    let headers = |n: usize| -> Value {
        Value::Object((0..n).map(|i| (format!("X-H{i}"), json!("v"))).collect())
    };
    // (body, accepted?, the field the refusal names)
    let cases: Vec<(Value, bool, &str)> = vec![
        (json!({"name": "a".repeat(32), "url": "http://x"}), true, ""),
        (
            json!({"name": "a".repeat(33), "url": "http://x"}),
            false,
            "'name'",
        ),
        (json!({"name": "a_b", "url": "http://x"}), false, "'name'"),
        (base(json!({"url": "ftp://x"})), false, "'url'"),
        (base(json!({"transport": "sse"})), false, "'transport'"),
        (base(json!({"timeout_s": 1})), true, ""),
        (base(json!({"timeout_s": 0})), false, "'timeout_s'"),
        (base(json!({"timeout_s": 3600})), true, ""),
        (base(json!({"timeout_s": 3601})), false, "'timeout_s'"),
        (base(json!({"headers": headers(32)})), true, ""),
        (base(json!({"headers": headers(33)})), false, "'headers'"),
        (
            base(json!({"headers": {"Bad Name": SECRET}})),
            false,
            "'Bad Name'",
        ),
        (
            base(json!({"headers": {"X-A": "a\r\nInjected: 1"}})),
            false,
            "'X-A'",
        ),
        (base(json!({"tools": names(100, "t")})), true, ""),
        (base(json!({"tools": names(101, "t")})), false, "'tools'"),
        (base(json!({"tools": [""]})), false, "'tools'"),
        (
            base(json!({"tool_classes": {"write_note": "delete"}})),
            false,
            "'tool_classes.write_note'",
        ),
    ];
    for (i, (body, ok, field)) in cases.into_iter().enumerate() {
        let r = add(&t, &admin, body.clone()).await;
        if ok {
            assert_eq!(r.status(), StatusCode::CREATED, "case {i}: {body}");
            let name = body["name"].as_str().expect("name").to_string();
            let d = t
                .delete(&format!("/api/admin/mcp-servers/{name}"), &admin)
                .await;
            assert_eq!(d.status(), StatusCode::NO_CONTENT);
        } else {
            let (s, code, message) = refusal(r).await;
            assert_eq!(
                (s, code.as_str()),
                (StatusCode::BAD_REQUEST, "validation_error"),
                "case {i}: {body}"
            );
            assert!(
                message.contains(field),
                "case {i}: {message:?} should name {field}"
            );
            assert!(!message.contains("up-secret"), "case {i}: {message}");
        }
    }
    // PATCH checks the same, and refuses a new name.
    add_ok(&t, &admin, "alpha").await;
    let (s, code, message) = refusal(
        t.patch(
            "/api/admin/mcp-servers/alpha",
            &admin,
            &json!({"timeout_s": 3601}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::BAD_REQUEST, "validation_error")
    );
    assert!(message.contains("'timeout_s'"));
    let (s, _, message) = refusal(
        t.patch(
            "/api/admin/mcp-servers/alpha",
            &admin,
            &json!({"name": "beta"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(message.contains("'name'"));
}

#[tokio::test]
async fn servers_from_the_config_file_are_applied_at_start_with_source_config() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[mcp_servers]]
name = "alpha"
url = "http://127.0.0.1:9001/mcp"
timeout_s = 60
headers = {{ Authorization = "{SECRET}" }}
tools = ["*"]
tool_classes = {{ write_note = "write" }}
"#
        ),
    )
    .expect("write");
    let p = path.clone();
    let mut t = spawn_app_with(move |s| s.config_file = Some(p)).await;
    let admin = t.admin_token().await;
    let v: Value = t
        .get("/api/admin/mcp-servers/alpha", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["source"], "config");
    assert_eq!(v["header_names"], json!(["Authorization"]));
    assert_eq!(v["tool_classes"], json!({"write_note": "write"}));
    let snap = t.app().mcp_servers.snapshot();
    assert_eq!(
        snap.get("alpha").expect("loaded at start").headers["Authorization"],
        SECRET
    );
    let stored: Option<String> =
        sqlx::query_scalar("SELECT headers FROM mcp_servers WHERE name = 'alpha'")
            .fetch_one(&t.app().store.pool)
            .await
            .expect("row");
    assert!(!stored.expect("sealed").contains("up-secret"));

    // The file wins on the next start (an upsert), and the server survives a restart.
    std::fs::write(
        &path,
        std::fs::read_to_string(&path)
            .expect("read")
            .replace("timeout_s = 60", "timeout_s = 7"),
    )
    .expect("write");
    t.restart().await;
    let admin = t.admin_token().await;
    let v: Value = t
        .get("/api/admin/mcp-servers/alpha", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["timeout_s"], 7);
    assert_eq!(
        t.app()
            .mcp_servers
            .snapshot()
            .get("alpha")
            .expect("alpha")
            .headers["Authorization"],
        SECRET
    );
}

/// The key's view through `GET /api/api-keys`.
async fn key_view(t: &TestApp, token: &str) -> Value {
    let keys: Value = t
        .get("/api/api-keys", token)
        .await
        .json()
        .await
        .expect("json");
    keys[0].clone()
}

#[tokio::test]
async fn a_key_grant_is_set_on_create_and_patch_and_shown_as_stored() {
    let t = spawn_app().await;
    let admin = t.admin_token().await;
    add_ok(&t, &admin, "alpha").await;
    add_ok(&t, &admin, "beta").await;
    let (_, user) = t.user("u@example.com").await;

    // No grant by default: null.
    let r = t
        .post("/api/api-keys", &user, &json!({"name": "plain"}))
        .await;
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["mcp"], Value::Null);
    let id = v["id"].as_str().expect("id").to_string();
    let r = t.delete(&format!("/api/api-keys/{id}"), &user).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    let grant = json!({"servers": ["alpha"], "tools": {"alpha": ["add", "get_*"]}});
    let r = t
        .post("/api/api-keys", &user, &json!({"name": "k", "mcp": grant}))
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["mcp"], grant);
    let id = v["id"].as_str().expect("id").to_string();
    assert_eq!(key_view(&t, &user).await["mcp"], grant);

    // `tools` absent when it was not given.
    let r = t
        .patch(
            &format!("/api/api-keys/{id}"),
            &user,
            &json!({"mcp": {"servers": ["*"]}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.expect("json")["mcp"],
        json!({"servers": ["*"]})
    );
    // Left out: kept. Null: removed.
    let r = t
        .patch(
            &format!("/api/api-keys/{id}"),
            &user,
            &json!({"limits": null}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.expect("json")["mcp"],
        json!({"servers": ["*"]})
    );
    let r = t
        .patch(&format!("/api/api-keys/{id}"), &user, &json!({"mcp": null}))
        .await;
    assert_eq!(r.json::<Value>().await.expect("json")["mcp"], Value::Null);

    // An unknown server: 400 mcp_server_not_found, nothing written.
    let (s, code, message) = refusal(
        t.patch(
            &format!("/api/api-keys/{id}"),
            &user,
            &json!({"mcp": {"servers": ["gamma"]}, "limits": {"requests_per_minute": 5}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::BAD_REQUEST, "mcp_server_not_found")
    );
    assert!(message.contains("gamma"), "{message}");
    assert_eq!(
        key_view(&t, &user).await["limits"]["requests_per_minute"],
        Value::Null
    );
    let (s, code) = api_code(
        t.post(
            "/api/api-keys",
            &user,
            &json!({"name": "x", "mcp": {"servers": ["gamma"]}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::BAD_REQUEST, "mcp_server_not_found")
    );

    // 1 to 100 patterns per server.
    let patterns = |n: usize| -> Vec<String> { (0..n).map(|i| format!("t{i}_*")).collect() };
    for (n, ok) in [(1, true), (100, true), (101, false), (0, false)] {
        let body = json!({"mcp": {"servers": ["alpha"], "tools": {"alpha": patterns(n)}}});
        let r = t.patch(&format!("/api/api-keys/{id}"), &user, &body).await;
        if ok {
            assert_eq!(r.status(), StatusCode::OK, "{n} patterns");
            assert_eq!(
                r.json::<Value>().await.expect("json")["mcp"]["tools"]["alpha"]
                    .as_array()
                    .map(Vec::len),
                Some(n)
            );
        } else {
            let (s, code, message) = refusal(r).await;
            assert_eq!(
                (s, code.as_str()),
                (StatusCode::BAD_REQUEST, "validation_error"),
                "{n} patterns"
            );
            assert!(message.contains("mcp.tools.alpha"), "{message}");
        }
    }
    // Not the owner's key: 404, as for limits.
    let (_, other) = t.user("o@example.com").await;
    let (s, code) = api_code(
        t.patch(
            &format!("/api/api-keys/{id}"),
            &other,
            &json!({"mcp": null}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::NOT_FOUND, "api_key_not_found")
    );
}

#[tokio::test]
async fn a_grant_change_reaches_the_credentials_cache_at_once() {
    let t = spawn_app().await;
    let admin = t.admin_token().await;
    add_ok(&t, &admin, "alpha").await;
    let (uid, user) = t.user("u@example.com").await;
    let key = t
        .api_key(&user, json!({"name": "k", "mcp": {"servers": ["alpha"]}}))
        .await;
    // The key as the hot path sees it (the cache is filled on first use).
    let hash = gatehouse::secrets::sha256_hex(&key);
    let cached = |t: &TestApp| {
        let app = t.app().clone();
        let hash = hash.clone();
        async move {
            app.auth
                .api_keys
                .get_or_load(&hash, || async {
                    Ok::<_, sqlx::Error>(
                        app.store
                            .api_key_by_hash(&hash)
                            .await?
                            .map(|r| std::sync::Arc::new(gatehouse::auth::KeyInfo::from_row(&r))),
                    )
                })
                .await
                .expect("load")
                .expect("live key")
        }
    };
    assert_eq!(
        cached(&t).await.mcp.as_ref().map(|g| g.servers.clone()),
        Some(vec!["alpha".to_string()])
    );
    let keys: Value = t
        .get("/api/api-keys", &user)
        .await
        .json()
        .await
        .expect("json");
    let id = keys[0]["id"].as_str().expect("id").to_string();
    let r = t
        .patch(&format!("/api/api-keys/{id}"), &user, &json!({"mcp": null}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        cached(&t).await.mcp,
        None,
        "evicted by the change, read again"
    );

    // The user's grant lives in the cached user.
    assert_eq!(
        t.app().user(&uid).await.expect("db").expect("user").mcp,
        None
    );
    let r = t
        .patch(
            &format!("/api/admin/users/{uid}"),
            &admin,
            &json!({"mcp": {"servers": ["*"]}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let u = t.app().user(&uid).await.expect("db").expect("user");
    assert_eq!(
        u.mcp.as_ref().map(|g| g.servers.clone()),
        Some(vec!["*".to_string()])
    );
}

#[tokio::test]
async fn a_user_grant_is_set_by_the_admin_and_shown_as_stored() {
    let t = spawn_app().await;
    let admin = t.admin_token().await;
    add_ok(&t, &admin, "alpha").await;
    let (uid, _) = t.user("u@example.com").await;
    let users: Value = t
        .get("/api/admin/users", &admin)
        .await
        .json()
        .await
        .expect("json");
    let me = users
        .as_array()
        .expect("users")
        .iter()
        .find(|u| u["id"] == uid.as_str())
        .expect("user")
        .clone();
    assert_eq!(me["mcp"], Value::Null);

    let grant = json!({"servers": ["alpha"], "tools": {"alpha": ["read_*"]}});
    let r = t
        .patch(
            &format!("/api/admin/users/{uid}"),
            &admin,
            &json!({"mcp": grant}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.expect("json")["mcp"], grant);
    let (s, code, message) = refusal(
        t.patch(
            &format!("/api/admin/users/{uid}"),
            &admin,
            &json!({"mcp": {"servers": ["nope"]}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::BAD_REQUEST, "mcp_server_not_found")
    );
    assert!(message.contains("mcp.servers"), "{message}");
    let r = t
        .patch(
            &format!("/api/admin/users/{uid}"),
            &admin,
            &json!({"is_admin": false}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.expect("json")["mcp"],
        grant,
        "kept when left out"
    );
    let r = t
        .patch(
            &format!("/api/admin/users/{uid}"),
            &admin,
            &json!({"mcp": null}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.expect("json")["mcp"], Value::Null);
}

async fn with_model(t: &TestApp) {
    t.add_model("openai", "http://127.0.0.1:9/v1", "chat-1", "chat", "up")
        .await;
}

#[tokio::test]
async fn an_agent_grant_is_set_on_create_and_patch_and_shown_as_stored() {
    let t = spawn_app().await;
    with_model(&t).await;
    let admin = t.admin_token().await;
    add_ok(&t, &admin, "alpha").await;
    let r = t
        .post(
            "/api/admin/agents",
            &admin,
            &json!({"address": "plain", "name": "P", "model": "chat-1"}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.expect("json")["mcp"], Value::Null);

    let grant = json!({"servers": ["alpha"]});
    let r = t
        .post(
            "/api/admin/agents",
            &admin,
            &json!({"address": "support", "name": "S", "model": "chat-1", "mcp": grant}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.json::<Value>().await.expect("json")["mcp"], grant);
    let v: Value = t
        .get("/api/admin/agents/support", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["mcp"], grant);
    assert_eq!(
        t.app()
            .agent("support")
            .await
            .expect("db")
            .expect("agent")
            .mcp
            .as_ref()
            .map(|g| g.servers.len()),
        Some(1)
    );

    let grant2 = json!({"servers": ["*"], "tools": {"alpha": ["get_*"]}});
    let r = t
        .patch("/api/admin/agents/support", &admin, &json!({"mcp": grant2}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.expect("json")["mcp"], grant2);
    let cached = t.app().agent("support").await.expect("db").expect("agent");
    assert_eq!(
        cached.mcp.as_ref().map(|g| g.servers.clone()),
        Some(vec!["*".to_string()])
    );
    let r = t
        .patch(
            "/api/admin/agents/support",
            &admin,
            &json!({"name": "Support"}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.expect("json")["mcp"],
        grant2,
        "kept when left out"
    );

    let (s, code) = api_code(
        t.post(
            "/api/admin/agents",
            &admin,
            &json!({"address": "x", "name": "X", "model": "chat-1", "mcp": {"servers": ["nope"]}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::BAD_REQUEST, "mcp_server_not_found")
    );
    let (s, code) = api_code(
        t.patch(
            "/api/admin/agents/support",
            &admin,
            &json!({"mcp": {"servers": ["nope"]}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, code.as_str()),
        (StatusCode::BAD_REQUEST, "mcp_server_not_found")
    );
    let r = t
        .patch("/api/admin/agents/support", &admin, &json!({"mcp": null}))
        .await;
    assert_eq!(r.json::<Value>().await.expect("json")["mcp"], Value::Null);
}

#[tokio::test]
async fn an_agent_in_the_config_file_gets_its_mcp_grant() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        r#"
[[providers]]
name = "local"
type = "openai"
base_url = "http://127.0.0.1:9/v1"

[[models]]
id = "chat-1"
kind = "chat"
provider = "local"
upstream_model = "up"

[[mcp_servers]]
name = "alpha"
url = "http://127.0.0.1:9001/mcp"

[[agents]]
address = "helpdesk"
name = "Helpdesk"
model = "chat-1"
mcp = { servers = ["alpha"], tools = { alpha = ["get_*"] } }
"#,
    )
    .expect("write");
    let p = path.clone();
    let t = spawn_app_with(move |s| s.config_file = Some(p)).await;
    let admin = t.admin_token().await;
    let v: Value = t
        .get("/api/admin/agents/helpdesk", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(
        v["mcp"],
        json!({"servers": ["alpha"], "tools": {"alpha": ["get_*"]}})
    );
}

#[tokio::test]
async fn deleting_a_server_removes_it_from_every_grant_and_a_new_one_of_that_name_is_not_granted() {
    let t = spawn_app().await;
    with_model(&t).await;
    let admin = t.admin_token().await;
    add_ok(&t, &admin, "alpha").await;
    add_ok(&t, &admin, "beta").await;
    let (uid, user) = t.user("u@example.com").await;
    t.api_key(
        &user,
        json!({"name": "k", "mcp": {"servers": ["alpha"], "tools": {"alpha": ["x"]}}}),
    )
    .await;
    let r = t
        .patch(
            &format!("/api/admin/users/{uid}"),
            &admin,
            &json!({"mcp": {"servers": ["alpha", "beta"]}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = t
        .post("/api/admin/agents", &admin, &json!({"address": "support", "name": "S", "model": "chat-1", "mcp": {"servers": ["*"]}}))
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    // Fill the caches, so the test shows they are dropped.
    let _ = t.app().user(&uid).await;
    let _ = t.app().agent("support").await;

    let r = t.delete("/api/admin/mcp-servers/alpha", &admin).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        key_view(&t, &user).await["mcp"],
        json!({"servers": [], "tools": {}})
    );
    let users: Value = t
        .get("/api/admin/users", &admin)
        .await
        .json()
        .await
        .expect("json");
    let u = users
        .as_array()
        .expect("users")
        .iter()
        .find(|u| u["id"] == uid.as_str())
        .expect("user")
        .clone();
    assert_eq!(u["mcp"], json!({"servers": ["beta"]}));
    assert_eq!(
        t.app()
            .user(&uid)
            .await
            .expect("db")
            .expect("user")
            .mcp
            .as_ref()
            .map(|g| g.servers.clone()),
        Some(vec!["beta".to_string()])
    );
    let a: Value = t
        .get("/api/admin/agents/support", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(
        a["mcp"],
        json!({"servers": ["*"]}),
        "\"*\" stays: it grants later servers"
    );

    // A later server of the same name is granted only by "*".
    add_ok(&t, &admin, "alpha").await;
    let user_now = t.app().user(&uid).await.expect("db").expect("user");
    let agent_now = t.app().agent("support").await.expect("db").expect("agent");
    let g = gatehouse::mcp::Grants {
        user: user_now.mcp.as_ref(),
        credential: agent_now.mcp.as_ref(),
    };
    assert!(!g.server_granted("alpha"));
    assert!(agent_now
        .mcp
        .as_ref()
        .is_some_and(|m| m.names_server("alpha")));
}

fn record(
    at: i64,
    server: &str,
    decision: gatehouse::mcp::audit::Decision,
) -> gatehouse::mcp::McpCallRecord {
    let mut r = gatehouse::mcp::McpCallRecord::new(
        "add",
        &format!("{server}__add"),
        decision,
        "sha256:00".into(),
    );
    r.created_at = at;
    r.server = Some(server.into());
    r.user_email = Some("u@example.com".into());
    r
}

#[tokio::test]
async fn the_call_audit_lists_newest_first_in_pages_with_filters() {
    use gatehouse::mcp::audit::Decision;
    let t = spawn_app().await;
    let admin = t.admin_token().await;
    let base = 1_800_000_000_000i64; // 2027-01-15T08:00:00Z
    let mut records = Vec::new();
    for i in 0..5 {
        records.push(record(
            base + i * 1000,
            if i % 2 == 0 { "alpha" } else { "beta" },
            if i == 4 {
                Decision::Denied
            } else {
                Decision::Allowed
            },
        ));
    }
    t.app()
        .store
        .insert_mcp_calls(&records)
        .await
        .expect("insert");

    let page: Value = t
        .get("/api/admin/mcp/calls", &admin)
        .await
        .json()
        .await
        .expect("json");
    let calls = page["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 5);
    assert_eq!(page["next"], Value::Null);
    assert_eq!(calls[0]["id"], records[4].id.as_str(), "newest first");
    assert_eq!(calls[0]["decision"], "denied");
    assert_eq!(calls[0]["user"], "u@example.com");
    assert_eq!(calls[0]["exposed_name"], "alpha__add");
    assert!(calls[0].get("arguments").is_none());

    // Pages of 2 by `next`.
    let mut seen = Vec::new();
    let mut url = "/api/admin/mcp/calls?limit=2".to_string();
    loop {
        let p: Value = t.get(&url, &admin).await.json().await.expect("json");
        seen.extend(
            p["calls"]
                .as_array()
                .expect("calls")
                .iter()
                .map(|c| c["id"].as_str().unwrap_or("").to_string()),
        );
        match p["next"].as_str() {
            Some(n) => url = format!("/api/admin/mcp/calls?limit=2&after={n}"),
            None => break,
        }
    }
    let want: Vec<String> = records.iter().rev().map(|r| r.id.clone()).collect();
    assert_eq!(seen, want);

    let count = |q: &str| {
        let url = format!("/api/admin/mcp/calls?{q}");
        let t = &t;
        let admin = admin.clone();
        async move {
            let r = t.get(&url, &admin).await;
            assert_eq!(r.status(), StatusCode::OK, "{url}");
            r.json::<Value>().await.expect("json")["calls"]
                .as_array()
                .map_or(0, Vec::len)
        }
    };
    assert_eq!(count("server=beta").await, 2);
    assert_eq!(count("decision=denied").await, 1);
    assert_eq!(count("user=U@example.com").await, 5);
    assert_eq!(count("user=other@example.com").await, 0);
    // from inclusive, to exclusive.
    assert_eq!(
        count("from=2027-01-15T08:00:01Z&to=2027-01-15T08:00:03Z").await,
        2
    );
    assert_eq!(count("limit=1").await, 1);
    assert_eq!(count("limit=1000").await, 5);
    for (q, field) in [
        ("limit=0", "'limit'"),
        ("limit=1001", "'limit'"),
        ("decision=maybe", "'decision'"),
        ("from=yesterday", "'from'"),
        ("after=nonsense", "'after'"),
        ("server=Bad_Name", "'server'"),
    ] {
        let (s, code, message) =
            refusal(t.get(&format!("/api/admin/mcp/calls?{q}"), &admin).await).await;
        assert_eq!(
            (s, code.as_str()),
            (StatusCode::BAD_REQUEST, "validation_error"),
            "{q}"
        );
        assert!(message.contains(field), "{q}: {message}");
    }
}

#[tokio::test]
async fn audit_records_survive_a_restart() {
    let mut t = spawn_app().await;
    let r = record(
        gatehouse::store::now_ms(),
        "alpha",
        gatehouse::mcp::audit::Decision::Allowed,
    );
    t.app()
        .store
        .insert_mcp_calls(std::slice::from_ref(&r))
        .await
        .expect("insert");
    t.restart().await;
    let admin = t.admin_token().await;
    let page: Value = t
        .get("/api/admin/mcp/calls", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(page["calls"][0]["id"], r.id.as_str());
}
