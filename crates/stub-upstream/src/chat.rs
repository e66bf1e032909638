//! `POST /v1/chat/completions`, plain and streamed (SSE).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::conn::Hold;
use crate::reply::{error, json_response, Flavor};
use crate::{det, Script, Shared};

#[derive(Serialize, Clone, Copy)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
struct ChatCompletion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChatChoice<'a>; 1],
    usage: Usage,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    message: AssistantMessage<'a>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [ChunkChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCallDelta<'a>>,
}

#[derive(Serialize)]
struct ToolCallDelta<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionDelta<'a>,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

/// Text of a message `content`: a string, or the concatenated `text` of the
/// `{"type":"text","text":..}` parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                let is_text = p.get("type").and_then(Value::as_str).unwrap_or("text") == "text";
                if let (true, Some(t)) = (is_text, p.get("text").and_then(Value::as_str)) {
                    out.push_str(t);
                }
            }
            out
        }
        _ => String::new(),
    }
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Split `s` into pieces of at most `n` characters (on char boundaries).
pub(crate) fn char_chunks(s: &str, n: usize) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = rest.char_indices().nth(n).map_or(rest.len(), |(i, _)| i);
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head)
    })
}

pub(crate) fn chat(
    shared: &Arc<Shared>,
    body: &Value,
    script: &Script,
    streaming: bool,
    hold: Option<Hold>,
) -> Response {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return error(
            Flavor::OpenAi,
            StatusCode::BAD_REQUEST,
            "'messages' is a required property",
        );
    };
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");

    let echo;
    let content: Option<&str> = match &script.content {
        Some(c) => Some(c.as_str()),
        None if !script.tool_calls.is_empty() => None,
        None => {
            let last_user = messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .and_then(|m| m.get("content"))
                .map(content_text)
                .unwrap_or_default();
            echo = format!("echo: {last_user}");
            Some(echo.as_str())
        }
    };
    let finish_reason = if script.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let usage = {
        let (p, c) = script.usage.unwrap_or_else(|| {
            let c = det::words(content.unwrap_or("")) + script.tool_calls.len() as u64;
            (10, c.max(1))
        });
        Usage {
            prompt_tokens: p,
            completion_tokens: c,
            total_tokens: p + c,
        }
    };
    let id = format!("chatcmpl-stub-{}", shared.next_id());
    let created = now_unix();

    if !streaming {
        let resp = ChatCompletion {
            id: &id,
            object: "chat.completion",
            created,
            model,
            choices: [ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content,
                    tool_calls: script
                        .tool_calls
                        .iter()
                        .map(|t| ToolCall {
                            id: &t.id,
                            kind: "function",
                            function: Function {
                                name: &t.name,
                                arguments: &t.arguments,
                            },
                        })
                        .collect(),
                },
                finish_reason,
            }],
            usage,
        };
        return json_response(StatusCode::OK, &resp);
    }

    // Streaming: every event is built now and sent as its own body frame.
    let mut events: Vec<Bytes> = Vec::new();
    if let Some(scripted) = &script.stream_events {
        for data in scripted {
            events.push(Bytes::from(format!("data: {data}\n\n")));
        }
    } else if script.garbage {
        events.push(Bytes::from_static(b"data: this is not json\n\n"));
    } else {
        let include_usage = body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true);
        let n = script.chunk_size();
        let chunk = |delta: Delta<'_>, finish: Option<&'static str>| {
            let choices = [ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish,
            }];
            sse(&Chunk {
                id: &id,
                object: "chat.completion.chunk",
                created,
                model,
                choices: &choices,
                usage: None,
            })
        };
        events.push(chunk(
            Delta {
                role: Some("assistant"),
                content: Some(""),
                ..Delta::default()
            },
            None,
        ));
        for piece in char_chunks(content.unwrap_or(""), n) {
            events.push(chunk(
                Delta {
                    content: Some(piece),
                    ..Delta::default()
                },
                None,
            ));
        }
        for (index, call) in script.tool_calls.iter().enumerate() {
            events.push(chunk(
                Delta {
                    tool_calls: vec![ToolCallDelta {
                        index,
                        id: Some(&call.id),
                        kind: Some("function"),
                        function: FunctionDelta {
                            name: Some(&call.name),
                            arguments: "",
                        },
                    }],
                    ..Delta::default()
                },
                None,
            ));
            for frag in char_chunks(&call.arguments, n) {
                events.push(chunk(
                    Delta {
                        tool_calls: vec![ToolCallDelta {
                            index,
                            id: None,
                            kind: None,
                            function: FunctionDelta {
                                name: None,
                                arguments: frag,
                            },
                        }],
                        ..Delta::default()
                    },
                    None,
                ));
            }
        }
        events.push(chunk(Delta::default(), Some(finish_reason)));
        if include_usage {
            events.push(sse(&Chunk {
                id: &id,
                object: "chat.completion.chunk",
                created,
                model,
                choices: &[],
                usage: Some(usage),
            }));
        }
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));

    // close_after_chunks: N chunks after the role chunk, never the [DONE].
    let abort_at = script
        .close_after_chunks
        .map(|n| (n + 1).min(events.len() - 1));
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
    let stream = futures_util::stream::unfold(state, next_event);
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

fn sse<T: Serialize>(value: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut buf, value).expect("serialising a chunk cannot fail");
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// Counts the stream as cancelled if it is dropped before it finished.
pub(crate) struct StreamGuard {
    pub(crate) shared: Arc<Shared>,
    pub(crate) finished: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

pub(crate) struct StreamState {
    pub(crate) events: std::vec::IntoIter<Bytes>,
    pub(crate) sent: usize,
    pub(crate) first_delay: u64,
    pub(crate) interval: u64,
    pub(crate) abort_at: Option<usize>,
    /// Drop the connection as soon as the last chunk is flushed.
    pub(crate) abort_with_last: bool,
    /// The connection's switch for keeping the last chunks until the drop.
    pub(crate) hold: Option<Hold>,
    pub(crate) guard: StreamGuard,
}

type Item = Result<Bytes, std::io::Error>;

pub(crate) async fn next_event(mut st: StreamState) -> Option<(Item, StreamState)> {
    if st.guard.finished {
        return None;
    }
    let aborting = st.abort_at == Some(st.sent);
    let delay = if st.sent == 0 {
        st.first_delay
    } else if aborting && st.abort_with_last {
        0
    } else {
        st.interval
    };
    if delay > 0 {
        let mut rx = st.guard.shared.shutdown.clone();
        let stopped = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(delay)) => false,
            _ = rx.wait_for(|stop| *stop) => true,
        };
        if stopped {
            st.guard.finished = true;
            return Some((Err(std::io::Error::other("stub shutting down")), st));
        }
    }
    if aborting {
        // Server-side abort: counted neither as cancelled nor as completed.
        // hyper drops its unflushed write buffer when the body errors, so go
        // pending first: it flushes what was sent so far (everything it
        // buffered, in one write). One pending poll is enough for that, and
        // with the connection held the flushed bytes leave with the drop;
        // the 20 ms let the reader take the chunks before the drop.
        if st.abort_with_last {
            if let Some(hold) = &st.hold {
                hold.until_close();
            }
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        st.guard.finished = true;
        return Some((Err(std::io::Error::other("stub: close_after_chunks")), st));
    }
    match st.events.next() {
        Some(ev) => {
            st.sent += 1;
            Some((Ok(ev), st))
        }
        None => {
            st.guard.finished = true;
            st.guard.shared.completed.fetch_add(1, Ordering::SeqCst);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_chunks_split_on_char_boundaries() {
        let v: Vec<&str> = char_chunks("héllo wörld", 4).collect();
        assert_eq!(v, ["héll", "o wö", "rld"]);
        assert_eq!(char_chunks("", 4).count(), 0);
        assert_eq!(char_chunks("abcd", 4).collect::<Vec<_>>(), ["abcd"]);
    }

    #[test]
    fn content_text_joins_text_parts() {
        let v = serde_json::json!([
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "x"}},
            {"type": "text", "text": "b"}
        ]);
        assert_eq!(content_text(&v), "ab");
        assert_eq!(content_text(&Value::String("s".into())), "s");
        assert_eq!(content_text(&Value::Null), "");
    }
}
