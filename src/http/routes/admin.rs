//! Admin API: users, providers, models (agents and sign-ins live in agents.rs
//! and signins.rs; usage comes with its feature).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::AppState;
use crate::auth::accounts;
use crate::error::{Error, Result};
use crate::http::extract::{AdminUser, ApiJson, ApiKeyAuth};
use crate::models::NewProvider;
use crate::runtime::Invalidation;
use crate::store::catalog::ProviderRow;
use crate::time::rfc3339;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_user, list_users))
        .routes(routes!(update_user))
        .routes(routes!(create_provider, list_providers))
        .routes(routes!(get_provider, delete_provider, patch_provider))
        .routes(routes!(v1_models))
}

#[derive(Deserialize, ToSchema)]
pub struct NewUser {
    email: String,
    password: String,
    #[serde(default)]
    is_admin: bool,
}

/// Create a user.
#[utoipa::path(post, path = "/api/admin/users", tag = "admin", request_body = NewUser,
    responses((status = 201, description = "The user"), (status = 409, description = "user_exists")))]
async fn create_user(
    State(app): State<AppState>,
    _admin: AdminUser,
    ApiJson(body): ApiJson<NewUser>,
) -> Result<impl IntoResponse> {
    let u = accounts::create_user(&app.store, &body.email, body.password, body.is_admin).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": u.id, "email": u.email, "is_admin": u.admin()})),
    ))
}

/// List users.
#[utoipa::path(get, path = "/api/admin/users", tag = "admin", responses((status = 200, description = "Users")))]
async fn list_users(State(app): State<AppState>, _admin: AdminUser) -> Result<impl IntoResponse> {
    let users = app.store.list_users().await?;
    Ok(Json(
        users.iter().map(accounts::user_json).collect::<Vec<_>>(),
    ))
}

#[derive(Deserialize, ToSchema)]
pub struct UserPatch {
    #[serde(default)]
    is_active: Option<bool>,
    #[serde(default)]
    is_admin: Option<bool>,
    #[serde(default)]
    password: Option<String>,
    /// New limits; null removes them all; left out keeps them.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    limits: Option<serde_json::Value>,
    /// The user's `mcp` grant; null removes it (no MCP access); left out keeps it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    mcp: Option<serde_json::Value>,
}

/// Tells "sent as null" (Some(Null)) from "left out" (None).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// Change a user; a disabled user's tokens, keys and sign-ins stop working at once.
#[utoipa::path(patch, path = "/api/admin/users/{id}", tag = "admin", request_body = UserPatch,
    params(("id" = String, Path)), responses((status = 200, description = "The user"), (status = 404, description = "user_not_found")))]
async fn update_user(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UserPatch>,
) -> Result<impl IntoResponse> {
    // Checked before anything is written.
    let limits = body
        .limits
        .as_ref()
        .map(crate::limits::Limits::from_json)
        .transpose()?;
    let mcp = match &body.mcp {
        None => None,
        Some(v) => Some(super::admin_mcp::check_grant(&app, v).await?),
    };
    if let Some(grant) = mcp {
        // Like the limits: the change below drops the user's cached credentials.
        store_user_mcp(&app, &id, grant.as_ref()).await?;
    }
    if let Some(l) = limits {
        // Written first: the change below drops the user's cached credentials
        // (with their limits) here and on the other servers.
        store_user_limits(&app, &id, l).await?;
    }
    let change = accounts::UserChange {
        is_active: body.is_active,
        is_admin: body.is_admin,
        password: body.password,
    };
    let user = accounts::update_user(&app.auth, &id, change).await?;
    Ok(Json(accounts::user_json(&user)))
}

/// Writes a user's limits (`user_not_found` when there is no such user).
/// Callers then drop the user's cached credentials (`accounts::update_user`
/// does); the console goes through here too.
pub(crate) async fn store_user_limits(
    app: &AppState,
    id: &str,
    limits: crate::limits::Limits,
) -> Result<()> {
    let found = app
        .store
        .set_limits(
            crate::store::limits::LimitsOwner::User,
            id,
            limits.to_db().as_deref(),
        )
        .await?;
    if !found {
        return Err(Error::not_found(
            "user_not_found",
            "There is no user with this id.",
        ));
    }
    Ok(())
}

/// Writes a user's `mcp` grant (`user_not_found` when there is no such
/// user). Callers then drop the user's cached credentials, as for limits.
pub(crate) async fn store_user_mcp(
    app: &AppState,
    id: &str,
    grant: Option<&crate::mcp::McpGrant>,
) -> Result<()> {
    let found = app
        .store
        .set_user_mcp(id, crate::mcp::McpGrant::to_db(grant).as_deref())
        .await?;
    if !found {
        return Err(Error::not_found(
            "user_not_found",
            "There is no user with this id.",
        ));
    }
    Ok(())
}

pub(crate) fn provider_view(p: &ProviderRow) -> serde_json::Value {
    let mut v = json!({
        "name": p.name, "type": p.kind, "base_url": p.base_url, "timeout_s": p.timeout_s,
        "has_api_key": p.api_key.is_some(), "created_at": rfc3339(p.created_at),
    });
    // A setting of openai providers only (the other types refuse it).
    if p.kind == "openai" {
        v["responses"] = json!(p.responses);
    }
    if p.kind == crate::models::ProviderType::Anthropic.as_str() {
        v["anthropic_version"] = json!(p
            .anthropic_version
            .as_deref()
            .unwrap_or(crate::models::anthropic::DEFAULT_VERSION));
        v["beta_headers"] =
            crate::models::anthropic::BetaHeaders::from_stored(p.beta_headers.as_deref()).view();
    }
    v
}

/// Add a provider (an upstream model server).
#[utoipa::path(post, path = "/api/admin/providers", tag = "admin", request_body = NewProvider,
    responses((status = 201, description = "The provider (its api_key is never shown)"), (status = 409, description = "provider_exists")))]
async fn create_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    ApiJson(body): ApiJson<NewProvider>,
) -> Result<impl IntoResponse> {
    let row = add_provider(&app, &body).await?;
    Ok((StatusCode::CREATED, Json(provider_view(&row))))
}

/// List providers.
#[utoipa::path(get, path = "/api/admin/providers", tag = "admin", responses((status = 200, description = "Providers")))]
async fn list_providers(
    State(app): State<AppState>,
    _admin: AdminUser,
) -> Result<impl IntoResponse> {
    let rows = app.store.list_providers().await?;
    Ok(Json(rows.iter().map(provider_view).collect::<Vec<_>>()))
}

/// One provider.
#[utoipa::path(get, path = "/api/admin/providers/{name}", tag = "admin", params(("name" = String, Path)),
    responses((status = 200, description = "The provider"), (status = 404, description = "provider_not_found")))]
async fn get_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let rows = app.store.list_providers().await?;
    rows.iter()
        .find(|p| p.name == name)
        .map(|p| Json(provider_view(p)))
        .ok_or_else(|| {
            Error::not_found("provider_not_found", "There is no provider with this name.")
        })
}

/// Remove a provider that no model uses.
#[utoipa::path(delete, path = "/api/admin/providers/{name}", tag = "admin", params(("name" = String, Path)),
    responses((status = 204), (status = 404, description = "provider_not_found"), (status = 409, description = "provider_in_use")))]
async fn delete_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    remove_provider(&app, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Change a provider: any of its fields but `name` and `type` (those not
/// given keep their values; `api_key: null` removes the key).
#[utoipa::path(patch, path = "/api/admin/providers/{name}", tag = "admin", params(("name" = String, Path)),
    request_body(content = Object, description = "Any fields of a provider but name and type, e.g. {\"responses\": \"native\"}"),
    responses((status = 200, description = "The provider"), (status = 400, description = "validation_error"),
              (status = 404, description = "provider_not_found")))]
async fn patch_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<serde_json::Map<String, serde_json::Value>>,
) -> Result<impl IntoResponse> {
    let row = change_provider(&app, &name, patch).await?;
    Ok(Json(provider_view(&row)))
}

/// What a field of a provider PATCH must be.
#[derive(Clone, Copy, PartialEq)]
enum FieldType {
    Text,
    Integer,
    /// Read by [`NewProvider::validate`] (`beta_headers`: a word or a list).
    Any,
}

/// The fields a provider PATCH may carry; a field added to [`NewProvider`]
/// is added here.
const PROVIDER_FIELDS: [(&str, FieldType); 6] = [
    ("base_url", FieldType::Text),
    ("api_key", FieldType::Text),
    ("timeout_s", FieldType::Integer),
    ("responses", FieldType::Text),
    ("anthropic_version", FieldType::Text),
    ("beta_headers", FieldType::Any),
];

/// Applies a PATCH to a provider: the stored fields with the patch's over
/// them, validated as a new provider would be, then stored.
pub(crate) async fn change_provider(
    app: &AppState,
    name: &str,
    patch: serde_json::Map<String, serde_json::Value>,
) -> Result<ProviderRow> {
    let rows = app.store.list_providers().await?;
    let Some(old) = rows.into_iter().find(|p| p.name == name) else {
        return Err(Error::not_found(
            "provider_not_found",
            "There is no provider with this name.",
        ));
    };
    for (k, v) in &patch {
        let Some((_, kind)) = PROVIDER_FIELDS.iter().find(|(f, _)| f == k) else {
            return Err(Error::validation(
                k.clone(),
                format!("'{k}' cannot be changed (a provider's name and type are fixed: create a new one)."),
            ));
        };
        let ok = v.is_null()
            || match kind {
                FieldType::Text => v.is_string(),
                FieldType::Integer => v.is_i64(),
                FieldType::Any => true,
            };
        if !ok {
            let what = if *kind == FieldType::Text {
                "a string"
            } else {
                "an integer"
            };
            return Err(Error::validation(
                k.clone(),
                format!("'{k}' must be {what}."),
            ));
        }
    }
    let mut merged = json!({"name": old.name, "type": old.kind, "base_url": old.base_url,
                            "timeout_s": old.timeout_s});
    if old.kind == "openai" {
        merged["responses"] = json!(old.responses);
    }
    if old.kind == crate::models::ProviderType::Anthropic.as_str() {
        merged["anthropic_version"] = json!(old.anthropic_version);
        merged["beta_headers"] =
            crate::models::anthropic::BetaHeaders::from_stored(old.beta_headers.as_deref()).view();
    }
    for (k, v) in &patch {
        merged[k.as_str()] = v.clone();
    }
    let new: NewProvider = serde_json::from_value(merged)
        .map_err(|e| Error::validation("body", format!("The provider is not valid: {e}")))?;
    let mut row = new.validate()?;
    row.api_key = match patch.get("api_key") {
        // The stored key is sealed already.
        None => old.api_key,
        Some(_) => row
            .api_key
            .map(|k| app.keyring.seal(crate::secrets::Use::ProviderKey, &k))
            .transpose()?,
    };
    row.created_at = old.created_at;
    app.store.put_provider(&row, true).await?;
    app.invalidate(Invalidation::Catalog).await;
    Ok(row)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ModelsQuery {
    kind: Option<String>,
    /// Anthropic's shape: 1 to 1000, default 20.
    limit: Option<String>,
    /// Anthropic's shape: the page after this id.
    after_id: Option<String>,
}

/// Models this API key may use, optionally of one kind; in Anthropic's list
/// shape (chat models, paged) when asked with `anthropic-version` or `x-api-key`.
#[utoipa::path(get, path = "/v1/models", tag = "v1", params(ModelsQuery),
    responses((status = 200, description = "OpenAI-style model list with kind; Anthropic's `{data: [{type, id, display_name, created_at}], has_more, first_id, last_id}` when asked Anthropic's way")))]
async fn v1_models(
    State(app): State<AppState>,
    auth: ApiKeyAuth,
    anthropic: Option<axum::Extension<crate::http::edge::error::AnthropicDialect>>,
    axum::extract::Query(q): axum::extract::Query<ModelsQuery>,
) -> Result<axum::response::Response> {
    if anthropic.is_some() {
        use crate::wire::messages::models_list;
        let limit = models_list::parse_limit(q.limit.as_deref())?;
        let catalog = app.catalog();
        let models = catalog
            .model_order
            .iter()
            .filter_map(|id| catalog.model(id))
            .filter(|m| m.kind == crate::models::ModelKind::Chat && auth.key.allows(&m.id))
            .map(|m| (m.id.as_str(), m.created_at))
            .collect();
        let page = models_list::page(models, limit, q.after_id.as_deref());
        return Ok(Json(page).into_response());
    }
    let want = match q.kind.as_deref() {
        None | Some("") => None,
        Some(k) => Some(crate::models::ModelKind::parse(k).ok_or_else(|| {
            Error::validation("kind", "'kind' must be one of chat, embeddings, scoring.")
        })?),
    };
    let catalog = app.catalog();
    let data: Vec<_> = catalog
        .model_order
        .iter()
        .filter_map(|id| catalog.model(id))
        .filter(|m| want.is_none_or(|k| m.kind == k) && auth.key.allows(&m.id))
        .map(|m| {
            json!({"id": m.id, "object": "model", "created": m.created_at / 1000, "owned_by": m.first_provider(), "kind": m.kind.as_str()})
        })
        .collect();
    Ok(Json(json!({"object": "list", "data": data})).into_response())
}

// The rules of adding and removing providers and models, shared by the admin
// API and the console.

/// Adds a provider (409 `provider_exists` when the name is taken).
pub(crate) async fn add_provider(app: &AppState, body: &NewProvider) -> Result<ProviderRow> {
    let mut row = body.validate()?;
    row.api_key = row
        .api_key
        .map(|k| app.keyring.seal(crate::secrets::Use::ProviderKey, &k))
        .transpose()?;
    if !app.store.put_provider(&row, false).await? {
        return Err(Error::conflict(
            "provider_exists",
            "A provider with this name already exists.",
        ));
    }
    row.created_at = crate::store::now_ms();
    app.invalidate(Invalidation::Catalog).await;
    Ok(row)
}

/// Removes a provider that no model uses.
pub(crate) async fn remove_provider(app: &AppState, name: &str) -> Result<()> {
    if app.store.models_of_provider(name).await? > 0 {
        return Err(Error::conflict(
            "provider_in_use",
            "Models still use this provider; delete them first.",
        ));
    }
    if !app.store.delete_provider(name).await? {
        return Err(Error::not_found(
            "provider_not_found",
            "There is no provider with this name.",
        ));
    }
    app.invalidate(Invalidation::Catalog).await;
    Ok(())
}
