//! Anthropic Messages stream → OpenAI chat chunks, one upstream event at a
//! time (never collected): the role on the first chunk, text deltas as
//! content, each `tool_use` block as a tool call (index, id and name first,
//! then its argument pieces; `"{}"` when it had none), the finish reason,
//! a usage chunk under the one convention, then `[DONE]`. An upstream
//! `event: error` is passed on as it came: the relay ends the stream with
//! chat's mid-stream error.

use serde_json::{json, Value};

use super::to_chat_answer::{finish_reason, now_s, MessagesUsage};
use crate::wire::sse::SseEvent;

#[derive(Default)]
pub struct MessagesToChat {
    id: Value,
    model: Value,
    created: i64,
    usage: MessagesUsage,
    /// Upstream block index → (chat tool index, whether arguments came).
    tools: Vec<(u64, usize, bool)>,
    next_tool: usize,
    finish: Option<&'static str>,
    done: bool,
}

fn data(v: Value) -> SseEvent {
    SseEvent {
        event: None,
        data: v.to_string(),
    }
}

impl MessagesToChat {
    pub fn new() -> Self {
        MessagesToChat {
            created: now_s(),
            ..Default::default()
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> SseEvent {
        data(json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    }

    fn tool_delta(&self, index: usize, call: Value) -> SseEvent {
        let mut call = call;
        call["index"] = json!(index);
        self.chunk(json!({"tool_calls": [call]}), None)
    }

    /// The chat events for one upstream event.
    pub fn translate(&mut self, ev: SseEvent) -> Result<Vec<SseEvent>, String> {
        if ev.event.as_deref() == Some("error") {
            return Ok(vec![ev]);
        }
        if self.done || ev.data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let v: Value =
            serde_json::from_str(&ev.data).map_err(|_| "a stream event is not JSON".to_string())?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or_default();
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let out = match kind {
            "message_start" => {
                let m = v.get("message").ok_or("message_start has no message")?;
                self.id = m.get("id").cloned().unwrap_or(Value::Null);
                self.model = m.get("model").cloned().unwrap_or(Value::Null);
                if let Some(u) = m.get("usage") {
                    self.usage.merge(u);
                }
                vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
            }
            "content_block_start" => {
                let b = v.get("content_block").ok_or("a block start has no block")?;
                match b.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let tool = self.next_tool;
                        self.next_tool += 1;
                        self.tools.push((index, tool, false));
                        let call = json!({"id": b.get("id"), "type": "function",
                            "function": {"name": b.get("name"), "arguments": ""}});
                        vec![self.tool_delta(tool, call)]
                    }
                    Some("text") => match b.get("text").and_then(Value::as_str) {
                        Some(t) if !t.is_empty() => vec![self.chunk(json!({"content": t}), None)],
                        _ => Vec::new(),
                    },
                    _ => Vec::new(),
                }
            }
            "content_block_delta" => {
                let d = v.get("delta").ok_or("a block delta has no delta")?;
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => match d.get("text").and_then(Value::as_str) {
                        Some(t) if !t.is_empty() => vec![self.chunk(json!({"content": t}), None)],
                        _ => Vec::new(),
                    },
                    Some("input_json_delta") => {
                        let piece = d
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        match self.tools.iter_mut().find(|t| t.0 == index) {
                            Some(t) if !piece.is_empty() => {
                                t.2 = true;
                                let tool = t.1;
                                vec![self
                                    .tool_delta(tool, json!({"function": {"arguments": piece}}))]
                            }
                            _ => Vec::new(),
                        }
                    }
                    _ => Vec::new(),
                }
            }
            "content_block_stop" => match self.tools.iter().find(|t| t.0 == index) {
                Some(&(_, tool, false)) => {
                    vec![self.tool_delta(tool, json!({"function": {"arguments": "{}"}}))]
                }
                _ => Vec::new(),
            },
            "message_delta" => {
                if let Some(u) = v.get("usage") {
                    self.usage.merge(u);
                }
                let reason = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str);
                match finish_reason(reason) {
                    Some(f) => {
                        self.finish = Some(f);
                        vec![self.chunk(json!({}), Some(f))]
                    }
                    None => Vec::new(),
                }
            }
            "message_stop" => {
                self.done = true;
                let mut out = Vec::with_capacity(3);
                if self.finish.is_none() {
                    out.push(self.chunk(json!({}), Some("stop")));
                }
                out.push(data(json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [], "usage": self.usage.chat(),
                })));
                out.push(SseEvent {
                    event: None,
                    data: "[DONE]".into(),
                });
                out
            }
            // ping, and events this version does not know.
            _ => Vec::new(),
        };
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, v: Value) -> SseEvent {
        SseEvent {
            event: Some(name.into()),
            data: v.to_string(),
        }
    }

    fn run(events: Vec<SseEvent>) -> Vec<Value> {
        let mut t = MessagesToChat::new();
        events
            .into_iter()
            .flat_map(|e| t.translate(e).unwrap())
            .map(|e| {
                if e.data == "[DONE]" {
                    Value::from("[DONE]")
                } else {
                    serde_json::from_str(&e.data).unwrap()
                }
            })
            .collect()
    }

    #[test]
    fn a_stream_with_text_and_tools_becomes_chat_chunks_then_usage_then_done() {
        let out = run(vec![
            ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-x",
                "usage": {"input_tokens": 7, "output_tokens": 1, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 2}}}),
            ),
            ev("ping", json!({"type": "ping"})),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 2}),
            ),
            ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            ),
            ev("message_stop", json!({"type": "message_stop"})),
        ]);
        let deltas: Vec<&Value> = out
            .iter()
            .filter_map(|c| c.get("choices")?.get(0)?.get("delta"))
            .collect();
        assert_eq!(deltas[0], &json!({"role": "assistant", "content": ""}));
        assert_eq!(deltas[1], &json!({"content": "Hi"}));
        assert_eq!(
            deltas[2],
            &json!({"tool_calls": [{"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": ""}}]})
        );
        assert_eq!(
            deltas[3],
            &json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]})
        );
        assert_eq!(
            deltas[4],
            &json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})
        );
        assert_eq!(deltas[5]["tool_calls"][0]["index"], 1);
        assert_eq!(
            deltas[6],
            &json!({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]})
        );
        assert_eq!(
            out[out.len() - 3]["choices"][0]["finish_reason"],
            "tool_calls"
        );
        assert_eq!(
            out[out.len() - 2]["usage"],
            json!({"prompt_tokens": 12, "completion_tokens": 9,
            "total_tokens": 21, "prompt_tokens_details": {"cached_tokens": 3}})
        );
        assert_eq!(out[out.len() - 1], "[DONE]");
        assert!(out
            .iter()
            .filter(|c| c.is_object())
            .all(|c| c["model"] == "claude-x" && c["id"] == "msg_1"));
    }

    #[test]
    fn usage_in_message_delta_wins_over_message_start() {
        let out = run(vec![
            ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 5, "output_tokens": 0}}}),
            ),
            ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"input_tokens": 6, "cache_read_input_tokens": 4, "output_tokens": 2}}),
            ),
            ev("message_stop", json!({"type": "message_stop"})),
        ]);
        assert_eq!(out[2]["usage"]["prompt_tokens"], 10);
        assert_eq!(out[2]["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert_eq!(out[1]["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn an_error_event_is_passed_on_and_bad_json_is_refused() {
        let mut t = MessagesToChat::new();
        let e = ev(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        assert_eq!(t.translate(e.clone()).unwrap(), vec![e]);
        assert!(t.translate(ev("content_block_delta", json!("x"))).is_err());
        assert!(t
            .translate(SseEvent {
                event: None,
                data: "{nope".into()
            })
            .is_err());
    }
}
