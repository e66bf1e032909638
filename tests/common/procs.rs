//! Several real `gatehouse serve` processes on one database (scale-out and
//! fault tests), and setup through the HTTP API of such a server.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::{Client, Response};
use serde_json::{json, Value};

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

/// Logs in at the server on `url`; returns the login token.
pub async fn login(c: &Client, url: &str, email: &str, pw: &str) -> String {
    let r = c
        .post(format!("{url}/api/auth/jwt/login"))
        .form(&[("username", email), ("password", pw)])
        .send()
        .await
        .expect("login request");
    assert_eq!(r.status(), 200, "login at {url}");
    r.json::<Value>().await.expect("json")["access_token"]
        .as_str()
        .expect("token")
        .to_string()
}

/// POST `path` on the server on `url` with a bearer token.
pub async fn post(c: &Client, url: &str, token: &str, path: &str, body: &Value) -> Response {
    c.post(format!("{url}{path}"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("post")
}

/// GET `path` on the server on `url` with a bearer token: the JSON answer.
pub async fn get_json(c: &Client, url: &str, token: &str, path: &str) -> Value {
    c.get(format!("{url}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// What [`agent_setup`] made: the admin's and the user's login tokens.
pub struct AgentSetup {
    pub admin: String,
    pub user: String,
}

/// Admin setup through the server on `url`: provider `stub` on `stub_base`,
/// chat model `chat-1` on the stub's `upstream` model, agent `agent` (named
/// `A`; `extra` adds or replaces fields) and user dev@example.com.
pub async fn agent_setup(
    c: &Client,
    url: &str,
    stub_base: &str,
    upstream: &str,
    agent: &str,
    extra: Value,
) -> AgentSetup {
    let admin = login(c, url, super::ADMIN_EMAIL, super::ADMIN_PASSWORD).await;
    let mut a = json!({"address": agent, "name": "A", "model": "chat-1"});
    if let (Some(a), Some(e)) = (a.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    for (path, body) in [
        (
            "/api/admin/providers",
            json!({"name": "stub", "type": "openai", "base_url": stub_base}),
        ),
        (
            "/api/admin/models",
            json!({"id": "chat-1", "kind": "chat", "provider": "stub", "upstream_model": upstream}),
        ),
        ("/api/admin/agents", a),
        (
            "/api/admin/users",
            json!({"email": "dev@example.com", "password": "password-123"}),
        ),
    ] {
        let status = post(c, url, &admin, path, &body).await.status();
        assert_eq!(status, 201, "{path}");
    }
    let user = login(c, url, "dev@example.com", "password-123").await;
    AgentSetup { admin, user }
}

/// A new sign-in of device `label` to `agent` at the server on `url`.
pub async fn new_sign_in(c: &Client, url: &str, login: &str, agent: &str, label: &str) -> Value {
    let r = post(
        c,
        url,
        login,
        "/api/agent-tokens",
        &json!({"agent": agent, "device_label": label}),
    )
    .await;
    assert_eq!(r.status(), 201, "sign-in to {agent}");
    r.json().await.expect("json")
}
