//! The web console at `/console/`: server-rendered pages (maud escapes every
//! value it writes, so whatever a device sent is shown as text), a cookie
//! session, a CSRF token on every form, and a Content-Security-Policy that
//! allows no inline script. The rules live in the domain modules and in the
//! admin API's shared functions; this module only reads forms and renders.

mod admin;
mod charts;
mod forms;
mod guard;
mod html;
mod layout;
mod limits;
mod mcp;
mod models;
mod prices;
mod sso;
mod user;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::app::AppState;

pub use guard::{came_over_https, cookie, origin_allowed, set_cookie, CSP, SESSION_COOKIE};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { axum::response::Redirect::to("/console/") }),
        )
        .route("/console/", get(admin::home))
        .route("/console/login", get(user::login_page).post(user::login))
        .route("/console/logout", post(user::logout))
        .route("/console/static/console.css", get(css))
        .route("/console/static/favicon.svg", get(favicon))
        .route("/console/keys", get(user::keys).post(user::create_key))
        .route("/console/keys/{id}/delete", post(user::delete_key))
        .route("/console/sign-ins", get(user::sign_ins))
        .route("/console/sign-ins/{device}/end", post(user::end_sign_in))
        .route(
            "/console/admin/users",
            get(admin::users).post(admin::create_user),
        )
        .route("/console/admin/users/password", post(admin::set_password))
        .route("/console/admin/users/{id}", post(admin::change_user))
        .route(
            "/console/keys/{id}/limits",
            get(limits::key_limits).post(limits::set_key_limits),
        )
        .route(
            "/console/admin/users/{id}/limits",
            get(limits::user_limits).post(limits::set_user_limits),
        )
        .route(
            "/console/admin/models",
            get(models::models).post(models::create_model),
        )
        .route(
            "/console/admin/models/{id}",
            get(models::model).post(models::change_model),
        )
        .route(
            "/console/admin/models/{id}/delete",
            post(models::delete_model),
        )
        .route("/console/admin/providers", post(models::create_provider))
        .route(
            "/console/admin/providers/{name}/responses",
            post(models::set_provider_responses),
        )
        .route(
            "/console/admin/providers/{name}/delete",
            post(models::delete_provider),
        )
        .route("/console/admin/sso", get(sso::providers).post(sso::create))
        .route("/console/admin/sso/{name}/delete", post(sso::delete))
        .route(
            "/console/admin/agents",
            get(admin::agents).post(admin::create_agent),
        )
        .route(
            "/console/admin/agents/{address}",
            get(admin::agent).post(admin::change_agent),
        )
        .route("/console/admin/agents/{address}/events", get(admin::events))
        .route(
            "/console/admin/agents/{address}/limits",
            get(limits::agent_limits).post(limits::set_agent_limits),
        )
        .route(
            "/console/admin/agents/{address}/tools/{name}/{decision}",
            post(admin::decide_tool),
        )
        .route(
            "/console/admin/agents/{address}/approvals/{id}/{decision}",
            post(admin::decide_approval),
        )
        .route("/console/admin/sign-ins", get(admin::sign_ins))
        .route(
            "/console/admin/sign-ins/{device}/end",
            post(admin::end_sign_in),
        )
        .route("/console/admin/mcp", get(mcp::servers).post(mcp::create))
        .route(
            "/console/admin/mcp/{name}",
            get(mcp::server).post(mcp::change),
        )
        .route("/console/admin/mcp/{name}/delete", post(mcp::delete))
        .route(
            "/console/keys/{id}/mcp",
            get(mcp::key_grant).post(mcp::set_key_grant),
        )
        .route(
            "/console/admin/users/{id}/mcp",
            get(mcp::user_grant).post(mcp::set_user_grant),
        )
        .route("/console/admin/usage", get(admin::usage))
        .route("/console/admin/usage.csv", get(admin::usage_csv))
        .route(
            "/console/admin/prices",
            get(prices::prices).post(prices::set),
        )
        .route("/console/admin/prices/end", post(prices::end))
        .route("/console/admin/prices/history", get(prices::history))
        .route("/console/{*rest}", get(not_found))
        .layer(middleware::from_fn(security_headers))
}

/// Unknown console paths get a page, not the API's JSON.
async fn not_found() -> guard::ConsoleError {
    guard::ConsoleError::new(
        axum::http::StatusCode::NOT_FOUND,
        "There is no such console page.",
    )
}

const CSS: &str = include_str!("static/console.css");
const FAVICON: &str = include_str!("static/favicon.svg");

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        CSS,
    )
}

async fn favicon() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        FAVICON,
    )
}

/// Headers on every console answer: the CSP (no inline script, no framing,
/// forms post only here), no sniffing, no referrer beyond this origin, and
/// pages (which hold CSRF tokens and once a new key) never cached.
async fn security_headers(req: Request, next: Next) -> Response {
    let is_static = req.uri().path().starts_with("/console/static/");
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !is_static {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}
