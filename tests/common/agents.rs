//! Agents and agent sign-in on a [`TestApp`]: creating an agent, signing a
//! user in to it, renewing, and the routes an access token opens.

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use super::TestApp;

/// The agents of [`two_agents`].
pub const AGENT: &str = "support@acme";
pub const OTHER_AGENT: &str = "sales.bot";

/// A chat model `chat-1`, an embeddings model `emb-1` (on an address where
/// nothing listens) and agents [`AGENT`] and [`OTHER_AGENT`] on `chat-1`,
/// for tests of sign-ins and agent settings; returns the admin token.
pub async fn two_agents(app: &TestApp) -> String {
    app.add_model(
        "openai",
        "http://127.0.0.1:9/v1",
        "chat-1",
        "chat",
        "up-chat",
    )
    .await;
    app.add_model(
        "openai",
        "http://127.0.0.1:9/v1",
        "emb-1",
        "embeddings",
        "up-emb",
    )
    .await;
    let admin = app.admin_token().await;
    for address in [AGENT, OTHER_AGENT] {
        app.add_agent(&admin, address, "chat-1", json!({})).await;
    }
    admin
}

impl TestApp {
    /// Creates agent `address` (named `Agent <address>`) on chat model `model`;
    /// `extra` adds or replaces fields (pii, tool_contract, default_tool_mode, name...).
    pub async fn add_agent(&self, admin: &str, address: &str, model: &str, extra: Value) {
        let mut body =
            json!({"address": address, "name": format!("Agent {address}"), "model": model});
        for (k, v) in extra.as_object().expect("extra is an object") {
            body[k] = v.clone();
        }
        let r = self.post("/api/admin/agents", admin, &body).await;
        let status = r.status();
        assert_eq!(
            status,
            StatusCode::CREATED,
            "agent {address}: {}",
            r.text().await.unwrap_or_default()
        );
    }

    /// POST /api/agent-tokens with a login token, whatever it answers.
    pub async fn try_sign_in(&self, login: &str, agent: &str, label: &str) -> Response {
        self.post(
            "/api/agent-tokens",
            login,
            &json!({"agent": agent, "device_label": label}),
        )
        .await
    }

    /// A new sign-in of device `label` to `agent`: the answer's JSON.
    pub async fn sign_in(&self, login: &str, agent: &str, label: &str) -> Value {
        let r = self.try_sign_in(login, agent, label).await;
        assert_eq!(r.status(), StatusCode::CREATED, "sign-in to {agent}");
        r.json().await.expect("json")
    }

    /// (access token, device id) of a new sign-in.
    pub async fn sign_in_access(&self, login: &str, agent: &str, label: &str) -> (String, String) {
        let v = self.sign_in(login, agent, label).await;
        (
            v["access_token"].as_str().expect("access").to_string(),
            v["device_id"].as_str().expect("device").to_string(),
        )
    }

    /// POST /api/agent-tokens/refresh, whatever it answers.
    pub async fn refresh(&self, token: &str) -> Response {
        self.client
            .post(self.u("/api/agent-tokens/refresh"))
            .json(&json!({"refresh_token": token}))
            .send()
            .await
            .expect("refresh")
    }

    /// A renewal that must succeed: the new pair's JSON.
    pub async fn refreshed(&self, token: &str) -> Value {
        let r = self.refresh(token).await;
        assert_eq!(r.status(), StatusCode::OK, "refresh");
        r.json().await.expect("json")
    }

    /// GET /v1/agents/{agent}/profile with an access token.
    pub async fn profile(&self, agent: &str, access: &str) -> Response {
        self.get(&format!("/v1/agents/{agent}/profile"), access)
            .await
    }

    /// The live sign-ins of the token's user (GET /api/agent-tokens/mine).
    pub async fn mine(&self, token: &str) -> Vec<Value> {
        let r = self.get("/api/agent-tokens/mine", token).await;
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.expect("json")
    }
}
