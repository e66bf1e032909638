//! `/v1/chat/completions`: plain, streamed, tool calls, scripts.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use gatehouse_stub_upstream::{Script, ScriptToolCall, Stub};
use serde_json::{json, Value};

fn chat_url(stub: &Stub) -> String {
    format!("{}/chat/completions", stub.openai_base_url())
}

#[tokio::test]
async fn chat_default_echoes_last_user_message_with_exact_shape() {
    let stub = Stub::start().await;
    let (status, v) = post(
        &chat_url(&stub),
        json!({"model": "echo-model", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "hello there"}
        ]}),
    )
    .await;
    assert_eq!(status, 200);
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-stub-"), "{id}");
    assert_eq!(v["object"], "chat.completion");
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(v["model"], "echo-model");
    assert_eq!(
        v["choices"],
        json!([{
            "index": 0,
            "message": {"role": "assistant", "content": "echo: hello there"},
            "finish_reason": "stop"
        }])
    );
    // default usage: (10, words of content)
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})
    );
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 6, "{keys:?}");
}

#[tokio::test]
async fn chat_echo_concatenates_text_parts() {
    let stub = Stub::start().await;
    let (_, v) = post(
        &chat_url(&stub),
        json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "look "},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "here"}
        ]}]}),
    )
    .await;
    assert_eq!(v["choices"][0]["message"]["content"], "echo: look here");
}

#[tokio::test]
async fn chat_scripted_content_tool_calls_and_usage() {
    let stub = Stub::start().await;
    stub.script(
        "tools-model",
        Script {
            tool_calls: vec![
                ScriptToolCall {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                },
                ScriptToolCall {
                    id: "call_2".into(),
                    name: "get_time".into(),
                    arguments: "{}".into(),
                },
            ],
            usage: Some((7, 5)),
            ..Script::default()
        },
    );
    stub.script("text-model", Script::content("scripted answer"));
    let (_, v) = post(
        &chat_url(&stub),
        json!({"model": "tools-model", "messages": [{"role": "user", "content": "weather?"}]}),
    )
    .await;
    assert_eq!(
        v["choices"][0],
        json!({
            "index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
            ]},
            "finish_reason": "tool_calls"
        })
    );
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12})
    );
    let (_, v) = post(
        &chat_url(&stub),
        json!({"model": "text-model", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(v["choices"][0]["message"]["content"], "scripted answer");
}

#[tokio::test]
async fn chat_without_messages_is_a_400_openai_error() {
    let stub = Stub::start().await;
    let (status, v) = post(&chat_url(&stub), json!({"model": "m"})).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("messages"));
}

#[tokio::test]
async fn stream_sends_role_chunk_content_pieces_finish_and_done() {
    let stub = Stub::start().await;
    stub.script(
        "stream-model",
        Script {
            content: Some("héllo wörld".into()),
            chunk_size: 4,
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "stream-model", "stream": true,
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let (events, _, err) = read_stream(resp).await;
    assert!(err.is_none());
    let chunks = json_chunks(&events);
    // role, 3 content pieces, finish; no usage chunk
    assert_eq!(chunks.len(), 5, "{chunks:#?}");
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-stub-"));
    for c in &chunks {
        assert_eq!(c["id"], id);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["created"], chunks[0]["created"]);
        assert_eq!(c["model"], "stream-model");
        assert!(c.get("usage").is_none(), "usage key must be absent: {c}");
    }
    assert_eq!(
        chunks[0]["choices"],
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}])
    );
    let pieces: Vec<&str> = chunks[1..4]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(pieces, ["héll", "o wö", "rld"]);
    assert_eq!(
        chunks[4]["choices"],
        json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    );
    assert!(wait_until(|| stub.completed_streams() == 1).await);
    assert_eq!(stub.cancelled_streams(), 0);
}

#[tokio::test]
async fn stream_usage_chunk_only_when_include_usage() {
    let stub = Stub::start().await;
    let req = |include: Option<bool>| {
        let mut body = json!({"model": "u-model", "stream": true,
            "messages": [{"role": "user", "content": "one two"}]});
        if let Some(i) = include {
            body["stream_options"] = json!({"include_usage": i});
        }
        client().post(chat_url(&stub)).json(&body).send()
    };
    let (events, _, _) = read_stream(req(Some(true)).await.unwrap()).await;
    let chunks = json_chunks(&events);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    // content "echo: one two" = 3 words
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})
    );
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "stop"
    );
    assert_eq!(
        chunks.iter().filter(|c| c.get("usage").is_some()).count(),
        1
    );

    for include in [None, Some(false)] {
        let (events, _, _) = read_stream(req(include).await.unwrap()).await;
        let chunks = json_chunks(&events);
        assert!(chunks.iter().all(|c| c.get("usage").is_none()));
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
    }
}

#[tokio::test]
async fn stream_tool_calls_like_openai() {
    let stub = Stub::start().await;
    stub.script(
        "stream-tools",
        Script {
            tool_calls: vec![
                ScriptToolCall {
                    id: "call_a".into(),
                    name: "search".into(),
                    arguments: r#"{"q":"rust"}"#.into(),
                },
                ScriptToolCall {
                    id: "call_b".into(),
                    name: "noop".into(),
                    arguments: "{}".into(),
                },
            ],
            chunk_size: 5,
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "stream-tools", "stream": true,
            "messages": [{"role": "user", "content": "go"}]}))
        .send()
        .await
        .unwrap();
    let (events, _, _) = read_stream(resp).await;
    let chunks = json_chunks(&events);
    let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
    assert_eq!(deltas[0], &json!({"role": "assistant", "content": ""}));
    // call 0: header, then '{"q":' '"rust' '"}' ; call 1: header, '{}'
    assert_eq!(
        deltas[1],
        &json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
            "function": {"name": "search", "arguments": ""}}]})
    );
    let frag = |d: &Value| -> (u64, String) {
        let tc = &d["tool_calls"][0];
        assert_eq!(
            tc.as_object().unwrap().len(),
            2,
            "only index + function: {tc}"
        );
        assert_eq!(tc["function"].as_object().unwrap().len(), 1);
        (
            tc["index"].as_u64().unwrap(),
            tc["function"]["arguments"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(frag(deltas[2]), (0, "{\"q\":".to_string()));
    assert_eq!(frag(deltas[3]), (0, "\"rust".to_string()));
    assert_eq!(frag(deltas[4]), (0, "\"}".to_string()));
    assert_eq!(
        deltas[5],
        &json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
            "function": {"name": "noop", "arguments": ""}}]})
    );
    assert_eq!(frag(deltas[6]), (1, "{}".to_string()));
    assert_eq!(deltas[7], &json!({}));
    assert_eq!(chunks[7]["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(chunks.len(), 8);
}

#[tokio::test]
async fn stream_events_are_flushed_one_by_one() {
    let stub = Stub::start().await;
    stub.script(
        "slow-stream",
        Script {
            content: Some("aaaabbbbccccdddd".into()),
            chunk_interval_ms: 150,
            ..Script::default()
        },
    );
    let start = Instant::now();
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "slow-stream", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    let first_at = start.elapsed();
    let first = std::str::from_utf8(&first).unwrap();
    assert!(first.starts_with("data: {") && first.ends_with("\n\n"));
    assert_eq!(sse_events(first).len(), 1, "one event per frame: {first:?}");
    let mut frames = 1;
    while let Some(f) = body.next().await {
        let f = f.unwrap();
        assert_eq!(sse_events(std::str::from_utf8(&f).unwrap()).len(), 1);
        frames += 1;
    }
    let total = start.elapsed();
    // role + 4 content + finish + [DONE], 150 ms apart
    assert_eq!(frames, 7);
    assert!(first_at < Duration::from_millis(500), "{first_at:?}");
    assert!(total >= Duration::from_millis(900), "{total:?}");
}

#[tokio::test]
async fn stream_delay_holds_first_chunk_not_headers() {
    let stub = Stub::start().await;
    stub.script(
        "delayed-stream",
        Script {
            delay_ms: 400,
            ..Script::default()
        },
    );
    let start = Instant::now();
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "delayed-stream", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    let headers_at = start.elapsed();
    let mut body = resp.bytes_stream();
    body.next().await.unwrap().unwrap();
    let first_at = start.elapsed();
    assert!(headers_at < Duration::from_millis(300), "{headers_at:?}");
    assert!(first_at >= Duration::from_millis(400), "{first_at:?}");
}

#[tokio::test]
async fn stream_close_after_chunks_drops_connection_without_done() {
    let stub = Stub::start().await;
    stub.script(
        "cut-stream",
        Script {
            content: Some("0123456789abcdef".into()),
            chunk_size: 2,
            close_after_chunks: Some(3),
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "cut-stream", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (events, _, err) = read_stream(resp).await;
    assert!(err.is_some(), "body must end in an error, got {events:?}");
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(!events.contains(&"[DONE]".to_string()));
    let pieces: Vec<String> = events[1..]
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(e).unwrap();
            v["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(pieces, ["01", "23", "45"]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(stub.completed_streams(), 0);
    assert_eq!(stub.cancelled_streams(), 0);
}

#[tokio::test]
async fn stream_events_are_sent_as_scripted_and_close_with_last_chunk_drops_after_them() {
    let stub = Stub::start().await;
    stub.script(
        "scripted-cut",
        Script {
            stream_events: Some(vec![r#"{"a":1}"#.into(), "b".into(), "c".into()]),
            close_after_chunks: Some(1),
            close_with_last_chunk: true,
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "scripted-cut", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (events, _, err) = read_stream(resp).await;
    assert!(err.is_some(), "body must end in an error, got {events:?}");
    assert_eq!(events, [r#"{"a":1}"#, "b"]);

    // Without the cut, the scripted events and then [DONE].
    stub.script(
        "scripted",
        Script {
            stream_events: Some(vec!["x".into()]),
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "scripted", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    let (events, _, err) = read_stream(resp).await;
    assert!(err.is_none());
    assert_eq!(events, ["x", "[DONE]"]);
}

/// With `close_with_last_chunk` the last chunk and the drop arrive together:
/// once the read that brings the last chunk returns, the end of the
/// connection is already there (a read without waiting sees it).
#[tokio::test]
async fn close_with_last_chunk_sends_the_drop_with_the_last_chunk() {
    use std::io::{ErrorKind, Read, Write};
    let stub = Stub::start().await;
    stub.script(
        "cut-together",
        Script {
            content: Some("one two three".into()),
            chunk_interval_ms: 100,
            close_after_chunks: Some(2),
            close_with_last_chunk: true,
            ..Script::default()
        },
    );
    let addr = stub.addr();
    let (text, end) = tokio::task::spawn_blocking(move || {
        let body = r#"{"model":"cut-together","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nhost: stub\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = Vec::new();
        let mut buf = [0u8; 65536];
        // Waits for each piece; the last one is "two ".
        while !String::from_utf8_lossy(&text).contains(r#""content":"two ""#) {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed before the last chunk");
            text.extend_from_slice(&buf[..n]);
        }
        s.set_nonblocking(true).unwrap();
        let end = match s.read(&mut buf) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Err("the drop had not arrived"),
            Err(e) => panic!("{e}"),
        };
        (String::from_utf8_lossy(&text).into_owned(), end)
    })
    .await
    .unwrap();
    assert_eq!(end, Ok(0), "{text}");
    assert!(
        !text.contains("[DONE]") && !text.contains("three"),
        "{text}"
    );
}

#[tokio::test]
async fn stream_garbage_sends_non_json_data_line_then_done() {
    let stub = Stub::start().await;
    stub.script(
        "garbage-stream",
        Script {
            garbage: true,
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "garbage-stream", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (events, _, _) = read_stream(resp).await;
    assert_eq!(events, ["this is not json", "[DONE]"]);
}

#[tokio::test]
async fn dropping_stream_client_counts_cancelled_stream() {
    let stub = Stub::start().await;
    stub.script(
        "cancel-stream",
        Script {
            content: Some("x".repeat(400)),
            chunk_size: 1,
            chunk_interval_ms: 20,
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "cancel-stream", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    body.next().await.unwrap().unwrap();
    body.next().await.unwrap().unwrap();
    drop(body);
    assert!(
        wait_until(|| stub.cancelled_streams() == 1).await,
        "cancelled_streams stayed {}",
        stub.cancelled_streams()
    );
    assert_eq!(stub.completed_streams(), 0);
}

#[tokio::test]
async fn stream_with_status_script_answers_plain_error() {
    let stub = Stub::start().await;
    stub.script(
        "err-stream",
        Script {
            status: Some(429),
            error_message: Some("slow down".into()),
            ..Script::default()
        },
    );
    let resp = client()
        .post(chat_url(&stub))
        .json(&json!({"model": "err-stream", "stream": true,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], "slow down");
    assert_eq!(v["error"]["type"], "server_error");
}
