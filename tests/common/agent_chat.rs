//! Support for the agent-chat tests (PII, AG-UI): an agent on the stub
//! upstream, a signed-in user, chat requests with the agent headers, and the
//! SSE stream split into OpenAI chunks and AG-UI events. The helpers take the
//! common [`Scene`] or, where a test also needs the model routes' providers
//! and API key, the model-route [`Env`].

use gatehouse::wire::sse::SseEvent;
use gatehouse_stub_upstream::Stub;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use super::models::{payloads, sse_events, Env};
use super::scene::Scene;
use super::TestApp;

/// A gateway and its stub upstream: the common [`Scene`] or the model-route
/// [`Env`], so the helpers below serve both.
pub trait Gateway {
    fn gateway(&self) -> &TestApp;
    fn stub(&self) -> &Stub;
}

impl Gateway for Scene {
    fn gateway(&self) -> &TestApp {
        &self.app
    }
    fn stub(&self) -> &Stub {
        &self.stub
    }
}

impl Gateway for Env {
    fn gateway(&self) -> &TestApp {
        &self.app
    }
    fn stub(&self) -> &Stub {
        &self.stub
    }
}

/// The common scene as the agent-chat tests make it: chat model
/// `m-<address>` on the stub's `upstream` model, the agent with `extra`
/// fields (pii, tool_contract, default_tool_mode, ...), and `email` signed
/// in to it on a "test device" (its access token is `scene.access`).
pub async fn agent_scene(address: &str, upstream: &str, extra: Value, email: &str) -> Scene {
    Scene::new()
        .with_model(&format!("m-{address}"), upstream)
        .with_agent(address, extra)
        .user(email, "test device")
        .signed_in()
        .await
}

/// Creates chat model `m-<address>` on the stub's `upstream` model and the
/// agent with `extra` fields (pii, tool_contract, default_tool_mode, ...).
pub async fn agent(env: &Env, address: &str, upstream: &str, extra: Value) {
    let model = format!("m-{address}");
    env.model(&model, "chat", "openai", upstream).await;
    env.app.add_agent(&env.admin, address, &model, extra).await;
}

/// A new user signed in to `address`; returns the agent access token.
pub async fn sign_in(env: &impl Gateway, email: &str, address: &str) -> String {
    let (_, login) = env.gateway().user(email).await;
    sign_in_as(env, &login, address).await
}

pub async fn sign_in_as(env: &impl Gateway, login: &str, address: &str) -> String {
    let (access, _) = env
        .gateway()
        .sign_in_access(login, address, "test device")
        .await;
    access
}

/// POST /v1/agents/{address}/chat/completions with extra headers.
pub async fn chat(
    env: &impl Gateway,
    address: &str,
    token: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Response {
    let app = env.gateway();
    let mut req = app
        .client
        .post(app.u(&format!("/v1/agents/{address}/chat/completions")))
        .bearer_auth(token)
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("agent chat")
}

/// A chat answered with 200 and JSON.
pub async fn chat_json(
    env: &impl Gateway,
    address: &str,
    token: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Value {
    let r = chat(env, address, token, body, headers).await;
    let status = r.status();
    let text = r.text().await.expect("body");
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str(&text).expect("json answer")
}

/// A streamed chat: every SSE message.
pub async fn chat_stream(
    env: &impl Gateway,
    address: &str,
    token: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Vec<SseEvent> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = chat(env, address, token, &body, headers).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    sse_events(r).await
}

/// The plain `data:` messages (OpenAI chunks, `[DONE]` as a string).
pub fn data_messages(events: &[SseEvent]) -> Vec<Value> {
    let plain: Vec<SseEvent> = events
        .iter()
        .filter(|e| e.event.is_none())
        .cloned()
        .collect();
    payloads(&plain)
}

/// The AG-UI events (`event: ag-ui` messages), parsed.
pub fn agui_events(events: &[SseEvent]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.event.as_deref() == Some("ag-ui"))
        .map(|e| serde_json::from_str(&e.data).expect("AG-UI event is JSON"))
        .collect()
}

/// Concatenated `delta.content` of choice 0 over the chunks.
pub fn content_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// Tool calls assembled from stream chunks: (id, name, arguments) by index.
pub fn tool_calls_of(chunks: &[Value]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = vec![];
    for c in chunks {
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().expect("index") as usize;
            while out.len() <= i {
                out.push(Default::default());
            }
            if let Some(id) = tc["id"].as_str() {
                out[i].0 = id.to_string();
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                out[i].1.push_str(n);
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                out[i].2.push_str(a);
            }
        }
    }
    out
}

/// Every text column the gateway writes about a chat, as one string:
/// usage records, approvals, events, and the sealed vaults.
pub async fn stored_text(env: &impl Gateway) -> String {
    let pool = &env.gateway().app().store.pool;
    let mut out = String::new();
    for q in [
        "SELECT COALESCE(user_id,'') || ' ' || COALESCE(agent,'') || ' ' || COALESCE(device_id,'') || ' ' || model || ' ' || kind || ' ' || COALESCE(conversation_id,'') || ' ' || COALESCE(turn_id,'') FROM usage_records",
        "SELECT tool || ' ' || arguments || ' ' || COALESCE(reason,'') || ' ' || COALESCE(conversation_id,'') FROM approvals",
        "SELECT type || ' ' || COALESCE(data,'') FROM events",
        "SELECT sealed FROM pii_vaults",
    ] {
        let rows: Vec<String> = sqlx::query_scalar(q)
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| panic!("{q}: {e}"));
        for r in rows {
            out.push_str(&r);
            out.push('\n');
        }
    }
    out
}

/// Number of usage records (the writer flushes in the background).
pub async fn usage_count(env: &impl Gateway) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM usage_records")
        .fetch_one(&env.gateway().app().store.pool)
        .await
        .expect("count")
}
