//! OpenAI chat completions (`/v1/chat/completions`): the request body as the
//! relay and the agent turn read it ([`body`], [`request`], [`raw_fields`],
//! [`tools`]), and answers and stream chunks as the relay rewrites them
//! ([`answer`]). The small helpers here read and edit bodies as JSON trees.

pub mod answer;
pub mod body;
pub mod chunk;
pub mod raw_fields;
pub mod request;
pub mod tools;
pub mod usage;

use serde_json::{Map, Value};

use crate::error::Error;
use crate::usage::Tokens;
use crate::wire::ToolCall;

/// Checks the fields the relay itself reads; everything else is the
/// upstream's business. (`model` is checked by the caller, who resolves it.)
pub fn check_body(body: &Map<String, Value>) -> Result<(), Error> {
    match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => {}
        Some(Value::Array(_)) => {
            return Err(Error::validation(
                "messages",
                "'messages' must not be empty.",
            ))
        }
        _ => {
            return Err(Error::validation(
                "messages",
                "'messages' must be an array of messages.",
            ))
        }
    }
    if !matches!(
        body.get("stream"),
        None | Some(Value::Null | Value::Bool(_))
    ) {
        return Err(Error::validation(
            "stream",
            "'stream' must be true or false.",
        ));
    }
    match body.get("stream_options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            if !matches!(
                o.get("include_usage"),
                None | Some(Value::Null | Value::Bool(_))
            ) {
                return Err(Error::validation(
                    "stream_options.include_usage",
                    "'stream_options.include_usage' must be true or false.",
                ));
            }
        }
        Some(_) => {
            return Err(Error::validation(
                "stream_options",
                "'stream_options' must be an object.",
            ))
        }
    }
    Ok(())
}

pub fn is_stream(body: &Map<String, Value>) -> bool {
    body.get("stream") == Some(&Value::Bool(true))
}

/// Makes the body the upstream's: its model name, and for streams usage
/// asked for. Returns whether the client itself asked for usage.
pub fn prepare_body(body: &mut Map<String, Value>, upstream_model: &str, stream: bool) -> bool {
    body.insert("model".into(), Value::String(upstream_model.to_string()));
    ask_for_usage(body, stream)
}

/// For streams, asks the upstream for usage. Returns whether the client
/// itself asked for it.
pub fn ask_for_usage(body: &mut Map<String, Value>, stream: bool) -> bool {
    if !stream {
        return false;
    }
    let opts = body
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Map::new()));
    if !opts.is_object() {
        *opts = Value::Object(Map::new());
    }
    let Some(o) = opts.as_object_mut() else {
        return false;
    };
    let client_asked = o.get("include_usage") == Some(&Value::Bool(true));
    o.insert("include_usage".into(), Value::Bool(true));
    client_asked
}

/// For a client that did not ask for usage: false for the upstream's
/// usage-only chunk (drop it); otherwise removes any `usage` field.
pub fn strip_usage(chunk: &mut Map<String, Value>) -> bool {
    let usage_only = chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
        && chunk.get("usage").is_some_and(|u| !u.is_null());
    if usage_only {
        return false;
    }
    chunk.remove("usage");
    true
}

/// Names the alias in an answer or chunk.
pub fn rewrite_model(obj: &mut Map<String, Value>, alias: &str) {
    obj.insert("model".into(), Value::String(alias.to_string()));
}

/// Tokens from an OpenAI `usage` object, when it has them.
pub fn usage_tokens(usage: Option<&Value>) -> Option<Tokens> {
    usage.and_then(usage::UsageFigures::of)?.tokens()
}

fn text_chars(content: Option<&Value>) -> usize {
    match content {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| t.chars().count())
            .sum(),
        _ => 0,
    }
}

pub(crate) fn tool_call_chars(calls: Option<&Value>) -> usize {
    calls
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| c.get("function")?.get("arguments")?.as_str())
                .map(|a| a.chars().count())
                .sum()
        })
        .unwrap_or(0)
}

/// Characters of text in the messages (content, text parts, tool-call
/// arguments), for the prompt estimate.
pub fn prompt_chars(body: &Map<String, Value>) -> usize {
    body.get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .map(|m| text_chars(m.get("content")) + tool_call_chars(m.get("tool_calls")))
                .sum()
        })
        .unwrap_or(0)
}

/// Characters of generated text in a plain answer or (with `delta`) a chunk.
pub fn completion_chars(obj: &Map<String, Value>, field: &str) -> usize {
    obj.get("choices")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get(field))
                .map(|m| text_chars(m.get("content")) + tool_call_chars(m.get("tool_calls")))
                .sum()
        })
        .unwrap_or(0)
}

/// Tool calls of a non-stream answer (`choices[*].message.tool_calls`).
pub fn tool_calls_of_response(resp: &Value) -> Vec<ToolCall> {
    let mut out = vec![];
    for choice in resp
        .get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for tc in choice
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.push(ToolCall {
                id: tc
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                name: tc
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                arguments: tc
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            });
        }
    }
    out
}

/// The `tool_call_id`s that `role: "tool"` messages answer.
pub fn answered_calls(body: &Map<String, Value>) -> Vec<String> {
    body.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| {
            m.get("tool_call_id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// Gives each `role: "tool"` message the fate `fate` gives the call it
/// answers: `Ok(None)` keeps it, `Ok(Some(text))` replaces its content,
/// `Err` refuses the request.
pub fn answer_calls(
    body: &mut Map<String, Value>,
    fate: impl Fn(&str) -> Result<Option<&'static str>, Error>,
) -> Result<(), Error> {
    let Some(Value::Array(messages)) = body.get_mut("messages") else {
        return Ok(());
    };
    for m in messages.iter_mut() {
        if m.get("role").and_then(Value::as_str) != Some("tool") {
            continue;
        }
        let Some(id) = m.get("tool_call_id").and_then(Value::as_str) else {
            continue;
        };
        if let Some(text) = fate(id)? {
            if let Some(obj) = m.as_object_mut() {
                obj.insert("content".into(), Value::String(text.into()));
            }
        }
    }
    Ok(())
}

/// Keys whose string values are protocol, not text.
const NOT_TEXT: [&str; 5] = ["model", "role", "type", "tool_call_id", "id"];

/// Calls `f` on every string value of a chat body that is text going
/// upstream (message text and parts, `name`, tool results, tool-call
/// arguments, `user`, `prediction`, `refusal`, tool descriptions and
/// parameter schemas): everything but `model`, `role`, `type`, ids, and the
/// names of tools and functions (which the relay and the tool rules match
/// on). PII protection scans what this walks.
pub fn for_each_text(body: &mut Map<String, Value>, f: &mut dyn FnMut(&mut String)) {
    for (k, v) in body.iter_mut() {
        if !NOT_TEXT.contains(&k.as_str()) {
            text_strings(v, k, f);
        }
    }
}

/// [`for_each_text`] below `v`, reached through the key `key`.
fn text_strings(v: &mut Value, key: &str, f: &mut dyn FnMut(&mut String)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => {
            for item in items {
                text_strings(item, key, f);
            }
        }
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                let function_name = k == "name" && key == "function";
                if !function_name && !NOT_TEXT.contains(&k.as_str()) {
                    text_strings(child, k, f);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn prepare_body_sets_the_upstream_model_and_asks_for_usage_on_streams() {
        let mut b = map(json!({"model": "alias", "messages": [], "x_unknown": {"a": 1}}));
        assert!(!prepare_body(&mut b, "up/model", true));
        assert_eq!(
            Value::Object(b),
            json!({"model": "up/model", "messages": [], "x_unknown": {"a": 1},
                   "stream_options": {"include_usage": true}})
        );

        let mut b = map(json!({"model": "a", "stream_options": {"include_usage": true, "k": 1}}));
        assert!(prepare_body(&mut b, "u", true));
        assert_eq!(b["stream_options"], json!({"include_usage": true, "k": 1}));

        let mut b = map(json!({"model": "a", "stream_options": {"include_usage": false}}));
        assert!(!prepare_body(&mut b, "u", true));
        assert_eq!(b["stream_options"], json!({"include_usage": true}));

        let mut b = map(json!({"model": "a"}));
        assert!(!prepare_body(&mut b, "u", false));
        assert_eq!(Value::Object(b), json!({"model": "u"}));
    }

    #[test]
    fn strip_usage_drops_the_usage_only_chunk_and_usage_fields() {
        let mut c = map(json!({"choices": [], "usage": {"prompt_tokens": 1}}));
        assert!(!strip_usage(&mut c));
        let mut c = map(json!({"choices": [{"delta": {}}], "usage": null}));
        assert!(strip_usage(&mut c));
        assert_eq!(Value::Object(c), json!({"choices": [{"delta": {}}]}));
        let mut c = map(json!({"choices": [{"delta": {}}], "usage": {"prompt_tokens": 1}}));
        assert!(strip_usage(&mut c));
        assert!(!c.contains_key("usage"));
        // An empty-choices chunk without usage is not ours to drop.
        let mut c = map(json!({"choices": []}));
        assert!(strip_usage(&mut c));
    }

    #[test]
    fn check_body_names_the_bad_field() {
        let param = |v: Value| check_body(&map(v)).err().and_then(|e| e.param);
        let msgs = json!([{"role": "user", "content": "hi"}]);
        assert_eq!(param(json!({"messages": msgs})), None);
        assert_eq!(param(json!({})), Some("messages".into()));
        assert_eq!(param(json!({"messages": []})), Some("messages".into()));
        assert_eq!(param(json!({"messages": "hi"})), Some("messages".into()));
        assert_eq!(
            param(json!({"messages": msgs, "stream": "yes"})),
            Some("stream".into())
        );
        assert_eq!(param(json!({"messages": msgs, "stream": null})), None);
        assert_eq!(
            param(json!({"messages": msgs, "stream_options": 3})),
            Some("stream_options".into())
        );
        assert_eq!(
            param(json!({"messages": msgs, "stream_options": {"include_usage": 1}})),
            Some("stream_options.include_usage".into())
        );
    }

    #[test]
    fn usage_tokens_read_openai_usage() {
        assert_eq!(
            usage_tokens(Some(
                &json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
            )),
            Some(Tokens {
                prompt: 3,
                completion: 4,
                ..Tokens::default()
            })
        );
        assert_eq!(usage_tokens(Some(&json!({"total_tokens": 7}))), None);
        assert_eq!(usage_tokens(Some(&Value::Null)), None);
        assert_eq!(usage_tokens(None), None);
    }

    #[test]
    fn character_counts_cover_text_parts_and_tool_arguments() {
        let body = map(json!({"messages": [
            {"role": "user", "content": "abcd"},
            {"role": "user", "content": [{"type": "text", "text": "ef"}, {"type": "image_url"}]},
            {"role": "assistant", "content": null,
             "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}
        ]}));
        assert_eq!(prompt_chars(&body), 8);
        let chunk = map(json!({"choices": [
            {"delta": {"content": "héllo"}},
            {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a"}}]}}
        ]}));
        assert_eq!(completion_chars(&chunk, "delta"), 8);
    }

    #[test]
    fn tool_calls_are_read_from_every_choice() {
        let r = json!({"choices": [{"message": {"tool_calls": [
            {"id": "a", "function": {"name": "x", "arguments": "{\"p\":1}"}},
            {"id": "b", "function": {"name": "y", "arguments": "{}"}}
        ]}}]});
        let calls = tool_calls_of_response(&r);
        assert_eq!(calls.len(), 2);
        assert_eq!(
            calls[0],
            ToolCall {
                id: "a".into(),
                name: "x".into(),
                arguments: "{\"p\":1}".into()
            }
        );
    }
}
