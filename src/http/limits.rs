//! Limits on the HTTP side: 429 answers with `Retry-After` and the
//! `x-ratelimit-*` headers, the headers on admitted answers, and the
//! `…/limits` views. The rules are in `crate::limits`.

use axum::extract::{Path, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::{Error, ErrorKind, Result};
use crate::http::extract::{AdminUser, LoginUser};
use crate::limits::engine::Used;
use crate::limits::{Admission, Limits, RateHeaders, Refusal, Subject};
use crate::usage::{EndHook, Tokens};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(key_limits))
        .routes(routes!(user_limits))
}

/// Adds the `x-ratelimit-*` headers (nothing when no limit applies).
pub fn add_headers(resp: &mut Response, h: &RateHeaders) {
    if h.is_empty() {
        return;
    }
    for (name, value) in h.pairs() {
        if let Ok(v) = HeaderValue::from_str(&value) {
            // A static name is not copied (a `&str` one is, on each insert).
            resp.headers_mut()
                .insert(axum::http::HeaderName::from_static(name), v);
        }
    }
}

/// The 429 answer: the contract's error (OpenAI shape on /v1), `Retry-After`
/// and the caller's `x-ratelimit-*` headers.
pub fn refused(r: &Refusal) -> Response {
    let mut e =
        Error::new(ErrorKind::TooManyRequests, r.code, r.message.clone()).with_param(r.field);
    e.retry_after = Some(r.retry_after);
    let mut resp = e.into_response();
    add_headers(&mut resp, &r.headers);
    resp
}

/// Admits a request that must fit every subject's limits; `Err` is the
/// finished 429 answer.
pub async fn admit(
    app: &App,
    subjects: &[Subject],
) -> std::result::Result<Admission, Box<Response>> {
    app.limiter
        .admit(subjects)
        .await
        .map_err(|r| Box::new(refused(&r)))
}

/// Hands the admission to the request's usage ticket: it counts the
/// request's tokens and frees its `max_parallel` place when the request ends.
pub fn end_hook(mut admission: Admission) -> EndHook {
    EndHook::new(move |t: Tokens| {
        let n = t.prompt.saturating_add(t.completion).max(0);
        admission.finish(u64::try_from(n).unwrap_or(0));
    })
}

fn view(limits: &Limits, used: Used) -> serde_json::Value {
    json!({"limits": limits, "used": used})
}

/// One of the caller's API keys: its limits and what it uses now.
#[utoipa::path(get, path = "/api/api-keys/{id}/limits", tag = "api-keys", params(("id" = String, Path)),
    responses((status = 200, description = "`{limits, used: {requests_this_minute, tokens_this_minute, tokens_today, in_flight}}`"),
              (status = 404, description = "api_key_not_found")))]
async fn key_limits(
    State(app): State<AppState>,
    LoginUser(u): LoginUser,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (limits, used) = key_usage(&app, &u.id, &id).await?;
    Ok(Json(view(&limits, used)))
}

/// One of a user's keys: its limits and what it uses now (the API's view and
/// the console's).
pub(crate) async fn key_usage(app: &App, user_id: &str, id: &str) -> Result<(Limits, Used)> {
    let stored = app
        .store
        .api_key_limits(user_id, id)
        .await?
        .ok_or_else(|| {
            Error::not_found("api_key_not_found", "You have no API key with this id.")
        })?;
    let limits = Limits::from_db_or_closed(stored.as_deref(), id);
    let used = app.limiter.used(&Subject::api_key(id, limits).key).await;
    Ok((limits, used))
}

/// A user's limits and what the user uses now (all of the user's keys and sign-ins).
#[utoipa::path(get, path = "/api/admin/users/{id}/limits", tag = "admin", params(("id" = String, Path)),
    responses((status = 200, description = "`{limits, used: {requests_this_minute, tokens_this_minute, tokens_today, in_flight}}`"),
              (status = 404, description = "user_not_found")))]
async fn user_limits(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let user = app
        .store
        .user_by_id(&id)
        .await?
        .ok_or_else(|| Error::not_found("user_not_found", "There is no user with this id."))?;
    let (limits, used) = user_usage(&app, &id, user.limits.as_deref()).await;
    Ok(Json(view(&limits, used)))
}

/// A user's limits (their stored form) and what the user uses now.
pub(crate) async fn user_usage(app: &App, id: &str, stored: Option<&str>) -> (Limits, Used) {
    let limits = Limits::from_db_or_closed(stored, id);
    let used = app.limiter.used(&Subject::user(id, limits).key).await;
    (limits, used)
}

/// What an agent uses now (all its users' chats).
pub(crate) async fn agent_usage(app: &App, address: &str, limits: Limits) -> Used {
    app.limiter.used(&Subject::agent(address, limits).key).await
}
