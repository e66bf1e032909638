//! One upstream attempt, observed: its CLIENT span when traces are on
//! (`crate::telemetry`), and at `debug` one log line when it ends
//! (provider, upstream model, status, duration; never a body or a header
//! value). With neither on it is empty and costs two checks.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::models::routing::Failure;
use crate::models::Provider;
use crate::telemetry::{self, ClientSpan, SpanContext};

/// See the module documentation. Ends (span and log line) on [`finish`]
/// or when dropped, whichever comes first.
///
/// [`finish`]: Attempt::finish
#[derive(Default)]
pub struct Attempt(Option<Box<Watched>>);

struct Watched {
    provider: Arc<Provider>,
    upstream_model: String,
    /// A stream's attempt ends outside the request's task: its id is kept.
    request_id: Option<reqwest::header::HeaderValue>,
    started: Instant,
    span: Option<SpanContext>,
    log: bool,
    status: Option<u16>,
    error: Option<String>,
    response_model: bool,
}

impl Attempt {
    /// `operation`: `chat`, `embeddings` or `rerank`.
    pub fn start(operation: &'static str, provider: &Arc<Provider>, upstream_model: &str) -> Self {
        let log = tracing::enabled!(target: "gatehouse::upstream", tracing::Level::DEBUG);
        if !log && !telemetry::enabled() {
            return Attempt(None);
        }
        let span = telemetry::client_span(&ClientSpan {
            operation,
            provider_type: provider.kind.as_str(),
            base_url: &provider.base_url,
            upstream_model,
        });
        Attempt(Some(Box::new(Watched {
            provider: Arc::clone(provider),
            upstream_model: upstream_model.to_string(),
            request_id: crate::runtime::request::REQUEST_ID
                .try_with(Clone::clone)
                .ok(),
            started: Instant::now(),
            span,
            log,
            status: None,
            error: None,
            response_model: false,
        })))
    }

    /// Runs the upstream call inside the attempt's span, so the request
    /// carries its `traceparent`.
    pub fn scope<F: Future>(&self, f: F) -> impl Future<Output = F::Output> {
        telemetry::scope(self.0.as_ref().and_then(|w| w.span.clone()), f)
    }

    /// The upstream answered with this (2xx) status.
    pub fn status(&mut self, status: u16) {
        if let Some(w) = self.0.as_mut() {
            w.status = Some(status);
        }
    }

    /// Whether the answer's `model` and `usage` are wanted (a span records
    /// them); without, the relay need not parse what it passes on.
    pub fn wants_answer(&self) -> bool {
        self.0.as_ref().is_some_and(|w| w.span.is_some())
    }

    /// The upstream's `model` (the first one seen) and `usage` token counts.
    pub fn answer(&mut self, model: Option<&Value>, usage: Option<&Value>) {
        let Some(w) = self.0.as_mut() else {
            return;
        };
        let Some(cx) = &w.span else {
            return;
        };
        let model = if w.response_model {
            None
        } else {
            model.and_then(Value::as_str)
        };
        w.response_model |= model.is_some();
        telemetry::client_answer(cx, model, usage);
    }

    pub fn failed(&mut self, failure: Failure) {
        if let Some(w) = self.0.as_mut() {
            let error = match failure {
                Failure::Status(s) => {
                    w.status = Some(s);
                    s.to_string()
                }
                Failure::Connect => "connect".into(),
                Failure::TimeoutBeforeHead | Failure::TimeoutAfterHead => "timeout".into(),
                Failure::CutOff => "cut_off".into(),
                Failure::BadAnswer => "bad_answer".into(),
            };
            w.error = Some(error);
        }
    }

    /// Ends the span and writes the debug line (once).
    pub fn finish(&mut self) {
        let Some(w) = self.0.take() else {
            return;
        };
        if let Some(cx) = &w.span {
            telemetry::end(cx, w.error.as_deref());
        }
        if w.log {
            let duration_ms = (w.started.elapsed().as_secs_f64() * 1e6).round() / 1000.0;
            tracing::debug!(
                target: "gatehouse::upstream",
                request_id = w.request_id.as_ref().and_then(|v| v.to_str().ok()),
                provider = %w.provider.name,
                upstream_model = %w.upstream_model,
                status = w.status,
                error = w.error.as_deref(),
                duration_ms,
                "upstream attempt"
            );
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.finish();
    }
}
