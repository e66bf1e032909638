//! Several real `gatehouse serve` processes on one database (scale-out tests).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Proc {
    pub child: Child,
    pub url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Starts `gatehouse serve` on `db` with extra environment; waits for /healthz.
pub async fn spawn_server(db: &str, extra: &[(&str, &str)]) -> Proc {
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    cmd.arg("serve")
        .env("GATEHOUSE_LISTEN", format!("127.0.0.1:{port}"))
        .env("GATEHOUSE_DATABASE_URL", db)
        .env("GATEHOUSE_ADMIN_EMAIL", super::ADMIN_EMAIL)
        .env("GATEHOUSE_ADMIN_PASSWORD", super::ADMIN_PASSWORD)
        .env("GATEHOUSE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn gatehouse");
    let url = format!("http://127.0.0.1:{port}");
    let client = super::client();
    let start = Instant::now();
    loop {
        if let Ok(r) = client.get(format!("{url}/healthz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "server on {url} did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Proc { child, url }
}

/// Polls `check` until it holds or `within` passes; returns the time it took.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < within {
        if check().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}
