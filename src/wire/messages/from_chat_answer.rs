//! A chat answer as a Messages answer (contract, "Translation: Messages →
//! OpenAI chat" → "Answer"), and the usage convention: Gatehouse's prompt
//! tokens include cached ones; a Messages `input_tokens` does not.

use serde_json::{json, Map, Value};

use super::to_chat::ToolNames;
use crate::usage::Tokens;
use crate::wire::chat::chunk::AnswerText;
use crate::wire::chat::usage::UsageFigures;
use crate::wire::sse::json_str;

/// A tool call id as a Messages client accepts it: every character outside
/// `A-Za-z0-9_-` replaced by `_` (an empty id gets one made from `index`).
pub fn block_id(id: &str, index: usize) -> String {
    if id.is_empty() {
        return format!("toolu_{index}");
    }
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Messages' `stop_reason` for a chat `finish_reason`.
pub fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// A tool call's arguments as the `input` object (`""` → `{}`; text that is
/// not JSON → `{}`, with a warning).
pub fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            tracing::warn!("a tool call's arguments are not a JSON object; sent as {{}}");
            json!({})
        }
    }
}

/// A Messages usage object from chat's (prompt includes cache) or, without
/// one, from `fallback`: `input_tokens` = prompt − cached (never below 0).
pub fn messages_usage(usage: Option<&Value>, fallback: Tokens) -> Value {
    let (input, output, cached) = usage_figures(usage.and_then(UsageFigures::of), fallback);
    json!({
        "input_tokens": input,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    })
}

/// [`messages_usage`] written as JSON (members in the tree's order).
pub fn write_messages_usage(out: &mut Vec<u8>, usage: Option<UsageFigures>, fallback: Tokens) {
    let (input, output, cached) = usage_figures(usage, fallback);
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"{\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":");
    out.extend_from_slice(n.format(cached).as_bytes());
    out.extend_from_slice(b",\"input_tokens\":");
    out.extend_from_slice(n.format(input).as_bytes());
    out.extend_from_slice(b",\"output_tokens\":");
    out.extend_from_slice(n.format(output).as_bytes());
    out.push(b'}');
}

/// Input (without the cached part), output and cached tokens.
fn usage_figures(usage: Option<UsageFigures>, fallback: Tokens) -> (i64, i64, i64) {
    let tokens = usage.and_then(|u| u.tokens()).unwrap_or(fallback);
    let cached = usage
        .and_then(|u| u.cached)
        .unwrap_or(0)
        .clamp(0, tokens.prompt.max(0));
    ((tokens.prompt - cached).max(0), tokens.completion, cached)
}

/// A chat answer (choice 0) as a Messages answer named `model`, with `id`.
/// `fallback`: the tokens to report when the upstream reported none.
pub fn messages_answer(
    chat: &Value,
    id: &str,
    model: &str,
    names: &ToolNames,
    fallback: Tokens,
) -> Value {
    let choice = chat.pointer("/choices/0");
    let message = choice.and_then(|c| c.get("message"));
    let mut content = Vec::new();
    if let Some(r) = message
        .and_then(|m| m.get("reasoning_content"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if let Some(t) = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        content.push(json!({"type": "text", "text": t}));
    }
    for (i, call) in message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = call.get("function");
        let name = f
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let args = f
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let id = call.get("id").and_then(Value::as_str).unwrap_or("");
        content.push(json!({"type": "tool_use", "id": block_id(id, i), "name": names.original(name), "input": tool_input(args)}));
    }
    let finish = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("type".into(), json!("message"));
    out.insert("role".into(), json!("assistant"));
    out.insert("model".into(), json!(model));
    out.insert("content".into(), Value::Array(content));
    out.insert("stop_reason".into(), json!(stop_reason(finish)));
    out.insert("stop_sequence".into(), Value::Null);
    out.insert("usage".into(), messages_usage(chat.get("usage"), fallback));
    Value::Object(out)
}

/// [`messages_answer`] from the chat answer's text, without a tree: its
/// bytes and the answer's tokens for the usage record (the usage, else
/// estimated from `prompt_estimate`). `names` maps long tool names back;
/// tool call ids are made acceptable. None for an answer [`AnswerText`] leaves to a tree.
pub fn messages_answer_text(
    chat: &[u8],
    id: &str,
    model: &str,
    names: &ToolNames,
    fallback: Tokens,
    prompt_estimate: i64,
) -> Option<(bytes::Bytes, Tokens)> {
    let a = AnswerText::read(chat)?;
    let m = &a.message;
    let mut out = Vec::with_capacity(chat.len() + 128);
    out.extend_from_slice(b"{\"id\":");
    json_str(&mut out, id);
    out.extend_from_slice(b",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    json_str(&mut out, model);
    out.extend_from_slice(b",\"content\":[");
    let mut first = true;
    let mut sep = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    if let Some(r) = m.reasoning.as_deref().filter(|s| !s.is_empty()) {
        sep(&mut out);
        out.extend_from_slice(b"{\"type\":\"thinking\",\"thinking\":");
        json_str(&mut out, r);
        out.extend_from_slice(b",\"signature\":\"\"}");
    }
    if m.content.as_deref().is_some_and(|s| !s.is_empty()) {
        sep(&mut out);
        out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
        m.write_content(&mut out);
        out.push(b'}');
    }
    for (i, call) in m.tool_calls.iter().enumerate() {
        sep(&mut out);
        // As the hooks' tree path has it: a string id is made acceptable
        // with the call's `index` (else its place), a missing one from its place.
        let at = if call.has_index && call.id.is_some() {
            call.index as usize
        } else {
            i
        };
        out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
        json_str(&mut out, &block_id(call.id.as_deref().unwrap_or(""), at));
        out.extend_from_slice(b",\"name\":");
        json_str(&mut out, names.original(call.name.as_deref().unwrap_or("")));
        out.extend_from_slice(b",\"input\":");
        serde_json::to_writer(
            &mut out,
            &tool_input(call.arguments.as_deref().unwrap_or("")),
        )
        .ok()?;
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"stop_reason\":");
    json_str(&mut out, stop_reason(m.finish_reason.as_deref()));
    out.extend_from_slice(b",\"stop_sequence\":null,\"usage\":");
    write_messages_usage(&mut out, a.usage, fallback);
    out.push(b'}');
    Some((bytes::Bytes::from(out), a.tokens(prompt_estimate)))
}

/// A new Messages answer id.
pub fn new_message_id() -> String {
    crate::wire::ids::new_id("msg_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_usage_is_the_trees() {
        let fallback = Tokens::estimate(9, 4);
        for usage in [
            None,
            Some(
                json!({"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}),
            ),
            Some(
                json!({"prompt_tokens": 2, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 7}}),
            ),
        ] {
            let mut out = Vec::new();
            write_messages_usage(
                &mut out,
                usage.as_ref().and_then(UsageFigures::of),
                fallback,
            );
            let written: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(
                written,
                messages_usage(usage.as_ref(), fallback),
                "{usage:?}"
            );
        }
    }
    use crate::wire::messages::to_chat::to_chat;

    #[test]
    fn text_reasoning_and_tool_calls_become_blocks_in_order() {
        let long = "n".repeat(80);
        let names = to_chat(
            json!({"model": "m", "messages": [], "tools": [{"name": long}]})
                .as_object()
                .unwrap(),
        )
        .names;
        let short = crate::wire::messages::to_chat::short_name(&long);
        let chat = json!({"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "reasoning_content": "think", "content": "hi",
            "tool_calls": [
                {"id": "call:1/x", "type": "function", "function": {"name": short, "arguments": "{\"a\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "b", "arguments": ""}},
                {"id": "call_3", "type": "function", "function": {"name": "c", "arguments": "{oops"}}]}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 20}}});
        let a = messages_answer(&chat, "msg_1", "claude-x", &names, Tokens::default());
        assert_eq!(
            a,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [
                    {"type": "thinking", "thinking": "think", "signature": ""},
                    {"type": "text", "text": "hi"},
                    {"type": "tool_use", "id": "call_1_x", "name": long, "input": {"a": 1}},
                    {"type": "tool_use", "id": "call_2", "name": "b", "input": {}},
                    {"type": "tool_use", "id": "call_3", "name": "c", "input": {}}],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 20}})
        );
    }

    #[test]
    fn empty_content_makes_no_text_block_and_finish_reasons_map() {
        let chat = json!({"choices": [{"finish_reason": "length", "message": {"content": ""}}]});
        let a = messages_answer(
            &chat,
            "msg_2",
            "m",
            &ToolNames::default(),
            Tokens {
                prompt: 7,
                completion: 2,
                ..Tokens::default()
            },
        );
        assert_eq!(a["content"], json!([]));
        assert_eq!(a["stop_reason"], "max_tokens");
        assert_eq!(a["usage"]["input_tokens"], 7, "the estimate without usage");
        assert_eq!(a["usage"]["output_tokens"], 2);
        for (f, s) in [
            (Some("stop"), "end_turn"),
            (Some("tool_calls"), "tool_use"),
            (Some("content_filter"), "refusal"),
            (None, "end_turn"),
        ] {
            assert_eq!(stop_reason(f), s);
        }
    }

    #[test]
    fn cached_tokens_never_make_input_negative() {
        let u = json!({"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 9}});
        let m = messages_usage(Some(&u), Tokens::default());
        assert_eq!(
            (
                m["input_tokens"].as_i64(),
                m["cache_read_input_tokens"].as_i64()
            ),
            (Some(0), Some(3))
        );
    }
}
