//! Login with e-mail and password (`/api/auth/jwt/login`): the login token,
//! refusals that tell nothing, the throttle, and tokens checked on use.

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

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
async fn login_tokens_survive_a_restart() {
    let mut app = spawn_app().await;
    let token = app.admin_token().await;
    app.restart().await;
    assert_eq!(app.get("/api/users/me", &token).await.status(), 200);
}
