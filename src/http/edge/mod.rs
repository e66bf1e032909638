//! The edge every request passes, in this order: the request id, the access
//! line, the route group's body limit, the trace, the contract's error shape
//! for `/v1/...`, and the metrics. One layer, not five: each `from_fn` layer
//! costs a boxed service and a boxed future per request. Its parts are the
//! files beside this one.

pub mod access;
pub mod error;
pub mod metrics;
pub mod trace;

use std::future::Future;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;
use crate::http::extract::{self, BodyLimit};
use crate::runtime::request::X_REQUEST_ID;

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
pub(crate) async fn edge(
    axum::extract::State(app): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    edged(app, req, None, |req| next.run(req)).await
}

/// [`edge`] around `inner`; `direct` names the route of a request dispatched
/// before the router ([`Dispatch`]).
pub(crate) async fn edged<F, Fut>(
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
    let request_id = id.clone();
    let anthropic_version = req
        .headers()
        .get(crate::models::upstream::ANTHROPIC_VERSION_HEADER)
        .cloned();
    let span =
        tracing::info_span!("request", id = ?id, method = %req.method(), path = %req.uri().path());
    // The rest runs inside the request's id and span.
    let served = async move {
        let route = access::Route::of(&req, direct);
        let access = access::Access::begin(&mut req, route);
        let path = req.uri().path();
        let v1 = path.starts_with("/v1/") || path == "/v1";
        let anthropic = error::anthropic_dialect(&req);
        if anthropic {
            error::anthropic_credential(&mut req);
            req.extensions_mut().insert(error::AnthropicDialect);
        }
        let path = req.uri().path();
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
        if anthropic {
            resp = error::render_anthropic(resp, &request_id);
        } else if v1 {
            resp = error::render_openai(resp);
        }
        access.finish(&resp, |provider| {
            let catalog = app.catalog();
            let p = catalog.providers.iter().find(|p| p.name == provider)?;
            crate::models::adapters::chat_adapter(p.kind).map(|a| a.upstream_api())
        });
        resp
    };
    // Instrument the future (a guard held across .await would leak the span to other tasks).
    let served = crate::models::upstream::CLIENT_ANTHROPIC_VERSION.scope(anthropic_version, served);
    let mut resp = crate::runtime::request::REQUEST_ID
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
            // Time-ordered (v7): the usage records' index on the request id
            // then grows at its end, where a random id wrote a page of its
            // own into the database for every request (issue 34's index).
            let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let text = uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buf);
            HeaderValue::from_str(text).unwrap_or(HeaderValue::from_static("unknown"))
        });
    req.headers_mut().insert(X_REQUEST_ID, id.clone());
    id
}
