//! The Messages request body's checks: only the members Gatehouse reads
//! (contract, "Anthropic Messages" → "Routes"); everything else is the
//! upstream's to judge. Each refusal is 400 `validation_error` naming the
//! top-level member.

use serde_json::{Map, Value};

use crate::error::Error;

/// Which route the body came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/messages`: `max_tokens` required.
    Messages,
    /// `/messages/count_tokens`: `max_tokens` not read.
    CountTokens,
}

/// Checks the members the contract lists, in the body's reading order.
pub fn check_body(body: &Map<String, Value>, route: Route) -> Result<(), Error> {
    if route == Route::Messages {
        match body.get("max_tokens") {
            Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => {}
            None => {
                return Err(Error::validation(
                    "max_tokens",
                    "'max_tokens' is required: an integer of at least 1.",
                ))
            }
            Some(_) => {
                return Err(Error::validation(
                    "max_tokens",
                    "'max_tokens' must be an integer of at least 1.",
                ))
            }
        }
    }
    let messages = match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        _ => {
            return Err(Error::validation(
                "messages",
                "'messages' must be a non-empty list.",
            ))
        }
    };
    for (i, m) in messages.iter().enumerate() {
        let bad = |what: &str| Error::validation("messages", format!("messages[{i}] {what}"));
        let Some(m) = m.as_object() else {
            return Err(bad("must be an object."));
        };
        match m.get("role").and_then(Value::as_str) {
            Some("user" | "assistant") => {}
            _ => return Err(bad("needs a role of user or assistant.")),
        }
        match m.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(blocks)) => {
                for (j, b) in blocks.iter().enumerate() {
                    if !b.get("type").is_some_and(Value::is_string) {
                        return Err(bad(&format!(
                            "content[{j}] must be an object with a string type."
                        )));
                    }
                }
            }
            _ => return Err(bad("needs content: a string or a list of blocks.")),
        }
    }
    match body.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks))
            if blocks.iter().all(|b| {
                b.get("type").and_then(Value::as_str) == Some("text")
                    && b.get("text").is_some_and(Value::is_string)
            }) => {}
        Some(_) => {
            return Err(Error::validation(
                "system",
                "'system' must be a string or a list of {\"type\":\"text\",\"text\"} blocks.",
            ))
        }
    }
    if !matches!(body.get("stream"), None | Some(Value::Bool(_))) {
        return Err(Error::validation(
            "stream",
            "'stream' must be true or false.",
        ));
    }
    match body.get("tools") {
        None => {}
        Some(Value::Array(tools))
            if tools
                .iter()
                .all(|t| t.get("name").is_some_and(Value::is_string)) => {}
        Some(_) => {
            return Err(Error::validation(
                "tools",
                "'tools' must be a list of objects with a string name.",
            ))
        }
    }
    Ok(())
}

/// Whether the body asks for a stream (checked: absent or boolean).
pub fn is_stream(body: &Map<String, Value>) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok() -> Value {
        json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    }

    fn param(v: Value, route: Route) -> Option<String> {
        let e = check_body(v.as_object().unwrap(), route).err()?;
        assert_eq!(e.code, "validation_error");
        assert_eq!(e.status(), 400);
        e.param
    }

    #[test]
    fn a_minimal_body_passes_and_max_tokens_one_is_the_least() {
        assert_eq!(param(ok(), Route::Messages), None);
        let mut v = ok();
        v["max_tokens"] = json!(0);
        assert_eq!(param(v, Route::Messages).as_deref(), Some("max_tokens"));
    }

    #[test]
    fn max_tokens_is_required_on_messages_and_not_read_on_count_tokens() {
        let mut v = ok();
        v.as_object_mut().unwrap().remove("max_tokens");
        assert_eq!(
            param(v.clone(), Route::Messages).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(param(v, Route::CountTokens), None);
        for bad in [json!(1.5), json!("10"), json!(-1), json!(null)] {
            let mut v = ok();
            v["max_tokens"] = bad.clone();
            assert_eq!(
                param(v, Route::Messages).as_deref(),
                Some("max_tokens"),
                "{bad}"
            );
        }
    }

    #[test]
    fn each_checked_member_is_named_when_wrong() {
        for (member, bad) in [
            ("messages", json!([])),
            ("messages", json!("hi")),
            ("messages", json!([{"role": "system", "content": "x"}])),
            ("messages", json!([{"role": "user"}])),
            (
                "messages",
                json!([{"role": "user", "content": [{"text": "x"}]}]),
            ),
            ("messages", json!([{"role": "user", "content": [1]}])),
            ("system", json!(3)),
            ("system", json!([{"type": "image"}])),
            ("system", json!([{"type": "text"}])),
            ("stream", json!("yes")),
            ("tools", json!({})),
            ("tools", json!([{"description": "no name"}])),
        ] {
            let mut v = ok();
            v[member] = bad.clone();
            assert_eq!(
                param(v, Route::Messages).as_deref(),
                Some(member),
                "{member}: {bad}"
            );
        }
    }

    #[test]
    fn what_the_gateway_does_not_read_passes() {
        let mut v = ok();
        v["system"] =
            json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]);
        v["thinking"] = json!({"type": "enabled", "budget_tokens": 1});
        v["tools"] = json!([{"name": "web_search", "type": "web_search_20250305"}]);
        v["stream"] = json!(false);
        v["messages"] = json!([{"role": "assistant", "content": [{"type": "whatever"}]}]);
        assert_eq!(param(v, Route::Messages), None);
    }
}
