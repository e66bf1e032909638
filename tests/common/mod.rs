//! Test support: a real server on a random port with a fresh database per
//! test (SQLite by default; PostgreSQL when GATEHOUSE_TEST_DATABASE_URL is a
//! postgres:// URL of a server we may create databases on).
//!
//! Each test binary (`tests/api`, `tests/processes`, `tests/timing`) takes it
//! in with `#[path = "../common/mod.rs"] mod common;` and uses what it needs:
//! - here: starting a server in the test process ([`TestApp`]), users, login,
//!   API keys, models, and reading the two error shapes;
//! - [`scene`]: the common scene of agent tests in one line (an admin, a
//!   model on the stub upstream, an agent, a user signed in on a device);
//! - [`agents`]: agents and agent sign-in (tokens, renewal, profile);
//! - [`procs`]: `gatehouse serve` processes and setup through their HTTP API;
//! - [`models`]: a gateway with providers on the stub upstream, SSE reading;
//! - [`agent_chat`]: agent chats on the stub upstream (PII, AG-UI);
//! - [`stub`]: scripts for the stub upstream;
//! - [`captured`]: a `gatehouse serve` process with its output captured;
//! - [`oidc`]: a real OpenID Connect provider and a browser stand-in (SSO);
//! - [`pg_cluster`]: a private PostgreSQL cluster to stop and start (fault tests).
// Each test binary uses a different part of this module.
#![allow(dead_code)]

pub mod agent_chat;
pub mod agents;
pub mod captured;
pub mod mcp;
pub mod models;
pub mod oidc;
pub mod pg_cluster;
pub mod procs;
pub mod scene;
pub mod stub;

use std::time::Duration;

use gatehouse::config::Settings;
use reqwest::{Client, Response, StatusCode};
use serde_json::{json, Value};

pub const ADMIN_EMAIL: &str = "admin@example.com";
pub const ADMIN_PASSWORD: &str = "admin-password-1";

pub struct TestApp {
    pub server: Option<gatehouse::Server>,
    pub url: String,
    pub settings: Settings,
    pub client: Client,
    _dir: Option<tempfile::TempDir>,
}

/// A fresh database URL: a new SQLite file, or a new PostgreSQL database.
pub async fn fresh_database() -> (String, Option<tempfile::TempDir>) {
    match std::env::var("GATEHOUSE_TEST_DATABASE_URL") {
        Ok(base) if base.starts_with("postgres") => {
            let name = format!("gh_test_{}", uuid_like());
            let admin_url = base.clone();
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url)
                .await
                .expect("connect to test postgres");
            sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {name}").as_str())
                .await
                .expect("create database");
            let url = match base.rfind('/') {
                Some(i)
                    if base[..i].contains('@')
                        || base[..i].ends_with("localhost")
                        || base[..i].contains(':') =>
                {
                    let (head, tail) = base.split_at(i);
                    let query = tail.find('?').map(|q| &tail[q..]).unwrap_or("");
                    format!("{head}/{name}{query}")
                }
                _ => panic!("GATEHOUSE_TEST_DATABASE_URL must name a database"),
            };
            (url, None)
        }
        _ => {
            let dir = tempfile::tempdir().expect("tempdir");
            let url = format!("sqlite://{}", dir.path().join("gatehouse.db").display());
            (url, Some(dir))
        }
    }
}

/// Migrates the database of `settings` with the migrations older than
/// `before` only (a file name prefix): the schema of an earlier version, for
/// tests of the migration that follows. Returns the open store.
pub async fn migrate_before(db: &str, before: &str) -> gatehouse::store::Store {
    let old = tempfile::tempdir().expect("tempdir");
    let all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for e in std::fs::read_dir(&all).expect("migrations") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if name.as_str() < before {
            std::fs::copy(e.path(), old.path().join(&name)).expect("copy");
        }
    }
    let store = gatehouse::store::Store::connect(&Settings::for_database(db).db_options())
        .await
        .expect("connect");
    let migrator = sqlx::migrate::Migrator::new(old.path())
        .await
        .expect("old migrations");
    migrator.run(&store.pool).await.expect("old schema");
    store
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            % 1_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(f: impl FnOnce(&mut Settings)) -> TestApp {
    let (db, dir) = fresh_database().await;
    app_on(&db, dir, f).await
}

/// A server on the database `db` (made by [`fresh_database`]; `dir` holds
/// its file), with the test administrator.
pub async fn app_on(
    db: &str,
    dir: Option<tempfile::TempDir>,
    f: impl FnOnce(&mut Settings),
) -> TestApp {
    let mut settings = Settings::for_database(db);
    settings.admin_email = Some(ADMIN_EMAIL.into());
    settings.admin_password = Some(ADMIN_PASSWORD.into());
    f(&mut settings);
    let server = gatehouse::start(settings.clone())
        .await
        .expect("server starts");
    let url = server.url();
    TestApp {
        server: Some(server),
        url,
        settings,
        client: client(),
        _dir: dir,
    }
}

pub fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

impl TestApp {
    /// Stops the server and starts a new one on the same database.
    pub async fn restart(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
        let server = gatehouse::start(self.settings.clone())
            .await
            .expect("server restarts");
        self.url = server.url();
        self.server = Some(server);
    }

    pub fn app(&self) -> &gatehouse::app::AppState {
        &self.server.as_ref().expect("running").app
    }

    pub fn u(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    /// The OpenAPI document the server publishes.
    pub async fn openapi(&self) -> Value {
        self.client
            .get(self.u("/openapi.json"))
            .send()
            .await
            .expect("openapi request")
            .json()
            .await
            .expect("openapi json")
    }

    pub async fn login(&self, email: &str, password: &str) -> Response {
        self.client
            .post(self.u("/api/auth/jwt/login"))
            .form(&[("username", email), ("password", password)])
            .send()
            .await
            .expect("login request")
    }

    pub async fn login_token(&self, email: &str, password: &str) -> String {
        let r = self.login(email, password).await;
        assert_eq!(r.status(), StatusCode::OK, "login of {email}");
        let v: Value = r.json().await.expect("json");
        v["access_token"].as_str().expect("token").to_string()
    }

    pub async fn admin_token(&self) -> String {
        self.login_token(ADMIN_EMAIL, ADMIN_PASSWORD).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Response {
        self.client
            .get(self.u(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("get")
    }

    pub async fn delete(&self, path: &str, token: &str) -> Response {
        self.client
            .delete(self.u(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("delete")
    }

    pub async fn post(&self, path: &str, token: &str, body: &Value) -> Response {
        self.client
            .post(self.u(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("post")
    }

    pub async fn patch(&self, path: &str, token: &str, body: &Value) -> Response {
        self.client
            .patch(self.u(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("patch")
    }

    pub async fn put(&self, path: &str, token: &str, body: &Value) -> Response {
        self.client
            .put(self.u(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("put")
    }

    /// Creates a user (as admin) and returns (id, login token).
    pub async fn user(&self, email: &str) -> (String, String) {
        let admin = self.admin_token().await;
        let r = self
            .post(
                "/api/admin/users",
                &admin,
                &json!({"email": email, "password": "user-password-1"}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED);
        let v: Value = r.json().await.expect("json");
        let token = self.login_token(email, "user-password-1").await;
        (v["id"].as_str().expect("id").to_string(), token)
    }

    pub async fn api_key(&self, token: &str, body: Value) -> String {
        let r = self.post("/api/api-keys", token, &body).await;
        assert_eq!(r.status(), StatusCode::CREATED);
        let v: Value = r.json().await.expect("json");
        v["key"].as_str().expect("key").to_string()
    }

    /// Registers a provider and a model of `kind` named `id`.
    pub async fn add_model(
        &self,
        provider_type: &str,
        base_url: &str,
        id: &str,
        kind: &str,
        upstream: &str,
    ) {
        let admin = self.admin_token().await;
        let pname = format!("p-{id}");
        let r = self
            .post(
                "/api/admin/providers",
                &admin,
                &json!({"name": pname, "type": provider_type, "base_url": base_url, "timeout_s": 5}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED, "provider {pname}");
        let r = self
            .post(
                "/api/admin/models",
                &admin,
                &json!({"id": id, "kind": kind, "provider": pname, "upstream_model": upstream}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED, "model {id}");
    }
}

/// Reads `{"detail": {"code": ...}}` (the /api shape).
pub async fn api_code(r: Response) -> (StatusCode, String) {
    let s = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (
        s,
        v["detail"]["code"].as_str().unwrap_or("<none>").to_string(),
    )
}

/// Reads `{"error": {"code": ...}}` (the OpenAI shape of /v1).
pub async fn v1_code(r: Response) -> (StatusCode, String) {
    let s = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (
        s,
        v["error"]["code"].as_str().unwrap_or("<none>").to_string(),
    )
}

/// The newest release `CHANGELOG.md` lists: the first `## [x.y.z]` heading
/// (an `## [Unreleased]` heading above it is skipped).
pub fn newest_release() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/CHANGELOG.md");
    let text = std::fs::read_to_string(path).expect("CHANGELOG.md at the repository's root");
    text.lines()
        .filter_map(|l| l.strip_prefix("## [")?.split_once(']'))
        .map(|(v, _)| v)
        .find(|v| v.split('.').count() == 3 && v.split('.').all(|n| n.parse::<u32>().is_ok()))
        .expect("a release heading such as ## [1.2.3] - 2026-01-31")
        .to_string()
}

/// Seconds of an `x-ratelimit-reset-*` or `x-gatehouse-budget-reset` value, written as
/// OpenAI writes it (`1h2m3s`).
#[allow(dead_code)] // Not every test binary reads reset headers.
pub fn reset_secs(v: &str) -> u64 {
    let mut total = 0;
    let mut n = 0;
    for c in v.chars() {
        match c {
            '0'..='9' => n = n * 10 + u64::from(c as u8 - b'0'),
            'h' => (total, n) = (total + n * 3600, 0),
            'm' => (total, n) = (total + n * 60, 0),
            's' => (total, n) = (total + n, 0),
            _ => panic!("not a duration: {v}"),
        }
    }
    total
}
