//! Who is asking and may they: the session cookie, the CSRF token and the
//! origin check on every form, and the error page.

use std::collections::HashMap;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use crate::app::AppState;
use crate::auth::console::{self, ConsoleSession};
use crate::error::Error;
use crate::http::edge::error::status_of;

pub const SESSION_COOKIE: &str = "gatehouse_console";
/// Carries the sign-in form's token before there is a session (login CSRF).
pub const PRE_COOKIE: &str = "gatehouse_console_pre";

/// Scripts and styles only from this origin (no inline script or style), no
/// plugins, no framing, forms post only to this origin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A console failure, shown as a page.
pub struct ConsoleError {
    pub status: StatusCode,
    pub message: String,
}

impl From<Error> for ConsoleError {
    fn from(e: Error) -> Self {
        if e.kind == crate::error::ErrorKind::Internal {
            tracing::error!(message = %e.message, "console request failed");
        }
        ConsoleError {
            status: status_of(e.kind),
            message: e.message,
        }
    }
}

impl From<sqlx::Error> for ConsoleError {
    fn from(e: sqlx::Error) -> Self {
        Error::from(e).into()
    }
}

impl ConsoleError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ConsoleError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let body = super::html::bare(
            "Something went wrong",
            maud::html! {
                h1 { "Something went wrong" }
                p.error role="alert" { (self.message) }
                p { a href="/console/" { "Back to the console" } }
            },
        );
        (self.status, body).into_response()
    }
}

pub type Out = Result<Response, ConsoleError>;

pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Whether the request reached us over HTTPS. We never terminate TLS
/// ourselves, so this is the proxy's `X-Forwarded-Proto`. Trusting it from
/// anyone is safe here: it only adds `Secure` to the caller's own cookie.
pub fn came_over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("https")
        })
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Lax, Path=/console, Secure over HTTPS.
pub fn set_cookie(name: &str, value: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/console; Max-Age={max_age_s}; HttpOnly; SameSite=Lax{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The origin check of a state-changing request: a browser's fetch metadata
/// or Origin must say it came from this site. Requests without either (not
/// from a browser) still need the CSRF token.
pub fn origin_allowed(headers: &HeaderMap) -> bool {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site") {
        if !matches!(site, "same-origin" | "none") {
            return false;
        }
    }
    match get("origin") {
        None => true,
        Some(origin) => {
            let host = get("x-forwarded-host")
                .and_then(|h| h.split(',').next())
                .or_else(|| get("host"))
                .map(str::trim);
            let origin_host = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
        }
    }
}

/// A signed-in console user. Without a session: to the sign-in page.
pub struct ConsoleUser {
    pub session: ConsoleSession,
}

impl ConsoleUser {
    pub fn is_admin(&self) -> bool {
        self.session.user.is_admin
    }
}

async fn session_of(parts: &Parts, app: &AppState) -> Result<Option<ConsoleSession>, ConsoleError> {
    match cookie(&parts.headers, SESSION_COOKIE) {
        None => Ok(None),
        Some(secret) => Ok(console::check(&app.auth, &secret).await?),
    }
}

fn to_sign_in(parts: &Parts) -> Response {
    let next = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| p.starts_with("/console/") && !p.starts_with("/console/login"))
        .unwrap_or("/console/");
    let q = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    Redirect::to(&format!("/console/login?{q}")).into_response()
}

impl FromRequestParts<AppState> for ConsoleUser {
    type Rejection = Response;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Response> {
        match session_of(parts, app).await {
            Ok(Some(session)) => Ok(ConsoleUser { session }),
            Ok(None) => Err(to_sign_in(parts)),
            Err(e) => Err(e.into_response()),
        }
    }
}

/// An administrator's session; anyone else gets 403.
pub struct ConsoleAdmin(pub ConsoleUser);

impl FromRequestParts<AppState> for ConsoleAdmin {
    type Rejection = Response;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Response> {
        let user = ConsoleUser::from_request_parts(parts, app).await?;
        if !user.is_admin() {
            return Err(ConsoleError::new(
                StatusCode::FORBIDDEN,
                "This page is for administrators only.",
            )
            .into_response());
        }
        Ok(ConsoleAdmin(user))
    }
}

/// A form posted by a signed-in user: the origin is checked and the form's
/// `csrf` field must be the session's token, else 403 and nothing changes.
pub struct Posted {
    pub user: ConsoleUser,
    pub form: HashMap<String, String>,
}

impl Posted {
    pub fn get(&self, name: &str) -> &str {
        self.form.get(name).map(String::as_str).unwrap_or("")
    }

    /// A trimmed field, `None` when empty.
    pub fn opt(&self, name: &str) -> Option<String> {
        Some(self.get(name).trim().to_string()).filter(|s| !s.is_empty())
    }
}

pub fn forbidden_cross_site() -> ConsoleError {
    ConsoleError::new(
        StatusCode::FORBIDDEN,
        "This request did not come from a console page of this site; nothing was changed.",
    )
}

pub async fn read_form(req: Request) -> Result<Vec<(String, String)>, ConsoleError> {
    let bytes = crate::http::extract::read_body(req).await?;
    serde_urlencoded::from_bytes(&bytes)
        .map_err(|_| ConsoleError::new(StatusCode::BAD_REQUEST, "The form could not be read."))
}

impl FromRequest<AppState> for Posted {
    type Rejection = Response;
    async fn from_request(req: Request, app: &AppState) -> Result<Self, Response> {
        if !origin_allowed(req.headers()) {
            return Err(forbidden_cross_site().into_response());
        }
        let (mut parts, body) = req.into_parts();
        let user = ConsoleUser::from_request_parts(&mut parts, app).await?;
        let all = read_form(Request::from_parts(parts, body))
            .await
            .map_err(IntoResponse::into_response)?;
        let form: HashMap<String, String> = all.into_iter().collect();
        let token = form.get("csrf").map(String::as_str).unwrap_or("");
        if !console::csrf_matches(&user.session, token) {
            return Err(forbidden_cross_site().into_response());
        }
        Ok(Posted { user, form })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn origin_check_refuses_other_sites() {
        assert!(origin_allowed(&headers(&[("host", "gw.example:8080")])));
        assert!(origin_allowed(&headers(&[
            ("host", "gw.example:8080"),
            ("origin", "http://gw.example:8080"),
            ("sec-fetch-site", "same-origin"),
        ])));
        assert!(!origin_allowed(&headers(&[
            ("host", "gw.example:8080"),
            ("origin", "http://evil.example"),
        ])));
        assert!(!origin_allowed(&headers(&[
            ("host", "gw.example:8080"),
            ("sec-fetch-site", "cross-site"),
        ])));
        assert!(!origin_allowed(&headers(&[
            ("host", "gw.example:8080"),
            ("origin", "null"),
        ])));
    }

    #[test]
    fn cookie_flags_follow_the_scheme() {
        let plain = set_cookie(SESSION_COOKIE, "v", 60, false);
        assert!(plain.contains("HttpOnly") && plain.contains("SameSite=Lax"));
        assert!(!plain.contains("Secure"));
        assert!(set_cookie(SESSION_COOKIE, "v", 60, true).ends_with("; Secure"));
        assert!(came_over_https(&headers(&[("x-forwarded-proto", "https")])));
        assert!(!came_over_https(&headers(&[("x-forwarded-proto", "http")])));
    }
}
