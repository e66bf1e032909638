//! Rendering of the domain error (`crate::error::Error`) in the contract's two
//! shapes: `{"detail":{code,message}}` on `/api/...` and the OpenAI shape on
//! `/v1/...`. The edge middleware (`http::edge`) picks the shape from the
//! request path, so handlers never care.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::{Error, ErrorKind};

/// The status the contract gives an error kind.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::BAD_GATEWAY)
}

const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if let Some(raw) = &self.raw {
            return raw_response(&self, raw);
        }
        let body = self.api_body();
        let mut resp = (status_of(self.kind), axum::Json(body)).into_response();
        let h = resp.headers_mut();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                h.insert(header::RETRY_AFTER, v);
            }
        }
        if self.is_final_refusal() {
            h.insert(X_SHOULD_RETRY, HeaderValue::from_static("false"));
        }
        if let Some(a) = &self.attempted {
            crate::http::answers::write_routing_headers(h, &a.provider, a.attempts);
        }
        resp.extensions_mut().insert(self);
        resp
    }
}

/// An upstream's error answer relayed as it came: its status, body,
/// `Content-Type` and `retry-after`, plus the routing headers. No `Error`
/// goes in the extensions, so the edge does not re-render it.
fn raw_response(err: &Error, raw: &crate::error::RawAnswer) -> Response {
    let mut resp = Response::new(axum::body::Body::from(raw.body.clone()));
    *resp.status_mut() = status_of(err.kind);
    let h = resp.headers_mut();
    let value = |v: &Option<String>| v.as_deref().and_then(|v| HeaderValue::from_str(v).ok());
    if let Some(v) = value(&raw.content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    if let Some(v) = value(&raw.retry_after) {
        h.insert(header::RETRY_AFTER, v);
    }
    if let Some(a) = &err.attempted {
        crate::http::answers::write_routing_headers(h, &a.provider, a.attempts);
    }
    resp
}

/// Re-renders an error answer in the OpenAI shape (for `/v1/...` paths).
pub fn render_openai(mut resp: Response) -> Response {
    if let Some(err) = resp.extensions_mut().remove::<Error>() {
        let mut new = (status_of(err.kind), axum::Json(err.openai_body())).into_response();
        for (k, v) in resp.headers() {
            if k != axum::http::header::CONTENT_TYPE && k != axum::http::header::CONTENT_LENGTH {
                new.headers_mut().insert(k.clone(), v.clone());
            }
        }
        return new;
    }
    resp
}

/// Whether errors on this request take Anthropic's shape (contract,
/// "Errors on the Anthropic routes"): the Messages routes (agent routes
/// included), and `GET /v1/models` asked in Anthropic's way
/// (`anthropic-version`, or an `x-api-key` credential).
pub fn anthropic_dialect(req: &axum::extract::Request) -> bool {
    let path = req.uri().path();
    if path == "/v1/models" {
        let h = req.headers();
        return h.contains_key("anthropic-version") || h.contains_key("x-api-key");
    }
    is_messages_path(path)
}

/// `/v1/messages[/count_tokens]`, and under an agent
/// `/v1/agents/{agent}[/v1]/messages[/count_tokens]`.
pub fn is_messages_path(path: &str) -> bool {
    if matches!(path, "/v1/messages" | "/v1/messages/count_tokens") {
        return true;
    }
    let Some(rest) = path.strip_prefix("/v1/agents/") else {
        return false;
    };
    let Some((agent, tail)) = rest.split_once('/') else {
        return false;
    };
    !agent.is_empty()
        && matches!(
            tail,
            "messages" | "messages/count_tokens" | "v1/messages" | "v1/messages/count_tokens"
        )
}

/// On Anthropic routes a credential is read from `x-api-key` first, else
/// from `Authorization: Bearer` (Claude Code sends `ANTHROPIC_API_KEY` as
/// the first, `ANTHROPIC_AUTH_TOKEN` as the second): an `x-api-key` is
/// handed to the extractors as the bearer credential.
pub fn anthropic_credential(req: &mut axum::extract::Request) {
    let Some(key) = req.headers_mut().remove("x-api-key") else {
        return;
    };
    let Ok(text) = key.to_str() else { return };
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", text.trim())) {
        req.headers_mut().insert(header::AUTHORIZATION, v);
    }
}

/// Marks a request answered in Anthropic's dialect (see [`anthropic_dialect`]).
#[derive(Clone, Copy, Debug)]
pub struct AnthropicDialect;

const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");

/// Re-renders an error answer in Anthropic's shape, and sends `request-id`
/// (equal to `x-request-id`) on every answer of these routes.
pub fn render_anthropic(mut resp: Response, request_id: &HeaderValue) -> Response {
    if let Some(err) = resp.extensions_mut().remove::<Error>() {
        let id = request_id.to_str().unwrap_or_default();
        let body = crate::wire::messages::error::anthropic_body(&err, id);
        let mut new = (status_of(err.kind), axum::Json(body)).into_response();
        for (k, v) in resp.headers() {
            if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
                new.headers_mut().insert(k.clone(), v.clone());
            }
        }
        resp = new;
    }
    resp.headers_mut().insert(REQUEST_ID, request_id.clone());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_paths_are_told_apart_from_their_neighbours() {
        for p in [
            "/v1/messages",
            "/v1/messages/count_tokens",
            "/v1/agents/bot@acme/messages",
            "/v1/agents/bot@acme/messages/count_tokens",
            "/v1/agents/bot%40acme/v1/messages",
            "/v1/agents/bot@acme/v1/messages/count_tokens",
        ] {
            assert!(is_messages_path(p), "{p}");
        }
        for p in [
            "/v1/chat/completions",
            "/v1/messages/",
            "/v1/messagesx",
            "/v1/agents//messages",
            "/v1/agents/bot@acme/chat/completions",
            "/v1/agents/bot@acme/x/messages",
            "/v1/agents/bot@acme/events",
        ] {
            assert!(!is_messages_path(p), "{p}");
        }
    }
}
