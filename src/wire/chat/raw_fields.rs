//! An agent chat body's fields read without a tree, in the usual case: no
//! rule edits inside them when PII protection is off, no tool message
//! answers a call that is pending, denied or expired, and the agent's
//! instructions only go in front of the messages. Reading the fields into a
//! tree and writing them out again for the upstream cost more than the rules
//! themselves; the upstream gets the client's own text of each field.
//!
//! [`RawFields::read`] takes only what a tree-reading handler would pass
//! unchanged (see its conditions); [`RawFields::into_tree`] gives the tree
//! when a rule needs one after all, so the answer is the same either way.

use std::ops::Range;

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::wire::chat::body::MessageView;
use crate::wire::json::{is_ws, MapOnly};

/// The top-level members of a body but a `tools` list (kept as text by the
/// caller), each as the client wrote it.
#[derive(Debug)]
pub struct RawFields {
    /// The body, or the body with `0` in a remembered list's place.
    text: Bytes,
    members: Vec<Member>,
    /// `stream` is `true`.
    pub stream: bool,
    /// Characters of text in the messages (see
    /// [`MessageView::chars`]), the instructions' included once they are in.
    pub prompt_chars: usize,
    /// The `tool_call_id`s that `role: "tool"` messages answer, in order.
    pub answered: Vec<String>,
    /// A system message to put before the client's messages.
    first: Option<String>,
    /// `tool_choice` as a value: the one field the rules read that no view
    /// checks for repeated keys, so it goes upstream as the rules read it
    /// (the last of repeated keys), not as written.
    pub tool_choice: Option<Value>,
}

#[derive(Debug)]
struct Member {
    /// The key with its quotes, and the value.
    key: Range<usize>,
    value: Range<usize>,
    removed: bool,
}

/// The most top-level members a body read without a tree has (a body is
/// refused with a repeated key, and checking for one is quadratic).
const MAX_MEMBERS: usize = 64;

/// Why a body was not read without a tree: the tree reads it (and says what
/// is wrong with it, if anything is).
#[derive(Debug)]
pub struct NotUsual;

/// What [`RawFields::read`] found in the `tools` member.
pub enum ToolsMember<'a> {
    /// No `tools`, or `null` (which stays among the fields).
    None,
    /// The remembered list the caller put a `0` in place of.
    Remembered,
    /// A list, as the client wrote it.
    List(&'a RawValue),
}

impl RawFields {
    /// Reads `text` (an agent chat body, or one with `0` in place of a
    /// remembered list when `remembered`). Only a body read so: a JSON object
    /// whose keys have no escapes and none repeats; `messages` a non-empty
    /// list of message objects, none with role `function`; `stream` a
    /// boolean or `null`; no `stream_options`, `functions` or
    /// `function_call`; `tools` absent, `null` or a list; and nothing a tree
    /// would refuse (see [`tree_would_read`](crate::wire::json::tree_would_read)),
    /// with at most [`MAX_MEMBERS`] members. Repeated keys inside a value
    /// go upstream as written (the tree would keep the last), except in
    /// `tool_choice`, which the rules read; the views refuse them where
    /// they read the messages.
    // Out of line, as `after_model` and `ChatRequest::parse`: inlined, they
    // changed how the whole program's inlining fell out (one unit, fat LTO),
    // and plain chat, which never calls them, measured 12 % slower
    // (bench/results/HISTORY.md, fifth round).
    #[inline(never)]
    pub fn read(text: &Bytes, remembered: bool) -> Result<(RawFields, ToolsMember<'_>), NotUsual> {
        if !crate::wire::json::tree_would_read(text) {
            return Err(NotUsual);
        }
        let mut de = serde_json::Deserializer::from_slice(text);
        let top = de.deserialize_map(TopLevel).map_err(|_| NotUsual)?;
        de.end().map_err(|_| NotUsual)?;
        if top.len() > MAX_MEMBERS {
            return Err(NotUsual);
        }
        let base = text.as_ptr() as usize;
        let span = |s: &str| {
            let at = s.as_ptr() as usize - base;
            at..at + s.len()
        };
        // Where each member's key starts (at its quote), and where the
        // object ends (at its `}`): a value read as a view (not as text)
        // lies between its key and the next key or the end, less white
        // space, the `:` and any `,`.
        let key_at = |i: usize| {
            top.get(i).map_or_else(
                || text.iter().rposition(|&b| b == b'}').unwrap_or(0),
                |(k, _)| span(k).start - 1,
            )
        };
        let mut fields = RawFields {
            text: text.clone(),
            members: Vec::with_capacity(top.len()),
            stream: false,
            prompt_chars: 0,
            answered: Vec::new(),
            first: None,
            tool_choice: None,
        };
        let mut tools = ToolsMember::None;
        let mut has_messages = false;
        for (i, (key, value)) in top.iter().enumerate() {
            if top[..i].iter().any(|(k, _)| k == key) {
                return Err(NotUsual);
            }
            let key_span = span(key);
            let value = match value {
                TopValue::Text(value) => value,
                TopValue::Messages(messages) => {
                    if messages.is_empty() {
                        return Err(NotUsual);
                    }
                    for MapOnly(m) in messages {
                        match m.role.as_deref() {
                            Some("function") => return Err(NotUsual),
                            Some("tool") => {
                                if let Some(id) = &m.tool_call_id {
                                    fields.answered.push(id.to_string());
                                }
                            }
                            _ => {}
                        }
                        fields.prompt_chars += m.chars();
                    }
                    has_messages = true;
                    let start = key_span.end + 1 + skip_ws_colon(&text[key_span.end + 1..]);
                    let end = before_ws_comma(&text[..key_at(i + 1)]);
                    // So on valid JSON; checked, as the text is sliced by it.
                    if !(start < end && text[start] == b'[' && text[end - 1] == b']') {
                        return Err(NotUsual);
                    }
                    fields.members.push(Member {
                        key: key_span.start - 1..key_span.end + 1,
                        value: start..end,
                        removed: false,
                    });
                    continue;
                }
            };
            match *key {
                "functions" | "function_call" | "stream_options" => return Err(NotUsual),
                "tools" if remembered => {
                    if value.get() != "0" {
                        return Err(NotUsual);
                    }
                    tools = ToolsMember::Remembered;
                    continue;
                }
                "tools" if value.get().starts_with('[') => {
                    tools = ToolsMember::List(value);
                    continue;
                }
                "tools" if value.get() != "null" => return Err(NotUsual),
                "tool_choice" => {
                    fields.tool_choice =
                        Some(serde_json::from_str(value.get()).map_err(|_| NotUsual)?);
                }
                "stream" => match value.get() {
                    "true" => fields.stream = true,
                    "false" | "null" => {}
                    _ => return Err(NotUsual),
                },
                _ => {}
            }
            // The key's quotes: the key has no escapes, so its text is this.
            fields.members.push(Member {
                key: key_span.start - 1..key_span.end + 1,
                value: span(value.get()),
                removed: false,
            });
        }
        if !has_messages || (remembered && !matches!(tools, ToolsMember::Remembered)) {
            return Err(NotUsual);
        }
        Ok((fields, tools))
    }

    fn key(&self, m: &Member) -> &[u8] {
        key_of(&self.text, m)
    }

    fn member(&self, key: &str) -> Option<&Member> {
        self.members
            .iter()
            .find(|m| !m.removed && self.key(m) == key.as_bytes())
    }

    /// The value of `key`, as JSON text.
    pub fn get(&self, key: &str) -> Option<&str> {
        let m = self.member(key)?;
        // Valid UTF-8: checked in `read`.
        std::str::from_utf8(&self.text[m.value.clone()]).ok()
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.member(key).is_some()
    }

    pub fn remove(&mut self, key: &str) {
        if key == "tool_choice" {
            self.tool_choice = None;
        }
        let text = &self.text;
        for m in &mut self.members {
            if key_of(text, m) == key.as_bytes() {
                m.removed = true;
            }
        }
    }

    /// Puts a system message with `content` before the client's messages.
    pub fn put_first(&mut self, content: &str) {
        self.prompt_chars += content.chars().count();
        self.first = Some(content.to_string());
    }

    /// The fields as a tree, as a whole read would have given them, and the
    /// system message still to put first (see [`RawFields::put_first`]).
    pub fn into_tree(self) -> Result<(Map<String, Value>, Option<String>), serde_json::Error> {
        let mut map = Map::new();
        for m in self.members.iter().filter(|m| !m.removed) {
            let key = String::from_utf8_lossy(self.key(m)).into_owned();
            map.insert(key, serde_json::from_slice(&self.text[m.value.clone()])?);
        }
        Ok((map, self.first))
    }

    /// The upstream body after its model's name: `,` and the members but
    /// the client's `model` (the agent's own goes upstream), the kept
    /// `tools` last, each as the client wrote it; then `}`.
    #[inline(never)]
    pub fn after_model(&self, tools: Option<&[&str]>) -> Bytes {
        let tools_len: usize = tools.map_or(0, |ts| ts.iter().map(|t| t.len() + 1).sum());
        let first_len = self.first.as_ref().map_or(0, |f| f.len() + 64);
        let mut out = Vec::with_capacity(self.text.len() + tools_len + first_len + 16);
        for m in self.members.iter().filter(|m| !m.removed) {
            if self.key(m) == b"model" {
                continue;
            }
            out.push(b',');
            out.extend_from_slice(&self.text[m.key.clone()]);
            out.push(b':');
            let value = &self.text[m.value.clone()];
            match (self.key(m), &self.first, &self.tool_choice) {
                // A non-empty list: `[` then a message.
                (b"messages", Some(first), _) => {
                    out.extend_from_slice(br#"[{"role":"system","content":"#);
                    // A string always serialises.
                    let _ = serde_json::to_writer(&mut out, first);
                    out.extend_from_slice(b"},");
                    out.extend_from_slice(&value[1..]);
                }
                // A value always serialises.
                (b"tool_choice", _, Some(choice)) => {
                    let _ = serde_json::to_writer(&mut out, choice);
                }
                _ => out.extend_from_slice(value),
            }
        }
        if let Some(ts) = tools {
            out.push(b',');
            crate::wire::chat::tools::write_tools(&mut out, ts);
        }
        out.push(b'}');
        Bytes::from(out)
    }
}

/// An object's members, each key borrowed (an escaped key fails: it could
/// spell one the rules read) and each value as text, but `messages` read as
/// views in the same pass (reading them from their text again was a
/// quarter of a long conversation's read).
struct TopLevel;

enum TopValue<'a> {
    Text(&'a RawValue),
    Messages(Vec<MapOnly<MessageView<'a>>>),
}

impl<'de> Visitor<'de> for TopLevel {
    type Value = Vec<(&'de str, TopValue<'de>)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(8);
        while let Some(key) = map.next_key::<&'de str>()? {
            let value = if key == "messages" {
                TopValue::Messages(map.next_value()?)
            } else {
                TopValue::Text(map.next_value()?)
            };
            out.push((key, value));
        }
        Ok(out)
    }
}

/// A member's key, within its quotes (a key without escapes).
fn key_of<'a>(text: &'a [u8], m: &Member) -> &'a [u8] {
    &text[m.key.start + 1..m.key.end - 1]
}

/// How many bytes of white space, a `:` and white space `after` (a key's
/// closing quote) starts with.
fn skip_ws_colon(after: &[u8]) -> usize {
    let mut i = after.iter().take_while(|&&b| is_ws(b)).count();
    if after.get(i) == Some(&b':') {
        i += 1;
    }
    i + after[i..].iter().take_while(|&&b| is_ws(b)).count()
}

/// Where a value ends that `before` (text up to the next key's quote or the
/// object's `}`) ends with, less white space, a `,` and white space.
fn before_ws_comma(before: &[u8]) -> usize {
    let mut end = before.len() - before.iter().rev().take_while(|&&b| is_ws(b)).count();
    if end > 0 && before[end - 1] == b',' {
        end -= 1;
    }
    end - before[..end]
        .iter()
        .rev()
        .take_while(|&&b| is_ws(b))
        .count()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use bytes::Bytes;
    use serde_json::{json, Value};

    use crate::agents::approvals::{fate_of, ApprovalState, DENIED_TEXT};
    use crate::wire::chat::request::{ChatRequest, Upstream};

    const TOOLS: &str = r#"[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}},{"type":"function","function":{"name":"run"}}]"#;

    fn parse(body: &str) -> ChatRequest {
        ChatRequest::parse(&Bytes::copy_from_slice(body.as_bytes()), true).expect("parses")
    }

    /// Every option of the fuzz target (tool modes, approvals' states,
    /// instructions, PII protection on and off): the rules end alike and the
    /// upstream gets the same body, read whole or kept as text.
    fn same_either_way(body: &str) {
        for opts in 0..=u8::MAX {
            let mut data = vec![opts];
            data.extend_from_slice(body.as_bytes());
            crate::fuzzing::chat_body(&data);
        }
    }

    /// The upstream body of a request whose fields are kept as text.
    fn upstream(req: ChatRequest) -> (Value, bool, usize) {
        let Upstream::Text {
            after_model,
            stream,
            prompt_chars,
        } = req.into_upstream()
        else {
            panic!("fields read into a tree")
        };
        let raw = crate::wire::chat::body::RawChat::assembled(after_model, stream, prompt_chars);
        let bytes = crate::wire::chat::body::ChatBody::spliced(&raw).for_model("up");
        (
            serde_json::from_slice(&bytes).expect("JSON"),
            stream,
            prompt_chars,
        )
    }

    #[test]
    fn usual_bodies_keep_their_fields_as_text_and_go_up_as_a_tree_would_send_them() {
        for body in [
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"tools":{TOOLS}}}"#),
            format!(
                r#" {{ "messages" : [ {{"role":"system","content":"Be \"brief\"\u00e9"}}, {{"role":"user","content":[{{"type":"text","text":"héllo"}},{{"type":"image_url"}}]}} ] ,
                   "temperature" : 0.50, "tools" : {TOOLS}, "tool_choice": {{"type":"function","function":{{"name":"run"}}}},
                   "parallel_tool_calls": true, "stream": true, "x": {{"n": [1, null, -0, 1e2]}} }} "#
            ),
            r#"{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"run","arguments":"{\"a\":1}"}}]},
                {"role":"tool","tool_call_id":"c1","content":"done"},{"role":"tool","tool_call_id":"c2","content":"also"},{"role":"user","content":"next"}],
                "tools":null,"tool_choice":"auto","stream":null}"#
                .to_string(),
            r#"{"messages":[{"content":"no role"}],"tools":[],"tool_choice":"required","parallel_tool_calls":false}"#.to_string(),
        ] {
            assert!(parse(&body).fields().is_none(), "kept as text: {body}");
            same_either_way(&body);
        }
    }

    #[test]
    fn bodies_out_of_the_usual_are_read_into_a_tree() {
        for body in [
            r#"{"messages":[{"role":"user","content":"hi"}],"model":"a","model":"b"}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"to\u006fls":[]}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"functions":[]}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"function_call":"auto"}"#,
            r#"{"messages":[{"role":"function","name":"f","content":"x"}]}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"stream":"yes"}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"tools":{"name":"a"}}"#,
            r#"{"messages":[{"role":"user","content":"hi"}],"temperature":1e400}"#,
            r#"{"messages":[{"role":"user","content":"\ud800"}]}"#,
            r#"{"messages":[{"role":7,"content":"hi"}]}"#,
            r#"{"messages":[{"role":"tool","tool_call_id":7,"content":"hi"}]}"#,
            r#"{"messages":["hi"]}"#,
            r#"{"messages":[]}"#,
            r#"{"messages":{}}"#,
            r#"{"model":"m"}"#,
        ] {
            let b = Bytes::copy_from_slice(body.as_bytes());
            if let Ok(req) = ChatRequest::parse(&b, true) {
                assert!(req.fields().is_some(), "read into a tree: {body}");
            }
            same_either_way(body);
        }
        for body in [r#"[{"messages":[]}]"#, r#"{"messages":[{}]} x"#, ""] {
            let b = Bytes::copy_from_slice(body.as_bytes());
            assert!(ChatRequest::parse(&b, true).is_err(), "{body}");
        }
    }

    #[test]
    fn instructions_go_before_the_clients_messages_and_count_in_the_prompt() {
        let mut req = parse(
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"top_p":0.5}"#,
        );
        req.put_instructions("Be \"brief\".");
        let (body, stream, chars) = upstream(req);
        assert!(stream);
        assert_eq!(
            body,
            json!({"model": "up", "top_p": 0.5, "stream": true,
                   "stream_options": {"include_usage": true},
                   "messages": [{"role": "system", "content": "Be \"brief\"."},
                                {"role": "user", "content": "hi"}]})
        );
        assert_eq!(chars, 11 + 2);
    }

    #[test]
    fn a_tools_list_emptied_by_the_rules_takes_tool_choice_and_parallel_tool_calls_with_it() {
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":{TOOLS},"tool_choice":"required","parallel_tool_calls":true}}"#
        );
        let mut req = parse(&body);
        req.apply::<&str>(&[]);
        let (sent, _, _) = upstream(req);
        assert_eq!(
            sent,
            json!({"model": "up", "messages": [{"role": "user", "content": "hi"}]})
        );
        let mut req = parse(&body.replace(r#""required""#, r#"{"function":{"name":"run"}}"#));
        req.apply(&["read_file"]);
        let (sent, _, _) = upstream(req);
        assert!(sent.get("tool_choice").is_none(), "{sent}");
        assert_eq!(sent["parallel_tool_calls"], json!(true));
        assert_eq!(sent["tools"][0]["function"]["name"], json!("read_file"));
        assert_eq!(sent["tools"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn a_tool_choice_with_a_repeated_key_goes_up_as_the_rules_read_it() {
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":{TOOLS},
                "tool_choice":{{"type":"function","function":{{"name":"run"}},"function":{{"name":"read_file"}}}}}}"#
        );
        let mut req = parse(&body);
        req.apply(&["read_file"]);
        let Upstream::Text { after_model, .. } = req.into_upstream() else {
            panic!("fields read into a tree")
        };
        let text = std::str::from_utf8(&after_model).unwrap();
        assert!(
            text.contains(r#""tool_choice":{"function":{"name":"read_file"},"type":"function"}"#),
            "{text}"
        );
        assert!(!text.contains(r#"{"name":"run"}"#), "{text}");
        same_either_way(&body);
    }

    #[test]
    fn a_body_of_up_to_64_members_is_kept_as_text_and_one_more_is_read_into_a_tree() {
        let body = |members: usize| {
            let extra: String = (1..members).map(|i| format!(r#","x{i}":{i}"#)).collect();
            format!(r#"{{"messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
        };
        assert!(parse(&body(64)).fields().is_none());
        assert!(parse(&body(65)).fields().is_some());
        same_either_way(&body(65));
    }

    #[test]
    fn an_answer_to_a_denied_call_reads_the_fields_into_a_tree_and_an_approved_one_does_not() {
        let body = r#"{"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"result"}]}"#;
        let mut req = parse(body);
        assert_eq!(req.answered_calls(), ["c1"]);
        let approved = HashMap::from([("c1".to_string(), ApprovalState::Approved)]);
        req.answer_calls(fate_of(&approved)).unwrap();
        assert!(req.fields().is_none(), "still text");
        let denied = HashMap::from([("c1".to_string(), ApprovalState::Denied)]);
        req.answer_calls(fate_of(&denied)).unwrap();
        let fields = req.fields().expect("read into a tree");
        assert_eq!(fields["messages"][1]["content"], json!(DENIED_TEXT));
        let pending = HashMap::from([("c1".to_string(), ApprovalState::Pending)]);
        let e = parse(body).answer_calls(fate_of(&pending)).unwrap_err();
        assert_eq!(e.code, "approval_pending");
    }

    #[test]
    fn fields_read_into_a_tree_after_all_are_what_a_whole_read_gives_with_the_instructions_in() {
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"n":1.50,"tools":{TOOLS}}}"#
        );
        let mut req = parse(&body);
        req.put_instructions("first");
        let tree = req.tree().unwrap().clone();
        let mut whole: ChatRequest = serde_json::from_str(&body).unwrap();
        whole.put_instructions("first");
        assert_eq!(Some(&tree), whole.fields());
        assert_eq!(
            tree["messages"][0],
            json!({"role": "system", "content": "first"})
        );
        assert!(!tree.contains_key("tools"), "the list stays text");
    }
}
