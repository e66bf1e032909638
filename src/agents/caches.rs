//! Agent data read on every agent request, cached: agents by address, the
//! tool classes of each device's latest manifest, and the administrator's
//! decisions on each agent's tools. Entries live a short time and are
//! dropped at once on a change here ([`AgentCaches::forget`], called for
//! every invalidation) and on the other servers through the store's
//! notifications.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::agents::tools::{SeenTool, ToolClass, ToolStatus};
use crate::agents::Agent;
use crate::runtime::{Invalidation, TtlCache};
use crate::store::Store;

pub struct AgentCaches {
    store: Store,
    /// address -> agent; a miss is not cached.
    agents: TtlCache<String, Arc<Agent>>,
    /// agent|device -> tool classes of the device's latest manifest.
    manifests: TtlCache<String, Arc<HashMap<String, ToolClass>>>,
    /// address -> administrator decisions on the agent's tools.
    tools: TtlCache<String, Arc<HashMap<String, ToolStatus>>>,
    /// address -> MCP tools seen for the agent (status and hash), by exposed name.
    mcp_tools: TtlCache<String, Arc<HashMap<String, SeenTool>>>,
}

impl AgentCaches {
    pub fn new(store: Store, ttl: Duration) -> AgentCaches {
        AgentCaches {
            store,
            agents: TtlCache::new(ttl, 10_000),
            manifests: TtlCache::new(ttl, 100_000),
            tools: TtlCache::new(ttl, 10_000),
            mcp_tools: TtlCache::new(ttl, 10_000),
        }
    }

    /// An agent by address, from the cache or the database (then cached).
    pub async fn agent(&self, address: &str) -> Result<Option<Arc<Agent>>, sqlx::Error> {
        self.agents
            .get_or_load(address, || async {
                let Some(row) = self.store.agent(address).await? else {
                    return Ok(None);
                };
                Agent::from_row(row)
                    .map(|a| Some(Arc::new(a)))
                    .map_err(|e| sqlx::Error::Decode(e.into()))
            })
            .await
    }

    /// Tool classes from the device's latest manifest.
    pub async fn manifest_classes(
        &self,
        agent: &str,
        device: &str,
    ) -> Result<Arc<HashMap<String, ToolClass>>, sqlx::Error> {
        let loaded = self
            .manifests
            .get_or_load(&format!("{agent}|{device}"), || async {
                let body = self.store.latest_manifest(agent, device).await?;
                Ok::<_, sqlx::Error>(Some(Arc::new(classes_of(body.as_deref()))))
            })
            .await?;
        Ok(loaded.unwrap_or_default())
    }

    /// Administrator decisions on the agent's tools.
    pub async fn tool_decisions(
        &self,
        agent: &str,
    ) -> Result<Arc<HashMap<String, ToolStatus>>, sqlx::Error> {
        let loaded = self
            .tools
            .get_or_load(agent, || async {
                let rows = self.store.list_tools(agent).await?;
                let map: HashMap<String, ToolStatus> = rows
                    .iter()
                    .filter_map(|r| Some((r.name.clone(), ToolStatus::parse(&r.status)?)))
                    .collect();
                Ok::<_, sqlx::Error>(Some(Arc::new(map)))
            })
            .await?;
        Ok(loaded.unwrap_or_default())
    }

    /// MCP tools seen for the agent, with the admin's decision and the hash it binds to.
    pub async fn mcp_tools(
        &self,
        agent: &str,
    ) -> Result<Arc<HashMap<String, SeenTool>>, sqlx::Error> {
        let loaded = self
            .mcp_tools
            .get_or_load(agent, || async {
                let rows = self.store.mcp_tool_states(agent).await?;
                let map: HashMap<String, SeenTool> = rows
                    .into_iter()
                    .filter_map(|(name, (status, hash))| {
                        Some((
                            name,
                            SeenTool {
                                status: ToolStatus::parse(&status)?,
                                hash,
                            },
                        ))
                    })
                    .collect();
                Ok::<_, sqlx::Error>(Some(Arc::new(map)))
            })
            .await?;
        Ok(loaded.unwrap_or_default())
    }

    /// Drops what `inv` makes stale.
    /// Applies an agent-side invalidation here and tells the other servers
    /// (as `Auth::invalidate` does for credentials).
    pub async fn invalidate(&self, inv: Invalidation) {
        self.forget(&inv);
        crate::store::notify::publish(&self.store, &inv).await;
    }

    pub fn forget(&self, inv: &Invalidation) {
        match inv {
            Invalidation::Agent(address) => self.agents.remove(address),
            Invalidation::Manifest(key) => self.manifests.remove(key),
            Invalidation::Tools(address) => {
                self.tools.remove(address);
                self.mcp_tools.remove(address);
            }
            _ => {}
        }
    }

    pub fn forget_all(&self) {
        self.agents.clear();
        self.manifests.clear();
        self.tools.clear();
        self.mcp_tools.clear();
    }
}

/// Tool classes of a stored manifest body (canonical JSON).
fn classes_of(body: Option<&str>) -> HashMap<String, ToolClass> {
    let mut map = HashMap::new();
    if let Some(v) = body.and_then(|b| serde_json::from_str::<Value>(b).ok()) {
        for t in v
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = t.get("name").and_then(Value::as_str);
            let class = t
                .get("class")
                .and_then(Value::as_str)
                .and_then(ToolClass::parse);
            if let (Some(n), Some(c)) = (name, class) {
                map.insert(n.to_string(), c);
            }
        }
    }
    map
}
