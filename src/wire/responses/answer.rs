//! A chat answer made into a Responses answer (contract, "Bridge: chat
//! answer → Responses answer"), and the pieces the stream shares with it:
//! the response object, output items, usage.

use serde_json::{json, Map, Value};

use crate::usage::{estimate_tokens, Tokens};
use crate::wire::chat::chunk::AnswerText;
use crate::wire::chat::completion_chars;
use crate::wire::chat::usage::UsageFigures;
use crate::wire::responses::new_id;
use crate::wire::sse::{json_num, json_str};

/// What the answer echoes of the request, and what the bridge needs to
/// shape the answer (the custom tools, the prompt estimate).
#[derive(Clone, Debug, Default)]
pub struct Echo {
    /// The echoed fields as JSON members, each after a comma (written
    /// once, into every response object of the request; the tree path
    /// reads them back: [`Echo::fields`]).
    members: String,
    /// Names of the request's custom tools.
    pub custom: Vec<String>,
    /// The usage record's prompt estimate, for an upstream without usage.
    pub prompt_estimate: i64,
}

/// The echoed fields and what each is when the request has none (or null),
/// in the order a tree (sorted keys) writes them.
const ECHOED: [(&str, &str); 10] = [
    ("instructions", "null"),
    ("max_output_tokens", "null"),
    ("metadata", "{}"),
    ("parallel_tool_calls", "true"),
    ("reasoning", "null"),
    ("temperature", "null"),
    ("text", r#"{"format":{"type":"text"}}"#),
    ("tool_choice", r#""auto""#),
    ("tools", "[]"),
    ("top_p", "null"),
];

impl Echo {
    /// `body`: the Responses request (as it went upstream); `prompt_chars`:
    /// the characters of the chat prompt (the usage record's estimate).
    pub fn of(body: &Map<String, Value>, custom: Vec<String>, prompt_chars: usize) -> Echo {
        Echo::written(custom, prompt_chars, |k, out| {
            match body.get(k).filter(|v| !v.is_null()) {
                // A tree always serialises.
                Some(v) => serde_json::to_writer(out, v).is_ok(),
                None => false,
            }
        })
    }

    /// The echo with each field's value written by `member` (which says
    /// whether the request had it; if not, its default is written).
    pub fn written(
        custom: Vec<String>,
        prompt_chars: usize,
        mut member: impl FnMut(&str, &mut Vec<u8>) -> bool,
    ) -> Echo {
        // Written straight from the body: no tree of the echo is made.
        let mut members = Vec::with_capacity(256);
        for (k, default) in ECHOED {
            // The names are plain: nothing to escape.
            members.extend_from_slice(b",\"");
            members.extend_from_slice(k.as_bytes());
            members.extend_from_slice(b"\":");
            if !member(k, &mut members) {
                members.extend_from_slice(default.as_bytes());
            }
        }
        Echo {
            members: String::from_utf8(members).unwrap_or_default(),
            custom,
            prompt_estimate: estimate_tokens(prompt_chars),
        }
    }

    /// The echoed fields as a tree (for answers made as trees).
    pub fn fields(&self) -> Map<String, Value> {
        let text = format!("{{{}}}", self.members.strip_prefix(',').unwrap_or(""));
        serde_json::from_str(&text).unwrap_or_default()
    }

    pub fn is_custom(&self, name: &str) -> bool {
        self.custom.iter().any(|c| c == name)
    }
}

/// The id, creation time and model of one response (the same in every
/// event of a stream and in its final object).
#[derive(Clone, Debug)]
pub struct ResponseMeta {
    pub id: String,
    pub created_at: i64,
    pub model: String,
}

impl ResponseMeta {
    pub fn new(model: &str) -> ResponseMeta {
        ResponseMeta {
            id: new_id("resp_"),
            created_at: crate::store::now_ms() / 1000,
            model: model.to_string(),
        }
    }
}

/// The status and `incomplete_details` for a chat `finish_reason`.
pub fn status_of(finish_reason: Option<&str>) -> (&'static str, Value) {
    match finish_reason {
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some("content_filter") => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// A Responses `usage` object's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponsesUsage {
    pub input: i64,
    pub cached: i64,
    pub output: i64,
    pub reasoning: i64,
}

impl ResponsesUsage {
    /// From a chat `usage` object, else from the estimate.
    pub fn of(chat_usage: Option<&Value>, estimate: Tokens) -> ResponsesUsage {
        ResponsesUsage::of_figures(chat_usage.and_then(UsageFigures::of), estimate)
    }

    /// [`Self::of`] for figures already read.
    pub fn of_figures(figures: Option<UsageFigures>, estimate: Tokens) -> ResponsesUsage {
        let f = figures.unwrap_or_default();
        let (input, output) = match (f.prompt, f.completion) {
            (None, None) => (estimate.prompt, estimate.completion),
            (p, c) => (p.unwrap_or(0), c.unwrap_or(0)),
        };
        ResponsesUsage {
            input,
            cached: f.cached.unwrap_or(0),
            output,
            reasoning: f.reasoning.unwrap_or(0),
        }
    }

    /// Written as JSON (the members of [`usage_of`]'s object, in its order).
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut n = itoa::Buffer::new();
        out.extend_from_slice(b"{\"input_tokens\":");
        out.extend_from_slice(n.format(self.input).as_bytes());
        out.extend_from_slice(b",\"input_tokens_details\":{\"cached_tokens\":");
        out.extend_from_slice(n.format(self.cached).as_bytes());
        out.extend_from_slice(b"},\"output_tokens\":");
        out.extend_from_slice(n.format(self.output).as_bytes());
        out.extend_from_slice(b",\"output_tokens_details\":{\"reasoning_tokens\":");
        out.extend_from_slice(n.format(self.reasoning).as_bytes());
        out.extend_from_slice(b"},\"total_tokens\":");
        out.extend_from_slice(n.format(self.input + self.output).as_bytes());
        out.push(b'}');
    }
}

/// Responses usage from a chat `usage` object, else from the estimate.
pub fn usage_of(chat_usage: Option<&Value>, estimate: Tokens) -> Value {
    let u = ResponsesUsage::of(chat_usage, estimate);
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": u.cached},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.input + u.output,
    })
}

/// The whole response object.
pub fn response_object(
    meta: &ResponseMeta,
    echo: &Echo,
    status: &str,
    output: Vec<Value>,
    usage: Value,
    incomplete_details: Value,
    error: Value,
) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), json!(meta.id));
    o.insert("object".into(), json!("response"));
    o.insert("created_at".into(), json!(meta.created_at));
    o.insert("status".into(), json!(status));
    o.insert("model".into(), json!(meta.model));
    o.insert("output".into(), Value::Array(output));
    o.insert("usage".into(), usage);
    o.insert("incomplete_details".into(), incomplete_details);
    o.insert("error".into(), error);
    o.insert("store".into(), json!(false));
    o.insert("previous_response_id".into(), Value::Null);
    o.extend(echo.fields());
    Value::Object(o)
}

/// [`response_object`] written as JSON into `out`, its output items given
/// as JSON text, and `approvals` (when there are some) as a member of its own.
#[allow(clippy::too_many_arguments)]
pub fn write_response(
    out: &mut Vec<u8>,
    meta: &ResponseMeta,
    echo: &Echo,
    status: &str,
    output: &[String],
    usage: &[u8],
    incomplete_details: &Value,
    error: &Value,
    approvals: &[Value],
) {
    out.extend_from_slice(b"{\"id\":");
    json_str(out, &meta.id);
    out.extend_from_slice(b",\"object\":\"response\",\"created_at\":");
    json_num(out, meta.created_at);
    out.extend_from_slice(b",\"status\":");
    json_str(out, status);
    out.extend_from_slice(b",\"model\":");
    json_str(out, &meta.model);
    out.extend_from_slice(b",\"output\":[");
    for (i, item) in output.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item.as_bytes());
    }
    // Trees always serialise.
    out.extend_from_slice(b"],\"usage\":");
    out.extend_from_slice(usage);
    out.extend_from_slice(b",\"incomplete_details\":");
    let _ = serde_json::to_writer(&mut *out, incomplete_details);
    out.extend_from_slice(b",\"error\":");
    let _ = serde_json::to_writer(&mut *out, error);
    out.extend_from_slice(b",\"store\":false,\"previous_response_id\":null");
    out.extend_from_slice(echo.members.as_bytes());
    if !approvals.is_empty() {
        out.extend_from_slice(b",\"approvals\":");
        let _ = serde_json::to_writer(&mut *out, approvals);
    }
    out.push(b'}');
}

/// A finished text item.
pub fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// The `input` string of a custom tool's arguments (`{"input": ...}`), else
/// the raw arguments.
pub fn custom_input(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| arguments.to_string())
}

/// A finished tool-call item: a `custom_tool_call` when `name` is a custom
/// tool of the request, else a `function_call`.
pub fn call_item(
    echo: &Echo,
    item_id: Option<&str>,
    call_id: &str,
    name: &str,
    arguments: &str,
) -> Value {
    if echo.is_custom(name) {
        let id = item_id.map_or_else(|| new_id("ctc_"), str::to_string);
        json!({"type": "custom_tool_call", "id": id, "call_id": call_id, "name": name,
               "input": custom_input(arguments), "status": "completed"})
    } else {
        let id = item_id.map_or_else(|| new_id("fc_"), str::to_string);
        json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
               "arguments": arguments, "status": "completed"})
    }
}

/// A plain chat answer (its `model` already the alias) as a Responses
/// answer.
pub fn from_chat(chat: &Value, meta: &ResponseMeta, echo: &Echo) -> Value {
    let choice = chat.pointer("/choices/0");
    let message = choice.and_then(|c| c.get("message"));
    let mut output = Vec::new();
    if let Some(text) = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        output.push(message_item(&new_id("msg_"), text, "completed"));
    }
    for call in message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |p: &str| call.pointer(p).and_then(Value::as_str).unwrap_or("");
        output.push(call_item(
            echo,
            None,
            s("/id"),
            s("/function/name"),
            s("/function/arguments"),
        ));
    }
    let finish = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    let (status, incomplete) = status_of(finish);
    let completion = chat
        .as_object()
        .map(|o| completion_chars(o, "message"))
        .unwrap_or(0);
    let estimate = Tokens::estimate(echo.prompt_estimate, estimate_tokens(completion));
    let usage = usage_of(chat.get("usage"), estimate);
    response_object(meta, echo, status, output, usage, incomplete, Value::Null)
}

/// [`from_chat`] from the chat answer's text, without a tree: the
/// Responses answer's bytes and the answer's tokens for the usage record
/// (its usage, else estimated from `prompt_estimate`). None for an answer
/// [`AnswerText`] leaves to a tree.
pub fn from_chat_text(
    chat: &[u8],
    meta: &ResponseMeta,
    echo: &Echo,
    prompt_estimate: i64,
) -> Option<(bytes::Bytes, Tokens)> {
    let a = AnswerText::read(chat)?;
    let m = &a.message;
    let mut output = Vec::new();
    if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
        let mut quoted = Vec::with_capacity(text.len() + 2);
        m.write_content(&mut quoted);
        let mut item = Vec::with_capacity(text.len() + 128);
        write_message_item_quoted(&mut item, &new_id("msg_"), &quoted, "completed");
        output.push(String::from_utf8(item).ok()?);
    }
    for call in &m.tool_calls {
        let s = |v: &Option<std::borrow::Cow<'_, str>>| v.as_deref().unwrap_or("").to_string();
        let item = call_item(
            echo,
            None,
            &s(&call.id),
            &s(&call.name),
            &s(&call.arguments),
        );
        output.push(item.to_string());
    }
    let (status, incomplete) = status_of(m.finish_reason.as_deref());
    let estimate = Tokens::estimate(echo.prompt_estimate, estimate_tokens(a.chars));
    let mut usage = Vec::with_capacity(160);
    ResponsesUsage::of_figures(a.usage, estimate).write(&mut usage);
    let mut out = Vec::with_capacity(chat.len() + 512);
    write_response(
        &mut out,
        meta,
        echo,
        status,
        &output,
        &usage,
        &incomplete,
        &Value::Null,
        &[],
    );
    Some((bytes::Bytes::from(out), a.tokens(prompt_estimate)))
}

/// An `output_text` content part.
pub(crate) fn write_output_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(b"{\"type\":\"output_text\",\"text\":");
    json_str(out, text);
    out.extend_from_slice(b",\"annotations\":[]}");
}

/// [`write_output_text`] of a text already written as a JSON string.
pub(crate) fn write_output_text_quoted(out: &mut Vec<u8>, quoted: &[u8]) {
    out.extend_from_slice(b"{\"type\":\"output_text\",\"text\":");
    out.extend_from_slice(quoted);
    out.extend_from_slice(b",\"annotations\":[]}");
}

/// A text item (as [`message_item`]) of a text already written as a JSON
/// string.
pub(crate) fn write_message_item_quoted(out: &mut Vec<u8>, id: &str, quoted: &[u8], status: &str) {
    out.extend_from_slice(b"{\"type\":\"message\",\"id\":");
    json_str(out, id);
    out.extend_from_slice(b",\"status\":");
    json_str(out, status);
    out.extend_from_slice(b",\"role\":\"assistant\",\"content\":[");
    write_output_text_quoted(out, quoted);
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo() -> Echo {
        let body =
            json!({"tools": [{"type": "custom", "name": "apply_patch"}], "temperature": 0.1});
        Echo::of(body.as_object().unwrap(), vec!["apply_patch".into()], 40)
    }

    fn meta() -> ResponseMeta {
        ResponseMeta {
            id: "resp_1".into(),
            created_at: 7,
            model: "alias".into(),
        }
    }

    #[test]
    fn text_and_calls_become_output_items_in_order() {
        let chat = json!({"model": "alias", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "let me",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "exec", "arguments": "{\"a\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "apply_patch", "arguments": "{\"input\":\"*** Begin\"}"}}
            ]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}});
        let r = from_chat(&chat, &meta(), &echo());
        assert_eq!(r["id"], "resp_1");
        assert_eq!(r["object"], "response");
        assert_eq!(r["status"], "completed");
        assert_eq!(r["model"], "alias");
        assert_eq!(r["output"][0]["content"][0]["text"], "let me");
        assert_eq!(r["output"][1]["type"], "function_call");
        assert_eq!(r["output"][1]["call_id"], "call_1");
        assert!(r["output"][1]["id"].as_str().unwrap().starts_with("fc_"));
        assert_eq!(r["output"][2]["type"], "custom_tool_call");
        assert_eq!(r["output"][2]["input"], "*** Begin");
        assert_eq!(
            r["usage"],
            json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 3,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8})
        );
        assert_eq!(r["temperature"], 0.1);
        assert_eq!(r["tool_choice"], "auto");
        assert_eq!(r["parallel_tool_calls"], true);
        assert_eq!(r["text"], json!({"format": {"type": "text"}}));
        assert_eq!(r["store"], false);
        assert_eq!(r["error"], Value::Null);
    }

    #[test]
    fn length_and_filter_are_incomplete_and_no_usage_is_estimated() {
        for (reason, why) in [
            ("length", "max_output_tokens"),
            ("content_filter", "content_filter"),
        ] {
            let chat =
                json!({"choices": [{"finish_reason": reason, "message": {"content": "abcdefgh"}}]});
            let r = from_chat(&chat, &meta(), &echo());
            assert_eq!(r["status"], "incomplete");
            assert_eq!(r["incomplete_details"]["reason"], why);
            assert_eq!(r["usage"]["input_tokens"], 10);
            assert_eq!(r["usage"]["output_tokens"], 2);
        }
        let empty = json!({"choices": [{"finish_reason": "stop", "message": {"content": ""}}]});
        assert_eq!(from_chat(&empty, &meta(), &echo())["output"], json!([]));
    }

    #[test]
    fn custom_input_falls_back_to_the_raw_arguments() {
        assert_eq!(custom_input("{\"input\":\"x\"}"), "x");
        assert_eq!(custom_input("not json"), "not json");
        assert_eq!(custom_input("{\"other\":1}"), "{\"other\":1}");
    }
}
