//! A Responses body read without a tree, in the usual case (Codex's:
//! messages of text, function and custom tool calls and their outputs,
//! reasoning items, function, custom and built-in tools): the bridge's chat
//! body, the echo and the figures are written straight from the client's
//! text, as chat's [`RawChat`](crate::wire::chat::body::RawChat) does.
//! Anything else gives None, and the tree path ([`super::request`]) reads
//! it, checks it and names what is wrong. A body read here is one that path
//! accepts, and what is written is what it writes (the fuzz target
//! `responses` compares the two on every input).

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::answer::Echo;
use super::request::{reasoning_effort, response_format, CUSTOM_PARAMETERS, ROLES};
use crate::wire::json::{tree_would_read, MapOnly};
use crate::wire::sse::{json_num, json_str};

/// A Responses body read in the usual case (see the module).
#[derive(Debug)]
pub struct RawResponses {
    /// The client's name for its model.
    pub model: String,
    /// Where the model's string (quotes included) is in the client's bytes:
    /// a native upstream gets those bytes with only that replaced.
    pub model_at: Range<usize>,
    /// The bridge's chat body after its model: the other members and the
    /// closing `}` (no `stream_options`: the relay adds it to a stream).
    pub chat_tail: Bytes,
    pub stream: bool,
    /// Characters of the chat body's prompt, as
    /// [`prompt_chars`](crate::wire::chat::prompt_chars) counts them.
    pub prompt_chars: usize,
    /// The text of `instructions` and `input`, counted when a budget's
    /// reservation needs it.
    pub text: PromptText,
    /// `max_output_tokens`.
    pub max_output: Option<u64>,
    pub echo: Echo,
    /// The built-in tools, which the bridge drops: their `name`, else `type`.
    pub dropped: Vec<String>,
}

/// The text of a body's `instructions` and `input` (a budget's estimate of
/// the prompt), counted only when asked: most requests fall under no budget.
#[derive(Debug, Clone)]
pub struct PromptText {
    /// The body [`RawResponses::read`] read.
    bytes: Bytes,
}

#[derive(Deserialize)]
struct TextView<'a> {
    #[serde(borrow)]
    input: &'a RawValue,
    #[serde(borrow, default)]
    instructions: Option<Cow<'a, str>>,
}

impl PromptText {
    /// Characters of text, as [`text_chars`](crate::spend::budget::text_chars)
    /// counts them in a tree.
    pub fn chars(&self) -> usize {
        // The body was read once already: this reading of it succeeds.
        let Ok(MapOnly(v)) = serde_json::from_slice::<MapOnly<TextView>>(&self.bytes) else {
            return 0;
        };
        let input = v.input.get();
        // What the counter without a tree leaves (a key written twice, a
        // crowded object) is counted in a tree.
        let n = crate::spend::budget::text_chars_of_json(input).unwrap_or_else(|| {
            serde_json::from_str::<Value>(input)
                .map(|v| crate::spend::budget::text_chars(&v))
                .unwrap_or(0)
        });
        v.instructions.map_or(0, |i| i.chars().count()) + n
    }
}

/// The members the bridge and the checks read; the others are skipped.
#[derive(Deserialize)]
struct BodyView<'a> {
    #[serde(borrow)]
    model: &'a RawValue,
    #[serde(borrow)]
    input: TextOr<'a, MapOnly<ItemView<'a>>>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_choice: Option<&'a RawValue>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(borrow, default)]
    temperature: Option<&'a RawValue>,
    #[serde(borrow, default)]
    top_p: Option<&'a RawValue>,
    #[serde(borrow, default)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user: Option<&'a RawValue>,
    #[serde(borrow, default)]
    safety_identifier: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    /// Read for its type only (a boolean or null).
    #[serde(default, rename = "store")]
    _store: Option<bool>,
    #[serde(borrow, default)]
    previous_response_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    conversation: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ItemView<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<TextOr<'a, MapOnly<PartView<'a>>>>,
    #[serde(borrow, default)]
    call_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    output: Option<TextOr<'a, MapOnly<TextPart<'a>>>>,
}

#[derive(Deserialize)]
struct PartView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct TextPart<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
}

/// A member that is a string or a list, read in one pass: the string
/// borrowed when it has no escapes (then its JSON text is it in quotes).
enum TextOr<'a, T> {
    Text(Cow<'a, str>),
    List(Vec<T>),
}

impl<'de: 'a, 'a, T: Deserialize<'de>> Deserialize<'de> for TextOr<'a, T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a, T>(std::marker::PhantomData<(&'a (), T)>);
        impl<'de: 'a, 'a, T: Deserialize<'de>> serde::de::Visitor<'de> for V<'a, T> {
            type Value = TextOr<'a, T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(TextOr::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(TextOr::Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(TextOr::Text(Cow::Owned(v)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(x) = seq.next_element()? {
                    list.push(x);
                }
                Ok(TextOr::List(list))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Writes a string read by serde as a JSON string: one it lent from the
/// body had no escapes, so its text in quotes is its JSON; one it had to
/// unescape is escaped again.
#[allow(clippy::ptr_arg)] // Whether serde lent the string is what is read here.
fn write_text(out: &mut Vec<u8>, s: &Cow<str>) {
    match s {
        Cow::Borrowed(b) => {
            out.push(b'"');
            out.extend_from_slice(b.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(o) => json_str(out, o),
    }
}

#[derive(Deserialize)]
struct ToolView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    description: Option<&'a RawValue>,
    #[serde(borrow, default)]
    parameters: Option<&'a RawValue>,
    #[serde(borrow, default)]
    strict: Option<&'a RawValue>,
}

/// The value when it is a string (its JSON text, quotes included).
fn string(v: Option<&RawValue>) -> Option<&str> {
    v.map(RawValue::get).filter(|t| t.starts_with('"'))
}

/// A string's JSON text without its quotes.
fn inside(lit: &str) -> &str {
    lit.get(1..lit.len().saturating_sub(1)).unwrap_or("")
}

/// Characters of the string a JSON string's text spells: its characters
/// less what its escapes take beyond one (no surrogate escapes:
/// [`tree_would_read`] turned those away).
fn lit_chars(lit: &str) -> usize {
    let inner = inside(lit).as_bytes();
    let mut n = inside(lit).chars().count();
    let mut at = 0;
    while let Some(i) = inner.get(at..).and_then(|r| memchr::memchr(b'\\', r)) {
        let i = at + i;
        let len = if inner.get(i + 1) == Some(&b'u') {
            6
        } else {
            2
        };
        n = n.saturating_sub(len - 1);
        at = i + len;
    }
    n
}

/// The string a JSON string's text spells.
fn owned(lit: &str) -> Option<String> {
    serde_json::from_str(lit).ok()
}

/// Writes strings as one string, joined by a line break; returns its
/// characters.
fn write_joined<'a, 'b: 'a>(
    out: &mut Vec<u8>,
    texts: impl Iterator<Item = &'a Cow<'b, str>>,
) -> usize {
    let mut chars = 0;
    let mut escaped = Vec::new();
    out.push(b'"');
    for (i, t) in texts.enumerate() {
        if i > 0 {
            out.extend_from_slice(b"\\n");
            chars += 1;
        }
        match t {
            Cow::Borrowed(b) => out.extend_from_slice(b.as_bytes()),
            Cow::Owned(o) => {
                escaped.clear();
                json_str(&mut escaped, o);
                out.extend_from_slice(escaped.get(1..escaped.len() - 1).unwrap_or_default());
            }
        }
        chars += t.chars().count();
    }
    out.push(b'"');
    chars
}

/// A message's `content` in chat terms: a string as it is, a list of text
/// parts as their texts joined (an image: None, for the tree path).
fn write_content(out: &mut Vec<u8>, content: &TextOr<MapOnly<PartView>>) -> Option<usize> {
    let parts = match content {
        TextOr::Text(t) => {
            write_text(out, t);
            return Some(t.chars().count());
        }
        TextOr::List(parts) => parts,
    };
    let mut texts = Vec::with_capacity(parts.len());
    for MapOnly(p) in parts {
        let text = match &*p.kind {
            "input_text" | "output_text" => p.text.as_ref(),
            "refusal" => p.refusal.as_ref(),
            _ => None,
        };
        texts.push(text?);
    }
    Some(write_joined(out, texts.into_iter()))
}

/// A tool output in chat terms: a string as it is, a list of parts as
/// their texts joined.
fn write_output(out: &mut Vec<u8>, output: &TextOr<MapOnly<TextPart>>) -> Option<usize> {
    match output {
        TextOr::Text(t) => {
            write_text(out, t);
            Some(t.chars().count())
        }
        TextOr::List(parts) => Some(write_joined(out, parts.iter().map(|MapOnly(p)| &p.text))),
    }
}

/// The chat messages as they are written, with what a call needs to join
/// the assistant message before it.
struct Messages {
    out: Vec<u8>,
    count: usize,
    /// The last message is an assistant's, left open for calls to join:
    /// `Some(true)` once its `tool_calls` list is open.
    open: Option<bool>,
    /// Characters of text and arguments (the prompt's estimate).
    chars: usize,
}

impl Messages {
    fn close(&mut self) {
        match self.open.take() {
            Some(true) => self.out.extend_from_slice(b"]}"),
            Some(false) => self.out.push(b'}'),
            None => {}
        }
    }

    fn start(&mut self, role: &str) {
        self.close();
        if self.count > 0 {
            self.out.push(b',');
        }
        self.count += 1;
        self.out.extend_from_slice(b"{\"role\":");
        json_str(&mut self.out, role);
    }

    /// A call joins the assistant message before it, else starts one.
    fn call(&mut self, id: &str, name: &str, arguments: impl FnOnce(&mut Vec<u8>)) {
        match self.open {
            Some(true) => self.out.push(b','),
            Some(false) => self.out.extend_from_slice(b",\"tool_calls\":["),
            None => {
                self.start("assistant");
                self.out
                    .extend_from_slice(b",\"content\":null,\"tool_calls\":[");
            }
        }
        self.open = Some(true);
        self.out.extend_from_slice(b"{\"id\":");
        self.out.extend_from_slice(id.as_bytes());
        self.out
            .extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b",\"arguments\":");
        arguments(&mut self.out);
        self.out.extend_from_slice(b"}}");
    }

    fn item(&mut self, item: &ItemView) -> Option<()> {
        let kind = match item.kind.as_deref() {
            Some(k) => k,
            None if item.role.is_some() => "message",
            None => return None,
        };
        match kind {
            "message" => {
                let role = item.role.as_deref().filter(|r| ROLES.contains(r))?;
                let role = match role {
                    "system" | "developer" => "system",
                    r => r,
                };
                self.start(role);
                self.out.extend_from_slice(b",\"content\":");
                self.chars += write_content(&mut self.out, item.content.as_ref()?)?;
                if role == "assistant" {
                    self.open = Some(false);
                } else {
                    self.out.push(b'}');
                }
            }
            "function_call" => {
                let (id, name) = (string(item.call_id)?, string(item.name)?);
                let arguments = string(item.arguments)?;
                self.chars += lit_chars(arguments);
                self.call(id, name, |out| out.extend_from_slice(arguments.as_bytes()));
            }
            "custom_tool_call" => {
                let (id, name) = (string(item.call_id)?, string(item.name)?);
                // The input as a chat function's one argument.
                let input = owned(string(item.input)?)?;
                let mut arguments = Vec::with_capacity(input.len() + 16);
                arguments.extend_from_slice(b"{\"input\":");
                json_str(&mut arguments, &input);
                arguments.push(b'}');
                let arguments = String::from_utf8(arguments).ok()?;
                self.chars += arguments.chars().count();
                self.call(id, name, |out| json_str(out, &arguments));
            }
            "function_call_output" | "custom_tool_call_output" => {
                let id = string(item.call_id)?;
                let output = item.output.as_ref()?;
                self.start("tool");
                self.out.extend_from_slice(b",\"tool_call_id\":");
                self.out.extend_from_slice(id.as_bytes());
                self.out.extend_from_slice(b",\"content\":");
                self.chars += write_output(&mut self.out, output)?;
                self.out.push(b'}');
            }
            // Not passed on; a call after it still joins the message before.
            "reasoning" => {}
            _ => return None,
        }
        Some(())
    }
}

/// A number's JSON text (what the checks ask of `temperature` and `top_p`).
fn number(v: Option<&RawValue>) -> Option<Option<&str>> {
    match v.map(RawValue::get) {
        None => Some(None),
        Some(t) if t.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => Some(Some(t)),
        Some(_) => None,
    }
}

/// The value when it is absent, null or a string; None otherwise.
fn optional_string(v: Option<&RawValue>) -> Option<Option<&str>> {
    match v {
        None => Some(None),
        Some(_) => string(v).map(Some),
    }
}

/// The value when it is absent, null or an object, as a tree (small ones:
/// `reasoning`, `text`); None otherwise.
fn optional_object(v: Option<&RawValue>) -> Option<Option<Value>> {
    match v.map(RawValue::get) {
        None => Some(None),
        Some(t) if t.starts_with('{') => serde_json::from_str(t).ok().map(Some),
        Some(_) => None,
    }
}

/// A member of the echo: the client's text, unless it spans lines (an
/// event's `data:` line must not), then written again compact.
fn echo_raw(out: &mut Vec<u8>, v: Option<&RawValue>) -> bool {
    let Some(v) = v else { return false };
    let t = v.get().as_bytes();
    if memchr::memchr2(b'\n', b'\r', t).is_none() {
        out.extend_from_slice(t);
        return true;
    }
    serde_json::from_str::<Value>(v.get())
        .ok()
        .and_then(|tree| serde_json::to_writer(out, &tree).ok())
        .is_some()
}

impl RawResponses {
    /// `bytes` read in the usual case (see the module); None for anything
    /// else.
    pub fn read(bytes: &Bytes) -> Option<RawResponses> {
        // Members skipped here are checked only for syntax; the tree path
        // must be able to read the body too.
        if !tree_would_read(bytes) {
            return None;
        }
        let MapOnly(b): MapOnly<BodyView> = serde_json::from_slice(bytes).ok()?;
        if b.previous_response_id.is_some() || b.conversation.is_some() {
            return None;
        }
        let name = b.model.get();
        let plain = name.len() > 2 && name.starts_with('"') && !name.contains('\\');
        if !plain {
            return None;
        }
        let start = (name.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
        let model_at = start..start + name.len();

        let mut m = Messages {
            out: Vec::with_capacity(bytes.len() + 128),
            count: 0,
            open: None,
            chars: 0,
        };
        m.out.extend_from_slice(b",\"messages\":[");
        let instructions = optional_string(b.instructions)?;
        if let Some(lit) = instructions {
            m.start("system");
            m.out.extend_from_slice(b",\"content\":");
            m.out.extend_from_slice(lit.as_bytes());
            m.out.push(b'}');
            m.chars += lit_chars(lit);
        }
        match &b.input {
            TextOr::Text(t) if t.is_empty() => return None,
            TextOr::Text(t) => {
                m.start("user");
                m.out.extend_from_slice(b",\"content\":");
                write_text(&mut m.out, t);
                m.out.push(b'}');
                m.chars += t.chars().count();
            }
            TextOr::List(items) if items.is_empty() => return None,
            TextOr::List(items) => {
                for MapOnly(item) in items {
                    m.item(item)?;
                }
            }
        }
        let text = PromptText {
            bytes: bytes.clone(),
        };
        m.close();
        m.out.push(b']');
        let Messages {
            mut out,
            chars: prompt_chars,
            ..
        } = m;

        // Tools: function and custom ones as chat functions, the others
        // named as dropped.
        let (mut custom, mut dropped, mut passed) = (Vec::new(), Vec::new(), 0);
        let tools: Vec<MapOnly<ToolView>> = match b.tools {
            Some(t) => serde_json::from_str(t.get()).ok()?,
            None => Vec::new(),
        };
        for MapOnly(t) in &tools {
            let is_custom = match &*t.kind {
                "function" => false,
                "custom" => true,
                kind => {
                    let name = match string(t.name) {
                        Some(n) => owned(n)?,
                        None => kind.to_string(),
                    };
                    dropped.push(name);
                    continue;
                }
            };
            let name = string(t.name)?;
            out.extend_from_slice(if passed == 0 { b",\"tools\":[" } else { b"," });
            passed += 1;
            out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
            out.extend_from_slice(name.as_bytes());
            if let Some(d) = t.description {
                out.extend_from_slice(b",\"description\":");
                out.extend_from_slice(d.get().as_bytes());
            }
            if is_custom {
                out.extend_from_slice(b",\"parameters\":");
                out.extend_from_slice(CUSTOM_PARAMETERS.as_bytes());
                custom.push(owned(name)?);
            } else {
                for (k, v) in [
                    (&b",\"parameters\":"[..], t.parameters),
                    (&b",\"strict\":"[..], t.strict),
                ] {
                    if let Some(v) = v {
                        out.extend_from_slice(k);
                        out.extend_from_slice(v.get().as_bytes());
                    }
                }
            }
            out.extend_from_slice(b"}}");
        }
        let choice = match b.tool_choice.map(RawValue::get) {
            None => None,
            Some(c @ ("\"auto\"" | "\"none\"" | "\"required\"")) => Some(c),
            // An object (naming a tool) or anything else: the tree path.
            Some(_) => return None,
        };
        if passed > 0 {
            out.push(b']');
            if let Some(c) = choice {
                out.extend_from_slice(b",\"tool_choice\":");
                out.extend_from_slice(c.as_bytes());
            }
            if let Some(p) = b.parallel_tool_calls {
                out.extend_from_slice(if p {
                    b",\"parallel_tool_calls\":true"
                } else {
                    b",\"parallel_tool_calls\":false"
                });
            }
        }
        if b.max_output_tokens == Some(0) {
            return None;
        }
        if let Some(n) = b.max_output_tokens {
            out.extend_from_slice(b",\"max_tokens\":");
            json_num(&mut out, n);
        }
        let (temperature, top_p) = (number(b.temperature)?, number(b.top_p)?);
        for (k, v) in [
            (&b",\"temperature\":"[..], temperature),
            (&b",\"top_p\":"[..], top_p),
        ] {
            if let Some(v) = v {
                out.extend_from_slice(k);
                out.extend_from_slice(v.as_bytes());
            }
        }
        if let Some(effort) = optional_object(b.reasoning)?
            .as_ref()
            .and_then(reasoning_effort)
        {
            out.extend_from_slice(b",\"reasoning_effort\":");
            json_str(&mut out, effort);
        }
        if let Some(format) = optional_object(b.text)?.as_ref().and_then(response_format) {
            out.extend_from_slice(b",\"response_format\":");
            serde_json::to_writer(&mut out, &format).ok()?;
        }
        let (user, safety) = (
            optional_string(b.user)?,
            optional_string(b.safety_identifier)?,
        );
        if let Some(u) = user.or(safety) {
            out.extend_from_slice(b",\"user\":");
            out.extend_from_slice(u.as_bytes());
        }
        let stream = b.stream == Some(true);
        if stream {
            out.extend_from_slice(b",\"stream\":true");
        }
        out.push(b'}');

        let echo = Echo::written(custom, prompt_chars, |k, o| match k {
            "instructions" => echo_raw(o, b.instructions),
            "max_output_tokens" => b.max_output_tokens.map(|n| json_num(o, n)).is_some(),
            "metadata" => echo_raw(o, b.metadata),
            "parallel_tool_calls" => b
                .parallel_tool_calls
                .map(|p| o.extend_from_slice(if p { b"true" } else { b"false" }))
                .is_some(),
            "reasoning" => echo_raw(o, b.reasoning),
            "temperature" => echo_raw(o, b.temperature),
            "text" => echo_raw(o, b.text),
            "tool_choice" => echo_raw(o, b.tool_choice),
            "tools" => echo_raw(o, b.tools),
            "top_p" => echo_raw(o, b.top_p),
            _ => false,
        });
        Some(RawResponses {
            model: inside(name).to_string(),
            model_at,
            chat_tail: Bytes::from(out),
            stream,
            prompt_chars,
            text,
            max_output: b.max_output_tokens,
            echo,
            dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::responses_read_without_a_tree as same_as_the_tree_path;
    use serde_json::json;

    /// A later turn of a Codex session, as Codex sends it.
    pub(super) fn codex_body() -> Value {
        json!({
            "model": "gpt-5-codex",
            "instructions": "You are Codex.\nBe brief.",
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>sandboxed</permissions>"}]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "<environment_context>cwd: /w</environment_context>"},
                    {"type": "input_text", "text": "fix the \"tests\" — café"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Looking"}], "content": null, "encrypted_content": "gAAAAB..."},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running them.", "annotations": []}]},
                {"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"cargo\",\"test\"]}", "call_id": "call_1"},
                {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch", "call_id": "call_2", "status": "completed"},
                {"type": "function_call_output", "call_id": "call_1", "output": "ok: 3 passed"},
                {"type": "custom_tool_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "Done."}, {"type": "input_text", "text": "1 file"}]},
                {"role": "user", "content": "thanks"}
            ],
            "tools": [
                {"type": "function", "name": "shell", "description": "Runs a command.", "strict": false,
                 "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}},
                {"type": "custom", "name": "apply_patch", "description": "Edits files.", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
                {"type": "web_search"}
            ],
            "tool_choice": "auto",
            "parallel_tool_calls": false,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "store": false,
            "stream": true,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "019a-session",
            "text": {"verbosity": "low"}
        })
    }

    fn read(v: &Value) -> Option<RawResponses> {
        RawResponses::read(&Bytes::from(serde_json::to_vec(v).unwrap()))
    }

    fn chat_of(raw: &RawResponses) -> Value {
        let text = [&b"{\"model\":\"m\""[..], &raw.chat_tail].concat();
        serde_json::from_slice(&text).unwrap()
    }

    #[test]
    fn a_codex_body_is_read_without_a_tree_into_the_tree_paths_chat_body() {
        let body = codex_body();
        assert!(same_as_the_tree_path(&serde_json::to_vec(&body).unwrap()));
        let raw = read(&body).unwrap();
        assert_eq!(raw.model, "gpt-5-codex");
        assert!(raw.stream);
        assert_eq!(raw.dropped, ["web_search"]);
        assert_eq!(raw.echo.custom, ["apply_patch"]);
        assert_eq!(raw.max_output, None);
        let chat = chat_of(&raw);
        let messages = chat["messages"].as_array().unwrap();
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            [
                "system",
                "system",
                "user",
                "assistant",
                "tool",
                "tool",
                "user"
            ]
        );
        // The calls join the assistant's text, past the reasoning item.
        assert_eq!(messages[3]["content"], "Running them.");
        assert_eq!(
            messages[3]["tool_calls"][1]["function"]["arguments"],
            r#"{"input":"*** Begin Patch\n*** End Patch"}"#
        );
        assert_eq!(
            messages[2]["content"],
            "<environment_context>cwd: /w</environment_context>\nfix the \"tests\" — café"
        );
        assert_eq!(messages[5]["content"], "Done.\n1 file");
        assert_eq!(chat["tools"].as_array().unwrap().len(), 2);
        assert_eq!(chat["reasoning_effort"], "medium");
        assert_eq!(chat["parallel_tool_calls"], false);
        assert!(chat.get("stream_options").is_none(), "the relay adds it");
    }

    #[test]
    fn a_string_input_counts_the_characters_its_escapes_spell() {
        let text =
            br#"{"model":"m","input":"a\n\u00e9\"\\ b","max_output_tokens":7,"temperature":0.50}"#;
        assert!(same_as_the_tree_path(text));
        let raw = RawResponses::read(&Bytes::from_static(text)).unwrap();
        assert_eq!(raw.prompt_chars, 7);
        assert_eq!(raw.text.chars(), 7);
        assert_eq!(raw.max_output, Some(7));
        assert_eq!(chat_of(&raw)["max_tokens"], 7);
        assert_eq!(&text[raw.model_at.clone()], b"\"m\"");
    }

    #[test]
    fn a_member_written_over_lines_is_echoed_on_one_line() {
        let text = b"{\"model\":\"m\",\"input\":\"hi\",\"tools\":[\n  {\"type\": \"function\",\n   \"name\": \"f\"}\n]}";
        assert!(same_as_the_tree_path(text));
        let raw = RawResponses::read(&Bytes::from_static(text)).unwrap();
        assert_eq!(
            raw.echo.fields()["tools"],
            json!([{"type": "function", "name": "f"}])
        );
        // Each event of a stream is one `data:` line, the echo in it.
        let mut stream =
            super::super::ResponsesStream::new(super::super::ResponseMeta::new("m"), raw.echo);
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]});
        let frames = stream.on_chunk(&chunk);
        assert!(!frames.is_empty());
        for f in frames {
            let (crate::wire::sse::SseFrame::Event { data: text, .. }
            | crate::wire::sse::SseFrame::Data(text)) = f;
            assert!(!text.contains('\n'), "{text}");
        }
    }

    #[test]
    fn bodies_the_checks_must_judge_are_left_to_the_tree_path() {
        let base = json!({"model": "m", "input": "hi"});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        let cases = [
            with("previous_response_id", json!("resp_1")),
            with("conversation", json!("conv_1")),
            with("input", json!("")),
            with("input", json!([])),
            with("input", json!([{"type": "item_reference", "id": "msg_1"}])),
            with(
                "input",
                json!([{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]),
            ),
            with(
                "input",
                json!([{"type": "message", "role": "tool", "content": "x"}]),
            ),
            with("input", json!([{"type": "web_search_call", "id": "ws_1"}])),
            with(
                "input",
                json!([{"type": "function_call", "call_id": "c", "name": "f"}]),
            ),
            with("tool_choice", json!({"type": "function", "name": "f"})),
            with("tool_choice", json!("any")),
            with("max_output_tokens", json!(0)),
            with("max_output_tokens", json!(1.5)),
            with("temperature", json!("hot")),
            with("instructions", json!(["a"])),
            with("reasoning", json!("high")),
            with("user", json!(5)),
            with("model", json!("")),
            with("model", json!("a\"b")),
            with("tools", json!([{"type": "function"}])),
        ];
        for body in cases {
            assert!(read(&body).is_none(), "{body}");
        }
        // A key written twice is for a tree to settle.
        let twice = br#"{"model":"m","input":"a","input":"b"}"#;
        assert!(RawResponses::read(&Bytes::from_static(twice)).is_none());
        // Inside an item, a key the reading skips written twice is counted
        // as a tree counts it (the last one).
        let twice_inside =
            br#"{"model":"m","input":[{"role":"user","content":"a","note":"x","note":"yy"}]}"#;
        assert!(same_as_the_tree_path(twice_inside));
        let raw = RawResponses::read(&Bytes::from_static(twice_inside)).unwrap();
        assert_eq!(raw.text.chars(), 3);
        // An item of more keys than the counter keeps is counted in a tree.
        let mut item = json!({"role": "user", "content": "a"});
        for i in 0..16 {
            item[format!("x{i}")] = json!("b");
        }
        let crowded = serde_json::to_vec(&json!({"model": "m", "input": [item]})).unwrap();
        assert!(same_as_the_tree_path(&crowded));
        assert_eq!(
            RawResponses::read(&Bytes::from(crowded))
                .unwrap()
                .text
                .chars(),
            17
        );
        // The same bodies with nothing wrong are read.
        assert!(read(&base).is_some());
    }
}

#[cfg(test)]
mod agreement {
    use crate::fuzzing::responses_read_without_a_tree;
    use serde_json::{json, Value};

    /// Every node of `v` (by its path of keys and indexes).
    fn paths(v: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
        out.push(at.clone());
        match v {
            Value::Object(o) => {
                for (k, c) in o {
                    at.push(json!(k));
                    paths(c, at, out);
                    at.pop();
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    at.push(json!(i));
                    paths(c, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }

    /// The node at `path`, and a way to remove it from its parent.
    fn edit(v: &mut Value, path: &[Value], new: Option<&Value>) {
        let Some((last, parent)) = path.split_last() else {
            return;
        };
        let mut node = v;
        for p in parent {
            node = match p {
                Value::String(k) => &mut node[k.as_str()],
                _ => &mut node[p.as_u64().unwrap() as usize],
            };
        }
        match (node, last, new) {
            (Value::Object(o), Value::String(k), Some(n)) => {
                o.insert(k.clone(), n.clone());
            }
            (Value::Object(o), Value::String(k), None) => {
                o.remove(k);
            }
            (Value::Array(a), i, Some(n)) => a[i.as_u64().unwrap() as usize] = n.clone(),
            (Value::Array(a), i, None) => {
                a.remove(i.as_u64().unwrap() as usize);
            }
            _ => {}
        }
    }

    /// Each node of a Codex body replaced by each of a set of values, or
    /// removed: the body read without a tree either is left to the tree
    /// path or gives what the tree path gives (checked by
    /// `responses_read_without_a_tree`).
    #[test]
    fn the_read_without_a_tree_agrees_with_the_tree_path_on_every_edit_of_a_codex_body() {
        let body = super::tests::codex_body();
        let mut all = Vec::new();
        paths(&body, &mut Vec::new(), &mut all);
        let values = [
            json!(null),
            json!(""),
            json!("x\n\u{e9}\"y"),
            json!("auto"),
            json!("reasoning"),
            json!("message"),
            json!("custom"),
            json!(0),
            json!(7),
            json!(1.5),
            json!(-1),
            json!(true),
            json!([]),
            json!([{"type": "input_text", "text": "t"}]),
            json!({}),
            json!({"type": "json_object"}),
            json!({"effort": "none"}),
        ];
        let (mut read, mut accepted) = (0, 0);
        for path in all.iter().filter(|p| !p.is_empty()) {
            for new in values.iter().map(Some).chain([None]) {
                let mut b = body.clone();
                edit(&mut b, path, new);
                let text = serde_json::to_vec(&b).unwrap();
                if responses_read_without_a_tree(&text) {
                    read += 1;
                }
                let b = b.as_object().unwrap();
                let tree = super::super::ResponsesRequest::parse(b.clone());
                if tree.is_ok() && crate::models::requested_model(b).is_ok() {
                    accepted += 1;
                }
            }
        }
        // Of the edits the checks accept, the usual reading takes most.
        assert!(
            read * 10 >= accepted * 9,
            "{read} of {accepted} read without a tree"
        );
    }
}
