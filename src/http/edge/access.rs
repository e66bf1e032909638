//! One access line per request, at `info`, with `message` `request` and the
//! fields the contract names: `request_id`, `method`, `route` (the matched
//! template, `unmatched` when none), `status`, `latency_ms`, and where known
//! `user_id`, `api_key_id`, `agent`, `device_id`, `model`, `provider`.
//! Extractors and handlers note what they learn in the request's
//! [`AccessNote`]; the line is written when the answer's head goes out (for
//! a stream, `latency_ms` is the time to its first byte). Only ids and names:
//! never a credential, a body or a header value besides the request id.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Extensions, HeaderValue, Method};
use axum::response::Response;
use parking_lot::Mutex;

use crate::http::answers::X_GATEHOUSE_PROVIDER;
use crate::runtime::request::X_REQUEST_ID;

/// What the handling of one request learned about who and what it served.
#[derive(Clone, Debug, Default)]
pub struct AccessFields {
    pub user_id: Option<String>,
    pub api_key_id: Option<String>,
    pub agent: Option<String>,
    pub device_id: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    /// The inbound dialect of a model request (`chat`, `messages`).
    pub api: Option<&'static str>,
    /// The dialect of the attempt that answered (`chat`, `messages`).
    pub upstream_api: Option<&'static str>,
    /// MCP routes: the JSON-RPC method, and for `tools/call` the server,
    /// the exposed tool name and the decision.
    pub mcp_method: Option<String>,
    pub mcp_server: Option<String>,
    pub mcp_tool: Option<String>,
    pub mcp_decision: Option<&'static str>,
}

/// The request's slot for [`AccessFields`], in its extensions; empty when
/// the access log is off (then nothing is noted: no copies of ids per request).
#[derive(Clone, Debug, Default)]
pub struct AccessNote(Option<Arc<Mutex<AccessFields>>>);

impl AccessNote {
    /// Notes into the request's slot, if the access log layer made one.
    pub fn note(extensions: &Extensions, f: impl FnOnce(&mut AccessFields)) {
        if let Some(AccessNote(Some(n))) = extensions.get::<AccessNote>() {
            f(&mut n.lock());
        }
    }

    /// The slot itself, to note into after the request has been consumed.
    pub fn of(extensions: &Extensions) -> AccessNote {
        extensions.get::<AccessNote>().cloned().unwrap_or_default()
    }

    pub fn set(&self, f: impl FnOnce(&mut AccessFields)) {
        if let Some(n) = &self.0 {
            f(&mut n.lock());
        }
    }
}

/// What the access line needs from the request, taken before it is handled.
pub struct Access {
    started: Instant,
    note: AccessNote,
    method: Method,
    route: Option<Route>,
    request_id: Option<HeaderValue>,
}

/// The route template a request matched: the router's, or one of the model
/// routes served before the router (`http::Dispatch`).
#[derive(Clone, Debug)]
pub enum Route {
    Matched(MatchedPath),
    Direct(&'static str),
}

impl Route {
    /// `direct` when the request was dispatched before the router, else what the router matched.
    pub fn of(req: &Request, direct: Option<&'static str>) -> Option<Route> {
        match direct {
            Some(r) => Some(Route::Direct(r)),
            None => req
                .extensions()
                .get::<MatchedPath>()
                .cloned()
                .map(Route::Matched),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Route::Matched(m) => m.as_str(),
            Route::Direct(r) => r,
        }
    }
}

impl Access {
    /// Gives the request its [`AccessNote`] slot and remembers what the line names.
    pub fn begin(req: &mut Request, route: Option<Route>) -> Access {
        let on = tracing::enabled!(target: "gatehouse::access", tracing::Level::INFO);
        let note = AccessNote(on.then(Arc::default));
        if on {
            req.extensions_mut().insert(note.clone());
        }
        Access {
            started: Instant::now(),
            note,
            method: req.method().clone(),
            route,
            request_id: req.headers().get(X_REQUEST_ID).cloned(),
        }
    }

    pub fn matched(&self) -> Option<&Route> {
        self.route.as_ref()
    }

    /// The matched route template, `unmatched` when none.
    pub fn route_label(&self) -> &str {
        self.route.as_ref().map_or("unmatched", Route::as_str)
    }

    /// Writes the access line for `resp`; `upstream_api` names the dialect
    /// of a provider (for the attempt that answered).
    pub fn finish(self, resp: &Response, upstream_api: impl Fn(&str) -> Option<&'static str>) {
        // Off when the request began: no line.
        let Some(note) = &self.note.0 else {
            return;
        };
        let latency_ms = (self.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0;
        // The line is written once: what the request noted is taken, not copied.
        let mut f = std::mem::take(&mut *note.lock());
        if f.provider.is_none() {
            // Set by the upstream routing where several targets can answer.
            f.provider = resp
                .headers()
                .get(X_GATEHOUSE_PROVIDER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
        }
        if f.api.is_some() && f.upstream_api.is_none() {
            f.upstream_api = f.provider.as_deref().and_then(upstream_api);
        }
        let request_id = self
            .request_id
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        tracing::info!(
            target: "gatehouse::access",
            request_id = %request_id,
            method = %self.method,
            route = %self.route_label(),
            status = resp.status().as_u16(),
            latency_ms,
            user_id = f.user_id.as_deref(),
            api_key_id = f.api_key_id.as_deref(),
            agent = f.agent.as_deref(),
            device_id = f.device_id.as_deref(),
            model = f.model.as_deref(),
            provider = f.provider.as_deref(),
            api = f.api,
            upstream_api = f.upstream_api,
            mcp_method = f.mcp_method.as_deref(),
            mcp_server = f.mcp_server.as_deref(),
            mcp_tool = f.mcp_tool.as_deref(),
            mcp_decision = f.mcp_decision,
            "request"
        );
    }
}
