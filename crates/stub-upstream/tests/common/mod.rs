//! Helpers shared by the integration tests.
#![allow(dead_code)]

use futures_util::StreamExt;
use serde_json::Value;

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

pub async fn post(url: &str, body: Value) -> (u16, Value) {
    let resp = client().post(url).json(&body).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The `data:` payloads of an SSE body, split into events.
pub fn sse_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event is not a data line: {e:?}"))
                .to_string()
        })
        .collect()
}

/// Read a whole streamed body; returns the events and the frames' count.
pub async fn read_stream(resp: reqwest::Response) -> (Vec<String>, usize, Option<reqwest::Error>) {
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    let mut frames = 0;
    let mut err = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => {
                frames += 1;
                text.push_str(std::str::from_utf8(&b).unwrap());
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    (sse_events(&text), frames, err)
}

/// Events of a stream that must end with `[DONE]`, parsed as JSON (the
/// `[DONE]` removed).
pub fn json_chunks(events: &[String]) -> Vec<Value> {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|_| panic!("not JSON: {e}")))
        .collect()
}

pub async fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..250 {
        if f() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    f()
}
