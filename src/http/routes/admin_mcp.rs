//! Admin API for MCP servers (`/api/admin/mcp-servers`) and the call audit
//! (`GET /api/admin/mcp/calls`). Header values are taken, sealed and used
//! upstream, never shown: every answer carries `header_names` only.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::{Error, Result};
use crate::http::extract::{AdminUser, ApiJson};
use crate::mcp::audit::{self, CallFilter, Decision};
use crate::mcp::servers::{self, McpServer, Source};
use crate::mcp::store::McpServerRow;
use crate::mcp::McpGrant;
use crate::runtime::Invalidation;
use crate::store::now_ms;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_server, list_servers))
        .routes(routes!(get_server, patch_server, delete_server))
        .routes(routes!(list_calls))
}

/// The body of `POST /api/admin/mcp-servers` (and a `[[mcp_servers]]` table).
/// `PATCH` takes any of these fields but `name`.
#[derive(Deserialize, ToSchema)]
#[allow(dead_code)] // read as JSON field by field (each error names its field); this is its schema
pub struct McpServerForm {
    /// 1 to 32 of a-z 0-9 -, starting with a letter or digit.
    name: String,
    /// http(s) URL of the server's Streamable HTTP endpoint.
    url: String,
    /// `streamable_http` (the default and the only value for now).
    transport: Option<String>,
    /// 1 to 3600 (default 60): each upstream request.
    timeout_s: Option<u64>,
    /// Header name -> value, sent upstream; sealed at rest, never shown.
    #[schema(value_type = Option<Object>)]
    headers: Option<Value>,
    /// Allow-list patterns (`*` matches any run); `[]` allows none; default `["*"]`.
    tools: Option<Vec<String>>,
    /// Upstream tool name -> `read` | `write` | `execute`.
    #[schema(value_type = Option<Object>)]
    tool_classes: Option<Value>,
}

pub(crate) fn not_found() -> Error {
    Error::not_found(
        "mcp_server_not_found",
        "There is no MCP server with this name.",
    )
}

/// Checks an `mcp` grant as sent (`null`: no MCP access) against the
/// servers configured now (read from the database: an admin route, and a
/// server just added on another server counts).
pub(crate) async fn check_grant(app: &App, v: &Value) -> Result<Option<McpGrant>> {
    if v.is_null() {
        return Ok(None);
    }
    let names = app.store.mcp_server_names().await?;
    McpGrant::parse(v, |n| names.iter().any(|x| x == n))
}

/// Adds a server (409 `mcp_server_exists` when the name is taken); the API
/// and the console share it.
pub(crate) async fn add_server(app: &App, body: &Value) -> Result<McpServer> {
    let server = servers::parse_new(body, Source::Api, false, now_ms())?;
    let row = McpServerRow::seal(&server, &app.keyring)?;
    if !app.store.put_mcp_server(&row, false).await? {
        return Err(Error::conflict(
            "mcp_server_exists",
            format!("An MCP server named '{}' already exists.", server.name),
        ));
    }
    app.invalidate(Invalidation::McpServers).await;
    tracing::info!(mcp_server = %server.name, header_names = ?server.header_names(), "MCP server added");
    Ok(server)
}

/// A server as stored, header values opened (kept by a PATCH that leaves
/// `headers` out).
pub(crate) async fn load_server(app: &App, name: &str) -> Result<McpServer> {
    let row = app
        .store
        .mcp_server_row(name)
        .await?
        .ok_or_else(not_found)?;
    Ok(row.open(&app.keyring))
}

pub(crate) async fn change_server(app: &App, name: &str, body: &Value) -> Result<McpServer> {
    let current = load_server(app, name).await?;
    let server = servers::apply_patch(&current, body, now_ms())?;
    let row = McpServerRow::seal(&server, &app.keyring)?;
    if !app.store.update_mcp_server(&row).await? {
        return Err(not_found());
    }
    app.invalidate(Invalidation::McpServers).await;
    tracing::info!(mcp_server = %server.name, header_names = ?server.header_names(), "MCP server changed");
    Ok(server)
}

/// Deletes a server and removes its name from every grant (the keys, users
/// and agents holding one are dropped from every cache).
pub(crate) async fn remove_server(app: &App, name: &str) -> Result<()> {
    let changed = app
        .store
        .delete_mcp_server(name)
        .await?
        .ok_or_else(not_found)?;
    for inv in changed {
        app.invalidate(inv).await;
    }
    tracing::info!(mcp_server = %name, "MCP server deleted");
    Ok(())
}

/// Add an MCP server; its headers are sealed and never shown.
#[utoipa::path(post, path = "/api/admin/mcp-servers", tag = "admin", request_body = McpServerForm,
    responses((status = 201, description = "The server (`header_names`, never header values)"),
        (status = 400, description = "validation_error naming the field (`param`)"),
        (status = 409, description = "mcp_server_exists")))]
async fn create_server(
    State(app): State<AppState>,
    _admin: AdminUser,
    ApiJson(body): ApiJson<Value>,
) -> Result<impl IntoResponse> {
    let server = add_server(&app, &body).await?;
    Ok((StatusCode::CREATED, Json(server.view())))
}

/// Every MCP server, by name.
#[utoipa::path(get, path = "/api/admin/mcp-servers", tag = "admin",
    responses((status = 200, description = "The servers, by name")))]
async fn list_servers(State(app): State<AppState>, _admin: AdminUser) -> Result<impl IntoResponse> {
    let rows = app.store.list_mcp_server_rows().await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| r.open(&app.keyring).view())
            .collect::<Vec<_>>(),
    ))
}

/// One MCP server.
#[utoipa::path(get, path = "/api/admin/mcp-servers/{name}", tag = "admin", params(("name" = String, Path)),
    responses((status = 200, description = "The server"), (status = 404, description = "mcp_server_not_found")))]
async fn get_server(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    Ok(Json(load_server(&app, &name).await?.view()))
}

/// Change any field of an MCP server but its name; `headers` replaces them all.
#[utoipa::path(patch, path = "/api/admin/mcp-servers/{name}", tag = "admin", params(("name" = String, Path)),
    request_body = McpServerForm,
    responses((status = 200, description = "The server"), (status = 400, description = "validation_error"),
        (status = 404, description = "mcp_server_not_found")))]
async fn patch_server(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<impl IntoResponse> {
    Ok(Json(change_server(&app, &name, &body).await?.view()))
}

/// Delete an MCP server; its name leaves every grant.
#[utoipa::path(delete, path = "/api/admin/mcp-servers/{name}", tag = "admin", params(("name" = String, Path)),
    responses((status = 204), (status = 404, description = "mcp_server_not_found")))]
async fn delete_server(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    remove_server(&app, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `parse_calls_query`; this is its documentation
struct CallsQuery {
    /// RFC 3339, inclusive.
    from: Option<String>,
    /// RFC 3339, exclusive.
    to: Option<String>,
    /// A server name.
    server: Option<String>,
    /// The user's e-mail.
    user: Option<String>,
    /// An agent's address.
    agent: Option<String>,
    /// An API key id.
    api_key: Option<String>,
    /// `allowed`, `approved`, `held`, `denied` or `rate_limited`.
    decision: Option<String>,
    /// 1 to 1000 (default 100).
    limit: Option<String>,
    /// The `next` of the previous page.
    after: Option<String>,
}

/// The filters of `GET /api/admin/mcp/calls`; a bad value names itself.
/// An empty value is the same as none (a console form sends them).
pub(crate) fn parse_calls_query(raw: Option<&str>) -> Result<CallFilter> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|_| Error::validation("query", "The query string could not be read."))?;
    let mut f = CallFilter {
        limit: audit::DEFAULT_LIMIT,
        ..CallFilter::default()
    };
    for (k, v) in pairs {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        let bad = |m: &str| Error::validation(k.as_str(), format!("'{k}' {m}"));
        match k.as_str() {
            "from" | "to" => {
                let at = crate::time::parse_rfc3339(v)
                    .ok_or_else(|| bad("must be an RFC 3339 time, e.g. 2026-01-31T00:00:00Z."))?;
                if k == "from" {
                    f.from = Some(at);
                } else {
                    f.to = Some(at);
                }
            }
            "server" => {
                if !servers::is_server_name(v) {
                    return Err(bad("must be a server name (a-z 0-9 -)."));
                }
                f.server = Some(v.to_string());
            }
            "user" => {
                let email =
                    crate::users::Email::parse(v).map_err(|_| bad("must be an e-mail address."))?;
                f.user = Some(email.into_string());
            }
            "agent" => {
                let a = crate::agents::AgentAddress::parse(v)
                    .ok_or_else(|| bad("must be an agent address."))?;
                f.agent = Some(a.to_string());
            }
            "api_key" => {
                if v.len() > 64 || !v.bytes().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(bad("must be an API key id."));
                }
                f.api_key = Some(v.to_string());
            }
            "decision" => {
                f.decision = Some(Decision::parse(v).ok_or_else(|| {
                    bad("must be one of allowed, approved, held, denied, rate_limited.")
                })?);
            }
            "limit" => {
                f.limit = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=audit::MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        bad(&format!(
                            "must be a whole number from 1 to {}.",
                            audit::MAX_LIMIT
                        ))
                    })?;
            }
            "after" => {
                f.after = Some(
                    audit::parse_cursor(v)
                        .ok_or_else(|| bad("must be the 'next' of a previous page."))?,
                );
            }
            _ => {}
        }
    }
    if let (Some(from), Some(to)) = (f.from, f.to) {
        if to < from {
            return Err(Error::validation("to", "'to' must not be before 'from'."));
        }
    }
    Ok(f)
}

/// One page of audit records and the cursor of the next (`None`: last page).
pub(crate) async fn calls_page(app: &App, f: &CallFilter) -> Result<(Vec<Value>, Option<String>)> {
    let mut rows = app.store.list_mcp_calls(f).await?;
    let limit = usize::try_from(f.limit).unwrap_or(usize::MAX);
    let next = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(audit::cursor_of)
    } else {
        None
    };
    Ok((rows.iter().map(|r| r.view()).collect(), next))
}

/// The audit of MCP `tools/call`s, newest first (never arguments or results).
#[utoipa::path(get, path = "/api/admin/mcp/calls", tag = "admin", params(CallsQuery),
    responses((status = 200, description = "`{calls: [...], next: cursor|null}`, newest first"),
        (status = 400, description = "validation_error naming the bad value")))]
async fn list_calls(
    State(app): State<AppState>,
    _admin: AdminUser,
    RawQuery(raw): RawQuery,
) -> Result<impl IntoResponse> {
    let f = parse_calls_query(raw.as_deref())?;
    let (calls, next) = calls_page(&app, &f).await?;
    Ok(Json(json!({"calls": calls, "next": next})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(raw: &str) -> String {
        parse_calls_query(Some(raw))
            .expect_err("refused")
            .param
            .unwrap_or_default()
    }

    #[test]
    fn calls_query_reads_every_filter() {
        let f = parse_calls_query(Some(
            "from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&server=alpha&user=A@X.io&agent=support&api_key=abc123&decision=held&limit=1000&after=5.abc",
        ))
        .expect("valid");
        assert_eq!(f.server.as_deref(), Some("alpha"));
        assert_eq!(f.user.as_deref(), Some("a@x.io"));
        assert_eq!(f.decision, Some(Decision::Held));
        assert_eq!(f.limit, 1000);
        assert_eq!(f.after, Some((5, "abc".to_string())));
        assert!(f.from < f.to);
        let d = parse_calls_query(Some("server=&decision=")).expect("empty is none");
        assert_eq!((d.limit, d.server, d.decision), (100, None, None));
    }

    #[test]
    fn a_bad_calls_filter_names_itself() {
        assert_eq!(param("limit=0"), "limit");
        assert_eq!(param("limit=1001"), "limit");
        assert_eq!(param("limit=x"), "limit");
        assert_eq!(param("from=yesterday"), "from");
        assert_eq!(param("to=2026-13-01T00:00:00Z"), "to");
        assert_eq!(param("decision=maybe"), "decision");
        assert_eq!(param("after=garbage"), "after");
        assert_eq!(param("server=Not_A_Name"), "server");
        assert_eq!(param("user=nobody"), "user");
        assert_eq!(
            param("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z"),
            "to"
        );
    }
}
