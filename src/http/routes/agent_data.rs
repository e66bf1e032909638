//! Agent routes that record what the app reports (manifest, events, approval
//! answers) and the admin views of it (tools, approvals, events).

use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::approvals::ApprovalState;
use crate::agents::tools::ToolStatus;
use crate::app::AppState;
use crate::error::{Error, Result};
use crate::http::extract::agent::AgentAccess;
use crate::http::extract::{read_body, AdminUser, ApiJson};
use crate::runtime::Invalidation;
use crate::store::agent_data::{ApprovalRow, DecideError, ManifestTool, ToolRow};
use crate::time::rfc3339;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(put_manifest))
        .routes(routes!(post_events))
        .routes(routes!(answer_approval))
        .routes(routes!(admin_tools))
        .routes(routes!(admin_accept_tool))
        .routes(routes!(admin_reject_tool))
        .routes(routes!(admin_events))
        .routes(routes!(admin_approvals))
        .routes(routes!(admin_decide_approval))
}

/// Report the app's manifest; says whether this agent saw the same one before.
#[utoipa::path(put, path = "/v1/agents/{agent}/manifest", tag = "agent", params(("agent" = String, Path)),
    responses((status = 200, description = "{seen_before, manifest_hash}"), (status = 400, description = "manifest_invalid, too_many_tools, too_many_context_entries"),
              (status = 413, description = "manifest_too_large")))]
async fn put_manifest(
    State(app): State<AppState>,
    access: AgentAccess,
    Path(_agent): Path<String>,
    req: Request,
) -> Result<impl IntoResponse> {
    let bytes = read_body(req).await?;
    let manifest = crate::agents::manifest::parse(&bytes)?;
    let hash = manifest.hash();
    let mut canonical = String::new();
    crate::agents::manifest::canonical_json(&manifest.to_value(), &mut canonical);
    let tools: Vec<ManifestTool> = manifest
        .tools
        .iter()
        .map(|t| ManifestTool {
            name: &t.name,
            class: t.class.as_str(),
            description: &t.description,
            parameters_hash: t.parameters_hash(),
        })
        .collect();
    let agent = access.agent.address.as_str();
    let seen = app
        .store
        .save_manifest(agent, &access.sign_in.device_id, &hash, &canonical, &tools)
        .await?;
    app.invalidate(Invalidation::Manifest(format!(
        "{agent}|{}",
        access.sign_in.device_id
    )))
    .await;
    app.invalidate(Invalidation::Tools(agent.to_string())).await;
    Ok(Json(json!({"seen_before": seen, "manifest_hash": hash})))
}

/// Report up to 100 events; stored durably before the answer, idempotent by event id per device.
#[utoipa::path(post, path = "/v1/agents/{agent}/events", tag = "agent", params(("agent" = String, Path)),
    responses((status = 202, description = "{accepted, duplicates}"), (status = 400, description = "validation_error or too_many_events")))]
async fn post_events(
    State(app): State<AppState>,
    access: AgentAccess,
    Path(_agent): Path<String>,
    req: Request,
) -> Result<impl IntoResponse> {
    let bytes = read_body(req).await?;
    let events = crate::agents::events::parse_batch(&bytes)?;
    let (accepted, duplicates) = app
        .store
        .insert_events(
            access.agent.address.as_str(),
            &access.sign_in.device_id,
            &access.user.id,
            &events,
        )
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"accepted": accepted, "duplicates": duplicates})),
    ))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct ApprovalAnswer {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

pub fn approval_view(a: &ApprovalRow, now: i64) -> Value {
    let state = ApprovalState::parse(&a.status)
        .unwrap_or(ApprovalState::Pending)
        .effective(a.expires_at, now);
    let mcp = a.source == "mcp";
    let mut v = json!({
        "id": a.id, "source": a.source, "server": a.server,
        // An MCP call has no tool call id; '' is how the table keeps "none".
        "tool_call_id": if mcp { Value::Null } else { json!(a.tool_call_id) },
        "tool": a.tool, "arguments": a.arguments,
        "status": state.as_str(), "expires_at": rfc3339(a.expires_at), "created_at": rfc3339(a.created_at),
        "device_id": a.device_id, "conversation_id": a.conversation_id,
    });
    if let Some(d) = a.decided_at {
        v["decided_at"] = json!(rfc3339(d));
    } else if mcp {
        v["decided_at"] = Value::Null;
    }
    if mcp {
        v["used_at"] = json!(a.used_at.map(rfc3339));
    }
    if let Some(r) = &a.reason {
        v["reason"] = json!(r);
    }
    v
}

/// `approve` / `deny` as the stored status; a reason of at most 1000 characters.
fn checked_answer(body: &ApprovalAnswer) -> Result<&'static str> {
    let status = match body.decision.as_str() {
        "approve" => "approved",
        "deny" => "denied",
        _ => {
            return Err(Error::validation(
                "decision",
                "'decision' must be approve or deny.",
            ))
        }
    };
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > 1000)
    {
        return Err(Error::validation(
            "reason",
            "'reason' must be at most 1000 characters.",
        ));
    }
    Ok(status)
}

/// The answer to a decision, the same on the user's and the admin's route.
fn decided(res: std::result::Result<ApprovalRow, DecideError>, whose: &str) -> Result<Json<Value>> {
    match res {
        Ok(row) => Ok(Json(approval_view(&row, crate::store::now_ms()))),
        Err(DecideError::NotFound) => Err(Error::not_found(
            "approval_not_found",
            format!("There is no such approval {whose}."),
        )),
        Err(DecideError::AlreadyDecided) => Err(Error::conflict(
            "approval_already_decided",
            "This approval was answered already.",
        )),
        Err(DecideError::Expired) => Err(Error::conflict(
            "approval_expired",
            "This approval has expired; the call counts as denied.",
        )),
    }
}

/// Answer an approval the server asked for.
#[utoipa::path(post, path = "/v1/agents/{agent}/approvals/{id}", tag = "agent", request_body = ApprovalAnswer,
    params(("agent" = String, Path), ("id" = String, Path)),
    responses((status = 200, description = "The approval, decided"), (status = 404, description = "approval_not_found"),
              (status = 409, description = "approval_already_decided or approval_expired")))]
async fn answer_approval(
    State(app): State<AppState>,
    access: AgentAccess,
    Path((_agent, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ApprovalAnswer>,
) -> Result<impl IntoResponse> {
    let status = checked_answer(&body)?;
    let res = app
        .store
        .decide_approval(
            access.agent.address.as_str(),
            Some(&access.user.id),
            &id,
            status,
            body.reason.as_deref(),
        )
        .await?;
    decided(res, "for you")
}

/// An admin decides an approval of the agent, whichever user it asked (chat and MCP alike).
#[utoipa::path(post, path = "/api/admin/agents/{address}/approvals/{id}", tag = "admin", request_body = ApprovalAnswer,
    params(("address" = String, Path), ("id" = String, Path)),
    responses((status = 200, description = "The approval, decided"), (status = 404, description = "agent_not_found or approval_not_found"),
              (status = 409, description = "approval_already_decided or approval_expired")))]
async fn admin_decide_approval(
    State(app): State<AppState>,
    _a: AdminUser,
    Path((address, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ApprovalAnswer>,
) -> Result<impl IntoResponse> {
    let status = checked_answer(&body)?;
    admin_decide(&app, &address, &id, status, body.reason.as_deref()).await
}

/// An admin's decision (`approved` / `denied`) on any approval of the agent.
pub(crate) async fn admin_decide(
    app: &AppState,
    address: &str,
    id: &str,
    status: &'static str,
    reason: Option<&str>,
) -> Result<Json<Value>> {
    agent_or_404(app, address).await?;
    let res = app
        .store
        .decide_approval(address, None, id, status, reason)
        .await?;
    decided(res, "on this agent")
}

pub(crate) fn tool_view(t: &ToolRow, contract: &[String]) -> Value {
    let status = if contract.iter().any(|c| c == &t.name) {
        "contract"
    } else {
        t.status.as_str()
    };
    json!({"name": t.name, "source": t.source, "server": t.server, "class": t.class, "description": t.description,
           "status": status, "first_seen_at": rfc3339(t.first_seen_at)})
}

async fn agent_or_404(app: &AppState, address: &str) -> Result<Arc<crate::agents::Agent>> {
    app.agent(address)
        .await?
        .ok_or_else(|| Error::not_found("agent_not_found", "There is no agent with this address."))
}

/// The agent's tools: in its contract, accepted, held or rejected.
#[utoipa::path(get, path = "/api/admin/agents/{address}/tools", tag = "admin", params(("address" = String, Path)),
    responses((status = 200, description = "[{name, source, server, class, description, status, first_seen_at}]; source device or mcp")))]
async fn admin_tools(
    State(app): State<AppState>,
    _a: AdminUser,
    Path(address): Path<String>,
) -> Result<impl IntoResponse> {
    let agent = agent_or_404(&app, &address).await?;
    let mut rows = app.store.list_tools(&address).await?;
    // Contract tools are listed even before any app reported them.
    for name in &agent.tool_contract {
        if !rows.iter().any(|r| &r.name == name) {
            rows.push(ToolRow::contract_only(&address, name, agent.created_at));
        }
    }
    Ok(Json(
        rows.iter()
            .map(|t| tool_view(t, &agent.tool_contract))
            .collect::<Vec<_>>(),
    ))
}

pub(crate) async fn decide_tool(
    app: &AppState,
    address: &str,
    name: &str,
    status: ToolStatus,
) -> Result<Json<Value>> {
    let agent = agent_or_404(app, address).await?;
    if !crate::wire::is_tool_name(name) {
        return Err(Error::validation(
            "name",
            "A tool name is 1 to 64 of A-Za-z0-9_-.",
        ));
    }
    let row = app
        .store
        .decide_tool(address, name, status.as_str())
        .await?;
    app.invalidate(Invalidation::Tools(address.to_string()))
        .await;
    Ok(Json(tool_view(&row, &agent.tool_contract)))
}

/// Accept a held tool: it reaches the upstream from now on.
#[utoipa::path(post, path = "/api/admin/agents/{address}/tools/{name}/accept", tag = "admin",
    params(("address" = String, Path), ("name" = String, Path)), responses((status = 200, description = "The tool")))]
async fn admin_accept_tool(
    State(app): State<AppState>,
    _a: AdminUser,
    Path((address, name)): Path<(String, String)>,
) -> Result<Json<Value>> {
    decide_tool(&app, &address, &name, ToolStatus::Accepted).await
}

/// Reject a tool: it stays held for good.
#[utoipa::path(post, path = "/api/admin/agents/{address}/tools/{name}/reject", tag = "admin",
    params(("address" = String, Path), ("name" = String, Path)), responses((status = 200, description = "The tool")))]
async fn admin_reject_tool(
    State(app): State<AppState>,
    _a: AdminUser,
    Path((address, name)): Path<(String, String)>,
) -> Result<Json<Value>> {
    decide_tool(&app, &address, &name, ToolStatus::Rejected).await
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    device_id: Option<String>,
    after: Option<String>,
    limit: Option<String>,
}

/// The agent's events, oldest first, a page at a time (`next` is the cursor for `after`).
#[utoipa::path(get, path = "/api/admin/agents/{address}/events", tag = "admin", params(("address" = String, Path), EventsQuery),
    responses((status = 200, description = "{events, next}")))]
async fn admin_events(
    State(app): State<AppState>,
    _a: AdminUser,
    Path(address): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<impl IntoResponse> {
    agent_or_404(&app, &address).await?;
    let limit: i64 = match q.limit.as_deref() {
        None | Some("") => 100,
        Some(s) => s
            .parse()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| Error::validation("limit", "'limit' must be 1 to 1000."))?,
    };
    let after: i64 =
        match q.after.as_deref() {
            None | Some("") => 0,
            Some(s) => s.parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
                Error::validation("after", "'after' must be a cursor from 'next'.")
            })?,
        };
    let mut rows = app
        .store
        .list_events(&address, q.device_id.as_deref(), after, limit + 1)
        .await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more {
        rows.last()
            .and_then(|r| r.commit_seq)
            .map(|n| n.to_string())
    } else {
        None
    };
    let events: Vec<Value> = rows
        .iter()
        .map(|e| {
            json!({
                "cursor": e.commit_seq.map(|n| n.to_string()), "id": e.event_id, "type": e.kind, "time": e.time, "device_id": e.device_id, "user_id": e.user_id,
                "conversation_id": e.conversation_id, "turn_id": e.turn_id,
                "data": e.data.as_deref().and_then(|d| serde_json::from_str::<Value>(d).ok()),
                "received_at": rfc3339(e.received_at),
            })
        })
        .collect();
    Ok(Json(json!({"events": events, "next": next})))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ApprovalsQuery {
    status: Option<String>,
}

/// The agent's approvals, newest first, optionally of one status.
#[utoipa::path(get, path = "/api/admin/agents/{address}/approvals", tag = "admin", params(("address" = String, Path), ApprovalsQuery),
    responses((status = 200, description = "[approval]")))]
async fn admin_approvals(
    State(app): State<AppState>,
    _a: AdminUser,
    Path(address): Path<String>,
    Query(q): Query<ApprovalsQuery>,
) -> Result<impl IntoResponse> {
    agent_or_404(&app, &address).await?;
    let want = match q.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(ApprovalState::parse(s).ok_or_else(|| {
            Error::validation(
                "status",
                "'status' must be pending, approved, denied or expired.",
            )
        })?),
    };
    let now = crate::store::now_ms();
    let rows = app.store.list_approvals(&address).await?;
    let views: Vec<Value> = rows
        .iter()
        .filter(|a| {
            want.is_none_or(|w| {
                ApprovalState::parse(&a.status)
                    .unwrap_or(ApprovalState::Pending)
                    .effective(a.expires_at, now)
                    == w
            })
        })
        .map(|a| approval_view(a, now))
        .collect();
    Ok(Json(views))
}
