//! The MCP gateway end to end (contract: "MCP gateway"): a real server in
//! the test process (`common::spawn_app`) in front of real MCP servers
//! written with the official `mcp` Python SDK (`servers.py` beside this
//! file) on loopback ports. A test binary of its own so it builds without
//! the whole API suite; two servers on one PostgreSQL are in
//! `tests/processes/mcp.rs`, the SDK clients in `tests/python/test_mcp_sdk.py`.

#[path = "../common/mod.rs"]
mod common;

mod agents;
mod gateway;
