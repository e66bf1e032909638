//! What every server answers without a credential: health, readiness,
//! version, the request id, and the Prometheus metrics.

use crate::common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn health_ready_version_and_request_id_are_served() {
    let app = spawn_app().await;
    let r = app.client.get(app.u("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-request-id"));
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    let r = app.client.get(app.u("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = app
        .client
        .get(app.u("/api/version"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "abc-123");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
}

#[tokio::test]
async fn the_version_served_is_the_newest_release_of_the_changelog() {
    let app = spawn_app().await;
    let v: Value = app
        .client
        .get(app.u("/api/version"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["version"], newest_release());
    let doc: Value = app
        .client
        .get(app.u("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["version"], newest_release());
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_status() {
    let app = spawn_app().await;
    app.client.get(app.u("/healthz")).send().await.unwrap();
    app.login(ADMIN_EMAIL, "wrong-password").await;
    let text = app
        .client
        .get(app.u("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(
            r#"gatehouse_http_requests_total{method="GET",route="/healthz",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"route="/api/auth/jwt/login",status="400"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_http_request_duration_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_usage_records_dropped_total 0"),
        "{text}"
    );
}
