//! `POST /v1/agents/{agent}/chat/completions`: the agent's model, its
//! instructions first, tool rules, approvals, PII protection, AG-UI events.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::response::Response;
use bytes::Bytes;
use gatehouse_pii::Mode as PiiMode;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::chat::{parse_headers, ChatHeaders};
use crate::agents::hooks::AgentHooks;
use crate::agents::turn::{self, Caller, TurnContext};
use crate::app::{App, AppState};
use crate::error::{Error, ErrorKind, Result};
use crate::http::admission::{admitted, recorded, Charge};
use crate::http::answers::relayed_response;
use crate::http::edge::access::AccessNote;
use crate::http::extract::agent::{agent_segment, decoded_agent, AgentAccess, AgentInPath};
use crate::http::extract::read_body;
use crate::limits::Subject;
use crate::models::{resolve, Model, ModelKind};
use crate::pii::choose_mode;
use crate::proxy::{relay, ChatCall};
use crate::usage::{EndHook, UsageContext, UsageTicket};
use crate::wire::chat::body::{ChatInput, RawChat};
use crate::wire::chat::request::{ChatRequest, Upstream};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(agent_chat))
}

const ROUTE: &str = "/v1/agents/{agent}/chat/completions";

/// This route for `http::Dispatch` (the caller checked the method): a path
/// the router would match with an `{agent}` that decodes; any other goes to
/// the router.
pub(crate) fn direct_route(req: &Request) -> Option<(&'static str, crate::http::Direct)> {
    direct_agent(req.uri().path(), "/chat/completions")?;
    Some((ROUTE, |mut req, app| {
        with_agent_in_path(&mut req, "/chat/completions");
        axum::handler::Handler::call(agent_chat, req, app)
    }))
}

/// The decoded `{agent}` of `/v1/agents/{agent}{rest}`.
pub(crate) fn direct_agent(path: &str, rest: &str) -> Option<String> {
    let segment = agent_segment(path)?;
    if &path["/v1/agents/".len() + segment.len()..] != rest {
        return None;
    }
    decoded_agent(segment)
}

/// Puts the path's `{agent}` where the agent extractor finds it (the router
/// is not there to match it).
pub(crate) fn with_agent_in_path(req: &mut Request, rest: &str) {
    if let Some(agent) = direct_agent(req.uri().path(), rest) {
        req.extensions_mut().insert(AgentInPath(agent));
    }
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
    take_turn(&app, access, req, TurnShape::CHAT).await
}

/// What differs between the agent routes that take a chat turn: how the
/// body becomes the turn's chat request, and how the answer is told.
#[derive(Clone, Copy)]
pub(crate) struct TurnShape {
    /// Reads the body (once the headers and the PII mode passed) into a
    /// chat request; may set the turn's headers (the AG-UI ids). The PII
    /// mode says whether rules will edit inside the fields.
    pub read: fn(&Bytes, PiiMode, &mut ChatHeaders) -> Result<ChatRequest>,
    /// The answer is AG-UI events only ([`crate::agents::hooks::AgentHooks::events_only`]).
    pub events_only: bool,
}

/// A route's body on the agent turn: how the request's headers and body
/// are read into the turn's body, and how the body the rules edited is
/// relayed with the turn's answer side (`hooks`). Agent chat and the AG-UI
/// endpoint are [`TurnShape`]s; the Responses route has its own body.
pub(crate) trait TurnRoute: Send + 'static {
    type Body: turn::TurnBody<Offered: Send + Sync> + Send + 'static;

    /// The inbound dialect, for the usage record and the access line.
    const API: &'static str = "chat";

    /// The `X-Service-*` headers (a route may read more, or ignore some).
    fn headers(&self, req: &Request) -> Result<ChatHeaders> {
        parse_headers(|name| req.headers().get(name).map(|v| v.as_bytes()))
    }

    /// Reads the body (once the headers and the PII mode passed); may set
    /// the turn's headers. The PII mode says whether rules will edit inside
    /// the fields.
    fn read(&self, bytes: &Bytes, pii_mode: PiiMode, h: &mut ChatHeaders) -> Result<Self::Body>;

    /// The prompt's estimate (tokens) and the body's maximum completion:
    /// what a budget's reservation counts.
    fn charge_figures(body: &Self::Body) -> (u64, Option<u64>);

    /// Relays the ruled body with the turn's hooks; the answer.
    fn relay(
        self,
        app: &App,
        model: Arc<Model>,
        body: Self::Body,
        hooks: AgentHooks,
        usage: UsageContext,
    ) -> impl std::future::Future<Output = Result<Response>> + Send;
}

impl TurnRoute for TurnShape {
    type Body = ChatRequest;

    fn charge_figures(body: &ChatRequest) -> (u64, Option<u64>) {
        let (chars, max) = body.reserve_figures();
        (crate::spend::budget::tokens_of_chars(chars), max)
    }

    fn read(&self, bytes: &Bytes, pii_mode: PiiMode, h: &mut ChatHeaders) -> Result<ChatRequest> {
        (self.read)(bytes, pii_mode, h)
    }

    async fn relay(
        self,
        app: &App,
        model: Arc<Model>,
        request: ChatRequest,
        mut hooks: AgentHooks,
        usage: UsageContext,
    ) -> Result<Response> {
        if self.events_only {
            hooks = hooks.events_only();
        }
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
            requested: None,
        };
        Ok(relayed_response(
            relay(&app.http, &app.usage, call, hooks).await?,
        ))
    }
}

impl TurnShape {
    const CHAT: TurnShape = TurnShape {
        // Only PII protection edits inside every field: without it, the
        // fields may stay the client's text.
        read: |bytes, pii_mode, _| ChatRequest::parse(bytes, pii_mode == PiiMode::Off),
        events_only: false,
    };
}

/// One agent turn, agent chat's rules in agent chat's order, for a route
/// whose body and answer `shape` describes.
pub(crate) async fn take_turn<R: TurnRoute>(
    app: &App,
    access: AgentAccess,
    req: Request,
    route: R,
) -> Result<Response> {
    let caller = Caller {
        agent: Arc::clone(&access.agent),
        user_id: access.user.id.clone(),
        device_id: access.sign_in.device_id.clone(),
    };
    let h = route.headers(&req);
    let mut usage = caller.usage(h.as_ref().ok(), EndHook::default());
    usage.api = Some(R::API);
    let mut ticket = UsageTicket::new(&app.usage, usage, "chat");
    ticket.set_model(&caller.agent.model);
    let prepared = prepare_request(app, &caller, h, req, &route).await;
    let (h, pii_mode, mut request, offered, model) = recorded(&mut ticket, prepared)?;
    ticket.set_turn(h.conversation_id.as_deref(), h.turn_id.as_deref());
    // The user's and the agent's limits (sign-ins have none of their own).
    let subjects = [
        Subject::user(&caller.user_id, access.user.limits).named(&access.user.email),
        Subject::agent(caller.agent.address.as_str(), caller.agent.limits),
    ];
    let charged = Arc::clone(&model);
    let (prompt, max) = R::charge_figures(&request);
    let charge = Charge::new(&charged, prompt, max);
    Ok(
        admitted(app, &subjects, charge, ticket, |mut ticket| async move {
            let cx = turn_context(app);
            let prepared = turn::prepare(&cx, &caller, &h, pii_mode, &mut request, &offered).await;
            let prepared = recorded(&mut ticket, prepared)?;
            let held = prepared.held.join(",");
            let stream = turn::TurnBody::is_stream(&request);
            let hooks = prepared.hooks(&cx, &caller, &h, &model.id, stream);
            let usage = ticket.hand_over();
            let mut resp = route.relay(app, model, request, hooks, usage).await?;
            if let (false, Ok(v)) = (held.is_empty(), HeaderValue::from_str(&held)) {
                resp.headers_mut().insert("x-service-held-tools", v);
            }
            Ok(resp)
        })
        .await,
    )
}

/// An agent chat request read and checked, before the limits: its headers,
/// PII mode, body, offered tools and the agent's model.
#[allow(clippy::type_complexity)]
pub(crate) async fn prepare_request<R: TurnRoute>(
    app: &App,
    caller: &Caller,
    headers: Result<ChatHeaders>,
    req: Request,
    route: &R,
) -> Result<(
    ChatHeaders,
    PiiMode,
    R::Body,
    <R::Body as turn::TurnBody>::Offered,
    Arc<Model>,
)> {
    let mut h = headers?;
    let agent = &caller.agent;
    let pii_mode = choose_mode(
        agent.pii.mode,
        agent.pii.user_choosable,
        h.pii_mode.as_deref(),
    )?;
    AccessNote::of(req.extensions()).set(|f| {
        f.model = Some(agent.model.clone());
        f.api = Some(R::API);
    });
    let bytes = read_body(req).await?;
    let request = route.read(&bytes, pii_mode, &mut h)?;
    let offered = turn::check(&request)?;
    let model = resolve(&app.catalog(), &agent.model, ModelKind::Chat).map_err(|_| {
        Error::new(
            ErrorKind::Unavailable,
            "agent_model_unavailable",
            "The agent's model is not configured; ask an administrator.",
        )
    })?;
    Ok((h, pii_mode, request, offered, model))
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
