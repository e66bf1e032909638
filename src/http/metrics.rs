//! The metrics middleware: counts each request by method, route template and
//! status, and times it. The registry itself is `runtime::metrics`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
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
    let method = req.method().to_string();
    let resp = next.run(req).await;
    app.metrics.observe(
        &method,
        &route,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64() * 1000.0,
    );
    resp
}
