//! A private PostgreSQL cluster of one test (scripts/pg.sh), for tests that
//! stop and start the database under running servers. Such tests run only
//! when GATEHOUSE_TEST_PG_FAULT=1 (scripts/test.sh sets it): see
//! [`fault_tests_enabled`].

use std::process::Command;

/// Whether the database fault tests run here (they need PostgreSQL's server
/// binaries and take seconds); says why not when they do not.
pub fn fault_tests_enabled() -> bool {
    if std::env::var("GATEHOUSE_TEST_PG_FAULT").as_deref() == Ok("1") {
        return true;
    }
    eprintln!("not applicable: set GATEHOUSE_TEST_PG_FAULT=1 (scripts/test.sh does) to run the database fault tests");
    false
}

/// A private cluster of one test: its own temporary directory, and a
/// free port that pg.sh picks at the first start and keeps for the restart
/// (GATEHOUSE_TEST_PG_FAULT_PORT pins one), so parallel runs never meet.
pub struct Cluster {
    dir: std::path::PathBuf,
}

impl Cluster {
    pub fn new() -> Cluster {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("gatehouse-pg-fault.{}.{nanos}", std::process::id()));
        Cluster { dir }
    }

    /// `scripts/pg.sh cmd` on this cluster.
    pub fn command(&self, cmd: &str) -> Command {
        let mut c = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg.sh"));
        c.arg(cmd).env("GATEHOUSE_PG_DIR", &self.dir);
        match std::env::var("GATEHOUSE_TEST_PG_FAULT_PORT") {
            Ok(port) => c.env("GATEHOUSE_PG_PORT", port),
            Err(_) => c.env_remove("GATEHOUSE_PG_PORT"),
        };
        c
    }

    pub fn run(&self, cmd: &str) -> String {
        let out = self.command(cmd).output().expect("run scripts/pg.sh");
        assert!(
            out.status.success(),
            "pg.sh {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Default for Cluster {
    fn default() -> Cluster {
        Cluster::new()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.command("stop").output();
    }
}
