//! The contract's two error shapes (`/api` and the OpenAI shape of `/v1`),
//! bodies that do not parse, and the body limit of `/api`.

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

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
