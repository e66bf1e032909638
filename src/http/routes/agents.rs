//! Agents: the admin's create, list, read and change, and the profile an
//! agent app reads with its access token.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::{Agent, AgentPatch, NewAgent, ToolMode};
use crate::app::AppState;
use crate::auth::signins;
use crate::error::{Error, Result};
use crate::http::extract::agent::AgentAccess;
use crate::http::extract::{AdminUser, ApiJson};
use crate::runtime::Invalidation;
use crate::store::now_ms;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_agent, list_agents))
        .routes(routes!(get_agent, update_agent))
        .routes(routes!(profile))
}

fn not_found() -> Error {
    Error::not_found("agent_not_found", "There is no agent with this address.")
}

/// Create an agent.
#[utoipa::path(post, path = "/api/admin/agents", tag = "admin", request_body = NewAgent,
    responses((status = 201, description = "The agent, every field filled"),
              (status = 400, description = "validation_error or model_kind_mismatch"),
              (status = 409, description = "agent_exists")))]
async fn create_agent(
    State(app): State<AppState>,
    _admin: AdminUser,
    ApiJson(body): ApiJson<NewAgent>,
) -> Result<impl IntoResponse> {
    let agent = add_agent(&app, &body).await?;
    Ok((StatusCode::CREATED, Json(agent.view())))
}

/// List agents.
#[utoipa::path(get, path = "/api/admin/agents", tag = "admin", responses((status = 200, description = "Agents")))]
async fn list_agents(State(app): State<AppState>, _admin: AdminUser) -> Result<impl IntoResponse> {
    let rows = app.store.list_agents().await?;
    let agents = rows
        .into_iter()
        .map(|r| Agent::from_row(r).map(|a| a.view()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::internal)?;
    Ok(Json(agents))
}

/// One agent.
#[utoipa::path(get, path = "/api/admin/agents/{address}", tag = "admin", params(("address" = String, Path)),
    responses((status = 200, description = "The agent"), (status = 404, description = "agent_not_found")))]
async fn get_agent(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(address): Path<String>,
) -> Result<impl IntoResponse> {
    let agent = app.agent(&address).await?.ok_or_else(not_found)?;
    Ok(Json(agent.view()))
}

/// Change any of an agent's fields. Users a new `allowed_users` leaves out are signed out of it.
#[utoipa::path(patch, path = "/api/admin/agents/{address}", tag = "admin", request_body = AgentPatch,
    params(("address" = String, Path)),
    responses((status = 200, description = "The agent"), (status = 404, description = "agent_not_found"),
              (status = 400, description = "validation_error or model_kind_mismatch")))]
async fn update_agent(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(address): Path<String>,
    ApiJson(patch): ApiJson<AgentPatch>,
) -> Result<impl IntoResponse> {
    let agent = change_agent(&app, &address, &patch).await?;
    Ok(Json(agent.view()))
}

/// The agent's profile as this device sees it.
#[utoipa::path(get, path = "/v1/agents/{agent}/profile", tag = "agents", params(("agent" = String, Path)),
    responses((status = 200, description = "address, name, model, default_tool_mode, tool_modes, pii, allow_local_mcp, tool_contract, user, device_id, device_label"),
              (status = 401, description = "invalid_token, token_expired or sign_in_ended"),
              (status = 403, description = "agent_mismatch")))]
async fn profile(access: AgentAccess) -> impl IntoResponse {
    let a = &access.agent;
    Json(json!({
        "address": a.address.as_str(),
        "name": a.name,
        "model": a.model,
        "default_tool_mode": a.default_tool_mode.as_str(),
        "tool_modes": ToolMode::ALL.map(ToolMode::as_str),
        "pii": {
            "mode": a.pii.mode.as_str(),
            "user_choosable": a.pii.user_choosable,
            "modes": a.pii.choosable_modes(),
        },
        "allow_local_mcp": a.allow_local_mcp,
        "tool_contract": a.tool_contract,
        "user": {"id": access.user.id, "email": access.user.email},
        "device_id": access.sign_in.device_id,
        "device_label": access.sign_in.device_label,
    }))
}

/// Creates an agent (409 `agent_exists` when the address is taken); shared
/// by the admin API and the console.
pub(crate) async fn add_agent(app: &AppState, body: &NewAgent) -> Result<Agent> {
    let mut agent = body.validate(&app.catalog(), now_ms())?;
    if let Some(v) = &body.mcp {
        agent.mcp = super::admin_mcp::check_grant(app, v).await?;
    }
    if !app.store.insert_agent(&agent.to_row()).await? {
        return Err(Error::conflict(
            "agent_exists",
            "An agent with this address already exists.",
        ));
    }
    Ok(agent)
}

/// Changes an agent; users a new `allowed_users` leaves out are signed out of it.
pub(crate) async fn change_agent(
    app: &AppState,
    address: &str,
    patch: &AgentPatch,
) -> Result<Agent> {
    // Read the stored row, not the cache: the change must build on the latest.
    let row = app.store.agent(address).await?.ok_or_else(not_found)?;
    let current = Agent::from_row(row).map_err(Error::internal)?;
    let mut agent = patch.apply(&current, &app.catalog(), now_ms())?;
    match &patch.mcp {
        crate::agents::agent::Patch::Absent => {}
        crate::agents::agent::Patch::Null => agent.mcp = None,
        crate::agents::agent::Patch::Value(v) => {
            agent.mcp = super::admin_mcp::check_grant(app, v).await?
        }
    }
    if !app.store.update_agent(&agent.to_row()).await? {
        return Err(not_found());
    }
    app.invalidate(Invalidation::Agent(address.to_string()))
        .await;
    for device in signins::end_unallowed(&app.store, &agent).await? {
        app.invalidate(Invalidation::SignIn(device)).await;
    }
    Ok(agent)
}
