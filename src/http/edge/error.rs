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
