//! A Responses request body: its checks (contract, "OpenAI Responses API",
//! "Request"), the edits the agent turn makes to it, and its translation to
//! a chat completions body (the bridge) or to the native upstream's body.

use serde_json::{json, Map, Value};

use crate::error::Error;

/// A Responses request body that passed [`check`], as a tree (the native
/// mode sends it on; the bridge translates it), with what the agent turn
/// puts before its input.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    pub body: Map<String, Value>,
    /// The agent's instructions (agent route): the first system message.
    agent_instructions: Option<String>,
    /// System notes put after the instructions (the PII token note).
    notes: Vec<String>,
    /// Tools removed before the checks (the agent route's built-in tools).
    removed: Vec<String>,
}

fn bad_type(param: &str, what: &str) -> Error {
    Error::validation(param, format!("'{param}' must be {what}."))
}

fn unsupported(param: String, what: &str) -> Error {
    Error::bad_request(
        "unsupported_input",
        format!("{param} is {what}, which Gatehouse does not pass on; send text, images by URL, function calls and their outputs."),
    )
    .with_param(param)
}

fn stored_state(param: String, what: &str) -> Error {
    Error::bad_request(
        "previous_response_unsupported",
        format!("{what} needs a stored response, and Gatehouse does not store responses; send the whole conversation in 'input'."),
    )
    .with_param(param)
}

fn is_null_or(v: Option<&Value>, f: impl Fn(&Value) -> bool) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(v) => f(v),
    }
}

fn str_field<'a>(item: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    item.get(key).and_then(Value::as_str)
}

/// The item's type: its `type`, or `message` for a `{"role","content"}` item.
fn item_type(item: &Map<String, Value>) -> Option<&str> {
    match item.get("type") {
        Some(Value::String(t)) => Some(t),
        None | Some(Value::Null) if item.contains_key("role") => Some("message"),
        _ => None,
    }
}

pub(super) const ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];

fn check_content(i: usize, content: Option<&Value>) -> Result<(), Error> {
    // Names made only for an error: formatting them for every item of
    // every request cost more than the checks themselves.
    let param = || format!("input[{i}].content");
    match content {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) => {
            for (j, part) in parts.iter().enumerate() {
                let p = || format!("input[{i}].content[{j}]");
                let Some(part) = part.as_object() else {
                    return Err(bad_type(&p(), "an object"));
                };
                let kind = str_field(part, "type").unwrap_or("");
                let ok = match kind {
                    "input_text" | "output_text" => part.get("text").is_some_and(Value::is_string),
                    "refusal" => part.get("refusal").is_some_and(Value::is_string),
                    "input_image" => match part.get("image_url") {
                        Some(Value::String(_)) => true,
                        _ => return Err(unsupported(p(), "an image without 'image_url'")),
                    },
                    "" => return Err(unsupported(p(), "a part without a type")),
                    other => return Err(unsupported(p(), &format!("an '{other}' part"))),
                };
                if !ok {
                    return Err(bad_type(&p(), "a part with its text"));
                }
            }
            Ok(())
        }
        _ => Err(bad_type(&param(), "a string or a list of parts")),
    }
}

fn check_output(i: usize, output: Option<&Value>) -> Result<(), Error> {
    match output {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts))
            if parts
                .iter()
                .all(|p| p.get("text").is_some_and(Value::is_string)) =>
        {
            Ok(())
        }
        _ => Err(bad_type(
            &format!("input[{i}].output"),
            "a string or a list of text parts",
        )),
    }
}

fn check_item(i: usize, item: &Value) -> Result<(), Error> {
    let param = || format!("input[{i}]");
    let Some(item) = item.as_object() else {
        return Err(bad_type(&param(), "an object"));
    };
    let Some(kind) = item_type(item) else {
        return Err(unsupported(param(), "an item without a type"));
    };
    let has = |k: &str| item.get(k).is_some_and(Value::is_string);
    let fields = |ks: &[&str]| -> Result<(), Error> {
        match ks.iter().find(|k| !has(k)) {
            Some(k) => Err(bad_type(&format!("input[{i}].{k}"), "a string")),
            None => Ok(()),
        }
    };
    match kind {
        "message" => {
            if !str_field(item, "role").is_some_and(|r| ROLES.contains(&r)) {
                return Err(Error::validation(
                    format!("input[{i}].role"),
                    "A message's 'role' must be user, assistant, system or developer.",
                ));
            }
            check_content(i, item.get("content"))
        }
        "function_call" => fields(&["call_id", "name", "arguments"]),
        "custom_tool_call" => fields(&["call_id", "name", "input"]),
        "function_call_output" | "custom_tool_call_output" => {
            fields(&["call_id"])?;
            check_output(i, item.get("output"))
        }
        "reasoning" => Ok(()),
        "item_reference" => Err(stored_state(param(), "An item reference")),
        other => Err(unsupported(param(), &format!("a '{other}' item"))),
    }
}

/// Whether a tool of this type goes upstream on the bridge (function and
/// custom tools); any other (built-in) tool is dropped.
pub fn is_passed_tool(tool: &Value) -> bool {
    matches!(
        tool.get("type").and_then(Value::as_str),
        Some("function" | "custom")
    )
}

/// How a dropped tool is named in `x-gatehouse-dropped-tools`.
fn dropped_name(tool: &Value) -> String {
    tool.get("name")
        .and_then(Value::as_str)
        .or_else(|| tool.get("type").and_then(Value::as_str))
        .unwrap_or("unknown")
        .to_string()
}

/// A field, what it must be, and the test of that.
type FieldCheck = (&'static str, &'static str, fn(&Value) -> bool);

/// The checks of the contract's "Request", in order: stored state first,
/// then `input` and its items, then the other fields the gateway reads.
/// Nothing goes upstream when one fails.
pub fn check(body: &Map<String, Value>) -> Result<(), Error> {
    for key in ["previous_response_id", "conversation"] {
        if !is_null_or(body.get(key), |_| false) {
            return Err(stored_state(key.to_string(), &format!("'{key}'")));
        }
    }
    match body.get("input") {
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                check_item(i, item)?;
            }
        }
        Some(Value::String(_) | Value::Array(_)) => {
            return Err(Error::validation("input", "'input' must not be empty."))
        }
        None | Some(Value::Null) => {
            return Err(Error::validation(
                "input",
                "'input' is required: a string, or a list of items (the whole conversation).",
            ))
        }
        Some(_) => return Err(bad_type("input", "a string or a list of items")),
    }
    let checks: [FieldCheck; 12] = [
        ("instructions", "a string", Value::is_string),
        ("stream", "a boolean", Value::is_boolean),
        ("tools", "a list of tools", |v| {
            v.as_array().is_some_and(|ts| {
                ts.iter().all(|t| {
                    t.get("type").is_some_and(Value::is_string)
                        && (!is_passed_tool(t) || t.get("name").is_some_and(Value::is_string))
                })
            })
        }),
        ("parallel_tool_calls", "a boolean", Value::is_boolean),
        ("max_output_tokens", "an integer of at least 1", |v| {
            v.as_u64().is_some_and(|n| n >= 1)
        }),
        ("temperature", "a number", Value::is_number),
        ("top_p", "a number", Value::is_number),
        ("reasoning", "an object", Value::is_object),
        ("text", "an object", Value::is_object),
        ("user", "a string", Value::is_string),
        ("safety_identifier", "a string", Value::is_string),
        ("store", "a boolean", Value::is_boolean),
    ];
    for (key, what, ok) in checks {
        if !is_null_or(body.get(key), ok) {
            return Err(bad_type(key, what));
        }
    }
    check_tool_choice(body)
}

/// `tool_choice`: `auto`, `none`, `required`, or `{"type": "function" |
/// "custom", "name"}` naming a function or custom tool of the request.
fn check_tool_choice(body: &Map<String, Value>) -> Result<(), Error> {
    let bad = |m: &str| Err(Error::validation("tool_choice", m.to_string()));
    match body.get("tool_choice") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(()),
        Some(Value::Object(o)) => {
            let kind = str_field(o, "type");
            let name = str_field(o, "name");
            let (Some("function" | "custom"), Some(name)) = (kind, name) else {
                return bad("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}; built-in tools are not passed on.");
            };
            let offered = body
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|t| is_passed_tool(t) && t.get("name").and_then(Value::as_str) == Some(name));
            if offered {
                Ok(())
            } else {
                bad("'tool_choice' names a tool that is not among the function and custom tools of 'tools'.")
            }
        }
        Some(_) => {
            bad("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}.")
        }
    }
}

/// Text of a message's content parts, when they are all text-like.
fn part_text(part: &Value) -> Option<&str> {
    match part.get("type").and_then(Value::as_str)? {
        "input_text" | "output_text" => part.get("text")?.as_str(),
        "refusal" => part.get("refusal")?.as_str(),
        _ => None,
    }
}

/// A Responses content in chat terms (see the contract's table).
fn chat_content(content: &Value) -> Value {
    let Some(parts) = content.as_array() else {
        return content.clone();
    };
    if parts.iter().all(|p| part_text(p).is_some()) {
        let texts: Vec<&str> = parts.iter().filter_map(part_text).collect();
        return Value::String(texts.join("\n"));
    }
    let list = parts
        .iter()
        .filter_map(|p| match part_text(p) {
            Some(t) => Some(json!({"type": "text", "text": t})),
            None => {
                let url = p.get("image_url")?.clone();
                let mut image = json!({"url": url});
                if let Some(d) = p.get("detail").filter(|d| d.is_string()) {
                    image["detail"] = d.clone();
                }
                Some(json!({"type": "image_url", "image_url": image}))
            }
        })
        .collect();
    Value::Array(list)
}

/// A tool output (string, or a list of text parts) as one string.
fn output_text(output: &Value) -> Value {
    match output {
        Value::Array(parts) => Value::String(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        v => v.clone(),
    }
}

/// The parameters schema a custom tool gets as a chat function.
pub(super) const CUSTOM_PARAMETERS: &str =
    r#"{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}"#;

fn custom_parameters() -> Value {
    serde_json::from_str(CUSTOM_PARAMETERS).unwrap_or_default()
}

/// `reasoning.effort` as chat's `reasoning_effort` (`none` is left out).
pub(super) fn reasoning_effort(reasoning: &Value) -> Option<&str> {
    reasoning
        .get("effort")
        .and_then(Value::as_str)
        .filter(|e| *e != "none")
}

/// `text.format` as chat's `response_format` (JSON schema or JSON object).
pub(super) fn response_format(text: &Value) -> Option<Value> {
    let format = text.get("format")?;
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let mut schema = Map::new();
            for k in ["name", "schema", "strict"] {
                if let Some(v) = format.get(k).filter(|v| !v.is_null()) {
                    schema.insert(k.into(), v.clone());
                }
            }
            Some(json!({"type": "json_schema", "json_schema": schema}))
        }
        Some("json_object") => Some(json!({"type": "json_object"})),
        _ => None,
    }
}

/// A function or custom tool in chat terms.
fn chat_tool(tool: &Map<String, Value>) -> Value {
    let mut f = Map::new();
    for k in ["name", "description"] {
        if let Some(v) = tool.get(k).filter(|v| !v.is_null()) {
            f.insert(k.into(), v.clone());
        }
    }
    if str_field(tool, "type") == Some("custom") {
        f.insert("parameters".into(), custom_parameters());
    } else {
        for k in ["parameters", "strict"] {
            if let Some(v) = tool.get(k).filter(|v| !v.is_null()) {
                f.insert(k.into(), v.clone());
            }
        }
    }
    json!({"type": "function", "function": f})
}

fn push_call(messages: &mut Vec<Value>, call: Value) {
    // Consecutive calls, and a call right after an assistant's text, join
    // that assistant message.
    if let Some(last) = messages.last_mut() {
        if last.get("role").and_then(Value::as_str) == Some("assistant") {
            match last.get_mut("tool_calls") {
                Some(Value::Array(calls)) => calls.push(call),
                _ => last["tool_calls"] = Value::Array(vec![call]),
            }
            return;
        }
    }
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
}

/// The chat messages of `input`.
fn chat_messages(input: &Value, messages: &mut Vec<Value>) {
    let items = match input {
        Value::String(s) => {
            messages.push(json!({"role": "user", "content": s}));
            return;
        }
        Value::Array(items) => items,
        _ => return,
    };
    for item in items.iter().filter_map(Value::as_object) {
        let call_id = item.get("call_id").cloned().unwrap_or(Value::Null);
        match item_type(item) {
            Some("message") => {
                let role = match str_field(item, "role") {
                    Some("system" | "developer") => "system",
                    Some(r) => r,
                    None => continue,
                };
                let content = item.get("content").map(chat_content).unwrap_or(Value::Null);
                messages.push(json!({"role": role, "content": content}));
            }
            Some("function_call") => {
                let call = json!({"id": call_id, "type": "function", "function": {
                    "name": item.get("name"), "arguments": item.get("arguments")}});
                push_call(messages, call);
            }
            Some("custom_tool_call") => {
                let input = item.get("input").cloned().unwrap_or(Value::Null);
                let arguments = json!({ "input": input }).to_string();
                let call = json!({"id": call_id, "type": "function", "function": {
                    "name": item.get("name"), "arguments": arguments}});
                push_call(messages, call);
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                let content = item.get("output").map(output_text).unwrap_or(Value::Null);
                messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
            }
            _ => {}
        }
    }
}

impl ResponsesRequest {
    /// A body that passed [`check`].
    pub fn new(body: Map<String, Value>) -> ResponsesRequest {
        ResponsesRequest {
            body,
            agent_instructions: None,
            notes: Vec::new(),
            removed: Vec::new(),
        }
    }

    /// Reads and checks a body.
    pub fn parse(body: Map<String, Value>) -> Result<ResponsesRequest, Error> {
        check(&body)?;
        Ok(ResponsesRequest::new(body))
    }

    /// Reads and checks a body for the agent route, which removes the
    /// tools that are neither function nor custom tools (and a
    /// `tool_choice` naming one) before anything else (see [`Self::removed`]).
    pub fn parse_for_agent(mut body: Map<String, Value>) -> Result<ResponsesRequest, Error> {
        let mut dropped = Vec::new();
        if let Some(Value::Array(tools)) = body.get_mut("tools") {
            dropped = tools
                .iter()
                .filter(|t| !is_passed_tool(t))
                .map(dropped_name)
                .collect();
            tools.retain(is_passed_tool);
        }
        if let Some(Value::Object(o)) = body.get("tool_choice") {
            if !matches!(
                o.get("type").and_then(Value::as_str),
                Some("function" | "custom")
            ) {
                body.remove("tool_choice");
            }
        }
        let mut request = ResponsesRequest::parse(body)?;
        request.removed = dropped;
        Ok(request)
    }

    /// The tools [`Self::parse_for_agent`] removed (their `name`, else their
    /// `type`), in offered order.
    pub fn removed(&self) -> &[String] {
        &self.removed
    }

    /// Characters of text of `instructions` and `input`, as
    /// [`text_chars`](crate::spend::budget::text_chars) counts them (a
    /// budget's reservation).
    pub fn text_chars(&self) -> usize {
        ["instructions", "input"]
            .iter()
            .filter_map(|k| self.body.get(*k))
            .map(crate::spend::budget::text_chars)
            .sum()
    }

    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The tools of the request that are neither function nor custom tools
    /// (their `name`, else their `type`), in offered order: the bridge and
    /// the agent route drop them.
    pub fn dropped_tools(&self) -> Vec<String> {
        self.tools()
            .filter(|t| !is_passed_tool(t))
            .map(dropped_name)
            .collect()
    }

    fn tools(&self) -> impl Iterator<Item = &Value> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    }

    /// The names of the request's custom tools (their calls come back as
    /// `custom_tool_call` items).
    pub fn custom_tools(&self) -> Vec<String> {
        self.tools()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("custom"))
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
            .collect()
    }

    /// Removes every tool that is not a function or custom tool (the agent
    /// route does, in both modes).
    pub fn drop_builtin_tools(&mut self) {
        if let Some(Value::Array(tools)) = self.body.get_mut("tools") {
            tools.retain(is_passed_tool);
        }
    }

    pub fn set_agent_instructions(&mut self, instructions: &str) {
        self.agent_instructions = Some(instructions.to_string());
    }

    pub fn push_note(&mut self, note: &str) {
        self.notes.push(note.to_string());
    }

    /// The system messages that go before the input: the agent's
    /// instructions, `instructions`, then the notes.
    fn system_texts(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.agent_instructions.iter().map(String::as_str).collect();
        if let Some(s) = self.body.get("instructions").and_then(Value::as_str) {
            out.push(s);
        }
        out.extend(self.notes.iter().map(String::as_str));
        out
    }

    /// The chat completions body of the bridge (contract, "Bridge: request
    /// → chat"); `model` is left for the relay to set.
    pub fn to_chat(&self) -> Map<String, Value> {
        let b = &self.body;
        let mut chat = Map::new();
        let mut messages: Vec<Value> = self
            .system_texts()
            .into_iter()
            .map(|s| json!({"role": "system", "content": s}))
            .collect();
        if let Some(input) = b.get("input") {
            chat_messages(input, &mut messages);
        }
        chat.insert("messages".into(), Value::Array(messages));
        let tools: Vec<Value> = self
            .tools()
            .filter(|t| is_passed_tool(t))
            .filter_map(Value::as_object)
            .map(chat_tool)
            .collect();
        if !tools.is_empty() {
            chat.insert("tools".into(), Value::Array(tools));
            match b.get("tool_choice") {
                Some(Value::String(s)) => {
                    chat.insert("tool_choice".into(), Value::String(s.clone()));
                }
                Some(Value::Object(o)) => {
                    chat.insert(
                        "tool_choice".into(),
                        json!({"type": "function", "function": {"name": o.get("name")}}),
                    );
                }
                _ => {}
            }
            if let Some(p) = b.get("parallel_tool_calls").filter(|v| v.is_boolean()) {
                chat.insert("parallel_tool_calls".into(), p.clone());
            }
        }
        if let Some(n) = b.get("max_output_tokens").filter(|v| !v.is_null()) {
            chat.insert("max_tokens".into(), n.clone());
        }
        for k in ["temperature", "top_p"] {
            if let Some(v) = b.get(k).filter(|v| !v.is_null()) {
                chat.insert(k.into(), v.clone());
            }
        }
        if let Some(effort) = b.get("reasoning").and_then(reasoning_effort) {
            chat.insert("reasoning_effort".into(), Value::String(effort.into()));
        }
        if let Some(format) = b.get("text").and_then(response_format) {
            chat.insert("response_format".into(), format);
        }
        let user = [b.get("user"), b.get("safety_identifier")]
            .into_iter()
            .flatten()
            .find(|v| v.is_string());
        if let Some(u) = user {
            chat.insert("user".into(), u.clone());
        }
        if self.is_stream() {
            chat.insert("stream".into(), Value::Bool(true));
            chat.insert("stream_options".into(), json!({"include_usage": true}));
        }
        chat
    }

    /// The native upstream's body: the client's, with what the agent turn
    /// put first as system messages at the front of `input`. `model` is left
    /// for the relay to set.
    pub fn to_native(&self) -> Map<String, Value> {
        let mut body = self.body.clone();
        let front: Vec<Value> = self
            .agent_instructions
            .iter()
            .chain(self.notes.iter())
            .map(|s| json!({"type": "message", "role": "system", "content": s}))
            .collect();
        if !front.is_empty() {
            let input = match body.remove("input") {
                Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            };
            let all: Vec<Value> = front.into_iter().chain(input).collect();
            body.insert("input".into(), Value::Array(all));
        }
        body
    }

    // --- What the agent turn edits (see `crate::agents::turn::TurnBody`).

    /// Keeps only the tools named in `keep` (and a `tool_choice` only when
    /// it names a kept tool).
    pub fn keep_tools(&mut self, keep: &[&str]) {
        let kept = |t: &Value| {
            t.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| keep.contains(&n))
        };
        if let Some(Value::Array(tools)) = self.body.get_mut("tools") {
            tools.retain(|t| is_passed_tool(t) && kept(t));
        }
        if let Some(Value::Object(o)) = self.body.get("tool_choice") {
            if !o
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| keep.contains(&n))
            {
                self.body.remove("tool_choice");
            }
        }
    }

    fn output_items_mut(&mut self) -> impl Iterator<Item = &mut Map<String, Value>> {
        let items = match self.body.get_mut("input") {
            Some(Value::Array(items)) => Some(items),
            _ => None,
        };
        items.into_iter().flatten().filter_map(|i| {
            let o = i.as_object_mut()?;
            matches!(
                o.get("type").and_then(Value::as_str),
                Some("function_call_output" | "custom_tool_call_output")
            )
            .then_some(o)
        })
    }

    /// The call ids the tool outputs answer, in order.
    pub fn answered_calls(&self) -> Vec<String> {
        self.body
            .get("input")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|i| {
                matches!(
                    i.get("type").and_then(Value::as_str),
                    Some("function_call_output" | "custom_tool_call_output")
                )
            })
            .filter_map(|i| i.get("call_id").and_then(Value::as_str).map(str::to_string))
            .collect()
    }

    /// Gives each tool output the fate of its call (see
    /// `crate::agents::turn::TurnBody::answer_calls`).
    pub fn answer_calls(
        &mut self,
        fate: &dyn Fn(&str) -> Result<Option<&'static str>, Error>,
    ) -> Result<(), Error> {
        for item in self.output_items_mut() {
            let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
            if let Some(text) = fate(id)? {
                item.insert("output".into(), Value::String(text.to_string()));
            }
        }
        Ok(())
    }

    /// Calls `scan` on every string that goes upstream as text:
    /// instructions, message text and parts, call arguments, custom inputs,
    /// outputs, tool descriptions and schemas.
    pub fn protect(&mut self, scan: &mut dyn FnMut(&mut String)) {
        if let Some(Value::String(s)) = self.body.get_mut("instructions") {
            scan(s);
        }
        if let Some(input) = self.body.get_mut("input") {
            match input {
                Value::String(s) => scan(s),
                Value::Array(items) => {
                    for item in items.iter_mut().filter_map(Value::as_object_mut) {
                        protect_item(item, scan);
                    }
                }
                _ => {}
            }
        }
        if let Some(Value::Array(tools)) = self.body.get_mut("tools") {
            for t in tools.iter_mut().filter_map(Value::as_object_mut) {
                for k in ["description", "parameters", "format"] {
                    if let Some(v) = t.get_mut(k) {
                        every_string(v, scan);
                    }
                }
            }
        }
    }
}

fn protect_item(item: &mut Map<String, Value>, scan: &mut dyn FnMut(&mut String)) {
    for k in ["arguments", "input", "output"] {
        if let Some(v) = item.get_mut(k) {
            every_string(v, scan);
        }
    }
    match item.get_mut("content") {
        Some(Value::String(s)) => scan(s),
        Some(Value::Array(parts)) => {
            for p in parts.iter_mut() {
                for k in ["text", "refusal"] {
                    if let Some(Value::String(s)) = p.get_mut(k) {
                        scan(s);
                    }
                }
            }
        }
        _ => {}
    }
}

fn every_string(v: &mut Value, scan: &mut dyn FnMut(&mut String)) {
    match v {
        Value::String(s) => scan(s),
        Value::Array(a) => a.iter_mut().for_each(|v| every_string(v, scan)),
        Value::Object(o) => o.values_mut().for_each(|v| every_string(v, scan)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn err(v: Value) -> (String, Option<String>) {
        let e = check(&body(v)).unwrap_err();
        (e.code.to_string(), e.param)
    }

    #[test]
    fn stored_state_is_refused_with_its_param() {
        for (v, p) in [
            (
                json!({"input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
            (
                json!({"input": "x", "conversation": "conv_1"}),
                "conversation",
            ),
            (
                json!({"input": [{"role": "user", "content": "x"}, {"type": "item_reference", "id": "msg_1"}]}),
                "input[1]",
            ),
        ] {
            assert_eq!(
                err(v),
                ("previous_response_unsupported".into(), Some(p.into()))
            );
        }
        assert!(check(&body(
            json!({"input": "x", "previous_response_id": null, "conversation": null})
        ))
        .is_ok());
    }

    #[test]
    fn unsupported_items_and_parts_name_their_place() {
        for (item, p) in [
            (json!({"type": "computer_call", "call_id": "c"}), "input[0]"),
            (json!({"type": "web_search_call"}), "input[0]"),
            (json!({"type": "nonsense"}), "input[0]"),
            (
                json!({"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_file", "file_id": "f"}]}),
                "input[0].content[1]",
            ),
            (
                json!({"role": "user", "content": [{"type": "input_audio"}]}),
                "input[0].content[0]",
            ),
            (
                json!({"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}),
                "input[0].content[0]",
            ),
        ] {
            assert_eq!(
                err(json!({"input": [item]})),
                ("unsupported_input".into(), Some(p.into()))
            );
        }
    }

    #[test]
    fn wrong_types_are_validation_errors_naming_the_field() {
        for (v, p) in [
            (json!({}), "input"),
            (json!({"input": ""}), "input"),
            (json!({"input": []}), "input"),
            (json!({"input": 3}), "input"),
            (json!({"input": "x", "stream": "yes"}), "stream"),
            (
                json!({"input": "x", "max_output_tokens": 0}),
                "max_output_tokens",
            ),
            (
                json!({"input": "x", "max_output_tokens": 1.5}),
                "max_output_tokens",
            ),
            (json!({"input": "x", "tools": {}}), "tools"),
            (
                json!({"input": "x", "tools": [{"type": "function"}]}),
                "tools",
            ),
            (json!({"input": "x", "instructions": 1}), "instructions"),
            (
                json!({"input": "x", "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (
                json!({"input": "x", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}),
                "tool_choice",
            ),
            (
                json!({"input": "x", "tool_choice": {"type": "function", "name": "absent"}}),
                "tool_choice",
            ),
            (
                json!({"input": [{"role": "robot", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}),
                "input[0].arguments",
            ),
        ] {
            assert_eq!(err(v), ("validation_error".into(), Some(p.into())));
        }
        assert!(check(&body(json!({"input": "x", "max_output_tokens": 1}))).is_ok());
    }

    #[test]
    fn codex_like_transcript_translates_to_chat() {
        let r = ResponsesRequest::parse(body(json!({
            "model": "m", "instructions": "be brief", "stream": true, "store": false,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
            "reasoning": {"effort": "high", "summary": "auto"}, "max_output_tokens": 50,
            "tool_choice": "auto", "parallel_tool_calls": true,
            "tools": [
                {"type": "function", "name": "exec_command", "description": "run", "parameters": {"type": "object"}},
                {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}},
                {"type": "web_search"}, {"type": "namespace", "name": "ns"}
            ],
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                {"type": "reasoning", "summary": [], "encrypted_content": "xx"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
                {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin"},
                {"type": "function_call_output", "call_id": "c1", "output": "files"},
                {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "done"}]},
                {"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}]}
            ]
        })))
        .unwrap();
        assert_eq!(r.dropped_tools(), vec!["web_search", "ns"]);
        assert_eq!(r.custom_tools(), vec!["apply_patch"]);
        let chat = Value::Object(r.to_chat());
        assert_eq!(
            chat,
            json!({
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "system", "content": "dev"},
                    {"role": "user", "content": "a\nb"},
                    {"role": "assistant", "content": "ok", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"}},
                        {"id": "c2", "type": "function", "function": {"name": "apply_patch", "arguments": "{\"input\":\"*** Begin\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "files"},
                    {"role": "tool", "tool_call_id": "c2", "content": "done"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}
                    ]}
                ],
                "tools": [
                    {"type": "function", "function": {"name": "exec_command", "description": "run", "parameters": {"type": "object"}}},
                    {"type": "function", "function": {"name": "apply_patch", "description": "patch", "parameters": custom_parameters()}}
                ],
                "tool_choice": "auto",
                "parallel_tool_calls": true,
                "max_tokens": 50,
                "reasoning_effort": "high",
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn bridge_options_map_to_chat_fields() {
        let r = ResponsesRequest::parse(body(json!({
            "input": "hi", "temperature": 0.5, "top_p": 0.9, "safety_identifier": "s",
            "reasoning": {"effort": "none"},
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}},
            "tools": [{"type": "web_search"}], "tool_choice": "required", "parallel_tool_calls": false
        })))
        .unwrap();
        assert_eq!(
            Value::Object(r.to_chat()),
            json!({
                "messages": [{"role": "user", "content": "hi"}],
                "temperature": 0.5, "top_p": 0.9, "user": "s",
                "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": true}}
            }),
            "no tool_choice nor parallel_tool_calls without a tool upstream; effort none not sent"
        );
        let r = ResponsesRequest::parse(body(json!({
            "input": "hi", "user": "u", "safety_identifier": "s", "text": {"format": {"type": "json_object"}},
            "tools": [{"type": "custom", "name": "p"}], "tool_choice": {"type": "custom", "name": "p"}
        })))
        .unwrap();
        let chat = r.to_chat();
        assert_eq!(chat["user"], "u");
        assert_eq!(chat["response_format"], json!({"type": "json_object"}));
        assert_eq!(
            chat["tool_choice"],
            json!({"type": "function", "function": {"name": "p"}})
        );
    }

    #[test]
    fn agent_edits_come_first_and_outputs_get_their_fate() {
        let mut r = ResponsesRequest::parse(body(json!({
            "instructions": "client", "input": [
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "secret"}
            ],
            "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}, {"type": "web_search"}],
            "tool_choice": {"type": "function", "name": "g"}
        })))
        .unwrap();
        r.set_agent_instructions("agent");
        r.push_note("note");
        r.keep_tools(&["f"]);
        assert_eq!(r.answered_calls(), vec!["c1"]);
        r.answer_calls(&|id| Ok((id == "c1").then_some("denied")))
            .unwrap();
        let chat = r.to_chat();
        let texts: Vec<&str> = chat["messages"].as_array().unwrap()[..3]
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["agent", "client", "note"]);
        assert_eq!(chat["messages"][4]["content"], "denied");
        assert_eq!(chat["tools"].as_array().unwrap().len(), 1);
        assert!(!chat.contains_key("tool_choice"));
        let native = r.to_native();
        assert_eq!(
            native["input"][0],
            json!({"type": "message", "role": "system", "content": "agent"})
        );
        assert_eq!(native["instructions"], "client");
    }

    #[test]
    fn protect_reaches_every_upstream_string() {
        let mut r = ResponsesRequest::parse(body(json!({
            "instructions": "i", "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "t"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "a"},
                {"type": "custom_tool_call", "call_id": "d", "name": "p", "input": "in"},
                {"type": "function_call_output", "call_id": "c", "output": "o"}
            ],
            "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"properties": {"x": {"description": "s"}}}}]
        })))
        .unwrap();
        let mut seen = vec![];
        r.protect(&mut |s| seen.push(s.clone()));
        for s in ["i", "t", "a", "in", "o", "d", "s"] {
            assert!(seen.contains(&s.to_string()), "{s} in {seen:?}");
        }
    }
}
