//! The agent turn, written once: what goes upstream when an agent app chats
//! through its agent, in the order the rules run. Every agent route (chat
//! today; the other dialects through a body that implements [`TurnBody`]),
//! the fuzz target and the bench call these functions rather than repeating
//! the order.
//!
//! The turn has a pure part and a part that reads and writes around it:
//!
//! 1. [`check`] (pure): the body's refusals that record nothing and cost
//!    nothing: legacy function fields, the `tools` list (count, names), the
//!    fields the relay reads. Before the model and the limits.
//! 2. [`prepare`] (I/O): reads what the rules need ([`Known`]: the device's
//!    tool classes, the administrator's decisions, the states of the
//!    approvals that tool results answer, the PII scanner and the
//!    conversation's vault), runs [`plan`], then writes what it decided
//!    (held tools the administrator has not seen, the vault) before the
//!    upstream call.
//! 3. [`plan`] (pure), in this order: the agent's instructions first; the
//!    tool rule (mode, classes, contract, decisions) removes tools and a
//!    `tool_choice` naming one; answered calls get their fate (409 while
//!    pending, the denial text when denied or expired); PII protection of
//!    every string that goes upstream, with the token note in
//!    `tokenize_reversible` mode.
//!
//! The answer side of the turn (approvals for the tool calls of the answer,
//! PII restore, AG-UI events) is [`crate::agents::hooks`].

use std::collections::HashMap;
use std::sync::Arc;

use gatehouse_pii::{Counts, Mode as PiiMode, Scanner, Vault};

use crate::agents::approvals::{fate_of, ApprovalState};
use crate::agents::caches::AgentCaches;
use crate::agents::chat::ChatHeaders;
use crate::agents::hooks::{AgentChatContext, AgentHooks};
use crate::agents::tools::{ToolClass, ToolMode, ToolPolicy, ToolStatus};
use crate::agents::Agent;
use crate::error::Error;
use crate::pii::{protect_text, Scanners, VaultStore, TOKEN_NOTE};
use crate::runtime::Invalidation;
use crate::store::Store;
use crate::usage::{EndHook, UsageContext};
use crate::wire::chat::request::ChatRequest;
use crate::wire::chat::tools::OfferedTools;

/// A request body of some dialect, as the turn's rules work on it. Each
/// method is a mechanical edit of the dialect's own shape; the rules (which
/// tools, which fate, which mode) are the turn's.
pub trait TurnBody {
    /// The tools the body offers, read by [`TurnBody::check`].
    type Offered: Offered;

    /// The refusals that come before anything else (see [`check`]); the
    /// tools offered.
    fn check(&self) -> Result<Self::Offered, Error>;
    /// Keeps only the tools named in `keep`, and a `tool_choice` only when
    /// it names a kept tool.
    fn keep_tools(&mut self, keep: &[&str]);
    /// The ids of the tool calls the body's tool results answer, in order.
    fn answered_calls(&self) -> Vec<String>;
    /// Gives each tool result the fate `fate` gives its call: kept
    /// (`Ok(None)`), its content replaced (`Ok(Some(text))`), or the request
    /// refused (`Err`).
    fn answer_calls(
        &mut self,
        fate: &dyn Fn(&str) -> Result<Option<&'static str>, Error>,
    ) -> Result<(), Error>;
    /// Puts the agent's instructions first.
    fn put_instructions(&mut self, instructions: &str);
    /// Calls `scan` on every string that goes upstream as text.
    fn protect(&mut self, scan: &mut dyn FnMut(&mut String)) -> Result<(), Error>;
    /// Puts a system note at `at` among the messages (after the
    /// instructions when `at` is 1).
    fn put_note(&mut self, note: &str, at: usize) -> Result<(), Error>;
    fn is_stream(&self) -> bool;
}

/// The names of the tools a body offers, in offered order.
pub trait Offered {
    fn names(&self) -> Vec<&str>;
}

impl Offered for OfferedTools {
    fn names(&self) -> Vec<&str> {
        OfferedTools::names(self)
    }
}

impl TurnBody for ChatRequest {
    type Offered = OfferedTools;

    fn check(&self) -> Result<OfferedTools, Error> {
        self.refuse_legacy_functions()?;
        let offered = self.offered_tools()?;
        // Fields kept as text passed these checks as they were read.
        if let Some(fields) = self.fields() {
            crate::wire::chat::check_body(fields)?;
        }
        Ok(offered)
    }

    fn keep_tools(&mut self, keep: &[&str]) {
        if self.has_tool_fields() {
            self.apply(keep);
        }
    }

    fn answered_calls(&self) -> Vec<String> {
        ChatRequest::answered_calls(self)
    }

    fn answer_calls(
        &mut self,
        fate: &dyn Fn(&str) -> Result<Option<&'static str>, Error>,
    ) -> Result<(), Error> {
        ChatRequest::answer_calls(self, fate)
    }

    fn put_instructions(&mut self, instructions: &str) {
        ChatRequest::put_instructions(self, instructions)
    }

    fn protect(&mut self, scan: &mut dyn FnMut(&mut String)) -> Result<(), Error> {
        self.with_tools_as_values(|body| crate::wire::chat::for_each_text(body, scan))
    }

    fn put_note(&mut self, note: &str, at: usize) -> Result<(), Error> {
        if let Some(serde_json::Value::Array(messages)) = self.tree()?.get_mut("messages") {
            messages.insert(
                at.min(messages.len()),
                serde_json::json!({"role": "system", "content": note}),
            );
        }
        Ok(())
    }

    fn is_stream(&self) -> bool {
        ChatRequest::is_stream(self)
    }
}

/// The refusals that record nothing and reach no upstream (contract,
/// "Refused tool lists change nothing"); the tools offered.
pub fn check<B: TurnBody>(body: &B) -> Result<B::Offered, Error> {
    body.check()
}

/// The agent's settings the rules read.
#[derive(Clone, Copy)]
pub struct AgentRules<'a> {
    /// A system message put first.
    pub instructions: Option<&'a str>,
    pub tool_contract: &'a [String],
    pub allow_local_mcp: bool,
}

impl<'a> AgentRules<'a> {
    pub fn of(agent: &'a Agent) -> AgentRules<'a> {
        AgentRules {
            instructions: agent.instructions.as_deref(),
            tool_contract: &agent.tool_contract,
            allow_local_mcp: agent.allow_local_mcp,
        }
    }
}

/// What the rules need to know besides the request.
pub struct Known {
    /// The session's tool mode (the header's, else the agent's default).
    pub mode: ToolMode,
    /// Classes from the device's latest manifest; a missing tool counts as `execute`.
    pub classes: Arc<HashMap<String, ToolClass>>,
    /// The administrator's decisions, when the agent holds tools (else empty).
    pub decisions: Arc<HashMap<String, ToolStatus>>,
    /// States of the approvals the body's tool results answer.
    pub states: HashMap<String, ApprovalState>,
    /// PII protection, unless its mode is off.
    pub pii: Option<PiiKnown>,
}

/// PII protection for one turn.
pub struct PiiKnown {
    pub mode: PiiMode,
    pub scanner: Arc<Scanner>,
    /// The conversation's vault (`tokenize_reversible`), or a new one.
    pub vault: Vault,
}

/// What [`plan`] decided.
pub struct Plan {
    /// Tools held back by the contract, in offered order.
    pub held: Vec<String>,
    /// Held tools the administrator has not decided on (they show in the
    /// administrator's tool list).
    pub unseen: Vec<String>,
    /// A refusal after the tool decision (a pending approval, a tool that
    /// cannot be read for PII protection): the unseen tools are still
    /// recorded.
    pub refused: Option<Error>,
    /// What PII protection found, by kind.
    pub counts: Counts,
    /// The conversation's vault after this turn (`tokenize_reversible`).
    pub vault: Option<Vault>,
}

/// The rules of the turn, in their order (see the module documentation),
/// on a body that passed [`check`].
pub fn plan<B: TurnBody>(
    body: &mut B,
    offered: &B::Offered,
    agent: AgentRules<'_>,
    known: Known,
) -> Plan {
    if let Some(instructions) = agent.instructions {
        body.put_instructions(instructions);
    }
    let policy = ToolPolicy {
        mode: known.mode,
        classes: &known.classes,
        contract: agent.tool_contract,
        decisions: &known.decisions,
        allow_local_mcp: agent.allow_local_mcp,
    };
    let decision = policy.decide(&offered.names());
    body.keep_tools(&decision.keep);
    let unseen = decision
        .held
        .iter()
        .filter(|t| !known.decisions.contains_key(**t))
        .map(|t| t.to_string())
        .collect();
    let mut plan = Plan {
        held: decision.held.iter().map(|t| t.to_string()).collect(),
        unseen,
        refused: None,
        counts: Counts::new(),
        vault: None,
    };
    if !known.states.is_empty() {
        if let Err(e) = body.answer_calls(&fate_of(&known.states)) {
            plan.refused = Some(e);
            return plan;
        }
    }
    if let Some(PiiKnown {
        mode,
        scanner,
        mut vault,
    }) = known.pii
    {
        let counts = &mut plan.counts;
        let protected = body.protect(&mut |s| protect_text(s, &scanner, mode, &mut vault, counts));
        if let Err(e) = protected {
            plan.refused = Some(e);
            return plan;
        }
        if mode == PiiMode::TokenizeReversible {
            if !vault.is_empty() {
                let at = usize::from(agent.instructions.is_some());
                if let Err(e) = body.put_note(TOKEN_NOTE, at) {
                    plan.refused = Some(e);
                    return plan;
                }
            }
            plan.vault = Some(vault);
        }
    }
    plan
}

/// What the turn reads and writes, on this server.
pub struct TurnContext<'a> {
    pub store: &'a Store,
    pub agents: &'a AgentCaches,
    pub scanners: &'a Scanners,
    pub vaults: &'a VaultStore,
    /// How long a conversation's vault lives after its last use, seconds.
    pub vault_ttl_s: i64,
    /// How long an approval waits for its answer, seconds.
    pub approval_ttl: i64,
}

/// Who takes the turn: the agent, and the user and device of the sign-in.
pub struct Caller {
    pub agent: Arc<Agent>,
    pub user_id: String,
    pub device_id: String,
}

impl Caller {
    /// Who made the request, for its usage record (the conversation and
    /// turn when the headers were read).
    pub fn usage(&self, headers: Option<&ChatHeaders>, on_end: EndHook) -> UsageContext {
        UsageContext {
            user_id: Some(self.user_id.clone()),
            api_key_id: None,
            agent: Some(self.agent.address.as_str().to_string()),
            device_id: Some(self.device_id.clone()),
            conversation_id: headers.and_then(|h| h.conversation_id.clone()),
            turn_id: headers.and_then(|h| h.turn_id.clone()),
            api: None,
            on_end,
        }
    }
}

/// A turn ready for the upstream call: the body is edited; what the answer's
/// side needs is here.
pub struct Prepared {
    pub mode: ToolMode,
    pub classes: Arc<HashMap<String, ToolClass>>,
    pub held: Vec<String>,
    pub counts: Counts,
    /// Present in `tokenize_reversible` mode.
    pub vault: Option<Arc<Vault>>,
}

/// Reads what the rules need, runs [`plan`] and writes what it decided (see
/// the module documentation). `body` passed [`check`], which gave `offered`.
pub async fn prepare<B: TurnBody>(
    cx: &TurnContext<'_>,
    caller: &Caller,
    headers: &ChatHeaders,
    pii_mode: PiiMode,
    body: &mut B,
    offered: &B::Offered,
) -> Result<Prepared, Error> {
    let agent = &caller.agent;
    let address = agent.address.as_str();
    let mode = headers.tool_mode.unwrap_or(agent.default_tool_mode);
    let classes = cx
        .agents
        .manifest_classes(address, &caller.device_id)
        .await?;
    let holding = !agent.tool_contract.is_empty() && !agent.allow_local_mcp;
    let decisions = if holding {
        cx.agents.tool_decisions(address).await?
    } else {
        Arc::default()
    };
    let answered = body.answered_calls();
    let states = if answered.is_empty() {
        HashMap::new()
    } else {
        let now = crate::store::now_ms();
        cx.store
            .approval_states(
                address,
                &caller.user_id,
                headers.conversation_id.as_deref(),
                &answered,
            )
            .await?
            .into_iter()
            .filter_map(|(id, (s, exp))| Some((id, ApprovalState::parse(&s)?.effective(exp, now))))
            .collect()
    };
    let vault_key = headers
        .conversation_id
        .as_deref()
        .map(|c| VaultStore::key(address, &caller.user_id, c));
    let pii = if pii_mode == PiiMode::Off {
        None
    } else {
        let vault = match (&vault_key, pii_mode) {
            (Some(k), PiiMode::TokenizeReversible) => cx.vaults.load(cx.store, k).await?,
            _ => Vault::new(),
        };
        Some(PiiKnown {
            mode: pii_mode,
            scanner: cx.scanners.get(&agent.pii.terms).await?,
            vault,
        })
    };
    let known = Known {
        mode,
        classes: Arc::clone(&classes),
        decisions,
        states,
        pii,
    };
    let plan = plan(body, offered, AgentRules::of(agent), known);
    if !plan.unseen.is_empty() {
        // Held tools show in the admin's list even if no manifest named them.
        cx.store.record_offered_tools(address, &plan.unseen).await?;
        let inv = Invalidation::Tools(address.to_string());
        cx.agents.forget(&inv);
        crate::store::notify::publish(cx.store, &inv).await;
    }
    if let Some(e) = plan.refused {
        return Err(e);
    }
    let vault = match plan.vault {
        Some(vault) => {
            // Saved on every turn that uses it, before the upstream call (so
            // the answer can always be restored): its lifetime counts from
            // the last use.
            if let (Some(k), false) = (&vault_key, vault.is_empty()) {
                cx.vaults.save(cx.store, k, &vault, cx.vault_ttl_s).await?;
            }
            Some(Arc::new(vault))
        }
        None => None,
    };
    Ok(Prepared {
        mode,
        classes,
        held: plan.held,
        counts: plan.counts,
        vault,
    })
}

impl Prepared {
    /// The answer's side of the turn (approvals, PII restore, AG-UI events
    /// on a stream when the client asked for them).
    pub fn hooks(
        self,
        cx: &TurnContext<'_>,
        caller: &Caller,
        headers: &ChatHeaders,
        model_alias: &str,
        stream: bool,
    ) -> AgentHooks {
        let ag_ui = (headers.ag_ui && stream).then(|| {
            let gen = || uuid::Uuid::new_v4().to_string();
            (
                headers.conversation_id.clone().unwrap_or_else(gen),
                headers.turn_id.clone().unwrap_or_else(gen),
            )
        });
        AgentHooks::new(AgentChatContext {
            store: cx.store.clone(),
            approval_ttl: cx.approval_ttl,
            agent: caller.agent.address.as_str().to_string(),
            model_alias: model_alias.to_string(),
            user_id: caller.user_id.clone(),
            device_id: caller.device_id.clone(),
            conversation_id: headers.conversation_id.clone(),
            mode: self.mode,
            classes: self.classes,
            held: self.held,
            pii_counts: self.counts,
            vault: self.vault,
            ag_ui,
        })
    }
}
