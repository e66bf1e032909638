//! Approvals in tool mode `ask`: which tool calls of an answer need one, and
//! how answers to them are enforced on the next request.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::Error;

pub const DENIED_TEXT: &str = "The user denied this tool call.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ApprovalState {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "approved" => Some(Self::Approved),
            "denied" => Some(Self::Denied),
            "expired" => Some(Self::Expired),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }
    /// A pending approval past its expiry is expired.
    pub fn effective(self, expires_at: i64, now: i64) -> Self {
        if self == Self::Pending && now >= expires_at {
            Self::Expired
        } else {
            self
        }
    }
}

/// A tool call of an assistant answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Tool calls of a non-stream answer (`choices[*].message.tool_calls`).
pub fn tool_calls_of_response(resp: &Value) -> Vec<ToolCall> {
    let mut out = vec![];
    for choice in resp
        .get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for tc in choice
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.push(ToolCall {
                id: tc
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                name: tc
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                arguments: tc
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            });
        }
    }
    out
}

/// The `tool_call_id`s that `role: "tool"` messages answer.
pub fn answered_calls(body: &Map<String, Value>) -> Vec<String> {
    body.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| {
            m.get("tool_call_id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// Enforces decisions: a tool message answering a pending call is refused;
/// one answering a denied or expired call goes upstream with the fixed text.
pub fn enforce(
    body: &mut Map<String, Value>,
    states: &HashMap<String, ApprovalState>,
) -> Result<(), Error> {
    let Some(Value::Array(messages)) = body.get_mut("messages") else {
        return Ok(());
    };
    for m in messages.iter_mut() {
        if m.get("role").and_then(Value::as_str) != Some("tool") {
            continue;
        }
        let Some(id) = m.get("tool_call_id").and_then(Value::as_str) else {
            continue;
        };
        match states.get(id) {
            Some(ApprovalState::Pending) => {
                return Err(Error::conflict(
                    "approval_pending",
                    format!("The tool call '{id}' is waiting for the user's approval; answer it at POST /v1/agents/{{agent}}/approvals/{{id}} first."),
                ))
            }
            Some(ApprovalState::Denied | ApprovalState::Expired) => {
                if let Some(obj) = m.as_object_mut() {
                    obj.insert("content".into(), Value::String(DENIED_TEXT.into()));
                }
            }
            Some(ApprovalState::Approved) | None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body() -> Map<String, Value> {
        json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "result"}
        ]}).as_object().unwrap().clone()
    }

    #[test]
    fn pending_call_answer_is_refused() {
        let mut b = body();
        let states = HashMap::from([("c1".to_string(), ApprovalState::Pending)]);
        assert_eq!(
            enforce(&mut b, &states).unwrap_err().code,
            "approval_pending"
        );
    }

    #[test]
    fn denied_and_expired_answers_are_replaced_by_the_fixed_text() {
        for s in [ApprovalState::Denied, ApprovalState::Expired] {
            let mut b = body();
            enforce(&mut b, &HashMap::from([("c1".to_string(), s)])).unwrap();
            assert_eq!(b["messages"][2]["content"], DENIED_TEXT);
        }
    }

    #[test]
    fn approved_and_unknown_answers_pass_unchanged() {
        for states in [
            HashMap::from([("c1".to_string(), ApprovalState::Approved)]),
            HashMap::new(),
        ] {
            let mut b = body();
            enforce(&mut b, &states).unwrap();
            assert_eq!(b["messages"][2]["content"], "result");
        }
    }

    #[test]
    fn pending_past_expiry_is_expired() {
        assert_eq!(
            ApprovalState::Pending.effective(100, 100),
            ApprovalState::Expired
        );
        assert_eq!(
            ApprovalState::Pending.effective(100, 99),
            ApprovalState::Pending
        );
        assert_eq!(
            ApprovalState::Denied.effective(100, 200),
            ApprovalState::Denied
        );
    }

    #[test]
    fn tool_calls_are_read_from_every_choice() {
        let r = json!({"choices": [{"message": {"tool_calls": [
            {"id": "a", "function": {"name": "x", "arguments": "{\"p\":1}"}},
            {"id": "b", "function": {"name": "y", "arguments": "{}"}}
        ]}}]});
        let calls = tool_calls_of_response(&r);
        assert_eq!(calls.len(), 2);
        assert_eq!(
            calls[0],
            ToolCall {
                id: "a".into(),
                name: "x".into(),
                arguments: "{\"p\":1}".into()
            }
        );
    }
}
