//! A real OpenID Connect provider for the tests (tests/oidc/server.mjs, around
//! the `oidc-provider` package), and a browser stand-in that keeps cookies and
//! follows redirects by hand so a test can stop where it wants.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

pub const CLIENT_ID: &str = "gatehouse-test";
pub const CLIENT_SECRET: &str = "test-client-secret-that-is-long-enough";

pub struct OidcProvider {
    child: Child,
    pub issuer: String,
    http: Client,
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn oidc_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc")
}

impl OidcProvider {
    /// Starts the provider on a free port of 127.0.0.1. Needs `npm ci` in
    /// tests/oidc (scripts/test.sh does it).
    pub fn start() -> OidcProvider {
        let dir = oidc_dir();
        assert!(
            dir.join("node_modules/oidc-provider").exists(),
            "run `npm ci` in tests/oidc first (scripts/test.sh does)"
        );
        let mut child = Command::new("node")
            .arg("server.mjs")
            .args(["--port", "0"])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node starts the test OpenID Connect provider");
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .expect("provider prints its issuer");
        // Keep reading, so the provider never writes into a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let v: Value = serde_json::from_str(line.trim()).expect("issuer line is JSON");
        let issuer = v["issuer"].as_str().expect("issuer").to_string();
        OidcProvider {
            child,
            issuer,
            http: Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client"),
        }
    }

    async fn control(&self, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(format!("{}/_test/{path}", self.issuer))
            .json(&body)
            .send()
            .await
            .expect("control request");
        assert_eq!(r.status(), StatusCode::OK, "control {path}");
        r.json().await.expect("control answer")
    }

    /// Registers (or replaces) a client with these redirect URIs.
    pub async fn register(&self, client_id: &str, secret: &str, redirect_uris: &[&str]) {
        self.control(
            "clients",
            json!({"client_id": client_id, "client_secret": secret, "redirect_uris": redirect_uris}),
        )
        .await;
    }

    /// The next login at the provider is this person.
    pub async fn next_user(&self, sub: &str, email: &str, verified: bool, groups: &[&str]) {
        self.control(
            "next-user",
            json!({"sub": sub, "email": email, "email_verified": verified, "groups": groups}),
        )
        .await;
    }

    /// The next login at the provider ends in this error.
    pub async fn deny_next(&self, error: &str, description: &str) {
        self.control(
            "deny",
            json!({"error": error, "error_description": description}),
        )
        .await;
    }

    /// The next ID token is tampered with: wrong_key, wrong_audience,
    /// wrong_issuer, expired, wrong_nonce or hs256.
    pub async fn misbehave(&self, mode: &str) {
        self.control("misbehave", json!({"mode": mode})).await;
    }

    /// A new signing key (new kid) replaces the old one.
    pub async fn rotate_keys(&self) -> String {
        let v = self.control("rotate-keys", json!({})).await;
        v["kid"].as_str().expect("kid").to_string()
    }

    /// true: e-mail and groups in the ID token; false (default): userinfo only.
    pub async fn claims_in_id_token(&self, yes: bool) {
        self.control("id-token-claims", json!({"claims": yes}))
            .await;
    }

    pub async fn stats(&self) -> Value {
        self.http
            .get(format!("{}/_test/stats", self.issuer))
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats json")
    }
}

/// A browser: cookies kept, redirects followed one at a time.
pub struct Browser {
    pub http: Client,
}

/// Where a walk through redirects stopped.
#[derive(Debug)]
pub struct Stop {
    pub url: String,
    pub status: StatusCode,
    pub content_type: String,
    pub body: String,
}

impl Default for Browser {
    fn default() -> Self {
        Self::new()
    }
}

impl Browser {
    pub fn new() -> Browser {
        Browser {
            http: Client::builder()
                .cookie_store(true)
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .expect("browser"),
        }
    }

    /// Follows redirects from `url` until a page that is not a redirect, or a
    /// redirect to a URL starting with `stop_at` (not requested).
    pub async fn walk(&self, url: &str, stop_at: Option<&str>) -> Stop {
        let mut url = url.to_string();
        for _ in 0..20 {
            if let Some(prefix) = stop_at {
                if url.starts_with(prefix) {
                    return Stop {
                        url,
                        status: StatusCode::FOUND,
                        content_type: String::new(),
                        body: String::new(),
                    };
                }
            }
            let r = self
                .http
                .get(&url)
                .header("accept", "text/html,application/xhtml+xml")
                .send()
                .await
                .expect("browser request");
            let status = r.status();
            if status.is_redirection() {
                let loc = r
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .expect("redirect has a location")
                    .to_string();
                url = reqwest::Url::parse(&url)
                    .and_then(|base| base.join(&loc))
                    .expect("location resolves")
                    .to_string();
                continue;
            }
            let content_type = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = r.text().await.unwrap_or_default();
            return Stop {
                url,
                status,
                content_type,
                body,
            };
        }
        panic!("too many redirects from {url}");
    }
}

/// A query parameter of `url`.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    reqwest::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// A PKCE pair (verifier, S256 challenge) as an app makes it.
pub fn pkce_pair() -> (String, String) {
    use base64::Engine;
    use rand::RngCore;
    use sha2::Digest;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let verifier = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}
