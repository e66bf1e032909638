//! Agents, manifests, tool rules, approvals and events.

pub mod agent;
pub mod approvals;
pub mod caches;
pub mod chat;
pub mod events;
pub mod hooks;
pub mod manifest;
pub mod messages;
pub mod responses;
pub mod tools;
pub mod turn;

pub use agent::{Agent, AgentAddress, AgentPatch, NewAgent, PiiSettings, ToolMode, ToolName};

use crate::models::CatalogSnapshot;
use crate::runtime::Invalidation;
use crate::store::Store;

/// The fields of an `[[agents]]` table (those of `POST /api/admin/agents`).
const FIELDS: [&str; 11] = [
    "address",
    "name",
    "model",
    "default_tool_mode",
    "tool_contract",
    "pii",
    "allow_local_mcp",
    "instructions",
    "allowed_users",
    "limits",
    "mcp",
];

/// How a problem names the `i`th `[[agents]]` table: its address, else its place.
pub fn file_agent_label(raw: &serde_json::Value, i: usize) -> String {
    raw.get("address")
        .and_then(|a| a.as_str())
        .map_or_else(|| format!("#{}", i + 1), str::to_string)
}

/// One `[[agents]]` table checked as `POST /api/admin/agents` checks its body,
/// its model looked up in `catalog`; unknown fields, ignored in the HTTP body,
/// are refused here: in a file they are typos. `mcp_server` says whether an
/// MCP server of that name exists (for the agent's `mcp` grant).
pub fn parse_file_agent(
    raw: &serde_json::Value,
    catalog: &CatalogSnapshot,
    now: i64,
    mcp_server: impl Fn(&str) -> bool,
) -> crate::error::Result<Agent> {
    if let Some(unknown) = raw
        .as_object()
        .and_then(|o| o.keys().find(|k| !FIELDS.contains(&k.as_str())))
    {
        return Err(crate::error::Error::validation(
            unknown.as_str(),
            format!("unknown field `{unknown}`"),
        ));
    }
    let new: NewAgent = serde_json::from_value(raw.clone())
        .map_err(|e| crate::error::Error::validation("agent", e.to_string()))?;
    let mut agent = new.validate(catalog, now)?;
    if let Some(v) = &new.mcp {
        agent.mcp = crate::users::mcp_grant::McpGrant::parse(v, mcp_server)?;
    }
    Ok(agent)
}

/// Applies the `[[agents]]` tables of GATEHOUSE_CONFIG as upserts: the file is
/// the source of truth for the agents it names (fields it leaves out take
/// their defaults). Runs at start, after the file's providers and models.
/// Returns the agents written, so the caller can end sign-ins they no longer allow.
pub async fn apply_file_agents(
    store: &Store,
    agents: &[serde_json::Value],
) -> Result<Vec<Agent>, String> {
    let mut written = Vec::with_capacity(agents.len());
    if agents.is_empty() {
        return Ok(written);
    }
    let catalog = CatalogSnapshot::load(store)
        .await
        .map_err(|e| e.to_string())?;
    let now = crate::store::now_ms();
    let mcp_servers = store.mcp_server_names().await.map_err(|e| e.to_string())?;
    for (i, raw) in agents.iter().enumerate() {
        let label = file_agent_label(raw, i);
        let fail = |m: String| format!("GATEHOUSE_CONFIG agent {label}: {m}");
        let agent = parse_file_agent(raw, &catalog, now, |s| mcp_servers.iter().any(|n| n == s))
            .map_err(|e| fail(e.message))?;
        store
            .upsert_agent(&agent.to_row())
            .await
            .map_err(|e| fail(e.to_string()))?;
        crate::store::notify::publish(store, &Invalidation::Agent(agent.address.to_string())).await;
        written.push(agent);
    }
    Ok(written)
}
