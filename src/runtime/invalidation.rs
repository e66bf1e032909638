//! What a write changed, so every cache that may hold it drops it: in this
//! process at once, and on the other servers through the store's
//! notifications (`store::notify`).

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalidation {
    User(String),
    ApiKey(String),
    /// A sign-in (by device id) ended.
    SignIn(String),
    /// An agent (by address) changed.
    Agent(String),
    /// A device's latest manifest changed (key: agent|device id).
    Manifest(String),
    /// An agent's tool decisions changed (by address).
    Tools(String),
    Catalog,
    /// An MCP server was added, changed or deleted.
    McpServers,
}
