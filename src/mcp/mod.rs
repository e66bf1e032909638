//! The MCP gateway (contract: "MCP gateway"): `/mcp` and `/mcp/{server}`
//! end the Model Context Protocol here and call the upstream servers an
//! administrator configured, under grants, tool classes, tool modes and
//! approvals. See docs/mcp.md.

pub mod agent;
pub mod session;
pub mod tools;
pub mod upstream;
