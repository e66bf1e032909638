//! AG-UI events for a streamed agent chat: a state machine that turns OpenAI
//! chunks into protocol events, keeping the protocol's order: the run starts
//! first, a message or tool call starts before its content and ends before
//! the run finishes, and nothing follows RUN_FINISHED or RUN_ERROR.
//! [`input`]: the AG-UI endpoint's `RunAgentInput`, checked and mapped to a
//! chat body.

pub mod input;

use std::collections::BTreeMap;

use serde_json::{json, Value};

fn now_ms() -> i64 {
    crate::store::now_ms()
}

#[derive(Debug)]
struct ToolCallState {
    id: String,
    open: bool,
}

#[derive(Debug)]
pub struct AgUi {
    thread_id: String,
    run_id: String,
    message_id: Option<String>,
    message_open: bool,
    tool_calls: BTreeMap<u64, ToolCallState>,
    done: bool,
}

impl AgUi {
    pub fn new(thread_id: String, run_id: String) -> AgUi {
        AgUi {
            thread_id,
            run_id,
            message_id: None,
            message_open: false,
            tool_calls: BTreeMap::new(),
            done: false,
        }
    }

    pub fn run_started(&self) -> Value {
        json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id, "timestamp": now_ms()})
    }

    pub fn custom(&self, name: &str, value: Value) -> Value {
        json!({"type": "CUSTOM", "name": name, "value": value, "timestamp": now_ms()})
    }

    fn message_id(&mut self, chunk: &Value) -> String {
        if self.message_id.is_none() {
            let id = chunk.get("id").and_then(Value::as_str).map(str::to_string);
            self.message_id = Some(id.unwrap_or_else(|| format!("msg-{}", self.run_id)));
        }
        self.message_id.clone().unwrap_or_default()
    }

    /// Events for one OpenAI chunk (already in its final, client-visible form).
    pub fn on_chunk(&mut self, chunk: &Value) -> Vec<Value> {
        let mut out = vec![];
        if self.done {
            return out;
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return out;
        };
        for choice in choices {
            // One assistant message per run: only the first choice is described.
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if let Some(text) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                let mid = self.message_id(chunk);
                if !self.message_open {
                    self.message_open = true;
                    out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant", "timestamp": now_ms()}));
                }
                out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": text, "timestamp": now_ms()}));
            }
            for tc in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
                if !self.tool_calls.contains_key(&index) {
                    let id = tc
                        .get("id")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("call-{}-{index}", self.run_id));
                    let name = tc
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let parent = self.message_id(chunk);
                    out.push(
                        json!({"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": name,
                        "parentMessageId": parent, "timestamp": now_ms()}),
                    );
                    self.tool_calls
                        .insert(index, ToolCallState { id, open: true });
                }
                if let Some(args) = tc
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .filter(|a| !a.is_empty())
                {
                    if let Some(state) = self.tool_calls.get(&index).filter(|s| s.open) {
                        out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": state.id, "delta": args, "timestamp": now_ms()}));
                    }
                }
            }
        }
        out
    }

    fn close_open(&mut self) -> Vec<Value> {
        let mut out = vec![];
        if self.message_open {
            self.message_open = false;
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": self.message_id.clone().unwrap_or_default(), "timestamp": now_ms()}));
        }
        for state in self.tool_calls.values_mut().filter(|s| s.open) {
            state.open = false;
            out.push(
                json!({"type": "TOOL_CALL_END", "toolCallId": state.id, "timestamp": now_ms()}),
            );
        }
        out
    }

    /// Ends open messages and tool calls; then `extra` (custom events); then RUN_FINISHED.
    pub fn finish(&mut self, usage: Option<&Value>, model: &str, extra: Vec<Value>) -> Vec<Value> {
        if self.done {
            return vec![];
        }
        let mut out = self.close_open();
        out.extend(extra);
        let mut fin = json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id, "timestamp": now_ms()});
        if let Some(u) = usage.filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64);
            let mut entry = json!({"model": model});
            if let Some(p) = n("prompt_tokens") {
                entry["inputTokens"] = json!(p);
            }
            if let Some(c) = n("completion_tokens") {
                entry["outputTokens"] = json!(c);
            }
            if let Some(t) = n("total_tokens") {
                entry["totalTokens"] = json!(t);
            }
            fin["usage"] = json!([entry]);
        }
        out.push(fin);
        self.done = true;
        out
    }

    /// RUN_ERROR after closing what is open; nothing more follows.
    pub fn error(&mut self, message: &str, code: &str) -> Vec<Value> {
        if self.done {
            return vec![];
        }
        let mut out = self.close_open();
        out.push(
            json!({"type": "RUN_ERROR", "message": message, "code": code, "timestamp": now_ms()}),
        );
        self.done = true;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protocol's ordering rules, as the client's verifier checks them.
    fn verify(events: &[Value]) {
        use std::collections::HashSet;
        assert_eq!(events[0]["type"], "RUN_STARTED");
        let (mut msgs, mut calls) = (HashSet::new(), HashSet::new());
        let mut ended = false;
        for e in events {
            assert!(!ended, "event after the run ended: {e}");
            assert!(e["timestamp"].is_i64());
            match e["type"].as_str().unwrap() {
                "TEXT_MESSAGE_START" => assert!(msgs.insert(e["messageId"].to_string())),
                "TEXT_MESSAGE_CONTENT" => {
                    assert!(msgs.contains(&e["messageId"].to_string()));
                    assert!(!e["delta"].as_str().unwrap().is_empty());
                }
                "TEXT_MESSAGE_END" => assert!(msgs.remove(&e["messageId"].to_string())),
                "TOOL_CALL_START" => assert!(calls.insert(e["toolCallId"].to_string())),
                "TOOL_CALL_ARGS" => assert!(calls.contains(&e["toolCallId"].to_string())),
                "TOOL_CALL_END" => assert!(calls.remove(&e["toolCallId"].to_string())),
                "RUN_FINISHED" => {
                    assert!(msgs.is_empty() && calls.is_empty());
                    ended = true;
                }
                "RUN_ERROR" => ended = true,
                _ => {}
            }
        }
        assert!(ended);
    }

    fn chunk(delta: Value) -> Value {
        json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta}]})
    }

    #[test]
    fn text_stream_becomes_start_content_end_and_finish_with_usage() {
        let mut a = AgUi::new("conv".into(), "turn".into());
        let mut ev = vec![a.run_started()];
        ev.extend(a.on_chunk(&chunk(json!({"role": "assistant", "content": ""}))));
        ev.extend(a.on_chunk(&chunk(json!({"content": "Hel"}))));
        ev.extend(a.on_chunk(&chunk(json!({"content": "lo"}))));
        ev.extend(a.finish(
            Some(&json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})),
            "m",
            vec![],
        ));
        verify(&ev);
        let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(ev[0]["threadId"], "conv");
        assert_eq!(ev[5]["usage"][0]["inputTokens"], 3);
    }

    #[test]
    fn parallel_tool_calls_each_start_take_args_and_end() {
        let mut a = AgUi::new("c".into(), "r".into());
        let mut ev = vec![a.run_started()];
        ev.extend(a.on_chunk(&chunk(json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "x", "arguments": ""}}]}))));
        ev.extend(a.on_chunk(&chunk(json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "y", "arguments": ""}}]}))));
        ev.extend(a.on_chunk(&chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}),
        )));
        ev.extend(a.on_chunk(&chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        )));
        ev.extend(a.on_chunk(&chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        )));
        ev.extend(a.finish(
            None,
            "m",
            vec![a.custom("service.approval_requested", json!({"id": "ap1"}))],
        ));
        verify(&ev);
        let args: String = ev
            .iter()
            .filter(|e| e["toolCallId"] == "call_a" && e["type"] == "TOOL_CALL_ARGS")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(args, "{\"a\":1}");
        assert_eq!(ev[ev.len() - 2]["name"], "service.approval_requested");
    }

    #[test]
    fn error_closes_what_is_open_and_nothing_follows() {
        let mut a = AgUi::new("c".into(), "r".into());
        let mut ev = vec![a.run_started()];
        ev.extend(a.on_chunk(&chunk(json!({"content": "partial"}))));
        ev.extend(a.error("upstream broke", "upstream_error"));
        assert!(a.finish(None, "m", vec![]).is_empty());
        assert!(a.on_chunk(&chunk(json!({"content": "late"}))).is_empty());
        verify(&ev);
        assert_eq!(ev.last().unwrap()["type"], "RUN_ERROR");
    }
}
