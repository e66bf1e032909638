//! Native mode: a Responses upstream's answers relayed with `model` naming
//! the alias (a plain answer's, each stream event's `response` object's),
//! and tokens read from `usage.input_tokens`/`output_tokens`. A native
//! stream that ends without a terminal event gets a `response.failed`,
//! continuing the relayed `sequence_number`s.

use serde_json::{json, Value};

use crate::usage::Tokens;
use crate::wire::sse::{SseEvent, SseFrame};

const TERMINAL: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];

/// Tokens of a Responses `usage` object.
pub fn tokens_of(usage: Option<&Value>) -> Option<Tokens> {
    let u = usage?.as_object()?;
    let get = |k: &str| u.get(k).and_then(Value::as_i64);
    let (i, o) = (get("input_tokens"), get("output_tokens"));
    if i.is_none() && o.is_none() {
        return None;
    }
    Some(Tokens {
        prompt: i.unwrap_or(0),
        completion: o.unwrap_or(0),
        // Responses counts cached input inside `input_tokens`, as chat does.
        cache_read: u
            .get("input_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_i64)
            .unwrap_or(0),
        cache_write: 0,
        reasoning: u
            .get("output_tokens_details")
            .and_then(|d| d.get("reasoning_tokens"))
            .and_then(Value::as_i64)
            .unwrap_or(0),
        estimated: false,
    })
}

/// A plain native answer with `model` rewritten, and its tokens; `Err` says
/// what was wrong with it.
pub fn answer(bytes: &[u8], alias: &str) -> Result<(Value, Option<Tokens>), String> {
    let mut v: Value = serde_json::from_slice(bytes).map_err(|_| "it is not JSON".to_string())?;
    let Some(o) = v.as_object_mut() else {
        return Err("it is not a JSON object".into());
    };
    if !o.contains_key("output") {
        return Err(match o.get("error").filter(|e| !e.is_null()) {
            Some(e) => format!(
                "it is an error: {}",
                e.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message")
            ),
            None => "it has no 'output'".into(),
        });
    }
    o.insert("model".into(), json!(alias));
    let tokens = tokens_of(o.get("usage"));
    Ok((v, tokens))
}

/// What one relayed native event was.
pub struct Relayed {
    pub frame: SseFrame,
    pub terminal: bool,
    pub tokens: Option<Tokens>,
}

/// One native stream's relay state.
pub struct NativeStream {
    alias: String,
    next_seq: u64,
    response_id: Option<String>,
    ended: bool,
}

impl NativeStream {
    pub fn new(alias: &str) -> NativeStream {
        NativeStream {
            alias: alias.to_string(),
            next_seq: 0,
            response_id: None,
            ended: false,
        }
    }

    /// The name the answer is for.
    pub fn alias(&self) -> &str {
        &self.alias
    }

    /// One upstream event, rewritten; `Err` says what was wrong with it.
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<Relayed>, String> {
        if ev.data.trim() == "[DONE]" {
            return Ok(None);
        }
        let mut v: Value =
            serde_json::from_str(&ev.data).map_err(|_| "a stream event is not JSON".to_string())?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or("")
            .to_string();
        if let Some(n) = v.get("sequence_number").and_then(Value::as_u64) {
            self.next_seq = n + 1;
        }
        let mut tokens = None;
        if let Some(r) = v.get_mut("response").and_then(Value::as_object_mut) {
            r.insert("model".into(), json!(self.alias));
            if self.response_id.is_none() {
                self.response_id = r.get("id").and_then(Value::as_str).map(str::to_string);
            }
            tokens = tokens_of(r.get("usage"));
        }
        let terminal = TERMINAL.contains(&kind.as_str());
        self.ended |= terminal;
        let frame = SseFrame::Event {
            event: kind,
            data: v.to_string(),
        };
        Ok(Some(Relayed {
            frame,
            terminal,
            tokens,
        }))
    }

    /// A `response.failed` for a stream that ended without a terminal event
    /// (none when it had one).
    pub fn fail(&mut self, code: &str, message: &str) -> Vec<SseFrame> {
        if self.ended {
            return vec![];
        }
        self.ended = true;
        let id = self
            .response_id
            .clone()
            .unwrap_or_else(|| crate::wire::responses::new_id("resp_"));
        let data = json!({"type": "response.failed", "sequence_number": self.next_seq,
            "response": {"id": id, "object": "response", "status": "failed", "model": self.alias,
                         "output": [], "usage": null, "error": {"code": code, "message": message}}});
        vec![SseFrame::Event {
            event: "response.failed".into(),
            data: data.to_string(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: Value) -> SseEvent {
        SseEvent {
            event: data["type"].as_str().map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn plain_answers_name_the_alias_and_give_their_tokens() {
        let (v, t) = answer(
            br#"{"model":"up","output":[],"usage":{"input_tokens":4,"output_tokens":2}}"#,
            "alias",
        )
        .unwrap();
        assert_eq!(v["model"], "alias");
        assert_eq!(
            t,
            Some(Tokens {
                prompt: 4,
                completion: 2,
                ..Tokens::default()
            })
        );
        assert!(answer(br#"{"error":{"message":"no"}}"#, "a").is_err());
        assert!(answer(b"[]", "a").is_err());
    }

    #[test]
    fn events_are_rewritten_and_a_missing_terminal_event_is_added() {
        let mut s = NativeStream::new("alias");
        let r = s
            .on_event(&ev(json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_up", "model": "up"}})))
            .unwrap()
            .unwrap();
        assert!(!r.terminal);
        let SseFrame::Event { data, .. } = r.frame else {
            panic!()
        };
        assert!(data.contains("\"alias\"") && !data.contains("\"up\""));
        s.on_event(&ev(
            json!({"type": "response.output_text.delta", "sequence_number": 1, "delta": "x"}),
        ))
        .unwrap();
        let failed = s.fail("upstream_error", "cut");
        let SseFrame::Event { data, .. } = &failed[0] else {
            panic!()
        };
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["sequence_number"], 2);
        assert_eq!(v["response"]["id"], "resp_up");
        assert_eq!(v["response"]["status"], "failed");

        let mut s = NativeStream::new("alias");
        let r = s
            .on_event(&ev(
                json!({"type": "response.completed", "sequence_number": 5,
                "response": {"id": "r", "usage": {"input_tokens": 1, "output_tokens": 2}}}),
            ))
            .unwrap()
            .unwrap();
        assert!(r.terminal);
        assert_eq!(
            r.tokens,
            Some(Tokens {
                prompt: 1,
                completion: 2,
                ..Tokens::default()
            })
        );
        assert!(s.fail("x", "y").is_empty());
    }
}
