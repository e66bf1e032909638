//! Tests of the `gatehouse` binary run as a process of its own: `gatehouse
//! serve` under signals and `kill -9`, several servers on one database, its
//! connection handling, its captured logs and exported traces, the command
//! line, the container's commands, a PostgreSQL outage. A separate test
//! binary from `tests/api` because none of this can be seen from a server
//! inside the test process.

#[path = "../common/mod.rs"]
mod common;

mod budgets;
mod cli;
mod connections;
mod container_files;
mod db_outage;
mod durability;
mod limits;
mod log_secrets;
mod login_throttle;
mod logs;
mod mcp;
mod multi_server;
mod secrets;
mod sessions;
mod shutdown;
mod traces;
