//! Pages every user has: sign-in and sign-out, their API keys, their agent
//! sign-ins.

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::forms::DoneQuery;
use super::guard::{
    came_over_https, cookie, forbidden_cross_site, origin_allowed, read_form, set_cookie,
    ConsoleError, ConsoleUser, Out, Posted, PRE_COOKIE, SESSION_COOKIE,
};
use super::html::bare;
use super::layout::{button_form, csrf, done_note, enc, opt_when, page, when};
use crate::app::AppState;
use crate::auth::signins::EndReason;
use crate::auth::{accounts, console, signins};
use crate::store::now_ms;
use crate::store::signins::{SignInFilter, SignInRow};

#[derive(Deserialize, Default)]
pub struct NextQuery {
    next: Option<String>,
}

/// Where to go after signing in: `next` when it is a plain console path of
/// this site, else the overview. The client chose it, so it never makes an
/// error: anything else falls back.
fn safe_next(next: Option<&str>) -> String {
    next.filter(|n| is_console_path(n))
        .unwrap_or("/console/")
        .to_string()
}

/// A path under `/console/` as a `Location` header can carry it: visible
/// ASCII only (no control character, space or raw non-ASCII), no `//host`
/// or backslash (another site: no open redirect), and no `.` or `..`
/// segment, escaped or not (the browser would resolve it out of `/console/`).
fn is_console_path(n: &str) -> bool {
    let Some(rest) = n.strip_prefix("/console/") else {
        return false;
    };
    if rest.starts_with('/') || !n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
        return false;
    }
    let path = n.split(['?', '#']).next().unwrap_or_default();
    !path.split('/').any(|segment| {
        let s = segment.to_ascii_lowercase().replace("%2e", ".");
        s == "." || s == ".."
    })
}

/// Ways to sign in besides the password. Single sign-on adds one button per
/// provider here (`GET /api/auth/sso` lists them); the password form stays.
pub struct SignInOption {
    pub href: String,
    pub label: String,
}

/// One button per single sign-on provider; none when they cannot be read
/// (the password form still works).
async fn sign_in_options(app: &AppState) -> Vec<SignInOption> {
    match app.sso.list(&app.store).await {
        Ok(list) => list
            .into_iter()
            .map(|p| SignInOption {
                href: format!("/api/auth/sso/{}/authorize", enc(&p.name)),
                label: p.display_name.clone(),
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn login_form(
    pre: &str,
    next: &str,
    email: &str,
    error: Option<&str>,
    others: &[SignInOption],
) -> Markup {
    html! {
        h1 { "Sign in to Gatehouse" }
        @if let Some(e) = error { p.error role="alert" { (e) } }
        form.stack method="post" action="/console/login" {
            input type="hidden" name="csrf" value=(pre);
            input type="hidden" name="next" value=(next);
            label { "E-mail" input type="email" name="username" value=(email) autocomplete="username" required autofocus; }
            label { "Password" input type="password" name="password" autocomplete="current-password" required; }
            button type="submit" { "Sign in" }
        }
        @if !others.is_empty() {
            section.sso {
                h2 { "Or sign in with" }
                @for o in others { a.button href=(o.href) { (o.label) } }
            }
        }
    }
}

async fn login_response(
    app: &AppState,
    status: StatusCode,
    headers_secure: bool,
    pre: &str,
    next: &str,
    email: &str,
    error: Option<&str>,
) -> Response {
    let cookie = set_cookie(PRE_COOKIE, pre, 3600, headers_secure);
    let others = sign_in_options(app).await;
    (
        status,
        [(header::SET_COOKIE, cookie)],
        bare("Sign in", login_form(pre, next, email, error, &others)),
    )
        .into_response()
}

pub async fn login_page(
    State(app): State<AppState>,
    headers: axum::http::HeaderMap,
    Query(q): Query<NextQuery>,
) -> Response {
    let next = safe_next(q.next.as_deref());
    // Already signed in: straight on.
    if let Some(secret) = cookie(&headers, SESSION_COOKIE) {
        if let Ok(Some(_)) = console::check(&app.auth, &secret).await {
            return Redirect::to(&next).into_response();
        }
    }
    let pre = cookie(&headers, PRE_COOKIE)
        .filter(|p| p.len() == 43)
        .unwrap_or_else(|| crate::auth::new_secret(""));
    login_response(
        &app,
        StatusCode::OK,
        came_over_https(&headers),
        &pre,
        &next,
        "",
        None,
    )
    .await
}

/// Password sign-in through the same rules (and throttle) as the API's login.
pub async fn login(
    State(app): State<AppState>,
    crate::http::extract::ClientAddr(client): crate::http::extract::ClientAddr,
    req: Request,
) -> Out {
    let headers = req.headers().clone();
    if !origin_allowed(&headers) {
        return Err(forbidden_cross_site());
    }
    let form: std::collections::HashMap<String, String> =
        read_form(req).await?.into_iter().collect();
    let field = |n: &str| form.get(n).map(String::as_str).unwrap_or("");
    // Login CSRF: the form's token must be the one this browser was given.
    let pre = cookie(&headers, PRE_COOKIE).unwrap_or_default();
    if pre.is_empty() || !crate::auth::ct_eq(&pre, field("csrf")) {
        return Err(forbidden_cross_site());
    }
    let next = safe_next(Some(field("next")));
    let secure = came_over_https(&headers);
    let email = field("username").trim().to_string();
    let password = field("password").to_string();
    if email.is_empty() || password.is_empty() || email.len() > 320 || password.len() > 1024 {
        return Ok(login_response(
            &app,
            StatusCode::BAD_REQUEST,
            secure,
            &pre,
            &next,
            &email,
            Some("Enter your e-mail and password."),
        )
        .await);
    }
    match accounts::password_login(&app.auth, &app.login_throttle, &email, password, client).await {
        Ok(user) => {
            let started = console::start(&app.auth, &user.id).await?;
            let mut resp = Redirect::to(&next).into_response();
            let h = resp.headers_mut();
            for c in [
                set_cookie(SESSION_COOKIE, &started.secret, started.lifetime_s, secure),
                set_cookie(PRE_COOKIE, "", 0, secure),
            ] {
                if let Ok(v) = c.parse() {
                    h.append(header::SET_COOKIE, v);
                }
            }
            Ok(resp)
        }
        Err(e) if e.code == "login_bad_credentials" || e.code == "too_many_attempts" => {
            let status = crate::http::edge::error::status_of(e.kind);
            Ok(login_response(&app, status, secure, &pre, &next, &email, Some(&e.message)).await)
        }
        Err(e) => Err(e.into()),
    }
}

/// Ends the session for good and clears the cookie.
pub async fn logout(
    State(app): State<AppState>,
    headers: axum::http::HeaderMap,
    _posted: Posted,
) -> Out {
    if let Some(secret) = cookie(&headers, SESSION_COOKIE) {
        console::end(&app.auth, &secret).await?;
    }
    let mut resp = Redirect::to("/console/login").into_response();
    if let Ok(v) = set_cookie(SESSION_COOKIE, "", 0, came_over_https(&headers)).parse() {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(resp)
}

fn key_form(user: &ConsoleUser) -> Markup {
    html! {
        h2 { "New key" }
        form.row method="post" action="/console/keys" {
            (csrf(user))
            label { "Name" input name="name" required maxlength="200"; }
            label { "Expires on (optional)" input type="date" name="expires_on"; }
            label { "Only these models (comma-separated, optional)" input name="models"; }
            label { "Requests per minute (optional)" input name="requests_per_minute" inputmode="numeric" size="8"; }
            label { "Tokens per day (optional)" input name="tokens_per_day" inputmode="numeric" size="10"; }
            button type="submit" { "Create key" }
        }
    }
}

pub async fn keys(
    State(app): State<AppState>,
    user: ConsoleUser,
    Query(q): Query<DoneQuery>,
) -> Out {
    let rows = app.store.list_api_keys(&user.session.user.id).await?;
    let body = html! {
        h1 { "My API keys" }
        (done_note(q.done.as_deref()))
        p { "Backends send a key as " code { "Authorization: Bearer gtk_…" } " to /v1/models, chat, embeddings and rerank." }
        @if rows.is_empty() {
            p.empty { "You have no API keys yet." }
        } @else {
            table {
                thead { tr { th { "Name" } th { "Created" } th { "Expires" } th { "Models" } th { "Limits" } th { "Last used" } th {} } }
                tbody {
                    @for k in &rows {
                        tr {
                            td { (k.name) }
                            td { (when(k.created_at)) }
                            td { (opt_when(k.expires_at)) }
                            td { (crate::http::routes::users::key_models(k).map(|m| m.join(", ")).unwrap_or_else(|| "every model".into())) }
                            td.limits {
                                (super::limits::summary(&crate::limits::Limits::from_db_or_closed(k.limits.as_deref(), &k.id)))
                                " · " a href=(format!("/console/keys/{}/limits", enc(&k.id))) { "limits and use" }
                                " · " a href=(format!("/console/keys/{}/mcp", enc(&k.id))) { "MCP access" }
                            }
                            td { (opt_when(app.auth.last_used.api_keys.get(&k.id).map(|v| *v).max(k.last_used_at))) }
                            td { (button_form(&user, &format!("/console/keys/{}/delete", enc(&k.id)), "Delete", "danger")) }
                        }
                    }
                }
            }
        }
        (key_form(&user))
    };
    Ok(page(&user, "My API keys", "/console/keys", body))
}

/// Creates a key and shows its value this once (the page is not cached).
pub async fn create_key(State(app): State<AppState>, posted: Posted) -> Out {
    let expires_at = posted.opt("expires_on").map(|d| format!("{d}T00:00:00Z"));
    let models = posted.opt("models").map(|m| {
        m.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
    });
    let new = accounts::NewKey {
        name: posted.get("name").to_string(),
        expires_at,
        models,
        // The other limits are on the key's limits page.
        limits: crate::limits::Limits::from_json(&super::limits::limits_json(&posted.form))
            .map_err(crate::error::Error::from)?,
        mcp: None,
    };
    let (row, secret) = accounts::create_key(&app.store, &posted.user.session.user.id, new).await?;
    let body = html! {
        h1 { "New API key" }
        p.note role="status" { "Key " strong { (row.name) } " created. Copy it now: it is shown only this once." }
        p { code.secret id="new-key" { (secret) } }
        p { a href="/console/keys" { "Back to my keys" } }
    };
    Ok((
        StatusCode::CREATED,
        page(&posted.user, "New API key", "/console/keys", body),
    )
        .into_response())
}

pub async fn delete_key(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    crate::http::routes::users::revoke_key(&app, &posted.user.session.user.id, &id).await?;
    Ok(Redirect::to("/console/keys?done=deleted").into_response())
}

/// A sign-ins page cursor: `created_at.device_id` of the last row shown.
pub fn parse_cursor(s: Option<&str>) -> Option<(i64, String)> {
    let (t, d) = s?.split_once('.')?;
    // A device id is plain text; anything else is no cursor (and a NUL would
    // be refused by PostgreSQL).
    if d.chars().any(char::is_control) {
        return None;
    }
    Some((t.parse().ok()?, d.to_string()))
}

pub fn cursor_of(r: &SignInRow) -> String {
    format!("{}.{}", r.created_at, r.device_id)
}

pub const PAGE: i64 = 50;

/// One page of sign-ins and the cursor of the next, if any.
pub async fn sign_in_page(
    app: &AppState,
    filter: &SignInFilter<'_>,
    before: Option<&str>,
) -> Result<(Vec<SignInRow>, Option<String>), ConsoleError> {
    let cursor = parse_cursor(before);
    let mut rows = app
        .store
        .list_sign_ins(
            filter,
            cursor.as_ref().map(|(t, d)| (*t, d.as_str())),
            PAGE + 1,
            now_ms(),
        )
        .await?;
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let next = if more {
        rows.last().map(cursor_of)
    } else {
        None
    };
    Ok((rows, next))
}

#[derive(Deserialize, Default)]
pub struct PageQuery {
    before: Option<String>,
    done: Option<String>,
}

pub async fn sign_ins(
    State(app): State<AppState>,
    user: ConsoleUser,
    Query(q): Query<PageQuery>,
) -> Out {
    let filter = SignInFilter {
        user_id: Some(&user.session.user.id),
        agent: None,
        live_only: true,
    };
    let (rows, next) = sign_in_page(&app, &filter, q.before.as_deref()).await?;
    let body = html! {
        h1 { "My sign-ins" }
        (done_note(q.done.as_deref()))
        p { "Each agent app you signed in to, on each device. Ending one signs that device out at once." }
        @if rows.is_empty() {
            p.empty { "No live sign-ins." }
        } @else {
            table {
                thead { tr { th { "Device" } th { "Agent" } th { "Signed in" } th { "Last used" } th { "Renew by" } th {} } }
                tbody {
                    @for r in &rows {
                        tr {
                            td { (r.device_label) }
                            td { (r.agent) }
                            td { (when(r.created_at)) }
                            td { (opt_when(r.last_used_at)) }
                            td { (when(r.expires_at)) }
                            td { (button_form(&user, &format!("/console/sign-ins/{}/end", enc(&r.device_id)), "End", "danger")) }
                        }
                    }
                }
            }
        }
        @if let Some(n) = next {
            p.pager { a href=(format!("/console/sign-ins?before={}", enc(&n))) { "Older →" } }
        }
    };
    Ok(page(&user, "My sign-ins", "/console/sign-ins", body))
}

pub async fn end_sign_in(
    State(app): State<AppState>,
    Path(device): Path<String>,
    posted: Posted,
) -> Out {
    let uid = posted.user.session.user.id.clone();
    if !signins::end(&app.auth, &device, Some(&uid), EndReason::SignedOut).await? {
        return Err(ConsoleError::new(
            StatusCode::NOT_FOUND,
            "There is no such live sign-in of yours.",
        ));
    }
    Ok(Redirect::to("/console/sign-ins?done=ended").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_the_console() {
        assert_eq!(safe_next(Some("/console/keys")), "/console/keys");
        assert_eq!(safe_next(Some("//evil.example/")), "/console/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/console/");
        assert_eq!(safe_next(Some("/console//evil.example")), "/console/");
        assert_eq!(safe_next(Some("/console/\\evil.example")), "/console/");
        assert_eq!(safe_next(None), "/console/");
        // What a Location header cannot carry as it is.
        for bad in [
            "/console/\r\nX: 1",
            "/console/a b",
            "/console/\u{7f}",
            "/console/caf\u{e9}",
        ] {
            assert_eq!(safe_next(Some(bad)), "/console/", "{bad:?}");
        }
        // Segments the browser resolves out of /console/.
        for bad in [
            "/console/../api",
            "/console/a/../../x",
            "/console/%2E%2e/api",
            "/console/.%2e",
        ] {
            assert_eq!(safe_next(Some(bad)), "/console/", "{bad:?}");
        }
        for good in [
            "/console/",
            "/console/a%20b?x=1&y=..",
            "/console/admin/usage?range=7d#top",
        ] {
            assert_eq!(safe_next(Some(good)), good);
        }
    }

    #[test]
    fn cursor_round_trips() {
        assert_eq!(
            parse_cursor(Some("12.dev_1.x")),
            Some((12, "dev_1.x".into()))
        );
        assert_eq!(parse_cursor(Some("x.y")), None);
    }
}
