//! Health, readiness, metrics and version.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::AppState;
use crate::error::{Error, Result};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(version))
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, description = "Up")))]
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses((status = 200, description = "Ready"), (status = 503, description = "The database does not answer")))]
async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    let ping = tokio::time::timeout(std::time::Duration::from_secs(2), app.store.ping()).await;
    if matches!(ping, Ok(true)) {
        (
            StatusCode::OK,
            Json(json!({"status": "ready", "database": "ok"})),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "database": "unreachable"})),
        )
    }
}

/// Prometheus text.
#[utoipa::path(get, path = "/metrics", tag = "system", responses((status = 200, description = "Prometheus text format")))]
async fn metrics(State(app): State<AppState>, headers: HeaderMap) -> Result<impl IntoResponse> {
    if let Some(want) = &app.settings.metrics_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        // Compared as hashes: constant time whatever the lengths.
        if !crate::auth::ct_eq(
            &crate::auth::sha256_hex(given),
            &crate::auth::sha256_hex(want),
        ) {
            return Err(Error::unauthorized(
                "invalid_token",
                "/metrics needs Authorization: Bearer <GATEHOUSE_METRICS_TOKEN>.",
            ));
        }
    }
    let c = &app.usage.counters;
    let mut body = app.metrics.render(&[
        (
            "gatehouse_usage_records_written_total",
            "Usage records written.",
            c.written.load(Ordering::Relaxed),
        ),
        (
            "gatehouse_usage_records_dropped_total",
            "Usage records refused because the writer's queue was full.",
            c.dropped.load(Ordering::Relaxed),
        ),
        (
            "gatehouse_usage_records_failed_total",
            "Usage records the database refused after retries.",
            c.failed.load(Ordering::Relaxed),
        ),
    ]);
    app.routing.stats.render(&mut body);
    app.mcp_gateway.metrics.render(&mut body);
    c.spend.render(&mut body);
    crate::wire::translation_dropped::render(&mut body);
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    ))
}

/// The server version; agent routes exist from 0.5.0 on.
#[utoipa::path(get, path = "/api/version", tag = "system", responses((status = 200, description = "Version")))]
async fn version() -> impl IntoResponse {
    Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}
