//! A real `gatehouse serve` process with its standard output and error
//! captured whole (log and trace tests), on its own SQLite database unless
//! `GATEHOUSE_DATABASE_URL` is given, and an HTTP API session on it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::Value;

use super::procs::free_port;
use super::{client, ADMIN_EMAIL, ADMIN_PASSWORD};

pub struct Serve {
    pub child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
    /// Standard output and error, read as they come (a full pipe would
    /// block the server's writes).
    readers: Vec<std::thread::JoinHandle<String>>,
}

fn drain(mut from: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = from.read_to_end(&mut all);
        String::from_utf8_lossy(&all).into_owned()
    })
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `gatehouse serve` with `env` (no `RUST_LOG` or `OTEL_*` from the
/// test's own environment); waits for `/healthz`.
pub async fn serve(env: &[(&str, &str)]) -> Serve {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    cmd.arg("serve")
        .env(
            "GATEHOUSE_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("g.db").display()),
        )
        .env("GATEHOUSE_LISTEN", format!("127.0.0.1:{port}"))
        .env("GATEHOUSE_ADMIN_EMAIL", ADMIN_EMAIL)
        .env("GATEHOUSE_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().expect("spawn gatehouse serve");
    let readers = vec![
        drain(child.stdout.take().expect("stdout")),
        drain(child.stderr.take().expect("stderr")),
    ];
    let s = Serve {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
        readers,
    };
    let started = Instant::now();
    while client()
        .get(format!("{}/healthz", s.url))
        .send()
        .await
        .map_or(true, |r| r.status() != 200)
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "serve did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s
}

/// Stops the server with SIGTERM; returns (stdout, stderr) whole and how
/// long it took to exit.
pub fn stop(mut s: Serve) -> (String, String, Duration) {
    let started = Instant::now();
    let termed = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .is_ok_and(|st| st.success());
    if !termed {
        let _ = s.child.kill();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    let _ = s.child.kill();
    let _ = s.child.wait();
    let mut texts = std::mem::take(&mut s.readers)
        .into_iter()
        .map(|r| r.join().unwrap_or_default());
    let out = texts.next().unwrap_or_default();
    let err = texts.next().unwrap_or_default();
    (out, err, took)
}

/// An HTTP session on a captured server.
pub struct Api {
    pub c: Client,
    pub url: String,
}

impl Api {
    pub fn new(url: &str) -> Api {
        Api {
            c: client(),
            url: url.to_string(),
        }
    }

    pub async fn login(&self, email: &str, password: &str) -> reqwest::Response {
        self.c
            .post(format!("{}/api/auth/jwt/login", self.url))
            .form(&[("username", email), ("password", password)])
            .send()
            .await
            .unwrap()
    }

    pub async fn token(&self, email: &str, password: &str) -> String {
        let r = self.login(email, password).await;
        assert_eq!(r.status(), 200, "login as {email}");
        let v: Value = r.json().await.unwrap();
        v["access_token"].as_str().unwrap().to_string()
    }

    /// POSTs JSON with a bearer token; asserts a 2xx; the JSON answer.
    pub async fn post(&self, token: &str, path: &str, body: Value) -> Value {
        let r = self
            .c
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}
