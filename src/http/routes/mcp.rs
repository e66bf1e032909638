//! `POST`/`DELETE`/`GET /mcp` and `/mcp/{server}` (MCP's Streamable HTTP
//! transport, one `application/json` answer per request), and
//! `GET /api/admin/mcp-servers/{name}/tools`. Thin: the checks of the
//! contract's "Errors on /mcp" table in its order, then the gateway
//! (`crate::mcp::gateway`) decides.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::{Error, ErrorKind, Result};
use crate::http::edge::access::AccessNote;
use crate::http::extract::agent::AgentAccess;
use crate::http::extract::{bearer, read_body, AdminUser, ApiKeyAuth};
use crate::mcp::agent::{
    tool_mode, AgentCaller, AgentSide, InvalidToolMode, HELD_TOOLS_HEADER, TOOL_MODE_HEADER,
};
use crate::mcp::gateway::{AgentContext, AgentRules, CallResult, Caller, RpcError};
use crate::mcp::protocol::{self, Incoming};
use crate::mcp::session::{self, Session};
use crate::mcp::upstream::Failure;
use crate::mcp::McpServer;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(post_all, delete_all, get_all))
        .routes(routes!(post_server, delete_server, get_server))
        .routes(routes!(admin_server_tools))
}

/// The gateway of every server the caller may use (tools named `{server}__{tool}`).
#[utoipa::path(post, path = "/mcp", tag = "mcp",
    request_body(content = Object, content_type = "application/json", description = "One JSON-RPC 2.0 message (MCP). `Accept` must list `application/json` and `text/event-stream`; `Mcp-Session-Id` on all but `initialize`."),
    responses((status = 200, description = "One JSON-RPC message (`application/json`); `initialize` also sets `Mcp-Session-Id`", body = Object),
              (status = 202, description = "A notification or response was accepted"),
              (status = 400, description = "parse_error, invalid_request, unsupported_protocol_version, invalid_header, session_required"),
              (status = 401, description = "invalid_api_key, token_expired, sign_in_ended"),
              (status = 403, description = "origin_not_allowed"),
              (status = 404, description = "session_not_found"),
              (status = 406, description = "not_acceptable"),
              (status = 413, description = "payload_too_large"),
              (status = 415, description = "unsupported_media_type")))]
async fn post_all(State(app): State<AppState>, req: Request) -> Response {
    post(&app, None, req).await
}

/// One server's gateway (tool names as the upstream gives them, sanitised).
#[utoipa::path(post, path = "/mcp/{server}", tag = "mcp", params(("server" = String, Path)),
    request_body(content = Object, content_type = "application/json", description = "One JSON-RPC 2.0 message (MCP)."),
    responses((status = 200, description = "One JSON-RPC message (`application/json`)", body = Object),
              (status = 202, description = "A notification or response was accepted"),
              (status = 400, description = "As on POST /mcp"),
              (status = 401, description = "invalid_api_key, token_expired, sign_in_ended"),
              (status = 404, description = "mcp_server_not_found, session_not_found")))]
async fn post_server(
    State(app): State<AppState>,
    Path(server): Path<String>,
    req: Request,
) -> Response {
    post(&app, Some(server), req).await
}

/// Ends the session named by `Mcp-Session-Id` on every server.
#[utoipa::path(delete, path = "/mcp", tag = "mcp",
    responses((status = 204, description = "Ended"), (status = 400, description = "session_required"),
              (status = 401, description = "invalid_api_key"), (status = 404, description = "session_not_found")))]
async fn delete_all(State(app): State<AppState>, req: Request) -> Response {
    delete(&app, None, req).await
}

/// Ends the session named by `Mcp-Session-Id` on every server.
#[utoipa::path(delete, path = "/mcp/{server}", tag = "mcp", params(("server" = String, Path)),
    responses((status = 204, description = "Ended"), (status = 400, description = "session_required"),
              (status = 404, description = "mcp_server_not_found, session_not_found")))]
async fn delete_server(
    State(app): State<AppState>,
    Path(server): Path<String>,
    req: Request,
) -> Response {
    delete(&app, Some(server), req).await
}

/// No server-sent stream in phase 1: 405 with `Allow: POST, DELETE`.
#[utoipa::path(get, path = "/mcp", tag = "mcp", responses((status = 405, description = "Allow: POST, DELETE; a JSON-RPC error", body = Object)))]
async fn get_all() -> Response {
    not_allowed()
}

/// No server-sent stream in phase 1: 405 with `Allow: POST, DELETE`.
#[utoipa::path(get, path = "/mcp/{server}", tag = "mcp", params(("server" = String, Path)),
    responses((status = 405, description = "Allow: POST, DELETE; a JSON-RPC error", body = Object)))]
async fn get_server() -> Response {
    not_allowed()
}

/// The upstream's tools now, with their exposed names, classes and whether
/// the server's allow-list lets them through.
#[utoipa::path(get, path = "/api/admin/mcp-servers/{name}/tools", tag = "admin", params(("name" = String, Path)),
    responses((status = 200, description = "`[{name, exposed_name, description, annotations, class, class_source, allowed}]`", body = Vec<Object>),
              (status = 404, description = "mcp_server_not_found"),
              (status = 502, description = "mcp_upstream_unavailable"),
              (status = 504, description = "mcp_upstream_timeout")))]
async fn admin_server_tools(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
) -> Result<Json<Vec<Value>>> {
    server_tools(&app, &name).await.map(Json)
}

/// A server's tools as its upstream lists them now, with their exposed
/// names, classes and the allow-list's verdict (the admin route's answer;
/// the console's server page shows the same).
pub(crate) async fn server_tools(app: &App, name: &str) -> Result<Vec<Value>> {
    let snapshot = app.mcp_servers.snapshot();
    let server = snapshot.get(name).cloned().ok_or_else(|| {
        Error::not_found(
            "mcp_server_not_found",
            "There is no MCP server of this name.",
        )
    })?;
    match app.mcp_gateway.admin_tools(&server).await {
        Ok(tools) => Ok(tools),
        Err(Failure::Timeout) => Err(Error::new(
            ErrorKind::GatewayTimeout,
            "mcp_upstream_timeout",
            format!("upstream timed out: {name}"),
        )),
        Err(_) => Err(Error::new(
            ErrorKind::BadGateway,
            "mcp_upstream_unavailable",
            format!("upstream unavailable: {name}"),
        )),
    }
}

/// An HTTP-level refusal: the JSON-RPC error body of the contract.
struct Refusal {
    status: StatusCode,
    code: i64,
    data_code: String,
    message: String,
    id: Value,
}

fn refuse(status: u16, code: i64, data_code: &str, message: impl Into<String>) -> Refusal {
    Refusal {
        status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        code,
        data_code: data_code.to_string(),
        message: message.into(),
        id: Value::Null,
    }
}

impl Refusal {
    fn with_id(mut self, id: &Value) -> Self {
        self.id = id.clone();
        self
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({"jsonrpc": "2.0", "id": self.id,
            "error": {"code": self.code, "message": self.message, "data": {"code": self.data_code}}});
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// A credential error as the table has it: 401 `invalid_api_key` but for
/// an agent token's `token_expired` / `sign_in_ended`; a failure of ours
/// keeps its status.
fn auth_refusal(e: Error) -> Refusal {
    if e.kind == ErrorKind::Unauthenticated {
        let code = match e.code.as_ref() {
            c @ ("token_expired" | "sign_in_ended") => c,
            _ => "invalid_api_key",
        };
        return refuse(401, -32001, code, e.message);
    }
    refuse(e.status(), -32603, &e.code, e.message)
}

fn not_allowed() -> Response {
    let mut resp = refuse(
        405,
        -32600,
        "method_not_allowed",
        "Use POST for messages and DELETE to end a session; there is no server-sent stream.",
    )
    .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    resp
}

/// Who calls: an API key, or an agent access token (login tokens are refused).
async fn authenticate(parts: &mut Parts, app: &AppState) -> std::result::Result<Caller, Refusal> {
    let Some(token) = bearer(parts) else {
        return Err(refuse(
            401,
            -32001,
            "invalid_api_key",
            "Send an API key or an agent access token as Authorization: Bearer <token>.",
        ));
    };
    if token.starts_with("gtk_") {
        let ApiKeyAuth { key, user } = ApiKeyAuth::from_request_parts(parts, app)
            .await
            .map_err(auth_refusal)?;
        return Ok(Caller::ApiKey { key, user });
    }
    let a = AgentAccess::from_request_parts(parts, app)
        .await
        .map_err(auth_refusal)?;
    let mode = a.agent.default_tool_mode;
    Ok(Caller::Agent(AgentContext {
        user: a.user,
        sign_in: a.sign_in,
        agent: a.agent,
        mode,
    }))
}

/// The checks every method shares, in the table's order: credential,
/// `Origin`, the route's server.
async fn admit(
    app: &AppState,
    route_server: Option<&str>,
    parts: &mut Parts,
) -> std::result::Result<(Caller, Option<Arc<McpServer>>), Refusal> {
    let caller = authenticate(parts, app).await?;
    if !protocol::origin_allowed(
        header_str(&parts.headers, header::ORIGIN.as_str()),
        header_str(&parts.headers, header::HOST.as_str()),
        &app.public_url,
    ) {
        return Err(refuse(
            403,
            -32600,
            "origin_not_allowed",
            "This Origin may not use the gateway.",
        ));
    }
    let server = match route_server {
        None => None,
        Some(name) => {
            let snapshot = app.mcp_servers.snapshot();
            match snapshot.get(name) {
                Some(s) if caller.grants().server_granted(&s.name) => Some(Arc::clone(s)),
                _ => {
                    return Err(refuse(
                        404,
                        -32600,
                        "mcp_server_not_found",
                        format!("There is no MCP server '{name}' for this caller."),
                    ))
                }
            }
        }
    };
    Ok((caller, server))
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The session named by `Mcp-Session-Id`: 400 without one, 404 when it is
/// not a live session of this caller on this route.
fn session_of(
    app: &App,
    headers: &HeaderMap,
    caller: &Caller,
    route: &str,
    id: &Value,
) -> std::result::Result<Session, Refusal> {
    let Some(raw) = headers.get(crate::mcp::upstream::SESSION_HEADER) else {
        return Err(refuse(
            400,
            -32600,
            "session_required",
            "Send the Mcp-Session-Id that initialize answered.",
        )
        .with_id(id));
    };
    let not_found = || {
        refuse(
            404,
            -32600,
            "session_not_found",
            "This session is unknown or has ended; initialize a new one.",
        )
        .with_id(id)
    };
    let s = raw
        .to_str()
        .ok()
        .and_then(|v| app.mcp_gateway.sealer.open(v))
        .ok_or_else(not_found)?;
    session::check(
        &s,
        &caller.session_caller(),
        route,
        crate::store::now_ms(),
        app.mcp_gateway.ttl_s,
        &app.mcp_gateway.ended,
    )
    .map_err(|_| not_found())?;
    Ok(s)
}

fn note(parts: &Parts, f: impl FnOnce(&mut crate::http::edge::access::AccessFields)) {
    AccessNote::note(&parts.extensions, f);
}

async fn post(app: &AppState, route_server: Option<String>, req: Request) -> Response {
    match post_inner(app, route_server, req).await {
        Ok(r) => r,
        Err(r) => r.into_response(),
    }
}

async fn post_inner(
    app: &AppState,
    route_server: Option<String>,
    req: Request,
) -> std::result::Result<Response, Refusal> {
    let (mut parts, body) = req.into_parts();
    let (mut caller, server) = admit(app, route_server.as_deref(), &mut parts).await?;
    if !protocol::accepts_both(&parts.headers) {
        return Err(refuse(
            406,
            -32600,
            "not_acceptable",
            "Accept must list both application/json and text/event-stream.",
        ));
    }
    if !protocol::is_json_content(header_str(&parts.headers, header::CONTENT_TYPE.as_str())) {
        return Err(refuse(
            415,
            -32600,
            "unsupported_media_type",
            "Content-Type must be application/json.",
        ));
    }
    let headers = parts.headers.clone();
    let bytes = read_body(Request::from_parts(parts.clone(), body))
        .await
        .map_err(|e| match e.kind {
            ErrorKind::TooLarge => refuse(
                413,
                -32600,
                "payload_too_large",
                "The body is larger than 1 MiB (1,048,576 bytes).",
            ),
            _ => refuse(e.status(), -32600, &e.code, e.message),
        })?;
    let msg = protocol::parse(&bytes)
        .map_err(|(code, data_code, message)| refuse(400, code, data_code, message))?;
    let id = msg.id().cloned().unwrap_or(Value::Null);
    if let Some(v) = header_str(&headers, crate::mcp::upstream::VERSION_HEADER) {
        if !protocol::is_supported_version(v) {
            return Err(refuse(
                400,
                -32600,
                "unsupported_protocol_version",
                format!("MCP-Protocol-Version '{v}' is not supported; use one of 2025-03-26, 2025-06-18, 2025-11-25."),
            )
            .with_id(&id));
        }
    }
    if let Caller::Agent(cx) = &mut caller {
        let header = headers.get(TOOL_MODE_HEADER).map(|v| v.as_bytes());
        cx.mode = tool_mode(header, cx.agent.default_tool_mode).map_err(|_| {
            refuse(400, -32600, "invalid_header", InvalidToolMode::MESSAGE).with_id(&id)
        })?;
    }
    let route = route_server.clone().unwrap_or_default();
    note(&parts, |f| f.mcp_method = msg.method().map(str::to_string));
    let snapshot = app.mcp_servers.snapshot();
    let servers: Vec<Arc<McpServer>> = match &server {
        Some(s) => vec![Arc::clone(s)],
        None => {
            let grants = caller.grants();
            snapshot.granted(&grants).cloned().collect()
        }
    };

    if let Incoming::Request { method, params, .. } = &msg {
        if method == "initialize" {
            let version = protocol::answered_version(params.as_ref());
            let Some(sid) = app
                .mcp_gateway
                .initialize(&servers, &caller, &route, version, crate::store::now_ms())
                .await
            else {
                return Err(refuse(
                    500,
                    -32603,
                    "internal_error",
                    "The session could not be sealed.",
                )
                .with_id(&id));
            };
            let result = json!({"protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "gatehouse", "version": env!("CARGO_PKG_VERSION")}});
            let mut resp = answer(&id, result);
            if let Ok(v) = HeaderValue::from_str(&sid) {
                resp.headers_mut()
                    .insert(crate::mcp::upstream::SESSION_HEADER, v);
            }
            return Ok(resp);
        }
    }
    let session = session_of(app, &headers, &caller, &route, &id)?;
    // The agent's rules, loaded once for this request (API keys have none).
    let agent_caller = match &caller {
        Caller::Agent(cx) => Some(AgentCaller {
            agent: Arc::clone(&cx.agent),
            user_id: cx.user.id.clone(),
            device_id: cx.sign_in.device_id.clone(),
            mode: cx.mode,
        }),
        Caller::ApiKey { .. } => None,
    };
    let mut agent_side = match &agent_caller {
        Some(ac) if matches!(msg.method(), Some("tools/list" | "tools/call")) => Some(
            AgentSide::load(&app.agents, &app.store, app.settings.approval_ttl, ac)
                .await
                .map_err(|e| refuse(e.status(), -32603, &e.code, e.message).with_id(&id))?,
        ),
        _ => None,
    };
    let (method, params) = match msg {
        Incoming::Notification { method, params } => {
            if method == "notifications/cancelled" {
                // Off the answer's path: it may go to several upstreams.
                let app = Arc::clone(app);
                tokio::spawn(async move {
                    app.mcp_gateway
                        .cancel(&snapshot, &servers, &session, params.as_ref())
                        .await;
                });
            }
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        Incoming::Response => return Ok(StatusCode::ACCEPTED.into_response()),
        Incoming::Request { method, params, .. } => (method, params),
    };
    let resp = match method.as_str() {
        "ping" => answer(&id, json!({})),
        "prompts/list" => answer(&id, json!({"prompts": []})),
        "resources/list" => answer(&id, json!({"resources": []})),
        "resources/templates/list" => answer(&id, json!({"resourceTemplates": []})),
        "tools/list" => {
            let rules: Option<&mut (dyn AgentRules + '_)> = match agent_side.as_mut() {
                Some(side) => Some(side),
                None => None,
            };
            let (tools, held) = app
                .mcp_gateway
                .list(&servers, &caller, rules, route_server.as_deref(), &session)
                .await
                .map_err(|e| refuse(e.status(), -32603, &e.code, e.message).with_id(&id))?;
            let mut resp = answer(&id, json!({"tools": tools}));
            if !held.is_empty() {
                if let Ok(v) = HeaderValue::from_str(&held.join(",")) {
                    resp.headers_mut().insert(HELD_TOOLS_HEADER, v);
                }
            }
            resp
        }
        "tools/call" => {
            let request_id = header_str(&headers, "x-request-id").map(str::to_string);
            let rules: Option<&mut (dyn AgentRules + '_)> = match agent_side.as_mut() {
                Some(side) => Some(side),
                None => None,
            };
            let (result, call_note) = app
                .mcp_gateway
                .call(
                    &app.limiter,
                    &snapshot,
                    &caller,
                    rules,
                    route_server.as_deref(),
                    &session,
                    params.as_ref(),
                    &id,
                    request_id,
                )
                .await;
            if let Some(n) = call_note {
                note(&parts, |f| {
                    f.mcp_server = n.server;
                    f.mcp_tool = Some(n.exposed);
                    f.mcp_decision = Some(n.decision.as_str());
                });
            }
            match result {
                CallResult::Result(raw) => raw_answer(&id, &raw),
                CallResult::Local(v) => answer(&id, v),
                CallResult::Upstream(e) => {
                    let e = serde_json::to_value(&e).unwrap_or(Value::Null);
                    error_answer(&id, e, None)
                }
                CallResult::Error(e) => error_answer(&id, e.to_json(), e.retry_after),
            }
        }
        _ => error_answer(
            &id,
            RpcError {
                code: -32601,
                message: format!("Method not found: {method}"),
                data: None,
                retry_after: None,
            }
            .to_json(),
            None,
        ),
    };
    Ok(resp)
}

fn json_response(body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn answer(id: &Value, result: Value) -> Response {
    json_response(
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .unwrap_or_default(),
    )
}

/// A result passed on as the upstream sent it (not parsed into a tree).
fn raw_answer(id: &Value, raw: &serde_json::value::RawValue) -> Response {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".into());
    let mut out = Vec::with_capacity(raw.get().len() + id.len() + 32);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(raw.get().as_bytes());
    out.push(b'}');
    json_response(out)
}

fn error_answer(id: &Value, error: Value, retry_after: Option<u64>) -> Response {
    let mut resp = json_response(
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
            .unwrap_or_default(),
    );
    if let Some(s) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

async fn delete(app: &AppState, route_server: Option<String>, req: Request) -> Response {
    let (mut parts, _body) = req.into_parts();
    let result = async {
        let (caller, _) = admit(app, route_server.as_deref(), &mut parts).await?;
        let route = route_server.clone().unwrap_or_default();
        let session = session_of(app, &parts.headers, &caller, &route, &Value::Null)?;
        let expires = session.expires_at(app.mcp_gateway.ttl_s);
        app.mcp_gateway.ended.insert(session.id_hash(), expires);
        if let Err(e) = app.store.end_mcp_session(&session.id_hash(), expires).await {
            tracing::warn!(error = %e, "recording an ended MCP session failed");
            return Err(refuse(
                503,
                -32603,
                "database_unavailable",
                "The session could not be ended; try again.",
            ));
        }
        let snapshot = app.mcp_servers.snapshot();
        app.mcp_gateway.end_upstreams(&snapshot, &session).await;
        Ok::<_, Refusal>(StatusCode::NO_CONTENT.into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}
