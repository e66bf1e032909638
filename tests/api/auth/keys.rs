//! API keys: their life (create, list, use, delete), what is stored, expiry,
//! and which credential opens which routes.

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

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
