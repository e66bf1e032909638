//! Agents' tool rules applied to MCP tools (contract "MCP gateway", "Agents:
//! tool modes, holding, approvals"): the tool mode, holding under the tool
//! contract, and the call-again semantics of approvals. Plain functions of
//! plain data; the gateway (`gateway.rs`) feeds them what it resolved and the
//! store read, and acts on what they decide.
//!
//! An MCP tool's identity for the agent is its exposed name on `/mcp`
//! (`server__tool`): admins accept and reject it under that name, and the
//! tool contract may list it (on `/mcp/{server}` the route's shorter exposed
//! name counts too).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::agents::approvals::{ApprovalState, DENIED_TEXT};
use crate::agents::caches::AgentCaches;
pub use crate::agents::tools::SeenTool;
use crate::agents::tools::{ToolClass, ToolStatus};
use crate::agents::{Agent, ToolMode};
use crate::error::Error;
use crate::mcp::tools::arguments_sha256;
use crate::runtime::Invalidation;
use crate::store::agent_data::{new_approval_id, ApprovalRow, SeenMcpTool};
use crate::store::Store;

/// The request header that sets the tool mode of an agent's MCP request.
pub const TOOL_MODE_HEADER: &str = "x-service-tool-mode";
/// The `tools/list` answer's header naming the held tools.
pub const HELD_TOOLS_HEADER: &str = "x-service-held-tools";

/// `X-Service-Tool-Mode` was sent with a value that is not a mode
/// (`/mcp` answers 400, `-32600`, `invalid_header`).
#[derive(Debug, PartialEq, Eq)]
pub struct InvalidToolMode;

impl InvalidToolMode {
    pub const MESSAGE: &'static str =
        "X-Service-Tool-Mode must be one of off, read_only, ask, auto.";
}

/// The mode of an agent's request: the header's when sent, else the agent's
/// default. (API keys have no mode: the gateway does not call this for them.)
pub fn tool_mode(header: Option<&[u8]>, default: ToolMode) -> Result<ToolMode, InvalidToolMode> {
    match header {
        None => Ok(default),
        Some(v) => std::str::from_utf8(v)
            .ok()
            .and_then(ToolMode::parse)
            .ok_or(InvalidToolMode),
    }
}

/// What an admin's accept binds to: the tool's description, input schema and
/// class. A change to any of them holds the tool again.
pub fn tool_hash(
    description: Option<&str>,
    input_schema: Option<&Value>,
    class: ToolClass,
) -> String {
    let v = json!({
        "class": class.as_str(),
        "description": description,
        "inputSchema": input_schema,
    });
    arguments_sha256(&v)
}

/// One MCP tool as the gateway resolved it for this request.
#[derive(Clone, Copy, Debug)]
pub struct McpTool<'a> {
    /// Exposed name on `/mcp` (`server__tool`).
    pub full_name: &'a str,
    /// Exposed name on the route asked (the same as `full_name` on `/mcp`).
    pub exposed: &'a str,
    pub class: ToolClass,
    /// [`tool_hash`] of what the upstream says now.
    pub hash: &'a str,
}

/// The agent's rules for one MCP request, as plain data.
pub struct AgentRules<'a> {
    pub mode: ToolMode,
    pub contract: &'a [String],
    pub allow_local_mcp: bool,
    /// MCP tools seen for the agent, by full exposed name.
    pub seen: &'a HashMap<String, SeenTool>,
}

/// Why an agent's call is refused (the audit's `reason` on `denied`). The
/// client gets `Unknown tool: <name>` for both, as for an unknown tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyReason {
    ToolMode,
    ToolHeld,
    ApprovalDenied,
}

impl DenyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolMode => "tool_mode",
            Self::ToolHeld => "tool_held",
            Self::ApprovalDenied => "approval_denied",
        }
    }
}

/// Whether a granted tool may be called under the agent's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Upstream at once (`auto`, or a `read` tool).
    Allow,
    /// `ask` and a `write`/`execute` tool: see [`approval_step`].
    NeedsApproval,
    Deny(DenyReason),
}

/// A `tools/list` filtered by the agent's rules: indexes into the tools given.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Listed, in the given order.
    pub keep: Vec<usize>,
    /// Held (left out and named in `X-Service-Held-Tools`), in the given order.
    pub held: Vec<usize>,
}

/// Whether the tool mode shows a tool of this class.
pub fn mode_allows(mode: ToolMode, class: ToolClass) -> bool {
    match mode {
        ToolMode::Off => false,
        ToolMode::ReadOnly => class == ToolClass::Read,
        ToolMode::Ask | ToolMode::Auto => true,
    }
}

impl AgentRules<'_> {
    /// Held: the contract is not empty, does not list the tool, and no admin
    /// accepted the tool as it is now. With `allow_local_mcp` nothing is held.
    pub fn is_held(&self, tool: &McpTool) -> bool {
        if self.allow_local_mcp
            || self.contract.is_empty()
            || self
                .contract
                .iter()
                .any(|c| c == tool.full_name || c == tool.exposed)
        {
            return false;
        }
        !matches!(
            self.seen.get(tool.full_name),
            Some(s) if s.status == ToolStatus::Accepted && s.hash == tool.hash
        )
    }

    /// `tools/list` after the grants: the mode, then holding.
    pub fn list(&self, tools: &[McpTool]) -> Listing {
        let mut out = Listing::default();
        for (i, t) in tools.iter().enumerate() {
            if !mode_allows(self.mode, t.class) {
                continue;
            }
            if self.is_held(t) {
                out.held.push(i);
            } else {
                out.keep.push(i);
            }
        }
        out
    }

    /// A granted tool's call: the mode, holding, then whether it needs an approval.
    pub fn admit(&self, tool: &McpTool) -> Admission {
        if !mode_allows(self.mode, tool.class) {
            Admission::Deny(DenyReason::ToolMode)
        } else if self.is_held(tool) {
            Admission::Deny(DenyReason::ToolHeld)
        } else if self.mode == ToolMode::Ask && tool.class != ToolClass::Read {
            Admission::NeedsApproval
        } else {
            Admission::Allow
        }
    }
}

/// The latest approval of the same user, agent, tool and canonical arguments.
#[derive(Clone, Copy, Debug)]
pub struct LatestApproval<'a> {
    pub id: &'a str,
    /// The stored status (`pending`, `approved`, `denied`).
    pub status: &'a str,
    pub expires_at: i64,
    pub used_at: Option<i64>,
}

/// What a call that needs an approval does, given the latest such approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalStep {
    /// Still pending: the same answer, no new approval.
    Wait(String),
    /// Approved and not used: upstream, and the approval is used.
    Go(String),
    /// Denied and not used: the denied result, and the approval is used.
    Refuse(String),
    /// Used, expired or none: a new approval.
    Ask,
}

pub fn approval_step(latest: Option<LatestApproval>, now: i64) -> ApprovalStep {
    let Some(a) = latest else {
        return ApprovalStep::Ask;
    };
    if a.used_at.is_some() {
        return ApprovalStep::Ask;
    }
    match ApprovalState::parse(a.status).map(|s| s.effective(a.expires_at, now)) {
        Some(ApprovalState::Pending) => ApprovalStep::Wait(a.id.to_string()),
        Some(ApprovalState::Approved) => ApprovalStep::Go(a.id.to_string()),
        Some(ApprovalState::Denied) => ApprovalStep::Refuse(a.id.to_string()),
        Some(ApprovalState::Expired) | None => ApprovalStep::Ask,
    }
}

/// The `tools/call` result while approval `id` is pending (nothing went upstream).
pub fn pending_result(id: &str, expires_at: &str) -> Value {
    json!({
        "isError": true,
        "content": [{"type": "text", "text": format!(
            "Approval required: approval {id} is pending. Call the tool again with the same arguments once it is approved."
        )}],
        "_meta": {"gatehouse/approval": {"id": id, "status": "pending", "expires_at": expires_at}},
    })
}

/// The `tools/call` result of a call the user (or an admin) denied.
pub fn denied_result() -> Value {
    json!({"isError": true, "content": [{"type": "text", "text": DENIED_TEXT}]})
}

/// `X-Service-Held-Tools`: exposed names, comma-separated, in list order; None when none.
pub fn held_header<S: AsRef<str>>(names: &[S]) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    Some(
        names
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// How an agent's call ended on the agent side, as the audit records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Upstream without an approval.
    Allowed,
    /// Upstream on this approval.
    Approved(String),
    /// Waits for this approval; nothing went upstream.
    Held(String),
    /// Refused; for `ApprovalDenied` the approval that was denied.
    Denied(DenyReason, Option<String>),
}

impl Verdict {
    /// The audit's `decision`.
    pub fn decision(&self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Approved(_) => "approved",
            Self::Held(_) => "held",
            Self::Denied(..) => "denied",
        }
    }
    /// The audit's `reason` (on `denied` only).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Self::Denied(r, _) => Some(r.as_str()),
            _ => None,
        }
    }
    /// The audit's `approval_id`.
    pub fn approval_id(&self) -> Option<&str> {
        match self {
            Self::Approved(id) | Self::Held(id) => Some(id),
            Self::Denied(_, id) => id.as_deref(),
            Self::Allowed => None,
        }
    }
}

// ---------------------------------------------------------------------------
// The agent side of a request on `/mcp`: what the gateway calls for an agent
// access token, after authentication and grants. It reads the agent's data
// through the caches, records the MCP tools it sees (only new or changed
// ones: no write on an unchanged list), and keeps the approvals.

/// The agent sign-in behind a request.
#[derive(Clone, Debug)]
pub struct AgentCaller {
    pub agent: Arc<Agent>,
    pub user_id: String,
    pub device_id: String,
    /// From [`tool_mode`].
    pub mode: ToolMode,
}

/// An upstream tool the caller is granted, as the gateway resolved it.
#[derive(Clone, Copy, Debug)]
pub struct ResolvedTool<'a> {
    pub server: &'a str,
    /// Exposed name on `/mcp` (`server__tool`).
    pub full_name: &'a str,
    /// Exposed name on the route asked.
    pub exposed: &'a str,
    pub class: ToolClass,
    pub description: Option<&'a str>,
    pub input_schema: Option<&'a Value>,
}

/// What the gateway does with an agent's `tools/call`.
#[derive(Clone, Debug, PartialEq)]
pub enum CallStep {
    /// Send it upstream; the audit records this verdict.
    Upstream(Verdict),
    /// Answer with this `result`; nothing goes upstream.
    Answer(Value, Verdict),
    /// Answer `Unknown tool: <name as sent>`; nothing goes upstream.
    Unknown(Verdict),
}

/// The agent's rules loaded for one request.
pub struct AgentSide<'a> {
    agents: &'a AgentCaches,
    store: &'a Store,
    /// `GATEHOUSE_APPROVAL_TTL`, seconds.
    approval_ttl: i64,
    caller: &'a AgentCaller,
    seen: Arc<HashMap<String, SeenTool>>,
}

impl<'a> AgentSide<'a> {
    /// The agent's seen MCP tools, from the agents' caches; `store` for
    /// approvals and newly seen tools. Takes the parts, not the whole `App`,
    /// so this module stays below it.
    pub async fn load(
        agents: &'a AgentCaches,
        store: &'a Store,
        approval_ttl: i64,
        caller: &'a AgentCaller,
    ) -> Result<AgentSide<'a>, Error> {
        let seen = agents.mcp_tools(caller.agent.address.as_str()).await?;
        Ok(AgentSide {
            agents,
            store,
            approval_ttl,
            caller,
            seen,
        })
    }

    fn rules(&self) -> AgentRules<'_> {
        AgentRules {
            mode: self.caller.mode,
            contract: &self.caller.agent.tool_contract,
            allow_local_mcp: self.caller.agent.allow_local_mcp,
            seen: &self.seen,
        }
    }

    /// Records the tools new to the agent or changed since last seen (an
    /// accepted tool that changed is held again), so admins see them.
    async fn observe(
        &mut self,
        tools: &[ResolvedTool<'_>],
        hashes: &[String],
    ) -> Result<(), Error> {
        let changed: Vec<SeenMcpTool> = tools
            .iter()
            .zip(hashes)
            .filter(|(t, h)| self.seen.get(t.full_name).is_none_or(|s| &s.hash != *h))
            .map(|(t, h)| SeenMcpTool {
                name: t.full_name,
                server: t.server,
                class: t.class.as_str(),
                description: t.description.unwrap_or(""),
                hash: h,
            })
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        let address = self.caller.agent.address.as_str();
        self.store.record_mcp_tools(address, &changed).await?;
        self.agents
            .invalidate(Invalidation::Tools(address.to_string()))
            .await;
        self.seen = self.agents.mcp_tools(address).await?;
        Ok(())
    }

    /// `tools/list` after the grants: which tools are listed and which held.
    pub async fn list(&mut self, tools: &[ResolvedTool<'_>]) -> Result<Listing, Error> {
        let hashes: Vec<String> = tools
            .iter()
            .map(|t| tool_hash(t.description, t.input_schema, t.class))
            .collect();
        self.observe(tools, &hashes).await?;
        let refs: Vec<McpTool> = tools
            .iter()
            .zip(&hashes)
            .map(|(t, h)| McpTool {
                full_name: t.full_name,
                exposed: t.exposed,
                class: t.class,
                hash: h,
            })
            .collect();
        Ok(self.rules().list(&refs))
    }

    /// A granted tool's `tools/call`: mode, holding, then approvals in `ask`.
    /// `canonical_arguments` is [`crate::mcp::tools::canonical_json`] of the call's arguments.
    pub async fn call(
        &mut self,
        tool: &ResolvedTool<'_>,
        canonical_arguments: &str,
    ) -> Result<CallStep, Error> {
        let hash = tool_hash(tool.description, tool.input_schema, tool.class);
        self.observe(std::slice::from_ref(tool), std::slice::from_ref(&hash))
            .await?;
        let r = McpTool {
            full_name: tool.full_name,
            exposed: tool.exposed,
            class: tool.class,
            hash: &hash,
        };
        match self.rules().admit(&r) {
            Admission::Allow => Ok(CallStep::Upstream(Verdict::Allowed)),
            Admission::Deny(reason) => Ok(CallStep::Unknown(Verdict::Denied(reason, None))),
            Admission::NeedsApproval => self.approval(tool, canonical_arguments).await,
        }
    }

    async fn approval(&self, tool: &ResolvedTool<'_>, arguments: &str) -> Result<CallStep, Error> {
        let store = self.store;
        let agent = self.caller.agent.address.as_str();
        let latest = store
            .latest_mcp_approval(agent, &self.caller.user_id, tool.exposed, arguments)
            .await?;
        let step = approval_step(
            latest.as_ref().map(|a| LatestApproval {
                id: &a.id,
                status: &a.status,
                expires_at: a.expires_at,
                used_at: a.used_at,
            }),
            crate::store::now_ms(),
        );
        match step {
            ApprovalStep::Wait(id) => {
                let expires = latest.map_or(0, |a| a.expires_at);
                Ok(CallStep::Answer(
                    pending_result(&id, &crate::time::rfc3339(expires)),
                    Verdict::Held(id),
                ))
            }
            // One call per approval: a call that loses the race to use it asks anew.
            ApprovalStep::Go(id) if store.use_approval(&id).await? => {
                Ok(CallStep::Upstream(Verdict::Approved(id)))
            }
            ApprovalStep::Refuse(id) if store.use_approval(&id).await? => Ok(CallStep::Answer(
                denied_result(),
                Verdict::Denied(DenyReason::ApprovalDenied, Some(id)),
            )),
            _ => self.ask(tool, arguments).await,
        }
    }

    /// A new pending approval, and the answer that names it.
    async fn ask(&self, tool: &ResolvedTool<'_>, arguments: &str) -> Result<CallStep, Error> {
        let now = crate::store::now_ms();
        let row = ApprovalRow {
            id: new_approval_id(),
            agent: self.caller.agent.address.as_str().to_string(),
            user_id: self.caller.user_id.clone(),
            device_id: self.caller.device_id.clone(),
            tool_call_id: String::new(),
            tool: tool.exposed.to_string(),
            arguments: arguments.to_string(),
            status: "pending".into(),
            reason: None,
            conversation_id: None,
            created_at: now,
            expires_at: now + self.approval_ttl * 1000,
            decided_at: None,
            source: "mcp".into(),
            server: Some(tool.server.to_string()),
            used_at: None,
        };
        self.store
            .create_approvals(std::slice::from_ref(&row))
            .await?;
        Ok(CallStep::Answer(
            pending_result(&row.id, &crate::time::rfc3339(row.expires_at)),
            Verdict::Held(row.id),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(entries: &[(&str, ToolStatus, &str)]) -> HashMap<String, SeenTool> {
        entries
            .iter()
            .map(|(n, s, h)| {
                (
                    n.to_string(),
                    SeenTool {
                        status: *s,
                        hash: h.to_string(),
                    },
                )
            })
            .collect()
    }

    fn t<'a>(name: &'a str, class: ToolClass) -> McpTool<'a> {
        McpTool {
            full_name: name,
            exposed: name,
            class,
            hash: "h1",
        }
    }

    fn tools() -> Vec<McpTool<'static>> {
        vec![
            t("alpha__get", ToolClass::Read),
            t("alpha__put", ToolClass::Write),
            t("beta__run", ToolClass::Execute),
        ]
    }

    fn rules<'a>(
        mode: ToolMode,
        contract: &'a [String],
        seen: &'a HashMap<String, SeenTool>,
    ) -> AgentRules<'a> {
        AgentRules {
            mode,
            contract,
            allow_local_mcp: false,
            seen,
        }
    }

    #[test]
    fn each_mode_lists_the_classes_it_allows() {
        let s = HashMap::new();
        let keep = |mode| rules(mode, &[], &s).list(&tools()).keep;
        assert_eq!(keep(ToolMode::Off), Vec::<usize>::new());
        assert_eq!(keep(ToolMode::ReadOnly), vec![0]);
        assert_eq!(keep(ToolMode::Ask), vec![0, 1, 2]);
        assert_eq!(keep(ToolMode::Auto), vec![0, 1, 2]);
    }

    #[test]
    fn each_mode_admits_calls_as_the_contract_says() {
        let s = HashMap::new();
        let admit = |mode, i: usize| rules(mode, &[], &s).admit(&tools()[i]);
        for i in 0..3 {
            assert_eq!(
                admit(ToolMode::Off, i),
                Admission::Deny(DenyReason::ToolMode)
            );
            assert_eq!(admit(ToolMode::Auto, i), Admission::Allow);
        }
        assert_eq!(admit(ToolMode::ReadOnly, 0), Admission::Allow);
        assert_eq!(
            admit(ToolMode::ReadOnly, 1),
            Admission::Deny(DenyReason::ToolMode)
        );
        assert_eq!(
            admit(ToolMode::ReadOnly, 2),
            Admission::Deny(DenyReason::ToolMode)
        );
        assert_eq!(admit(ToolMode::Ask, 0), Admission::Allow);
        assert_eq!(admit(ToolMode::Ask, 1), Admission::NeedsApproval);
        assert_eq!(admit(ToolMode::Ask, 2), Admission::NeedsApproval);
    }

    #[test]
    fn a_non_empty_contract_holds_tools_it_does_not_list_unless_accepted() {
        let contract = vec!["alpha__get".to_string()];
        let s = seen(&[
            ("alpha__put", ToolStatus::Accepted, "h1"),
            ("beta__run", ToolStatus::Rejected, "h1"),
        ]);
        let r = rules(ToolMode::Auto, &contract, &s);
        let l = r.list(&tools());
        assert_eq!(l.keep, vec![0, 1]);
        assert_eq!(l.held, vec![2]);
        assert_eq!(r.admit(&tools()[2]), Admission::Deny(DenyReason::ToolHeld));
        assert_eq!(r.admit(&tools()[1]), Admission::Allow);
        // Seen but never decided: held.
        let s = seen(&[("alpha__put", ToolStatus::Held, "h1")]);
        assert!(rules(ToolMode::Auto, &contract, &s).is_held(&tools()[1]));
    }

    #[test]
    fn an_accepted_tool_that_changed_is_held_again() {
        let contract = vec!["x".to_string()];
        let s = seen(&[("alpha__put", ToolStatus::Accepted, "old")]);
        let r = rules(ToolMode::Auto, &contract, &s);
        assert!(r.is_held(&tools()[1]));
        assert_eq!(r.list(&tools()).held, vec![0, 1, 2]);
    }

    #[test]
    fn empty_contract_or_local_mcp_holds_nothing() {
        let s = HashMap::new();
        assert!(rules(ToolMode::Auto, &[], &s)
            .list(&tools())
            .held
            .is_empty());
        let contract = vec!["x".to_string()];
        let r = AgentRules {
            allow_local_mcp: true,
            ..rules(ToolMode::Auto, &contract, &s)
        };
        assert_eq!(r.list(&tools()).keep, vec![0, 1, 2]);
    }

    #[test]
    fn the_contract_may_name_a_tool_by_its_route_name() {
        let contract = vec!["put".to_string()];
        let s = HashMap::new();
        let tool = McpTool {
            full_name: "alpha__put",
            exposed: "put",
            class: ToolClass::Write,
            hash: "h",
        };
        assert!(!rules(ToolMode::Auto, &contract, &s).is_held(&tool));
    }

    #[test]
    fn the_mode_filters_before_holding_so_hidden_tools_are_not_named_held() {
        let contract = vec!["x".to_string()];
        let s = HashMap::new();
        let l = rules(ToolMode::ReadOnly, &contract, &s).list(&tools());
        assert_eq!(
            l,
            Listing {
                keep: vec![],
                held: vec![0]
            }
        );
        assert_eq!(
            rules(ToolMode::Off, &contract, &s).list(&tools()),
            Listing::default()
        );
    }

    fn latest<'a>(status: &'a str, used: Option<i64>) -> Option<LatestApproval<'a>> {
        Some(LatestApproval {
            id: "apr_1",
            status,
            expires_at: 1_000,
            used_at: used,
        })
    }

    #[test]
    fn a_call_follows_its_latest_approval() {
        assert_eq!(approval_step(None, 10), ApprovalStep::Ask);
        assert_eq!(
            approval_step(latest("pending", None), 999),
            ApprovalStep::Wait("apr_1".into())
        );
        // Pending at its expiry is expired: a new approval.
        assert_eq!(
            approval_step(latest("pending", None), 1_000),
            ApprovalStep::Ask
        );
        assert_eq!(
            approval_step(latest("approved", None), 5_000),
            ApprovalStep::Go("apr_1".into())
        );
        assert_eq!(
            approval_step(latest("denied", None), 5_000),
            ApprovalStep::Refuse("apr_1".into())
        );
        assert_eq!(
            approval_step(latest("approved", Some(7)), 10),
            ApprovalStep::Ask
        );
        assert_eq!(
            approval_step(latest("denied", Some(7)), 10),
            ApprovalStep::Ask
        );
    }

    #[test]
    fn results_carry_the_contracts_texts() {
        let p = pending_result("apr_9", "2026-01-01T00:00:00Z");
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"_meta":{"gatehouse/approval":{"expires_at":"2026-01-01T00:00:00Z","id":"apr_9","status":"pending"}},"content":[{"text":"Approval required: approval apr_9 is pending. Call the tool again with the same arguments once it is approved.","type":"text"}],"isError":true}"#
        );
        assert_eq!(
            denied_result(),
            json!({"isError": true, "content": [{"type": "text", "text": "The user denied this tool call."}]})
        );
    }

    #[test]
    fn the_tool_hash_changes_with_description_schema_or_class() {
        let schema = json!({"type": "object"});
        let base = tool_hash(Some("d"), Some(&schema), ToolClass::Write);
        assert_eq!(base, tool_hash(Some("d"), Some(&schema), ToolClass::Write));
        assert_ne!(base, tool_hash(Some("e"), Some(&schema), ToolClass::Write));
        assert_ne!(
            base,
            tool_hash(
                Some("d"),
                Some(&json!({"type": "string"})),
                ToolClass::Write
            )
        );
        assert_ne!(
            base,
            tool_hash(Some("d"), Some(&schema), ToolClass::Execute)
        );
    }

    #[test]
    fn the_mode_header_sets_the_mode_or_is_refused() {
        assert_eq!(tool_mode(None, ToolMode::Ask), Ok(ToolMode::Ask));
        for m in ToolMode::ALL {
            assert_eq!(tool_mode(Some(m.as_str().as_bytes()), ToolMode::Off), Ok(m));
        }
        for bad in [&b"AUTO"[..], b"", b"readonly", b"\xff"] {
            assert_eq!(tool_mode(Some(bad), ToolMode::Ask), Err(InvalidToolMode));
        }
    }

    #[test]
    fn held_header_joins_names_in_order_and_is_absent_when_none() {
        assert_eq!(held_header::<&str>(&[]), None);
        assert_eq!(held_header(&["b__x", "a__y"]).as_deref(), Some("b__x,a__y"));
    }

    #[test]
    fn verdicts_read_as_audit_values() {
        let v = Verdict::Held("apr_1".into());
        assert_eq!(
            (v.decision(), v.reason(), v.approval_id()),
            ("held", None, Some("apr_1"))
        );
        let v = Verdict::Denied(DenyReason::ToolHeld, None);
        assert_eq!(
            (v.decision(), v.reason(), v.approval_id()),
            ("denied", Some("tool_held"), None)
        );
        let v = Verdict::Denied(DenyReason::ApprovalDenied, Some("apr_2".into()));
        assert_eq!(v.reason(), Some("approval_denied"));
        assert_eq!(v.approval_id(), Some("apr_2"));
        assert_eq!(Verdict::Approved("a".into()).decision(), "approved");
        assert_eq!(Verdict::Allowed.decision(), "allowed");
    }
}
