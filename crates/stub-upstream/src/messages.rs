//! Anthropic's Messages API: `POST /v1/messages` (plain and SSE) and
//! `POST /v1/messages/count_tokens`, scripted per `model` like the other
//! routes. Errors have Anthropic's shape
//! (`{"type":"error","error":{"type","message"}}`), 529 included. For a
//! stream, `stream_events` holds whole SSE frames (`event: x\ndata: {...}`),
//! sent in order as they are: a test can end a stream with `event: error`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::chat::{char_chunks, next_event, StreamGuard, StreamState};
use crate::conn::Hold;
use crate::reply::json_response;
use crate::{det, sleep_or_shutdown, Script, Shared, DEFAULT_SCRIPT};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Messages,
    CountTokens,
}

impl Route {
    pub(crate) fn find(path: &str) -> Option<Route> {
        match path {
            "/v1/messages" => Some(Route::Messages),
            "/v1/messages/count_tokens" => Some(Route::CountTokens),
            _ => None,
        }
    }
}

/// Anthropic's `error.type` for a status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 409 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An error in Anthropic's shape.
pub(crate) fn error(status: u16, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(
        code,
        &json!({"type": "error", "error": {"type": error_type(status), "message": message},
                "request_id": "req_stub"}),
    );
    if status == 429 || status == 529 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

pub(crate) async fn handle(
    shared: &Arc<Shared>,
    route: Route,
    method: &Method,
    body: &Value,
    hold: Option<Hold>,
) -> Response {
    if method != Method::POST {
        return error(405, "stub: /v1/messages expects POST");
    }
    let script_arc = shared.script_for(body.get("model").and_then(Value::as_str));
    let script: &Script = script_arc.as_deref().unwrap_or(&DEFAULT_SCRIPT);
    if script.hang {
        let mut rx = shared.shutdown.clone();
        let _ = rx.wait_for(|stop| *stop).await;
        return error(503, "stub: shutting down");
    }
    let streaming =
        route == Route::Messages && body.get("stream").and_then(Value::as_bool) == Some(true);
    if script.delay_ms > 0
        && (!streaming || script.status.is_some())
        && !sleep_or_shutdown(shared, script.delay_ms).await
    {
        return error(503, "stub: shutting down");
    }
    if let Some(status) = script.status {
        return error(
            status,
            script.error_message.as_deref().unwrap_or("stub error"),
        );
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return error(400, "messages: Field required");
    };
    if route == Route::CountTokens {
        return json_response(StatusCode::OK, &json!({"input_tokens": count(body)}));
    }
    if body.get("max_tokens").and_then(Value::as_u64).is_none() {
        return error(400, "max_tokens: Field required");
    }
    if let (Some(text), false) = (&script.body, streaming) {
        let mut resp = Response::new(Body::from(text.clone()));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return resp;
    }
    let answer = Answer::of(shared, body, messages, script);
    if streaming {
        stream(shared, &answer, script, hold)
    } else {
        json_response(StatusCode::OK, &answer.message())
    }
}

/// About four characters a token, never 0.
fn count(body: &Value) -> u64 {
    let chars = body.to_string().chars().count() as u64;
    chars.div_ceil(4).max(1)
}

/// The text of a Messages `content`: a string, or its text blocks.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

struct Answer {
    id: String,
    model: String,
    text: Option<String>,
    /// (id, name, arguments as JSON text)
    tools: Vec<(String, String, String)>,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_creation: u64,
}

impl Answer {
    fn of(shared: &Shared, body: &Value, messages: &[Value], script: &Script) -> Answer {
        let text = match &script.content {
            Some(c) => Some(c.clone()),
            None if !script.tool_calls.is_empty() => None,
            None => {
                let last = messages
                    .iter()
                    .rev()
                    .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                    .and_then(|m| m.get("content"))
                    .map(text_of)
                    .unwrap_or_default();
                Some(format!("echo: {last}"))
            }
        };
        let tools: Vec<(String, String, String)> = script
            .tool_calls
            .iter()
            .map(|t| (t.id.clone(), t.name.clone(), t.arguments.clone()))
            .collect();
        let (input, output) = script.usage.unwrap_or_else(|| {
            let c = det::words(text.as_deref().unwrap_or("")) + tools.len() as u64;
            (10, c.max(1))
        });
        let (cache_read, cache_creation) = script.cache_tokens.unwrap_or((0, 0));
        Answer {
            id: format!("msg_stub_{}", shared.next_id()),
            model: body
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            text,
            tools,
            input,
            output,
            cache_read,
            cache_creation,
        }
    }

    fn stop_reason(&self) -> &'static str {
        if self.tools.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }

    fn usage(&self, output: u64) -> Value {
        json!({"input_tokens": self.input, "output_tokens": output,
               "cache_read_input_tokens": self.cache_read,
               "cache_creation_input_tokens": self.cache_creation})
    }

    fn message(&self) -> Value {
        let mut content = Vec::new();
        if let Some(t) = &self.text {
            content.push(json!({"type": "text", "text": t}));
        }
        for (id, name, args) in &self.tools {
            let input: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
            content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
        json!({"id": self.id, "type": "message", "role": "assistant", "model": self.model,
               "content": content, "stop_reason": self.stop_reason(), "stop_sequence": null,
               "usage": self.usage(self.output)})
    }
}

fn frame(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

fn stream(shared: &Arc<Shared>, a: &Answer, script: &Script, hold: Option<Hold>) -> Response {
    let mut events: Vec<Bytes> = Vec::new();
    if let Some(scripted) = &script.stream_events {
        events.extend(scripted.iter().map(|f| Bytes::from(format!("{f}\n\n"))));
    } else {
        let n = script.chunk_size();
        let mut start = a.message();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        start["usage"] = a.usage(1);
        events.push(frame(
            "message_start",
            &json!({"type": "message_start", "message": start}),
        ));
        events.push(frame("ping", &json!({"type": "ping"})));
        let mut index = 0;
        if let Some(t) = &a.text {
            events.push(frame(
                "content_block_start",
                &json!({"type": "content_block_start",
                "index": index, "content_block": {"type": "text", "text": ""}}),
            ));
            for piece in char_chunks(t, n) {
                events.push(frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta",
                    "index": index, "delta": {"type": "text_delta", "text": piece}}),
                ));
            }
            events.push(frame(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
            index += 1;
        }
        for (id, name, args) in &a.tools {
            events.push(frame("content_block_start", &json!({"type": "content_block_start",
                "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
            for piece in char_chunks(args, n) {
                events.push(frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta",
                    "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
            events.push(frame(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
            index += 1;
        }
        events.push(frame(
            "message_delta",
            &json!({"type": "message_delta",
            "delta": {"stop_reason": a.stop_reason(), "stop_sequence": null},
            "usage": {"output_tokens": a.output}}),
        ));
        events.push(frame("message_stop", &json!({"type": "message_stop"})));
    }
    let abort_at = script
        .close_after_chunks
        .map(|n| (n + 1).min(events.len().saturating_sub(1)));
    let state = StreamState {
        events: events.into_iter(),
        sent: 0,
        first_delay: script.delay_ms,
        interval: script.chunk_interval_ms,
        abort_at,
        abort_with_last: script.close_with_last_chunk,
        hold,
        guard: StreamGuard {
            shared: shared.clone(),
            finished: false,
        },
    };
    let mut resp = Response::new(Body::from_stream(futures_util::stream::unfold(
        state, next_event,
    )));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
