//! Admin API for models: several targets (or one), routing, fallbacks,
//! attempts, and each target's state in this server.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::{Error, Result};
use crate::http::extract::{AdminUser, ApiJson};
use crate::models::routing::{mono_ms, FormError};
use crate::models::{rows_of, spec_of, ModelForm, ModelKind, ModelPatch, ModelSpec, ProviderType};
use crate::runtime::Invalidation;
use crate::store::catalog::{ModelRow, TargetRow};
use crate::time::rfc3339;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_model, list_models))
        .routes(routes!(get_model, patch_model, delete_model))
}

fn form_error(e: FormError) -> Error {
    if e.code == "model_kind_mismatch" {
        Error::bad_request("model_kind_mismatch", e.message).with_param(e.param)
    } else {
        Error::validation(e.param, e.message)
    }
}

fn not_found() -> Error {
    Error::not_found("model_not_found", "There is no model with this id.")
}

/// The providers (with their types) and the models (with their kinds and
/// aliases) that exist now.
async fn known(
    app: &App,
) -> Result<(
    HashMap<String, Option<ProviderType>>,
    HashMap<String, (ModelKind, Vec<String>)>,
)> {
    let providers = app
        .store
        .list_providers()
        .await?
        .into_iter()
        .map(|p| (p.name, ProviderType::parse(&p.kind)))
        .collect();
    let models = app
        .store
        .list_models()
        .await?
        .into_iter()
        .filter_map(|m| {
            let aliases = spec_of(&m, Vec::new())
                .map(|s| s.aliases)
                .unwrap_or_default();
            Some((m.id, (ModelKind::parse(&m.kind)?, aliases)))
        })
        .collect();
    Ok((providers, models))
}

async fn validate(app: &App, form: &ModelForm) -> Result<ModelSpec> {
    let (providers, models) = known(app).await?;
    let spec = form
        .validate(
            |p| providers.contains_key(p),
            |id| models.get(id).map(|m| m.0),
        )
        .map_err(form_error)?;
    let others = models
        .iter()
        .filter(|(id, _)| **id != spec.id)
        .map(|(id, m)| (id.as_str(), m.1.as_slice()));
    spec.check_catalog(others, |p| providers.get(p).copied().flatten())
        .map_err(form_error)?;
    Ok(spec)
}

/// A model with each target's state in this server.
fn model_view(app: &App, spec: &ModelSpec, created_at: i64) -> Value {
    let (now, wall) = (mono_ms(), crate::store::now_ms());
    let targets: Vec<Value> = spec
        .targets
        .iter()
        .map(|t| {
            let s = app
                .routing
                .health
                .get(&t.provider, &t.upstream_model)
                .state(now);
            json!({
                "provider": t.provider, "upstream_model": t.upstream_model, "weight": t.weight,
                "healthy": s.healthy, "in_flight": s.in_flight, "failures": s.failures,
                "resting_until": s.rest_ends_in_ms.map(|d| rfc3339(wall.saturating_add(d))),
            })
        })
        .collect();
    let first = spec.targets.first();
    json!({
        "id": spec.id, "kind": spec.kind.as_str(),
        "provider": first.map(|t| t.provider.as_str()),
        "upstream_model": first.map(|t| t.upstream_model.as_str()),
        "targets": targets, "routing": spec.routing.as_str(), "fallbacks": spec.fallbacks,
        "max_attempts": spec.max_attempts, "aliases": spec.aliases,
        "max_tokens_default": spec.max_tokens_default, "created_at": rfc3339(created_at),
    })
}

fn view_of(app: &App, row: &ModelRow, targets: Vec<TargetRow>) -> Option<Value> {
    spec_of(row, targets).map(|s| model_view(app, &s, row.created_at))
}

/// Add a model: an alias clients send, its kind, and its targets (or the
/// one-target form `provider` + `upstream_model`), routing, fallbacks and attempts.
#[utoipa::path(post, path = "/api/admin/models", tag = "admin", request_body = ModelForm,
    responses((status = 201, description = "The model with its targets' state"),
        (status = 400, description = "validation_error, model_kind_mismatch (a fallback of another kind)"),
        (status = 409, description = "model_exists")))]
async fn create_model(
    State(app): State<AppState>,
    _admin: AdminUser,
    ApiJson(body): ApiJson<ModelForm>,
) -> Result<impl IntoResponse> {
    let spec = add_model(&app, &body).await?;
    Ok((
        StatusCode::CREATED,
        Json(model_view(&app, &spec, crate::store::now_ms())),
    ))
}

/// Adds a model (409 `model_exists` when the id is taken); the admin API and
/// the console share it.
pub(crate) async fn add_model(app: &App, body: &ModelForm) -> Result<ModelSpec> {
    let spec = validate(app, body).await?;
    let (row, targets) = rows_of(&spec);
    if !app.store.put_model(&row, &targets, false).await? {
        return Err(Error::conflict(
            "model_exists",
            "A model with this id already exists.",
        ));
    }
    app.invalidate(Invalidation::Catalog).await;
    Ok(spec)
}

/// List models.
#[utoipa::path(get, path = "/api/admin/models", tag = "admin", responses((status = 200, description = "Models")))]
async fn list_models(State(app): State<AppState>, _admin: AdminUser) -> Result<impl IntoResponse> {
    let rows = app.store.list_models().await?;
    let mut targets: HashMap<String, Vec<TargetRow>> = HashMap::new();
    for t in app.store.list_model_targets().await? {
        targets.entry(t.model_id.clone()).or_default().push(t);
    }
    let views: Vec<Value> = rows
        .iter()
        .filter_map(|m| view_of(&app, m, targets.remove(&m.id).unwrap_or_default()))
        .collect();
    Ok(Json(views))
}

/// One model, with each target's state in this server.
#[utoipa::path(get, path = "/api/admin/models/{id}", tag = "admin", params(("id" = String, Path)),
    responses((status = 200, description = "The model: targets with provider, upstream_model, weight, healthy, in_flight, failures, resting_until"),
        (status = 404, description = "model_not_found")))]
async fn get_model(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let row = app.store.model(&id).await?.ok_or_else(not_found)?;
    let targets = app.store.model_targets(&id).await?;
    view_of(&app, &row, targets).map(Json).ok_or_else(not_found)
}

/// Change a model's targets, routing, fallbacks or attempts (its kind stays).
#[utoipa::path(patch, path = "/api/admin/models/{id}", tag = "admin", params(("id" = String, Path)),
    request_body = ModelPatch,
    responses((status = 200, description = "The model"),
        (status = 400, description = "validation_error, model_kind_mismatch"),
        (status = 404, description = "model_not_found")))]
async fn patch_model(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ModelPatch>,
) -> Result<impl IntoResponse> {
    let (spec, created_at) = change_model(&app, &id, &body).await?;
    Ok(Json(model_view(&app, &spec, created_at)))
}

/// Applies a change to a model (the admin API and the console share it);
/// returns the new model and when it was created.
pub(crate) async fn change_model(
    app: &App,
    id: &str,
    body: &ModelPatch,
) -> Result<(ModelSpec, i64)> {
    let row = app.store.model(id).await?.ok_or_else(not_found)?;
    let targets = app.store.model_targets(id).await?;
    let current = spec_of(&row, targets).ok_or_else(not_found)?;
    let form = body.apply(&current).map_err(form_error)?;
    let spec = validate(app, &form).await?;
    let (new_row, new_targets) = rows_of(&spec);
    if !app.store.update_model(&new_row, &new_targets).await? {
        return Err(not_found());
    }
    app.invalidate(Invalidation::Catalog).await;
    Ok((spec, row.created_at))
}

/// Remove a model no agent chats with and no model falls back on.
#[utoipa::path(delete, path = "/api/admin/models/{id}", tag = "admin", params(("id" = String, Path)),
    responses((status = 204), (status = 404, description = "model_not_found"), (status = 409, description = "model_in_use")))]
async fn delete_model(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    remove_model(&app, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a model no agent chats with and no model falls back on.
pub(crate) async fn remove_model(app: &App, id: &str) -> Result<()> {
    let users = app.store.agents_using_model(id).await?;
    if users > 0 {
        return Err(Error::conflict(
            "model_in_use",
            format!("{users} agent(s) chat with this model; give them another model first."),
        ));
    }
    let falling_back = app.store.models_falling_back_on(id).await?;
    if !falling_back.is_empty() {
        return Err(Error::conflict(
            "model_in_use",
            format!(
                "The model(s) {} fall back on this model; remove it from their fallbacks first.",
                falling_back.join(", ")
            ),
        ));
    }
    if !app.store.delete_model(id).await? {
        return Err(not_found());
    }
    app.invalidate(Invalidation::Catalog).await;
    Ok(())
}
