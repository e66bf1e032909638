//! The audit record of one `tools/call` (written for every call after
//! authentication, whatever its decision). Never the arguments or the
//! result: only the SHA-256 of the canonical arguments.

use serde_json::{json, Value};

use crate::time::rfc3339;

/// What the gateway decided about a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Approved,
    /// Waits for an approval (nothing went upstream; `approval_id` names it).
    Held,
    Denied,
    RateLimited,
}

impl Decision {
    pub const ALL: [Decision; 5] = [
        Decision::Allowed,
        Decision::Approved,
        Decision::Held,
        Decision::Denied,
        Decision::RateLimited,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Approved => "approved",
            Decision::Held => "held",
            Decision::Denied => "denied",
            Decision::RateLimited => "rate_limited",
        }
    }
    pub fn parse(s: &str) -> Option<Decision> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// Why a call was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    UnknownTool,
    NotGranted,
    ToolMode,
    /// Held by the agent's tool contract.
    ToolHeld,
    ApprovalDenied,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UnknownTool => "unknown_tool",
            Reason::NotGranted => "not_granted",
            Reason::ToolMode => "tool_mode",
            Reason::ToolHeld => "tool_held",
            Reason::ApprovalDenied => "approval_denied",
        }
    }
}

/// What came of the upstream request (`None` when nothing went upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// A result with `isError: true`.
    ToolError,
    /// The upstream's own JSON-RPC error.
    UpstreamError,
    Unavailable,
    Timeout,
    TooLarge,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Unavailable => "unavailable",
            Outcome::Timeout => "timeout",
            Outcome::TooLarge => "too_large",
        }
    }
}

/// One record as written (`mcp::store`'s `insert_mcp_calls`) and read back.
/// Stored enums are text, so a record reads the same whatever the version
/// that wrote it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct McpCallRecord {
    pub id: String,
    /// Unix ms.
    pub created_at: i64,
    pub request_id: Option<String>,
    pub user_id: Option<String>,
    /// The user's e-mail at the time of the call.
    pub user_email: Option<String>,
    pub api_key_id: Option<String>,
    pub agent: Option<String>,
    pub device_id: Option<String>,
    /// `None` when the name resolved to no server.
    pub server: Option<String>,
    /// The upstream name (the name as sent when it did not resolve).
    pub tool: String,
    pub exposed_name: String,
    /// `read`, `write` or `execute`; `None` when the tool is unknown.
    pub class: Option<String>,
    /// The tool mode; `None` for API keys.
    pub mode: Option<String>,
    /// [`Decision::as_str`].
    pub decision: String,
    /// [`Reason::as_str`] on `denied`.
    pub reason: Option<String>,
    pub approval_id: Option<String>,
    /// [`Outcome::as_str`]; `None` when nothing went upstream.
    pub outcome: Option<String>,
    pub latency_ms: i64,
    /// `sha256:<hex>` of the canonical arguments (RFC 8785).
    pub arguments_sha256: String,
}

impl McpCallRecord {
    /// A record with a fresh id, stamped now; the caller fills the rest.
    pub fn new(
        tool: &str,
        exposed_name: &str,
        decision: Decision,
        arguments_sha256: String,
    ) -> Self {
        McpCallRecord {
            id: crate::store::new_id(),
            created_at: crate::store::now_ms(),
            request_id: None,
            user_id: None,
            user_email: None,
            api_key_id: None,
            agent: None,
            device_id: None,
            server: None,
            tool: tool.to_string(),
            exposed_name: exposed_name.to_string(),
            class: None,
            mode: None,
            decision: decision.as_str().to_string(),
            reason: None,
            approval_id: None,
            outcome: None,
            latency_ms: 0,
            arguments_sha256,
        }
    }

    /// The view of `GET /api/admin/mcp/calls`.
    pub fn view(&self) -> Value {
        json!({
            "id": self.id,
            "created_at": rfc3339(self.created_at),
            "request_id": self.request_id,
            "user_id": self.user_id,
            "user": self.user_email,
            "api_key_id": self.api_key_id,
            "agent": self.agent,
            "device_id": self.device_id,
            "server": self.server,
            "tool": self.tool,
            "exposed_name": self.exposed_name,
            "class": self.class,
            "mode": self.mode,
            "decision": self.decision,
            "reason": self.reason,
            "approval_id": self.approval_id,
            "outcome": self.outcome,
            "latency_ms": self.latency_ms,
            "arguments_sha256": self.arguments_sha256,
        })
    }
}

/// Filters of `GET /api/admin/mcp/calls`, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallFilter {
    /// Unix ms, inclusive.
    pub from: Option<i64>,
    /// Unix ms, exclusive.
    pub to: Option<i64>,
    pub server: Option<String>,
    /// The user's e-mail (lower-case).
    pub user: Option<String>,
    pub agent: Option<String>,
    pub api_key: Option<String>,
    pub decision: Option<Decision>,
    /// 1 to [`MAX_LIMIT`].
    pub limit: u32,
    /// Records older than this one (newest first): `(created_at, id)`.
    pub after: Option<(i64, String)>,
}

pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

/// The opaque cursor of the record a page ended with.
pub fn cursor_of(r: &McpCallRecord) -> String {
    format!("{}.{}", r.created_at, r.id)
}

pub fn parse_cursor(s: &str) -> Option<(i64, String)> {
    let (at, id) = s.split_once('.')?;
    let at: i64 = at.parse().ok()?;
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|c| c.is_ascii_alphanumeric());
    ok.then(|| (at, id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let mut r = McpCallRecord::new("add", "alpha__add", Decision::Allowed, "sha256:00".into());
        r.created_at = 1_700_000_000_123;
        let c = cursor_of(&r);
        assert_eq!(parse_cursor(&c), Some((r.created_at, r.id.clone())));
        for bad in ["", "x", "12", "12.", "a.b", "12.a-b", "12.a'b"] {
            assert_eq!(parse_cursor(bad), None, "{bad}");
        }
    }

    #[test]
    fn decisions_parse_from_their_names_only() {
        for d in Decision::ALL {
            assert_eq!(Decision::parse(d.as_str()), Some(d));
        }
        assert_eq!(Decision::parse("Allowed"), None);
    }

    #[test]
    fn the_view_names_the_user_by_email_and_carries_no_arguments() {
        let mut r = McpCallRecord::new("add", "alpha__add", Decision::Denied, "sha256:ab".into());
        r.user_email = Some("a@x.io".into());
        r.reason = Some(Reason::NotGranted.as_str().into());
        let v = r.view();
        assert_eq!(v["user"], "a@x.io");
        assert_eq!(v["decision"], "denied");
        assert_eq!(v["reason"], "not_granted");
        assert_eq!(v["outcome"], Value::Null);
        assert!(v.get("arguments").is_none());
        assert_eq!(v.as_object().map(|o| o.len()), Some(19));
    }
}
