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
mod errors;
mod fuzzing;
mod hardening;
mod limits;
mod models;
mod openapi;
mod pii;
mod proxy;
mod request_ids;
mod sso;
mod system;
mod users;
