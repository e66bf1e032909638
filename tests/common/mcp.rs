//! Real MCP servers (`tests/mcp/servers.py`, the official `mcp` Python SDK)
//! as upstreams on loopback ports, and a small client of the gateway's
//! `/mcp` routes that speaks JSON-RPC over plain HTTP (for the error rows
//! and limits; the real SDK clients are in tests/python and tests/mcp-ts).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::{Client, Response, StatusCode};
use serde_json::{json, Value};

use super::TestApp;

/// The Python with the `mcp` SDK: `GATEHOUSE_TEST_PYTHON`, else the
/// repository's `.venv` (scripts/test.sh makes it before the Rust tests).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("GATEHOUSE_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `python3 -m venv .venv && .venv/bin/pip install -r tests/python/requirements.txt` (scripts/test.sh does)",
        p.display()
    );
    p
}

/// One MCP server process; killed when dropped.
pub struct Upstream {
    child: Child,
    name: String,
    args: Vec<String>,
    pub port: u16,
    pub url: String,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Upstream {
    /// Starts the tool set `name` (`alpha`, `beta`, `many`) with `args`
    /// (`--json`, `--stateless`, `--port N`).
    pub fn start(name: &str, args: &[&str]) -> Upstream {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("requests.jsonl");
        let (child, port) = spawn(name, args, &log);
        Upstream {
            child,
            name: name.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            port,
            url: format!("http://127.0.0.1:{port}/mcp"),
            log,
            _dir: dir,
        }
    }

    /// Stops the server and starts it again on the same port (its sessions
    /// are gone), with a fresh log.
    pub async fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
        let port = self.port.to_string();
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend(["--port", port.as_str()]);
        let (child, _) = spawn(&self.name, &args, &self.log);
        self.child = child;
        let c = Client::new();
        for _ in 0..600 {
            if c.get(&self.url).send().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the MCP server on {} did not come back", self.url);
    }

    /// Waits until the server answers HTTP (uvicorn starts after the port is bound).
    pub async fn ready(self) -> Upstream {
        let c = Client::new();
        for _ in 0..600 {
            if c.get(&self.url).send().await.is_ok() {
                return self;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the MCP server on {} did not answer", self.url);
    }

    /// Every request that reached the server, as logged.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// How many requests of JSON-RPC `method` reached the server.
    pub fn count(&self, method: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r["method"] == method)
            .count()
    }
}

fn spawn(name: &str, args: &[&str], log: &std::path::Path) -> (Child, u16) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/servers.py");
    let mut child = Command::new(python())
        .arg(script)
        .arg(name)
        .arg("--log")
        .arg(log)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python starts the MCP server");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("PORT line");
    let port: u16 = line
        .trim()
        .strip_prefix("PORT ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the MCP server said {line:?}"));
    (child, port)
}

/// Registers an MCP server (the admin API's validation, the store's sealing)
/// and has the server read it.
pub async fn add_server(app: &TestApp, body: Value) {
    use gatehouse::mcp::servers::{parse_new, Source};
    let a = app.app();
    let server =
        parse_new(&body, Source::Api, false, gatehouse::store::now_ms()).expect("valid server");
    let row = gatehouse::mcp::store::McpServerRow::seal(&server, &a.keyring).expect("sealed");
    assert!(a.store.put_mcp_server(&row, false).await.expect("stored"));
    a.reload_mcp_servers().await;
}

/// Sets a user's `mcp` grant (as `PATCH /api/admin/users/{id}` does).
pub async fn grant_user(app: &TestApp, user_id: &str, grant: Value) {
    use gatehouse::runtime::Invalidation;
    let a = app.app();
    let text = (!grant.is_null()).then(|| grant.to_string());
    assert!(a
        .store
        .set_user_mcp(user_id, text.as_deref())
        .await
        .expect("stored"));
    a.invalidate(Invalidation::User(user_id.to_string())).await;
}

/// A user with the `mcp` grant `grant`, and an API key of theirs with
/// `key_grant` and `limits`: returns (user id, key secret).
pub async fn user_with_key(
    app: &TestApp,
    email: &str,
    grant: Value,
    key_grant: Value,
    limits: Value,
) -> (String, String) {
    use gatehouse::runtime::Invalidation;
    let (id, token) = app.user(email).await;
    grant_user(app, &id, grant).await;
    let r = app
        .post(
            "/api/api-keys",
            &token,
            &json!({"name": "mcp", "limits": limits}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().await.expect("json");
    let key = v["key"].as_str().expect("key").to_string();
    let a = app.app();
    let text = (!key_grant.is_null()).then(|| key_grant.to_string());
    let hash = a
        .store
        .set_api_key_mcp(&id, v["id"].as_str().expect("id"), text.as_deref())
        .await
        .expect("stored")
        .expect("the key");
    a.invalidate(Invalidation::ApiKey(hash)).await;
    (id, key)
}

pub const ACCEPT: &str = "application/json, text/event-stream";

/// A gateway client on one route with one credential.
pub struct Mcp {
    pub client: Client,
    pub url: String,
    pub token: String,
    pub session: Option<String>,
    next: i64,
}

impl Mcp {
    pub fn new(app: &TestApp, route: &str, token: &str) -> Mcp {
        Mcp::at(app.u(route), token)
    }

    /// A client of the route at `url` (a server process of its own).
    pub fn at(url: String, token: &str) -> Mcp {
        Mcp {
            client: super::client(),
            url,
            token: token.to_string(),
            session: None,
            next: 1,
        }
    }

    /// A request as a conforming client sends it.
    pub fn request(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut b = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", ACCEPT)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(s) = &self.session {
            b = b.header("mcp-session-id", s);
        }
        b
    }

    pub async fn send(&mut self, method: &str, params: Value) -> Response {
        let id = self.next;
        self.next += 1;
        self.request(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .expect("send")
    }

    /// `initialize` and `notifications/initialized`; keeps the session id.
    pub async fn initialize(&mut self) -> Value {
        let r = self
            .send(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        self.session = Some(
            r.headers()
                .get("mcp-session-id")
                .expect("Mcp-Session-Id")
                .to_str()
                .expect("ascii")
                .to_string(),
        );
        let v: Value = r.json().await.expect("json");
        let n = self
            .request(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .expect("send");
        assert_eq!(n.status(), StatusCode::ACCEPTED);
        v["result"].clone()
    }

    /// A request answered 200: its JSON-RPC message.
    pub async fn rpc(&mut self, method: &str, params: Value) -> Value {
        let r = self.send(method, params).await;
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.expect("json")
    }

    pub async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.rpc("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    pub async fn tool_names(&mut self) -> Vec<String> {
        let v = self.rpc("tools/list", json!({})).await;
        v["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_string())
            .collect()
    }
}

/// An HTTP refusal's status and `error.data.code` (and its `error.code`).
pub async fn refusal(r: Response) -> (StatusCode, i64, String) {
    let status = r.status();
    let v: Value = r.json().await.expect("json-rpc error body");
    assert_eq!(v["jsonrpc"], "2.0");
    (
        status,
        v["error"]["code"].as_i64().expect("code"),
        v["error"]["data"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}
