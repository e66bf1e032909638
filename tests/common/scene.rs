//! The scene most agent tests start from, built in one line: a gateway, a
//! stub upstream with a provider and a chat model on it, an agent on that
//! model, and a user signed in to the agent on one device.
//!
//! ```ignore
//! let scene = Scene::new()
//!     .with_model("chat-x", "Up/x-7B")
//!     .with_agent("x@acme", json!({"default_tool_mode": "ask"}))
//!     .signed_in()
//!     .await;
//! let r = scene.chat(&[("X-Service-Tool-Mode", "auto")], &body).await;
//! ```

use gatehouse::config::Settings;
use gatehouse_stub_upstream::Stub;
use reqwest::Response;
use serde_json::{json, Value};

use super::{spawn_app_with, TestApp};

/// What [`SceneBuilder::signed_in`] made.
pub struct Scene {
    pub app: TestApp,
    pub stub: Stub,
    /// The admin's login token.
    pub admin: String,
    /// The chat model (its provider, on the stub, is `p-<model_id>`).
    pub model_id: String,
    /// The model's name at the stub: what `stub.requests_for_model` and
    /// `stub.script` take.
    pub upstream: String,
    /// The agent's address.
    pub address: String,
    pub user_id: String,
    /// The user's login token.
    pub login: String,
    /// The device's access and refresh tokens, and its id.
    pub access: String,
    pub refresh: String,
    pub device_id: String,
    /// The whole answer of the sign-in (the tokens, their lifetimes...).
    pub tokens: Value,
}

/// How the scene will be made; [`Scene::new`] starts one with defaults.
pub struct SceneBuilder<'a> {
    settings: Box<dyn FnOnce(&mut Settings) + 'a>,
    model_id: String,
    upstream: String,
    address: String,
    agent: Value,
    email: String,
    device: String,
}

impl Scene {
    /// Model `chat-1` (upstream `up-chat`), agent `agent@acme`, user
    /// alice@example.com on a `laptop`, default settings; change any of them
    /// on the builder.
    #[allow(clippy::new_ret_no_self)]
    pub fn new<'a>() -> SceneBuilder<'a> {
        SceneBuilder {
            settings: Box::new(|_| {}),
            model_id: "chat-1".into(),
            upstream: "up-chat".into(),
            address: "agent@acme".into(),
            agent: json!({}),
            email: "alice@example.com".into(),
            device: "laptop".into(),
        }
    }

    /// `/v1/agents/<address>/<rest>`.
    pub fn path(&self, rest: &str) -> String {
        format!("/v1/agents/{}/{rest}", self.address)
    }

    /// `/api/admin/agents/<address>/<rest>`.
    pub fn admin_path(&self, rest: &str) -> String {
        format!("/api/admin/agents/{}/{rest}", self.address)
    }

    /// An agent chat with this access token and these extra headers,
    /// whatever it answers.
    pub async fn chat_as(&self, access: &str, headers: &[(&str, &str)], body: &Value) -> Response {
        let mut req = self
            .app
            .client
            .post(self.app.u(&self.path("chat/completions")))
            .bearer_auth(access)
            .json(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.expect("chat")
    }

    /// An agent chat of the signed-in device.
    pub async fn chat(&self, headers: &[(&str, &str)], body: &Value) -> Response {
        self.chat_as(&self.access, headers, body).await
    }

    /// Bodies of the chat requests that reached the stub, in order.
    pub fn sent(&self) -> Vec<Value> {
        self.stub
            .requests_for_model(&self.upstream)
            .into_iter()
            .map(|r| r.body)
            .collect()
    }

    pub fn last_sent(&self) -> Value {
        self.sent().pop().expect("a request reached the upstream")
    }

    /// The bytes of the last request the upstream got, as text.
    pub fn last_sent_text(&self) -> String {
        self.stub
            .requests_for_model(&self.upstream)
            .pop()
            .expect("a request reached the upstream")
            .raw_body
    }
}

impl<'a> SceneBuilder<'a> {
    /// Changes the server's settings before it starts.
    pub fn settings(mut self, f: impl FnOnce(&mut Settings) + 'a) -> Self {
        self.settings = Box::new(f);
        self
    }

    /// The chat model `id`, named `upstream` at the stub.
    pub fn with_model(mut self, id: &str, upstream: &str) -> Self {
        self.model_id = id.into();
        self.upstream = upstream.into();
        self
    }

    /// The agent `address`; `fields` add to or replace those of the admin
    /// API's body (name, pii, tool_contract, default_tool_mode, ...).
    pub fn with_agent(mut self, address: &str, fields: Value) -> Self {
        self.address = address.into();
        self.agent = fields;
        self
    }

    /// The user who signs in, and the label of the device.
    pub fn user(mut self, email: &str, device_label: &str) -> Self {
        self.email = email.into();
        self.device = device_label.into();
        self
    }

    /// Starts the server and the stub and makes the scene through the admin
    /// API and a real sign-in.
    pub async fn signed_in(self) -> Scene {
        let app = spawn_app_with(self.settings).await;
        let stub = Stub::start().await;
        app.add_model(
            "openai",
            &stub.openai_base_url(),
            &self.model_id,
            "chat",
            &self.upstream,
        )
        .await;
        let admin = app.admin_token().await;
        app.add_agent(&admin, &self.address, &self.model_id, self.agent)
            .await;
        let (user_id, login) = app.user(&self.email).await;
        let tokens = app.sign_in(&login, &self.address, &self.device).await;
        let field = |k: &str| tokens[k].as_str().expect(k).to_string();
        Scene {
            access: field("access_token"),
            refresh: field("refresh_token"),
            device_id: field("device_id"),
            tokens,
            app,
            stub,
            admin,
            model_id: self.model_id,
            upstream: self.upstream,
            address: self.address,
            user_id,
            login,
        }
    }
}
