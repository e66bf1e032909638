//! The model catalog: providers and models through the admin API and the
//! config file, and `/v1/models`. Chat through the relay is in `proxy::chat`.

mod anthropic;
mod retrieval;
mod routing;

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

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
