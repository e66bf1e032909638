//! The HTTP API end to end: each test starts a real server inside this test
//! process (`common::spawn_app`) on a fresh database, and real model servers
//! are stood in for by the stub upstream (`crates/stub-upstream`). Modules
//! follow `src/`; tests that need the `gatehouse` binary as a process of its
//! own are in `tests/processes`, those that measure times in `tests/timing`.

#[path = "../common/mod.rs"]
mod common;

mod agents;
mod auth;
mod console;
mod fuzzing;
mod http;
mod limits;
mod mcp;
mod messages;
mod models;
mod pii;
mod proxy;
mod responses;
mod spend;
mod sso;
mod users;
mod wire;
