//! Anthropic's Messages API with an API key: `POST /v1/messages` (plain and
//! streamed) and `POST /v1/messages/count_tokens`. Thin: read the body,
//! resolve the model, check the fields, translate (`crate::wire::messages`)
//! and hand over to the one relay with [`MessagesHooks`]. Errors take
//! Anthropic's shape at the edge (`http::edge::error`); the credential may
//! come as `x-api-key`.

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::Result;
use crate::http::admission::{admit_count_tokens, admitted, recorded, Charge};
use crate::http::answers::relayed_response;
use crate::http::edge::access::AccessNote;
use crate::http::extract::{parse_json, read_body, ApiKeyAuth};
use crate::http::routes::v1::{key_context, key_model, key_subjects, named_model};
use crate::models::routing::next_pick;
use crate::models::upstream::{self, Extras};
use crate::models::{requested_model, Model, ModelKind};
use crate::proxy::chat::{relay, ChatCall, ChatHooks, NoHooks};
use crate::proxy::messages::{passes_through, MessagesHooks, Native};
use crate::proxy::messages_rules::MessagesRules;
use crate::proxy::native_body::NativeBody;
use crate::usage::{estimate_tokens, UsageContext, UsageTicket};
use crate::wire::chat::body::ChatInput;
use crate::wire::messages::count;
use crate::wire::messages::request::{check_body, Route};
use crate::wire::messages::to_chat::{to_chat, Translated};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(messages))
        .routes(routes!(count_tokens))
}

/// `POST /v1/messages` (Anthropic's shape; members not listed go to the
/// upstream when it speaks Messages, and are dropped when translated).
#[derive(ToSchema)]
#[allow(dead_code)]
struct MessagesRequest {
    /// A chat model's id.
    model: String,
    /// An integer of at least 1 (not read by `count_tokens`).
    max_tokens: u64,
    /// `{role: user|assistant, content: string | [blocks]}`, not empty.
    #[schema(value_type = Vec<Object>)]
    messages: Vec<Value>,
    /// A string or `[{"type":"text","text"}]`.
    #[schema(value_type = Option<Object>)]
    system: Option<Value>,
    stream: Option<bool>,
    /// `[{name, description?, input_schema}]`.
    #[schema(value_type = Option<Vec<Object>>)]
    tools: Option<Vec<Value>>,
}

/// The routes `http::Dispatch` serves before the router, by exact path (the
/// caller checked the method): the same handlers, extractors and errors.
pub(crate) fn direct_route(path: &str) -> Option<(&'static str, crate::http::Direct)> {
    use axum::handler::Handler;
    let direct: (&'static str, crate::http::Direct) = match path {
        "/v1/messages" => ("/v1/messages", |req, app| Handler::call(messages, req, app)),
        "/v1/messages/count_tokens" => ("/v1/messages/count_tokens", |req, app| {
            Handler::call(count_tokens, req, app)
        }),
        _ => return None,
    };
    Some(direct)
}

/// The conversation a Messages client names: `X-Service-Conversation-Id`,
/// else Claude Code's `X-Claude-Code-Session-Id` (1 to 128 of the
/// conversation id's characters; otherwise ignored).
pub(crate) fn session_conversation(h: &HeaderMap) -> Option<String> {
    ["x-service-conversation-id", "x-claude-code-session-id"]
        .iter()
        .filter_map(|n| h.get(*n)?.to_str().ok())
        .find(|v| crate::wire::ids::is_conversation_id(v))
        .map(str::to_string)
}

/// Counts what the translation dropped and names the dropped server tools
/// (`x-gatehouse-dropped-tools`), after the answer is made.
pub(crate) fn note_translation(t: &Translated) -> Option<HeaderValue> {
    crate::wire::translation_dropped::count(&t.dropped);
    if !t.dropped.is_empty() {
        let mut names = t.dropped.clone();
        names.dedup();
        tracing::debug!(dropped = ?names, "members dropped in translation to chat");
    }
    (!t.dropped_tools.is_empty())
        .then(|| HeaderValue::from_str(&t.dropped_tools.join(",")).ok())
        .flatten()
}

/// A Messages request through the relay, with `hooks` (the route's chat
/// hooks) answered in Messages' shape: translated to chat, or, with
/// `native`, passed through to `anthropic` targets.
pub(crate) async fn relay_messages<H: ChatHooks + MessagesRules>(
    app: &App,
    model: Arc<Model>,
    body: Cow<'_, Map<String, Value>>,
    client_model: &str,
    hooks: H,
    usage: UsageContext,
    native: Option<ClientHead>,
) -> Result<Response> {
    let prompt_chars = count::prompt_chars(&body);
    let estimate = estimate_tokens(prompt_chars).max(1);
    let passes = native.is_some();
    // Translated only when some target needs it: a model whose targets all
    // take Messages never has a chat body made (nor its tree dropped).
    let native_only = passes
        && model
            .chain()
            .iter()
            .all(|m| m.targets.iter().all(|t| passes_through(t.provider.kind)));
    let (chat, t) = if native_only {
        let input = ChatInput::NativeOnly {
            stream: body.get("stream").and_then(Value::as_bool) == Some(true),
            prompt_chars,
            max_completion: crate::spend::budget::whole(body.get("max_tokens")),
        };
        (input, None)
    } else {
        let mut t = to_chat(&body);
        (ChatInput::Tree(std::mem::take(&mut t.chat)), Some(t))
    };
    let names = t.as_ref().map(|t| t.names.clone()).unwrap_or_default();
    let mut hooks = MessagesHooks::new(hooks, client_model, &model.id, estimate, names);
    if let Some(head) = native {
        let body = match head.body {
            Some(bytes) => NativeBody::of(bytes, || body.into_owned()),
            None => NativeBody::Tree(body.into_owned()),
        };
        hooks = hooks.with_native(Native {
            body,
            query: head.query,
            beta: head.beta,
        });
    }
    let call = ChatCall {
        model,
        body: chat,
        tools: None,
        usage,
        // The Messages answer names the client's model itself (MessagesHooks).
        requested: None,
    };
    let relayed = relay(&app.http, &app.usage, call, hooks).await?;
    // Nothing was dropped when the answering attempt passed the body through.
    let translated = !passes
        || app
            .catalog()
            .providers
            .iter()
            .find(|p| p.name == relayed.answered.provider)
            .is_none_or(|p| !passes_through(p.kind));
    let dropped = t.as_ref().filter(|_| translated).and_then(note_translation);
    let mut resp = relayed_response(relayed);
    if let Some(v) = dropped {
        resp.headers_mut().insert("x-gatehouse-dropped-tools", v);
    }
    Ok(resp)
}

/// What a pass-through sends of the client's request besides its body
/// tree: the query string, `anthropic-beta`, and the body's own bytes when
/// the route sends them on unchanged (the key route).
pub(crate) struct ClientHead {
    pub query: Option<String>,
    pub beta: Option<String>,
    pub body: Option<Bytes>,
}

impl ClientHead {
    pub(crate) fn of(req: &Request) -> ClientHead {
        ClientHead {
            query: req.uri().query().map(str::to_string),
            beta: client_beta(req.headers()),
            body: None,
        }
    }
}

/// The client's `anthropic-beta` (each header's values, comma-joined).
pub(crate) fn client_beta(h: &HeaderMap) -> Option<String> {
    let values: Vec<&str> = h
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// Reads the body as a JSON object and resolves its chat model; the fields
/// are checked after the model, as on chat.
async fn messages_request(
    app: &App,
    auth: &ApiKeyAuth,
    req: Request,
    route: Route,
    ticket: &mut UsageTicket,
) -> Result<(Arc<Model>, Map<String, Value>, Bytes)> {
    let note = AccessNote::of(req.extensions());
    note.set(|f| f.api = Some("messages"));
    let bytes = read_body(req).await?;
    let body: Map<String, Value> = parse_json(&bytes)?;
    let model = named_model(
        app,
        auth,
        requested_model(&body)?,
        ModelKind::Chat,
        ticket,
        &note,
    )?;
    check_body(&body, route)?;
    Ok((model, body, bytes))
}

/// A Messages request's reservation figures: the estimate of the text of
/// `system` and `messages`, and `max_tokens`.
pub(crate) fn messages_figures(body: &Map<String, Value>) -> (u64, Option<u64>) {
    use crate::spend::budget::{text_chars, tokens_of_chars, whole};
    let chars: usize = ["system", "messages"]
        .iter()
        .filter_map(|k| body.get(*k))
        .map(text_chars)
        .sum();
    (tokens_of_chars(chars), whole(body.get("max_tokens")))
}

/// A message from the model, plain or streamed (Anthropic's SSE events).
#[utoipa::path(post, path = "/v1/messages", tag = "v1",
    request_body = MessagesRequest,
    params(("x-api-key" = Option<String>, Header, description = "the API key (else Authorization: Bearer)")),
    responses(
        (status = 200, description = "A Messages answer (`type: message`); with `stream: true` Anthropic's event stream (message_start … message_stop, no [DONE]). Header x-gatehouse-dropped-tools names server tools an OpenAI upstream cannot run"),
        (status = 400, description = "invalid_request_error: validation_error, model_kind_mismatch"),
        (status = 401, description = "authentication_error: invalid_api_key"),
        (status = 403, description = "permission_error: model_not_allowed"),
        (status = 404, description = "not_found_error: model_not_found"),
        (status = 413, description = "request_too_large: payload_too_large"),
        (status = 429, description = "rate_limit_error: rate_limited, budget_exhausted"),
        (status = 502, description = "api_error: upstream_unavailable, upstream_error"),
        (status = 504, description = "timeout_error: upstream_timeout")))]
async fn messages(State(app): State<AppState>, auth: ApiKeyAuth, req: Request) -> Result<Response> {
    let mut head = ClientHead::of(&req);
    let mut usage = key_context(&auth);
    usage.conversation_id = session_conversation(req.headers());
    usage.api = Some("messages");
    let mut ticket = UsageTicket::new(&app.usage, usage, "chat");
    let prepared = messages_request(&app, &auth, req, Route::Messages, &mut ticket).await;
    let (model, body, bytes) = recorded(&mut ticket, prepared)?;
    head.body = Some(bytes);
    let app = &app;
    let charged = Arc::clone(&model);
    let (prompt, max) = messages_figures(&body);
    let charge = Charge::new(&charged, prompt, max);
    Ok(admitted(
        app,
        &key_subjects(&auth),
        charge,
        ticket,
        |mut ticket| async move {
            let client_model = requested_model(&body)?.to_string();
            let usage = ticket.hand_over();
            relay_messages(
                app,
                model,
                Cow::Owned(body),
                &client_model,
                NoHooks,
                usage,
                Some(head),
            )
            .await
        },
    )
    .await)
}

/// The prompt's size in tokens, as the model's upstream would count it.
#[utoipa::path(post, path = "/v1/messages/count_tokens", tag = "v1",
    request_body = MessagesRequest,
    responses(
        (status = 200, description = "`{\"input_tokens\": N}`, N ≥ 1 (an estimate for OpenAI upstreams: one token per four characters)"),
        (status = 400, description = "invalid_request_error: validation_error"),
        (status = 401, description = "authentication_error: invalid_api_key"),
        (status = 403, description = "permission_error: model_not_allowed"),
        (status = 404, description = "not_found_error: model_not_found"),
        (status = 429, description = "rate_limit_error: rate_limited (count_tokens_per_minute)")))]
async fn count_tokens(
    State(app): State<AppState>,
    auth: ApiKeyAuth,
    req: Request,
) -> Result<Response> {
    let note = AccessNote::of(req.extensions());
    note.set(|f| f.api = Some("messages"));
    let head = ClientHead::of(&req);
    let bytes = read_body(req).await?;
    let body: Map<String, Value> = parse_json(&bytes)?;
    let name = requested_model(&body)?;
    let catalog = app.catalog();
    let id = catalog.model(name).map_or(name, |m| m.id.as_str());
    note.set(|f| f.model = Some(id.to_string()));
    let model = key_model(&catalog, &auth, name, ModelKind::Chat)?;
    check_body(&body, Route::CountTokens)?;
    if let Err(refused) = admit_count_tokens(&app, &key_subjects(&auth)).await {
        return Ok(refused);
    }
    count_or_forward(&app, &model, body, head).await
}

/// count_tokens' answer: forwarded to the model's target when it is an
/// `anthropic` provider (`model` replaced, headers as for messages; its
/// answer, or its error status, relayed as it came), else the estimate.
pub(crate) async fn count_or_forward(
    app: &App,
    model: &Model,
    mut body: Map<String, Value>,
    head: ClientHead,
) -> Result<Response> {
    let chain = model.chain();
    let mut attempts = model.attempts(&chain);
    let pick = next_pick(&mut attempts);
    let Some(target) = pick
        .as_ref()
        .map(|p| p.target)
        .filter(|t| passes_through(t.provider.kind))
    else {
        return Ok(Json(json!({"input_tokens": count::estimate(&body)})).into_response());
    };
    body.insert("model".into(), Value::String(target.upstream_model.clone()));
    let bytes = serde_json::to_vec(&body).map_err(crate::error::Error::internal)?;
    let provider = &target.provider;
    let extras = Extras {
        query: head.query,
        anthropic_beta: provider
            .beta_headers
            .filter(head.beta.as_deref())
            .and_then(|b| HeaderValue::from_str(&b).ok()),
        raw_errors: true,
    };
    let deadline = upstream::deadline(provider);
    let path = "/v1/messages/count_tokens";
    let answer = upstream::post_with(
        &app.http,
        provider,
        path,
        bytes.into(),
        false,
        deadline,
        &extras,
    );
    let read = match answer.await {
        Ok(a) => upstream::read_body(provider, a, deadline).await,
        Err(e) => Err(e),
    };
    let answer = read.map_err(|e| e.error.with_attempted(&provider.name, 1))?;
    let mut resp = Response::new(axum::body::Body::from(answer));
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    crate::http::answers::write_routing_headers(resp.headers_mut(), &provider.name, 1);
    Ok(resp)
}
