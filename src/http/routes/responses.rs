//! The OpenAI Responses API: `POST /v1/responses` (API key) and
//! `POST /v1/agents/{agent}/responses` (agent access token), plain and
//! streamed, stateless; every other path under `/v1/responses/` answers 404
//! `response_not_found`. Thin: read and check the body
//! (`crate::wire::responses`), the agent turn for the agent route
//! (`crate::agents::turn`), then the relay with the Responses hooks
//! (`crate::proxy::responses`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use gatehouse_pii::Mode as PiiMode;
use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::chat::{parse_headers, ChatHeaders};
use crate::agents::hooks::AgentHooks;
use crate::app::{App, AppState};
use crate::error::{Error, Result};
use crate::http::admission::{admitted, recorded, Charge};
use crate::http::answers::relayed_response;
use crate::http::edge::access::AccessNote;
use crate::http::extract::agent::AgentAccess;
use crate::http::extract::{parse_json, read_body, ApiKeyAuth};
use crate::http::routes::agent_chat::{direct_agent, take_turn, with_agent_in_path, TurnRoute};
use crate::http::routes::v1::{alias_sent, key_context, key_subjects, named_model};
use crate::models::{requested_model, Model, ModelKind};
use crate::proxy::chat::{relay, ChatCall, ChatHooks, NoHooks};
use crate::proxy::responses::{ResponsesHooks, ResponsesInput};
use crate::usage::{UsageContext, UsageTicket};
use crate::wire::ids::is_conversation_id;
use crate::wire::responses::headers::codex_ids;
use crate::wire::responses::{RawResponses, ResponsesRequest};

pub fn routes() -> OpenApiRouter<AppState> {
    use axum::routing::{any, post};
    OpenApiRouter::new()
        .routes(routes!(create_response))
        .routes(routes!(get_response, delete_response))
        .routes(routes!(response_input_items))
        .routes(routes!(cancel_response))
        .routes(routes!(agent_responses))
        // Every other method and path under /v1/responses/ (compact,
        // input_tokens, ...): the same 404, after the key.
        .route(
            "/v1/responses/{id}",
            post(not_stored).put(not_stored).patch(not_stored),
        )
        .route("/v1/responses/{id}/{*rest}", any(not_stored))
}

const AGENT_ROUTE: &str = "/v1/agents/{agent}/responses";

/// These routes for `http::Dispatch` (the caller checked the method), as
/// for chat: `/v1/responses` and an agent's, by their exact paths; any
/// other goes to the router.
pub(crate) fn direct_route(req: &Request) -> Option<(&'static str, crate::http::Direct)> {
    use axum::handler::Handler;
    let path = req.uri().path();
    if path == "/v1/responses" {
        return Some(("/v1/responses", |req, app| {
            Handler::call(create_response, req, app)
        }));
    }
    direct_agent(path, "/responses")?;
    Some((AGENT_ROUTE, |mut req, app| {
        with_agent_in_path(&mut req, "/responses");
        Handler::call(agent_responses, req, app)
    }))
}

/// `POST /v1/responses` (OpenAI Responses shape; fields not listed are read
/// as the contract says, or passed to a native upstream unchanged).
#[derive(ToSchema)]
#[allow(dead_code)]
struct CreateResponseRequest {
    /// A chat model's id (ignored on the agent route).
    model: String,
    /// A string, or the whole conversation as a list of items.
    #[schema(value_type = Object)]
    input: Value,
    instructions: Option<String>,
    stream: Option<bool>,
    #[schema(value_type = Option<Vec<Object>>)]
    tools: Option<Vec<Value>>,
    #[schema(value_type = Option<Object>)]
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    max_output_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    #[schema(value_type = Option<Object>)]
    reasoning: Option<Value>,
    #[schema(value_type = Option<Object>)]
    text: Option<Value>,
    user: Option<String>,
    store: Option<bool>,
}

/// The conversation and turn ids of a Responses request: the
/// `X-Service-*` headers, else Codex's (`session-id`, `thread-id`,
/// `x-codex-turn-metadata`). On the key route a value that is not an id is
/// ignored.
fn conversation_ids(h: &HeaderMap) -> (Option<String>, Option<String>) {
    let get = |name: &str| h.get(name).map(|v| v.as_bytes());
    let ours = |name: &str| {
        get(name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .filter(|v| is_conversation_id(v))
            .map(str::to_string)
    };
    let (conversation, turn) = codex_ids(get);
    (
        ours("X-Service-Conversation-Id").or(conversation),
        ours("X-Service-Turn-Id").or(turn),
    )
}

/// The response header naming the tools the gateway did not pass on.
fn dropped_tools_header(resp: &mut Response, dropped: &[String]) {
    if dropped.is_empty() {
        return;
    }
    if let Ok(v) = HeaderValue::from_str(&dropped.join(",")) {
        resp.headers_mut().insert("x-gatehouse-dropped-tools", v);
    }
}

/// The relay with the Responses hooks around `inner`: the body translated to
/// chat (a native target gets the Responses body instead).
/// How a route relays: see [`respond`].
struct Route<'a> {
    /// The built-in tools of the request, named in a header when the
    /// answering attempt was bridged (a native upstream gets them).
    dropped: &'a [String],
    /// Native providers get the Responses body (else they are bridged too).
    native: bool,
    /// The client's name for its model when it is an alias.
    requested: Option<String>,
}

async fn respond<H: ChatHooks>(
    app: &App,
    model: Arc<Model>,
    input: ResponsesInput,
    inner: H,
    usage: UsageContext,
    route: Route<'_>,
) -> Result<Response> {
    let Route {
        dropped,
        native,
        requested,
    } = route;
    let mut hooks = ResponsesHooks::new(inner, input.native, input.echo);
    if !native {
        hooks = hooks.bridge_only();
    }
    let bridged = hooks.bridged();
    let call = ChatCall {
        model,
        body: input.chat,
        tools: None,
        usage,
        requested,
    };
    let mut resp = relayed_response(relay(&app.http, &app.usage, call, hooks).await?);
    if bridged.load(std::sync::atomic::Ordering::Relaxed) {
        dropped_tools_header(&mut resp, dropped);
    }
    Ok(resp)
}

/// The key route's body: read without a tree in the usual case (with the
/// client's bytes, which a native upstream gets), else checked as a tree.
enum KeyBody {
    Raw(RawResponses, Bytes),
    Tree(ResponsesRequest),
}

impl KeyBody {
    /// The built-in tools, which the bridge drops.
    fn dropped(&self) -> Vec<String> {
        match self {
            KeyBody::Raw(raw, _) => raw.dropped.clone(),
            KeyBody::Tree(request) => request.dropped_tools(),
        }
    }

    /// What the request may cost (see [`responses_figures`]); the text
    /// read without a tree is counted only if a budget applies.
    fn charge<'a>(&self, model: &'a Model) -> Charge<'a> {
        match self {
            KeyBody::Raw(raw, _) => {
                let text = raw.text.clone();
                let prompt = move || crate::spend::budget::tokens_of_chars(text.chars());
                Charge::later(model, prompt, raw.max_output)
            }
            KeyBody::Tree(request) => {
                let (prompt, max) = responses_figures(request);
                Charge::new(model, prompt, max)
            }
        }
    }

    fn input(self) -> ResponsesInput {
        match self {
            KeyBody::Raw(raw, bytes) => ResponsesInput::of_raw(raw, bytes),
            KeyBody::Tree(request) => ResponsesInput::of_request(request),
        }
    }
}

/// A Responses request's reservation figures: the estimate of the text of
/// `instructions` and `input`, and `max_output_tokens`.
pub(crate) fn responses_figures(request: &ResponsesRequest) -> (u64, Option<u64>) {
    use crate::spend::budget::{tokens_of_chars, whole};
    (
        tokens_of_chars(request.text_chars()),
        whole(request.body.get("max_output_tokens")),
    )
}

/// A Responses request read and checked for the key route, in the order of
/// chat: the body, `model`, the key's list, the catalog and kind, then the
/// Responses fields.
async fn key_request(
    app: &App,
    auth: &ApiKeyAuth,
    req: Request,
    ticket: &mut UsageTicket,
) -> Result<(Arc<Model>, KeyBody, Option<String>)> {
    let note = AccessNote::of(req.extensions());
    let bytes = read_body(req).await?;
    if let Some(raw) = RawResponses::read(&bytes) {
        let model = named_model(app, auth, &raw.model, ModelKind::Chat, ticket, &note)?;
        let requested = alias_sent(&model, &raw.model);
        return Ok((model, KeyBody::Raw(raw, bytes), requested));
    }
    let body: Map<String, Value> = parse_json(&bytes)?;
    let name = requested_model(&body)?.to_string();
    let model = named_model(app, auth, &name, ModelKind::Chat, ticket, &note)?;
    let requested = alias_sent(&model, &name);
    let request = ResponsesRequest::parse(body)?;
    Ok((model, KeyBody::Tree(request), requested))
}

/// A model response through the model's upstream (bridged to chat
/// completions, or natively), plain or streamed (SSE). Stateless.
#[utoipa::path(post, path = "/v1/responses", tag = "v1",
    request_body = CreateResponseRequest,
    responses(
        (status = 200, description = "A Responses answer (`object: response`) with `model` naming the alias; with `stream: true` an event stream (`response.created` ... exactly one of `response.completed`, `response.incomplete`, `response.failed`). Header x-gatehouse-dropped-tools names built-in tools not passed on."),
        (status = 400, description = "validation_error, unsupported_input, previous_response_unsupported, model_kind_mismatch"),
        (status = 401, description = "invalid_api_key"),
        (status = 403, description = "model_not_allowed"),
        (status = 404, description = "model_not_found"),
        (status = 413, description = "payload_too_large"),
        (status = 429, description = "rate_limited, budget_exhausted"),
        (status = 502, description = "upstream_unavailable, upstream_error"),
        (status = 504, description = "upstream_timeout")))]
async fn create_response(
    State(app): State<AppState>,
    auth: ApiKeyAuth,
    req: Request,
) -> Result<Response> {
    let (conversation_id, turn_id) = conversation_ids(req.headers());
    let usage = UsageContext {
        conversation_id,
        turn_id,
        ..key_context(&auth)
    };
    let mut ticket = UsageTicket::new(&app.usage, usage, "chat");
    let prepared = key_request(&app, &auth, req, &mut ticket).await;
    let (model, body, requested) = recorded(&mut ticket, prepared)?;
    let dropped = body.dropped();
    let app = &app;
    let charged = Arc::clone(&model);
    let charge = body.charge(&charged);
    Ok(admitted(
        app,
        &key_subjects(&auth),
        charge,
        ticket,
        |mut ticket| async move {
            let usage = ticket.hand_over();
            let route = Route {
                dropped: &dropped,
                native: true,
                requested,
            };
            // Boxed: the relay's future is large, and the handler's is moved
            // several times on its way to the connection (each move a copy).
            Box::pin(respond(app, model, body.input(), NoHooks, usage, route)).await
        },
    )
    .await)
}

fn not_found() -> Error {
    Error::not_found(
        "response_not_found",
        "Gatehouse does not store responses; send the whole conversation in `input`.",
    )
}

/// Gatehouse stores no responses: always 404 `response_not_found`.
#[utoipa::path(get, path = "/v1/responses/{id}", tag = "v1", params(("id" = String, Path)),
    responses((status = 401, description = "invalid_api_key"), (status = 404, description = "response_not_found")))]
async fn get_response(_auth: ApiKeyAuth) -> Error {
    not_found()
}

/// Gatehouse stores no responses: always 404 `response_not_found`.
#[utoipa::path(delete, path = "/v1/responses/{id}", tag = "v1", params(("id" = String, Path)),
    responses((status = 401, description = "invalid_api_key"), (status = 404, description = "response_not_found")))]
async fn delete_response(_auth: ApiKeyAuth) -> Error {
    not_found()
}

/// Gatehouse stores no responses: always 404 `response_not_found`.
#[utoipa::path(get, path = "/v1/responses/{id}/input_items", tag = "v1", params(("id" = String, Path)),
    responses((status = 401, description = "invalid_api_key"), (status = 404, description = "response_not_found")))]
async fn response_input_items(_auth: ApiKeyAuth) -> Error {
    not_found()
}

/// Gatehouse stores no responses: always 404 `response_not_found`.
#[utoipa::path(post, path = "/v1/responses/{id}/cancel", tag = "v1", params(("id" = String, Path)),
    responses((status = 401, description = "invalid_api_key"), (status = 404, description = "response_not_found")))]
async fn cancel_response(_auth: ApiKeyAuth) -> Error {
    not_found()
}

async fn not_stored(_auth: ApiKeyAuth) -> Error {
    not_found()
}

/// A model response through the agent's own model under the agent's tool
/// rules, approvals and PII protection, as agent chat.
#[utoipa::path(post, path = "/v1/agents/{agent}/responses", tag = "agent", params(("agent" = String, Path),
    ("X-Service-Tool-Mode" = Option<String>, Header, description = "off, read_only, ask or auto"),
    ("X-Service-Conversation-Id" = Option<String>, Header), ("X-Service-Turn-Id" = Option<String>, Header),
    ("X-Service-PII-Mode" = Option<String>, Header, description = "redact or tokenize_reversible, where the agent lets the user choose")),
    request_body = CreateResponseRequest,
    responses((status = 200, description = "A Responses answer (or an SSE stream), with `approvals` when some are needed; headers X-Service-Held-Tools, x-gatehouse-dropped-tools"),
              (status = 400, description = "invalid_header, pii_mode_not_allowed, validation_error, unsupported_input, previous_response_unsupported, too_many_tools"),
              (status = 409, description = "approval_pending")))]
async fn agent_responses(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    take_turn(&app, access, req, ResponsesTurn).await
}

/// The agent turn on a Responses body (agent chat's rules and order:
/// `agent_chat::take_turn`).
struct ResponsesTurn;

impl TurnRoute for ResponsesTurn {
    type Body = ResponsesRequest;

    fn charge_figures(body: &ResponsesRequest) -> (u64, Option<u64>) {
        responses_figures(body)
    }

    /// Agent chat's headers, with Codex's session and turn where those are
    /// absent; AG-UI events are not offered here, so `X-Service-Events` is
    /// ignored.
    fn headers(&self, req: &Request) -> Result<ChatHeaders> {
        let get = |name: &str| req.headers().get(name).map(|v| v.as_bytes());
        let mut h = parse_headers(|name| {
            if name.eq_ignore_ascii_case("X-Service-Events") {
                return None;
            }
            get(name)
        })?;
        let (conversation, turn) = codex_ids(get);
        h.conversation_id = h.conversation_id.or(conversation);
        h.turn_id = h.turn_id.or(turn);
        Ok(h)
    }

    /// The body checked, built-in tools removed (named in a header).
    fn read(&self, bytes: &Bytes, _pii: PiiMode, _h: &mut ChatHeaders) -> Result<ResponsesRequest> {
        let body: Map<String, Value> = parse_json(bytes)?;
        ResponsesRequest::parse_for_agent(body)
    }

    async fn relay(
        self,
        app: &App,
        model: Arc<Model>,
        request: ResponsesRequest,
        hooks: AgentHooks,
        usage: UsageContext,
    ) -> Result<Response> {
        let hooks = hooks.with_custom_tools(request.custom_tools());
        let removed = request.removed().to_vec();
        // Approvals and PII restore read chat answers: this route bridges
        // native providers too (their answer side in the Responses shape is
        // not built yet).
        let route = Route {
            dropped: &[],
            native: false,
            requested: None,
        };
        let input = ResponsesInput::of_request(request);
        let mut resp = respond(app, model, input, hooks, usage, route).await?;
        // The agent route removes built-in tools in both modes.
        dropped_tools_header(&mut resp, &removed);
        Ok(resp)
    }
}
