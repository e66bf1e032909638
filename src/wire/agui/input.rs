//! AG-UI's `RunAgentInput` (`@ag-ui/core` 1.0.0) as the AG-UI endpoint
//! reads it: checked against the protocol's schema (every refusal names the
//! field), then mapped to the OpenAI chat body the agent turn takes. Only
//! chat's own fields go upstream: `state`, `forwardedProps`, ids, metadata
//! and the other AG-UI members stay here.
//!
//! The mapping (contract, "AG-UI endpoint"):
//! - `developer`/`system` → `system`; `user` → `user` (a string, or its text
//!   parts joined); `assistant` → `assistant`, `toolCalls` → `tool_calls`;
//!   `tool` → `tool`, `toolCallId` → `tool_call_id`; `activity` and
//!   `reasoning` messages are dropped;
//! - `tools` → function tools (`name`, `description`, `parameters`);
//! - `context` → one `system` message put first, so that the agent's
//!   instructions (which the turn puts before everything) precede it, each
//!   entry a line `description: value`;
//! - always streamed (`stream: true`; the relay asks for usage itself).

use serde_json::{json, Map, Value};

use crate::error::Error;
use crate::wire::ids::is_conversation_id;
use crate::wire::is_tool_name;

/// A run as the agent turn takes it.
#[derive(Debug)]
pub struct RunInput {
    /// `threadId`: the conversation id.
    pub thread_id: String,
    /// `runId`: the turn id.
    pub run_id: String,
    /// The OpenAI chat body of the run.
    pub chat: Map<String, Value>,
}

/// Reads a `RunAgentInput` body: JSON, valid under the protocol's schema,
/// ids that follow the conversation id rule; then its chat body.
pub fn read(bytes: &[u8]) -> Result<RunInput, Error> {
    let body: Value = crate::wire::json::parse_json(bytes)?;
    check(&body)?;
    let id = |field: &str| body[field].as_str().unwrap_or_default().to_string();
    Ok(RunInput {
        thread_id: id("threadId"),
        run_id: id("runId"),
        chat: to_chat(&body),
    })
}

fn invalid(param: &str, what: &str) -> Error {
    Error::validation(param, format!("'{param}' {what}."))
}

/// The checks of one JSON object, each naming `path.key` when it fails.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

impl<'a> Obj<'a> {
    fn of(v: &'a Value, path: &'a str) -> Result<Obj<'a>, Error> {
        match v {
            Value::Object(map) => Ok(Obj { map, path }),
            _ => Err(invalid(path, "must be an object")),
        }
    }

    fn param(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// A member that must be a string.
    fn string(&self, key: &str) -> Result<&'a str, Error> {
        match self.map.get(key) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(invalid(&self.param(key), "must be a string")),
            None => Err(invalid(&self.param(key), "is required")),
        }
    }

    /// A member that may be absent, else a string (`null` is not absent in
    /// the protocol's schema).
    fn opt_string(&self, key: &str) -> Result<Option<&'a str>, Error> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(invalid(&self.param(key), "must be a string")),
        }
    }

    /// A member that may be absent, else anything but `null`.
    fn opt_not_null(&self, key: &str) -> Result<(), Error> {
        match self.map.get(key) {
            Some(Value::Null) => Err(invalid(&self.param(key), "must not be null")),
            _ => Ok(()),
        }
    }

    /// `metadata`: absent, or an object.
    fn opt_metadata(&self) -> Result<(), Error> {
        match self.map.get("metadata") {
            None | Some(Value::Object(_)) => Ok(()),
            Some(_) => Err(invalid(&self.param("metadata"), "must be an object")),
        }
    }

    /// A member that may be absent, else an array.
    fn opt_array(&self, key: &str) -> Result<&'a [Value], Error> {
        match self.map.get(key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(invalid(&self.param(key), "must be an array")),
        }
    }

    fn literal(&self, key: &str, allowed: &[&str]) -> Result<&'a str, Error> {
        let v = self.string(key)?;
        if allowed.contains(&v) {
            Ok(v)
        } else {
            Err(invalid(
                &self.param(key),
                &format!("must be one of {}", allowed.join(", ")),
            ))
        }
    }
}

/// Checks a body against `RunAgentInputSchema` of `@ag-ui/core` 1.0.0
/// (unknown members are allowed everywhere, as its loose objects allow
/// them), plus the gateway's own rules: the id rule for `threadId` and
/// `runId`, chat's rule for tool names.
pub fn check(body: &Value) -> Result<(), Error> {
    let top = Obj::of(body, "").map_err(|_| {
        Error::validation("body", "The body must be a JSON object (a RunAgentInput).")
    })?;
    for field in ["threadId", "runId"] {
        let id = top.string(field)?;
        if !is_conversation_id(id) {
            return Err(Error::validation(
                field,
                format!("'{field}' must be 1 to 128 of ASCII letters, digits and . _ : -"),
            ));
        }
    }
    top.opt_string("protocolVersion")?;
    top.opt_string("parentRunId")?;
    top.opt_not_null("forwardedProps")?;
    let messages = match top.map.get("messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(invalid("messages", "must be an array")),
        None => return Err(invalid("messages", "is required")),
    };
    for (i, m) in messages.iter().enumerate() {
        check_message(m, &format!("messages[{i}]"))?;
    }
    for (i, t) in top.opt_array("tools")?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let tool = Obj::of(t, &path)?;
        let name = tool.string("name")?;
        tool.string("description")?;
        tool.opt_not_null("parameters")?;
        tool.opt_metadata()?;
        if !is_tool_name(name) {
            return Err(Error::validation(
                tool.param("name"),
                format!("'{path}.name' must be 1 to 64 of A-Za-z0-9_- (the model servers' rule for function names)."),
            ));
        }
    }
    for (i, c) in top.opt_array("context")?.iter().enumerate() {
        let path = format!("context[{i}]");
        let entry = Obj::of(c, &path)?;
        entry.string("description")?;
        entry.string("value")?;
    }
    for (i, r) in top.opt_array("resume")?.iter().enumerate() {
        let path = format!("resume[{i}]");
        let entry = Obj::of(r, &path)?;
        entry.string("interruptId")?;
        entry.literal("status", &["resolved", "cancelled"])?;
        entry.opt_not_null("payload")?;
        entry.opt_metadata()?;
    }
    Ok(())
}

fn check_message(m: &Value, path: &str) -> Result<(), Error> {
    let msg = Obj::of(m, path)?;
    let role = msg.literal(
        "role",
        &[
            "developer",
            "system",
            "assistant",
            "user",
            "tool",
            "activity",
            "reasoning",
        ],
    )?;
    msg.string("id")?;
    msg.opt_string("subagentRunId")?;
    msg.opt_metadata()?;
    if role != "activity" {
        msg.opt_string("encryptedValue")?;
    }
    match role {
        "developer" | "system" => {
            msg.opt_string("name")?;
            msg.string("content")?;
        }
        "assistant" => {
            msg.opt_string("name")?;
            msg.opt_string("content")?;
            for (i, tc) in msg.opt_array("toolCalls")?.iter().enumerate() {
                let path = msg.param(&format!("toolCalls[{i}]"));
                let call = Obj::of(tc, &path)?;
                call.string("id")?;
                call.literal("type", &["function"])?;
                let fpath = call.param("function");
                let function = Obj::of(call.map.get("function").unwrap_or(&Value::Null), &fpath)?;
                function.string("name")?;
                function.string("arguments")?;
                call.opt_string("encryptedValue")?;
                call.opt_metadata()?;
            }
        }
        "user" => {
            msg.opt_string("name")?;
            check_content(msg.map.get("content"), &msg.param("content"))?;
        }
        "tool" => {
            check_content(msg.map.get("content"), &msg.param("content"))?;
            msg.string("toolCallId")?;
            msg.opt_string("error")?;
        }
        "activity" => {
            msg.string("activityType")?;
            if !msg.map.get("content").is_some_and(Value::is_object) {
                return Err(invalid(&msg.param("content"), "must be an object"));
            }
        }
        _ => {
            msg.string("content")?;
        }
    }
    Ok(())
}

/// A user or tool message's content: a string or an array of content parts.
fn check_content(content: Option<&Value>, path: &str) -> Result<(), Error> {
    let parts = match content {
        Some(Value::String(_)) => return Ok(()),
        Some(Value::Array(parts)) => parts,
        Some(_) => return Err(invalid(path, "must be a string or an array of parts")),
        None => return Err(invalid(path, "is required")),
    };
    for (i, p) in parts.iter().enumerate() {
        let path = format!("{path}[{i}]");
        let part = Obj::of(p, &path)?;
        let kind = part.literal("type", &["text", "image", "audio", "video", "document"])?;
        part.opt_string("id")?;
        part.opt_not_null("metadata")?;
        if kind == "text" {
            part.string("text")?;
            continue;
        }
        let spath = part.param("source");
        let source = Obj::of(part.map.get("source").unwrap_or(&Value::Null), &spath)?;
        let from = source.literal("type", &["data", "url", "file"])?;
        source.string("value")?;
        match from {
            "data" => {
                source.string("mimeType")?;
            }
            "file" => {
                source.opt_string("provider")?;
                source.opt_string("mimeType")?;
            }
            _ => {
                source.opt_string("mimeType")?;
            }
        }
    }
    Ok(())
}

/// The text of a string content, or its text parts joined by line breaks
/// (other parts are not sent).
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// One AG-UI message as a chat message (None: a role chat has no place for).
fn chat_message(m: &Value) -> Option<Value> {
    let text = |k: &str| m.get(k).and_then(Value::as_str);
    match text("role")? {
        "developer" | "system" => {
            Some(json!({"role": "system", "content": text("content").unwrap_or_default()}))
        }
        "user" => Some(json!({"role": "user", "content": text_of(m.get("content"))})),
        "tool" => Some(json!({
            "role": "tool",
            "tool_call_id": text("toolCallId").unwrap_or_default(),
            "content": text_of(m.get("content")),
        })),
        "assistant" => {
            let calls: Vec<Value> = m
                .get("toolCalls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    json!({"id": c["id"], "type": "function",
                           "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}})
                })
                .collect();
            let mut out = json!({"role": "assistant"});
            match (text("content"), calls.is_empty()) {
                (Some(t), _) => out["content"] = json!(t),
                (None, true) => out["content"] = json!(""),
                (None, false) => out["content"] = Value::Null,
            }
            if !calls.is_empty() {
                out["tool_calls"] = Value::Array(calls);
            }
            Some(out)
        }
        _ => None,
    }
}

/// The chat body of a checked `RunAgentInput` (see the module documentation).
pub fn to_chat(body: &Value) -> Map<String, Value> {
    let list = |k: &str| body.get(k).and_then(Value::as_array).map(Vec::as_slice);
    let mut messages = vec![];
    let context: Vec<String> = list("context")
        .unwrap_or_default()
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["description"].as_str().unwrap_or_default(),
                c["value"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if !context.is_empty() {
        messages.push(json!({"role": "system", "content": context.join("\n")}));
    }
    messages.extend(
        list("messages")
            .unwrap_or_default()
            .iter()
            .filter_map(chat_message),
    );
    let tools: Vec<Value> = list("tools")
        .unwrap_or_default()
        .iter()
        .map(|t| {
            let mut function = json!({"name": t["name"], "description": t["description"]});
            if let Some(p) = t.get("parameters") {
                function["parameters"] = p.clone();
            }
            json!({"type": "function", "function": function})
        })
        .collect();
    let mut chat = Map::new();
    chat.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        chat.insert("tools".into(), Value::Array(tools));
    }
    chat.insert("stream".into(), Value::Bool(true));
    chat
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Value {
        json!({"threadId": "t-1", "runId": "r-1", "state": {}, "messages": [], "tools": [], "context": [], "forwardedProps": {}})
    }

    fn param_of(body: &Value) -> String {
        let e = check(body).expect_err("refused");
        assert_eq!(e.code, "validation_error");
        e.param.unwrap_or_default()
    }

    #[test]
    fn every_role_maps_to_its_chat_message_and_others_are_dropped() {
        let mut b = base();
        b["messages"] = json!([
            {"id": "1", "role": "developer", "content": "be brief"},
            {"id": "2", "role": "system", "content": "sys"},
            {"id": "3", "role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}}, {"type": "text", "text": "here"}]},
            {"id": "4", "role": "assistant", "toolCalls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"id": "5", "role": "tool", "toolCallId": "c1", "content": "42"},
            {"id": "6", "role": "reasoning", "content": "hmm"},
            {"id": "7", "role": "activity", "activityType": "x", "content": {}},
            {"id": "8", "role": "assistant", "content": "done", "name": "bot"}
        ]);
        check(&b).unwrap();
        let chat = Value::Object(to_chat(&b));
        assert_eq!(
            chat,
            json!({"messages": [
                {"role": "system", "content": "be brief"},
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "look\nhere"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
                {"role": "assistant", "content": "done"}
            ], "stream": true})
        );
    }

    #[test]
    fn tools_become_function_tools_and_context_one_system_message_first() {
        let mut b = base();
        b["messages"] = json!([{"id": "u", "role": "user", "content": "hi"}]);
        b["tools"] = json!([{"name": "search", "description": "finds", "parameters": {"type": "object"}, "metadata": {"k": 1}},
                            {"name": "now", "description": "time"}]);
        b["context"] = json!([{"description": "page", "value": "/home"}, {"description": "user", "value": "ann"}]);
        b["state"] = json!({"secret": 1});
        b["forwardedProps"] = json!({"x": 2});
        check(&b).unwrap();
        let chat = to_chat(&b);
        assert_eq!(
            chat["messages"][0],
            json!({"role": "system", "content": "page: /home\nuser: ann"})
        );
        assert_eq!(
            chat["tools"],
            json!([
                {"type": "function", "function": {"name": "search", "description": "finds", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "now", "description": "time"}}
            ])
        );
        let mut keys: Vec<&String> = chat.keys().collect();
        keys.sort();
        assert_eq!(keys, ["messages", "stream", "tools"]);
    }

    #[test]
    fn ids_follow_the_conversation_id_rule() {
        for field in ["threadId", "runId"] {
            for bad in [json!(""), json!("a b"), json!("x".repeat(129)), json!(7)] {
                let mut b = base();
                b[field] = bad;
                assert_eq!(param_of(&b), field);
            }
            let mut b = base();
            b.as_object_mut().unwrap().remove(field);
            assert_eq!(param_of(&b), field);
            let mut b = base();
            b[field] = json!("x".repeat(128));
            check(&b).unwrap();
        }
    }

    #[test]
    fn a_body_off_the_schema_is_refused_naming_the_field() {
        let cases = [
            (json!({"messages": 1}), "messages"),
            (
                json!({"messages": [{"id": "1", "role": "robot", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}]}),
                "messages[0].id",
            ),
            (
                json!({"messages": [{"id": "1", "role": "user"}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"id": "1", "role": "user", "content": [{"type": "text"}]}]}),
                "messages[0].content[0].text",
            ),
            (
                json!({"messages": [{"id": "1", "role": "user", "content": [{"type": "image", "source": {"type": "data", "value": "x"}}]}]}),
                "messages[0].content[0].source.mimeType",
            ),
            (
                json!({"messages": [{"id": "1", "role": "system", "content": null}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"id": "1", "role": "tool", "content": "x"}]}),
                "messages[0].toolCallId",
            ),
            (
                json!({"messages": [{"id": "1", "role": "assistant", "toolCalls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}]}),
                "messages[0].toolCalls[0].function.arguments",
            ),
            (
                json!({"messages": [{"id": "1", "role": "assistant", "toolCalls": [{"id": "c", "type": "x", "function": {"name": "f", "arguments": ""}}]}]}),
                "messages[0].toolCalls[0].type",
            ),
            (
                json!({"messages": [{"id": "1", "role": "user", "content": "x", "metadata": 3}]}),
                "messages[0].metadata",
            ),
            (
                json!({"messages": [{"id": "1", "role": "activity", "activityType": "a", "content": []}]}),
                "messages[0].content",
            ),
            (json!({"tools": [{"name": "t"}]}), "tools[0].description"),
            (
                json!({"tools": [{"name": "a.b", "description": ""}]}),
                "tools[0].name",
            ),
            (json!({"tools": null}), "tools"),
            (
                json!({"context": [{"description": "d"}]}),
                "context[0].value",
            ),
            (json!({"forwardedProps": null}), "forwardedProps"),
            (json!({"parentRunId": 1}), "parentRunId"),
            (
                json!({"resume": [{"interruptId": "i", "status": "maybe"}]}),
                "resume[0].status",
            ),
        ];
        for (patch, param) in cases {
            let mut b = base();
            for (k, v) in patch.as_object().unwrap() {
                b[k] = v.clone();
            }
            assert_eq!(param_of(&b), param, "{patch}");
        }
        let mut b = base();
        b.as_object_mut().unwrap().remove("messages");
        assert_eq!(param_of(&b), "messages");
        assert_eq!(param_of(&json!([1])), "body");
    }

    #[test]
    fn what_the_schema_leaves_open_is_accepted() {
        let b = json!({"threadId": "t", "runId": "r", "state": null, "unknown": {"x": 1},
            "messages": [{"id": "1", "role": "user", "content": "x", "extra": true}]});
        check(&b).unwrap();
        let chat = to_chat(&b);
        assert_eq!(chat["messages"], json!([{"role": "user", "content": "x"}]));
        assert!(read(br#"{"threadId":"t","runId":"r","messages":[]}"#).is_ok());
        assert_eq!(read(b"not json").unwrap_err().code, "validation_error");
    }
}
