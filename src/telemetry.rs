//! Traces: OpenTelemetry over OTLP, set up by the standard `OTEL_*`
//! variables (docs/operations.md).
//!
//! * Off unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it is) or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended) is set. Off means
//!   no exporter, no connection, no warning, and no OTel span is ever made:
//!   every entry point below first checks [`enabled`] (one atomic load).
//! * `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: `http/protobuf` (default) or
//!   `http/json`. `OTEL_SERVICE_NAME` (default `gatehouse`),
//!   `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_BSP_*`,
//!   `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` and `..._TIMEOUT` are read by the
//!   SDK itself.
//! * Spans are batched and exported from the SDK's own thread, so a slow or
//!   unreachable collector never holds up a request; a full queue drops
//!   spans. The SDK's own logging is compiled out (default features off):
//!   the first failed export writes one warning, later ones nothing.
//!
//! This module knows nothing of the rest of the crate: the HTTP layer makes
//! the SERVER span ([`server_span`]), the model calls make one CLIENT span
//! per upstream attempt ([`client_span`]) and put its `traceparent` on the
//! upstream request ([`inject`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

pub use opentelemetry::Context as SpanContext;

struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();

/// Whether traces are exported (set once at start).
#[inline]
pub fn enabled() -> bool {
    TRACING.get().is_some()
}

/// Where and how to export, from the variables.
#[derive(Debug, PartialEq, Eq)]
pub struct ExportSettings {
    pub endpoint: String,
    pub json: bool,
    pub service_name: String,
}

/// The export settings the variables ask for: None when traces are off;
/// an error (to warn about) when they ask for something not supported.
pub fn settings_from(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<ExportSettings>, String> {
    let var = |k: &str| {
        get(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let endpoint = match (
        var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        var("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(full), _) => full,
        (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
        (None, None) => return Ok(None),
    };
    let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    let json = match protocol.as_str() {
        "http/protobuf" => false,
        "http/json" => true,
        other => {
            return Err(format!(
                "traces are not exported: OTEL_EXPORTER_OTLP_PROTOCOL {other:?} is not supported (use http/protobuf or http/json)"
            ))
        }
    };
    let service_name = var("OTEL_SERVICE_NAME").unwrap_or_else(|| "gatehouse".into());
    Ok(Some(ExportSettings {
        endpoint,
        json,
        service_name,
    }))
}

/// Starts the exporter when the variables ask for one (`serve` only).
pub fn init() {
    let settings = match settings_from(|k| std::env::var(k).ok()) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(message) => {
            tracing::warn!("{message}");
            return;
        }
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(if settings.json {
            Protocol::HttpJson
        } else {
            Protocol::HttpBinary
        })
        .with_endpoint(settings.endpoint.clone())
        .build();
    let exporter = match exporter {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(endpoint = %settings.endpoint, error = %e, "traces are not exported: the OTLP exporter cannot be built");
            return;
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(WarnOnce {
            inner: exporter,
            endpoint: settings.endpoint.clone(),
            warned: AtomicBool::new(false),
        })
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name)
                .build(),
        )
        .build();
    let tracer = provider.tracer("gatehouse");
    let _ = TRACING.set(Tracing {
        provider,
        tracer,
        propagator: TraceContextPropagator::new(),
    });
    tracing::info!(endpoint = %settings.endpoint, "exporting traces over OTLP");
}

/// Exports what is still queued (bounded: an unreachable collector does not
/// hold up the exit). Called once, after the server stopped.
pub async fn shutdown() {
    let Some(t) = TRACING.get() else {
        return;
    };
    let provider = t.provider.clone();
    let flush =
        tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(Duration::from_secs(3)));
    let _ = tokio::time::timeout(Duration::from_secs(4), flush).await;
}

/// The exporter, reporting its first failure only.
#[derive(Debug)]
struct WarnOnce<E> {
    inner: E,
    endpoint: String,
    warned: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for WarnOnce<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(endpoint = %self.endpoint, error = %e, "cannot export traces; spans are dropped (reported once)");
            }
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The SERVER span of one request, `{method} {route}` (just `{method}`
/// when no route matched, as the HTTP conventions say), a child of the
/// caller's span when the request has a W3C `traceparent`. None when off.
pub fn server_span(
    headers: &http::HeaderMap,
    method: &str,
    route: Option<&str>,
    path: &str,
    request_id: &str,
) -> Option<Context> {
    let t = TRACING.get()?;
    let parent = t.propagator.extract(&Headers(headers));
    let name = match route {
        Some(r) => format!("{method} {r}"),
        None => method.to_string(),
    };
    let mut attributes = vec![
        KeyValue::new("http.request.method", method.to_string()),
        KeyValue::new("url.path", path.to_string()),
        KeyValue::new(
            "http.request.header.x-request-id",
            Value::Array(Array::String(vec![StringValue::from(
                request_id.to_string(),
            )])),
        ),
    ];
    if let Some(r) = route {
        attributes.push(KeyValue::new("http.route", r.to_string()));
    }
    let span = t
        .tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(&t.tracer, &parent);
    Some(parent.with_span(span))
}

/// Records the answer's status on a SERVER span (5xx marks it failed).
pub fn server_status(cx: &Context, status: u16) {
    let span = cx.span();
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(status),
    ));
    if status >= 500 {
        span.set_attribute(KeyValue::new("error.type", status.to_string()));
        span.set_status(Status::error(""));
    }
}

/// What a CLIENT span is about: one upstream attempt, GenAI conventions.
pub struct ClientSpan<'a> {
    /// `chat`, `embeddings`, `rerank`.
    pub operation: &'static str,
    /// The provider's `type`.
    pub provider_type: &'static str,
    pub base_url: &'a str,
    pub upstream_model: &'a str,
}

/// Starts the CLIENT span of an upstream attempt as a child of the current
/// context (the request's SERVER span). None when off.
pub fn client_span(s: &ClientSpan<'_>) -> Option<Context> {
    let t = TRACING.get()?;
    let parent = Context::current();
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", s.operation),
        KeyValue::new("gen_ai.provider.name", s.provider_type),
        KeyValue::new("gen_ai.request.model", s.upstream_model.to_string()),
    ];
    if let Some((host, port)) = host_port(s.base_url) {
        attributes.push(KeyValue::new("server.address", host));
        attributes.push(KeyValue::new("server.port", i64::from(port)));
    }
    let span = t
        .tracer
        .span_builder(format!("{} {}", s.operation, s.upstream_model))
        .with_kind(SpanKind::Client)
        .with_attributes(attributes)
        .start_with_context(&t.tracer, &parent);
    Some(parent.with_span(span))
}

/// The host and port of a base URL (the scheme's default port when none).
pub fn host_port(base_url: &str) -> Option<(String, u16)> {
    let url = url::Url::parse(base_url).ok()?;
    let host = url.host_str()?.trim_matches(|c| c == '[' || c == ']');
    Some((host.to_string(), url.port_or_known_default()?))
}

/// The answer's model and token counts on a CLIENT span: `model`,
/// `usage.prompt_tokens`, `usage.completion_tokens` where the upstream
/// sent them. Nothing else of the answer is read.
pub fn client_answer(cx: &Context, model: Option<&str>, usage: Option<&serde_json::Value>) {
    let span = cx.span();
    if let Some(m) = model {
        span.set_attribute(KeyValue::new("gen_ai.response.model", m.to_string()));
    }
    let count = |k: &str| {
        usage
            .and_then(|u| u.get(k))
            .and_then(serde_json::Value::as_i64)
    };
    if let Some(n) = count("prompt_tokens") {
        span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", n));
    }
    if let Some(n) = count("completion_tokens") {
        span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", n));
    }
}

/// Ends a span; with `error` (its `error.type`) it failed.
pub fn end(cx: &Context, error: Option<&str>) {
    let span = cx.span();
    if let Some(e) = error {
        span.set_attribute(KeyValue::new("error.type", e.to_string()));
        span.set_status(Status::error(""));
    }
    span.end();
}

/// Runs `f` with `cx` as the current context (so spans started and
/// `traceparent`s injected inside it descend from it); as it is when None.
pub fn scope<F: std::future::Future>(
    cx: Option<Context>,
    f: F,
) -> futures_util::future::Either<F, opentelemetry::context::WithContext<F>> {
    use opentelemetry::context::FutureExt as _;
    match cx {
        None => futures_util::future::Either::Left(f),
        Some(cx) => futures_util::future::Either::Right(f.with_context(cx)),
    }
}

/// Runs `f` in an INTERNAL span named `name` (a child of the current
/// span), for work that costs time beside the upstream calls (password
/// hashing); just runs it when off.
pub async fn in_span<F: std::future::Future>(name: &'static str, f: F) -> F::Output {
    use opentelemetry::context::FutureExt as _;
    let Some(t) = TRACING.get() else {
        return f.await;
    };
    let parent = Context::current();
    let span = t
        .tracer
        .span_builder(name)
        .with_kind(SpanKind::Internal)
        .start_with_context(&t.tracer, &parent);
    let cx = parent.with_span(span);
    let out = f.with_context(cx.clone()).await;
    cx.span().end();
    out
}

struct RequestHeaders<'a>(&'a mut Vec<(&'static str, String)>);

impl Injector for RequestHeaders<'_> {
    fn set(&mut self, key: &str, value: String) {
        let key = match key {
            "traceparent" => "traceparent",
            "tracestate" => "tracestate",
            _ => return,
        };
        self.0.push((key, value));
    }
}

/// Puts the current span's `traceparent` (and `tracestate`) on an outgoing
/// request's headers; nothing when off.
pub fn inject(headers: &mut reqwest::header::HeaderMap) {
    let Some(t) = TRACING.get() else {
        return;
    };
    let mut found = Vec::new();
    t.propagator
        .inject_context(&Context::current(), &mut RequestHeaders(&mut found));
    for (k, v) in found {
        if let Ok(v) = reqwest::header::HeaderValue::from_str(&v) {
            headers.insert(k, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<ExportSettings>, String> {
        settings_from(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn no_endpoint_variable_means_no_exporter_whatever_else_is_set() {
        assert_eq!(settings(&[]), Ok(None));
        assert_eq!(
            settings(&[
                ("OTEL_SERVICE_NAME", "x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_TRACES_SAMPLER", "always_on"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", " "),
            ]),
            Ok(None)
        );
        assert_eq!(
            settings(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SDK_DISABLED", "true")
            ]),
            Ok(None)
        );
    }

    #[test]
    fn the_traces_endpoint_is_used_as_is_and_the_generic_one_gets_v1_traces() {
        let s = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://c:4318/v1/traces");
        assert_eq!(s.service_name, "gatehouse");
        assert!(!s.json);
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom"),
            ("OTEL_SERVICE_NAME", "gw-1"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://t:1/custom");
        assert_eq!(s.service_name, "gw-1");
        assert!(s.json);
        assert!(settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap_err()
        .contains("OTEL_EXPORTER_OTLP_PROTOCOL"));
    }

    #[test]
    fn server_address_and_port_come_from_the_base_url() {
        assert_eq!(
            host_port("http://127.0.0.1:8001/v1"),
            Some(("127.0.0.1".into(), 8001))
        );
        assert_eq!(
            host_port("https://api.example.com/v1"),
            Some(("api.example.com".into(), 443))
        );
        assert_eq!(host_port("http://[::1]:9/v1"), Some(("::1".into(), 9)));
        assert_eq!(host_port("nonsense"), None);
    }
}
