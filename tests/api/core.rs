//! Issue 2: the server, users and login, API keys, admin API, errors, limits.

use crate::common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn health_ready_version_and_request_id_are_served() {
    let app = spawn_app().await;
    let r = app.client.get(app.u("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-request-id"));
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    let r = app.client.get(app.u("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = app
        .client
        .get(app.u("/api/version"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "abc-123");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
}

#[tokio::test]
async fn the_version_served_is_the_newest_release_of_the_changelog() {
    let app = spawn_app().await;
    let v: Value = app
        .client
        .get(app.u("/api/version"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["version"], newest_release());
    let doc: Value = app
        .client
        .get(app.u("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["version"], newest_release());
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_status() {
    let app = spawn_app().await;
    app.client.get(app.u("/healthz")).send().await.unwrap();
    app.login(ADMIN_EMAIL, "wrong-password").await;
    let text = app
        .client
        .get(app.u("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(
            r#"gatehouse_http_requests_total{method="GET",route="/healthz",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"route="/api/auth/jwt/login",status="400"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_http_request_duration_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_usage_records_dropped_total 0"),
        "{text}"
    );
}

#[tokio::test]
async fn openapi_document_is_3_1_and_lists_the_routes() {
    let app = spawn_app().await;
    let v = app.openapi().await;
    assert!(v["openapi"].as_str().unwrap().starts_with("3.1"));
    for p in [
        "/api/auth/jwt/login",
        "/api/api-keys",
        "/api/admin/users",
        "/api/admin/providers",
        "/v1/models",
    ] {
        assert!(v["paths"].get(p).is_some(), "missing {p}");
    }
}

#[tokio::test]
async fn login_returns_a_bearer_token_and_me_describes_the_user() {
    let app = spawn_app().await;
    let r = app.login("ADMIN@Example.com", ADMIN_PASSWORD).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["token_type"], "bearer");
    assert_eq!(v["expires_in"], 3600);
    let token = v["access_token"].as_str().unwrap();
    let me: Value = app.get("/api/users/me", token).await.json().await.unwrap();
    assert_eq!(me["email"], ADMIN_EMAIL);
    assert_eq!(me["is_admin"], true);
    assert!(me["id"].is_string() && me["created_at"].is_string());
}

#[tokio::test]
async fn wrong_password_unknown_user_and_disabled_user_are_indistinguishable() {
    let app = spawn_app().await;
    let (id, _) = app.user("dis@example.com").await;
    let admin = app.admin_token().await;
    assert_eq!(
        app.patch(
            &format!("/api/admin/users/{id}"),
            &admin,
            &json!({"is_active": false})
        )
        .await
        .status(),
        200
    );
    let mut bodies = vec![];
    for (e, p) in [
        (ADMIN_EMAIL, "wrong-password"),
        ("nobody@example.com", "whatever-1"),
        ("dis@example.com", "user-password-1"),
    ] {
        let r = app.login(e, p).await;
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["detail"]["code"], "login_bad_credentials");
        bodies.push(v);
    }
    assert_eq!(bodies[0], bodies[1]);
    assert_eq!(bodies[1], bodies[2]);
}

#[tokio::test]
async fn login_rejects_empty_form_missing_fields_and_json_bodies() {
    let app = spawn_app().await;
    let r = app
        .client
        .post(app.u("/api/auth/jwt/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    let r = app
        .client
        .post(app.u("/api/auth/jwt/login"))
        .form(&[("username", ADMIN_EMAIL)])
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["detail"]["code"], "validation_error");
    let r = app
        .client
        .post(app.u("/api/auth/jwt/login"))
        .json(&json!({"username": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
}

#[tokio::test]
async fn repeated_failures_are_throttled_with_retry_after() {
    let app = spawn_app_with(|s| s.login_max_failures = 3).await;
    app.user("other@example.com").await;
    for _ in 0..3 {
        assert_eq!(app.login(ADMIN_EMAIL, "wrong-password").await.status(), 400);
    }
    let r = app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await;
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    assert_eq!(
        r.json::<Value>().await.unwrap()["detail"]["code"],
        "too_many_attempts"
    );
    // Another account is not locked by these failures.
    assert_eq!(
        app.login("other@example.com", "user-password-1")
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn bad_login_tokens_are_refused_with_their_codes() {
    let app = spawn_app_with(|s| s.login_token_ttl = 1).await;
    let token = app.admin_token().await;
    assert_eq!(app.get("/api/users/me", &token).await.status(), 200);
    // Forged signature: same header and payload, another signature.
    let mut parts: Vec<&str> = token.split('.').collect();
    let forged_sig = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    parts[2] = forged_sig;
    let forged = parts.join(".");
    assert_eq!(
        api_code(app.get("/api/users/me", &forged).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".into())
    );
    assert_eq!(
        api_code(app.get("/api/users/me", "garbage").await).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".into())
    );
    let r = app.client.get(app.u("/api/users/me")).send().await.unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".into())
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        api_code(app.get("/api/users/me", &token).await).await,
        (StatusCode::UNAUTHORIZED, "token_expired".into())
    );
}

#[tokio::test]
async fn api_keys_are_not_login_tokens_and_login_tokens_are_not_api_keys() {
    let app = spawn_app().await;
    let token = app.admin_token().await;
    let key = app.api_key(&token, json!({"name": "k"})).await;
    assert_eq!(
        api_code(app.get("/api/users/me", &key).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".into())
    );
    assert_eq!(
        v1_code(app.get("/v1/models", &token).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_api_key".into())
    );
}

#[tokio::test]
async fn login_tokens_survive_a_restart() {
    let mut app = spawn_app().await;
    let token = app.admin_token().await;
    app.restart().await;
    assert_eq!(app.get("/api/users/me", &token).await.status(), 200);
}

#[tokio::test]
async fn api_key_lifecycle_create_list_use_delete() {
    let app = spawn_app().await;
    let (_, token) = app.user("keys@example.com").await;
    let r = app
        .post("/api/api-keys", &token, &json!({"name": "backend"}))
        .await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let key = created["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("gtk_"));
    for f in ["id", "name", "created_at", "expires_at", "models"] {
        assert!(created.get(f).is_some(), "missing {f}");
    }
    let list: Value = app.get("/api/api-keys", &token).await.json().await.unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(list[0].get("key").is_none(), "secret must not be listed");
    assert!(!list.to_string().contains(&key));
    assert_eq!(app.get("/v1/models", &key).await.status(), 200);
    let id = created["id"].as_str().unwrap();
    // Another user cannot delete it.
    let (_, other) = app.user("other@example.com").await;
    assert_eq!(
        api_code(app.delete(&format!("/api/api-keys/{id}"), &other).await).await,
        (StatusCode::NOT_FOUND, "api_key_not_found".into())
    );
    assert_eq!(
        app.delete(&format!("/api/api-keys/{id}"), &token)
            .await
            .status(),
        204
    );
    assert_eq!(
        v1_code(app.get("/v1/models", &key).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_api_key".into())
    );
    assert_eq!(
        api_code(app.delete(&format!("/api/api-keys/{id}"), &token).await).await,
        (StatusCode::NOT_FOUND, "api_key_not_found".into())
    );
}

#[tokio::test]
async fn only_a_hash_of_the_key_is_stored() {
    let app = spawn_app().await;
    let token = app.admin_token().await;
    let key = app.api_key(&token, json!({"name": "k"})).await;
    let stored: Vec<String> = sqlx::query_scalar("SELECT key_hash FROM api_keys")
        .fetch_all(&app.app().store.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_ne!(stored[0], key);
    assert!(!stored[0].contains(&key[4..]));
}

#[tokio::test]
async fn expired_api_key_is_refused() {
    let app = spawn_app().await;
    let token = app.admin_token().await;
    let soon = (chrono::Utc::now() + chrono::Duration::milliseconds(800)).to_rfc3339();
    let key = app
        .api_key(&token, json!({"name": "k", "expires_at": soon}))
        .await;
    assert_eq!(app.get("/v1/models", &key).await.status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    assert_eq!(
        v1_code(app.get("/v1/models", &key).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_api_key".into())
    );
    let past = (chrono::Utc::now() - chrono::Duration::seconds(5)).to_rfc3339();
    let r = app
        .post(
            "/api/api-keys",
            &token,
            &json!({"name": "k", "expires_at": past}),
        )
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
}

#[tokio::test]
async fn unknown_missing_and_malformed_api_keys_are_refused() {
    let app = spawn_app().await;
    for k in ["gtk_nope", "sk-something", ""] {
        let r = app
            .client
            .get(app.u("/v1/models"))
            .bearer_auth(k)
            .send()
            .await
            .unwrap();
        let s = r.status();
        let v: Value = r.json().await.unwrap();
        assert_eq!(s, 401);
        assert_eq!(v["error"]["code"], "invalid_api_key");
        assert_eq!(v["error"]["type"], "authentication_error");
    }
}

#[tokio::test]
async fn disabled_users_tokens_and_keys_stop_working_at_once() {
    let app = spawn_app().await;
    let (id, token) = app.user("gone@example.com").await;
    let key = app.api_key(&token, json!({"name": "k"})).await;
    assert_eq!(app.get("/v1/models", &key).await.status(), 200);
    assert_eq!(app.get("/api/users/me", &token).await.status(), 200);
    let admin = app.admin_token().await;
    assert_eq!(
        app.patch(
            &format!("/api/admin/users/{id}"),
            &admin,
            &json!({"is_active": false})
        )
        .await
        .status(),
        200
    );
    assert_eq!(app.get("/v1/models", &key).await.status(), 401);
    assert_eq!(app.get("/api/users/me", &token).await.status(), 401);
    assert_eq!(
        app.patch(
            &format!("/api/admin/users/{id}"),
            &admin,
            &json!({"is_active": true})
        )
        .await
        .status(),
        200
    );
    assert_eq!(app.get("/v1/models", &key).await.status(), 200);
}

#[tokio::test]
async fn key_limited_to_models_lists_only_those() {
    let app = spawn_app().await;
    app.add_model("openai", "http://127.0.0.1:9/v1", "chat-a", "chat", "up-a")
        .await;
    app.add_model("tei", "http://127.0.0.1:9", "emb-a", "embeddings", "up-e")
        .await;
    let token = app.admin_token().await;
    let key = app
        .api_key(&token, json!({"name": "k", "models": ["emb-a"]}))
        .await;
    let v: Value = app.get("/v1/models", &key).await.json().await.unwrap();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["emb-a"]);
}

#[tokio::test]
async fn v1_models_lists_kinds_and_filters_by_kind() {
    let app = spawn_app().await;
    app.add_model("openai", "http://127.0.0.1:9/v1", "chat-a", "chat", "up-a")
        .await;
    app.add_model("tei", "http://127.0.0.1:9", "emb-a", "embeddings", "up-e")
        .await;
    app.add_model("cohere", "http://127.0.0.1:9", "rr-a", "scoring", "up-r")
        .await;
    let token = app.admin_token().await;
    let key = app.api_key(&token, json!({"name": "k"})).await;
    let v: Value = app.get("/v1/models", &key).await.json().await.unwrap();
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    let emb = data.iter().find(|m| m["id"] == "emb-a").unwrap();
    assert_eq!(emb["object"], "model");
    assert_eq!(emb["kind"], "embeddings");
    assert!(emb["created"].is_i64() && emb["owned_by"].is_string());
    let v: Value = app
        .get("/v1/models?kind=scoring", &key)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert_eq!(v["data"][0]["id"], "rr-a");
    assert_eq!(
        v1_code(app.get("/v1/models?kind=nope", &key).await).await.1,
        "validation_error"
    );
}

#[tokio::test]
async fn providers_and_models_admin_crud_with_conflicts() {
    let app = spawn_app().await;
    let admin = app.admin_token().await;
    let p = json!({"name": "vllm", "type": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-upstream-secret"});
    let r = app.post("/api/admin/providers", &admin, &p).await;
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert!(
        !v.to_string().contains("sk-upstream-secret"),
        "provider api_key must not be shown"
    );
    assert_eq!(
        api_code(app.post("/api/admin/providers", &admin, &p).await).await,
        (StatusCode::CONFLICT, "provider_exists".into())
    );
    let bad = json!({"name": "x", "type": "mystery", "base_url": "http://h"});
    assert_eq!(
        api_code(app.post("/api/admin/providers", &admin, &bad).await).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    let m = json!({"id": "m1", "kind": "chat", "provider": "vllm", "upstream_model": "llama"});
    assert_eq!(
        app.post("/api/admin/models", &admin, &m).await.status(),
        201
    );
    assert_eq!(
        api_code(app.post("/api/admin/models", &admin, &m).await).await,
        (StatusCode::CONFLICT, "model_exists".into())
    );
    let bad = json!({"id": "m2", "kind": "vision", "provider": "vllm", "upstream_model": "x"});
    assert_eq!(
        api_code(app.post("/api/admin/models", &admin, &bad).await)
            .await
            .1,
        "validation_error"
    );
    let bad = json!({"id": "m2", "kind": "chat", "provider": "nope", "upstream_model": "x"});
    assert_eq!(
        api_code(app.post("/api/admin/models", &admin, &bad).await)
            .await
            .1,
        "validation_error"
    );
    assert_eq!(
        api_code(app.delete("/api/admin/providers/vllm", &admin).await).await,
        (StatusCode::CONFLICT, "provider_in_use".into())
    );
    let list: Value = app
        .get("/api/admin/models", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list[0]["upstream_model"], "llama");
    assert_eq!(app.get("/api/admin/models/m1", &admin).await.status(), 200);
    assert_eq!(
        app.delete("/api/admin/models/m1", &admin).await.status(),
        204
    );
    assert_eq!(
        api_code(app.get("/api/admin/models/m1", &admin).await).await,
        (StatusCode::NOT_FOUND, "model_not_found".into())
    );
    assert_eq!(
        app.delete("/api/admin/providers/vllm", &admin)
            .await
            .status(),
        204
    );
    assert_eq!(
        api_code(app.get("/api/admin/providers/vllm", &admin).await).await,
        (StatusCode::NOT_FOUND, "provider_not_found".into())
    );
}

#[tokio::test]
async fn non_admins_get_forbidden_on_every_admin_route() {
    let app = spawn_app().await;
    let (_, token) = app.user("plain@example.com").await;
    let body = json!({});
    let routes: &[(&str, &str)] = &[
        ("POST", "/api/admin/users"),
        ("GET", "/api/admin/users"),
        ("PATCH", "/api/admin/users/x"),
        ("POST", "/api/admin/providers"),
        ("GET", "/api/admin/providers"),
        ("GET", "/api/admin/providers/x"),
        ("DELETE", "/api/admin/providers/x"),
        ("POST", "/api/admin/models"),
        ("GET", "/api/admin/models"),
        ("GET", "/api/admin/models/x"),
        ("DELETE", "/api/admin/models/x"),
    ];
    for (method, path) in routes {
        let req = app
            .client
            .request(method.parse().unwrap(), app.u(path))
            .bearer_auth(&token);
        let req = if *method == "GET" || *method == "DELETE" {
            req
        } else {
            req.json(&body)
        };
        let r = req.send().await.unwrap();
        assert_eq!(
            api_code(r).await,
            (StatusCode::FORBIDDEN, "forbidden".into()),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn duplicate_email_gives_user_exists_case_insensitively() {
    let app = spawn_app().await;
    let admin = app.admin_token().await;
    let body = json!({"email": "Dup@Example.com", "password": "password-123"});
    assert_eq!(
        app.post("/api/admin/users", &admin, &body).await.status(),
        201
    );
    let body = json!({"email": "dup@example.COM", "password": "password-123"});
    assert_eq!(
        api_code(app.post("/api/admin/users", &admin, &body).await).await,
        (StatusCode::CONFLICT, "user_exists".into())
    );
    let list: Value = app
        .get("/api/admin/users", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert!(
        list.to_string().find("password").is_none(),
        "no password hash in listings"
    );
}

#[tokio::test]
async fn passwords_are_stored_as_argon2id_hashes() {
    let app = spawn_app().await;
    app.user("hash@example.com").await;
    let h: String =
        sqlx::query_scalar("SELECT password_hash FROM users WHERE email = 'hash@example.com'")
            .fetch_one(&app.app().store.pool)
            .await
            .unwrap();
    assert!(h.starts_with("$argon2id$"), "{h}");
}

#[tokio::test]
async fn malformed_json_and_wrong_types_name_the_field() {
    let app = spawn_app().await;
    let admin = app.admin_token().await;
    let r = app
        .client
        .post(app.u("/api/admin/users"))
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    let r = app
        .post(
            "/api/admin/users",
            &admin,
            &json!({"email": 5, "password": "password-123"}),
        )
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["detail"]["code"], "validation_error");
    assert!(
        v["detail"]["message"].as_str().unwrap().contains("string"),
        "{v}"
    );
    let r = app
        .post(
            "/api/admin/users",
            &admin,
            &json!({"password": "password-123"}),
        )
        .await;
    let v: Value = r.json().await.unwrap();
    assert!(
        v["detail"]["message"].as_str().unwrap().contains("email"),
        "{v}"
    );
}

#[tokio::test]
async fn api_bodies_are_limited_to_one_mebibyte() {
    let app = spawn_app().await;
    let admin = app.admin_token().await;
    // Exactly at the limit the body is read (and refused for its content, not its size).
    let pad = |n: usize| {
        let base = r#"{"name":"k","pad":""}"#.len();
        format!(r#"{{"name":"k","pad":"{}"}}"#, "a".repeat(n - base))
    };
    let at = pad(1024 * 1024);
    assert_eq!(at.len(), 1024 * 1024);
    let r = app
        .client
        .post(app.u("/api/api-keys"))
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body(at)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let over = pad(1024 * 1024 + 1);
    let r = app
        .client
        .post(app.u("/api/api-keys"))
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body(over)
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large".into())
    );
}

#[tokio::test]
async fn v1_errors_use_the_openai_shape_and_api_errors_the_detail_shape() {
    let app = spawn_app().await;
    let r = app.client.get(app.u("/v1/models")).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "authentication_error");
    assert!(v["error"].get("param").is_some());
    assert!(v.get("detail").is_none());
    let r = app.client.get(app.u("/api/users/me")).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(v["detail"]["message"].is_string());
}

#[tokio::test]
async fn providers_and_models_from_the_config_file_are_applied_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        r#"
[[providers]]
name = "tei-local"
type = "tei"
base_url = "http://127.0.0.1:9"

[[models]]
id = "emb-code"
kind = "embeddings"
provider = "tei-local"
upstream_model = "bge-small"
"#,
    )
    .unwrap();
    let p = path.clone();
    let app = spawn_app_with(move |s| s.config_file = Some(p)).await;
    let token = app.admin_token().await;
    let key = app.api_key(&token, json!({"name": "k"})).await;
    let v: Value = app.get("/v1/models", &key).await.json().await.unwrap();
    assert_eq!(v["data"][0]["id"], "emb-code");
    assert_eq!(v["data"][0]["kind"], "embeddings");
}

#[tokio::test]
async fn a_config_file_with_an_invalid_provider_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[providers]]\nname = \"x\"\ntype = \"mystery\"\nbase_url = \"http://h\"\n",
    )
    .unwrap();
    let (db, _d) = fresh_database().await;
    let mut s = gatehouse::config::Settings::for_database(&db);
    s.config_file = Some(path);
    let err = gatehouse::start(s).await.err().expect("start must fail");
    assert!(err.to_string().contains("type"), "{err}");
}

#[tokio::test]
async fn a_model_an_agent_chats_with_cannot_be_deleted() {
    let app = spawn_app().await;
    app.add_model("openai", "http://127.0.0.1:9/v1", "chat-a", "chat", "up-a")
        .await;
    let admin = app.admin_token().await;
    app.add_agent(&admin, "helper", "chat-a", json!({"name": "Helper"}))
        .await;
    assert_eq!(
        api_code(app.delete("/api/admin/models/chat-a", &admin).await).await,
        (StatusCode::CONFLICT, "model_in_use".into())
    );
    assert_eq!(
        app.get("/api/admin/models/chat-a", &admin).await.status(),
        200
    );
}
