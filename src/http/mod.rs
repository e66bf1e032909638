//! The HTTP surface: router, middleware (request ids, body limits, metrics,
//! error shapes) and thin handlers that call into the domain modules.

pub mod access;
pub mod admin;
pub mod admin_models;
pub mod admission;
pub mod agent_auth;
pub mod agent_chat;
pub mod agent_data;
pub mod agents;
pub mod console;
pub mod error;
pub mod extract;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod serve;
pub mod signins;
pub mod sso;
pub mod system;
pub mod trace;
pub mod usage;
pub mod users;
pub mod v1;

use std::future::Future;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use futures_util::FutureExt;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::app::AppState;
use crate::error::{Error, ErrorKind};
use crate::models::upstream::X_REQUEST_ID;
use extract::BodyLimit;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gatehouse",
        description = "A gateway for language models: agent apps and OpenAI-compatible backends."
    ),
    components(schemas(crate::http::users::LoginForm))
)]
pub struct ApiDoc;

/// Every route, registered through `OpenApiRouter` so `/openapi.json` is
/// generated from the same code that serves.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(system::routes())
        .merge(users::routes())
        .merge(admin::routes())
        .merge(admin_models::routes())
        .merge(usage::routes())
        .merge(v1::routes())
        .merge(agents::routes())
        .merge(agent_data::routes())
        .merge(agent_chat::routes())
        .merge(signins::routes())
        .merge(limits::routes())
        .merge(sso::routes())
}

/// The document `/openapi.json` serves (see [`openapi`]).
pub fn openapi_document() -> serde_json::Value {
    let (_, mut api) = routes().split_for_parts();
    api.info.version = env!("CARGO_PKG_VERSION").to_string();
    let mut doc = serde_json::to_value(&api).unwrap_or_default();
    openapi::complete(&mut doc);
    doc
}

/// What each connection calls: the model routes dispatched by their exact
/// path before the router (its route lookup, boxed service clones and
/// middleware plumbing cost a chat request about 14 allocations and a few
/// µs; see docs/performance.md), inside the same [`edge`]; every other
/// request goes through the router.
#[derive(Clone)]
pub struct Dispatch {
    router: Router,
    app: AppState,
}

impl Dispatch {
    pub fn new(app: AppState) -> Dispatch {
        Dispatch {
            router: router(app.clone()),
            app,
        }
    }

    pub fn call(&self, req: Request) -> impl Future<Output = Response> + Send + 'static {
        use futures_util::future::Either;
        match direct_route(&req) {
            Some((route, handler)) => {
                let app = self.app.clone();
                Either::Left(edged(app.clone(), req, Some(route), move |req| {
                    handler(req, app)
                }))
            }
            None => Either::Right(
                tower::ServiceExt::oneshot(self.router.clone(), req)
                    .map(|r| r.unwrap_or_else(|never| match never {})),
            ),
        }
    }
}

/// A route's handler called without the router.
type Direct = fn(Request, AppState) -> std::pin::Pin<Box<dyn Future<Output = Response> + Send>>;

/// The route template and handler of a request [`Dispatch`] serves itself.
/// Only exact paths and `POST`: anything else (another method, a trailing
/// slash) goes to the router, which answers it as before.
fn direct_route(req: &Request) -> Option<(&'static str, Direct)> {
    if req.method() != axum::http::Method::POST {
        return None;
    }
    v1::direct_route(req.uri().path()).or_else(|| agent_chat::direct_route(req))
}

pub fn router(state: AppState) -> Router {
    let (router, _) = routes().split_for_parts();
    let api = std::sync::Arc::new(openapi_document());
    router
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let api = std::sync::Arc::clone(&api);
                async move { axum::Json(api.as_ref().clone()) }
            }),
        )
        .merge(console::router())
        .fallback(|| async { Error::not_found("not_found", "There is no such route.") })
        .method_not_allowed_fallback(|| async {
            Error::new(
                ErrorKind::MethodNotAllowed,
                "method_not_allowed",
                "This route does not take that method.",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state)
}

/// The body limit of each route group, from the contract.
pub fn body_limit_for(path: &str, max_body_bytes: usize) -> BodyLimit {
    if path.starts_with("/v1/agents/") && path.ends_with("/manifest") {
        BodyLimit {
            bytes: 512 * 1024,
            code: "manifest_too_large",
            timeout: extract::DEFAULT_BODY_TIMEOUT,
        }
    } else if path.starts_with("/v1/agents/") && path.ends_with("/events") {
        BodyLimit {
            bytes: 2 * 1024 * 1024,
            code: "payload_too_large",
            timeout: extract::DEFAULT_BODY_TIMEOUT,
        }
    } else if path.starts_with("/v1/") {
        BodyLimit {
            bytes: max_body_bytes,
            code: "payload_too_large",
            timeout: extract::DEFAULT_BODY_TIMEOUT,
        }
    } else {
        BodyLimit {
            bytes: 1024 * 1024,
            code: "payload_too_large",
            timeout: extract::DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// Per request, in this order: the request id, the access line, the route
/// group's body limit, the contract's error shape for `/v1/...`, and the
/// metrics. One layer, not five: each `from_fn` layer costs a boxed service
/// and a boxed future per request.
async fn edge(
    axum::extract::State(app): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    edged(app, req, None, |req| next.run(req)).await
}

/// [`edge`] around `inner`; `direct` names the route of a request dispatched
/// before the router ([`Dispatch`]).
async fn edged<F, Fut>(
    app: AppState,
    mut req: Request,
    direct: Option<&'static str>,
    inner: F,
) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let id = request_id(&mut req);
    let span =
        tracing::info_span!("request", id = ?id, method = %req.method(), path = %req.uri().path());
    // The rest runs inside the request's id and span.
    let served = async move {
        let route = access::Route::of(&req, direct);
        let access = access::Access::begin(&mut req, route);
        let path = req.uri().path();
        let v1 = path.starts_with("/v1/") || path == "/v1";
        let mut limit = body_limit_for(path, app.settings.max_body_bytes);
        limit.timeout = std::time::Duration::from_secs(app.settings.body_timeout_s);
        req.extensions_mut().insert(limit);
        let method = metrics::method_label(req.method());
        let started = std::time::Instant::now();
        let mut resp = trace::run(req, access.matched(), inner).await;
        app.metrics.observe(
            method,
            access.route_label(),
            resp.status().as_u16(),
            started.elapsed().as_secs_f64() * 1000.0,
        );
        if v1 {
            resp = error::render_openai(resp);
        }
        access.finish(&resp);
        resp
    };
    // Instrument the future (a guard held across .await would leak the span to other tasks).
    let mut resp = crate::models::upstream::REQUEST_ID
        .scope(id.clone(), tracing::Instrument::instrument(served, span))
        .await;
    resp.headers_mut().insert(X_REQUEST_ID, id);
    resp
}

/// The client's `x-request-id` (1 to 200 bytes), or a new one; set on the
/// request for what follows, and echoed on the response by [`edge`].
fn request_id(req: &mut Request) -> HeaderValue {
    let id = req
        .headers()
        .get(X_REQUEST_ID)
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .cloned()
        .unwrap_or_else(|| {
            let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let text = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
            HeaderValue::from_str(text).unwrap_or(HeaderValue::from_static("unknown"))
        });
    req.headers_mut().insert(X_REQUEST_ID, id.clone());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template of the route `Dispatch` serves itself, or `None` for the router.
    fn direct(method: &str, path: &str) -> Option<&'static str> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .expect("a request");
        direct_route(&req).map(|(route, _)| route)
    }

    #[test]
    fn model_and_agent_chat_routes_skip_the_router_and_their_near_misses_do_not() {
        for path in ["/v1/chat/completions", "/v1/embeddings", "/v1/rerank"] {
            assert_eq!(direct("POST", path), Some(path));
        }
        let agent = "/v1/agents/{agent}/chat/completions";
        assert_eq!(
            direct("POST", "/v1/agents/bot@acme/chat/completions"),
            Some(agent)
        );
        assert_eq!(
            direct("POST", "/v1/agents/bot%40acme/chat/completions"),
            Some(agent)
        );
        for (method, path) in [
            ("GET", "/v1/chat/completions"),
            ("PUT", "/v1/embeddings"),
            ("POST", "/v1/chat/completions/"),
            ("POST", "/v1/chat/completion"),
            ("POST", "/v1/rerank/x"),
            ("POST", "/v1/models"),
            ("GET", "/v1/agents/bot@acme/chat/completions"),
            ("POST", "/v1/agents/bot@acme/chat/completions/"),
            ("POST", "/v1/agents/bot@acme/manifest"),
            ("POST", "/v1/agents//chat/completions"),
            ("POST", "/v1/agents/a/b/chat/completions"),
            ("POST", "/v1/agents/%FF/chat/completions"),
        ] {
            assert_eq!(direct(method, path), None, "{method} {path}");
        }
    }
}
