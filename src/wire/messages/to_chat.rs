//! A Messages request as an OpenAI chat request, for `openai` upstreams
//! (contract, "Translation: Messages → OpenAI chat"). Members chat has no
//! place for are dropped, never forwarded (an OpenAI server may refuse an
//! unknown member), and named so they can be counted.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::wire::MAX_TOOL_NAME_LEN;

/// The names `gatehouse_translation_dropped_total{field}` may carry; any
/// other dropped member counts as `other`.
pub const DROPPED_FIELDS: [&str; 9] = [
    "thinking",
    "context_management",
    "container",
    "mcp_servers",
    "service_tier",
    "metadata",
    "output_config",
    "cache_control",
    "other",
];

/// The top-level members the translation reads.
const READ: [&str; 13] = [
    "model",
    "messages",
    "system",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "tools",
    "tool_choice",
    "metadata",
    "output_config",
];

/// Long tool names as sent upstream, mapped back to the client's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolNames(Vec<(String, String)>);

impl ToolNames {
    /// The client's name for a name the upstream used.
    pub fn original<'a>(&'a self, upstream: &'a str) -> &'a str {
        self.0
            .iter()
            .find(|(short, _)| short == upstream)
            .map_or(upstream, |(_, long)| long.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The name to send upstream for `name`, remembered when it changed.
    fn upstream(&mut self, name: &str) -> String {
        let short = short_name(name);
        if short != name && !self.0.iter().any(|(s, _)| *s == short) {
            self.0.push((short.clone(), name.to_string()));
        }
        short
    }
}

/// A name longer than 64 characters as its first 55 characters, `_`, and
/// the first 8 hex digits of its SHA-256 (OpenAI servers refuse longer names).
pub fn short_name(name: &str) -> String {
    if name.chars().count() <= MAX_TOOL_NAME_LEN {
        return name.to_string();
    }
    let digest = Sha256::digest(name.as_bytes());
    let head: String = name.chars().take(55).collect();
    format!("{head}_{}", &hex::encode(digest)[..8])
}

/// A Messages request translated.
#[derive(Debug, Default)]
pub struct Translated {
    pub chat: Map<String, Value>,
    /// Dropped members by the names of [`DROPPED_FIELDS`], once per occurrence.
    pub dropped: Vec<&'static str>,
    /// Server tools (a `type` other than `custom`), dropped, in order.
    pub dropped_tools: Vec<String>,
    pub names: ToolNames,
}

impl Translated {
    fn drop_field(&mut self, name: &str) {
        let known = DROPPED_FIELDS
            .iter()
            .find(|f| **f == name)
            .copied()
            .unwrap_or("other");
        self.dropped.push(known);
    }

    /// Counts the `cache_control` members of a block or tool.
    fn drop_cache_control(&mut self, v: &Value) {
        if v.get("cache_control").is_some() {
            self.dropped.push("cache_control");
        }
    }
}

/// Text of blocks of type `text`, joined with `sep`.
pub fn joined_text(blocks: &[Value], sep: &str) -> String {
    let mut out = String::new();
    for t in blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
    {
        if !out.is_empty() {
            out.push_str(sep);
        }
        out.push_str(t);
    }
    out
}

/// The system text: a string, or text blocks joined with a blank line.
pub fn system_text(system: Option<&Value>) -> Option<String> {
    match system? {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => Some(joined_text(blocks, "\n\n")),
        _ => None,
    }
}

/// A tool result's content as text (`is_error` prefixes `[error] `).
pub fn tool_result_text(block: &Value) -> String {
    let text = match block.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => joined_text(parts, "\n"),
        _ => String::new(),
    };
    if block.get("is_error").and_then(Value::as_bool) == Some(true) {
        format!("[error] {text}")
    } else {
        text
    }
}

fn image_part(block: &Value) -> Option<Value> {
    let source = block.get("source")?;
    let url = match source.get("type").and_then(Value::as_str)? {
        "base64" => format!(
            "data:{};base64,{}",
            source.get("media_type").and_then(Value::as_str)?,
            source.get("data").and_then(Value::as_str)?
        ),
        "url" => source.get("url").and_then(Value::as_str)?.to_string(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// Translates a checked Messages body (see [`super::request::check_body`]).
pub fn to_chat(body: &Map<String, Value>) -> Translated {
    let mut t = Translated::default();
    let mut messages = Vec::new();
    if let Some(system) = body.get("system") {
        if let Value::Array(blocks) = system {
            blocks.iter().for_each(|b| t.drop_cache_control(b));
        }
        if let Some(text) = system_text(Some(system)) {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        match (role, m.get("content")) {
            (_, Some(Value::String(s))) => messages.push(json!({"role": role, "content": s})),
            ("assistant", Some(Value::Array(blocks))) => {
                messages.push(assistant_message(blocks, &mut t));
            }
            (_, Some(Value::Array(blocks))) => user_messages(blocks, &mut t, &mut messages),
            _ => {}
        }
    }
    t.chat.insert(
        "model".into(),
        body.get("model").cloned().unwrap_or(Value::Null),
    );
    t.chat.insert("messages".into(), Value::Array(messages));
    for k in ["max_tokens", "temperature", "top_p", "top_k"] {
        if let Some(v) = body.get(k) {
            t.chat.insert(k.into(), v.clone());
        }
    }
    if let Some(v) = body.get("stop_sequences") {
        t.chat.insert("stop".into(), v.clone());
    }
    if super::request::is_stream(body) {
        t.chat.insert("stream".into(), Value::Bool(true));
        t.chat
            .insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(Value::Object(meta)) = body.get("metadata") {
        for (k, v) in meta {
            match (k.as_str(), v) {
                ("user_id", Value::String(u)) => {
                    t.chat.insert("user".into(), Value::String(u.clone()));
                }
                _ => t.drop_field("metadata"),
            }
        }
    }
    if let Some(Value::Object(oc)) = body.get("output_config") {
        for (k, v) in oc {
            let schema = (k == "format")
                .then(|| v.get("type").and_then(Value::as_str) == Some("json_schema"))
                .filter(|x| *x)
                .and_then(|_| v.get("schema"));
            match schema {
                Some(schema) => {
                    t.chat.insert(
                        "response_format".into(),
                        json!({"type": "json_schema", "json_schema": {"name": "structured_output", "schema": schema}}),
                    );
                }
                None => t.drop_field("output_config"),
            }
        }
    }
    let tools = tools(body.get("tools"), &mut t);
    let has_tools = !tools.is_empty();
    if has_tools {
        t.chat.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = body.get("tool_choice") {
        tool_choice(choice, has_tools, &mut t);
    }
    for k in body.keys() {
        if !READ.contains(&k.as_str()) {
            t.drop_field(k);
        }
    }
    t
}

fn assistant_message(blocks: &[Value], t: &mut Translated) -> Value {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for b in blocks {
        t.drop_cache_control(b);
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(s) = b.get("text").and_then(Value::as_str) {
                    texts.push(s);
                }
            }
            Some("tool_use") => {
                let name = b.get("name").and_then(Value::as_str).unwrap_or_default();
                let args = b
                    .get("input")
                    .map_or_else(|| "{}".to_string(), Value::to_string);
                calls.push(json!({
                    "id": b.get("id").cloned().unwrap_or(Value::Null),
                    "type": "function",
                    "function": {"name": t.names.upstream(name), "arguments": args},
                }));
            }
            Some("thinking" | "redacted_thinking") => t.drop_field("thinking"),
            _ => t.drop_field("other"),
        }
    }
    let mut m = json!({"role": "assistant", "content": if texts.is_empty() { Value::Null } else { Value::String(texts.join("\n\n")) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    m
}

/// A user turn's tool results become `tool` messages placed first; the
/// remaining parts follow as one user message (none when nothing remains).
fn user_messages(blocks: &[Value], t: &mut Translated, out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    for b in blocks {
        t.drop_cache_control(b);
        match b.get("type").and_then(Value::as_str) {
            Some("tool_result") => out.push(json!({
                "role": "tool",
                "tool_call_id": b.get("tool_use_id").cloned().unwrap_or(Value::Null),
                "content": tool_result_text(b),
            })),
            Some("text") => {
                if let Some(s) = b.get("text").and_then(Value::as_str) {
                    parts.push(json!({"type": "text", "text": s}));
                }
            }
            Some("image") => match image_part(b) {
                Some(p) => parts.push(p),
                None => t.drop_field("other"),
            },
            _ => t.drop_field("other"),
        }
    }
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
}

fn tools(tools: Option<&Value>, t: &mut Translated) -> Vec<Value> {
    let mut out = Vec::new();
    for tool in tools.and_then(Value::as_array).into_iter().flatten() {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        match tool.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(_) => {
                t.dropped_tools.push(name.to_string());
                continue;
            }
        }
        t.drop_cache_control(tool);
        let mut f = Map::new();
        f.insert("name".into(), Value::String(t.names.upstream(name)));
        if let Some(d) = tool.get("description") {
            f.insert("description".into(), d.clone());
        }
        f.insert(
            "parameters".into(),
            tool.get("input_schema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"})),
        );
        out.push(json!({"type": "function", "function": f}));
    }
    out
}

fn tool_choice(choice: &Value, has_tools: bool, t: &mut Translated) {
    if choice
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        == Some(true)
        && has_tools
    {
        t.chat
            .insert("parallel_tool_calls".into(), Value::Bool(false));
    }
    // A choice among no tools would be refused by an OpenAI server.
    if !has_tools {
        return;
    }
    let mapped = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match choice.get("name").and_then(Value::as_str) {
            Some(n) => json!({"type": "function", "function": {"name": t.names.upstream(n)}}),
            None => return,
        },
        _ => return,
    };
    t.chat.insert("tool_choice".into(), mapped);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(v: Value) -> Translated {
        to_chat(v.as_object().unwrap())
    }

    #[test]
    fn system_blocks_join_first_and_strings_stay_strings() {
        let t = tr(json!({"model": "m", "max_tokens": 5,
            "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(
            t.chat["messages"],
            json!([{"role": "system", "content": "a\n\nb"}, {"role": "user", "content": "hi"}])
        );
        assert_eq!(t.chat["max_tokens"], 5);
        assert_eq!(t.dropped, vec!["cache_control"]);
    }

    #[test]
    fn tool_results_go_before_the_user_text_of_their_turn() {
        let t = tr(json!({"model": "m", "messages": [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "/a"}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "and then?"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}], "is_error": true}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"}]}
        ]}));
        assert_eq!(
            t.chat["messages"],
            json!([
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"/a\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "[error] x\ny"},
                {"role": "user", "content": [{"type": "text", "text": "and then?"}]},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "ok"}
            ])
        );
        assert_eq!(t.dropped, vec!["thinking"]);
    }

    #[test]
    fn images_become_image_url_parts() {
        let t = tr(
            json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]}),
        );
        assert_eq!(
            t.chat["messages"][0]["content"],
            json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                   {"type": "image_url", "image_url": {"url": "https://x/y.png"}}])
        );
    }

    #[test]
    fn tools_and_choices_map_and_server_tools_are_dropped_by_name() {
        let long = "t".repeat(70);
        let t = tr(
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
            "tools": [
                {"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search"},
                {"type": "custom", "name": long, "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": long, "disable_parallel_tool_use": true}}),
        );
        let short = short_name(&long);
        assert_eq!(short.chars().count(), 64);
        assert!(short.starts_with(&"t".repeat(55)));
        assert_eq!(&short[55..56], "_");
        assert_eq!(
            t.chat["tools"],
            json!([{"type": "function", "function": {"name": "Bash", "description": "run", "parameters": {"type": "object"}}},
                   {"type": "function", "function": {"name": short, "parameters": {"type": "object"}}}])
        );
        assert_eq!(t.dropped_tools, vec!["web_search"]);
        assert_eq!(
            t.chat["tool_choice"],
            json!({"type": "function", "function": {"name": short}})
        );
        assert_eq!(t.chat["parallel_tool_calls"], false);
        assert_eq!(t.names.original(&short), long);
        assert_eq!(t.names.original("Bash"), "Bash");
        for (c, want) in [("auto", "auto"), ("any", "required"), ("none", "none")] {
            let t = tr(
                json!({"model": "m", "messages": [], "tools": [{"name": "a"}], "tool_choice": {"type": c}}),
            );
            assert_eq!(t.chat["tool_choice"], want);
        }
        let t = tr(json!({"model": "m", "messages": [], "tool_choice": {"type": "auto"}}));
        assert!(
            !t.chat.contains_key("tool_choice"),
            "no choice among no tools"
        );
    }

    #[test]
    fn sampling_fields_map_and_anthropic_only_members_are_dropped_and_counted() {
        let t = tr(
            json!({"model": "m", "messages": [], "max_tokens": 9, "temperature": 0.5,
            "top_p": 0.9, "top_k": 4, "stop_sequences": ["END"], "stream": true,
            "metadata": {"user_id": "u1", "other": 1},
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}, "effort": "high"},
            "thinking": {"type": "enabled", "budget_tokens": 10}, "context_management": {},
            "container": "c", "mcp_servers": [], "service_tier": "auto", "brand_new": 1}),
        );
        let c = &t.chat;
        assert_eq!(
            (
                &c["max_tokens"],
                &c["temperature"],
                &c["top_p"],
                &c["top_k"]
            ),
            (&json!(9), &json!(0.5), &json!(0.9), &json!(4))
        );
        assert_eq!(c["stop"], json!(["END"]));
        assert_eq!(c["user"], "u1");
        assert_eq!(c["stream"], true);
        assert_eq!(c["stream_options"], json!({"include_usage": true}));
        assert_eq!(
            c["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "structured_output", "schema": {"type": "object"}}})
        );
        for k in [
            "thinking",
            "context_management",
            "container",
            "mcp_servers",
            "service_tier",
            "brand_new",
            "metadata",
            "output_config",
        ] {
            assert!(!c.contains_key(k), "{k} not forwarded");
        }
        let mut d = t.dropped.clone();
        d.sort();
        assert_eq!(
            d,
            vec![
                "container",
                "context_management",
                "mcp_servers",
                "metadata",
                "other",
                "output_config",
                "service_tier",
                "thinking"
            ]
        );
    }
}
