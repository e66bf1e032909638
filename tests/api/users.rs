//! Users through the admin API: creation, e-mails unique whatever their
//! case, disabling, password hashes, and admin-only routes.

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

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
