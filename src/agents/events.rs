//! Events an agent app reports: validated all-or-nothing before anything is stored.

use serde_json::Value;

use crate::error::Error;
use crate::wire::ids::is_conversation_id;

pub const MAX_EVENTS: usize = 100;
pub const MAX_TYPE_CHARS: usize = 64;
pub const MAX_DATA_BYTES: usize = 16 * 1024;

pub use crate::store::agent_data::NewEvent;

fn opt_id(e: &Value, i: usize, field: &str) -> Result<Option<String>, Error> {
    match e.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if is_conversation_id(s) => Ok(Some(s.clone())),
        Some(_) => Err(Error::validation(
            format!("events[{i}].{field}"),
            format!("Event {i}: '{field}' must be 1 to 128 of letters, digits and . _ : -"),
        )),
    }
}

/// Parses the body of `POST /v1/agents/{agent}/events`.
pub fn parse_batch(bytes: &[u8]) -> Result<Vec<NewEvent>, Error> {
    let body: Value = crate::wire::json::parse_json(bytes)?;
    let events = body
        .get("events")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            Error::validation(
                "events",
                "The body must be {\"events\": [...]} with 1 to 100 events.",
            )
        })?;
    if events.is_empty() {
        return Err(Error::validation("events", "Send at least one event."));
    }
    if events.len() > MAX_EVENTS {
        return Err(Error::bad_request(
            "too_many_events",
            format!(
                "At most {MAX_EVENTS} events per call; this call has {}. Split it.",
                events.len()
            ),
        )
        .with_param("events"));
    }
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if !e.is_object() {
                return Err(Error::validation(format!("events[{i}]"), format!("Event {i} must be an object.")));
            }
            let kind = match e.get("type") {
                Some(Value::String(t)) if !t.is_empty() && t.chars().count() <= MAX_TYPE_CHARS => t.clone(),
                _ => {
                    return Err(Error::validation(
                        format!("events[{i}].type"),
                        format!("Event {i}: 'type' must be a string of 1 to {MAX_TYPE_CHARS} characters."),
                    ))
                }
            };
            let time = match e.get("time") {
                None | Some(Value::Null) => None,
                Some(Value::String(t)) if crate::time::parse_rfc3339(t).is_some() => Some(t.clone()),
                Some(_) => {
                    return Err(Error::validation(
                        format!("events[{i}].time"),
                        format!("Event {i}: 'time' must be an RFC 3339 timestamp."),
                    ))
                }
            };
            let data = match e.get("data") {
                None | Some(Value::Null) => None,
                Some(d @ Value::Object(_)) => {
                    let s = d.to_string();
                    if s.len() > MAX_DATA_BYTES {
                        return Err(Error::validation(
                            format!("events[{i}].data"),
                            format!("Event {i}: 'data' takes {} bytes of compact JSON; at most {MAX_DATA_BYTES} are allowed.", s.len()),
                        ));
                    }
                    Some(s)
                }
                Some(_) => {
                    return Err(Error::validation(
                        format!("events[{i}].data"),
                        format!("Event {i}: 'data' must be a JSON object."),
                    ))
                }
            };
            Ok(NewEvent {
                id: opt_id(e, i, "id")?,
                kind,
                time,
                conversation_id: opt_id(e, i, "conversation_id")?,
                turn_id: opt_id(e, i, "turn_id")?,
                data,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn batch(n: usize) -> Vec<u8> {
        serde_json::to_vec(&json!({"events": (0..n).map(|i| json!({"id": format!("e{i}"), "type": "tool.run"})).collect::<Vec<_>>()})).unwrap()
    }

    #[test]
    fn one_to_one_hundred_events_are_accepted() {
        assert_eq!(parse_batch(&batch(1)).unwrap().len(), 1);
        assert_eq!(parse_batch(&batch(100)).unwrap().len(), 100);
        assert_eq!(
            parse_batch(&batch(101)).unwrap_err().code,
            "too_many_events"
        );
        assert_eq!(parse_batch(&batch(0)).unwrap_err().code, "validation_error");
    }

    #[test]
    fn data_limit_is_16384_bytes_of_compact_json() {
        let overhead = json!({"k": ""}).to_string().len();
        let at = json!({"events": [{"type": "t", "data": {"k": "a".repeat(16384 - overhead)}}]});
        assert!(parse_batch(&serde_json::to_vec(&at).unwrap()).is_ok());
        let over = json!({"events": [{"type": "t", "data": {"k": "a".repeat(16385 - overhead)}}]});
        assert_eq!(
            parse_batch(&serde_json::to_vec(&over).unwrap())
                .unwrap_err()
                .param
                .as_deref(),
            Some("events[0].data")
        );
    }

    #[test]
    fn one_bad_event_refuses_the_whole_batch_and_names_it() {
        let v = json!({"events": [{"type": "ok"}, {"type": ""}]});
        let e = parse_batch(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert_eq!(e.code, "validation_error");
        assert_eq!(e.param.as_deref(), Some("events[1].type"));
        for bad in [
            json!({"events": [{"type": "t".repeat(65)}]}),
            json!({"events": [{"type": "t", "id": "bad id"}]}),
            json!({"events": [{"type": "t", "time": "yesterday"}]}),
            json!({"events": [{"type": "t", "data": [1]}]}),
            json!({"events": [{"type": "t", "conversation_id": "x".repeat(129)}]}),
            json!({"events": "nope"}),
        ] {
            assert_eq!(
                parse_batch(&serde_json::to_vec(&bad).unwrap())
                    .unwrap_err()
                    .code,
                "validation_error",
                "{bad}"
            );
        }
        assert!(parse_batch(&serde_json::to_vec(&json!({"events": [{"type": "t".repeat(64), "time": "2026-01-01T00:00:00Z", "data": {}}]})).unwrap()).is_ok());
    }
}
