//! `POST /v1/agents/{agent}/chat/completions`: the agent's model, its
//! instructions first, tool rules, approvals, PII protection, AG-UI events.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use gatehouse_pii::Mode as PiiMode;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::chat::parse_headers;
use crate::agents::turn::{self, Caller, TurnContext};
use crate::app::{App, AppState};
use crate::error::{Error, ErrorKind, Result};
use crate::http::access::AccessNote;
use crate::http::agent_auth::{agent_segment, decoded_agent, AgentAccess, AgentInPath};
use crate::http::extract::read_body;
use crate::http::limits::{add_headers, admit, end_hook};
use crate::http::v1::relayed_response;
use crate::limits::Subject;
use crate::models::{resolve, ModelKind};
use crate::pii::choose_mode;
use crate::proxy::{relay, ChatCall};
use crate::wire::chat::body::{ChatInput, RawChat};
use crate::wire::chat::request::{ChatRequest, Upstream};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(agent_chat))
}

const ROUTE: &str = "/v1/agents/{agent}/chat/completions";

/// This route for `http::Dispatch` (the caller checked the method): a path
/// the router would match with an `{agent}` that decodes; any other goes to
/// the router.
pub(super) fn direct_route(req: &Request) -> Option<(&'static str, super::Direct)> {
    direct_agent(req.uri().path())?;
    Some((ROUTE, |mut req, app| {
        if let Some(agent) = direct_agent(req.uri().path()) {
            req.extensions_mut().insert(AgentInPath(agent));
        }
        axum::handler::Handler::call(agent_chat, req, app)
    }))
}

/// The decoded `{agent}` of `/v1/agents/{agent}/chat/completions`.
fn direct_agent(path: &str) -> Option<String> {
    let segment = agent_segment(path)?;
    let rest = &path["/v1/agents/".len() + segment.len()..];
    if rest != "/chat/completions" {
        return None;
    }
    decoded_agent(segment)
}

/// Chat through the agent's own model under the agent's tool rules.
#[utoipa::path(post, path = "/v1/agents/{agent}/chat/completions", tag = "agent", params(("agent" = String, Path),
    ("X-Service-Tool-Mode" = Option<String>, Header, description = "off, read_only, ask or auto"),
    ("X-Service-Conversation-Id" = Option<String>, Header), ("X-Service-Turn-Id" = Option<String>, Header),
    ("X-Service-PII-Mode" = Option<String>, Header, description = "redact or tokenize_reversible, where the agent lets the user choose"),
    ("X-Service-Events" = Option<String>, Header, description = "ag-ui: AG-UI events in the stream")),
    responses((status = 200, description = "A chat completion (or an SSE stream), with `approvals` when some are needed; header X-Service-Held-Tools"),
              (status = 400, description = "invalid_header, pii_mode_not_allowed, validation_error"), (status = 409, description = "approval_pending")))]
async fn agent_chat(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    let h = parse_headers(|name| req.headers().get(name).map(|v| v.as_bytes()))?;
    let agent = Arc::clone(&access.agent);
    let pii_mode = choose_mode(
        agent.pii.mode,
        agent.pii.user_choosable,
        h.pii_mode.as_deref(),
    )?;
    let note = AccessNote::of(req.extensions());
    note.set(|f| f.model = Some(agent.model.clone()));
    let bytes = read_body(req).await?;
    // Only PII protection edits inside every field: without it, the fields
    // may stay the client's text.
    let mut request = ChatRequest::parse(&bytes, pii_mode == PiiMode::Off)?;
    let offered = turn::check(&request)?;
    let model = resolve(&app.catalog(), &agent.model, ModelKind::Chat).map_err(|_| {
        Error::new(
            ErrorKind::Unavailable,
            "agent_model_unavailable",
            "The agent's model is not configured; ask an administrator.",
        )
    })?;
    let caller = Caller {
        agent,
        user_id: access.user.id.clone(),
        device_id: access.sign_in.device_id.clone(),
    };
    // The user's and the agent's limits (sign-ins have none of their own).
    let subjects = [
        Subject::user(&caller.user_id, access.user.limits),
        Subject::agent(caller.agent.address.as_str(), caller.agent.limits),
    ];
    let admission = match admit(&app, &subjects).await {
        Ok(a) => a,
        Err(refused) => return Ok(*refused),
    };
    let rate_headers = admission.headers;
    let cx = turn_context(&app);
    let answer = async {
        let prepared = turn::prepare(&cx, &caller, &h, pii_mode, &mut request, &offered).await?;
        let held = prepared.held.clone();
        let hooks = prepared.hooks(&cx, &caller, &h, &model.id, request.is_stream());
        let usage = caller.usage(&h, end_hook(admission));
        let (body, tools) = match request.into_upstream() {
            Upstream::Tree(fields, tools) => (ChatInput::Tree(fields), tools),
            Upstream::Text {
                after_model,
                stream,
                prompt_chars,
            } => (
                ChatInput::Raw(RawChat::assembled(after_model, stream, prompt_chars)),
                None,
            ),
        };
        let call = ChatCall {
            model,
            body,
            tools,
            usage,
        };
        let mut resp = relayed_response(relay(&app.http, &app.usage, call, hooks).await?);
        if !held.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&held.join(",")) {
                resp.headers_mut().insert("x-service-held-tools", v);
            }
        }
        Ok::<_, Error>(resp)
    };
    let mut resp = answer.await.unwrap_or_else(IntoResponse::into_response);
    add_headers(&mut resp, &rate_headers);
    Ok(resp)
}

/// What the agent turn reads and writes on this server.
pub(crate) fn turn_context(app: &App) -> TurnContext<'_> {
    TurnContext {
        store: &app.store,
        agents: &app.agents,
        scanners: &app.scanners,
        vaults: &app.vaults,
        vault_ttl_s: app.settings.pii_vault_ttl_s,
        approval_ttl: app.settings.approval_ttl,
    }
}
