//! Chat answers and stream chunks rewritten without a JSON tree: the
//! alias spliced in as `model`, `usage` removed for clients that did not ask
//! for it, all by editing the upstream's text. Anything unusual returns
//! `None`, and the caller takes the tree path (which also words the errors).

use bytes::Bytes;
use serde_json::Value;

use super::tool_call_chars;
use crate::usage::Tokens;
use crate::wire::json::MapOnly;

/// The fields of a plain answer the relay reads, borrowed from its bytes.
#[derive(serde::Deserialize)]
struct AnswerView<'a> {
    #[serde(borrow)]
    model: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    choices: Option<&'a serde_json::value::RawValue>,
    usage: Option<UsageView>,
}

#[derive(serde::Deserialize)]
struct UsageView {
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    prompt_tokens_details: Option<DetailsView>,
    completion_tokens_details: Option<CompletionDetailsView>,
}

#[derive(serde::Deserialize)]
struct DetailsView {
    cached_tokens: Option<i64>,
    cache_write_tokens: Option<i64>,
}

#[derive(serde::Deserialize)]
struct CompletionDetailsView {
    reasoning_tokens: Option<i64>,
}

/// A plain answer as the upstream's bytes with `model` naming the alias
/// (added when missing), and its tokens; None when it needs the tree path
/// (no usage, not an object, `choices` not a list, repeated keys).
pub fn splice_answer(bytes: &[u8], alias: &str) -> Option<(Bytes, Tokens)> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    let view: AnswerView<'_> = serde_json::from_slice(bytes).ok()?;
    if !view.choices?.get().starts_with('[') {
        return None;
    }
    let usage = view.usage?;
    let details = usage.prompt_tokens_details;
    let tokens = Tokens {
        prompt: usage.prompt_tokens?,
        completion: usage.completion_tokens.unwrap_or(0),
        cache_read: details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
        cache_write: details.and_then(|d| d.cache_write_tokens).unwrap_or(0),
        reasoning: usage
            .completion_tokens_details
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
        estimated: false,
    };
    let mut out = Vec::with_capacity(bytes.len() + alias.len() + 16);
    match view.model {
        Some(m) => {
            let start = (m.get().as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
            let end = start + m.get().len();
            out.extend_from_slice(bytes.get(..start)?);
            serde_json::to_writer(&mut out, alias).ok()?;
            out.extend_from_slice(bytes.get(end..)?);
        }
        None => {
            let open = bytes.iter().position(|b| *b == b'{')?;
            out.extend_from_slice(&bytes[..=open]);
            out.extend_from_slice(b"\"model\":");
            serde_json::to_writer(&mut out, alias).ok()?;
            out.push(b',');
            out.extend_from_slice(&bytes[open + 1..]);
        }
    }
    Some((Bytes::from(out), tokens))
}

/// The fields of a stream chunk the relay reads, borrowed from its text.
#[derive(serde::Deserialize)]
struct ChunkView<'a> {
    #[serde(borrow)]
    model: Option<&'a serde_json::value::RawValue>,
    choices: Option<ChoicesView>,
    /// Present even when null (a null `usage` is removed too).
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    usage: Option<&'a serde_json::value::RawValue>,
}

/// What the relay reads of a chunk's `choices`, gathered as they are
/// parsed (no list of them is built).
#[derive(Default)]
struct ChoicesView {
    count: usize,
    /// Characters of generated text.
    chars: usize,
    /// A choice finished.
    finish: bool,
}

impl<'de> serde::Deserialize<'de> for ChoicesView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ChoicesView;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ChoicesView, A::Error> {
                let mut view = ChoicesView::default();
                while let Some(MapOnly(c)) = seq.next_element::<MapOnly<ChoiceView<'de>>>()? {
                    view.count += 1;
                    view.finish |= c.finish_reason.is_some();
                    if let Some(MapOnly(d)) = &c.delta {
                        view.chars += d.content.as_deref().map_or(0, |t| t.chars().count());
                        if let Some(calls) = d.tool_calls {
                            let v: Value = serde_json::from_str(calls.get())
                                .map_err(serde::de::Error::custom)?;
                            view.chars += tool_call_chars(Some(&v));
                        }
                    }
                }
                Ok(view)
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(serde::Deserialize)]
struct ChoiceView<'a> {
    #[serde(borrow)]
    delta: Option<MapOnly<DeltaView<'a>>>,
    #[serde(borrow)]
    finish_reason: Option<&'a serde_json::value::RawValue>,
}

#[derive(serde::Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    tool_calls: Option<&'a serde_json::value::RawValue>,
}

/// What [`splice_chunk_into`] learnt of a chunk.
pub struct ChunkFacts {
    /// The chunk was written out (false: drop it).
    pub sent: bool,
    pub usage: Option<Value>,
    pub chars: usize,
    pub finish: bool,
}

/// The relay's work on one stream chunk without a JSON tree: `model` names
/// the alias (given as JSON), and unless the client asked for usage, `usage`
/// is removed (the usage-only chunk dropped), all by splicing the upstream's
/// text, appended to `out` (the event's frame being built: no copy of its
/// own). None when the chunk needs the tree path (an error, content parts,
/// odd layout); `out` may then hold part of the chunk, to be discarded.
pub fn splice_chunk_into(
    data: &str,
    alias_json: &[u8],
    client_usage: bool,
    out: &mut Vec<u8>,
) -> Option<ChunkFacts> {
    if !data.trim_start().starts_with('{') {
        return None;
    }
    let view: ChunkView<'_> = serde_json::from_str(data).ok()?;
    let choices = view.choices?;
    let usage_raw = view.usage.filter(|u| u.get() != "null");
    let usage = match usage_raw {
        Some(u) => Some(serde_json::from_str::<Value>(u.get()).ok()?).filter(Value::is_object),
        None => None,
    };
    let mut facts = ChunkFacts {
        sent: false,
        usage,
        chars: choices.chars,
        finish: choices.finish,
    };
    if !client_usage && choices.count == 0 && usage_raw.is_some() {
        return Some(facts);
    }
    let offset = |raw: &serde_json::value::RawValue| -> Option<(usize, usize)> {
        let start = (raw.get().as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        Some((start, start + raw.get().len()))
    };
    // At most two edits, (start, end, what goes in between), applied in order.
    let model_member: Vec<u8>;
    let mut edits: [Option<(usize, usize, &[u8])>; 2] = [None, None];
    match view.model {
        Some(m) => {
            let (a, b) = offset(m)?;
            edits[0] = Some((a, b, alias_json));
        }
        None => {
            let open = data.find('{')?;
            let mut ins = b"\"model\":".to_vec();
            ins.extend_from_slice(alias_json);
            if !data[open + 1..].trim_start().starts_with('}') {
                ins.push(b',');
            }
            model_member = ins;
            edits[0] = Some((open + 1, open + 1, &model_member));
        }
    }
    if !client_usage {
        if let Some(u) = view.usage {
            let (a, b) = member_span(data, offset(u)?)?;
            edits[1] = Some((a, b, b""));
        }
    }
    if let [Some(x), Some(y)] = edits {
        if y.0 < x.0 {
            edits = [Some(y), Some(x)];
        }
    }
    let bytes = data.as_bytes();
    out.reserve(data.len() + alias_json.len() + 16);
    let mut at = 0;
    for (a, b, rep) in edits.into_iter().flatten() {
        if a < at {
            return None;
        }
        out.extend_from_slice(bytes.get(at..a)?);
        out.extend_from_slice(rep);
        at = b;
    }
    out.extend_from_slice(bytes.get(at..)?);
    facts.sent = true;
    Some(facts)
}

/// The bytes to cut to remove the member `"usage": <value>` whose value
/// spans `value`, with one neighbouring comma. None unless the key is
/// written plainly as `"usage"`.
fn member_span(data: &str, value: (usize, usize)) -> Option<(usize, usize)> {
    let b = data.as_bytes();
    let mut i = value.0;
    while i > 0 && b[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    if i == 0 || b[i - 1] != b':' {
        return None;
    }
    i -= 1;
    while i > 0 && b[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    let key_start = i.checked_sub(7)?;
    if &b[key_start..i] != b"\"usage\"" {
        return None;
    }
    let mut j = key_start;
    while j > 0 && b[j - 1].is_ascii_whitespace() {
        j -= 1;
    }
    match b.get(j.checked_sub(1)?)? {
        // `, "usage": v`: cut from the comma before it.
        b',' => Some((j - 1, value.1)),
        // `{"usage": v, ...` or `{"usage": v}`: cut the comma after it, if any.
        b'{' => {
            let mut k = value.1;
            while k < b.len() && b[k].is_ascii_whitespace() {
                k += 1;
            }
            if b.get(k) == Some(&b',') {
                k += 1;
            }
            Some((key_start, k))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::chat::{rewrite_model, strip_usage};
    use serde_json::json;

    /// A stream chunk after [`splice_chunk`].
    #[derive(Debug, PartialEq)]
    struct SplicedChunk {
        /// The chunk to send (None: drop it).
        out: Option<Vec<u8>>,
        /// The upstream's usage object, if the chunk has one.
        usage: Option<Value>,
        /// Characters of generated text (for the estimate without usage).
        chars: usize,
        /// A choice finished.
        finish: bool,
    }

    /// [`splice_chunk_into`] on its own buffer, with the alias as text.
    fn splice_chunk(data: &str, alias: &str, client_usage: bool) -> Option<SplicedChunk> {
        let alias_json = serde_json::to_vec(alias).ok()?;
        let mut out = Vec::new();
        let facts = splice_chunk_into(data, &alias_json, client_usage, &mut out)?;
        Some(SplicedChunk {
            out: facts.sent.then_some(out),
            usage: facts.usage,
            chars: facts.chars,
            finish: facts.finish,
        })
    }

    #[test]
    fn splice_answer_names_the_alias_and_keeps_every_other_byte() {
        let up = br#"{"id":"x","object":"chat.completion","model":"up/m","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":4},"x_extra":{"k":[1,2]}}"#;
        let (out, tokens) = splice_answer(up, "alias").expect("fast path");
        assert_eq!(
            std::str::from_utf8(&out).expect("utf8"),
            r#"{"id":"x","object":"chat.completion","model":"alias","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":4},"x_extra":{"k":[1,2]}}"#
        );
        assert_eq!(
            tokens,
            Tokens {
                prompt: 3,
                completion: 4,
                ..Tokens::default()
            }
        );
        // The alias is JSON-escaped.
        let (out, _) = splice_answer(up, "a\"b").expect("fast path");
        let v: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["model"], "a\"b");
    }

    #[test]
    fn splice_answer_adds_a_missing_model() {
        let up = br#" {"choices":[],"usage":{"prompt_tokens":1}}"#;
        let (out, tokens) = splice_answer(up, "alias").expect("fast path");
        let v: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["model"], "alias");
        assert_eq!(v["choices"], json!([]));
        assert_eq!(
            tokens,
            Tokens {
                prompt: 1,
                completion: 0,
                ..Tokens::default()
            }
        );
    }

    #[test]
    fn splice_answer_leaves_unusual_answers_to_the_tree_path() {
        for up in [
            &br#"{"model":"m","choices":[{}]}"#[..],
            br#"{"model":"m","choices":[{}],"usage":null}"#,
            br#"{"model":"m","choices":{},"usage":{"prompt_tokens":1}}"#,
            br#"{"model":"m","model":"n","choices":[],"usage":{"prompt_tokens":1}}"#,
            br#"{"error":{"message":"no"}}"#,
            br#"["model","choices"]"#,
            b"not json",
        ] {
            assert!(
                splice_answer(up, "a").is_none(),
                "{}",
                String::from_utf8_lossy(up)
            );
        }
    }

    /// What the tree path makes of a chunk, for comparison.
    fn tree(data: &str, alias: &str, client_usage: bool) -> Option<Value> {
        let mut v: Value = serde_json::from_str(data).expect("json");
        let o = v.as_object_mut().expect("object");
        if !client_usage && !strip_usage(o) {
            return None;
        }
        rewrite_model(o, alias);
        Some(v)
    }

    #[test]
    fn splice_chunk_matches_the_tree_path() {
        let chunks = [
            r#"{"id":"c","object":"chat.completion.chunk","model":"up","choices":[{"index":0,"delta":{"content":"héllo"},"finish_reason":null}]}"#,
            r#"{"id":"c","model":"up","choices":[{"delta":{"content":"x"},"finish_reason":null}],"usage":null}"#,
            r#"{"usage":null,"id":"c","model":"up","choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            r#"{ "usage" : null }"#,
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            r#"{"id":"c","model":"up","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}], "usage": {"prompt_tokens":1}, "model":"up"}"#,
        ];
        for data in chunks {
            for client_usage in [false, true] {
                let Some(c) = splice_chunk(data, "alias\"x", client_usage) else {
                    // `{ "usage" : null }` has no choices: the tree path's job.
                    assert!(!data.contains("choices"), "{data}");
                    continue;
                };
                let got = c
                    .out
                    .map(|o| serde_json::from_slice::<Value>(&o).expect("spliced is JSON"));
                assert_eq!(
                    got,
                    tree(data, "alias\"x", client_usage),
                    "{data} {client_usage}"
                );
            }
        }
        let c = splice_chunk(chunks[0], "a", false).expect("fast");
        assert_eq!((c.chars, c.finish, c.usage), (5, false, None));
        let c = splice_chunk(chunks[2], "a", false).expect("fast");
        assert!(c.finish);
        let c = splice_chunk(chunks[4], "a", false).expect("fast");
        assert_eq!(c.out, None);
        assert_eq!(
            c.usage,
            Some(json!({"prompt_tokens": 3, "completion_tokens": 4}))
        );
        assert_eq!(splice_chunk(chunks[5], "a", false).expect("fast").chars, 3);
    }

    #[test]
    fn splice_chunk_leaves_odd_chunks_to_the_tree_path() {
        for data in [
            r#"{"error":{"message":"overloaded"}}"#,
            r#"{"model":"a","model":"b","choices":[]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"x"}]}}]}"#,
            r#"{"choices":[],"\u0075sage":null}"#,
            r#"[{"choices":[]}]"#,
        ] {
            assert!(splice_chunk(data, "a", false).is_none(), "{data}");
        }
    }
}
