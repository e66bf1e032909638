//! A Messages request body as the agent turn edits it (the mechanical edits
//! behind `crate::agents::turn::TurnBody`; the rules are the turn's): tool
//! names, tool results, the agent's instructions in `system`, and every
//! string PII protection scans.

use serde_json::{json, Map, Value};

use super::request::{check_body, Route};
use crate::error::Error;
use crate::wire::chat::request::MAX_REQUEST_TOOLS;
use crate::wire::is_tool_name;

/// Members PII protection never scans (contract, "Agent routes in Messages
/// shape" → PII): names, kinds and ids a client or upstream matches on.
const UNSCANNED: [&str; 8] = [
    "model",
    "role",
    "type",
    "id",
    "tool_use_id",
    "name",
    "media_type",
    "signature",
];

/// A Messages body under the agent turn.
#[derive(Debug)]
pub struct MessagesBody {
    pub fields: Map<String, Value>,
    pub route: Route,
    /// Bytes of a string `system` that are the agent's instructions.
    instructions_len: Option<usize>,
}

impl MessagesBody {
    pub fn new(fields: Map<String, Value>, route: Route) -> MessagesBody {
        MessagesBody {
            fields,
            route,
            instructions_len: None,
        }
    }

    /// The body's checks, then the tool list's (at most 128 tools, each
    /// name 1 to 64 of `A-Za-z0-9_-`); the offered names in order.
    pub fn check(&self) -> Result<Vec<String>, Error> {
        check_body(&self.fields, self.route)?;
        let tools = self
            .fields
            .get("tools")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if tools.len() > MAX_REQUEST_TOOLS {
            return Err(Error::bad_request(
                "too_many_tools",
                format!(
                    "A request may offer at most {MAX_REQUEST_TOOLS} tools; it offered {}.",
                    tools.len()
                ),
            )
            .with_param("tools"));
        }
        let mut names = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
            if !is_tool_name(name) {
                return Err(Error::validation(
                    "tools",
                    format!("tools[{i}].name must be 1 to 64 of letters, digits, _ and -."),
                ));
            }
            names.push(name.to_string());
        }
        Ok(names)
    }

    /// Keeps the tools named in `keep`; with none left, `tools` and
    /// `tool_choice` go; a `tool_choice` naming a removed tool goes.
    pub fn keep_tools(&mut self, keep: &[&str]) {
        let Some(Value::Array(tools)) = self.fields.get_mut("tools") else {
            return;
        };
        tools.retain(|t| {
            t.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| keep.contains(&n))
        });
        if tools.is_empty() {
            self.fields.remove("tools");
            self.fields.remove("tool_choice");
            return;
        }
        let named = self
            .fields
            .get("tool_choice")
            .filter(|c| c.get("type").and_then(Value::as_str) == Some("tool"))
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str);
        if named.is_some_and(|n| !keep.contains(&n)) {
            self.fields.remove("tool_choice");
        }
    }

    fn tool_results(&mut self) -> impl Iterator<Item = &mut Value> {
        self.fields
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .filter_map(|m| m.get_mut("content").and_then(Value::as_array_mut))
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
    }

    /// The `tool_use_id`s of the tool results, in order.
    pub fn answered_calls(&self) -> Vec<String> {
        self.fields
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .filter_map(|b| b.get("tool_use_id").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }

    /// Each tool result's fate: kept, its content replaced (and marked an
    /// error), or the request refused.
    pub fn answer_calls(
        &mut self,
        fate: &dyn Fn(&str) -> Result<Option<&'static str>, Error>,
    ) -> Result<(), Error> {
        for b in self.tool_results() {
            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
            if let Some(text) = fate(id)? {
                b["content"] = json!(text);
                b["is_error"] = json!(true);
            }
        }
        Ok(())
    }

    /// The agent's instructions first in `system`.
    pub fn put_instructions(&mut self, instructions: &str) {
        let system = match self.fields.remove("system") {
            None => {
                self.instructions_len = Some(instructions.len());
                json!(instructions)
            }
            Some(Value::String(s)) => {
                self.instructions_len = Some(instructions.len());
                json!(format!("{instructions}\n\n{s}"))
            }
            Some(Value::Array(mut blocks)) => {
                blocks.insert(0, json!({"type": "text", "text": instructions}));
                Value::Array(blocks)
            }
            Some(other) => other,
        };
        self.fields.insert("system".into(), system);
    }

    /// A system note at `at` (after the instructions when `at` is 1).
    pub fn put_note(&mut self, note: &str, at: usize) {
        let system = match self.fields.remove("system") {
            None => json!(note),
            Some(Value::String(s)) => {
                let cut = if at == 0 {
                    0
                } else {
                    self.instructions_len.unwrap_or(s.len()).min(s.len())
                };
                let (head, tail) = s.split_at(cut);
                let tail = tail.strip_prefix("\n\n").unwrap_or(tail);
                let text = [head, note, tail]
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join("\n\n");
                json!(text)
            }
            Some(Value::Array(mut blocks)) => {
                let at = at.min(blocks.len());
                blocks.insert(at, json!({"type": "text", "text": note}));
                Value::Array(blocks)
            }
            Some(other) => other,
        };
        self.fields.insert("system".into(), system);
    }

    /// Calls `scan` on every string that goes upstream as text.
    pub fn protect(&mut self, scan: &mut dyn FnMut(&mut String)) {
        for (k, v) in self.fields.iter_mut() {
            if !UNSCANNED.contains(&k.as_str()) {
                walk(v, scan);
            }
        }
    }

    pub fn is_stream(&self) -> bool {
        super::request::is_stream(&self.fields)
    }
}

fn walk(v: &mut Value, scan: &mut dyn FnMut(&mut String)) {
    match v {
        Value::String(s) => scan(s),
        Value::Array(items) => items.iter_mut().for_each(|i| walk(i, scan)),
        Value::Object(obj) => {
            let kind = obj.get("type").and_then(Value::as_str).unwrap_or("");
            // Thinking passes unchanged both ways (its signature would
            // break), as do image and document bytes.
            let skip_more: &[&str] = match kind {
                "thinking" => &["thinking"],
                "redacted_thinking" | "base64" => &["data"],
                _ => &[],
            };
            for (k, val) in obj.iter_mut() {
                if UNSCANNED.contains(&k.as_str()) || skip_more.contains(&k.as_str()) {
                    continue;
                }
                walk(val, scan);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> MessagesBody {
        MessagesBody::new(v.as_object().unwrap().clone(), Route::Messages)
    }

    fn base() -> Value {
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
    }

    #[test]
    fn at_most_128_tools_with_names_by_the_rule() {
        let tools = |n: usize| {
            (0..n)
                .map(|i| json!({"name": format!("t{i}")}))
                .collect::<Vec<_>>()
        };
        let mut v = base();
        v["tools"] = json!(tools(128));
        assert_eq!(body(v.clone()).check().unwrap().len(), 128);
        v["tools"] = json!(tools(129));
        let e = body(v.clone()).check().unwrap_err();
        assert_eq!(
            (e.code.as_ref(), e.param.as_deref()),
            ("too_many_tools", Some("tools"))
        );
        for bad in ["", "has space", &"x".repeat(65)] {
            v["tools"] = json!([{"name": bad}]);
            let e = body(v.clone()).check().unwrap_err();
            assert_eq!(
                (e.code.as_ref(), e.param.as_deref()),
                ("validation_error", Some("tools"))
            );
        }
        v["tools"] = json!([{"name": "x".repeat(64)}]);
        assert!(body(v).check().is_ok());
    }

    #[test]
    fn removed_tools_take_a_choice_naming_them_and_none_left_removes_both() {
        let mut v = base();
        v["tools"] = json!([{"name": "Read"}, {"name": "Bash"}]);
        v["tool_choice"] = json!({"type": "tool", "name": "Bash"});
        let mut b = body(v.clone());
        b.keep_tools(&["Read"]);
        assert_eq!(b.fields["tools"], json!([{"name": "Read"}]));
        assert!(!b.fields.contains_key("tool_choice"));
        let mut b = body(v);
        b.keep_tools(&[]);
        assert!(!b.fields.contains_key("tools") && !b.fields.contains_key("tool_choice"));
    }

    #[test]
    fn instructions_go_first_and_the_note_after_them() {
        let mut b = body(base());
        b.put_instructions("I");
        b.put_note("N", 1);
        assert_eq!(b.fields["system"], "I\n\nN");
        let mut v = base();
        v["system"] = json!("S");
        let mut b = body(v.clone());
        b.put_instructions("I");
        assert_eq!(b.fields["system"], "I\n\nS");
        b.put_note("N", 1);
        assert_eq!(b.fields["system"], "I\n\nN\n\nS");
        v["system"] = json!([{"type": "text", "text": "S"}]);
        let mut b = body(v);
        b.put_instructions("I");
        b.put_note("N", 1);
        assert_eq!(
            b.fields["system"],
            json!([{"type": "text", "text": "I"}, {"type": "text", "text": "N"}, {"type": "text", "text": "S"}])
        );
    }

    #[test]
    fn tool_results_get_their_fate() {
        let mut v = base();
        v["messages"] = json!([{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "secret"},
            {"type": "tool_result", "tool_use_id": "b", "content": "fine"}]}]);
        let mut b = body(v);
        assert_eq!(b.answered_calls(), vec!["a", "b"]);
        b.answer_calls(&|id| Ok((id == "a").then_some("The user denied this tool call.")))
            .unwrap();
        let blocks = &b.fields["messages"][0]["content"];
        assert_eq!(blocks[0]["content"], "The user denied this tool call.");
        assert_eq!(blocks[0]["is_error"], true);
        assert_eq!(blocks[1]["content"], "fine");
        assert!(b
            .answer_calls(&|_| Err(Error::conflict("approval_pending", "wait")))
            .is_err());
    }

    #[test]
    fn pii_scans_text_inputs_and_results_but_not_names_ids_or_thinking() {
        let v = json!({"model": "m@x.io", "max_tokens": 5, "system": "s@x.io",
            "tools": [{"name": "n@x.io", "description": "d@x.io", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t@x.io", "signature": "g@x.io"},
                    {"type": "tool_use", "id": "i@x.io", "name": "n@x.io", "input": {"to": "u@x.io"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "i@x.io", "content": "r@x.io"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "b@x.io"}},
                    {"type": "text", "text": "x@x.io"}]}]});
        let mut b = body(v);
        let mut seen = vec![];
        b.protect(&mut |s| {
            seen.push(s.clone());
            *s = "[X]".into();
        });
        seen.sort();
        assert_eq!(seen, vec!["d@x.io", "r@x.io", "s@x.io", "u@x.io", "x@x.io"]);
        assert_eq!(b.fields["model"], "m@x.io");
    }
}
