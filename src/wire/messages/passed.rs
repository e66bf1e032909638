//! Messages answers and stream events passed through from an `anthropic`
//! upstream, read from their text in the usual case (no tree): what the
//! relay needs of them (usage, the text's length, which event it is) and
//! the answer's `model` spliced in. Anything unusual is None, and the
//! caller reads a tree (which also words what is wrong).

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::wire::json::MapOnly;

/// What the pass-through reads of a stream event.
#[derive(Debug, PartialEq, Eq)]
pub struct PassedEvent<'a> {
    /// Its `type`.
    pub kind: Cow<'a, str>,
    /// Characters of a `content_block_delta`'s `delta.text`.
    pub text_chars: usize,
}

#[derive(Deserialize)]
struct EventView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    delta: Option<MapOnly<DeltaView<'a>>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// A stream event read from its text: an object with a string `type`, a
/// `delta` (when present) an object whose `text` (when present) is a
/// string, no key written twice. The event is relayed as it came, so what a
/// tree would make of the members skipped here does not matter: it is not
/// first checked with `wire::json::tree_would_read` (a third of what the
/// pass-through cost beyond relaying chat, docs/performance.md).
pub fn passed_event(data: &str) -> Option<PassedEvent<'_>> {
    if !data.trim_start().starts_with('{') {
        return None;
    }
    let MapOnly(v): MapOnly<EventView<'_>> = serde_json::from_str(data).ok()?;
    let text_chars = match (&*v.kind, &v.delta) {
        ("content_block_delta", Some(MapOnly(d))) => {
            d.text.as_deref().map_or(0, |t| t.chars().count())
        }
        _ => 0,
    };
    Some(PassedEvent {
        kind: v.kind,
        text_chars,
    })
}

#[derive(Deserialize)]
struct AnswerView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    usage: &'a RawValue,
}

/// A plain Messages answer from its text: its bytes with `model` set to
/// `model` (added when missing), and its `usage` object. None unless it is
/// an object of `type` `message` with a `usage` object (and the text a tree
/// reads too, no key written twice).
pub fn passed_answer(answer: &[u8], model: &str) -> Option<(Bytes, Value)> {
    let first = answer.iter().position(|b| !b.is_ascii_whitespace())?;
    if answer[first] != b'{' || !crate::wire::json::tree_would_read(answer) {
        return None;
    }
    let MapOnly(v): MapOnly<AnswerView<'_>> = serde_json::from_slice(answer).ok()?;
    if v.kind != "message" {
        return None;
    }
    let usage: Value = serde_json::from_str(v.usage.get()).ok()?;
    if !usage.is_object() {
        return None;
    }
    let mut out = Vec::with_capacity(answer.len() + model.len() + 16);
    match v.model {
        Some(m) => {
            let start = (m.get().as_ptr() as usize).checked_sub(answer.as_ptr() as usize)?;
            let end = start + m.get().len();
            out.extend_from_slice(answer.get(..start)?);
            serde_json::to_writer(&mut out, model).ok()?;
            out.extend_from_slice(answer.get(end..)?);
        }
        None => {
            out.extend_from_slice(&answer[..=first]);
            out.extend_from_slice(b"\"model\":");
            serde_json::to_writer(&mut out, model).ok()?;
            out.push(b',');
            out.extend_from_slice(&answer[first + 1..]);
        }
    }
    Some((Bytes::from(out), usage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_read_as_a_tree_reads_them() {
        let e = passed_event(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"h\u00e9!"}}"#)
            .expect("usual");
        assert_eq!((e.kind.as_ref(), e.text_chars), ("content_block_delta", 3));
        let e = passed_event(r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#)
            .expect("usual");
        assert_eq!(e.text_chars, 0);
        let e = passed_event(r#"{"type":"ping"}"#).expect("usual");
        assert_eq!(e.kind, "ping");
        for odd in [
            r#"{"delta":{"text":"x"}}"#,
            r#"{"type":5}"#,
            r#"{"type":"content_block_delta","delta":{"text":5}}"#,
            r#"{"type":"content_block_delta","delta":["x"]}"#,
            r#"{"type":"ping","type":"ping"}"#,
            r#"["ping"]"#,
            "not json",
        ] {
            assert!(passed_event(odd).is_none(), "{odd}");
        }
    }

    #[test]
    fn oddities_in_members_not_read_do_not_stop_an_event() {
        let e = passed_event(r#"{"type":"ping","x":1e400,"y":"\ud800"}"#).expect("read");
        assert_eq!(e.kind, "ping");
    }

    #[test]
    fn an_answer_keeps_every_byte_but_its_model() {
        let up = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-up","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1},"x":{"k":[1.50]}}"#;
        let (out, usage) = passed_answer(up, "my \"model\"").expect("usual");
        let text = std::str::from_utf8(&out).unwrap();
        assert_eq!(
            text,
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"my \"model\"","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1},"x":{"k":[1.50]}}"#
        );
        assert_eq!(usage, json!({"input_tokens": 3, "output_tokens": 1}));
        let (out, _) = passed_answer(br#" {"type":"message","usage":{}}"#, "m").expect("usual");
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, json!({"model": "m", "type": "message", "usage": {}}));
        for odd in [
            &br#"{"type":"message"}"#[..],
            br#"{"type":"message","usage":null}"#,
            br#"{"type":"error","usage":{}}"#,
            br#"{"type":"message","usage":{},"usage":{}}"#,
            br#"[{"type":"message"}]"#,
        ] {
            assert!(
                passed_answer(odd, "m").is_none(),
                "{}",
                String::from_utf8_lossy(odd)
            );
        }
    }
}
