//! Single sign-on routes: admin management of providers, the public list,
//! the browser redirects (authorize, callback) and the agent apps' code
//! exchange. The rules live in `crate::sso`; this file parses and renders.

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::AppState;
use crate::error::{Error, Result};
use crate::http::console::{
    came_over_https, cookie as console_cookie, set_cookie as console_set_cookie, SESSION_COOKIE,
};
use crate::http::extract::{read_body, AdminUser, ApiJson};
use crate::http::routes::users::login_response;
use crate::runtime::Invalidation;
use crate::sso::settings::callback_url;
use crate::sso::{AppRequest, CallbackParams, NewSsoProvider, SsoProviderPatch};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_provider, list_providers))
        .routes(routes!(get_provider, patch_provider, delete_provider))
        .routes(routes!(public_list))
        .routes(routes!(authorize))
        .routes(routes!(callback))
        .routes(routes!(token))
}

/// Add an SSO provider; its discovery document is read and checked first.
#[utoipa::path(post, path = "/api/admin/sso", tag = "sso", request_body = NewSsoProvider,
    responses((status = 201, description = "The provider, without client_secret"),
              (status = 400, description = "validation_error or sso_discovery_failed"),
              (status = 409, description = "sso_provider_exists")))]
async fn create_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    ApiJson(body): ApiJson<NewSsoProvider>,
) -> Result<impl IntoResponse> {
    let p = app.sso.add(&app.store, &body).await?;
    Ok((StatusCode::CREATED, Json(p.view(&app.public_url))))
}

/// List SSO providers.
#[utoipa::path(get, path = "/api/admin/sso", tag = "sso",
    responses((status = 200, description = "The providers, without client secrets")))]
async fn list_providers(
    State(app): State<AppState>,
    _admin: AdminUser,
) -> Result<impl IntoResponse> {
    let list = app.sso.list(&app.store).await?;
    Ok(Json(
        list.iter()
            .map(|p| p.view(&app.public_url))
            .collect::<Vec<_>>(),
    ))
}

/// One SSO provider.
#[utoipa::path(get, path = "/api/admin/sso/{name}", tag = "sso", params(("name" = String, Path)),
    responses((status = 200, description = "The provider, without client_secret"),
              (status = 404, description = "sso_provider_not_found")))]
async fn get_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let list = app.sso.list(&app.store).await?;
    list.iter()
        .find(|p| p.name == name)
        .map(|p| Json(p.view(&app.public_url)))
        .ok_or_else(|| crate::sso::SsoError::NotFound(name).into())
}

/// Change an SSO provider; a new issuer is discovered before it is kept.
#[utoipa::path(patch, path = "/api/admin/sso/{name}", tag = "sso", params(("name" = String, Path)),
    request_body = SsoProviderPatch,
    responses((status = 200, description = "The provider, without client_secret"),
              (status = 400, description = "validation_error or sso_discovery_failed"),
              (status = 404, description = "sso_provider_not_found")))]
async fn patch_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<SsoProviderPatch>,
) -> Result<impl IntoResponse> {
    let p = app.sso.patch(&app.store, &name, &body).await?;
    Ok(Json(p.view(&app.public_url)))
}

/// Remove an SSO provider. Users it created stay.
#[utoipa::path(delete, path = "/api/admin/sso/{name}", tag = "sso", params(("name" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 404, description = "sso_provider_not_found")))]
async fn delete_provider(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    app.sso.delete(&app.store, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The SSO providers one can sign in with (for login pages and apps).
#[utoipa::path(get, path = "/api/auth/sso", tag = "sso",
    responses((status = 200, description = "[{name, display_name}]")))]
async fn public_list(State(app): State<AppState>) -> Result<impl IntoResponse> {
    let list = app.sso.list(&app.store).await?;
    Ok(Json(
        list.iter()
            .map(|p| json!({"name": p.name, "display_name": p.display_name}))
            .collect::<Vec<_>>(),
    ))
}

#[derive(Deserialize)]
struct AuthorizeQuery {
    redirect_uri: Option<String>,
    state: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
}

fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// Start a sign-in at the provider (302). Apps add `redirect_uri`, `state`,
/// `code_challenge` and `code_challenge_method=S256` (RFC 8252).
#[utoipa::path(get, path = "/api/auth/sso/{name}/authorize", tag = "sso",
    params(("name" = String, Path),
           ("redirect_uri" = Option<String>, Query, description = "An app's loopback or registered redirect URI"),
           ("state" = Option<String>, Query, description = "The app's own state, given back with the code"),
           ("code_challenge" = Option<String>, Query, description = "PKCE S256 challenge; required with redirect_uri"),
           ("code_challenge_method" = Option<String>, Query, description = "S256")),
    responses((status = 302, description = "To the identity provider"),
              (status = 400, description = "invalid_redirect_uri (no redirect) or validation_error"),
              (status = 403, description = "sso_denied (the provider cannot be reached)"),
              (status = 404, description = "sso_provider_not_found")))]
async fn authorize(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let html = wants_html(&headers);
    let q: AuthorizeQuery = match serde_urlencoded::from_str(query.as_deref().unwrap_or("")) {
        Ok(q) => q,
        Err(e) => {
            return page_or_json(
                Error::validation("query", format!("The query could not be read: {e}.")),
                html,
            )
        }
    };
    let app_request = q.redirect_uri.map(|redirect_uri| AppRequest {
        redirect_uri,
        state: q.state,
        code_challenge: q.code_challenge,
        code_challenge_method: q.code_challenge_method,
    });
    let callback = callback_url(&app.public_url, &name);
    let browser = app_request.is_none();
    match app
        .sso
        .start(&app.store, &name, &callback, app_request.as_ref())
        .await
    {
        Ok(url) => {
            let mut resp = redirect(&url);
            // A browser sign-in ends in a console session: bind it to this
            // browser, so a callback link sent by someone else signs no one in.
            if browser {
                if let Some(state) = query_param(&url, "state") {
                    let c = state_cookie(&state, 600, came_over_https(&headers));
                    if let Ok(v) = c.parse() {
                        resp.headers_mut().append(axum::http::header::SET_COOKIE, v);
                    }
                }
            }
            resp
        }
        Err(e) => page_or_json(e.into(), html),
    }
}

/// The cookie that binds a browser sign-in to the browser that started it.
const STATE_COOKIE: &str = "gatehouse_sso_state";

fn state_cookie(state: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{STATE_COOKIE}={state}; Path=/api/auth/sso; Max-Age={max_age_s}; HttpOnly; SameSite=Lax{}",
        if secure { "; Secure" } else { "" }
    )
}

fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

#[derive(Deserialize)]
struct CallbackQuery {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// Where the identity provider sends the browser back. Apps: 302 to their
/// redirect URI with a one-time `gtc_` code; browsers: a page saying who signed in.
#[utoipa::path(get, path = "/api/auth/sso/{name}/callback", tag = "sso",
    params(("name" = String, Path),
           ("state" = Option<String>, Query), ("code" = Option<String>, Query),
           ("error" = Option<String>, Query), ("error_description" = Option<String>, Query)),
    responses((status = 200, description = "Signed in (browser)"),
              (status = 302, description = "To the app's redirect URI with code and state"),
              (status = 403, description = "sso_denied, with the reason"),
              (status = 404, description = "sso_provider_not_found")))]
async fn callback(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let html = wants_html(&headers);
    // Whatever the provider sent, a malformed query is one more failed check.
    let q: CallbackQuery =
        serde_urlencoded::from_str(query.as_deref().unwrap_or("")).unwrap_or(CallbackQuery {
            state: None,
            code: None,
            error: Some("invalid_request".into()),
            error_description: Some("the callback's query could not be read".into()),
        });
    let params_state = q.state.clone();
    let params = CallbackParams {
        state: q.state,
        code: q.code,
        error: q.error,
        error_description: q.error_description,
    };
    let callback = callback_url(&app.public_url, &name);
    let signed_in = match app
        .sso
        .callback(&app.store, &name, &callback, &params)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            if let crate::sso::SsoError::Denied(m) = &e {
                tracing::info!(provider = %name, reason = %without_emails(m), "SSO sign-in denied");
            }
            return page_or_json(e.into(), html);
        }
    };
    if signed_in.admin_changed {
        app.invalidate(Invalidation::User(signed_in.user.id.clone()))
            .await;
    }
    tracing::info!(provider = %name, user_id = %signed_in.user.id, created = signed_in.created, "SSO sign-in");
    if let Some(url) = signed_in.app_redirect {
        return redirect(&url);
    }
    // The browser flow: only the browser that started it, then into the console.
    let bound = params_state
        .as_deref()
        .zip(console_cookie(&headers, STATE_COOKIE))
        .is_some_and(|(state, cookie)| crate::auth::ct_eq(state, &cookie));
    if !bound {
        return page_or_json(
            Error::forbidden(
                "sso_denied",
                "This sign-in was not started in this browser; start it again from the console.",
            ),
            html,
        );
    }
    let started = match crate::auth::console::start(&app.auth, &signed_in.user.id).await {
        Ok(s) => s,
        Err(e) => return page_or_json(e, html),
    };
    let secure = came_over_https(&headers);
    // Under the public URL, which may carry a path prefix.
    let mut resp = redirect(&format!(
        "{}/console/",
        app.public_url.trim_end_matches('/')
    ));
    for c in [
        console_set_cookie(SESSION_COOKIE, &started.secret, started.lifetime_s, secure),
        state_cookie("", 0, secure),
    ] {
        if let Ok(v) = c.parse() {
            resp.headers_mut().append(axum::http::header::SET_COOKIE, v);
        }
    }
    resp
}

#[derive(Deserialize, ToSchema)]
pub struct TokenRequest {
    /// The `gtc_` code from the redirect.
    code: Option<String>,
    /// The PKCE verifier whose S256 challenge was sent to authorize.
    code_verifier: Option<String>,
    /// The same redirect URI as sent to authorize.
    redirect_uri: Option<String>,
    /// Accepted for OAuth clients that send it; only `authorization_code` is valid.
    grant_type: Option<String>,
}

/// Exchange an app's `gtc_` code for a login token (JSON or form body).
#[utoipa::path(post, path = "/api/auth/sso/token", tag = "sso", request_body = TokenRequest,
    responses((status = 200, description = "The login-token JSON of /api/auth/jwt/login"),
              (status = 400, description = "invalid_grant or validation_error")))]
async fn token(State(app): State<AppState>, req: Request) -> Result<Response> {
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
    let bytes = read_body(req).await?;
    let body: TokenRequest = if is_form {
        serde_urlencoded::from_bytes(&bytes)
            .map_err(|e| Error::validation("body", format!("The form could not be read: {e}.")))?
    } else {
        crate::wire::json::parse_json(&bytes)?
    };
    if body
        .grant_type
        .as_deref()
        .is_some_and(|g| g != "authorization_code")
    {
        return Err(Error::validation(
            "grant_type",
            "'grant_type' must be authorization_code (or left out).",
        ));
    }
    let field = |v: Option<String>, name: &str| {
        v.filter(|s| !s.is_empty())
            .ok_or_else(|| Error::validation(name, format!("'{name}' is required.")))
    };
    let code = field(body.code, "code")?;
    let verifier = field(body.code_verifier, "code_verifier")?;
    let redirect_uri = field(body.redirect_uri, "redirect_uri")?;
    let user = app
        .sso
        .exchange(&app.store, &code, &verifier, &redirect_uri)
        .await?;
    let mut resp = Json(login_response(&app, &user.id)).into_response();
    // A token response must not be kept by caches (RFC 6749, 5.1).
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

fn redirect(url: &str) -> Response {
    match HeaderValue::from_str(url) {
        Ok(v) => {
            let mut resp = StatusCode::FOUND.into_response();
            resp.headers_mut().insert(header::LOCATION, v);
            resp.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        Err(_) => {
            Error::internal(format!("redirect URL is not a header value: {url}")).into_response()
        }
    }
}

/// Browsers get a page that says what happened; everything else the JSON error.
fn page_or_json(e: Error, html: bool) -> Response {
    if !html {
        return e.into_response();
    }
    let title = if e.code == "sso_denied" {
        "Sign-in refused"
    } else {
        "Sign-in failed"
    };
    let body = format!(
        "<p>{}</p><p><small>Error code: {}</small></p>",
        escape(&e.message),
        escape(&e.code)
    );
    let status = crate::http::edge::error::status_of(e.kind);
    let mut resp = html_page(status, title, &body);
    // The access log and metrics read the error from here, as for JSON errors.
    resp.extensions_mut().insert(e);
    resp
}

fn html_page(status: StatusCode, title: &str, body: &str) -> Response {
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} - Gatehouse</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}}</style>\
         </head><body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    );
    let mut resp = (status, page).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // No script may run here, whatever a provider put in a message.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// A refusal's reason for the log: e-mail addresses left out (they are personal data).
fn without_emails(s: &str) -> String {
    s.split(' ')
        .map(|w| if w.contains('@') { "<e-mail>" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_reasons_leave_out_email_addresses() {
        assert_eq!(
            without_emails("The account ann@example.com. is disabled."),
            "The account <e-mail> is disabled."
        );
    }

    #[test]
    fn html_escape_covers_markup_characters() {
        assert_eq!(
            escape("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
    }
}
