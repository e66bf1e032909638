//! `POST /v1/agents/{agent}/messages[/count_tokens]` and the same under
//! `/v1/agents/{agent}/v1/...` (so an Anthropic client with base URL
//! `{gw}/v1/agents/{agent}` works): agent chat read in Messages terms, on
//! the one agent turn (`crate::agents::turn`, with
//! [`MessagesBody`] as its body) and the one relay. To an `anthropic`
//! provider the ruled body passes through, and the agent's answer-side
//! rules read the upstream's Messages answer (`crate::agents::hooks`).

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use gatehouse_pii::Mode as PiiMode;
use serde_json::{json, Map, Value};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::chat::{parse_headers, ChatHeaders};
use crate::agents::hooks::AgentHooks;
use crate::agents::turn::{self, Caller};
use crate::app::{App, AppState};
use crate::error::Result;
use crate::http::admission::admit_count_tokens;
use crate::http::extract::agent::AgentAccess;
use crate::http::extract::parse_json;
use crate::http::routes::agent_chat::{prepare_request, take_turn, turn_context, TurnRoute};
use crate::http::routes::messages::{
    count_or_forward, relay_messages, session_conversation, ClientHead,
};
use crate::limits::Subject;
use crate::models::Model;
use crate::usage::UsageContext;
use crate::wire::messages::request::Route;
use crate::wire::messages::turn_body::MessagesBody;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(agent_messages))
        .routes(routes!(agent_count_tokens))
        .routes(routes!(agent_v1_messages))
        .routes(routes!(agent_v1_count_tokens))
}

/// The Messages body on the agent turn: read with the agent's model in
/// `model`, relayed in Messages terms.
struct MessagesTurn {
    /// The agent's model, whatever the client named.
    model: String,
    route: Route,
    /// What a pass-through sends besides the body.
    head: ClientHead,
}

impl MessagesTurn {
    fn of(access: &AgentAccess, route: Route, req: &Request) -> MessagesTurn {
        MessagesTurn {
            model: access.agent.model.clone(),
            route,
            head: ClientHead::of(req),
        }
    }
}

impl TurnRoute for MessagesTurn {
    type Body = MessagesBody;
    const API: &'static str = "messages";

    fn charge_figures(body: &MessagesBody) -> (u64, Option<u64>) {
        super::messages::messages_figures(&body.fields)
    }

    /// Claude Code's session id stands for the conversation when
    /// `X-Service-Conversation-Id` is absent.
    fn headers(&self, req: &Request) -> Result<ChatHeaders> {
        let mut h = parse_headers(|name| req.headers().get(name).map(|v| v.as_bytes()))?;
        if h.conversation_id.is_none() {
            h.conversation_id = session_conversation(req.headers());
        }
        Ok(h)
    }

    fn read(&self, bytes: &Bytes, _: PiiMode, _: &mut ChatHeaders) -> Result<MessagesBody> {
        let mut fields: Map<String, Value> = parse_json(bytes)?;
        fields.insert("model".into(), json!(self.model));
        Ok(MessagesBody::new(fields, self.route))
    }

    async fn relay(
        self,
        app: &App,
        model: Arc<Model>,
        body: MessagesBody,
        hooks: AgentHooks,
        usage: UsageContext,
    ) -> Result<Response> {
        let client_model = model.id.clone();
        relay_messages(
            app,
            model,
            Cow::Owned(body.fields),
            &client_model,
            hooks,
            usage,
            Some(self.head),
        )
        .await
    }
}

async fn messages_turn(app: &App, access: AgentAccess, req: Request) -> Result<Response> {
    let turn = MessagesTurn::of(&access, Route::Messages, &req);
    take_turn(app, access, req, turn).await
}

/// count_tokens under the agent: its model, instructions, tool rules and
/// PII applied before counting; no usage record, no request limit.
async fn count_turn(app: &App, access: AgentAccess, req: Request) -> Result<Response> {
    let caller = Caller {
        agent: Arc::clone(&access.agent),
        user_id: access.user.id.clone(),
        device_id: access.sign_in.device_id.clone(),
    };
    let turn = MessagesTurn::of(&access, Route::CountTokens, &req);
    let h = turn.headers(&req);
    let (h, pii_mode, mut body, offered, model) =
        prepare_request(app, &caller, h, req, &turn).await?;
    let subjects = [
        Subject::user(&caller.user_id, access.user.limits),
        Subject::agent(caller.agent.address.as_str(), caller.agent.limits),
    ];
    if let Err(refused) = admit_count_tokens(app, &subjects).await {
        return Ok(refused);
    }
    let cx = turn_context(app);
    turn::prepare(&cx, &caller, &h, pii_mode, &mut body, &offered).await?;
    count_or_forward(app, &model, body.fields, turn.head).await
}

/// A message through the agent's own model under the agent's tool rules.
#[utoipa::path(post, path = "/v1/agents/{agent}/messages", tag = "agent", params(("agent" = String, Path),
    ("X-Service-Tool-Mode" = Option<String>, Header, description = "off, read_only, ask or auto"),
    ("X-Service-Conversation-Id" = Option<String>, Header, description = "else X-Claude-Code-Session-Id"),
    ("X-Service-Turn-Id" = Option<String>, Header),
    ("X-Service-PII-Mode" = Option<String>, Header, description = "redact or tokenize_reversible, where the agent lets the user choose"),
    ("X-Service-Events" = Option<String>, Header, description = "ag-ui: AG-UI events (event: ag-ui) after message_start")),
    responses((status = 200, description = "A Messages answer (or Anthropic's event stream), with top-level `approvals` (stream: `event: service.approvals`) when some are needed; header X-Service-Held-Tools"),
              (status = 400, description = "invalid_request_error: invalid_header, pii_mode_not_allowed, validation_error, too_many_tools"),
              (status = 409, description = "invalid_request_error: approval_pending")))]
async fn agent_messages(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    messages_turn(&app, access, req).await
}

/// The prompt's size in tokens after the agent's rules.
#[utoipa::path(post, path = "/v1/agents/{agent}/messages/count_tokens", tag = "agent", params(("agent" = String, Path)),
    responses((status = 200, description = "`{\"input_tokens\": N}`, N ≥ 1"),
              (status = 400, description = "invalid_request_error: validation_error, too_many_tools")))]
async fn agent_count_tokens(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    count_turn(&app, access, req).await
}

/// As `/v1/agents/{agent}/messages` (for base URL `{gw}/v1/agents/{agent}`).
#[utoipa::path(post, path = "/v1/agents/{agent}/v1/messages", tag = "agent", params(("agent" = String, Path)),
    responses((status = 200, description = "As /v1/agents/{agent}/messages")))]
async fn agent_v1_messages(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    messages_turn(&app, access, req).await
}

/// As `/v1/agents/{agent}/messages/count_tokens`.
#[utoipa::path(post, path = "/v1/agents/{agent}/v1/messages/count_tokens", tag = "agent", params(("agent" = String, Path)),
    responses((status = 200, description = "As /v1/agents/{agent}/messages/count_tokens")))]
async fn agent_v1_count_tokens(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    count_turn(&app, access, req).await
}
