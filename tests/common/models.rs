//! Support for the model-route tests: a gateway and a stub upstream with
//! providers of every type, an API key, and SSE reading.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gatehouse::wire::sse::{SseEvent, SseParser};
use gatehouse_stub_upstream::Stub;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use super::{spawn_app_with, TestApp};

pub struct Env {
    pub app: TestApp,
    pub stub: Stub,
    pub admin: String,
    pub key: String,
}

/// Providers on the stub: `openai` (with upstream key `sk-upstream`), `tei`, `cohere`.
pub async fn env() -> Env {
    env_with(|_| {}).await
}

pub async fn env_with(f: impl FnOnce(&mut gatehouse::config::Settings)) -> Env {
    let app = spawn_app_with(f).await;
    let stub = Stub::start().await;
    let admin = app.admin_token().await;
    let key = app.api_key(&admin, json!({"name": "backend"})).await;
    let env = Env {
        app,
        stub,
        admin,
        key,
    };
    let (openai, root) = (env.stub.openai_base_url(), env.stub.url());
    env.provider("openai", "openai", &openai, Some("sk-upstream"), 5)
        .await;
    env.provider("tei", "tei", &root, None, 5).await;
    env.provider("cohere", "cohere", &root, Some("co-key"), 5)
        .await;
    env
}

impl Env {
    pub async fn provider(
        &self,
        name: &str,
        kind: &str,
        base_url: &str,
        api_key: Option<&str>,
        timeout_s: u64,
    ) {
        let mut body =
            json!({"name": name, "type": kind, "base_url": base_url, "timeout_s": timeout_s});
        if let Some(k) = api_key {
            body["api_key"] = json!(k);
        }
        let r = self
            .app
            .post("/api/admin/providers", &self.admin, &body)
            .await;
        assert_eq!(r.status(), StatusCode::CREATED, "provider {name}");
    }

    pub async fn model(&self, id: &str, kind: &str, provider: &str, upstream: &str) {
        let r = self
            .app
            .post(
                "/api/admin/models",
                &self.admin,
                &json!({"id": id, "kind": kind, "provider": provider, "upstream_model": upstream}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED, "model {id}");
    }

    /// POST with the API key.
    pub async fn post(&self, path: &str, body: &Value) -> Response {
        self.app.post(path, &self.key, body).await
    }

    pub async fn post_with(&self, path: &str, key: &str, body: &Value) -> Response {
        self.app.post(path, key, body).await
    }

    /// A body sent as these very bytes (JSON), with the env's key.
    pub async fn post_text(&self, path: &str, text: &str) -> Response {
        crate::common::client()
            .post(self.app.u(path))
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .body(text.to_string())
            .send()
            .await
            .expect("post")
    }
}

/// Status and the OpenAI-shaped error body.
pub async fn v1_error(r: Response) -> (StatusCode, Value) {
    let s = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (s, v["error"].clone())
}

/// Every SSE event of a response, in order.
pub async fn sse_events(r: Response) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    let mut out = vec![];
    let mut body = r.bytes_stream();
    while let Some(chunk) = body.next().await {
        parser.push(&chunk.expect("body chunk"));
        while let Some(ev) = parser.next_event() {
            out.push(ev);
        }
    }
    out.extend(parser.finish());
    out
}

/// The data payloads of the events, JSON parsed (`[DONE]` as the string).
pub fn payloads(events: &[SseEvent]) -> Vec<Value> {
    events
        .iter()
        .map(|e| {
            if e.data == "[DONE]" {
                json!("[DONE]")
            } else {
                serde_json::from_str(&e.data).expect("event data is JSON")
            }
        })
        .collect()
}

/// Concatenated `delta.content` of the chunks.
pub fn assembled_content(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// Calls `f` until it gives Some, for at most `secs` seconds.
pub async fn poll<T, F, Fut>(secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < end, "condition not met within {secs} s");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The usage totals row for `key` from `/api/admin/usage?group_by=...`.
pub async fn usage_row(env: &Env, group_by: &str, key: &str) -> Option<Value> {
    let r = env
        .app
        .get(&format!("/api/admin/usage?group_by={group_by}"), &env.admin)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let rows: Vec<Value> = r.json().await.expect("json");
    rows.into_iter().find(|row| row["key"] == key)
}

/// Polls until the row for `key` counts `requests` requests.
pub async fn wait_usage(env: &Env, group_by: &str, key: &str, requests: i64) -> Value {
    poll(10, || async {
        usage_row(env, group_by, key)
            .await
            .filter(|r| r["requests"].as_i64() == Some(requests))
    })
    .await
}
