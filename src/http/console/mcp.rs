//! MCP servers (admins): list, add, edit, delete, and the call audit; and the
//! `mcp` grant of a key (its owner) and of a user (admins). Every change goes
//! through the admin API's own functions, so the console accepts and refuses
//! the same things with the same messages. Header values are taken, never
//! shown: pages carry header names only.

use axum::extract::{Path, Query, RawQuery, State};
use maud::{html, Markup};
use serde_json::{json, Map, Value};

use super::forms::{admin_only, list_field, redirect, DoneQuery};
use super::guard::{ConsoleAdmin, ConsoleError, ConsoleUser, Out, Posted};
use super::layout::{button_form, csrf, done_note, enc, page, when};
use crate::app::AppState;
use crate::http::routes::admin_mcp;
use crate::mcp::audit::Decision;
use crate::mcp::{McpGrant, McpServer};

/// Records per page of the call audit.
const PAGE: u32 = 50;

/// `Name: value` lines into a headers object.
fn headers_field(s: &str) -> Value {
    let mut m = Map::new();
    for line in s.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once(':').unwrap_or((line, ""));
        m.insert(k.trim().to_string(), json!(v.trim()));
    }
    Value::Object(m)
}

/// `tool = class` lines into a classes object.
fn classes_field(s: &str) -> Value {
    let mut m = Map::new();
    for line in s.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        m.insert(k.trim().to_string(), json!(v.trim()));
    }
    Value::Object(m)
}

/// A whole number as a number; anything else as typed, so the API's check
/// refuses it with its own message.
fn number_field(s: &str) -> Value {
    s.trim()
        .parse::<u64>()
        .map_or_else(|_| json!(s.trim()), |n| json!(n))
}

fn server_body(posted: &Posted, with_name: bool) -> Value {
    let mut b = json!({
        "url": posted.get("url").trim(),
        "timeout_s": number_field(posted.get("timeout_s")),
        "tools": list_field(posted.get("tools")),
        "tool_classes": classes_field(posted.get("tool_classes")),
    });
    if with_name {
        b["name"] = json!(posted.get("name").trim());
    }
    // Left empty on the edit form: the headers stay as they are.
    if with_name
        || !posted.get("headers").trim().is_empty()
        || posted.get("clear_headers") == "true"
    {
        b["headers"] = headers_field(posted.get("headers"));
    }
    b
}

fn classes_text(s: &McpServer) -> String {
    s.tool_classes
        .iter()
        .map(|(k, v)| format!("{k} = {}", v.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn server_fields(s: Option<&McpServer>) -> Markup {
    html! {
        label { "URL (Streamable HTTP)" input name="url" type="url" required value=[s.map(|s| s.url.as_str())] placeholder="http://127.0.0.1:9001/mcp"; }
        label { "Timeout of each upstream request (seconds, 1 to 3600)" input name="timeout_s" value=(s.map_or(60, |s| s.timeout_s)); }
        label { "Allowed tools (patterns, comma-separated; * matches any run; empty: none)" input name="tools" value=(s.map_or_else(|| "*".to_string(), |s| s.tools.join(", "))); }
        label { "Tool classes (one `tool = read|write|execute` a line)" textarea name="tool_classes" rows="3" { (s.map(classes_text).unwrap_or_default()) } }
    }
}

pub async fn servers(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<DoneQuery>,
    RawQuery(raw): RawQuery,
) -> Out {
    let list: Vec<McpServer> = app
        .store
        .list_mcp_server_rows()
        .await?
        .into_iter()
        .map(|r| r.open(&app.keyring))
        .collect();
    let audit = audit_section(&app, raw.as_deref(), &list).await?;
    let body = html! {
        h1 { "MCP servers" }
        (done_note(q.done.as_deref()))
        p { "MCP servers agents and backends reach through " code { "/mcp" } " under their grants. Header values (credentials) are sealed and never shown." }
        @if list.is_empty() { p.empty { "No MCP servers yet." } } @else {
            table id="mcp-servers" {
                thead { tr { th { "Name" } th { "URL" } th { "Timeout" } th { "Allowed tools" } th { "Classes" } th { "Headers" } th { "From" } th {} } }
                tbody {
                    @for s in &list {
                        tr data-mcp-server=(s.name) {
                            td { a href=(format!("/console/admin/mcp/{}", enc(&s.name))) { (s.name) } }
                            td { code { (s.url) } }
                            td { (s.timeout_s) " s" }
                            td { @if s.tools.is_empty() { "none" } @else { (s.tools.join(", ")) } }
                            td { (classes_text(s)) }
                            td.header-names { @if s.headers.is_empty() { "—" } @else { (s.header_names().join(", ")) } }
                            td { (s.source.as_str()) }
                            td { (button_form(&user, &format!("/console/admin/mcp/{}/delete", enc(&s.name)), "Delete", "danger")) }
                        }
                    }
                }
            }
            p.muted { "A server from the configuration file comes back at the next start unless it is removed there too. Deleting a server removes it from every grant." }
        }
        h2 { "New MCP server" }
        form.stack method="post" action="/console/admin/mcp" {
            (csrf(&user))
            label { "Name (a-z, 0-9 and -)" input name="name" required pattern="[a-z0-9][a-z0-9\\-]{0,31}"; }
            (server_fields(None))
            label { "Headers sent upstream (one `Name: value` a line; sealed, never shown)" textarea name="headers" rows="2" autocomplete="off" {} }
            button type="submit" { "Add server" }
        }
        (audit)
    };
    Ok(page(&user, "MCP servers", "/console/admin/mcp", body))
}

pub async fn create(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    admin_mcp::add_server(&app, &server_body(&posted, true)).await?;
    redirect("/console/admin/mcp?done=created")
}

pub async fn server(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Path(name): Path<String>,
    Query(q): Query<DoneQuery>,
) -> Out {
    let s = admin_mcp::load_server(&app, &name).await?;
    // Asked of the upstream now; an unreachable one is said, not an error page.
    let tools = crate::http::routes::mcp::server_tools(&app, &s.name).await;
    let action = format!("/console/admin/mcp/{}", enc(&s.name));
    let body = html! {
        h1 { "MCP server " (s.name) }
        (done_note(q.done.as_deref()))
        p { "From " (s.source.as_str()) ", added " (when(s.created_at)) ". Headers: "
            span.header-names { @if s.headers.is_empty() { "none" } @else { (s.header_names().join(", ")) } } "." }
        form.stack method="post" action=(action) {
            (csrf(&user))
            (server_fields(Some(&s)))
            label { "Replace the headers (one `Name: value` a line; empty keeps the current ones)" textarea name="headers" rows="2" autocomplete="off" {} }
            label.check { input type="checkbox" name="clear_headers" value="true"; " remove every header" }
            button type="submit" { "Save server" }
        }
        h2 { "Tools (asked of the server now)" }
        (tools_table(&tools))
        p { a href="/console/admin/mcp" { "← MCP servers" } " · " a href=(format!("/console/admin/mcp?server={}", enc(&s.name))) { "its calls" } }
    };
    Ok(page(&user, "MCP server", "/console/admin/mcp", body))
}

/// The live tool list: upstream and exposed name, class and its source,
/// and whether the server's allow-list lets it through.
fn tools_table(tools: &Result<Vec<Value>, crate::error::Error>) -> Markup {
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    html! {
        @match tools {
            Err(e) => p.error id="mcp-tools-error" { (e.message) }
            Ok(list) if list.is_empty() => p.empty { "The server lists no tools." }
            Ok(list) => table id="mcp-tools" {
                thead { tr { th { "Tool" } th { "Exposed as" } th { "Class" } th { "Class from" } th { "Allowed" } th { "Description" } } }
                tbody {
                    @for t in list {
                        tr data-mcp-tool=(text(t, "name")) {
                            td { code { (text(t, "name")) } }
                            td { code { (text(t, "exposed_name")) } }
                            td { (text(t, "class")) }
                            td { (text(t, "class_source")) }
                            td { @if t["allowed"].as_bool() == Some(true) { "yes" } @else { "no" } }
                            td { (text(t, "description")) }
                        }
                    }
                }
            }
        }
    }
}

pub async fn change(State(app): State<AppState>, Path(name): Path<String>, posted: Posted) -> Out {
    admin_only(&posted)?;
    admin_mcp::change_server(&app, &name, &server_body(&posted, false)).await?;
    redirect(&format!("/console/admin/mcp/{}?done=updated", enc(&name)))
}

pub async fn delete(State(app): State<AppState>, Path(name): Path<String>, posted: Posted) -> Out {
    admin_only(&posted)?;
    admin_mcp::remove_server(&app, &name).await?;
    redirect("/console/admin/mcp?done=deleted")
}

/// The audit with its filters: the API's query, 50 a page, newest first.
/// The date range is two dates (UTC days; `to` inclusive).
async fn audit_section(
    app: &AppState,
    raw: Option<&str>,
    servers: &[McpServer],
) -> Result<Markup, ConsoleError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or("")).unwrap_or_default();
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    let (from_day, to_day) = (get("from_day"), get("to_day"));
    let day = |d: &str, end: bool| -> Option<String> {
        let date = chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok()?;
        let date = if end { date.succ_opt()? } else { date };
        Some(format!("{date}T00:00:00Z"))
    };
    let mut query: Vec<(&str, String)> = vec![("limit", PAGE.to_string())];
    for k in ["server", "user", "agent", "decision", "after"] {
        query.push((k, get(k)));
    }
    if let Some(f) = day(&from_day, false) {
        query.push(("from", f));
    }
    if let Some(t) = day(&to_day, true) {
        query.push(("to", t));
    }
    let qs = serde_urlencoded::to_string(&query).unwrap_or_default();
    let (calls, next, error) = match admin_mcp::parse_calls_query(Some(&qs)) {
        Ok(f) => {
            let (calls, next) = admin_mcp::calls_page(app, &f).await?;
            (calls, next, None)
        }
        Err(e) => (Vec::new(), None, Some(e.message)),
    };
    let next_link = next.map(|n| {
        let mut q: Vec<(&str, String)> = ["server", "user", "agent", "decision"]
            .into_iter()
            .map(|k| (k, get(k)))
            .collect();
        q.push(("from_day", from_day.clone()));
        q.push(("to_day", to_day.clone()));
        q.push(("after", n));
        format!(
            "/console/admin/mcp?{}",
            serde_urlencoded::to_string(&q).unwrap_or_default()
        )
    });
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or("—").to_string();
    Ok(html! {
        h2 id="calls" { "Calls" }
        form.filters method="get" action="/console/admin/mcp" {
            label { "Server" select name="server" {
                option value="" { "any" }
                @for s in servers { option value=(s.name) selected[get("server") == s.name] { (s.name) } }
            } }
            label { "User (e-mail)" input name="user" value=(get("user")); }
            label { "Agent" input name="agent" value=(get("agent")); }
            label { "Decision" select name="decision" {
                option value="" { "any" }
                @for d in Decision::ALL { option value=(d.as_str()) selected[get("decision") == d.as_str()] { (d.as_str()) } }
            } }
            label { "From" input type="date" name="from_day" value=(from_day); }
            label { "To" input type="date" name="to_day" value=(to_day); }
            button type="submit" { "Filter" }
        }
        @if let Some(e) = error { p.error role="alert" { (e) } }
        @if calls.is_empty() { p.empty { "No calls." } } @else {
            table id="mcp-calls" {
                thead { tr { th { "When" } th { "Server" } th { "Tool" } th { "Class" } th { "User" } th { "Agent / key" } th { "Mode" } th { "Decision" } th { "Reason" } th { "Outcome" } th { "ms" } } }
                tbody {
                    @for c in &calls {
                        tr data-call=(text(c, "id")) {
                            td { (text(c, "created_at")) }
                            td { (text(c, "server")) }
                            td { code { (text(c, "exposed_name")) } }
                            td { (text(c, "class")) }
                            td { (text(c, "user")) }
                            td { @if c["agent"].is_string() { (text(c, "agent")) } @else { "key " (text(c, "api_key_id")) } }
                            td { (text(c, "mode")) }
                            td.decision { (text(c, "decision")) }
                            td { (text(c, "reason")) }
                            td { (text(c, "outcome")) }
                            td { (c["latency_ms"].as_i64().unwrap_or(0)) }
                        }
                    }
                }
            }
        }
        @if let Some(href) = next_link { p { a.next href=(href) { "Older calls →" } } }
    })
}

// ---- grants ----

fn grant_servers_text(g: Option<&McpGrant>) -> String {
    g.map(|g| g.servers.join(", ")).unwrap_or_default()
}

fn grant_tools_text(g: Option<&McpGrant>) -> String {
    g.and_then(|g| g.tools.as_ref())
        .map(|t| {
            t.iter()
                .map(|(s, p)| format!("{s}: {}", p.join(", ")))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The grant form's fields as the API's `mcp` value (`null`: no access).
fn grant_body(posted: &Posted) -> Value {
    if posted.get("access") != "granted" {
        return Value::Null;
    }
    let mut g = json!({"servers": list_field(posted.get("servers"))});
    let lines: Vec<&str> = posted
        .get("tools")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if !lines.is_empty() {
        let mut m = Map::new();
        for l in lines {
            let (s, p) = l.split_once(':').unwrap_or((l, ""));
            m.insert(s.trim().to_string(), json!(list_field(p)));
        }
        g["tools"] = Value::Object(m);
    }
    g
}

fn grant_form(
    user: &ConsoleUser,
    action: &str,
    g: Option<&McpGrant>,
    error: Option<&str>,
) -> Markup {
    html! {
        @if let Some(e) = error { p.error role="alert" { (e) } }
        form.stack method="post" action=(action) {
            (csrf(user))
            label.check { input type="radio" name="access" value="none" checked[g.is_none()]; " no MCP access" }
            label.check { input type="radio" name="access" value="granted" checked[g.is_some()]; " these servers:" }
            label { "Servers (comma-separated; * for every server, later ones too)" input name="servers" value=(grant_servers_text(g)); }
            label { "Tools per server (optional; one `server: pattern, pattern` a line; a server not listed allows all its tools)"
                textarea name="tools" rows="3" { (grant_tools_text(g)) } }
            button type="submit" { "Save MCP access" }
        }
        p.muted { "Effective access is the intersection of the server's allowed tools, the user's grant and the key's (or agent's) grant." }
    }
}

async fn key_grant_page(app: &AppState, user: &ConsoleUser, id: &str, error: Option<&str>) -> Out {
    let row = app
        .store
        .list_api_keys(&user.session.user.id)
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| {
            ConsoleError::new(
                axum::http::StatusCode::NOT_FOUND,
                "You have no API key with this id.",
            )
        })?;
    let g = McpGrant::from_db_or_closed(row.mcp.as_deref(), &row.id);
    let body = html! {
        h1 { "MCP access of key " (row.name) }
        (grant_form(user, &format!("/console/keys/{}/mcp", enc(id)), g.as_ref(), error))
        p { a href="/console/keys" { "← My API keys" } }
    };
    Ok(page(user, "MCP access", "/console/keys", body))
}

pub async fn key_grant(
    State(app): State<AppState>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Out {
    key_grant_page(&app, &user, &id, None).await
}

pub async fn set_key_grant(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    let uid = posted.user.session.user.id.clone();
    let checked = admin_mcp::check_grant(&app, &grant_body(&posted)).await;
    let result = match checked {
        Ok(g) => crate::http::routes::users::set_key_mcp(&app, &uid, &id, g.as_ref()).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => redirect("/console/keys?done=updated"),
        Err(e) if e.kind == crate::error::ErrorKind::Invalid => {
            key_grant_page(&app, &posted.user, &id, Some(&e.message)).await
        }
        Err(e) => Err(e.into()),
    }
}

async fn user_grant_page(
    app: &AppState,
    admin: &ConsoleUser,
    id: &str,
    error: Option<&str>,
) -> Out {
    let u = app.store.user_by_id(id).await?.ok_or_else(|| {
        ConsoleError::new(
            axum::http::StatusCode::NOT_FOUND,
            "There is no user with this id.",
        )
    })?;
    let g = McpGrant::from_db_or_closed(u.mcp.as_deref(), &u.id);
    let body = html! {
        h1 { "MCP access of " (u.email) }
        (grant_form(admin, &format!("/console/admin/users/{}/mcp", enc(id)), g.as_ref(), error))
        p { a href="/console/admin/users" { "← Users" } }
    };
    Ok(page(admin, "MCP access", "/console/admin/users", body))
}

pub async fn user_grant(
    State(app): State<AppState>,
    ConsoleAdmin(admin): ConsoleAdmin,
    Path(id): Path<String>,
) -> Out {
    user_grant_page(&app, &admin, &id, None).await
}

pub async fn set_user_grant(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    admin_only(&posted)?;
    let result = match admin_mcp::check_grant(&app, &grant_body(&posted)).await {
        Ok(g) => match crate::http::routes::admin::store_user_mcp(&app, &id, g.as_ref()).await {
            Ok(()) => {
                app.invalidate(crate::runtime::Invalidation::User(id.clone()))
                    .await;
                Ok(())
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => redirect("/console/admin/users?done=updated"),
        Err(e) if e.kind == crate::error::ErrorKind::Invalid => {
            user_grant_page(&app, &posted.user, &id, Some(&e.message)).await
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_lines_become_the_apis_objects() {
        assert_eq!(
            headers_field("Authorization: Bearer a:b\n\n X-Key : k "),
            json!({"Authorization": "Bearer a:b", "X-Key": "k"})
        );
        assert_eq!(
            classes_field("write_note = write\nget=read"),
            json!({"write_note": "write", "get": "read"})
        );
        assert_eq!(number_field(" 60 "), json!(60));
        assert_eq!(number_field("sixty"), json!("sixty"));
    }
}
