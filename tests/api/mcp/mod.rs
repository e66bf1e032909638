//! The MCP gateway (issue 33): servers, grants and the call audit.

mod admin;
mod store;
