//! `POST /v1/responses` (the OpenAI Responses wire, for Gatehouse's native
//! mode), plain and streamed (SSE), from the same scripts as chat: the
//! script's text (else `"echo: "` + the last user text of `input`) as a
//! message item, its tool calls as `function_call` items, and usage
//! `input_tokens`/`output_tokens`. A stream with `close_after_chunks` ends
//! without its terminal event.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::reply::{error, json_response, Flavor};
use crate::{det, Script, Shared};

/// The text of the last user message of `input`.
fn last_user_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .rev()
            .find(|i| i.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|i| i.get("content"))
            .map(|c| match c {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
                _ => String::new(),
            })
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// `s` in pieces of at most `n` characters.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

pub(crate) fn responses(
    shared: &Arc<Shared>,
    body: &Value,
    script: &Script,
    streaming: bool,
) -> Response {
    let Some(input) = body.get("input") else {
        return error(
            Flavor::OpenAi,
            StatusCode::BAD_REQUEST,
            "'input' is a required property",
        );
    };
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    let text = match &script.content {
        Some(c) => Some(c.clone()),
        None if !script.tool_calls.is_empty() => None,
        None => Some(format!("echo: {}", last_user_text(input))),
    };
    let n = shared.next_id();
    let id = format!("resp_stub{n}");
    let mut output = Vec::new();
    if let Some(t) = &text {
        output.push(json!({"type": "message", "id": format!("msg_stub{n}"), "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": t, "annotations": []}]}));
    }
    for (i, c) in script.tool_calls.iter().enumerate() {
        output.push(
            json!({"type": "function_call", "id": format!("fc_stub{n}_{i}"), "call_id": c.id,
                           "name": c.name, "arguments": c.arguments, "status": "completed"}),
        );
    }
    let (input_tokens, output_tokens) = script.usage.unwrap_or_else(|| {
        let c = det::words(text.as_deref().unwrap_or("")) + script.tool_calls.len() as u64;
        (10, c.max(1))
    });
    let usage = json!({"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": input_tokens + output_tokens});
    let object = |status: &str, output: Vec<Value>, usage: Value| {
        json!({"id": id, "object": "response", "created_at": 1, "status": status, "model": model,
               "output": output, "usage": usage, "error": null, "store": body.get("store").cloned().unwrap_or(json!(false))})
    };
    if !streaming {
        return json_response(StatusCode::OK, &object("completed", output, usage));
    }
    let mut events: Vec<Value> = vec![
        json!({"type": "response.created", "response": object("in_progress", vec![], Value::Null)}),
        json!({"type": "response.in_progress", "response": object("in_progress", vec![], Value::Null)}),
    ];
    for (idx, item) in output.iter().enumerate() {
        let item_id = item["id"].clone();
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        if item["type"] == "message" {
            added["content"] = json!([]);
            events.push(
                json!({"type": "response.output_item.added", "output_index": idx, "item": added}),
            );
            let t = item["content"][0]["text"].as_str().unwrap_or("");
            for piece in pieces(t, script.chunk_size()) {
                events.push(json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": idx,
                                   "content_index": 0, "delta": piece}));
            }
            events.push(
                json!({"type": "response.output_text.done", "item_id": item_id, "output_index": idx,
                               "content_index": 0, "text": t}),
            );
        } else {
            added["arguments"] = json!("");
            events.push(
                json!({"type": "response.output_item.added", "output_index": idx, "item": added}),
            );
            let a = item["arguments"].as_str().unwrap_or("");
            events.push(
                json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                               "output_index": idx, "delta": a}),
            );
            events.push(
                json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                               "output_index": idx, "arguments": a}),
            );
        }
        events
            .push(json!({"type": "response.output_item.done", "output_index": idx, "item": item}));
    }
    if script.close_after_chunks.is_none() {
        events.push(
            json!({"type": "response.completed", "response": object("completed", output, usage)}),
        );
    }
    let mut text = String::new();
    for (seq, mut e) in events.into_iter().enumerate() {
        e["sequence_number"] = json!(seq);
        let kind = e["type"].as_str().unwrap_or("").to_string();
        text.push_str(&format!("event: {kind}\ndata: {e}\n\n"));
    }
    let mut resp = Response::new(Body::from(Bytes::from(text)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}
