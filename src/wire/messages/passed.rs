//! Messages answers and stream events passed through from an `anthropic`
//! upstream, read from their text in the usual case (no tree): what the
//! relay needs of them (usage, the text's length, which event it is) and
//! the answer's `model` spliced in. Anything unusual is None, and the
//! caller reads a tree (which also words what is wrong).

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::spend::Cost;
use crate::wire::json::MapOnly;
use crate::wire::messages::to_chat_answer::UsageCounts;
use crate::wire::sse::{json_str, write_event};

/// What the pass-through reads of a stream event.
#[derive(Debug, PartialEq, Eq)]
pub struct PassedEvent<'a> {
    /// Its `type`.
    pub kind: Cow<'a, str>,
    /// Characters of a `content_block_delta`'s `delta.text`.
    pub text_chars: usize,
    /// The figures of its usage: `message_start`'s `message.usage`,
    /// `message_delta`'s `usage`.
    pub usage: Option<UsageCounts>,
    /// Where `message_start`'s `message.model` is in the event's text.
    model_at: Option<Range<usize>>,
    /// Where `message_delta`'s `usage` object closes (its `}`), and whether
    /// it has members: the request's cost goes in there.
    usage_close: Option<(usize, bool)>,
}

#[derive(Deserialize)]
struct EventView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    delta: Option<MapOnly<DeltaView<'a>>>,
    #[serde(borrow, default)]
    message: Option<MapOnly<StartView<'a>>>,
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// `message_start`'s message: what the pass-through changes and reads.
#[derive(Deserialize)]
struct StartView<'a> {
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    model: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    usage: Option<&'a RawValue>,
}

/// A usage object's figures, and whether it already has the members the
/// cost would add (then the tree path, which replaces them, writes it).
#[derive(Deserialize)]
struct UsageView<'a> {
    // Named here, not flattened: serde buffers every member of a flattened
    // struct.
    #[serde(default)]
    input_tokens: Option<i64>,
    #[serde(default)]
    output_tokens: Option<i64>,
    #[serde(default)]
    cache_read_input_tokens: Option<i64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<i64>,
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    cost: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    cost_status: Option<&'a RawValue>,
}

/// The span of `raw` (a slice of `text`) in `text`.
fn span_in(text: &str, raw: &RawValue) -> Option<Range<usize>> {
    let start = (raw.get().as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start + raw.get().len();
    (end <= text.len()).then_some(start..end)
}

/// A usage object's figures; None unless it is an object of whole numbers
/// (or members a tree reads the same: nulls, others), no key twice.
fn usage_counts(raw: &RawValue) -> Option<(UsageCounts, bool)> {
    let MapOnly(u): MapOnly<UsageView<'_>> = serde_json::from_str(raw.get()).ok()?;
    let has_members = raw.get()[1..raw.get().len() - 1]
        .bytes()
        .any(|b| !b.is_ascii_whitespace());
    let costed = u.cost.is_some() || u.cost_status.is_some();
    let counts = UsageCounts {
        input: u.input_tokens,
        output: u.output_tokens,
        cache_read: u.cache_read_input_tokens,
        cache_creation: u.cache_creation_input_tokens,
    };
    (!costed).then_some((counts, has_members))
}

/// A stream event read from its text: an object with a string `type`, a
/// `delta` (when present) an object whose `text` (when present) is a
/// string, no key written twice; a `message_start` whose message names its
/// model, and usage objects of whole numbers without a cost. The event is
/// relayed as it came (but for the model and the cost: [`PassedEvent::write`]),
/// so what a tree would make of the members skipped here does not matter:
/// it is not first checked with `wire::json::tree_would_read` (a third of
/// what the pass-through cost beyond relaying chat, docs/performance.md).
pub fn passed_event(data: &str) -> Option<PassedEvent<'_>> {
    if !data.trim_start().starts_with('{') {
        return None;
    }
    let MapOnly(v): MapOnly<EventView<'_>> = serde_json::from_str(data).ok()?;
    let mut e = PassedEvent {
        kind: v.kind,
        text_chars: 0,
        usage: None,
        model_at: None,
        usage_close: None,
    };
    match (&*e.kind, v.delta, v.message, v.usage) {
        ("content_block_delta", Some(MapOnly(d)), _, _) => {
            e.text_chars = d.text.as_deref().map_or(0, |t| t.chars().count());
        }
        ("message_start", _, Some(MapOnly(m)), _) => {
            e.model_at = Some(span_in(data, m.model?)?);
            if let Some(u) = m.usage {
                e.usage = Some(usage_counts(u)?.0);
            }
        }
        // Without its message, the tree path words what is wrong.
        ("message_start", _, None, _) => return None,
        ("message_delta", _, _, Some(u)) => {
            let (counts, has_members) = usage_counts(u)?;
            e.usage = Some(counts);
            e.usage_close = Some((span_in(data, u)?.end - 1, has_members));
        }
        _ => {}
    }
    Some(e)
}

impl PassedEvent<'_> {
    /// Writes the event (`data` is its text, `name` its event name) as it
    /// came but for `message_start`'s model, set to `model`, and the
    /// request's `cost` added to `message_delta`'s usage.
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        name: &str,
        data: &str,
        model: &str,
        cost: Option<&Cost>,
    ) {
        let mut spliced = Vec::new();
        if let Some(at) = &self.model_at {
            spliced.reserve(data.len() + model.len() + 2);
            spliced.extend_from_slice(&data.as_bytes()[..at.start]);
            json_str(&mut spliced, model);
            spliced.extend_from_slice(&data.as_bytes()[at.end..]);
        } else if let (Some((close, has_members)), Some(cost)) = (self.usage_close, cost) {
            spliced.reserve(data.len() + 64);
            spliced.extend_from_slice(&data.as_bytes()[..close]);
            if has_members {
                spliced.push(b',');
            }
            cost.write_members(&mut spliced);
            spliced.extend_from_slice(&data.as_bytes()[close..]);
        } else {
            write_event(out, Some(name), data);
            return;
        }
        // Splices of valid UTF-8 at token boundaries, with JSON text.
        match std::str::from_utf8(&spliced) {
            Ok(text) => write_event(out, Some(name), text),
            Err(_) => write_event(out, Some(name), data),
        }
    }
}

#[derive(Deserialize)]
struct ModelView<'a> {
    #[serde(borrow)]
    model: &'a RawValue,
}

/// Where a request body's `model` string is in its text: None unless the
/// body is an object with a `model` string written once (a body the tree
/// path already read).
pub fn model_at(body: &[u8]) -> Option<Range<usize>> {
    let MapOnly(v): MapOnly<ModelView<'_>> = serde_json::from_slice(body).ok()?;
    if !v.model.get().starts_with('"') {
        return None;
    }
    let start = (v.model.get().as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start + v.model.get().len();
    (end <= body.len()).then_some(start..end)
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
/// an object of `type` `message` with a `usage` object of whole numbers
/// (no key written twice).
pub fn passed_answer(answer: &[u8], model: &str) -> Option<(Bytes, UsageCounts)> {
    let first = answer.iter().position(|b| !b.is_ascii_whitespace())?;
    // Relayed as it came but for `model`, as the stream's events are: what
    // a tree would make of members not read here does not matter, so the
    // text is not first checked with `tree_would_read` (only that it is
    // UTF-8, which the skipped members are not checked for).
    if answer[first] != b'{' || std::str::from_utf8(answer).is_err() {
        return None;
    }
    let MapOnly(v): MapOnly<AnswerView<'_>> = serde_json::from_slice(answer).ok()?;
    if v.kind != "message" {
        return None;
    }
    // Read typed (a usage object that already has a cost is not usual
    // here either: None, and the tree path reads it).
    let (usage, _) = usage_counts(v.usage)?;
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
    use serde_json::{json, Value};

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

    fn written(e: &PassedEvent<'_>, data: &str, cost: Option<&Cost>) -> Value {
        let mut out = Vec::new();
        e.write(&mut out, "x", data, "my \"model\"", cost);
        let text = std::str::from_utf8(&out).unwrap();
        let json = text
            .strip_prefix("event: x\ndata: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .expect("one event");
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn message_start_gets_the_shown_model_and_gives_its_usage() {
        let data = r#"{"type":"message_start","message":{"id":"m","model":"claude-up","usage":{"input_tokens":7,"cache_read_input_tokens":3,"output_tokens":1,"service_tier":"standard"},"x":[1.50]}}"#;
        let e = passed_event(data).expect("usual");
        let counts = UsageCounts {
            input: Some(7),
            output: Some(1),
            cache_read: Some(3),
            cache_creation: None,
        };
        assert_eq!(e.usage, Some(counts));
        let mut want: Value = serde_json::from_str(data).unwrap();
        want["message"]["model"] = json!("my \"model\"");
        // The cost goes only in message_delta.
        let cost = Cost {
            status: crate::spend::CostStatus::Exact,
            nanos: Some(5),
            version: None,
        };
        assert_eq!(written(&e, data, Some(&cost)), want);
    }

    #[test]
    fn message_delta_gets_the_cost_in_its_usage() {
        let exact = Cost {
            status: crate::spend::CostStatus::Exact,
            nanos: Some(1_820_000),
            version: None,
        };
        let unpriced = Cost {
            status: crate::spend::CostStatus::Unpriced,
            nanos: None,
            version: None,
        };
        for (data, cost, want_usage) in [
            (
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}"#,
                &exact,
                json!({"output_tokens": 12, "cost": "0.001820000", "cost_status": "exact"}),
            ),
            (
                r#"{"type":"message_delta","usage":{ }}"#,
                &unpriced,
                json!({"cost_status": "unpriced"}),
            ),
        ] {
            let e = passed_event(data).expect("usual");
            let v = written(&e, data, Some(cost));
            assert_eq!(v["usage"], want_usage, "{data}");
            // Without a cost to give (no usage yet), it goes as it came.
            let mut out = Vec::new();
            e.write(&mut out, "message_delta", data, "m", None);
            assert_eq!(
                out,
                format!("event: message_delta\ndata: {data}\n\n").into_bytes()
            );
        }
        let e = passed_event(
            r#"{"type":"message_delta","usage":{"output_tokens":12,"input_tokens":null}}"#,
        )
        .expect("usual");
        assert_eq!(
            e.usage,
            Some(UsageCounts {
                output: Some(12),
                ..UsageCounts::default()
            })
        );
    }

    #[test]
    fn usage_and_starts_a_tree_must_read_take_the_tree_path() {
        for odd in [
            // The tree path replaces a cost that is there already.
            r#"{"type":"message_delta","usage":{"output_tokens":1,"cost":"1"}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":1.5}}"#,
            r#"{"type":"message_delta","usage":null}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":1,"output_tokens":2}}"#,
            r#"{"type":"message_start","message":{"id":"m"}}"#,
            r#"{"type":"message_start"}"#,
            r#"{"type":"message_start","message":{"model":"m","usage":[1]}}"#,
        ] {
            assert!(passed_event(odd).is_none(), "{odd}");
        }
    }

    #[test]
    fn a_bodys_model_is_found_where_it_was_written_once() {
        let body = br#"{"max_tokens":1,"model":"claude-x","x":[1.50,{"model":2}]}"#;
        let at = model_at(body).expect("found");
        assert_eq!(&body[at], br#""claude-x""#);
        for odd in [
            &br#"{"model":"a","model":"b"}"#[..],
            br#"{"model":5}"#,
            br#"{"max_tokens":1}"#,
            br#"["model"]"#,
        ] {
            assert!(model_at(odd).is_none(), "{}", String::from_utf8_lossy(odd));
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
        let want = UsageCounts {
            input: Some(3),
            output: Some(1),
            ..UsageCounts::default()
        };
        assert_eq!(usage, want);
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
