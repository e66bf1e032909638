//! The MCP gateway (contract: "MCP gateway"): `/mcp` and `/mcp/{server}`
//! end the Model Context Protocol here and call the upstream servers an
//! administrator configured, under grants, tool classes, tool modes and
//! approvals (the agents' tool rules applied to MCP tools). See docs/mcp.md
//! and docs/mcp-admin.md.
//!
//! The servers are read on every MCP request from an in-memory snapshot
//! ([`McpServers`]), reloaded when a server changes here
//! or on another server (`Invalidation::McpServers`), so no request pays a
//! database round trip for them. Grants travel with the credential they
//! belong to (`KeyInfo::mcp`, `UserInfo::mcp`, `Agent::mcp`), cached and
//! invalidated with it.

pub mod agent;
pub mod audit;
pub mod gateway;
pub mod grants;
pub mod protocol;
pub mod servers;
pub mod session;
pub mod store;
pub mod tools;
pub mod upstream;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

pub use audit::McpCallRecord;
pub use grants::{Grants, McpGrant};
pub use servers::McpServer;

use crate::secrets::Keyring;
use crate::store::Store;

/// Every configured server, by name (sorted), header values opened.
#[derive(Clone, Debug, Default)]
pub struct ServerSnapshot {
    servers: Vec<Arc<McpServer>>,
}

impl ServerSnapshot {
    pub fn new(mut servers: Vec<McpServer>) -> ServerSnapshot {
        servers.sort_by(|a, b| a.name.cmp(&b.name));
        ServerSnapshot {
            servers: servers.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<McpServer>> {
        self.servers
            .binary_search_by(|s| s.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.servers[i])
    }

    /// Every server, ordered by name.
    pub fn all(&self) -> &[Arc<McpServer>] {
        &self.servers
    }

    /// The servers the caller may use, ordered by name.
    pub fn granted<'a>(
        &'a self,
        grants: &'a Grants<'a>,
    ) -> impl Iterator<Item = &'a Arc<McpServer>> {
        self.servers
            .iter()
            .filter(|s| grants.server_granted(&s.name))
    }
}

/// The servers as every MCP request reads them: a snapshot swapped whole.
#[derive(Default)]
pub struct McpServers {
    current: RwLock<Arc<ServerSnapshot>>,
    reloads: AtomicU64,
    applied: AtomicU64,
}

impl McpServers {
    pub fn snapshot(&self) -> Arc<ServerSnapshot> {
        Arc::clone(&self.current.read())
    }

    /// Reads the servers again. As with the catalog, the reload that started
    /// last wins, so a read made before a change never replaces a later one.
    pub async fn reload(&self, store: &Store, keyring: &Keyring) -> Result<(), sqlx::Error> {
        let started = self.reloads.fetch_add(1, Ordering::SeqCst) + 1;
        let servers = store.list_mcp_servers_opened(keyring).await?;
        let snapshot = ServerSnapshot::new(servers);
        let mut current = self.current.write();
        if started > self.applied.load(Ordering::SeqCst) {
            self.applied.store(started, Ordering::SeqCst);
            *current = Arc::new(snapshot);
        }
        Ok(())
    }
}

/// Applies the `[[mcp_servers]]` tables of GATEHOUSE_CONFIG as upserts
/// (`source: "config"`): the file is the source of truth for the servers it
/// names. Runs at start, before the file's agents (whose grants may name them).
pub async fn apply_file_servers(
    store: &Store,
    keyring: &Keyring,
    tables: &[serde_json::Value],
) -> Result<(), String> {
    let now = crate::store::now_ms();
    let mut seen = std::collections::HashSet::new();
    for (i, raw) in tables.iter().enumerate() {
        let label = servers::file_server_label(raw, i);
        let fail = |m: String| format!("GATEHOUSE_CONFIG mcp server {label}: {m}");
        let server = servers::parse_new(raw, servers::Source::Config, true, now)
            .map_err(|e| fail(e.message))?;
        if !seen.insert(server.name.clone()) {
            return Err(fail("this name is used twice".to_string()));
        }
        let row =
            crate::mcp::store::McpServerRow::seal(&server, keyring).map_err(|e| fail(e.message))?;
        store
            .put_mcp_server(&row, true)
            .await
            .map_err(|e| fail(e.to_string()))?;
    }
    if !tables.is_empty() {
        crate::store::notify::publish(store, &crate::runtime::Invalidation::McpServers).await;
    }
    Ok(())
}
