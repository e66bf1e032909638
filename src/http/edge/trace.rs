//! The SERVER span of each request (when traces are on; see
//! `crate::telemetry`). It covers the whole answer: for a stream it ends
//! when the body is done or dropped.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;

use crate::http::edge::access::Route;
use crate::telemetry;

/// Runs the rest of the request (after the request id is set), in its
/// SERVER span when traces are on. Part of the request-id middleware rather
/// than a layer of its own: off, it costs one check.
pub async fn run<F, Fut>(req: Request, route: Option<&Route>, next: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    if !telemetry::enabled() {
        return next(req).await;
    }
    let route = route.map(|r| r.as_str().to_string());
    let request_id = req
        .headers()
        .get(crate::runtime::request::X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(cx) = telemetry::server_span(
        req.headers(),
        req.method().as_str(),
        route.as_deref(),
        req.uri().path(),
        request_id,
    ) else {
        return next(req).await;
    };
    let resp = telemetry::scope(Some(cx.clone()), next(req)).await;
    telemetry::server_status(&cx, resp.status().as_u16());
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Body::new(SpanBody { inner: body, cx }))
}

/// The response body, ending the request's span when it is dropped.
struct SpanBody {
    inner: Body,
    cx: telemetry::SpanContext,
}

impl http_body::Body for SpanBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for SpanBody {
    fn drop(&mut self) {
        telemetry::end(&self.cx, None);
    }
}
