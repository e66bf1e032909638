//! OpenAI chat request → Anthropic Messages request (the contract's
//! "Translation: OpenAI chat → Messages").
//!
//! `system`/`developer` messages are joined into `system`; user text and
//! images become blocks; assistant `tool_calls` become `tool_use` blocks;
//! `tool` messages and the user message after them become one user turn,
//! `tool_result` blocks first. Members Messages has no place for are dropped
//! and named, so the caller can count them.

use serde_json::{json, Map, Value};

use crate::error::Error;

/// Chat members read into the Messages request (or the relay's own), never
/// counted as dropped.
const READ: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "user",
    "temperature",
    "top_p",
    "n",
];

/// A Messages request, and the chat members it dropped.
#[derive(Debug)]
pub struct Translated {
    pub body: Map<String, Value>,
    pub dropped: Vec<String>,
}

/// Translates a chat request (`model` already the upstream's). `Err`: 400
/// `validation_error` for what Messages cannot express (`n` > 1).
pub fn translate(chat: &Map<String, Value>, max_tokens_default: u32) -> Result<Translated, Error> {
    if let Some(n) = chat.get("n").filter(|n| !n.is_null()) {
        if n.as_u64() != Some(1) {
            return Err(Error::validation(
                "n",
                "'n' must be 1 for this model: its provider (Anthropic Messages) gives one answer per request.",
            ));
        }
    }
    let mut out = Map::new();
    if let Some(m) = chat.get("model") {
        out.insert("model".into(), m.clone());
    }
    let (system, messages) = messages(chat.get("messages"));
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(messages));
    let max_tokens = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| chat.get(*k).and_then(Value::as_u64))
        .unwrap_or(u64::from(max_tokens_default));
    out.insert("max_tokens".into(), Value::from(max_tokens));
    match chat.get("stop") {
        Some(Value::String(s)) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(a)) if !a.is_empty() => {
            out.insert("stop_sequences".into(), Value::Array(a.clone()));
        }
        _ => {}
    }
    if let Some(Value::String(u)) = chat.get("user") {
        out.insert("metadata".into(), json!({ "user_id": u }));
    }
    for k in ["temperature", "top_p"] {
        if let Some(v) = chat.get(k).filter(|v| !v.is_null()) {
            out.insert(k.into(), v.clone());
        }
    }
    if chat.get("stream").and_then(Value::as_bool) == Some(true) {
        out.insert("stream".into(), Value::Bool(true));
    }
    let tools: Vec<Value> = chat
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| ts.iter().filter_map(tool).collect())
        .unwrap_or_default();
    let has_tools = !tools.is_empty();
    if has_tools {
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = tool_choice(chat, has_tools) {
        out.insert("tool_choice".into(), choice);
    }
    let dropped = chat
        .iter()
        .filter(|(k, v)| !READ.contains(&k.as_str()) && !v.is_null())
        .map(|(k, _)| k.clone())
        .collect();
    Ok(Translated { body: out, dropped })
}

/// The text of a chat `content`: a string, or its text parts joined.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// An `image_url` part as an image block: data URLs as base64, others by URL.
fn image_block(part: &Value) -> Option<Value> {
    let url = match part.get("image_url")? {
        Value::String(u) => u.as_str(),
        v => v.get("url")?.as_str()?,
    };
    if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest.split_once(";base64,")?;
        return Some(json!({"type": "image", "source":
            {"type": "base64", "media_type": media_type, "data": data}}));
    }
    Some(json!({"type": "image", "source": {"type": "url", "url": url}}))
}

/// A user message's content as blocks (blank text dropped).
fn user_blocks(content: Option<&Value>) -> Vec<Value> {
    match content {
        Some(Value::String(s)) => text_block(s).into_iter().collect(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => text_block(p.get("text").and_then(Value::as_str)?),
                Some("image_url") => image_block(p),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn assistant_blocks(m: &Value) -> Vec<Value> {
    let mut blocks: Vec<Value> = text_block(&text_of(m.get("content"))).into_iter().collect();
    for call in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = call.get("function");
        let name = f
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let input = f
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .and_then(|a| serde_json::from_str::<Value>(a).ok())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        blocks.push(json!({
            "type": "tool_use",
            "id": call.get("id").cloned().unwrap_or(Value::Null),
            "name": name,
            "input": input,
        }));
    }
    blocks
}

/// The system texts, and the turns: adjacent turns of one role become one
/// (tool results go with the user turn after them, first).
fn messages(given: Option<&Value>) -> (Vec<String>, Vec<Value>) {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in given.and_then(Value::as_array).into_iter().flatten() {
        let (role, blocks) = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => {
                let t = text_of(m.get("content"));
                if !t.is_empty() {
                    system.push(t);
                }
                continue;
            }
            Some("user") => ("user", user_blocks(m.get("content"))),
            Some("assistant") => ("assistant", assistant_blocks(m)),
            Some("tool") => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                    "content": text_of(m.get("content")),
                })],
            ),
            _ => continue,
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let turns = turns
        .into_iter()
        .map(|(role, blocks)| json!({"role": role, "content": blocks}))
        .collect();
    (system, turns)
}

/// A chat function tool as a Messages tool; other kinds are not sent.
fn tool(t: &Value) -> Option<Value> {
    let f = t.get("function")?;
    let mut out = Map::new();
    out.insert("name".into(), f.get("name")?.clone());
    if let Some(d) = f.get("description").filter(|d| d.is_string()) {
        out.insert("description".into(), d.clone());
    }
    let schema = f
        .get("parameters")
        .filter(|p| p.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    out.insert("input_schema".into(), schema);
    Some(Value::Object(out))
}

/// `tool_choice` and `parallel_tool_calls` as Messages' `tool_choice`.
fn tool_choice(chat: &Map<String, Value>, has_tools: bool) -> Option<Value> {
    let mut choice = match chat.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => return Some(json!({"type": "none"})),
        Some(Value::String(s)) if s == "required" => json!({"type": "any"}),
        Some(Value::String(_)) => json!({"type": "auto"}),
        Some(Value::Object(o)) => match o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
        {
            Some(name) => json!({"type": "tool", "name": name}),
            None => json!({"type": "auto"}),
        },
        _ => json!({"type": "auto"}),
    };
    let serial = chat.get("parallel_tool_calls").and_then(Value::as_bool) == Some(false);
    if serial {
        choice["disable_parallel_tool_use"] = Value::Bool(true);
    } else if chat.get("tool_choice").is_none_or(Value::is_null) {
        return None;
    }
    has_tools.then_some(choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(v: Value) -> Translated {
        translate(v.as_object().unwrap(), 4096).unwrap()
    }

    #[test]
    fn system_and_developer_are_joined_and_tool_results_open_the_next_user_turn() {
        let t = tr(json!({"model": "claude", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [{"type": "text", "text": "use tools"}]},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "checking", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"city\":\"Oslo\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "text", "text": "  "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
        ]}));
        assert_eq!(t.body["system"], "be brief\n\nuse tools");
        assert_eq!(
            t.body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "call_1", "name": "get", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "call_2", "name": "now", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "rain"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "noon"},
                    {"type": "text", "text": "thanks"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}
            ])
        );
        assert_eq!(t.body["max_tokens"], 4096);
    }

    #[test]
    fn parameters_map_and_unknown_members_are_dropped_and_named() {
        let t = tr(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 10, "max_completion_tokens": 20, "stop": "END", "user": "u-1",
            "temperature": 0.5, "top_p": 0.9, "stream": true, "stream_options": {"include_usage": true},
            "seed": 7, "logprobs": true, "n": 1,
            "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}],
            "tool_choice": "required", "parallel_tool_calls": false}),
        );
        let b = Value::Object(t.body);
        assert_eq!(b["max_tokens"], 20);
        assert_eq!(b["stop_sequences"], json!(["END"]));
        assert_eq!(b["metadata"], json!({"user_id": "u-1"}));
        assert_eq!(
            (b["temperature"].clone(), b["top_p"].clone()),
            (json!(0.5), json!(0.9))
        );
        assert_eq!(b["stream"], true);
        assert_eq!(
            b["tools"],
            json!([{"name": "f", "description": "d", "input_schema": {"type": "object"}}])
        );
        assert_eq!(
            b["tool_choice"],
            json!({"type": "any", "disable_parallel_tool_use": true})
        );
        assert!(
            b.get("stream_options").is_none() && b.get("seed").is_none() && b.get("n").is_none()
        );
        let mut dropped = t.dropped;
        dropped.sort();
        assert_eq!(dropped, vec!["logprobs", "seed"]);
    }

    #[test]
    fn tool_choice_forms_map_in_reverse() {
        let with = |c: Value| {
            let mut v = json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]});
            v["tool_choice"] = c;
            tr(v).body.get("tool_choice").cloned()
        };
        assert_eq!(with(json!("auto")), Some(json!({"type": "auto"})));
        assert_eq!(with(json!("none")), Some(json!({"type": "none"})));
        assert_eq!(
            with(json!({"type": "function", "function": {"name": "f"}})),
            Some(json!({"type": "tool", "name": "f"}))
        );
        assert_eq!(with(Value::Null), None);
    }

    #[test]
    fn more_than_one_choice_is_refused_naming_n() {
        for n in [json!(2), json!(0), json!("2")] {
            let e = translate(json!({"messages": [], "n": n}).as_object().unwrap(), 1).unwrap_err();
            assert_eq!((e.status(), e.param.as_deref()), (400, Some("n")));
        }
        assert!(translate(json!({"messages": [], "n": 1}).as_object().unwrap(), 1).is_ok());
    }

    #[test]
    fn max_tokens_default_applies_only_without_either_limit() {
        let b = translate(
            json!({"messages": [], "max_tokens": 5})
                .as_object()
                .unwrap(),
            9,
        )
        .unwrap();
        assert_eq!(b.body["max_tokens"], 5);
        let b = translate(json!({"messages": []}).as_object().unwrap(), 9).unwrap();
        assert_eq!(b.body["max_tokens"], 9);
    }

    #[test]
    fn image_urls_that_are_not_data_go_by_url() {
        let t = tr(json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}]}));
        assert_eq!(
            t.body["messages"][0]["content"][0],
            json!({"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}})
        );
    }
}
