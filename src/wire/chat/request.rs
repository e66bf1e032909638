//! An agent chat body as the agent turn works on it ([`ChatRequest`]): read
//! once, its `tools` list kept as the client's text and each tool read for
//! its function name, its other fields kept as text too where no rule edits
//! inside them ([`RawFields`]); and the edits the turn makes (tools removed,
//! instructions put first, answered calls replaced) written back as bytes
//! for the upstream.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::Error;
use crate::wire::chat::raw_fields::{RawFields, ToolsMember};
pub use crate::wire::chat::tools::MAX_REQUEST_TOOLS;
use crate::wire::chat::tools::{
    remembered_list_in, KeptTools, KnownList, ListText, OfferedTools, ReadLists, ToolFault,
    READ_LISTS, TOOL_MAX_DEPTH,
};

/// A set of tool names, built per request: a fast hash (seeded per
/// process) rather than SipHash, for short names in small sets.
type Names<'a> = HashSet<&'a str, foldhash::fast::RandomState>;

/// An agent chat body as the handler works on it: every field but `tools` as
/// JSON values (or, in the usual case, as the client's text: see
/// [`RawFields`]), and a `tools` list as the client's JSON text, each tool
/// read for its function name. Building a tree of 20 tools' schemas and
/// writing it out again for the upstream was a fifth of agent chat's CPU,
/// and only each tool's `function.name` matters here. A `tools` that is not
/// a list stays among the fields (where [`ChatRequest::offered_tools`]
/// refuses it unless it is `null`).
#[derive(Debug)]
pub struct ChatRequest {
    fields: Fields,
    tools: Option<KeptTools>,
}

/// A body's fields but a `tools` list.
#[derive(Debug)]
enum Fields {
    Tree(Map<String, Value>),
    /// Read without a tree (see [`ChatRequest::parse`]).
    Text(RawFields),
}

impl Default for Fields {
    fn default() -> Self {
        Fields::Tree(Map::new())
    }
}

impl Fields {
    fn contains_key(&self, key: &str) -> bool {
        match self {
            Fields::Tree(fields) => fields.contains_key(key),
            Fields::Text(raw) => raw.contains_key(key),
        }
    }

    fn remove(&mut self, key: &str) {
        match self {
            Fields::Tree(fields) => {
                fields.remove(key);
            }
            Fields::Text(raw) => raw.remove(key),
        }
    }

    /// `tool_choice` as the rules read it.
    fn tool_choice(&self) -> Option<&Value> {
        match self {
            Fields::Tree(fields) => fields.get("tool_choice"),
            Fields::Text(raw) => raw.tool_choice.as_ref(),
        }
    }
}

/// What goes upstream of an agent chat body.
pub enum Upstream {
    /// The fields as a tree, and the kept tools.
    Tree(Map<String, Value>, Option<KeptTools>),
    /// The body after its model's name (see [`RawFields::after_model`]).
    Text {
        after_model: bytes::Bytes,
        stream: bool,
        prompt_chars: usize,
    },
}

impl<'de> Deserialize<'de> for ChatRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ReadFields(None))
    }
}

/// Reads an agent chat body's fields into a tree; with a list found
/// remembered (see [`ChatRequest::parse`]), the `tools` value is the `0` put
/// in its place.
struct ReadFields(Option<KeptTools>);

impl<'de> Visitor<'de> for ReadFields {
    type Value = ChatRequest;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<ChatRequest, A::Error> {
        let (mut fields, mut tools) = (Map::new(), None);
        // A repeated key: the last one counts, as for a JSON value.
        while let Some(key) = map.next_key::<String>()? {
            if key == "tools" {
                if let Some(known) = self.0.take() {
                    if map.next_value::<u8>()? != 0 {
                        return Err(de::Error::custom("not the list's place"));
                    }
                    tools = Some(known);
                    continue;
                }
                let text: Box<RawValue> = map.next_value()?;
                if text.get().starts_with('[') {
                    fields.remove("tools");
                    tools = Some(KeptTools::new(text, true).map_err(de::Error::custom)?);
                } else {
                    tools = None;
                    let v = serde_json::from_str(text.get()).map_err(de::Error::custom)?;
                    fields.insert(key, v);
                }
            } else {
                fields.insert(key, map.next_value()?);
            }
        }
        Ok(ChatRequest {
            fields: Fields::Tree(fields),
            tools,
        })
    }
}

impl ChatRequest {
    /// Parses an agent chat body. An app sends the same `tools` list with
    /// every turn: when the body's list is one remembered (byte for byte),
    /// it is not read again (checking it as JSON was 43 % of the body's
    /// parse). The rest of the body, with a `0` in the list's place, is
    /// parsed as usual; anything else, or any failure, takes the whole
    /// body through [`parse_json`](crate::wire::json::parse_json), so answers and
    /// errors are the same either way.
    ///
    /// With `keep_text` (no rule will edit inside the fields for sure: PII
    /// protection is off), the fields are kept as the client's text when
    /// [`RawFields::read`] takes them; a rule that needs them as a tree after
    /// all gets one (see [`ChatRequest::tree`]).
    #[inline(never)]
    pub fn parse(body: &bytes::Bytes, keep_text: bool) -> Result<ChatRequest, Error> {
        match ChatRequest::parse_remembered(&READ_LISTS, body, keep_text) {
            Some(req) => Ok(req),
            None => crate::wire::json::parse_json(body),
        }
    }

    fn parse_remembered(
        lists: &parking_lot::RwLock<ReadLists>,
        body: &bytes::Bytes,
        keep_text: bool,
    ) -> Option<ChatRequest> {
        let found = remembered_list_in(lists, body);
        if found.is_none() && !keep_text {
            return None;
        }
        let (text, known) = match found {
            Some((at, known)) => {
                let after = body.get(at + known.0.len()..)?;
                let mut rest = Vec::with_capacity(at + 1 + after.len());
                rest.extend_from_slice(body.get(..at)?);
                rest.push(b'0');
                rest.extend_from_slice(after);
                (bytes::Bytes::from(rest), Some(known))
            }
            None => (body.clone(), None),
        };
        let remembered = |(text, read): KnownList| KeptTools::of(ListText::Remembered(text), read);
        if keep_text {
            if let Ok((fields, tools)) = RawFields::read(&text, known.is_some()) {
                let tools = match tools {
                    ToolsMember::None => None,
                    ToolsMember::Remembered => Some(remembered(known?)),
                    ToolsMember::List(list) => Some(KeptTools::new(list.to_owned(), true).ok()?),
                };
                return Some(ChatRequest {
                    fields: Fields::Text(fields),
                    tools,
                });
            }
        }
        let mut de = serde_json::Deserializer::from_slice(&text);
        let req = de
            .deserialize_map(ReadFields(Some(remembered(known?))))
            .ok()?;
        de.end().ok()?;
        // The scan found one `tools` key and no escaped key, so the `0` was
        // its value and the list is in. (Had it missed a later `tools`, that
        // one replaced the list, as in a whole read: the last key counts.)
        req.tools.is_some().then_some(req)
    }

    /// The fields as a tree, unless they are kept as text.
    pub fn fields(&self) -> Option<&Map<String, Value>> {
        match &self.fields {
            Fields::Tree(fields) => Some(fields),
            Fields::Text(_) => None,
        }
    }

    /// The fields as a tree, read into one if they were kept as text.
    pub fn tree(&mut self) -> Result<&mut Map<String, Value>, Error> {
        if let Fields::Text(_) = self.fields {
            if let Fields::Text(raw) = std::mem::take(&mut self.fields) {
                // Text that `RawFields::read` took reads as a tree.
                let (fields, first) = raw.into_tree().map_err(Error::internal)?;
                self.fields = Fields::Tree(fields);
                if let Some(instructions) = first {
                    self.put_instructions(&instructions);
                }
            }
        }
        match &mut self.fields {
            Fields::Tree(fields) => Ok(fields),
            Fields::Text(_) => Err(Error::internal("the fields were not read into a tree")),
        }
    }

    /// Refuses what [`refuse_legacy_functions`] refuses (fields kept as
    /// text have none of it: see [`RawFields::read`]).
    pub fn refuse_legacy_functions(&self) -> Result<(), Error> {
        self.fields().map_or(Ok(()), refuse_legacy_functions)
    }

    /// Puts the agent's instructions first, as a system message.
    pub fn put_instructions(&mut self, instructions: &str) {
        match &mut self.fields {
            Fields::Tree(fields) => {
                if let Some(Value::Array(messages)) = fields.get_mut("messages") {
                    messages.insert(
                        0,
                        serde_json::json!({"role": "system", "content": instructions}),
                    );
                }
            }
            Fields::Text(raw) => raw.put_first(instructions),
        }
    }

    /// The `tool_call_id`s that `role: "tool"` messages answer.
    pub fn answered_calls(&self) -> Vec<String> {
        match &self.fields {
            Fields::Tree(fields) => crate::wire::chat::answered_calls(fields),
            Fields::Text(raw) => raw.answered.clone(),
        }
    }

    /// Gives each answered call its fate (see
    /// [`answer_calls`](crate::wire::chat::answer_calls)); fields kept as
    /// text stay so when every answered call is kept as it is.
    pub fn answer_calls(
        &mut self,
        fate: impl Fn(&str) -> Result<Option<&'static str>, Error>,
    ) -> Result<(), Error> {
        if let Fields::Text(raw) = &self.fields {
            let mut changes = false;
            for id in &raw.answered {
                changes |= fate(id)?.is_some();
            }
            if !changes {
                return Ok(());
            }
        }
        crate::wire::chat::answer_calls(self.tree()?, fate)
    }

    /// Whether the client asked for a stream.
    /// The prompt's characters and the body's maximum completion, for a
    /// budget's reservation.
    pub fn reserve_figures(&self) -> (usize, Option<u64>) {
        match &self.fields {
            Fields::Tree(fields) => (
                crate::wire::chat::prompt_chars(fields),
                crate::wire::chat::body::max_completion(fields),
            ),
            Fields::Text(raw) => {
                let whole = |k: &str| crate::spend::budget::whole_text(raw.get(k));
                (
                    raw.prompt_chars,
                    whole("max_completion_tokens").or(whole("max_tokens")),
                )
            }
        }
    }

    pub fn is_stream(&self) -> bool {
        match &self.fields {
            Fields::Tree(fields) => fields.get("stream") == Some(&Value::Bool(true)),
            Fields::Text(raw) => raw.stream,
        }
    }

    fn has_field(&self, key: &str) -> bool {
        self.fields.contains_key(key)
    }

    /// The function names of the `tools` offered, in order, checked before
    /// anything else happens: at most [`MAX_REQUEST_TOOLS`] (400
    /// `too_many_tools`), each an object whose `function` object has a `name`
    /// by the tool-name rule (400 `validation_error`), so a refused list
    /// records nothing and costs nothing. A tool object or function object
    /// that repeats the key the rules read is refused too: the upstream might
    /// read the other one.
    pub fn offered_tools(&self) -> Result<OfferedTools, Error> {
        let Some(tools) = &self.tools else {
            // A `tools` among fields kept as text is `null` (see `RawFields::read`).
            let refused = self
                .fields()
                .is_some_and(|f| !matches!(f.get("tools"), None | Some(Value::Null)));
            return if refused {
                Err(Error::validation("tools", "'tools' must be a list."))
            } else {
                Ok(OfferedTools::default())
            };
        };
        if tools.read.len > MAX_REQUEST_TOOLS {
            return Err(Error::bad_request(
                "too_many_tools",
                format!(
                    "A request may offer at most {MAX_REQUEST_TOOLS} tools; it offered {}.",
                    tools.read.len
                ),
            )
            .with_param("tools"));
        }
        for (i, (_, t)) in tools.kept().enumerate() {
            if let Err(fault) = &t.name {
                let message = match fault {
                    ToolFault::Name => format!(
                        "tools[{i}].function.name must be 1 to 64 of letters, digits, _ and -."
                    ),
                    ToolFault::NotFunction => format!(
                        "tools[{i}].type must be \"function\": tool rules apply to function tools."
                    ),
                    ToolFault::TooDeep => {
                        format!("tools[{i}] nests more than {TOOL_MAX_DEPTH} levels deep.")
                    }
                };
                return Err(Error::validation("tools", message));
            }
        }
        Ok(OfferedTools {
            read: Some(Arc::clone(&tools.read)),
            keep: tools.keep.clone(),
        })
    }

    /// Removes every tool not in `keep`; drops `tool_choice` when it names a
    /// removed tool (or requires a tool when none is left), and `tools` and
    /// `parallel_tool_calls` when nothing is left.
    pub fn apply<S: AsRef<str>>(&mut self, keep: &[S]) {
        let keep: Names = keep.iter().map(AsRef::as_ref).collect();
        let mut now_empty = false;
        if let Some(tools) = &mut self.tools {
            for (k, t) in tools.keep.iter_mut().zip(&tools.read.tools) {
                *k = *k && t.name.as_deref().is_ok_and(|n| keep.contains(n));
            }
            now_empty = tools.is_empty();
        }
        if now_empty {
            self.tools = None;
        }
        if now_empty {
            self.fields.remove("parallel_tool_calls");
        }
        if drops_choice(self.fields.tool_choice(), &keep, now_empty) {
            self.fields.remove("tool_choice");
        }
    }

    /// Whether the body offers tools or names a tool choice.
    pub fn has_tool_fields(&self) -> bool {
        self.tools.is_some() || self.has_field("tools") || self.has_field("tool_choice")
    }

    /// Runs `f` over the fields with the `tools` list among them as values
    /// (for a pass that walks every field: PII protection), then keeps the
    /// tools as text again.
    pub fn with_tools_as_values(
        &mut self,
        f: impl FnOnce(&mut Map<String, Value>),
    ) -> Result<(), Error> {
        let tools = self.tools.take();
        let fields = self.tree()?;
        if let Some(tools) = tools {
            // Kept text is valid JSON, but may hold what a JSON value cannot
            // (a lone surrogate escape, a number out of range).
            let values = tools
                .kept()
                .enumerate()
                .map(|(i, (text, _))| {
                    serde_json::from_str(text).map_err(|e| {
                        Error::validation(
                            "tools",
                            format!("tools[{i}] cannot be read for PII protection: {e}."),
                        )
                    })
                })
                .collect::<Result<Vec<Value>, Error>>()?;
            fields.insert("tools".into(), Value::Array(values));
        }
        f(fields);
        if let Some(list @ Value::Array(_)) = fields.get("tools") {
            // Not remembered: protected text differs from turn to turn.
            let tools = serde_json::value::to_raw_value(list)
                .and_then(|text| KeptTools::new(text, false))
                .map_err(Error::internal)?;
            fields.remove("tools");
            self.tools = Some(tools);
        }
        Ok(())
    }

    /// The kept tools of a `tools` list, each as JSON text, when it is kept so.
    pub fn raw_tools(&self) -> Option<Vec<&str>> {
        self.tools.as_ref().map(KeptTools::texts)
    }

    /// What goes upstream: the fields, and a `tools` list's kept tools.
    pub fn into_upstream(self) -> Upstream {
        match self.fields {
            Fields::Tree(fields) => Upstream::Tree(fields, self.tools),
            Fields::Text(raw) => Upstream::Text {
                after_model: raw.after_model(self.tools.as_ref().map(KeptTools::texts).as_deref()),
                stream: raw.stream,
                prompt_chars: raw.prompt_chars,
            },
        }
    }
}

/// Whether a `tool_choice` goes: any, when no tool is left; one naming a
/// tool that does not go upstream.
fn drops_choice(choice: Option<&Value>, keep: &Names, now_empty: bool) -> bool {
    match choice {
        None => false,
        Some(_) if now_empty => true,
        Some(choice) => choice
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|n| !keep.contains(n)),
    }
}

/// Refuses the legacy `functions` / `function_call` fields and `function`
/// messages: they would bypass tool modes, holding and approvals.
pub fn refuse_legacy_functions(body: &Map<String, Value>) -> Result<(), Error> {
    const ADVICE: &str = "use tools and tool_choice";
    for field in ["functions", "function_call"] {
        if body.contains_key(field) {
            return Err(Error::validation(
                field,
                format!("'{field}' is not accepted on agent chat: {ADVICE}."),
            ));
        }
    }
    let function_message = body
        .get("messages")
        .and_then(Value::as_array)
        .is_some_and(|m| {
            m.iter()
                .any(|m| m.get("role").and_then(Value::as_str) == Some("function"))
        });
    if function_message {
        return Err(Error::validation(
            "messages",
            format!("Messages with role 'function' are not accepted on agent chat: {ADVICE}."),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::chat::tools::*;
    use bytes::Bytes;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn strings(offered: OfferedTools) -> Vec<String> {
        offered.names().iter().map(|n| n.to_string()).collect()
    }

    /// `body` read with `lists` remembered, its fields as a tree.
    fn read_remembered(lists: &parking_lot::RwLock<ReadLists>, body: &[u8]) -> Option<ChatRequest> {
        ChatRequest::parse_remembered(lists, &Bytes::copy_from_slice(body), false)
    }

    /// A body read whole: its fields, and the tools kept as text.
    fn parts(req: ChatRequest) -> (Map<String, Value>, Option<KeptTools>) {
        match req.into_upstream() {
            Upstream::Tree(fields, tools) => (fields, tools),
            Upstream::Text { .. } => panic!("read whole: a tree"),
        }
    }

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    /// A request body as the handler parses it.
    fn req(v: Value) -> ChatRequest {
        serde_json::from_str(&v.to_string()).unwrap()
    }

    fn tools(n: usize) -> Value {
        Value::Array(
            (0..n)
                .map(|i| serde_json::json!({"type": "function", "function": {"name": format!("t{i}")}}))
                .collect(),
        )
    }

    #[test]
    fn a_request_may_offer_up_to_128_tools_and_no_more() {
        let at = req(serde_json::json!({"tools": tools(128)}))
            .offered_tools()
            .map(strings)
            .unwrap();
        assert_eq!(at.len(), 128);
        let over = req(serde_json::json!({"tools": tools(129)}))
            .offered_tools()
            .unwrap_err();
        assert_eq!(
            (over.code.as_ref(), over.param.as_deref()),
            ("too_many_tools", Some("tools"))
        );
        assert_eq!(over.status(), 400);
    }

    #[test]
    fn tool_names_follow_the_name_rule() {
        for bad in ["", "has space", "<script>", &"x".repeat(65)] {
            let b = req(
                serde_json::json!({"tools": [{"type": "function", "function": {"name": bad}}]}),
            );
            let e = b.offered_tools().unwrap_err();
            assert_eq!(
                (e.code.as_ref(), e.param.as_deref()),
                ("validation_error", Some("tools")),
                "{bad}"
            );
        }
        let nameless = req(serde_json::json!({"tools": [{"type": "function"}]}));
        assert!(nameless.offered_tools().is_err());
        let ok = req(
            serde_json::json!({"tools": [{"type": "function", "function": {"name": "get_weather-2"}}]}),
        );
        assert_eq!(
            ok.offered_tools().map(strings).unwrap(),
            vec!["get_weather-2".to_string()]
        );
    }

    #[test]
    fn legacy_function_fields_and_messages_are_refused() {
        let e = refuse_legacy_functions(&body(serde_json::json!({"functions": []}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("functions"));
        assert!(e.message.contains("use tools and tool_choice"));
        let e = refuse_legacy_functions(&body(serde_json::json!({"function_call": "auto"})))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("function_call"));
        let e = refuse_legacy_functions(&body(
            serde_json::json!({"messages": [{"role": "function", "name": "f", "content": "x"}]}),
        ))
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert!(refuse_legacy_functions(&body(
            serde_json::json!({"messages": [{"role": "user", "content": "x"}]})
        ))
        .is_ok());
    }
    use serde_json::json;

    #[test]
    fn apply_removes_tools_and_a_tool_choice_naming_a_removed_tool() {
        let mut body = req(json!({"tools": [
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "b"}}
        ], "tool_choice": {"type": "function", "function": {"name": "b"}}}));
        body.apply(&names(&["a"]));
        assert_eq!(body.offered_tools().map(strings).unwrap(), names(&["a"]));
        assert!(!body.fields().unwrap().contains_key("tool_choice"));
        let mut body = req(
            json!({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "required", "parallel_tool_calls": true}),
        );
        body.apply::<String>(&[]);
        let (fields, tools) = parts(body);
        assert!(tools.is_none());
        assert!(
            !fields.contains_key("tools")
                && !fields.contains_key("tool_choice")
                && !fields.contains_key("parallel_tool_calls")
        );
        let mut body = req(
            json!({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "a"}}}),
        );
        body.apply(&names(&["a"]));
        assert!(body.fields().unwrap().contains_key("tool_choice"));
    }

    #[test]
    fn kept_tools_go_on_as_the_client_wrote_them() {
        let a = r#"{"type":"function","function":{"name":"a","description":"d\u00e9","parameters":{"type":"object","properties":{"p":{"type":"number","default":1.50}}}}}"#;
        let text = format!(
            r#"{{"model":"m","tools":[ {a} ,{{"type":"function","function":{{"name":"b"}}}}],"messages":[]}}"#
        );
        let mut body: ChatRequest = serde_json::from_str(&text).unwrap();
        assert!(!body.fields().unwrap().contains_key("tools"));
        body.apply(&names(&["a"]));
        let (_, tools) = parts(body);
        let tools = tools.unwrap();
        assert_eq!(tools.texts(), [a]);
    }

    #[test]
    fn a_tool_that_is_not_an_object_or_repeats_a_read_key_is_refused() {
        for tools in [
            r#"[["function", {"name": "a"}]]"#,
            r#"[{"function": ["a"]}]"#,
            r#"[{"function": {"name": "a", "name": "held_tool"}}]"#,
            r#"[{"function": {"name": "a"}, "function": {"name": "held_tool"}}]"#,
            r#"[{"function": {"name": ["a"]}}]"#,
            r#"[{"function": null}]"#,
        ] {
            let body: ChatRequest =
                serde_json::from_str(&format!(r#"{{"tools": {tools}}}"#)).unwrap();
            let e = body.offered_tools().unwrap_err();
            assert_eq!(
                (e.code.as_ref(), e.param.as_deref()),
                ("validation_error", Some("tools")),
                "{tools}"
            );
        }
        // An escaped key is the key it spells.
        let body: ChatRequest =
            serde_json::from_str(r#"{"tools": [{"f\u0075nction": {"n\u0061me": "a"}}]}"#).unwrap();
        assert_eq!(body.offered_tools().map(strings).unwrap(), names(&["a"]));
    }

    #[test]
    fn the_one_pass_scan_reads_every_tool_as_serde_does() {
        let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
        let cases = [
            r#"{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}"#.to_string(),
            r#"{"function": {"description": "x\"}{[", "name": "a-b_1"}}"#.to_string(),
            r#"  { "function" : { "name" : "a" } , "type" : "function" }  "#.to_string(),
            r#"{"type": "custom", "function": {"name": "a"}}"#.to_string(),
            r#"{"type": "function", "type": "function", "function": {"name": "a"}}"#.to_string(),
            r#"{"type": 1, "function": {"name": "a"}}"#.to_string(),
            r#"{"type": null, "function": {"name": "a"}}"#.to_string(),
            r#"{"function": {"name": "a"}, "function": {"name": "b"}}"#.to_string(),
            r#"{"function": {"name": "a", "name": "b"}}"#.to_string(),
            r#"{"function": {"name": 7}}"#.to_string(),
            r#"{"function": {"name": ""}}"#.to_string(),
            r#"{"function": {"name": "has space"}}"#.to_string(),
            r#"{"function": {}}"#.to_string(),
            r#"{"function": [{"name": "a"}]}"#.to_string(),
            r#"{"function": "a"}"#.to_string(),
            r#"{"name": "a"}"#.to_string(),
            r#"{}"#.to_string(),
            r#"["function", {"name": "a"}]"#.to_string(),
            r#""a""#.to_string(),
            r#"-1.5e3"#.to_string(),
            r#"{"function": {"parameters": {"name": "inner"}, "name": "outer"}}"#.to_string(),
            r#"{"x": {"function": {"name": "inner"}}, "function": {"name": "outer"}}"#.to_string(),
            r#"{"function": {"name": "a", "strict": true, "n": null, "k": [1, -2.5, {"name": "z"}]}}"#.to_string(),
            r#"{"f\u0075nction": {"name": "a"}}"#.to_string(),
            r#"{"function": {"n\u0061me": "a"}}"#.to_string(),
            r#"{"function": {"name": "\u0061"}}"#.to_string(),
            r#"{"type": "f\u0075nction", "function": {"name": "a"}}"#.to_string(),
            r#"{"function": {"name": "a", "description": "\u00e9\\"}}"#.to_string(),
            r#"{"function": {"name": "é"}}"#.to_string(),
            format!(r#"{{"function": {{"name": "a"}}, "x": {}}}"#, deep(TOOL_MAX_DEPTH - 1)),
            format!(r#"{{"function": {{"name": "a"}}, "x": {}}}"#, deep(TOOL_MAX_DEPTH)),
            format!(r#"{{"function": {{"name": "a", "name": "b"}}, "x": {}}}"#, deep(200)),
            format!(r#"{{"x": "{}", "function": {{"name": "a"}}}}"#, "[".repeat(300)),
            deep(TOOL_MAX_DEPTH + 3),
        ];
        for text in &cases {
            assert_eq!(read_tool(text), serde_read(text), "{text}");
            assert!(scan_agrees_with_serde(text), "{text}");
        }
        // The scan itself settles the common cases and leaves escapes to serde.
        assert_eq!(scan_tool(&cases[0]), Some(Ok("read_file".into())));
        assert_eq!(scan_tool(&cases[3]), Some(Err(ToolFault::NotFunction)));
        assert_eq!(scan_tool(&cases[8]), Some(Err(ToolFault::Name)));
        assert_eq!(scan_tool(&cases[30]), Some(Err(ToolFault::TooDeep)));
        assert_eq!(scan_tool(&cases[23]), None);
        assert_eq!(read_tool(&cases[25]), Ok("a".into()));
    }

    #[test]
    fn a_tool_may_nest_as_deep_as_a_body_parsed_whole_allowed_and_no_deeper() {
        let body = |depth: usize| {
            // The tool object is level 1; each `{"a":...}` adds one.
            let inner = "{\"a\":".repeat(depth - 2) + "1" + &"}".repeat(depth - 2);
            format!(r#"{{"tools": [{{"function": {{"name": "t", "parameters": {inner}}}}}]}}"#)
        };
        for depth in [
            3,
            TOOL_MAX_DEPTH - 1,
            TOOL_MAX_DEPTH,
            TOOL_MAX_DEPTH + 1,
            5000,
        ] {
            let text = body(depth);
            let req: ChatRequest = serde_json::from_str(&text).unwrap();
            let whole = serde_json::from_str::<Map<String, Value>>(&text).is_ok();
            assert_eq!(
                req.offered_tools().is_ok(),
                depth <= TOOL_MAX_DEPTH,
                "{depth}"
            );
            if depth < 1000 {
                assert_eq!(whole, depth <= TOOL_MAX_DEPTH, "{depth}");
            }
        }
        let e = serde_json::from_str::<ChatRequest>(&body(TOOL_MAX_DEPTH + 1))
            .unwrap()
            .offered_tools()
            .unwrap_err();
        assert_eq!(e.message, "tools[0] nests more than 125 levels deep.");
        // Brackets inside strings do not count.
        let text = format!(
            r#"{{"tools": [{{"function": {{"name": "t", "description": "{}\"[{{"}}}}]}}"#,
            "[{".repeat(300)
        );
        let req: ChatRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(req.offered_tools().map(strings).unwrap(), names(&["t"]));
    }

    #[test]
    fn a_kept_tool_holding_what_no_json_value_can_passes_unless_read_for_pii() {
        let text = r#"{"tools": [{"function": {"name": "a", "description": "\ud800", "parameters": {"default": 1e400}}}]}"#;
        assert!(serde_json::from_str::<Map<String, Value>>(text).is_err());
        let mut req: ChatRequest = serde_json::from_str(text).unwrap();
        assert_eq!(req.offered_tools().map(strings).unwrap(), names(&["a"]));
        let e = req.with_tools_as_values(|_| {}).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"));
        assert!(
            e.message
                .starts_with("tools[0] cannot be read for PII protection: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn only_function_tools_are_offered() {
        let e = req(json!({"tools": [
            {"type": "function", "function": {"name": "a"}},
            {"type": "custom", "custom": {"name": "held_tool"}, "function": {"name": "ok"}}
        ]}))
        .offered_tools()
        .unwrap_err();
        assert_eq!(
            e.message,
            "tools[1].type must be \"function\": tool rules apply to function tools."
        );
        // Without a type a tool counts as a function tool; a repeated type is refused.
        assert_eq!(
            req(json!({"tools": [{"function": {"name": "a"}}]}))
                .offered_tools()
                .map(strings)
                .unwrap(),
            names(&["a"])
        );
        let body: ChatRequest = serde_json::from_str(
            r#"{"tools": [{"type": "function", "type": "custom", "function": {"name": "a"}}]}"#,
        )
        .unwrap();
        assert!(body.offered_tools().is_err());
        assert!(
            req(json!({"tools": [{"type": 1, "function": {"name": "a"}}]}))
                .offered_tools()
                .is_err()
        );
    }

    #[test]
    fn tools_that_are_not_a_list_stay_fields_and_null_offers_none() {
        let body = req(json!({"tools": null, "messages": []}));
        assert_eq!(
            body.offered_tools().map(strings).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(body.fields().unwrap().get("tools"), Some(&Value::Null));
        let e = req(json!({"tools": {"name": "a"}}))
            .offered_tools()
            .unwrap_err();
        assert_eq!(e.message, "'tools' must be a list.");
        // The last of repeated keys counts, as for any JSON value.
        let body: ChatRequest =
            serde_json::from_str(r#"{"tools": [{"function": {"name": "a"}}], "tools": "x"}"#)
                .unwrap();
        assert!(body.offered_tools().is_err());
        let body: ChatRequest =
            serde_json::from_str(r#"{"tools": "x", "tools": [{"function": {"name": "a"}}]}"#)
                .unwrap();
        assert_eq!(body.offered_tools().map(strings).unwrap(), names(&["a"]));
        assert!(!body.fields().unwrap().contains_key("tools"));
    }

    #[test]
    fn a_pass_over_every_field_sees_the_tools_as_values() {
        let mut body = req(
            json!({"tools": [{"type": "function", "function": {"name": "a", "description": "x"}}]}),
        );
        body.with_tools_as_values(|fields| {
            assert_eq!(fields["tools"][0]["function"]["name"], json!("a"));
            fields["tools"][0]["function"]["description"] = json!("y");
        })
        .unwrap();
        assert!(!body.fields().unwrap().contains_key("tools"));
        assert_eq!(body.offered_tools().map(strings).unwrap(), names(&["a"]));
        assert!(body.has_tool_fields());
        let (_, tools) = parts(body);
        assert_eq!(
            serde_json::from_str::<Value>(tools.unwrap().texts()[0]).unwrap(),
            json!({"type": "function", "function": {"name": "a", "description": "y"}})
        );
    }

    #[test]
    fn a_list_sent_again_is_read_once_and_each_request_keeps_its_own_choice() {
        let text = r#"{"tools": [{"type": "function", "function": {"name": "again_a"}},
                                 {"type": "function", "function": {"name": "again_b"}}]}"#;
        let mut first: ChatRequest = serde_json::from_str(text).unwrap();
        let second: ChatRequest = serde_json::from_str(text).unwrap();
        let (a, b) = (
            first.tools.as_ref().unwrap(),
            second.tools.as_ref().unwrap(),
        );
        assert!(Arc::ptr_eq(&a.read, &b.read), "read again");
        first.apply(&names(&["again_a"]));
        assert_eq!(
            first.offered_tools().map(strings).unwrap(),
            names(&["again_a"])
        );
        assert_eq!(
            second.offered_tools().map(strings).unwrap(),
            names(&["again_a", "again_b"])
        );
    }

    #[test]
    fn a_list_that_differs_by_one_byte_is_read_for_itself() {
        let list = |name: &str| {
            format!(
                r#"{{"tools": [{{"function": {{"name": "same"}}}}, {{"function": {{"name": "{name}"}}}}]}}"#
            )
        };
        let one: ChatRequest = serde_json::from_str(&list("tool_b")).unwrap();
        let two: ChatRequest = serde_json::from_str(&list("tool_c")).unwrap();
        assert_eq!(
            one.offered_tools().map(strings).unwrap(),
            names(&["same", "tool_b"])
        );
        assert_eq!(
            two.offered_tools().map(strings).unwrap(),
            names(&["same", "tool_c"])
        );
        // A refused tool is refused from the remembered reading too.
        for _ in 0..2 {
            let bad: ChatRequest = serde_json::from_str(&list("not a name")).unwrap();
            assert_eq!(bad.offered_tools().unwrap_err().code, "validation_error");
        }
    }

    #[test]
    fn remembered_lists_stay_within_their_bound() {
        // Its own cache: filling the process's would empty it under other tests.
        let lists = parking_lot::RwLock::new(ReadLists::default());
        let tool = format!(
            r#"{{"function": {{"name": "t", "description": "{}"}}}}"#,
            "x".repeat(4000)
        );
        for i in 0..(2 * READ_LISTS_BYTES / 4000) {
            let text = format!(r#"[{tool}, {{"function": {{"name": "n{i}"}}}}]"#);
            let read = remembered(&lists, &text).unwrap();
            assert_eq!(read.tools[1].name.as_deref(), Ok(format!("n{i}").as_str()));
            assert!(lists.read().bytes <= READ_LISTS_BYTES);
        }
        // Many small lists count by what their entries take, not only their text.
        for i in 0..(READ_LISTS_BYTES / 256 + 10) {
            let _ =
                remembered(&lists, &format!(r#"[{{"function": {{"name": "s{i}"}}}}]"#)).unwrap();
            assert!(lists.read().by_text.len() <= READ_LISTS_BYTES / 256);
        }
        // Too long to keep: read, not remembered.
        let long = format!("[{}]", vec![tool.as_str(); 20].join(","));
        assert!(long.len() > READ_LIST_MAX_BYTES);
        let (one, two) = (
            remembered(&lists, &long).unwrap(),
            remembered(&lists, &long).unwrap(),
        );
        assert!(!Arc::ptr_eq(&one, &two));
    }

    #[test]
    fn a_list_is_remembered_up_to_its_longest_and_not_one_byte_past() {
        let lists = parking_lot::RwLock::new(ReadLists::default());
        let list = |len: usize| {
            let shell = r#"[{"function": {"name": "t", "description": ""}}]"#;
            let text = format!(
                r#"[{{"function": {{"name": "t", "description": "{}"}}}}]"#,
                "x".repeat(len - shell.len())
            );
            assert_eq!(text.len(), len);
            text
        };
        for (len, kept) in [
            (READ_LIST_MAX_BYTES, true),
            (READ_LIST_MAX_BYTES + 1, false),
        ] {
            let text = list(len);
            let (one, two) = (
                remembered(&lists, &text).unwrap(),
                remembered(&lists, &text).unwrap(),
            );
            assert_eq!(Arc::ptr_eq(&one, &two), kept, "{len} bytes");
        }
    }

    /// What a handler sees of a parsed body: its fields, the tools kept as
    /// text and the names offered (or the error's code).
    type Seen = (
        Option<Map<String, Value>>,
        Option<Vec<String>>,
        Result<Vec<String>, String>,
    );

    fn seen(req: &ChatRequest) -> Seen {
        (
            req.fields().cloned(),
            req.raw_tools()
                .map(|ts| ts.iter().map(|t| t.to_string()).collect()),
            req.offered_tools()
                .map(strings)
                .map_err(|e| e.code.to_string()),
        )
    }

    /// A body's list, in the form clients send it: long enough to have a head.
    const LIST: &str = r#"[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}},{"type":"function","function":{"name":"write_file"}}]"#;

    fn with_list(lists: &parking_lot::RwLock<ReadLists>) {
        remembered(lists, LIST).unwrap();
    }

    #[test]
    fn a_body_with_a_remembered_list_is_read_as_the_whole_body_would_be() {
        let lists = parking_lot::RwLock::new(ReadLists::default());
        with_list(&lists);
        for body in [
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":"hi \"tools\": \\ {{"}}],"tools":{LIST}}}"#
            ),
            format!(r#" {{ "tools" : {LIST} , "tool_choice" : "auto", "stream": false }} "#),
            format!(
                r#"{{"tools":{LIST},"messages":[],"nested":{{"tools":[1]}},"x":[{{}},[],"]"]}}"#
            ),
        ] {
            let fast = read_remembered(&lists, body.as_bytes())
                .unwrap_or_else(|| panic!("the list is found in {body}"));
            let whole: ChatRequest = serde_json::from_str(&body).unwrap();
            assert_eq!(seen(&fast), seen(&whole), "{body}");
            assert!(matches!(
                fast.tools,
                Some(KeptTools {
                    text: ListText::Remembered(_),
                    ..
                })
            ));
        }
    }

    #[test]
    fn a_body_whose_list_is_not_simply_a_remembered_one_is_read_whole() {
        let lists = parking_lot::RwLock::new(ReadLists::default());
        with_list(&lists);
        let other = LIST.replace("write_file", "write_fil");
        for body in [
            // Not remembered: a list of the same head, and a longer one
            // that begins as the remembered list does.
            format!(r#"{{"tools":{other}}}"#),
            format!(
                r#"{{"tools":{},{{"type":"function","function":{{"name":"run"}}}}]}}"#,
                &LIST[..LIST.len() - 1]
            ),
            // Two `tools`, or a key that may spell it.
            format!(r#"{{"tools":{LIST},"tools":null}}"#),
            format!(r#"{{"tools":null,"tools":{LIST}}}"#),
            format!(r#"{{"tool\u0073":{LIST}}}"#),
            format!(r#"{{"m\"x":1,"tools":{LIST}}}"#),
            // Not at the top level, or inside a string (the nested key
            // brings the scan past the string).
            format!(r#"{{"x":{{"tools":{LIST}}}}}"#),
            format!(
                r#"{{"x":"\"tools\":{}","y":{{"tools":1}}}}"#,
                LIST.replace('"', "\\\"")
            ),
            format!(r#"[{{"tools":{LIST}}}]"#),
            // Not JSON around a remembered list.
            format!(r#"{{"tools":{LIST}"#),
            format!(r#"{{"tools":{LIST}}}}}"#),
            format!(r#"{{"tools" {LIST}}}"#),
            format!(r#"{{"a":1 "tools":{LIST}}}"#),
            format!(r#"{{"a":tru,"tools":{LIST}}}"#),
        ] {
            assert!(read_remembered(&lists, body.as_bytes()).is_none(), "{body}");
        }
    }

    /// Every byte of a body changed, removed or doubled, and bytes that
    /// matter to JSON put between any two: the remembered list's way either
    /// gives up or reads the body exactly as serde reads it whole.
    #[test]
    fn a_remembered_list_never_changes_how_a_mutated_body_reads() {
        let lists = parking_lot::RwLock::new(ReadLists::default());
        with_list(&lists);
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"a\"b"}}],"tools":{LIST},"n":[1,{{"k":true}}]}}"#
        )
        .into_bytes();
        let list_at = body
            .windows(LIST.len())
            .position(|w| w == LIST.as_bytes())
            .unwrap();
        let (mut found, mut tried) = (0, 0);
        let mut check = |b: &[u8]| {
            tried += 1;
            let Some(fast) = read_remembered(&lists, b) else {
                return;
            };
            found += 1;
            let whole = serde_json::from_slice::<ChatRequest>(b)
                .unwrap_or_else(|e| panic!("{e}: accepted {}", String::from_utf8_lossy(b)));
            assert_eq!(seen(&fast), seen(&whole), "{}", String::from_utf8_lossy(b));
        };
        for i in 0..=body.len() {
            // Inside the list, a change makes it a list not remembered; the
            // places around it are what matter.
            if i > list_at + 2 && i + 2 < list_at + LIST.len() {
                continue;
            }
            for c in *b"\"\\{}[],:0 t" {
                let mut b = body.clone();
                b.insert(i, c);
                check(&b);
                if i < body.len() {
                    let mut b = body.clone();
                    b[i] = c;
                    check(&b);
                }
            }
            if i < body.len() {
                let mut b = body.clone();
                b.remove(i);
                check(&b);
            }
        }
        assert!(found > 100 && found < tried, "{found} of {tried}");
    }

    #[test]
    fn lists_shorter_than_a_head_are_remembered_but_not_found_in_bodies() {
        let lists = parking_lot::RwLock::new(ReadLists::default());
        with_list(&lists);
        let short = r#"[{"function":{"name":"a"}}]"#;
        remembered(&lists, short).unwrap();
        assert!(lists.read().by_text.contains_key(short));
        let body = format!(r#"{{"tools":{short},"pad":"{}"}}"#, "x".repeat(LIST_HEAD));
        assert!(read_remembered(&lists, body.as_bytes()).is_none());
        let body = format!(r#"{{"tools":{LIST},"pad":"{}"}}"#, "x".repeat(LIST_HEAD));
        assert!(read_remembered(&lists, body.as_bytes()).is_some());
    }

    #[test]
    fn a_list_of_exactly_a_heads_length_is_found_and_one_byte_shorter_is_not() {
        let lists = parking_lot::RwLock::new(ReadLists::default());
        // `[{"function":{"name":"` and `"}}]` around a name: 26 bytes of frame.
        let list =
            |len: usize| format!(r#"[{{"function":{{"name":"{}"}}}}]"#, "a".repeat(len - 26));
        let (at, under) = (list(LIST_HEAD), list(LIST_HEAD - 1));
        assert_eq!((at.len(), under.len()), (LIST_HEAD, LIST_HEAD - 1));
        remembered(&lists, &at).unwrap();
        remembered(&lists, &under).unwrap();
        let pad = "x".repeat(LIST_HEAD);
        let found = |list: &str| {
            let body = format!(r#"{{"tools":{list},"pad":"{pad}"}}"#);
            read_remembered(&lists, body.as_bytes()).is_some()
        };
        assert!(found(&at));
        assert!(!found(&under));
    }

    #[test]
    fn a_head_keeps_its_newest_lists_and_the_rest_stay_remembered() {
        let lists = parking_lot::RwLock::new(ReadLists::default());
        let list = |i: usize| LIST.replace("write_file", &format!("write_{i}"));
        for i in 0..=LISTS_PER_HEAD {
            remembered(&lists, &list(i)).unwrap();
        }
        let found = |i: usize| {
            let body = format!(r#"{{"tools":{}}}"#, list(i));
            read_remembered(&lists, body.as_bytes()).is_some()
        };
        assert!(!found(0), "the oldest list left its head");
        assert!((1..=LISTS_PER_HEAD).all(found));
        assert!(lists.read().by_text.contains_key(list(0).as_str()));
        // Brought again (and so read whole), it goes back into its head.
        remembered(&lists, &list(0)).unwrap();
        assert!(found(0), "back in its head");
        assert!(!found(1), "the next oldest left it");
    }
}
