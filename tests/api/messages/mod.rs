//! Anthropic's Messages API inbound, translated to `openai` upstreams (the
//! stub upstream records what it got): the key routes, their errors in
//! Anthropic's shape, streams, count_tokens, and the agent routes.

mod agent;
mod agent_passthrough;
mod cost;
mod key;
mod passthrough;

use reqwest::Response;
use serde_json::{json, Value};

use crate::common::models::{sse_events, Env};

/// POST with the API key as `x-api-key`, as Claude Code sends `ANTHROPIC_API_KEY`.
pub async fn post_x_api_key(env: &Env, path: &str, key: &str, body: &Value) -> Response {
    crate::common::client()
        .post(env.app.u(path))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("request")
}

pub fn messages_body(model: &str, text: &str) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": text}]})
}

/// The Messages events of a stream: (event name, data), every frame named.
pub async fn messages_events(r: Response) -> Vec<(String, Value)> {
    sse_events(r)
        .await
        .into_iter()
        .map(|e| {
            let name = e.event.clone().expect("every Messages frame is named");
            let data: Value = serde_json::from_str(&e.data).expect("event data is JSON");
            (name, data)
        })
        .collect()
}

/// The text of the `text_delta`s of a stream.
pub fn streamed_text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect()
}

/// Status and Anthropic's error object, after checking the envelope.
pub async fn anthropic_error(r: Response) -> (u16, Value) {
    let s = r.status().as_u16();
    let rid = r.headers().get("request-id").cloned();
    let xrid = r.headers().get("x-request-id").cloned();
    assert!(
        rid.is_some() && rid == xrid,
        "request-id equals x-request-id"
    );
    let v: Value = r.json().await.expect("a JSON error");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(
        v["request_id"].as_str(),
        xrid.as_ref().and_then(|h| h.to_str().ok())
    );
    (s, v["error"].clone())
}
