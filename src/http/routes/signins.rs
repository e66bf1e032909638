//! Agent sign-in routes: start, renew, list and end a device's sign-in, and
//! the admin's view of a user's sign-ins.

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::AgentAddress;
use crate::app::AppState;
use crate::auth::signins::{self, EndReason};
use crate::error::{Error, Result};
use crate::http::extract::agent::Caller;
use crate::http::extract::{AdminUser, ApiJson, LoginUser};
use crate::store::now_ms;
use crate::store::signins::{SignInFilter, SignInRow};
use crate::time::rfc3339;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_sign_in))
        .routes(routes!(refresh))
        .routes(routes!(mine))
        .routes(routes!(sign_out))
        .routes(routes!(admin_list))
        .routes(routes!(admin_end))
}

/// Token answers must not be kept by caches or proxies.
const NO_STORE: [(header::HeaderName, &str); 1] = [(header::CACHE_CONTROL, "no-store")];

fn not_found() -> Error {
    Error::not_found(
        "sign_in_not_found",
        "There is no such live sign-in of yours.",
    )
}

/// The fields an app sees; `last_used_at` includes stamps not yet written.
pub(crate) fn view(app: &AppState, r: &SignInRow) -> serde_json::Value {
    let pending = app.auth.last_used.sign_ins.get(&r.device_id).map(|v| *v);
    json!({
        "device_id": r.device_id,
        "device_label": r.device_label,
        "agent": r.agent,
        "created_at": rfc3339(r.created_at),
        "last_used_at": r.last_used_at.max(pending).map(rfc3339),
        "expires_at": rfc3339(r.expires_at),
    })
}

#[derive(Deserialize, ToSchema)]
pub struct SignInRequest {
    /// The agent's address.
    agent: String,
    /// A name for this device, 1 to 200 characters.
    device_label: String,
}

/// Exchange a login token for a sign-in of one agent on this device.
#[utoipa::path(post, path = "/api/agent-tokens", tag = "agent-tokens", request_body = SignInRequest,
    responses((status = 201, description = "access_token, token_type, expires_in, refresh_token, refresh_expires_in, device_id, agent"),
              (status = 401, description = "invalid_token (only login tokens are accepted)"),
              (status = 403, description = "agent_forbidden"), (status = 404, description = "agent_not_found")))]
async fn create_sign_in(
    State(app): State<AppState>,
    LoginUser(user): LoginUser,
    ApiJson(body): ApiJson<SignInRequest>,
) -> Result<impl IntoResponse> {
    let address = AgentAddress::parse_field("agent", &body.agent)?;
    let label = signins::parse_device_label(&body.device_label)?;
    let agent = app.agent(address.as_str()).await?.ok_or_else(|| {
        Error::not_found("agent_not_found", format!("There is no agent '{address}'."))
    })?;
    let issued = signins::sign_in(&app.auth, &user, &agent, label).await?;
    Ok((StatusCode::CREATED, NO_STORE, Json(issued.view())))
}

#[derive(Deserialize, ToSchema)]
pub struct RefreshRequest {
    refresh_token: String,
}

/// Renew a sign-in: the refresh token is used up; a new one and a new access token come back.
#[utoipa::path(post, path = "/api/agent-tokens/refresh", tag = "agent-tokens", request_body = RefreshRequest,
    responses((status = 200, description = "The same shape as the sign-in, same device_id"),
              (status = 401, description = "refresh_token_reused, refresh_token_expired, sign_in_ended or invalid_refresh_token")))]
async fn refresh(
    State(app): State<AppState>,
    ApiJson(body): ApiJson<RefreshRequest>,
) -> Result<impl IntoResponse> {
    let issued = signins::renew(&app.auth, &body.refresh_token).await?;
    Ok((NO_STORE, Json(issued.view())))
}

/// The caller's live sign-ins, one per device (login token or access token).
#[utoipa::path(get, path = "/api/agent-tokens/mine", tag = "agent-tokens",
    responses((status = 200, description = "[{device_id, device_label, agent, created_at, last_used_at, expires_at}]")))]
async fn mine(State(app): State<AppState>, caller: Caller) -> Result<impl IntoResponse> {
    let rows = app
        .store
        .sign_ins_of_user(&caller.user().id, true, now_ms())
        .await?;
    Ok(Json(rows.iter().map(|r| view(&app, r)).collect::<Vec<_>>()))
}

/// End a sign-in: the owner's login token, or that device's own access token.
#[utoipa::path(delete, path = "/api/agent-tokens/{device_id}", tag = "agent-tokens",
    params(("device_id" = String, Path)),
    responses((status = 204), (status = 404, description = "sign_in_not_found")))]
async fn sign_out(
    State(app): State<AppState>,
    caller: Caller,
    Path(device_id): Path<String>,
) -> Result<StatusCode> {
    // A device may end only itself; the user's login token may end any of theirs.
    let may = match &caller {
        Caller::Login(_) => true,
        Caller::Device { sign_in, .. } => sign_in.device_id == device_id,
    };
    if may
        && signins::end(
            &app.auth,
            &device_id,
            Some(&caller.user().id),
            EndReason::SignedOut,
        )
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found())
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct AdminQuery {
    /// A user's e-mail: that user's sign-ins, ended ones included.
    user: Option<String>,
    /// An agent's address: only sign-ins of this agent.
    agent: Option<String>,
}

/// The admin's view of a sign-in: the app's fields plus who and how it ended.
pub(crate) fn admin_view(app: &AppState, r: &SignInRow) -> serde_json::Value {
    let mut v = view(app, r);
    v["user"] = json!(r.user_email);
    v["user_id"] = json!(r.user_id);
    v["ended_at"] = json!(r.ended_at.map(rfc3339));
    v["end_reason"] = json!(r.end_reason);
    v
}

/// Sign-ins, newest first. With `user`: that user's, ended ones included (with
/// ended_at and end_reason). Without it: every live sign-in. `agent` narrows either.
#[utoipa::path(get, path = "/api/admin/sign-ins", tag = "admin", params(AdminQuery),
    responses((status = 200, description = "Sign-ins with user, user_id, ended_at, end_reason"),
              (status = 404, description = "user_not_found")))]
async fn admin_list(
    State(app): State<AppState>,
    _admin: AdminUser,
    Query(q): Query<AdminQuery>,
) -> Result<impl IntoResponse> {
    let user = match q.user.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
        None => None,
        Some(email) => Some(
            app.store
                .user_by_email(&email.to_lowercase())
                .await?
                .ok_or_else(|| {
                    Error::not_found("user_not_found", "There is no user with this e-mail.")
                })?,
        ),
    };
    let agent = match q.agent.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => Some(AgentAddress::parse_field("agent", a)?),
    };
    let filter = SignInFilter {
        user_id: user.as_ref().map(|u| u.id.as_str()),
        agent: agent.as_ref().map(|a| a.as_str()),
        live_only: user.is_none(),
    };
    let rows = app
        .store
        .list_sign_ins(&filter, None, i64::MAX, now_ms())
        .await?;
    Ok(Json(
        rows.iter().map(|r| admin_view(&app, r)).collect::<Vec<_>>(),
    ))
}

/// End any live sign-in.
#[utoipa::path(delete, path = "/api/admin/sign-ins/{device_id}", tag = "admin",
    params(("device_id" = String, Path)),
    responses((status = 204), (status = 404, description = "sign_in_not_found")))]
async fn admin_end(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(device_id): Path<String>,
) -> Result<StatusCode> {
    if signins::end(&app.auth, &device_id, None, EndReason::RevokedByAdmin).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::not_found(
            "sign_in_not_found",
            "There is no live sign-in with this device id.",
        ))
    }
}
