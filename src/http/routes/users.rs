//! Login, the caller's own account, and API keys.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::AppState;
use crate::auth::{accounts, tokens};
use crate::error::{Error, Result};
use crate::http::extract::{ApiForm, ApiJson, ClientAddr, LoginUser};
use crate::store::keys::ApiKeyRow;
use crate::time::rfc3339;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(me))
        .routes(routes!(create_key, list_keys))
        .routes(routes!(delete_key, patch_key))
}

#[derive(Deserialize, ToSchema)]
pub struct LoginForm {
    /// The user's e-mail address.
    username: Option<String>,
    password: Option<String>,
}

/// The login-token JSON (password login and single sign-on alike).
pub(crate) fn login_response(app: &AppState, user_id: &str) -> LoginResponse {
    let ttl = app.settings.login_token_ttl;
    let (token, _) = app
        .auth
        .tokens
        .issue(tokens::LOGIN, user_id, ttl, None, None);
    LoginResponse {
        access_token: token,
        token_type: "bearer",
        expires_in: ttl,
    }
}

#[derive(Serialize, ToSchema)]
pub struct LoginResponse {
    access_token: String,
    token_type: &'static str,
    expires_in: i64,
}

/// Log in with e-mail and password (form body); returns a login token.
#[utoipa::path(post, path = "/api/auth/jwt/login", tag = "auth",
    request_body(content = LoginForm, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, body = LoginResponse), (status = 400, description = "login_bad_credentials or validation_error"),
              (status = 429, description = "too_many_attempts")))]
async fn login(
    State(app): State<AppState>,
    ClientAddr(client): ClientAddr,
    ApiForm(form): ApiForm<LoginForm>,
) -> Result<Json<LoginResponse>> {
    let username = form
        .username
        .map(|u| u.trim().to_lowercase())
        .filter(|u| !u.is_empty());
    let password = form.password.filter(|p| !p.is_empty());
    let email = username
        .ok_or_else(|| Error::validation("username", "'username' (your e-mail) is required."))?;
    let password =
        password.ok_or_else(|| Error::validation("password", "'password' is required."))?;
    // Bounded before anything else: the name keys the throttle, the password is hashed.
    if email.chars().count() > 320 {
        return Err(Error::validation(
            "username",
            "'username' may have at most 320 characters.",
        ));
    }
    if password.chars().count() > 1024 {
        return Err(Error::validation(
            "password",
            "'password' may have at most 1,024 characters.",
        ));
    }
    let u =
        accounts::password_login(&app.auth, &app.login_throttle, &email, password, client).await?;
    Ok(Json(login_response(&app, &u.id)))
}

/// The caller's account.
#[utoipa::path(get, path = "/api/users/me", tag = "auth", responses((status = 200, description = "The user")))]
async fn me(LoginUser(u): LoginUser) -> impl IntoResponse {
    Json(
        json!({"id": u.id, "email": u.email, "is_admin": u.is_admin, "created_at": rfc3339(u.created_at)}),
    )
}

#[derive(Deserialize, ToSchema)]
pub struct NewKey {
    name: String,
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    models: Option<Vec<String>>,
    /// `{requests_per_minute, tokens_per_minute, tokens_per_day, max_parallel}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    limits: Option<serde_json::Value>,
    /// `{"servers": [...], "tools"?: {...}}`; null or left out: no MCP access.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    mcp: Option<serde_json::Value>,
}

/// The body of `PATCH /api/api-keys/{id}`.
#[derive(Deserialize, ToSchema)]
pub struct KeyPatch {
    /// New limits; null removes them all; left out keeps them.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    limits: Option<serde_json::Value>,
    /// The key's `mcp` grant; null removes it (no MCP access); left out keeps it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    mcp: Option<serde_json::Value>,
}

/// Tells "sent as null" (Some(Null)) from "left out" (None).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

pub(crate) fn key_models(row: &ApiKeyRow) -> Option<Vec<String>> {
    row.models
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
}

/// Create an API key; the key is shown only in this answer.
#[utoipa::path(post, path = "/api/api-keys", tag = "api-keys", request_body = NewKey,
    responses((status = 201, description = "The key, with its secret")))]
async fn create_key(
    State(app): State<AppState>,
    LoginUser(u): LoginUser,
    ApiJson(body): ApiJson<NewKey>,
) -> Result<impl IntoResponse> {
    let limits = match &body.limits {
        None => crate::limits::Limits::default(),
        Some(v) => crate::limits::Limits::from_json(v)?,
    };
    let mcp = match &body.mcp {
        None => None,
        Some(v) => super::admin_mcp::check_grant(&app, v).await?,
    };
    let new = accounts::NewKey {
        name: body.name,
        expires_at: body.expires_at,
        models: body.models,
        limits,
        mcp,
    };
    let (row, secret) = accounts::create_key(&app.store, &u.id, new).await?;
    Ok((
        StatusCode::CREATED,
        Json(accounts::key_json(&row, Some(&secret))),
    ))
}

/// The caller's keys, without secrets.
#[utoipa::path(get, path = "/api/api-keys", tag = "api-keys", responses((status = 200, description = "Keys")))]
async fn list_keys(
    State(app): State<AppState>,
    LoginUser(u): LoginUser,
) -> Result<impl IntoResponse> {
    let rows = app.store.list_api_keys(&u.id).await?;
    Ok(Json(
        rows.iter()
            .map(|r| accounts::key_json(r, None))
            .collect::<Vec<_>>(),
    ))
}

/// Change one of the caller's keys: its `limits` (null removes them) and its `mcp` grant (null: no MCP access).
#[utoipa::path(patch, path = "/api/api-keys/{id}", tag = "api-keys", request_body = KeyPatch,
    params(("id" = String, Path)), responses((status = 200, description = "The key, without its secret"),
        (status = 400, description = "validation_error"), (status = 404, description = "api_key_not_found")))]
async fn patch_key(
    State(app): State<AppState>,
    LoginUser(u): LoginUser,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<KeyPatch>,
) -> Result<impl IntoResponse> {
    let not_found = || Error::not_found("api_key_not_found", "You have no API key with this id.");
    // Both checked before either is written.
    let mcp = match &body.mcp {
        None => None,
        Some(v) => Some(super::admin_mcp::check_grant(&app, v).await?),
    };
    if let Some(v) = &body.limits {
        crate::limits::Limits::from_json(v)?;
        set_key_limits(&app, &u.id, &id, v).await?;
    }
    if let Some(grant) = mcp {
        set_key_mcp(&app, &u.id, &id, grant.as_ref()).await?;
    }
    let row = app
        .store
        .list_api_keys(&u.id)
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(not_found)?;
    Ok(Json(accounts::key_json(&row, None)))
}

/// Sets (null: clears) the limits of one of a user's keys, effective at once
/// on every server; the API's PATCH and the console share it.
pub(crate) async fn set_key_limits(
    app: &AppState,
    user_id: &str,
    id: &str,
    limits: &serde_json::Value,
) -> Result<()> {
    let limits = crate::limits::Limits::from_json(limits)?;
    let hash = app
        .store
        .set_api_key_limits(user_id, id, limits.to_db().as_deref())
        .await?
        .ok_or_else(|| {
            Error::not_found("api_key_not_found", "You have no API key with this id.")
        })?;
    app.invalidate(crate::runtime::Invalidation::ApiKey(hash))
        .await;
    Ok(())
}

/// Sets (None: clears) the `mcp` grant of one of a user's keys, effective at
/// once on every server, open MCP sessions included; the API and the console
/// share it.
pub(crate) async fn set_key_mcp(
    app: &AppState,
    user_id: &str,
    id: &str,
    grant: Option<&crate::mcp::McpGrant>,
) -> Result<()> {
    let hash = app
        .store
        .set_api_key_mcp(user_id, id, crate::mcp::McpGrant::to_db(grant).as_deref())
        .await?
        .ok_or_else(|| {
            Error::not_found("api_key_not_found", "You have no API key with this id.")
        })?;
    app.invalidate(crate::runtime::Invalidation::ApiKey(hash))
        .await;
    Ok(())
}

/// Revoke one of the caller's keys; it stops working at once.
#[utoipa::path(delete, path = "/api/api-keys/{id}", tag = "api-keys",
    params(("id" = String, Path)), responses((status = 204), (status = 404, description = "api_key_not_found")))]
async fn delete_key(
    State(app): State<AppState>,
    LoginUser(u): LoginUser,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    revoke_key(&app, &u.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Revokes one of a user's keys: it stops working at once, on every server.
pub(crate) async fn revoke_key(app: &AppState, user_id: &str, id: &str) -> Result<()> {
    match app.store.revoke_api_key(user_id, id).await? {
        Some(hash) => {
            app.invalidate(crate::runtime::Invalidation::ApiKey(hash))
                .await;
            Ok(())
        }
        None => Err(Error::not_found(
            "api_key_not_found",
            "You have no API key with this id.",
        )),
    }
}
