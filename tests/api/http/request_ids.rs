//! Request ids (contract "Operations"): an incoming `x-request-id` is kept,
//! answered and sent to the upstream; without one the gateway makes one, and
//! the upstream sees that same id. Checked in the stub upstream's recorded
//! requests, for every kind of upstream call.

use crate::common;

use common::agent_chat::{self as agent_chat_support, Gateway};
use common::models::*;
use reqwest::Response;
use serde_json::{json, Value};

async fn send(env: &Env, path: &str, body: &Value, id: Option<&str>) -> Response {
    let mut req = env
        .app
        .client
        .post(env.app.u(path))
        .bearer_auth(&env.key)
        .json(body);
    if let Some(id) = id {
        req = req.header("x-request-id", id);
    }
    let r = req.send().await.expect("request");
    assert_eq!(r.status(), 200, "{path}");
    r
}

fn answered_id(r: &Response) -> String {
    r.headers()["x-request-id"].to_str().unwrap().to_string()
}

/// The ids the stub received for requests naming `model`, in order.
fn upstream_ids(env: &impl Gateway, model: &str) -> Vec<Option<String>> {
    env.stub()
        .requests_for_model(model)
        .iter()
        .map(|r| r.header("x-request-id").map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_client_request_id_reaches_the_upstream_on_chat_streamed_chat_embeddings_and_rerank() {
    let env = env().await;
    env.model("rid-chat", "chat", "openai", "rid-up-chat").await;
    env.model("rid-embed", "embeddings", "openai", "rid-up-embed")
        .await;
    env.model("rid-rerank", "scoring", "openai", "rid-up-rerank")
        .await;
    let chat = json!({"model": "rid-chat", "messages": [{"role": "user", "content": "hi"}]});

    let r = send(&env, "/v1/chat/completions", &chat, Some("client-id-1")).await;
    assert_eq!(answered_id(&r), "client-id-1");
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let r = send(&env, "/v1/chat/completions", &streamed, Some("client-id-2")).await;
    assert_eq!(answered_id(&r), "client-id-2");
    let events = sse_events(r).await;
    assert!(events.iter().any(|e| e.data == "[DONE]"));
    assert_eq!(
        upstream_ids(&env, "rid-up-chat"),
        [Some("client-id-1".into()), Some("client-id-2".into())]
    );

    send(
        &env,
        "/v1/embeddings",
        &json!({"model": "rid-embed", "input": "x"}),
        Some("client-id-3"),
    )
    .await;
    assert_eq!(
        upstream_ids(&env, "rid-up-embed"),
        [Some("client-id-3".into())]
    );
    send(
        &env,
        "/v1/rerank",
        &json!({"model": "rid-rerank", "query": "q", "documents": ["a", "b"]}),
        Some("client-id-4"),
    )
    .await;
    assert_eq!(
        upstream_ids(&env, "rid-up-rerank"),
        [Some("client-id-4".into())]
    );
}

#[tokio::test]
async fn without_a_client_id_the_upstream_gets_the_id_the_client_is_answered() {
    let env = env().await;
    env.model("rid-gen", "chat", "openai", "rid-up-gen").await;
    env.model("rid-tei", "embeddings", "tei", "ignored").await;
    let chat = json!({"model": "rid-gen", "messages": [{"role": "user", "content": "hi"}]});
    let first = answered_id(&send(&env, "/v1/chat/completions", &chat, None).await);
    let second = answered_id(&send(&env, "/v1/chat/completions", &chat, None).await);
    assert!(!first.is_empty() && first != second, "{first} {second}");
    assert_eq!(
        upstream_ids(&env, "rid-up-gen"),
        [Some(first), Some(second)]
    );

    // TEI bodies name no model: find the request by path.
    let r = send(
        &env,
        "/v1/embeddings",
        &json!({"model": "rid-tei", "input": "x"}),
        None,
    )
    .await;
    let id = answered_id(&r);
    let tei: Vec<_> = env
        .stub
        .requests()
        .into_iter()
        .filter(|r| r.path == "/embed")
        .collect();
    assert_eq!(tei.len(), 1);
    assert_eq!(tei[0].header("x-request-id"), Some(id.as_str()));
}

#[tokio::test]
async fn agent_chat_sends_the_request_id_upstream() {
    let env =
        agent_chat_support::agent_scene("rid-agent", "rid-up-agent", json!({}), "rid@example.com")
            .await;
    let token = env.access.clone();
    let body = json!({"messages": [{"role": "user", "content": "hello"}]});
    let r = agent_chat_support::chat(
        &env,
        "rid-agent",
        &token,
        &body,
        &[("x-request-id", "agent-id-1")],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(answered_id(&r), "agent-id-1");
    assert_eq!(
        upstream_ids(&env, "rid-up-agent"),
        [Some("agent-id-1".into())]
    );
}

#[tokio::test]
async fn every_attempt_of_a_retried_request_carries_the_same_id() {
    let env = env().await;
    // The model's one target fails with 503; its fallback answers.
    env.stub
        .script("rid-up-down", gatehouse_stub_upstream::Script::status(503));
    env.model("rid-backup", "chat", "openai", "rid-up-backup")
        .await;
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "rid-main", "kind": "chat", "provider": "openai",
                    "upstream_model": "rid-up-down", "fallbacks": ["rid-backup"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let chat = json!({"model": "rid-main", "messages": [{"role": "user", "content": "hi"}]});
    let r = send(&env, "/v1/chat/completions", &chat, Some("retried-1")).await;
    assert_eq!(r.headers()["x-gatehouse-attempts"], "2");
    assert_eq!(
        upstream_ids(&env, "rid-up-down"),
        [Some("retried-1".into())]
    );
    assert_eq!(
        upstream_ids(&env, "rid-up-backup"),
        [Some("retried-1".into())]
    );
}

/// A made id is a time-ordered UUID (v7), each later than the one before:
/// the usage records' index on the request id then grows at its end (a
/// random id dirtied a page of that index, in the database, per request).
#[tokio::test]
async fn made_request_ids_are_time_ordered_uuids_each_after_the_last() {
    let env = env().await;
    let mut ids = Vec::new();
    for _ in 0..40 {
        let r = env
            .app
            .client
            .get(env.app.u("/healthz"))
            .send()
            .await
            .expect("request");
        ids.push(answered_id(&r));
    }
    for id in &ids {
        let u = uuid::Uuid::parse_str(id).expect("a UUID");
        assert_eq!(u.get_version_num(), 7, "{id}");
        assert_eq!(id, &u.hyphenated().to_string(), "lower-case, hyphenated");
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}
