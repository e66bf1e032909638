//! Chat stream chunks and plain answers as the translations into other
//! dialects read them (`crate::wire::messages`, `crate::wire::responses`):
//! choice 0's delta or message, borrowed. Chunks have two ways in, one
//! reading: from a JSON tree ([`ChunkDelta::of_tree`], the hooks' tree path)
//! or from the upstream's text ([`ChunkText::read`], without a tree: the
//! usual chunk's shapes only; anything else is None and goes the tree path,
//! which reads it the same). Plain answers: [`AnswerText::read`], likewise.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::wire::chat::usage::UsageFigures;
use crate::wire::json::MapOnly;

/// What a translation reads of one chunk: choice 0 (the first choice whose
/// `index` is 0 or absent).
#[derive(Debug, Default)]
pub struct ChunkDelta<'a> {
    pub reasoning: Option<Cow<'a, str>>,
    pub content: Option<Cow<'a, str>>,
    /// `content` as the upstream wrote it, JSON text with its quotes (read
    /// from text only): a translation copies it instead of escaping the
    /// string again.
    pub content_json: Option<&'a str>,
    pub tool_calls: Vec<ToolCallDelta<'a>>,
    pub finish_reason: Option<Cow<'a, str>>,
}

/// Equal when they read the same (however `content` was written).
impl PartialEq for ChunkDelta<'_> {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.reasoning,
            &self.content,
            &self.tool_calls,
            &self.finish_reason,
        ) == (
            &other.reasoning,
            &other.content,
            &other.tool_calls,
            &other.finish_reason,
        )
    }
}

impl Eq for ChunkDelta<'_> {}

impl ChunkDelta<'_> {
    /// Writes `content` as a JSON string: the upstream's own text when there
    /// is one (no escape scan), else escaped.
    pub fn write_content(&self, out: &mut Vec<u8>) {
        match (self.content_json, self.content.as_deref()) {
            (Some(json), _) => out.extend_from_slice(json.as_bytes()),
            (None, Some(text)) => crate::wire::sse::json_str(out, text),
            (None, None) => out.extend_from_slice(b"null"),
        }
    }
}

/// A JSON string read as both its text (quotes and escapes as written) and
/// the string it spells (borrowed when it has no escapes).
struct JsonStr<'a> {
    json: &'a str,
    text: Cow<'a, str>,
}

impl<'de: 'a, 'a> Deserialize<'de> for JsonStr<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let json = <&'a RawValue>::deserialize(d)?.get();
        if !json.starts_with('"') {
            return Err(D::Error::custom("not a string"));
        }
        let text = if json.contains('\\') {
            // Escapes undone (and checked: a lone surrogate fails here).
            Cow::Owned(serde_json::from_str::<String>(json).map_err(D::Error::custom)?)
        } else {
            Cow::Borrowed(json.get(1..json.len() - 1).unwrap_or(""))
        };
        Ok(JsonStr { json, text })
    }
}

/// One piece of a streamed tool call.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ToolCallDelta<'a> {
    /// The call's `index` (0 when absent or not a whole number).
    pub index: u64,
    /// Whether it had one.
    pub has_index: bool,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub arguments: Option<Cow<'a, str>>,
}

fn tree_str(v: Option<&Value>) -> Option<Cow<'_, str>> {
    v.and_then(Value::as_str).map(Cow::Borrowed)
}

impl<'a> ChunkDelta<'a> {
    /// Choice 0 of a chunk tree (None members where the tree has no string).
    pub fn of_tree(chunk: &'a Value) -> ChunkDelta<'a> {
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            })
        else {
            return ChunkDelta::default();
        };
        let delta = choice.get("delta");
        let field = |k: &str| tree_str(delta.and_then(|d| d.get(k)));
        let tool_calls = delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|tc| ToolCallDelta {
                index: tc.get("index").and_then(Value::as_u64).unwrap_or(0),
                has_index: tc.get("index").and_then(Value::as_u64).is_some(),
                id: tree_str(tc.get("id")),
                name: tree_str(tc.pointer("/function/name")),
                arguments: tree_str(tc.pointer("/function/arguments")),
            })
            .collect();
        ChunkDelta {
            reasoning: field("reasoning_content"),
            content: field("content"),
            content_json: None,
            tool_calls,
            finish_reason: tree_str(choice.get("finish_reason")),
        }
    }
}

/// A chunk read from its text: choice 0's delta and what the relay reads of
/// every choice.
#[derive(Debug)]
pub struct ChunkText<'a> {
    pub delta: ChunkDelta<'a>,
    /// The number of choices.
    pub choices: usize,
    /// Characters of generated text in every choice (as
    /// [`completion_chars`](crate::wire::chat::completion_chars) counts them).
    pub chars: usize,
    /// A choice has a `finish_reason`.
    pub finish: bool,
    /// The `usage` object, when there is one.
    pub usage: Option<Value>,
    /// A `usage` member other than `null` (an object or not).
    pub has_usage: bool,
}

#[derive(Deserialize)]
struct ChunkView<'a> {
    #[serde(borrow)]
    choices: Choices<'a>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

/// A chunk's `choices` as they are read: choice 0 kept, what the relay
/// reads of the others gathered (no list of them is built).
#[derive(Default)]
struct Choices<'a> {
    first: Option<ChoiceView<'a>>,
    count: usize,
    chars: usize,
    finish: bool,
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Choices<'a>, A::Error> {
                let mut all = Choices::default();
                while let Some(MapOnly(c)) = seq.next_element::<MapOnly<ChoiceView<'a>>>()? {
                    all.count += 1;
                    all.finish |= c.finish_reason.is_some();
                    all.chars += c.delta.as_ref().map_or(0, |MapOnly(d)| chars_of(d));
                    if all.first.is_none() && c.index.unwrap_or(0) == 0 {
                        all.first = Some(c);
                    }
                }
                Ok(all)
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<MapOnly<DeltaView<'a>>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<JsonStr<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<MapOnly<CallView<'a>>>>,
}

#[derive(Deserialize)]
struct CallView<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<MapOnly<FunctionView<'a>>>,
}

#[derive(Deserialize)]
struct FunctionView<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

impl<'a> ChunkText<'a> {
    /// The usual chunk (an object with a list of choices, string members
    /// where strings go, no key written twice); None for anything else.
    /// Unlike a client's body, a chunk is not first checked to be text a
    /// tree would read (`wire::json::tree_would_read`): the members read here
    /// are read as a tree reads them, and oddities in the members skipped
    /// (a lone surrogate escape, a huge number) change nothing that is
    /// written. That check was half of what translating a stream cost
    /// beyond relaying it (docs/performance.md).
    pub fn read(data: &'a str) -> Option<ChunkText<'a>> {
        if !data.trim_start().starts_with('{') {
            return None;
        }
        let MapOnly(view): MapOnly<ChunkView<'a>> = serde_json::from_str(data).ok()?;
        let has_usage = view.usage.is_some_and(|u| u.get() != "null");
        let usage = usage_of(view.usage).ok()?;
        let Choices {
            first,
            count: choices,
            chars,
            finish,
        } = view.choices;
        let delta = match first {
            Some(c) => delta_of(c.delta.map(|MapOnly(d)| d), c.finish_reason),
            None => ChunkDelta::default(),
        };
        Some(ChunkText {
            delta,
            choices,
            chars,
            finish,
            usage,
            has_usage,
        })
    }
}

/// A plain chat answer read from its text: choice 0's message (the first
/// choice, as `/choices/0`) and what the relay reads of the whole answer.
#[derive(Debug)]
pub struct AnswerText<'a> {
    /// Choice 0's message, read as a delta is (no `index` of choice).
    pub message: ChunkDelta<'a>,
    /// Characters of generated text in every choice (as
    /// [`completion_chars`](crate::wire::chat::completion_chars) counts them).
    pub chars: usize,
    /// The `usage` object's figures, when there is one.
    pub usage: Option<UsageFigures>,
}

#[derive(Deserialize)]
struct AnswerView<'a> {
    #[serde(borrow)]
    choices: Vec<MapOnly<AnswerChoiceView<'a>>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AnswerChoiceView<'a> {
    #[serde(borrow, default)]
    message: Option<MapOnly<DeltaView<'a>>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

/// Choice 0's reading of a delta or message.
fn delta_of<'a>(d: Option<DeltaView<'a>>, finish_reason: Option<Cow<'a, str>>) -> ChunkDelta<'a> {
    let (reasoning, content, calls) = match d {
        Some(d) => (d.reasoning_content, d.content, d.tool_calls),
        None => (None, None, None),
    };
    let (content, content_json) = match content {
        Some(c) => (Some(c.text), Some(c.json)),
        None => (None, None),
    };
    ChunkDelta {
        reasoning,
        content,
        content_json,
        tool_calls: calls
            .into_iter()
            .flatten()
            .map(|MapOnly(tc)| {
                let (name, arguments) = match tc.function {
                    Some(MapOnly(f)) => (f.name, f.arguments),
                    None => (None, None),
                };
                ToolCallDelta {
                    index: tc.index.unwrap_or(0),
                    has_index: tc.index.is_some(),
                    id: tc.id,
                    name,
                    arguments,
                }
            })
            .collect(),
        finish_reason,
    }
}

/// Characters of generated text in a delta or message.
fn chars_of(d: &DeltaView<'_>) -> usize {
    let mut chars = d.content.as_ref().map_or(0, |t| t.text.chars().count());
    for MapOnly(tc) in d.tool_calls.iter().flatten() {
        chars += tc
            .function
            .as_ref()
            .and_then(|MapOnly(f)| f.arguments.as_deref())
            .map_or(0, |a| a.chars().count());
    }
    chars
}

/// A `usage` member: its object, when it is one (None for anything else;
/// Err when its text is not a tree's).
fn usage_of(raw: Option<&RawValue>) -> Result<Option<Value>, ()> {
    let Some(u) = raw.filter(|u| u.get() != "null") else {
        return Ok(None);
    };
    let v: Value = serde_json::from_str(u.get()).map_err(|_| ())?;
    Ok(v.is_object().then_some(v))
}

impl<'a> AnswerText<'a> {
    /// The usual answer (an object with a list of choices, string members
    /// where strings go, no key written twice); None for anything else.
    /// As for chunks ([`ChunkText::read`]), the text is not first checked
    /// with `tree_would_read`: the translations write a new answer from
    /// what is read here, so what a tree would make of the members skipped
    /// changes nothing written.
    pub fn read(bytes: &'a [u8]) -> Option<AnswerText<'a>> {
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
        if *first != b'{' {
            return None;
        }
        let MapOnly(view): MapOnly<AnswerView<'a>> = serde_json::from_slice(bytes).ok()?;
        // Typed: no tree of the usage object is made.
        let usage = match view.usage {
            Some(u) => UsageFigures::read(u.get()).ok()?,
            None => None,
        };
        let chars = view
            .choices
            .iter()
            .filter_map(|MapOnly(c)| c.message.as_ref())
            .map(|MapOnly(m)| chars_of(m))
            .sum();
        let message = match view.choices.into_iter().next() {
            Some(MapOnly(c)) => delta_of(c.message.map(|MapOnly(m)| m), c.finish_reason),
            None => ChunkDelta::default(),
        };
        Some(AnswerText {
            message,
            chars,
            usage,
        })
    }

    /// The tokens of the answer: its usage, else the estimate (as the
    /// relay's tree path counts them).
    pub fn tokens(&self, prompt_estimate: i64) -> crate::usage::Tokens {
        self.usage
            .and_then(|u| u.tokens())
            .unwrap_or(crate::usage::Tokens::estimate(
                prompt_estimate,
                crate::usage::estimate_tokens(self.chars),
            ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Chunks of the usual shapes: read from text as from a tree.
    #[test]
    fn the_text_reading_agrees_with_the_tree_reading() {
        let chunks = [
            json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "h\u{e9}\"\n"}}]}),
            json!({"choices": [{"delta": {"reasoning_content": "think"}}]}),
            json!({"choices": [{"index": 1, "delta": {"content": "other"}}, {"index": 0, "delta": {"content": "mine"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "Read", "arguments": ""}},
                {"index": 1, "function": {"arguments": "{\"a\":1}"}},
                {"id": "x"}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            json!({"choices": [{"index": 0, "delta": {"content": null, "tool_calls": null}}], "usage": null}),
            json!({"choices": [{"index": 2, "delta": {"content": "x"}}]}),
        ];
        for c in chunks {
            let text = c.to_string();
            let read = ChunkText::read(&text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(read.delta, ChunkDelta::of_tree(&c), "{text}");
            let obj = c.as_object().unwrap();
            assert_eq!(
                read.chars,
                crate::wire::chat::completion_chars(obj, "delta"),
                "{text}"
            );
            assert_eq!(
                read.usage.as_ref(),
                obj.get("usage").filter(|u| u.is_object())
            );
        }
    }

    #[test]
    fn unusual_chunks_are_left_to_the_tree() {
        for text in [
            r#"{"error": {"message": "overloaded"}}"#,
            r#"{"choices": [{"delta": {"content": [{"type": "text", "text": "x"}]}}]}"#,
            r#"{"choices": [{"delta": {"content": 5}}]}"#,
            r#"{"choices": [{"index": -1, "delta": {}}]}"#,
            r#"{"choices": [{"finish_reason": 1}]}"#,
            r#"{"choices": [], "choices": []}"#,
            r#"{"choices": [["x"]]}"#,
            r#"[{"choices": []}]"#,
            "not json",
        ] {
            assert!(ChunkText::read(text).is_none(), "{text}");
        }
    }

    /// A tree refuses these, but only for members the translation skips:
    /// the chunk is read as the chat relay's splice reads it.
    #[test]
    fn oddities_in_skipped_members_do_not_stop_a_chunk() {
        for text in [
            r#"{"choices": [{"delta": {"content": "hi"}}], "x": 1e400}"#,
            r#"{"choices": [{"delta": {"content": "hi"}}], "x": "\ud800"}"#,
        ] {
            let read = ChunkText::read(text).expect("read");
            assert_eq!(read.delta.content.as_deref(), Some("hi"), "{text}");
        }
        // In a member that is read, the same escape still leaves it to the tree.
        assert!(ChunkText::read(r#"{"choices": [{"delta": {"content": "\ud800"}}]}"#).is_none());
    }
}

#[cfg(test)]
mod json_str_tests {
    use super::*;

    #[test]
    fn a_content_string_is_kept_as_written_and_read_as_a_tree_reads_it() {
        let text = r#"{"choices": [{"delta": {"content": "caf\u00e9 \"x\"\n"}}]}"#;
        let read = ChunkText::read(text).unwrap();
        assert_eq!(read.delta.content_json, Some(r#""caf\u00e9 \"x\"\n""#));
        assert_eq!(read.delta.content.as_deref(), Some("café \"x\"\n"));
        let mut out = Vec::new();
        read.delta.write_content(&mut out);
        assert_eq!(out, br#""caf\u00e9 \"x\"\n""#);
        // What a tree would refuse is not kept: a raw line break in a string.
        assert!(ChunkText::read("{\"choices\": [{\"delta\": {\"content\": \"a\nb\"}}]}").is_none());
        // From a tree, the string is written.
        let tree = serde_json::json!({"choices": [{"delta": {"content": "é\n"}}]});
        let delta = ChunkDelta::of_tree(&tree);
        let mut out = Vec::new();
        delta.write_content(&mut out);
        assert_eq!(out, "\"é\\n\"".as_bytes());
    }
}
