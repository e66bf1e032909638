//! The OpenAI-compatible model routes (API key): chat completions (plain and
//! streamed), embeddings and rerank. Thin: read the body, resolve the model,
//! hand over to the relay or the retrieval functions. Every request that
//! passed authentication leaves one usage record, failures included.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::{Error, Result};
use crate::http::admission::{admitted, recorded, Charge};
use crate::http::answers::{cost_headers, relayed_response, routing_headers};
use crate::http::edge::access::AccessNote;
use crate::http::extract::{parse_json, read_body, ApiKeyAuth};
use crate::limits::Subject;
use crate::models::retrieval::{self, EmbedRequest, RerankRequest};
use crate::models::routing::Answered;
use crate::models::{requested_model, resolve, Model, ModelKind};
use crate::proxy::chat::{relay, ChatCall, NoHooks};
use crate::spend::budget::tokens_of_chars;
use crate::usage::{Tokens, UsageContext, UsageTicket};
use crate::wire::chat::body::{ChatInput, RawChat};
use crate::wire::chat::check_body;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(chat_completions))
        .routes(routes!(embeddings))
        .routes(routes!(rerank))
}

/// `POST /v1/chat/completions` (OpenAI shape; fields not listed pass to the upstream unchanged).
#[derive(ToSchema)]
#[allow(dead_code)]
struct ChatCompletionRequest {
    /// A chat model's id.
    model: String,
    #[schema(value_type = Vec<Object>)]
    messages: Vec<Value>,
    stream: Option<bool>,
    #[schema(value_type = Option<Object>)]
    stream_options: Option<Value>,
}

/// `POST /v1/embeddings`.
#[derive(ToSchema)]
#[allow(dead_code)]
struct EmbeddingsRequest {
    /// An embeddings model's id.
    model: String,
    /// A string or a list of strings; not empty.
    #[schema(value_type = Object)]
    input: Value,
    /// `float` (default) or `base64` (little-endian float32).
    encoding_format: Option<String>,
    dimensions: Option<u64>,
    user: Option<String>,
}

/// `POST /v1/rerank`.
#[derive(ToSchema)]
#[allow(dead_code)]
struct RerankRequestDoc {
    /// A scoring model's id.
    model: String,
    query: String,
    /// Strings or `{"text": string}` objects; not empty.
    #[schema(value_type = Vec<Object>)]
    documents: Vec<Value>,
    /// At least 1; default all.
    top_n: Option<u64>,
    /// Default true.
    return_documents: Option<bool>,
}

/// The routes `http::Dispatch` serves before the router, by exact path (the
/// caller checked the method): the same handlers, extractors and errors.
pub(crate) fn direct_route(path: &str) -> Option<(&'static str, crate::http::Direct)> {
    use axum::handler::Handler;
    let direct: (&'static str, crate::http::Direct) = match path {
        "/v1/chat/completions" => ("/v1/chat/completions", |req, app| {
            Handler::call(chat_completions, req, app)
        }),
        "/v1/embeddings" => ("/v1/embeddings", |req, app| {
            Handler::call(embeddings, req, app)
        }),
        "/v1/rerank" => ("/v1/rerank", |req, app| Handler::call(rerank, req, app)),
        _ => return None,
    };
    Some(direct)
}

pub(crate) fn key_context(auth: &ApiKeyAuth) -> UsageContext {
    UsageContext {
        user_id: Some(auth.user.id.clone()),
        api_key_id: Some(auth.key.id.clone()),
        ..UsageContext::default()
    }
}

/// The callers whose limits a request with this key must fit: the key's and its user's.
pub(crate) fn key_subjects(auth: &ApiKeyAuth) -> [Subject; 2] {
    [
        Subject::api_key(&auth.key.id, auth.key.limits).named(&auth.key.name),
        Subject::user(&auth.user.id, auth.user.limits).named(&auth.user.email),
    ]
}

/// Reads the body as a JSON object and resolves its model for this route.
async fn model_request(
    app: &App,
    auth: &ApiKeyAuth,
    req: Request,
    kind: ModelKind,
    ticket: &mut UsageTicket,
) -> Result<(Arc<Model>, Map<String, Value>)> {
    let note = AccessNote::of(req.extensions());
    let bytes = read_body(req).await?;
    let body: Map<String, Value> = parse_json(&bytes)?;
    let model = named_model(app, auth, requested_model(&body)?, kind, ticket, &note)?;
    Ok((model, body))
}

/// The model a request names, noted for its usage record and access line,
/// if the key may use it and it is of this kind.
pub(crate) fn named_model(
    app: &App,
    auth: &ApiKeyAuth,
    name: &str,
    kind: ModelKind,
    ticket: &mut UsageTicket,
    note: &AccessNote,
) -> Result<Arc<Model>> {
    let catalog = app.catalog();
    // Usage records and the access line name the model's id, also when the
    // client sent one of its aliases.
    let id = catalog.model(name).map_or(name, |m| m.id.as_str());
    ticket.set_model(id);
    note.set(|f| f.model = Some(id.to_string()));
    key_model(&catalog, auth, name, kind)
}

/// The model `name` (an id or an alias) if the key may use it and it is of
/// this kind.
pub(crate) fn key_model(
    catalog: &crate::models::CatalogSnapshot,
    auth: &ApiKeyAuth,
    name: &str,
    kind: ModelKind,
) -> Result<Arc<Model>> {
    // The key's list names ids: an alias of an allowed model is allowed.
    if !catalog.model(name).is_some_and(|m| auth.key.allows(&m.id)) {
        auth.check_model(name)?;
    }
    resolve(catalog, name, kind)
}

/// The client's name for its model when it is an alias (None: the id).
pub(crate) fn alias_sent(model: &Model, name: &str) -> Option<String> {
    (model.id != name).then(|| name.to_string())
}

/// [`model_request`] for chat: the body read without a tree in the usual
/// case ([`RawChat`]), else as a tree and checked.
async fn chat_request(
    app: &App,
    auth: &ApiKeyAuth,
    req: Request,
    ticket: &mut UsageTicket,
) -> Result<(Arc<Model>, ChatInput, Option<String>)> {
    let note = AccessNote::of(req.extensions());
    note.set(|f| f.api = Some("chat"));
    let bytes = read_body(req).await?;
    let (name, body) = match RawChat::read(bytes.clone()) {
        Some(raw) => (raw.model().to_string(), ChatInput::Raw(raw)),
        None => {
            let body: Map<String, Value> = parse_json(&bytes)?;
            (requested_model(&body)?.to_string(), ChatInput::Tree(body))
        }
    };
    // The model's errors before the body's, as for the other routes.
    let model = named_model(app, auth, &name, ModelKind::Chat, ticket, &note)?;
    if let ChatInput::Tree(body) = &body {
        check_body(body)?;
    }
    let requested = alias_sent(&model, &name);
    Ok((model, body, requested))
}

/// Chat completion through the model's upstream, plain or streamed (SSE).
#[utoipa::path(post, path = "/v1/chat/completions", tag = "v1",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The upstream's answer with `model` naming the alias; with `stream: true` an event stream of chunks ending in `data: [DONE]`"),
        (status = 400, description = "validation_error, model_kind_mismatch"),
        (status = 401, description = "invalid_api_key"),
        (status = 403, description = "model_not_allowed"),
        (status = 404, description = "model_not_found"),
        (status = 413, description = "payload_too_large"),
        (status = 502, description = "upstream_unavailable, upstream_error"),
        (status = 504, description = "upstream_timeout")))]
async fn chat_completions(
    State(app): State<AppState>,
    auth: ApiKeyAuth,
    req: Request,
) -> Result<Response> {
    let mut ticket = UsageTicket::new(&app.usage, key_context(&auth), "chat");
    let prepared = chat_request(&app, &auth, req, &mut ticket).await;
    let (model, body, requested) = recorded(&mut ticket, prepared)?;
    let app = &app;
    let (chars, max) = body.reserve_figures();
    let charged = Arc::clone(&model);
    let charge = Charge::new(&charged, tokens_of_chars(chars), max);
    Ok(admitted(
        app,
        &key_subjects(&auth),
        charge,
        ticket,
        |mut ticket| async move {
            // The relay records the request from here on.
            let call = ChatCall {
                model,
                body,
                tools: None,
                usage: ticket.hand_over(),
                requested,
            };
            relay(&app.http, &app.usage, call, NoHooks)
                .await
                .map(relayed_response)
        },
    )
    .await)
}

/// The prompt's estimate of an embeddings request (its inputs) or a rerank
/// (the query plus each document), for a budget's reservation.
fn retrieval_prompt(kind: ModelKind, body: &Map<String, Value>) -> u64 {
    let text = |v: &Value| match v {
        Value::String(s) => tokens_of_chars(s.chars().count()),
        Value::Object(o) => o
            .get("text")
            .and_then(Value::as_str)
            .map_or(0, |s| tokens_of_chars(s.chars().count())),
        _ => 0,
    };
    let each = |v: Option<&Value>| match v {
        Some(Value::Array(items)) => items.iter().map(text).sum(),
        Some(v) => text(v),
        None => 0,
    };
    match kind {
        ModelKind::Embeddings => each(body.get("input")),
        _ => each(body.get("query")) + each(body.get("documents")),
    }
}

/// Records an embeddings or rerank result (naming the model and provider
/// that answered) and makes its response.
fn routed_response<T: serde::Serialize>(
    ticket: &mut UsageTicket,
    r: Result<(T, Tokens, Answered)>,
) -> Result<Response> {
    match r {
        Ok((v, tokens, answered)) => {
            ticket.set_model(&answered.model);
            ticket.set_provider(&answered.provider);
            ticket.set_upstream_model(&answered.upstream_model);
            let cost = ticket.finish_priced(200, tokens);
            let mut resp = Json(v).into_response();
            routing_headers(&mut resp, &answered);
            cost_headers(resp.headers_mut(), &cost, ticket.currency());
            Ok(resp)
        }
        Err(e) => {
            ticket.finish(e.status(), Tokens::default());
            Err(e)
        }
    }
}

/// Embeddings of one text or a list of texts.
#[utoipa::path(post, path = "/v1/embeddings", tag = "v1",
    request_body = EmbeddingsRequest,
    responses(
        (status = 200, description = "`{object: list, data: [{object: embedding, index, embedding}], model, usage: {prompt_tokens, total_tokens}}`"),
        (status = 400, description = "validation_error, model_kind_mismatch"),
        (status = 401, description = "invalid_api_key"),
        (status = 403, description = "model_not_allowed"),
        (status = 404, description = "model_not_found"),
        (status = 502, description = "upstream_unavailable, upstream_error"),
        (status = 504, description = "upstream_timeout")))]
async fn embeddings(
    State(app): State<AppState>,
    auth: ApiKeyAuth,
    req: Request,
) -> Result<Response> {
    let app = &app;
    retrieval_route(
        app,
        &auth,
        req,
        ModelKind::Embeddings,
        EmbedRequest::from_body,
        |model, req| async move { retrieval::embed(&app.http, &model, req).await },
    )
    .await
}

/// Documents sorted by relevance to a query.
#[utoipa::path(post, path = "/v1/rerank", tag = "v1",
    request_body = RerankRequestDoc,
    responses(
        (status = 200, description = "`{id, model, results: [{index, relevance_score, document?: {text}}], usage: {prompt_tokens, completion_tokens: 0, total_tokens}, meta: {api_version: {version: \"2\"}, billed_units: {search_units: 1}}}`, by falling score"),
        (status = 400, description = "validation_error, model_kind_mismatch"),
        (status = 401, description = "invalid_api_key"),
        (status = 403, description = "model_not_allowed"),
        (status = 404, description = "model_not_found"),
        (status = 502, description = "upstream_unavailable, upstream_error"),
        (status = 504, description = "upstream_timeout")))]
async fn rerank(State(app): State<AppState>, auth: ApiKeyAuth, req: Request) -> Result<Response> {
    let app = &app;
    retrieval_route(
        app,
        &auth,
        req,
        ModelKind::Scoring,
        RerankRequest::from_body,
        |model, req| async move { retrieval::rerank(&app.http, &model, req).await },
    )
    .await
}

/// An embeddings or rerank request, once for both: the ticket opened first,
/// the body read and checked for `kind` (`parse`), admission, then `call`
/// upstream and the answer recorded with who answered.
async fn retrieval_route<B, T, F, Fut>(
    app: &App,
    auth: &ApiKeyAuth,
    req: Request,
    kind: ModelKind,
    parse: fn(Map<String, Value>) -> Result<B>,
    call: F,
) -> Result<Response>
where
    T: serde::Serialize + retrieval::NamesModel,
    F: FnOnce(Arc<Model>, B) -> Fut,
    Fut: std::future::Future<Output = Result<(T, Tokens, Answered)>>,
{
    let mut ticket = UsageTicket::new(&app.usage, key_context(auth), kind.as_str());
    let prepared = async {
        let (model, body) = model_request(app, auth, req, kind, &mut ticket).await?;
        let alias = requested_model(&body)
            .ok()
            .and_then(|n| alias_sent(&model, n));
        let prompt = retrieval_prompt(kind, &body);
        Ok::<_, Error>((model, parse(body)?, alias, prompt))
    }
    .await;
    let (model, body, alias, prompt) = recorded(&mut ticket, prepared)?;
    let charged = Arc::clone(&model);
    let charge = Charge::new(&charged, prompt, Some(0));
    Ok(admitted(
        app,
        &key_subjects(auth),
        charge,
        ticket,
        |mut ticket| async move {
            let id = model.id.clone();
            let mut result = call(model, body).await;
            // The answer names what the client sent (a fallback's, the fallback).
            if let (Ok((answer, _, answered)), Some(name)) = (&mut result, &alias) {
                if answered.model == id {
                    answer.set_model(name);
                }
            }
            routed_response(&mut ticket, result)
        },
    )
    .await)
}
