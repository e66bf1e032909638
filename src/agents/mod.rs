//! Agents, manifests, tool rules, approvals and events.

pub mod approvals;
pub mod events;
pub mod ids;
pub mod manifest;
pub mod tools;

/// Applies agents from the TOML config (filled by the agents work).
pub async fn apply_file_agents(
    _store: &crate::store::Store,
    agents: &[serde_json::Value],
) -> Result<(), String> {
    if agents.is_empty() {
        Ok(())
    } else {
        Err("agents in GATEHOUSE_CONFIG are not supported yet".into())
    }
}
