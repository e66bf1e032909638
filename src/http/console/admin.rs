//! Administrators' pages: overview, users, providers and models, agents (and
//! their tools, approvals, events, sign-ins), every sign-in, usage.

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Value};

use super::charts;
use super::forms::{admin_only, body_of, list_field, redirect, DoneQuery};
use super::guard::{ConsoleAdmin, ConsoleError, ConsoleUser, Out, Posted};
use super::layout::{button_form, csrf, done_note, enc, opt_when, page, when};
use super::user::sign_in_page;
use crate::agents::approvals::ApprovalState;
use crate::agents::tools::ToolStatus;
use crate::agents::{Agent, AgentPatch, NewAgent};
use crate::app::AppState;
use crate::auth::accounts;
use crate::auth::signins::{self, EndReason};
use crate::store::now_ms;
use crate::store::signins::{SignInFilter, SignInRow};
use crate::store::usage::GroupBy;

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

#[derive(Deserialize, Default)]
pub struct RangeQuery {
    range: Option<String>,
}

/// What a fresh install still lacks before a client can use it.
struct FirstRun {
    provider: bool,
    model: bool,
    key: bool,
}

impl FirstRun {
    fn complete(&self) -> bool {
        self.provider && self.model && self.key
    }
}

/// The address clients use for `/v1`, as this request reached the server
/// (the proxy's `X-Forwarded-Host` first).
fn v1_address(headers: &axum::http::HeaderMap) -> String {
    let host = ["x-forwarded-host", "host"].iter().find_map(|n| {
        let v = headers.get(*n)?.to_str().ok()?.split(',').next()?.trim();
        (!v.is_empty()).then_some(v)
    });
    match host {
        Some(h) => {
            let scheme = if super::guard::came_over_https(headers) {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{h}/v1")
        }
        None => "/v1".to_string(),
    }
}

/// The next steps on a fresh install: each done one is marked so.
fn first_steps(run: &FirstRun, v1: &str) -> Markup {
    let state = |done: bool| if done { "done" } else { "todo" };
    html! {
        section.first-run {
            h2 { "Get started" }
            p { "No client can use Gatehouse yet. The next steps:" }
            ol {
                li class=(state(run.provider)) {
                    a href="/console/admin/models#providers" { "Add a provider" }
                    ": the server your models run on (OpenAI-compatible such as vLLM or OpenAI, TEI, or Cohere), with its base URL and key."
                }
                li class=(state(run.model)) {
                    a href="/console/admin/models#new-model" { "Add a model" }
                    ": the name clients ask for, on that provider (chat, embeddings or scoring)."
                }
                li class=(state(run.key)) {
                    a href="/console/keys" { "Create an API key" }
                    ": it is shown once; give it to the client."
                }
                li {
                    "Point a client at " code { (v1) } " with the key, as it would talk to OpenAI:"
                    pre { code { "from openai import OpenAI\nclient = OpenAI(base_url=\"" (v1) "\", api_key=\"<the key>\")" } }
                    "Every route and its fields: "
                    a href="/openapi.json" { "the API reference" }
                    " (OpenAPI); the guides are in the repository's " code { "docs/" } " ("
                    code { "models.md" } " for the model routes)."
                }
            }
        }
    }
}

/// `/console/`: the overview for admins; other users go to their keys.
pub async fn home(
    State(app): State<AppState>,
    user: ConsoleUser,
    headers: axum::http::HeaderMap,
    Query(q): Query<RangeQuery>,
) -> Out {
    if !user.is_admin() {
        return redirect("/console/keys");
    }
    let (span, bucket, label) = match q.range.as_deref() {
        Some("7d") => (7 * DAY, 6 * HOUR, "last 7 days"),
        Some("30d") => (30 * DAY, DAY, "last 30 days"),
        _ => (DAY, HOUR, "last 24 hours"),
    };
    let now = now_ms();
    let from = (now - span).div_euclid(bucket) * bucket + bucket;
    let count = ((now - from) / bucket + 1) as usize;
    let points = app
        .store
        .usage_series(from, from + count as i64 * bucket, bucket)
        .await?;
    let series = |f: fn(&crate::store::usage::UsagePoint) -> i64| {
        charts::dense(
            &points.iter().map(|p| (p.bucket, f(p))).collect::<Vec<_>>(),
            count,
        )
    };
    let requests = series(|p| p.requests);
    let errors = series(|p| p.errors);
    let tokens = series(|p| p.tokens);
    let latency = series(|p| p.avg_latency_ms);
    let agents = app.store.list_agents().await?.len();
    let users = app.store.list_users().await?.len();
    let live = app
        .store
        .list_sign_ins(
            &SignInFilter {
                live_only: true,
                ..Default::default()
            },
            None,
            1001,
            now,
        )
        .await?
        .len();
    // What waits for an administrator: held tools (not in a contract) and open approvals.
    let mut held = Vec::new();
    for (agent, tool) in app.store.held_tools(200).await? {
        if let Some(a) = app.agent(&agent).await? {
            // An empty contract or local MCP holds nothing.
            if !a.tool_contract.is_empty() && !a.tool_contract.contains(&tool) && !a.allow_local_mcp
            {
                held.push((agent, tool));
            }
        }
    }
    let open = app.store.open_approvals(now).await?;
    let resting = super::models::unhealthy_targets(&app).await?;
    let catalog = app.catalog();
    let first_run = FirstRun {
        provider: !catalog.providers.is_empty(),
        model: !catalog.models.is_empty(),
        key: app.store.any_api_key().await?,
    };
    let empty = if requests.iter().any(|n| *n > 0) {
        None
    } else if app.store.any_usage_record().await? {
        Some(format!("No requests in the {label}."))
    } else {
        Some("No requests yet.".to_string())
    };
    let empty = empty.as_deref();
    let body = html! {
        h1 { "Overview" }
        @if !first_run.complete() { (first_steps(&first_run, &v1_address(&headers))) }
        @if !held.is_empty() || !open.is_empty() || !resting.is_empty() {
            section.attention {
                h2 { "Needs attention" }
                ul {
                    @for (agent, tool) in held.iter().take(20) {
                        li { "Tool " code { (tool) } " of " a href=(format!("/console/admin/agents/{}", enc(agent))) { (agent) } " is held: accept or reject it." }
                    }
                    @if held.len() > 20 { li { (held.len() - 20) " more held tools." } }
                    @for (agent, n) in &open {
                        li { (n) " open approval(s) for " a href=(format!("/console/admin/agents/{}?approvals=pending", enc(agent))) { (agent) } "." }
                    }
                    @for (model, target, state) in resting.iter().take(20) {
                        li.target { "Target " code { (target) } " of model " a href=(format!("/console/admin/models/{}", enc(model))) { (model) } ": " (state) "." }
                    }
                }
            }
        }
        p.ranges {
            "Show: "
            a href="/console/?range=24h" { "24 hours" } " · "
            a href="/console/?range=7d" { "7 days" } " · "
            a href="/console/?range=30d" { "30 days" }
        }
        ul.stats {
            li { strong { (users) } " users" }
            li { strong { (agents) } " agents" }
            li { strong { @if live > 1000 { "1000+" } @else { (live) } } " live sign-ins" }
            li { strong { (requests.iter().sum::<i64>()) } " requests, " (label) }
        }
        div.charts {
            (charts::over_time("Requests and errors", "requests", &requests, Some(("errors", &errors)), from, bucket, empty))
            (charts::over_time("Tokens (prompt + completion)", "tokens", &tokens, None, from, bucket, empty))
            (charts::over_time("Average latency (ms)", "ms", &latency, None, from, bucket, empty))
        }
    };
    Ok(page(&user, "Overview", "/console/", body))
}

pub async fn users(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<DoneQuery>,
) -> Out {
    let rows = app.store.list_users().await?;
    let me = user.session.user.id.clone();
    let body = html! {
        h1 { "Users" }
        (done_note(q.done.as_deref()))
        table {
            thead { tr { th { "E-mail" } th { "Role" } th { "State" } th { "Created" } th { "Limits" } th { "Change" } } }
            tbody {
                @for u in &rows {
                    @let action = format!("/console/admin/users/{}", enc(&u.id));
                    tr {
                        td { (u.email) }
                        td { @if u.admin() { "admin" } @else { "user" } }
                        td { @if u.active() { "active" } @else { span.bad { "disabled" } } }
                        td { (when(u.created_at)) }
                        td.limits {
                            (super::limits::summary(&crate::limits::Limits::from_db_or_closed(u.limits.as_deref(), &u.id)))
                            " · " a href=(format!("{action}/limits")) { "limits and use" }
                            " · " a href=(format!("{action}/mcp")) { "MCP access" }
                        }
                        td.actions {
                            @if u.id != me {
                                form.inline method="post" action=(action) {
                                    (csrf(&user))
                                    @if u.active() {
                                        button.danger name="action" value="disable" { "Disable" }
                                    } @else {
                                        button name="action" value="enable" { "Enable" }
                                    }
                                    @if u.admin() {
                                        button name="action" value="remove_admin" { "Remove admin" }
                                    } @else {
                                        button name="action" value="make_admin" { "Make admin" }
                                    }
                                }
                            } @else { span.muted { "you" } }
                        }
                    }
                }
            }
        }
        h2 { "Set a password" }
        p.muted { "Their login tokens, agent sign-ins and console sessions end at once." }
        form.row method="post" action="/console/admin/users/password" {
            (csrf(&user))
            label { "User" select name="user_id" { @for u in &rows { option value=(u.id) { (u.email) } } } }
            label { "New password" input type="password" name="password" autocomplete="new-password" required; }
            button type="submit" { "Set password" }
        }
        h2 { "New user" }
        form.row method="post" action="/console/admin/users" {
            (csrf(&user))
            label { "E-mail" input type="email" name="email" required; }
            label { "Password" input type="password" name="password" autocomplete="new-password" required; }
            label.check { input type="checkbox" name="is_admin" value="true"; " admin" }
            button type="submit" { "Create user" }
        }
    };
    Ok(page(&user, "Users", "/console/admin/users", body))
}

pub async fn create_user(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    accounts::create_user(
        &app.store,
        posted.get("email"),
        posted.get("password").to_string(),
        posted.get("is_admin") == "true",
    )
    .await?;
    redirect("/console/admin/users?done=created")
}

pub async fn set_password(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    let change = accounts::UserChange {
        password: Some(posted.get("password").to_string()),
        ..Default::default()
    };
    accounts::update_user(&app.auth, posted.get("user_id"), change).await?;
    redirect("/console/admin/users?done=updated")
}

pub async fn change_user(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    let mut change = accounts::UserChange::default();
    match posted.get("action") {
        "disable" => change.is_active = Some(false),
        "enable" => change.is_active = Some(true),
        "make_admin" => change.is_admin = Some(true),
        "remove_admin" => change.is_admin = Some(false),
        _ => {
            return Err(ConsoleError::new(
                StatusCode::BAD_REQUEST,
                "Unknown change.",
            ))
        }
    }
    if id == posted.user.session.user.id {
        return Err(ConsoleError::new(
            StatusCode::BAD_REQUEST,
            "You cannot disable yourself or drop your own admin role here.",
        ));
    }
    accounts::update_user(&app.auth, &id, change).await?;
    redirect("/console/admin/users?done=updated")
}

pub async fn agents(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<DoneQuery>,
) -> Out {
    let rows = app.store.list_agents().await?;
    let models = app.store.list_models().await?;
    let body = html! {
        h1 { "Agents" }
        (done_note(q.done.as_deref()))
        table {
            thead { tr { th { "Address" } th { "Name" } th { "Model" } th { "Tool mode" } th { "Tool contract" } } }
            tbody {
                @for a in &rows {
                    tr {
                        td { a href=(format!("/console/admin/agents/{}", enc(&a.address))) { (a.address) } }
                        td { (a.name) } td { (a.model) } td { (a.default_tool_mode) }
                        td { (serde_json::from_str::<Vec<String>>(&a.tool_contract).unwrap_or_default().join(", ")) }
                    }
                }
            }
        }
        h2 { "New agent" }
        form.row method="post" action="/console/admin/agents" {
            (csrf(&user))
            label { "Address" input name="address" required pattern="[a-z0-9._@\\-]{1,64}"; }
            label { "Name" input name="name" required; }
            label { "Chat model" select name="model" { @for m in models.iter().filter(|m| m.kind == "chat") { option value=(m.id) { (m.id) } } } }
            label { "Tool contract (comma-separated)" input name="tool_contract"; }
            button type="submit" { "Create agent" }
        }
    };
    Ok(page(&user, "Agents", "/console/admin/agents", body))
}

pub async fn create_agent(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    let body: NewAgent = body_of(json!({
        "address": posted.get("address").trim(), "name": posted.get("name").trim(), "model": posted.get("model"),
        "tool_contract": list_field(posted.get("tool_contract")),
    }))?;
    let agent = crate::http::routes::agents::add_agent(&app, &body).await?;
    redirect(&format!(
        "/console/admin/agents/{}?done=created",
        enc(agent.address.as_str())
    ))
}

async fn agent_or_404(
    app: &AppState,
    address: &str,
) -> Result<std::sync::Arc<Agent>, ConsoleError> {
    app.agent(address).await?.ok_or_else(|| {
        ConsoleError::new(
            StatusCode::NOT_FOUND,
            "There is no agent with this address.",
        )
    })
}

fn sign_ins_table(user: &ConsoleUser, rows: &[SignInRow], show_agent: bool) -> Markup {
    html! {
        @if rows.is_empty() {
            p.empty { "No live sign-ins." }
        } @else {
            table {
                thead { tr { th { "User" } @if show_agent { th { "Agent" } } th { "Device" } th { "Signed in" } th { "Last used" } th { "Renew by" } th {} } }
                tbody {
                    @for r in rows {
                        tr {
                            td { (r.user_email) }
                            @if show_agent { td { (r.agent) } }
                            td { (r.device_label) }
                            td { (when(r.created_at)) }
                            td { (opt_when(r.last_used_at)) }
                            td { (when(r.expires_at)) }
                            td { (button_form(user, &format!("/console/admin/sign-ins/{}/end", enc(&r.device_id)), "End", "danger")) }
                        }
                    }
                }
            }
        }
    }
}

#[derive(Deserialize, Default)]
pub struct AgentQuery {
    done: Option<String>,
    before: Option<String>,
    approvals: Option<String>,
}

pub async fn agent(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Path(address): Path<String>,
    Query(q): Query<AgentQuery>,
) -> Out {
    let agent = agent_or_404(&app, &address).await?;
    let mut tools = app.store.list_tools(&address).await?;
    for name in &agent.tool_contract {
        if !tools.iter().any(|t| &t.name == name) {
            tools.push(crate::store::agent_data::ToolRow::contract_only(
                &address,
                name,
                agent.created_at,
            ));
        }
    }
    let now = now_ms();
    let want = q.approvals.as_deref().and_then(ApprovalState::parse);
    // Expired is computed from pending ones; the newest 100 are shown.
    let stored = want.map(|w| match w {
        ApprovalState::Expired => ApprovalState::Pending.as_str(),
        other => other.as_str(),
    });
    let approvals: Vec<_> = app
        .store
        .recent_approvals(&address, stored, 100)
        .await?
        .into_iter()
        .filter(|a| {
            want.is_none_or(|w| {
                ApprovalState::parse(&a.status)
                    .unwrap_or(ApprovalState::Pending)
                    .effective(a.expires_at, now)
                    == w
            })
        })
        .collect();
    let filter = SignInFilter {
        user_id: None,
        agent: Some(&address),
        live_only: true,
    };
    let (sign_ins, next) = sign_in_page(&app, &filter, q.before.as_deref()).await?;
    let base = format!("/console/admin/agents/{}", enc(&address));
    let models = app.store.list_models().await?;
    let body = html! {
        h1 { "Agent " (agent.address.as_str()) }
        (done_note(q.done.as_deref()))
        p.muted {
            "Model " code { (agent.model) } " · tool mode " code { (agent.default_tool_mode.as_str()) }
            " · contract: " (if agent.tool_contract.is_empty() { "none (nothing is held)".to_string() } else { agent.tool_contract.join(", ") })
        }
        p {
            "Limits: " span.limits { (super::limits::summary(&agent.limits)) } " · "
            a href=(format!("{base}/limits")) { "Limits and use →" } " · "
            a href=(format!("{base}/events")) { "Events →" } " · " a href="#settings" { "Settings ↓" }
        }
        h2 { "Tools" }
        @if tools.is_empty() { p.empty { "No tools reported yet." } } @else {
            table id="tools" {
                thead { tr { th { "Name" } th { "Source" } th { "Class" } th { "Description" } th { "Status" } th { "First seen" } th {} } }
                tbody {
                    @for t in &tools {
                        @let status = if agent.tool_contract.contains(&t.name) { "contract" } else { t.status.as_str() };
                        tr data-tool=(t.name) data-source=(t.source) {
                            td { code { (t.name) } }
                            td.source {
                                @if let Some(server) = &t.server { "MCP server " code { (server) } } @else { "device" }
                            }
                            td { (t.class) }
                            td.text { (t.description) }
                            td { span class=(format!("status {status}")) { (status) } }
                            td { (when(t.first_seen_at)) }
                            td.actions {
                                @if status != "contract" && crate::wire::is_tool_name(&t.name) {
                                    @if status != "accepted" { (button_form(&user, &format!("{base}/tools/{}/accept", enc(&t.name)), "Accept", "")) }
                                    @if status != "rejected" { (button_form(&user, &format!("{base}/tools/{}/reject", enc(&t.name)), "Reject", "danger")) }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Approvals" }
        p.ranges {
            "Show: " a href=(base) { "all" }
            @for s in ["pending", "approved", "denied", "expired"] { " · " a href=(format!("{base}?approvals={s}")) { (s) } }
        }
        @if approvals.is_empty() { p.empty { "No approvals." } } @else {
            table {
                thead { tr { th { "Tool" } th { "Source" } th { "Arguments" } th { "Status" } th { "Created" } th { "Decided" } th { "Device" } th {} } }
                tbody {
                    @for a in &approvals {
                        @let state = ApprovalState::parse(&a.status).unwrap_or(ApprovalState::Pending).effective(a.expires_at, now);
                        tr data-approval=(a.id) data-source=(a.source) {
                            td { code { (a.tool) } }
                            td.source {
                                @if let Some(server) = &a.server { "MCP server " code { (server) } } @else { "chat" }
                            }
                            td.text { code { (a.arguments) } }
                            td.status { (state.as_str()) }
                            td { (when(a.created_at)) }
                            td { (opt_when(a.decided_at)) }
                            td { code { (a.device_id) } }
                            td.actions {
                                @if state == ApprovalState::Pending {
                                    (button_form(&user, &format!("{base}/approvals/{}/approve", enc(&a.id)), "Approve", ""))
                                    (button_form(&user, &format!("{base}/approvals/{}/deny", enc(&a.id)), "Deny", "danger"))
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Sign-ins" }
        (sign_ins_table(&user, &sign_ins, false))
        @if let Some(n) = next { p.pager { a href=(format!("{base}?before={}", enc(&n))) { "Older →" } } }
        h2 id="settings" { "Settings" }
        form.stack method="post" action=(base) {
            (csrf(&user))
            label { "Name" input name="name" value=(agent.name) required; }
            label { "Chat model" select name="model" {
                @for m in models.iter().filter(|m| m.kind == "chat") {
                    option value=(m.id) selected[m.id == agent.model] { (m.id) }
                }
            } }
            label { "Default tool mode" select name="default_tool_mode" {
                @for mode in ["off", "read_only", "ask", "auto"] {
                    option value=(mode) selected[mode == agent.default_tool_mode.as_str()] { (mode) }
                }
            } }
            label { "Tool contract (comma-separated)" input name="tool_contract" value=(agent.tool_contract.join(", ")); }
            label { "PII mode" select name="pii_mode" {
                @for mode in ["off", "redact", "tokenize_reversible"] {
                    option value=(mode) selected[mode == agent.pii.mode.as_str()] { (mode) }
                }
            } }
            label.check { input type="checkbox" name="pii_user_choosable" value="true" checked[agent.pii.user_choosable]; " users may choose the PII mode" }
            label { "PII terms (comma-separated)" input name="pii_terms" value=(agent.pii.terms.join(", ")); }
            label.check { input type="checkbox" name="allow_local_mcp" value="true" checked[agent.allow_local_mcp]; " allow local MCP tools (nothing is held)" }
            label { "Instructions (system message)" textarea name="instructions" rows="3" { (agent.instructions.clone().unwrap_or_default()) } }
            label { "Allowed users (e-mails, comma-separated; empty: everyone)" input name="allowed_users" value=(agent.allowed_users.clone().unwrap_or_default().join(", ")); }
            button type="submit" { "Save settings" }
        }
    };
    Ok(page(&user, "Agent", "/console/admin/agents", body))
}

pub async fn change_agent(
    State(app): State<AppState>,
    Path(address): Path<String>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    let allowed = list_field(posted.get("allowed_users"));
    let patch: AgentPatch = body_of(json!({
        "name": posted.get("name").trim(),
        "model": posted.get("model"),
        "default_tool_mode": posted.get("default_tool_mode"),
        "tool_contract": list_field(posted.get("tool_contract")),
        "pii": {
            "mode": posted.get("pii_mode"),
            "user_choosable": posted.get("pii_user_choosable") == "true",
            "terms": list_field(posted.get("pii_terms")),
        },
        "allow_local_mcp": posted.get("allow_local_mcp") == "true",
        "instructions": posted.opt("instructions"),
        "allowed_users": if allowed.is_empty() { Value::Null } else { json!(allowed) },
    }))?;
    crate::http::routes::agents::change_agent(&app, &address, &patch).await?;
    redirect(&format!(
        "/console/admin/agents/{}?done=updated",
        enc(&address)
    ))
}

pub async fn decide_tool(
    State(app): State<AppState>,
    Path((address, name, decision)): Path<(String, String, String)>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    let (status, done) = match decision.as_str() {
        "accept" => (ToolStatus::Accepted, "accepted"),
        "reject" => (ToolStatus::Rejected, "rejected"),
        _ => {
            return Err(ConsoleError::new(
                StatusCode::NOT_FOUND,
                "Unknown decision.",
            ))
        }
    };
    let _tool = crate::http::routes::agent_data::decide_tool(&app, &address, &name, status).await?;
    redirect(&format!(
        "/console/admin/agents/{}?done={done}",
        enc(&address)
    ))
}

/// An admin approves or denies an approval (chat or MCP) from the agent's page.
pub async fn decide_approval(
    State(app): State<AppState>,
    Path((address, id, decision)): Path<(String, String, String)>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    let (status, done) = match decision.as_str() {
        "approve" => ("approved", "approved"),
        "deny" => ("denied", "denied"),
        _ => {
            return Err(ConsoleError::new(
                StatusCode::NOT_FOUND,
                "Unknown decision.",
            ))
        }
    };
    let _approval =
        crate::http::routes::agent_data::admin_decide(&app, &address, &id, status, None).await?;
    redirect(&format!(
        "/console/admin/agents/{}?done={done}",
        enc(&address)
    ))
}

#[derive(Deserialize, Default)]
pub struct EventsQuery {
    device_id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    after: Option<String>,
}

const EVENTS_PAGE: i64 = 50;

pub async fn events(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Path(address): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Out {
    agent_or_404(&app, &address).await?;
    let device = q
        .device_id
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty());
    // A cursor that is not a number starts from the beginning.
    let after: i64 = q.after.as_deref().and_then(|a| a.parse().ok()).unwrap_or(0);
    let kind = q.kind.as_deref().map(str::trim).filter(|k| !k.is_empty());
    let mut rows = app
        .store
        .find_events(&address, device, kind, after, EVENTS_PAGE + 1)
        .await?;
    let more = rows.len() as i64 > EVENTS_PAGE;
    rows.truncate(EVENTS_PAGE as usize);
    let base = format!("/console/admin/agents/{}/events", enc(&address));
    let dev_q = format!(
        "{}{}",
        device
            .map(|d| format!("device_id={}&", enc(d)))
            .unwrap_or_default(),
        kind.map(|k| format!("type={}&", enc(k)))
            .unwrap_or_default()
    );
    let body = html! {
        h1 { "Events of " a href=(format!("/console/admin/agents/{}", enc(&address))) { (address) } }
        form.row method="get" action=(base) {
            label { "Device id" input name="device_id" value=(device.unwrap_or("")); }
            label { "Type" input name="type" value=(kind.unwrap_or("")); }
            button type="submit" { "Filter" }
        }
        p.muted { "Oldest first, " (EVENTS_PAGE) " a page." }
        @if rows.is_empty() { p.empty { "No events." } } @else {
            table id="events" {
                thead { tr { th { "Received" } th { "Type" } th { "Device" } th { "Conversation" } th { "Turn" } th { "Data" } } }
                tbody {
                    @for e in &rows {
                        tr {
                            td { (when(e.received_at)) }
                            td { code { (e.kind) } }
                            td { a href=(format!("{base}?device_id={}", enc(&e.device_id))) { code { (e.device_id) } } }
                            td { (e.conversation_id.clone().unwrap_or_default()) }
                            td { (e.turn_id.clone().unwrap_or_default()) }
                            td.text { code { (e.data.clone().unwrap_or_default()) } }
                        }
                    }
                }
            }
        }
        p.pager {
            @if after > 0 { a href=(format!("{base}?{dev_q}")) { "← First page" } " " }
            @if more { @if let Some(last) = rows.last() { a href=(format!("{base}?{dev_q}after={}", last.commit_seq.unwrap_or(0))) { "Next page →" } } }
        }
    };
    Ok(page(&user, "Events", "/console/admin/agents", body))
}

#[derive(Deserialize, Default)]
pub struct SignInsQuery {
    user: Option<String>,
    agent: Option<String>,
    before: Option<String>,
    done: Option<String>,
}

pub async fn sign_ins(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<SignInsQuery>,
) -> Out {
    let email = q
        .user
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase);
    let agent = q.agent.as_deref().map(str::trim).filter(|s| !s.is_empty());
    // No e-mail holds a control character (and PostgreSQL refuses a NUL
    // in text): such a filter finds no one, without asking the database.
    let found = match &email {
        Some(e) if e.chars().any(char::is_control) => Some(None),
        Some(e) => Some(app.store.user_by_email(e).await?),
        None => None,
    };
    if agent.is_some_and(|a| a.chars().any(char::is_control)) {
        return Ok(page(
            &user,
            "Sign-ins",
            "/console/admin/sign-ins",
            html! { h1 { "Sign-ins" } p.error { "There is no agent with this address." } },
        ));
    }
    let body = match found {
        Some(None) => html! { h1 { "Sign-ins" } p.error { "There is no user with this e-mail." } },
        _ => {
            let uid = found.flatten().map(|u| u.id);
            let filter = SignInFilter {
                user_id: uid.as_deref(),
                agent,
                live_only: true,
            };
            let (rows, next) = sign_in_page(&app, &filter, q.before.as_deref()).await?;
            let keep = format!(
                "user={}&agent={}",
                enc(email.as_deref().unwrap_or("")),
                enc(agent.unwrap_or(""))
            );
            html! {
                h1 { "Sign-ins" }
                (done_note(q.done.as_deref()))
                form.row method="get" action="/console/admin/sign-ins" {
                    label { "User e-mail" input name="user" value=(email.clone().unwrap_or_default()); }
                    label { "Agent" input name="agent" value=(agent.unwrap_or("")); }
                    button type="submit" { "Filter" }
                }
                p.muted { "Live sign-ins, newest first." }
                (sign_ins_table(&user, &rows, true))
                @if let Some(n) = next {
                    p.pager { a href=(format!("/console/admin/sign-ins?{keep}&before={}", enc(&n))) { "Older →" } }
                }
            }
        }
    };
    Ok(page(&user, "Sign-ins", "/console/admin/sign-ins", body))
}

pub async fn end_sign_in(
    State(app): State<AppState>,
    Path(device): Path<String>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    if !signins::end(&app.auth, &device, None, EndReason::RevokedByAdmin).await? {
        return Err(ConsoleError::new(
            StatusCode::NOT_FOUND,
            "There is no live sign-in with this device id.",
        ));
    }
    redirect("/console/admin/sign-ins?done=ended")
}

#[derive(Deserialize, Default)]
pub struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
    group_by: Option<String>,
}

/// The range (dates, UTC, `to` inclusive) and grouping of the usage page.
fn usage_range(q: &UsageQuery) -> Result<(String, String, i64, i64, GroupBy), ConsoleError> {
    let today = chrono::Utc::now().date_naive();
    let parse = |s: Option<&str>,
                 default: chrono::NaiveDate|
     -> Result<chrono::NaiveDate, ConsoleError> {
        match s.map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(default),
            Some(s) => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .map_err(|_| ConsoleError::new(StatusCode::BAD_REQUEST, "Dates are YYYY-MM-DD.")),
        }
    };
    let from = parse(q.from.as_deref(), today - chrono::Days::new(6))?;
    let to = parse(q.to.as_deref(), today)?;
    if to < from {
        return Err(ConsoleError::new(
            StatusCode::BAD_REQUEST,
            "The end date is before the start date.",
        ));
    }
    let ms = |d: chrono::NaiveDate| {
        d.and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc().timestamp_millis())
            .unwrap_or(0)
    };
    let group = GroupBy::parse(q.group_by.as_deref().unwrap_or("model")).unwrap_or(GroupBy::Model);
    Ok((
        from.to_string(),
        to.to_string(),
        ms(from),
        ms(to) + DAY,
        group,
    ))
}

fn group_name(g: GroupBy) -> &'static str {
    match g {
        GroupBy::Model => "model",
        GroupBy::User => "user",
        GroupBy::Agent => "agent",
        GroupBy::Key => "key",
        GroupBy::Provider => "provider",
        GroupBy::Api => "api",
    }
}

pub async fn usage(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<UsageQuery>,
) -> Out {
    let (from_s, to_s, from, to, group) = usage_range(&q)?;
    let rows = app.store.usage_totals(from, to, group).await?;
    let g = group_name(group);
    let bucket = if to - from > 2 * DAY { DAY } else { HOUR };
    let count = ((to - from) / bucket) as usize;
    let points = app.store.usage_series(from, to, bucket).await?;
    let reqs = charts::dense(
        &points
            .iter()
            .map(|p| (p.bucket, p.requests))
            .collect::<Vec<_>>(),
        count,
    );
    let errs = charts::dense(
        &points
            .iter()
            .map(|p| (p.bucket, p.errors))
            .collect::<Vec<_>>(),
        count,
    );
    let csv = format!("/console/admin/usage.csv?from={from_s}&to={to_s}&group_by={g}");
    let currency = app.prices().currency;
    // Spend per day whatever the range's buckets (the contract's chart).
    let days = ((to - from) / DAY) as usize;
    let day_points = if bucket == DAY {
        points
            .iter()
            .map(|p| (p.bucket, p.cost_nanos))
            .collect::<Vec<_>>()
    } else {
        app.store
            .usage_series(from, to, DAY)
            .await?
            .iter()
            .map(|p| (p.bucket, p.cost_nanos))
            .collect()
    };
    let spend = charts::dense(&day_points, days);
    let body = html! {
        h1 { "Usage" }
        form.row method="get" action="/console/admin/usage" {
            label { "From" input type="date" name="from" value=(from_s); }
            label { "To" input type="date" name="to" value=(to_s); }
            label { "By" select name="group_by" {
                @for opt in ["model", "user", "agent", "key", "provider", "api"] { option value=(opt) selected[opt == g] { (opt) } }
            } }
            button type="submit" { "Show" }
        }
        p { a.button href=(csv) download { "Download CSV" } }
        div.charts {
            (charts::over_time("Requests and errors", "requests", &reqs, Some(("errors", &errs)), from, bucket,
                reqs.iter().all(|n| *n == 0).then_some("No requests in this range.")))
            (charts::by_group(&format!("Requests by {g}"), "requests", &rows.iter().map(|r| (r.key.clone(), r.requests)).collect::<Vec<_>>()))
            (charts::by_group(&format!("Tokens by {g}"), "tokens", &rows.iter().map(|r| (r.key.clone(), r.prompt_tokens + r.completion_tokens)).collect::<Vec<_>>()))
            (charts::money_per_day(&format!("Spend per day ({currency})"), currency.as_str(), &spend, from))
        }
        table id="usage-totals" {
            thead { tr { th { (g) } th { "Requests" } th { "Errors" } th { "Prompt tokens" } th { "Completion tokens" } th { "Cost" } th { "Unpriced" } } }
            tbody {
                @for r in &rows {
                    tr { td { (r.key) } td { (r.requests) } td { (r.errors) } td { (r.prompt_tokens) } td { (r.completion_tokens) }
                         td.cost { (super::prices::short_nanos(r.cost_nanos)) " " (currency) } td { (r.unpriced_requests) } }
                }
            }
        }
    };
    Ok(page(&user, "Usage", "/console/admin/usage", body))
}

/// One CSV field: quoted, and a leading `= + - @` defused so a spreadsheet
/// does not run it as a formula.
pub fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    format!("\"{}\"", s.replace('"', "\"\""))
}

pub async fn usage_csv(
    State(app): State<AppState>,
    ConsoleAdmin(_user): ConsoleAdmin,
    Query(q): Query<UsageQuery>,
) -> Result<Response, ConsoleError> {
    let (from_s, to_s, from, to, group) = usage_range(&q)?;
    let rows = app.store.usage_totals(from, to, group).await?;
    let mut out = format!(
        "{},requests,prompt_tokens,completion_tokens,errors,cost,unpriced_requests\n",
        group_name(group)
    );
    for r in &rows {
        out.push_str(&format!(
            "{},{},{},{},{},{},{}\n",
            csv_field(&r.key),
            r.requests,
            r.prompt_tokens,
            r.completion_tokens,
            r.errors,
            crate::spend::amount::format_nanos(r.cost_nanos),
            r.unpriced_requests
        ));
    }
    let name = format!(
        "attachment; filename=\"gatehouse-usage-{}-{from_s}-{to_s}.csv\"",
        group_name(group)
    );
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (header::CONTENT_DISPOSITION, name),
        ],
        out,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_and_defused() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("=1+1"), "\"'=1+1\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
