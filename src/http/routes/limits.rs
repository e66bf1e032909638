//! The `…/limits` views: a key's, a user's and an agent's limits with what
//! they use now. Admission (429s and rate headers) is `http::admission`;
//! the rules are in `crate::limits`.

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::{Error, Result};
use crate::http::extract::{AdminUser, LoginUser};
use crate::limits::engine::Used;
use crate::limits::{Limits, Subject};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(key_limits))
        .routes(routes!(user_limits))
        .routes(routes!(agent_limits))
}

fn view(limits: &Limits, used: Used) -> serde_json::Value {
    json!({"limits": limits, "used": used})
}

/// One of the caller's API keys: its limits and what it uses now.
#[utoipa::path(get, path = "/api/api-keys/{id}/limits", tag = "api-keys", params(("id" = String, Path)),
    responses((status = 200, description = "`{limits, used: {requests_this_minute, tokens_this_minute, tokens_today, in_flight, spend_today, spend_this_month, reserved}}`"),
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
    responses((status = 200, description = "`{limits, used: {requests_this_minute, tokens_this_minute, tokens_today, in_flight, spend_today, spend_this_month, reserved}}`"),
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

/// An agent's limits and what it uses now (all its users' chats).
#[utoipa::path(get, path = "/api/admin/agents/{address}/limits", tag = "admin", params(("address" = String, Path)),
    responses((status = 200, description = "`{limits, used: {requests_this_minute, tokens_this_minute, tokens_today, in_flight, spend_today, spend_this_month, reserved}}`"),
              (status = 404, description = "agent_not_found")))]
async fn agent_limits(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(address): Path<String>,
) -> Result<impl IntoResponse> {
    let agent = app.agent(&address).await?.ok_or_else(|| {
        Error::not_found("agent_not_found", "There is no agent with this address.")
    })?;
    let used = agent_usage(&app, &address, agent.limits).await;
    Ok(Json(view(&agent.limits, used)))
}

/// What an agent uses now (all its users' chats).
pub(crate) async fn agent_usage(app: &App, address: &str, limits: Limits) -> Used {
    app.limiter.used(&Subject::agent(address, limits).key).await
}
