//! The agent turn's answer side on a Messages answer passed through to an
//! `anthropic` provider ([`MessagesRules`]): the same rules as on chat
//! (approvals in `ask` mode, PII restore, AG-UI events), fed each block as
//! the chunk it stands for, so there is one copy of each rule.
//!
//! - Plain answer: `tool_use` blocks are the tool calls (arguments = compact
//!   JSON of `input`); `text` blocks and `tool_use` inputs are restored.
//! - Stream: a `text` block's `text_delta`s are the content of choice 0, a
//!   `tool_use` block the tool call of its index (start: id and name;
//!   `input_json_delta`s: the arguments); each such block's
//!   `content_block_stop` is a finishing chunk, whose restored tail (a
//!   value split across deltas) goes out as one more delta before the stop.
//!   AG-UI events come after `message_start` and before each event they
//!   describe. Everything else (thinking and its signature, server tool
//!   blocks, `message_delta`, pings) passes as it came.

use std::collections::HashMap;

use gatehouse_pii::Vault;
use serde_json::{json, Value};

use super::AgentHooks;
use crate::agents::tools::ToolMode;
use crate::error::Error;
use crate::proxy::chat::ChatHooks;
use crate::proxy::messages_rules::MessagesRules;
use crate::wire::messages::stream::frame;
use crate::wire::sse::SseFrame;
use crate::wire::ToolCall;

/// A passed-through stream so far.
#[derive(Default)]
pub(super) struct Passed {
    /// The message's id (the chunks' id: AG-UI's messageId).
    id: Value,
    /// The open blocks the rules read, by index.
    blocks: HashMap<u64, Block>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    ToolUse,
}

/// The `tool_use` blocks of a Messages answer, as the model gave them.
fn tool_uses(answer: &Value) -> Vec<ToolCall> {
    blocks(answer)
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .map(|b| ToolCall {
            id: str_of(b, "id"),
            name: str_of(b, "name"),
            arguments: b.get("input").map(Value::to_string).unwrap_or_default(),
        })
        .collect()
}

fn blocks(answer: &Value) -> impl Iterator<Item = &Value> {
    answer
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// PII values back in a Messages answer's `text` blocks and `tool_use`
/// inputs (thinking passes unchanged: its signature covers it).
fn restore_message(answer: &mut Value, vault: &Vault) {
    let Some(Value::Array(blocks)) = answer.get_mut("content") else {
        return;
    };
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(Value::String(t)) = b.get_mut("text") {
                    *t = vault.restore(t);
                }
            }
            Some("tool_use") => {
                if let Some(input) = b.get_mut("input") {
                    let text = input.to_string();
                    let restored = vault.restore_json(&text);
                    if restored != text {
                        if let Ok(v) = serde_json::from_str(&restored) {
                            *input = v;
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

impl AgentHooks {
    /// `delta` as choice 0's delta of a chunk through the chat rules; the
    /// AG-UI frames they make go to `out`; the delta as the client gets it.
    fn through_chat(&mut self, delta: Value, finishing: bool, out: &mut Vec<SseFrame>) -> Value {
        let finish = if finishing {
            json!("stop")
        } else {
            Value::Null
        };
        let mut chunk = json!({"id": self.passed.id,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        self.on_chunk(&mut chunk, out);
        chunk
            .pointer_mut("/choices/0/delta")
            .map(Value::take)
            .unwrap_or_default()
    }

    /// A passed-through content event through the rules: pushes what goes
    /// to the client for it.
    fn passed_block_event(&mut self, kind: &str, index: u64, mut event: Value) -> Vec<SseFrame> {
        let mut out = Vec::new();
        let block = self.passed.blocks.get(&index).copied();
        match (kind, block) {
            ("content_block_start", _) => {
                let start = event.get("content_block");
                let id = start.map(|b| str_of(b, "id"));
                match start.and_then(|b| b.get("type")).and_then(Value::as_str) {
                    Some("text") => {
                        self.passed.blocks.insert(index, Block::Text);
                    }
                    Some("tool_use") => {
                        self.passed.blocks.insert(index, Block::ToolUse);
                        let name = start.map(|b| str_of(b, "name"));
                        let call = json!({"index": index, "id": id,
                            "function": {"name": name, "arguments": ""}});
                        self.through_chat(json!({"tool_calls": [call]}), false, &mut out);
                    }
                    _ => {}
                }
            }
            ("content_block_delta", Some(block)) => {
                let (key, chat) = match block {
                    Block::Text => ("text", "/content"),
                    Block::ToolUse => ("partial_json", "/tool_calls/0/function/arguments"),
                };
                let Some(piece) = event.pointer(&format!("/delta/{key}")).cloned() else {
                    out.push(frame(event));
                    return out;
                };
                let delta = match block {
                    Block::Text => json!({"content": piece}),
                    Block::ToolUse => {
                        json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                    }
                };
                let restored = self.through_chat(delta, false, &mut out);
                match restored.pointer(chat).and_then(Value::as_str) {
                    // Held by the restorer (it may be part of a token).
                    Some("") => return out,
                    Some(text) => event["delta"][key] = json!(text),
                    None => {}
                }
            }
            ("content_block_stop", Some(block)) => {
                self.passed.blocks.remove(&index);
                // What the restorer held (a value split across deltas).
                let tail = self.through_chat(json!({}), true, &mut out);
                let rest = match block {
                    Block::Text => tail.get("content").and_then(Value::as_str),
                    Block::ToolUse => tail
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|c| c.get("index").and_then(Value::as_u64) == Some(index))
                        .and_then(|c| c.pointer("/function/arguments"))
                        .and_then(Value::as_str),
                };
                if let Some(rest) = rest.filter(|r| !r.is_empty()) {
                    let delta = match block {
                        Block::Text => json!({"type": "text_delta", "text": rest}),
                        Block::ToolUse => json!({"type": "input_json_delta", "partial_json": rest}),
                    };
                    out.push(frame(
                        json!({"type": "content_block_delta", "index": index, "delta": delta}),
                    ));
                }
            }
            _ => {}
        }
        out.push(frame(event));
        out
    }
}

impl MessagesRules for AgentHooks {
    /// Nothing to do without approvals, PII tokens or AG-UI events: the
    /// answer then passes as it came.
    fn rules_passed(&self) -> bool {
        self.ctx.vault.is_some() || self.ctx.mode == ToolMode::Ask || self.agui.is_some()
    }

    async fn on_passed_answer(&mut self, answer: &mut Value) -> Result<(), Error> {
        // The calls as the model gave them: tokens, not values, are stored.
        let calls = tool_uses(answer);
        self.answer_rules(answer, &calls, restore_message).await
    }

    fn on_passed_event(&mut self, kind: &str, event: Value, out: &mut Vec<SseFrame>) {
        let index = event.get("index").and_then(Value::as_u64);
        match (kind, index) {
            ("message_start", _) => {
                self.passed.id = event.pointer("/message/id").cloned().unwrap_or_default();
                let mut chunk = json!({"id": self.passed.id,
                    "model": event.pointer("/message/model"), "choices": []});
                // AG-UI's first events come right after message_start.
                let mut agui = Vec::new();
                self.on_chunk(&mut chunk, &mut agui);
                out.push(frame(event));
                out.extend(agui);
            }
            ("content_block_start" | "content_block_delta" | "content_block_stop", Some(i)) => {
                out.extend(self.passed_block_event(kind, i, event));
            }
            _ => out.push(frame(event)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_use_blocks_are_the_calls_with_their_input_as_compact_json() {
        let answer = json!({"content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "x"},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "ls -l"}}]});
        let calls = tool_uses(&answer);
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("toolu_1", "Bash")
        );
        assert_eq!(calls[0].arguments, r#"{"cmd":"ls -l"}"#);
    }

    #[test]
    fn text_and_tool_inputs_are_restored_and_thinking_is_not() {
        let scanner = gatehouse_pii::Scanner::new(&[]).unwrap();
        let mut vault = Vault::new();
        let mut counts = gatehouse_pii::Counts::new();
        let token = vault.tokenize(&scanner, "jane.doe@example.com", &mut counts);
        assert_eq!(token, "[EMAIL_1]");
        let mut answer = json!({"content": [
            {"type": "thinking", "thinking": "to [EMAIL_1]", "signature": "s"},
            {"type": "text", "text": "to [EMAIL_1]"},
            {"type": "tool_use", "id": "t", "name": "Bash", "input": {"cmd": "mail [EMAIL_1]"}}]});
        restore_message(&mut answer, &vault);
        assert_eq!(
            answer["content"],
            json!([
                {"type": "thinking", "thinking": "to [EMAIL_1]", "signature": "s"},
                {"type": "text", "text": "to jane.doe@example.com"},
                {"type": "tool_use", "id": "t", "name": "Bash",
                 "input": {"cmd": "mail jane.doe@example.com"}}])
        );
    }
}
