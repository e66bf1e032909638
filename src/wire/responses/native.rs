//! Native mode: a Responses upstream's answers relayed with `model` naming
//! the alias (a plain answer's, each stream event's `response` object's),
//! and tokens read from `usage.input_tokens`/`output_tokens`. A native
//! stream that ends without a terminal event gets a `response.failed`,
//! continuing the relayed `sequence_number`s.

use serde_json::{json, Value};

use crate::spend::Cost;
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
    /// The terminal response's usage gains the request's cost, which
    /// `price` gives for its tokens.
    pub fn on_event(
        &mut self,
        ev: &SseEvent,
        price: &dyn Fn(&Tokens) -> Cost,
    ) -> Result<Option<Relayed>, String> {
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
        let terminal = TERMINAL.contains(&kind.as_str());
        if let Some(r) = v.get_mut("response").and_then(Value::as_object_mut) {
            r.insert("model".into(), json!(self.alias));
            if self.response_id.is_none() {
                self.response_id = r.get("id").and_then(Value::as_str).map(str::to_string);
            }
            tokens = tokens_of(r.get("usage"));
            // A failed response is priced on what was relayed, but its usage
            // is not the answer's last word: only a finished one carries it.
            if let (true, Some(t), Some(Value::Object(u))) = (
                terminal && kind != "response.failed",
                &tokens,
                r.get_mut("usage"),
            ) {
                price(t).write_into(u);
            }
        }
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
            .on_event(&ev(json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_up", "model": "up"}})), &unpriced)
            .unwrap()
            .unwrap();
        assert!(!r.terminal);
        let SseFrame::Event { data, .. } = r.frame else {
            panic!()
        };
        assert!(data.contains("\"alias\"") && !data.contains("\"up\""));
        s.on_event(
            &ev(json!({"type": "response.output_text.delta", "sequence_number": 1, "delta": "x"})),
            &unpriced,
        )
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
            .on_event(
                &ev(json!({"type": "response.completed", "sequence_number": 5,
                "response": {"id": "r", "usage": {"input_tokens": 1, "output_tokens": 2}}})),
                &unpriced,
            )
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

    fn unpriced(_: &Tokens) -> Cost {
        Cost {
            status: crate::spend::CostStatus::Unpriced,
            nanos: None,
            version: None,
        }
    }

    #[test]
    fn only_a_finished_responses_usage_carries_the_cost_of_its_tokens() {
        let priced = |t: &Tokens| Cost {
            status: crate::spend::CostStatus::Exact,
            nanos: Some(t.prompt * 1000 + t.completion),
            version: None,
        };
        let usage = json!({"input_tokens": 3, "output_tokens": 4});
        for (kind, carries) in [
            ("response.completed", true),
            ("response.incomplete", true),
            ("response.failed", false),
            ("response.in_progress", false),
        ] {
            let r = NativeStream::new("alias")
                .on_event(
                    &ev(json!({"type": kind, "response": {"id": "r", "usage": usage}})),
                    &priced,
                )
                .unwrap()
                .unwrap();
            let SseFrame::Event { data, .. } = r.frame else {
                panic!()
            };
            let v: Value = serde_json::from_str(&data).unwrap();
            let u = &v["response"]["usage"];
            if carries {
                assert_eq!(u["cost"], "0.000003004", "{kind}");
                assert_eq!(u["cost_status"], "exact", "{kind}");
            } else {
                assert!(
                    u.get("cost").is_none() && u.get("cost_status").is_none(),
                    "{kind}"
                );
            }
        }
        let r = NativeStream::new("alias")
            .on_event(
                &ev(json!({"type": "response.completed", "response": {"id": "r", "usage": usage}})),
                &unpriced,
            )
            .unwrap()
            .unwrap();
        let SseFrame::Event { data, .. } = r.frame else {
            panic!()
        };
        let v: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(v["response"]["usage"]["cost_status"], "unpriced");
        assert!(v["response"]["usage"].get("cost").is_none());
    }
}
