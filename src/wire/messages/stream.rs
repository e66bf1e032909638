//! Chat stream chunks as Messages SSE events (contract, "Translation:
//! Messages → OpenAI chat" → "Stream"): `message_start` first (with the
//! gateway's estimate of the prompt, never 0), then one content block at a
//! time (`content_block_start`/`_delta`/`_stop`), `message_delta` with the
//! stop reason and usage, and `message_stop`. Each non-empty upstream piece
//! is one delta; nothing is collected.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::from_chat_answer::{block_id, messages_usage, stop_reason};
use super::to_chat::ToolNames;
use crate::spend::Cost;
use crate::usage::{estimate_tokens, Tokens};
use crate::wire::chat::chunk::{ChunkDelta, ToolCallDelta};
use crate::wire::sse::{begin_event, end_event, frames_of, json_num, json_str, SseFrame};

/// An event frame `event: <type>` with its JSON data.
pub fn frame(data: Value) -> SseFrame {
    let event = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_string();
    SseFrame::Event {
        event,
        data: data.to_string(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    /// A tool call of this chat `tool_calls` index.
    Tool(u64),
}

/// What a `content_block_start` announces.
enum BlockStart<'a> {
    Thinking,
    Text,
    Tool { id: &'a str, name: &'a str },
}

/// The translation of one stream. Events are written straight into the
/// caller's output buffer (`*_into`); the methods without `_into` give the
/// same events as frames.
pub struct ToMessages {
    id: String,
    model: String,
    input_estimate: i64,
    names: ToolNames,
    started: bool,
    /// The open block and its index.
    open: Option<(Block, u64)>,
    next_index: u64,
    /// Block index of each chat tool call index.
    tools: HashMap<u64, u64>,
    finish: Option<String>,
    usage: Option<Value>,
    output_chars: usize,
    /// The request's cost, for `message_delta`'s usage (set as the stream ends).
    cost: Option<Cost>,
}

/// `{"type":"content_block_delta","index":N,"delta":{"type":KIND,FIELD:` (the
/// caller writes the value and [`close_delta`]).
fn begin_delta(out: &mut Vec<u8>, index: u64, kind: &str, field: &str) {
    begin_event(out, "content_block_delta");
    out.extend_from_slice(b"{\"type\":\"content_block_delta\",\"index\":");
    json_num(out, index);
    out.extend_from_slice(b",\"delta\":{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"");
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b"\":");
}

fn close_delta(out: &mut Vec<u8>) {
    out.extend_from_slice(b"}}");
    end_event(out);
}

impl ToMessages {
    /// `input_estimate`: the gateway's estimate of the prompt (at least 1 is sent).
    pub fn new(id: String, model: String, input_estimate: i64, names: ToolNames) -> ToMessages {
        ToMessages {
            id,
            model,
            input_estimate: input_estimate.max(1),
            names,
            started: false,
            open: None,
            next_index: 0,
            tools: HashMap::new(),
            finish: None,
            usage: None,
            output_chars: 0,
            cost: None,
        }
    }

    /// The request's cost, which [`ToMessages::finish`] puts in `message_delta`'s usage.
    pub fn set_cost(&mut self, cost: Cost) {
        self.cost = Some(cost);
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name `message_start` gives (before it went out).
    pub fn set_model(&mut self, model: String) {
        self.model = model;
    }

    pub fn started(&self) -> bool {
        self.started
    }

    /// `message_start`, once.
    pub fn start(&mut self, out: &mut Vec<SseFrame>) {
        let mut b = Vec::new();
        self.start_into(&mut b);
        out.extend(frames_of(&b));
    }

    /// `message_start`, once, into `out`.
    pub fn start_into(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        begin_event(out, "message_start");
        out.extend_from_slice(b"{\"type\":\"message_start\",\"message\":{\"id\":");
        json_str(out, &self.id);
        out.extend_from_slice(b",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
        json_str(out, &self.model);
        out.extend_from_slice(
            b",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":",
        );
        json_num(out, self.input_estimate);
        out.extend_from_slice(b",\"output_tokens\":0}}}");
        end_event(out);
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open.take() {
            begin_event(out, "content_block_stop");
            out.extend_from_slice(b"{\"type\":\"content_block_stop\",\"index\":");
            json_num(out, index);
            out.push(b'}');
            end_event(out);
        }
    }

    /// The index of `block`, opened (after closing another) when needed.
    fn open(&mut self, block: Block, start: BlockStart<'_>, out: &mut Vec<u8>) -> u64 {
        if let Some((b, i)) = self.open {
            if b == block {
                return i;
            }
        }
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((block, index));
        begin_event(out, "content_block_start");
        out.extend_from_slice(b"{\"type\":\"content_block_start\",\"index\":");
        json_num(out, index);
        out.extend_from_slice(b",\"content_block\":");
        match start {
            BlockStart::Thinking => out
                .extend_from_slice(b"{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}"),
            BlockStart::Text => out.extend_from_slice(b"{\"type\":\"text\",\"text\":\"\"}"),
            BlockStart::Tool { id, name } => {
                out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
                json_str(out, id);
                out.extend_from_slice(b",\"name\":");
                json_str(out, name);
                out.extend_from_slice(b",\"input\":{}}");
            }
        }
        out.push(b'}');
        end_event(out);
        index
    }

    /// The events for one chat chunk (choice 0; others are not Messages').
    pub fn chunk(&mut self, chunk: &Value, out: &mut Vec<SseFrame>) {
        let mut b = Vec::new();
        let usage = chunk.get("usage").filter(|u| u.is_object());
        self.chunk_into(&ChunkDelta::of_tree(chunk), usage, &mut b);
        out.extend(frames_of(&b));
    }

    /// The events for one chat chunk, read as `delta` (its choice 0) and
    /// its `usage` object, into `out`.
    pub fn chunk_into(&mut self, delta: &ChunkDelta<'_>, usage: Option<&Value>, out: &mut Vec<u8>) {
        self.start_into(out);
        if let Some(u) = usage {
            self.usage = Some(u.clone());
        }
        if let Some(r) = delta.reasoning.as_deref().filter(|s| !s.is_empty()) {
            let i = self.open(Block::Thinking, BlockStart::Thinking, out);
            begin_delta(out, i, "thinking_delta", "thinking");
            json_str(out, r);
            close_delta(out);
        }
        if let Some(t) = delta.content.as_deref().filter(|s| !s.is_empty()) {
            self.output_chars += t.chars().count();
            let i = self.open(Block::Text, BlockStart::Text, out);
            begin_delta(out, i, "text_delta", "text");
            delta.write_content(out);
            close_delta(out);
        }
        for tc in &delta.tool_calls {
            self.tool_piece(tc, out);
        }
        if let Some(f) = delta.finish_reason.as_deref() {
            self.finish = Some(f.to_string());
        }
    }

    fn tool_piece(&mut self, tc: &ToolCallDelta<'_>, out: &mut Vec<u8>) {
        let at = tc.index;
        let index = match self.tools.get(&at) {
            Some(i) => *i,
            None => {
                let id = block_id(tc.id.as_deref().unwrap_or(""), at as usize);
                let name = self
                    .names
                    .original(tc.name.as_deref().unwrap_or(""))
                    .to_string();
                let start = BlockStart::Tool {
                    id: &id,
                    name: &name,
                };
                let i = self.open(Block::Tool(at), start, out);
                self.tools.insert(at, i);
                i
            }
        };
        if let Some(a) = tc.arguments.as_deref().filter(|s| !s.is_empty()) {
            self.output_chars += a.chars().count();
            begin_delta(out, index, "input_json_delta", "partial_json");
            json_str(out, a);
            close_delta(out);
        }
    }

    /// The end of the answer: the open block closed, `message_delta` with
    /// the stop reason and usage (the upstream's `usage`, else estimates;
    /// with the request's cost when [`ToMessages::set_cost`] gave it).
    /// `message_stop` is [`ToMessages::stop`], so events may go between.
    pub fn finish(&mut self, usage: Option<&Value>, out: &mut Vec<SseFrame>) {
        let mut b = Vec::new();
        self.finish_into(usage, &mut b);
        out.extend(frames_of(&b));
    }

    /// [`ToMessages::finish`] into `out`.
    pub fn finish_into(&mut self, usage: Option<&Value>, out: &mut Vec<u8>) {
        self.start_into(out);
        self.close(out);
        let usage = usage.or(self.usage.as_ref());
        let fallback = Tokens::estimate(self.input_estimate, estimate_tokens(self.output_chars));
        begin_event(out, "message_delta");
        out.extend_from_slice(b"{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
        json_str(out, stop_reason(self.finish.as_deref()));
        out.extend_from_slice(b",\"stop_sequence\":null},\"usage\":");
        let mut usage = messages_usage(usage, fallback);
        if let (Some(c), Some(u)) = (&self.cost, usage.as_object_mut()) {
            c.write_into(u);
        }
        // A tree of numbers and strings always serialises.
        let _ = serde_json::to_writer(&mut *out, &usage);
        out.push(b'}');
        end_event(out);
    }

    pub fn stop(&self, out: &mut Vec<SseFrame>) {
        out.push(frame(json!({"type": "message_stop"})));
    }

    /// `message_stop` into `out`.
    pub fn stop_into(&self, out: &mut Vec<u8>) {
        begin_event(out, "message_stop");
        out.extend_from_slice(b"{\"type\":\"message_stop\"}");
        end_event(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(frames: &[SseFrame]) -> Vec<Value> {
        frames
            .iter()
            .map(|f| match f {
                SseFrame::Event { event, data } => {
                    let v: Value = serde_json::from_str(data).unwrap();
                    assert_eq!(v["type"], event.as_str());
                    v
                }
                SseFrame::Data(_) => panic!("a Messages frame without an event name"),
            })
            .collect()
    }

    fn types(v: &[Value]) -> Vec<&str> {
        v.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn text_then_tools_make_blocks_in_order_with_one_delta_per_piece() {
        let mut t = ToMessages::new("msg_1".into(), "claude-x".into(), 0, ToolNames::default());
        let mut out = vec![];
        for c in [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "Read", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"p\":"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "Bash", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}),
        ] {
            t.chunk(&c, &mut out);
        }
        t.finish(None, &mut out);
        t.stop(&mut out);
        let ev = events(&out);
        assert_eq!(
            types(&ev),
            vec![
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(ev[0]["message"]["usage"]["input_tokens"], 1, "never 0");
        assert_eq!(ev[0]["message"]["model"], "claude-x");
        assert_eq!(ev[2]["delta"], json!({"type": "text_delta", "text": "Hel"}));
        assert_eq!(
            ev[5]["content_block"],
            json!({"type": "tool_use", "id": "call_a", "name": "Read", "input": {}})
        );
        assert_eq!(ev[5]["index"], 1);
        assert_eq!(
            ev[6]["delta"],
            json!({"type": "input_json_delta", "partial_json": "{\"p\":"})
        );
        assert_eq!(ev[9]["index"], 2);
        assert_eq!(ev[12]["delta"]["stop_reason"], "tool_use");
        assert_eq!(ev[12]["usage"]["input_tokens"], 12);
        assert_eq!(ev[12]["usage"]["output_tokens"], 3);
    }

    #[test]
    fn message_delta_carries_the_cost_it_was_given_and_none_without() {
        let cost = |nanos, status| Cost {
            status,
            nanos,
            version: None,
        };
        for (given, want_cost, want_status) in [
            (
                Some(cost(Some(1_820_000), crate::spend::CostStatus::Exact)),
                json!("0.001820000"),
                json!("exact"),
            ),
            (
                Some(cost(None, crate::spend::CostStatus::Unpriced)),
                Value::Null,
                json!("unpriced"),
            ),
            (None, Value::Null, Value::Null),
        ] {
            let mut t = ToMessages::new("m".into(), "m".into(), 4, ToolNames::default());
            if let Some(c) = given {
                t.set_cost(c);
            }
            let mut out = vec![];
            t.finish(None, &mut out);
            let ev = events(&out);
            let delta = ev.iter().find(|e| e["type"] == "message_delta").unwrap();
            assert_eq!(delta["usage"]["cost"], want_cost);
            assert_eq!(delta["usage"]["cost_status"], want_status);
            assert_eq!(delta["usage"]["input_tokens"], 4);
        }
    }

    #[test]
    fn an_empty_answer_still_starts_and_ends_and_estimates_output() {
        let mut t = ToMessages::new("msg_2".into(), "m".into(), 40, ToolNames::default());
        let mut out = vec![];
        t.chunk(&json!({"choices": [{"index": 0, "delta": {"content": "abcdefgh"}, "finish_reason": "stop"}]}), &mut out);
        t.finish(None, &mut out);
        let ev = events(&out);
        assert_eq!(ev[0]["message"]["usage"]["input_tokens"], 40);
        let delta = ev.iter().find(|e| e["type"] == "message_delta").unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
        assert_eq!(delta["usage"]["input_tokens"], 40);
        assert_eq!(delta["usage"]["output_tokens"], 2);
    }
}
