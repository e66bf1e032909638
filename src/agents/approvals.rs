//! Approvals in tool mode `ask`: which tool calls of an answer need one, and
//! how answers to them are enforced on the next request.

use std::collections::HashMap;

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

/// What becomes of a `role: "tool"` message (or a dialect's tool result)
/// answering the call `id`, given the approvals' states: refused while the
/// approval is pending (409 `approval_pending`), replaced by
/// [`DENIED_TEXT`] when it was denied or expired, kept otherwise.
pub fn fate_of<'a>(
    states: &'a HashMap<String, ApprovalState>,
) -> impl Fn(&str) -> Result<Option<&'static str>, Error> + 'a {
    move |id| {
        match states.get(id) {
        Some(ApprovalState::Pending) => Err(Error::conflict(
            "approval_pending",
            format!("The tool call '{id}' is waiting for the user's approval; answer it at POST /v1/agents/{{agent}}/approvals/{{id}} first."),
        )),
        Some(ApprovalState::Denied | ApprovalState::Expired) => Ok(Some(DENIED_TEXT)),
        Some(ApprovalState::Approved) | None => Ok(None),
    }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::wire::chat::answer_calls;
    use serde_json::{Map, Value};

    fn enforce(
        body: &mut Map<String, Value>,
        states: &HashMap<String, ApprovalState>,
    ) -> Result<(), Error> {
        answer_calls(body, fate_of(states))
    }

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
}
