//! The MCP gateway (`/mcp`): sessions, fan-out, grants, audit, and the
//! agents' tool rules applied to MCP tools.

pub mod agent;
