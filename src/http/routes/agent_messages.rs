//! `POST /v1/agents/{agent}/messages[/count_tokens]` and the same under
//! `/v1/agents/{agent}/v1/...` (so an Anthropic client with base URL
//! `{gw}/v1/agents/{agent}` works): agent chat read in Messages terms, on
//! the one agent turn (`crate::agents::turn`, with
//! [`MessagesBody`] as its body) and the one relay.

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::response::Response;
use gatehouse_pii::Mode as PiiMode;
use serde_json::{json, Map, Value};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::chat::{parse_headers, ChatHeaders};
use crate::agents::messages::OfferedNames;
use crate::agents::turn::{self, Caller};
use crate::app::{App, AppState};
use crate::error::{Error, ErrorKind, Result};
use crate::http::admission::{admit_count_tokens, admitted, recorded};
use crate::http::edge::access::AccessNote;
use crate::http::extract::agent::AgentAccess;
use crate::http::extract::{parse_json, read_body};
use crate::http::routes::agent_chat::turn_context;
use crate::http::routes::messages::{
    count_or_forward, relay_messages, session_conversation, ClientHead,
};
use crate::limits::Subject;
use crate::models::{resolve, Model, ModelKind};
use crate::pii::choose_mode;
use crate::usage::{EndHook, UsageTicket};
use crate::wire::messages::request::Route;
use crate::wire::messages::turn_body::MessagesBody;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(agent_messages))
        .routes(routes!(agent_count_tokens))
        .routes(routes!(agent_v1_messages))
        .routes(routes!(agent_v1_count_tokens))
}

fn caller_of(access: &AgentAccess) -> Caller {
    Caller {
        agent: Arc::clone(&access.agent),
        user_id: access.user.id.clone(),
        device_id: access.sign_in.device_id.clone(),
    }
}

/// The agent headers; Claude Code's session id stands for the conversation
/// when `X-Service-Conversation-Id` is absent.
fn headers_of(req: &Request) -> Result<ChatHeaders> {
    let mut h = parse_headers(|name| req.headers().get(name).map(|v| v.as_bytes()))?;
    if h.conversation_id.is_none() {
        h.conversation_id = session_conversation(req.headers());
    }
    Ok(h)
}

/// A Messages request under the agent, read and checked before the limits:
/// its headers, PII mode, body, offered tools and the agent's model.
async fn prepare_request(
    app: &App,
    caller: &Caller,
    headers: Result<ChatHeaders>,
    req: Request,
    route: Route,
) -> Result<(ChatHeaders, PiiMode, MessagesBody, OfferedNames, Arc<Model>)> {
    let h = headers?;
    let agent = &caller.agent;
    let pii_mode = choose_mode(
        agent.pii.mode,
        agent.pii.user_choosable,
        h.pii_mode.as_deref(),
    )?;
    AccessNote::of(req.extensions()).set(|f| {
        f.model = Some(agent.model.clone());
        f.api = Some("messages");
    });
    let bytes = read_body(req).await?;
    let mut fields: Map<String, Value> = parse_json(&bytes)?;
    // The agent's model, whatever the client named.
    fields.insert("model".into(), json!(agent.model));
    let body = MessagesBody::new(fields, route);
    let offered = turn::check(&body)?;
    let model = resolve(&app.catalog(), &agent.model, ModelKind::Chat).map_err(|_| {
        Error::new(
            ErrorKind::Unavailable,
            "agent_model_unavailable",
            "The agent's model is not configured; ask an administrator.",
        )
    })?;
    Ok((h, pii_mode, body, offered, model))
}

async fn messages_turn(app: &App, access: AgentAccess, req: Request) -> Result<Response> {
    let caller = caller_of(&access);
    let h = headers_of(&req);
    let mut usage = caller.usage(h.as_ref().ok(), EndHook::default());
    usage.api = Some("messages");
    let mut ticket = UsageTicket::new(&app.usage, usage, "chat");
    ticket.set_model(&caller.agent.model);
    let prepared = prepare_request(app, &caller, h, req, Route::Messages).await;
    let (h, pii_mode, mut body, offered, model) = recorded(&mut ticket, prepared)?;
    let subjects = [
        Subject::user(&caller.user_id, access.user.limits),
        Subject::agent(caller.agent.address.as_str(), caller.agent.limits),
    ];
    Ok(admitted(app, &subjects, ticket, |mut ticket| async move {
        let cx = turn_context(app);
        let prepared = turn::prepare(&cx, &caller, &h, pii_mode, &mut body, &offered).await;
        let prepared = recorded(&mut ticket, prepared)?;
        let held = prepared.held.join(",");
        let hooks = prepared.hooks(&cx, &caller, &h, &model.id, body.is_stream());
        let usage = ticket.hand_over();
        let client_model = model.id.clone();
        let mut resp = relay_messages(
            app,
            model,
            Cow::Borrowed(&body.fields),
            &client_model,
            hooks,
            usage,
            None,
        )
        .await?;
        if let (false, Ok(v)) = (held.is_empty(), HeaderValue::from_str(&held)) {
            resp.headers_mut().insert("x-service-held-tools", v);
        }
        Ok(resp)
    })
    .await)
}

/// count_tokens under the agent: its model, instructions, tool rules and
/// PII applied before counting; no usage record, no request limit.
async fn count_turn(app: &App, access: AgentAccess, req: Request) -> Result<Response> {
    let caller = caller_of(&access);
    let h = headers_of(&req);
    let head = ClientHead::of(&req);
    let (h, pii_mode, mut body, offered, model) =
        prepare_request(app, &caller, h, req, Route::CountTokens).await?;
    let subjects = [
        Subject::user(&caller.user_id, access.user.limits),
        Subject::agent(caller.agent.address.as_str(), caller.agent.limits),
    ];
    if let Err(refused) = admit_count_tokens(app, &subjects).await {
        return Ok(refused);
    }
    let cx = turn_context(app);
    turn::prepare(&cx, &caller, &h, pii_mode, &mut body, &offered).await?;
    count_or_forward(app, &model, body.fields, head).await
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
