//! `/v1/messages` and `/v1/messages/count_tokens`: Anthropic's Messages API,
//! plain and streamed, errors in Anthropic's shape, and what was recorded.

mod common;

use common::*;
use gatehouse_stub_upstream::{Script, ScriptToolCall, Stub};
use serde_json::{json, Value};

fn url(stub: &Stub, path: &str) -> String {
    format!("{}{path}", stub.url())
}

fn body(model: &str) -> Value {
    json!({"model": model, "max_tokens": 64,
           "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]})
}

#[tokio::test]
async fn a_plain_message_echoes_with_tool_use_and_cache_usage() {
    let stub = Stub::start().await;
    let (s, v) = post(&url(&stub, "/v1/messages"), body("m")).await;
    assert_eq!(s, 200);
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        (v["type"].as_str(), v["role"].as_str(), v["model"].as_str()),
        (Some("message"), Some("assistant"), Some("m"))
    );
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "echo: hi there"}])
    );
    assert_eq!(v["stop_reason"], "end_turn");

    stub.script(
        "t",
        Script {
            tool_calls: vec![ScriptToolCall {
                id: "toolu_1".into(),
                name: "f".into(),
                arguments: r#"{"a":1}"#.into(),
            }],
            usage: Some((7, 2)),
            cache_tokens: Some((5, 3)),
            ..Script::default()
        },
    );
    let (_, v) = post(&url(&stub, "/v1/messages"), body("t")).await;
    assert_eq!(
        v["content"],
        json!([{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}])
    );
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 7, "output_tokens": 2,
        "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3})
    );
}

#[tokio::test]
async fn a_stream_has_messages_events_with_text_and_input_json_pieces() {
    let stub = Stub::start().await;
    stub.script(
        "s",
        Script {
            content: Some("Hello!".into()),
            tool_calls: vec![ScriptToolCall {
                id: "toolu_1".into(),
                name: "f".into(),
                arguments: r#"{"city":"Oslo"}"#.into(),
            }],
            chunk_size: 3,
            ..Script::default()
        },
    );
    let mut b = body("s");
    b["stream"] = json!(true);
    let r = client()
        .post(url(&stub, "/v1/messages"))
        .json(&b)
        .send()
        .await
        .unwrap();
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    let frames: Vec<(&str, Value)> = text
        .split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (ev, data) = f.split_once('\n').unwrap();
            (
                ev.strip_prefix("event: ").unwrap(),
                serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = frames.iter().map(|f| f.0).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    assert!(frames.iter().all(|(n, d)| d["type"] == *n));
    let texts: String = frames
        .iter()
        .filter_map(|f| f.1["delta"]["text"].as_str())
        .collect();
    assert_eq!(texts, "Hello!");
    let args: Vec<&str> = frames
        .iter()
        .filter_map(|f| f.1["delta"]["partial_json"].as_str())
        .collect();
    assert!(args.len() > 1);
    assert_eq!(args.concat(), r#"{"city":"Oslo"}"#);
    let tool_start = frames
        .iter()
        .find(|f| f.1["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(
        tool_start.1["content_block"],
        json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})
    );
    assert_eq!(
        frames[frames.len() - 2].1["delta"]["stop_reason"],
        "tool_use"
    );
}

#[tokio::test]
async fn errors_have_anthropics_shape_and_requests_are_recorded_with_headers() {
    let stub = Stub::start().await;
    stub.script(
        "busy",
        Script {
            status: Some(529),
            error_message: Some("Overloaded".into()),
            ..Script::default()
        },
    );
    let r = client()
        .post(url(&stub, "/v1/messages?beta=true"))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .json(&body("busy"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 529);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(
        v["error"],
        json!({"type": "overloaded_error", "message": "Overloaded"})
    );
    let (s, v) = post(
        &url(&stub, "/v1/messages"),
        json!({"model": "x", "messages": []}),
    )
    .await;
    assert_eq!(
        (s, v["error"]["type"].as_str()),
        (400, Some("invalid_request_error"))
    );
    let seen = stub.requests_for_model("busy");
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(seen[0].header("anthropic-version"), Some("2023-06-01"));
}

#[tokio::test]
async fn count_tokens_answers_a_positive_count() {
    let stub = Stub::start().await;
    let (s, v) = post(&url(&stub, "/v1/messages/count_tokens"), body("c")).await;
    assert_eq!(s, 200);
    assert!(v["input_tokens"].as_u64().unwrap() >= 1);
    assert_eq!(
        stub.requests_for_model("c")[0].path,
        "/v1/messages/count_tokens"
    );
}
