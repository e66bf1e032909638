//! One write to the client per upstream read, in every dialect the relay
//! answers in: chat, Messages translated from chat, Messages passed through
//! from an `anthropic` upstream, and Responses bridged to chat. The stub
//! paces its events (one upstream read each); the client reads the
//! response's chunks (one per write of the gateway: each write is one
//! chunk of the chunked body), and each must hold exactly the events made
//! of one upstream event: never split over two writes, never two upstream
//! reads batched into one.

use gatehouse::wire::sse::SseParser;
use gatehouse_stub_upstream::Script;
use reqwest::Response;
use serde_json::{json, Value};

use crate::common::models::{env, Env};

/// The pace of the stub's events: far above a write's own time.
const PACE_MS: u64 = 120;

fn paced() -> Script {
    Script {
        content: Some("one two three".into()),
        chunk_interval_ms: PACE_MS,
        ..Script::default()
    }
}

/// The body's chunks as they came, each as the names of the events it
/// held (an event's name, else its data: chat's chunks are unnamed).
async fn writes(r: Response) -> Vec<Vec<String>> {
    use futures_util::StreamExt;
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("body chunk");
        let text = String::from_utf8_lossy(&chunk).into_owned();
        assert!(
            text.ends_with("\n\n"),
            "a write ends with a whole event: {text:?}"
        );
        let mut parser = SseParser::new();
        parser.push(&chunk);
        let names = std::iter::from_fn(|| parser.next_event())
            .map(|e| match e.event {
                Some(name) => name,
                None => short(&e.data),
            })
            .collect();
        out.push(names);
    }
    out
}

/// A chat chunk by what it carries.
fn short(data: &str) -> String {
    if data == "[DONE]" {
        return data.into();
    }
    let v: Value = serde_json::from_str(data).expect("chat chunk is JSON");
    let c = &v["choices"][0];
    match (c["delta"]["content"].as_str(), c["finish_reason"].as_str()) {
        (_, Some(f)) => format!("finish:{f}"),
        (Some(t), None) => format!("text:{t}"),
        (None, None) => "other".into(),
    }
}

fn names(groups: &[&[&str]]) -> Vec<Vec<String>> {
    groups
        .iter()
        .map(|g| g.iter().map(|s| s.to_string()).collect())
        .collect()
}

async fn post(env: &Env, path: &str, body: &Value) -> Response {
    env.post(path, body).await
}

#[tokio::test]
async fn a_chat_stream_makes_one_write_per_upstream_read() {
    let env = env().await;
    env.model("w-chat", "chat", "openai", "up-w-chat").await;
    env.stub.script("up-w-chat", paced());
    let body = json!({"model": "w-chat", "stream": true,
        "messages": [{"role": "user", "content": "x"}]});
    let got = writes(post(&env, "/v1/chat/completions", &body).await).await;
    // The usage-only chunk makes no write (the client did not ask for it).
    assert_eq!(
        got,
        names(&[
            &["text:"],
            &["text:one "],
            &["text:two "],
            &["text:thre"],
            &["text:e"],
            &["finish:stop"],
            &["[DONE]"],
        ])
    );
}

#[tokio::test]
async fn a_messages_stream_translated_from_chat_makes_one_write_per_upstream_read() {
    let env = env().await;
    env.model("w-msg", "chat", "openai", "up-w-msg").await;
    env.stub.script("up-w-msg", paced());
    let body = json!({"model": "w-msg", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "x"}]});
    let got = writes(post(&env, "/v1/messages", &body).await).await;
    // The finish and usage chunks make no event of their own: what they
    // carry ends the stream with `[DONE]`'s read.
    assert_eq!(
        got,
        names(&[
            &["message_start"],
            &["content_block_start", "content_block_delta"],
            &["content_block_delta"],
            &["content_block_delta"],
            &["content_block_delta"],
            &["content_block_stop", "message_delta", "message_stop"],
        ])
    );
}

#[tokio::test]
async fn a_messages_stream_passed_through_makes_one_write_per_upstream_read() {
    let env = env().await;
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "claude", "type": "anthropic", "base_url": env.stub.url(),
                    "api_key": "sk-ant", "timeout_s": 5}),
        )
        .await;
    assert_eq!(r.status(), 201);
    env.model("w-claude", "chat", "claude", "up-w-claude").await;
    env.stub.script("up-w-claude", paced());
    let body = json!({"model": "w-claude", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "x"}]});
    let got = writes(post(&env, "/v1/messages", &body).await).await;
    assert_eq!(
        got,
        names(&[
            &["message_start"],
            &["ping"],
            &["content_block_start"],
            &["content_block_delta"],
            &["content_block_delta"],
            &["content_block_delta"],
            &["content_block_delta"],
            &["content_block_stop"],
            &["message_delta"],
            &["message_stop"],
        ])
    );
}

#[tokio::test]
async fn a_responses_stream_bridged_to_chat_makes_one_write_per_upstream_read() {
    let env = env().await;
    env.model("w-resp", "chat", "openai", "up-w-resp").await;
    env.stub.script("up-w-resp", paced());
    let body = json!({"model": "w-resp", "input": "x", "stream": true});
    let got = writes(post(&env, "/v1/responses", &body).await).await;
    assert_eq!(
        got,
        names(&[
            &["response.created", "response.in_progress"],
            &[
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta"
            ],
            &["response.output_text.delta"],
            &["response.output_text.delta"],
            &["response.output_text.delta"],
            &[
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ],
        ])
    );
}
