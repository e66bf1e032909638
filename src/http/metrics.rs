//! The metrics middleware: counts each request by method, route template and
//! status, and times it. The registry itself is `runtime::metrics`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;

pub async fn track(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = method_label(req.method());
    let resp = next.run(req).await;
    app.metrics.observe(
        method,
        &route,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64() * 1000.0,
    );
    resp
}

/// The method as a metrics label: one of a fixed set, so made-up methods
/// cannot grow `/metrics` without bound.
pub fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_methods_fold_into_other() {
        assert_eq!(method_label(&Method::POST), "POST");
        assert_eq!(method_label(&Method::TRACE), "other");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
        assert_eq!(method_label(&Method::from_bytes(b"GET2").unwrap()), "other");
    }
}
