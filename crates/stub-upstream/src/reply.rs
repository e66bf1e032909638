//! Answers every route shares: JSON bodies and errors in each upstream kind's
//! own wire format. The route modules and the server both use these, so they
//! live below both.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde::Serialize;
use serde_json::json;

/// Error body flavour: each upstream kind answers errors its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Tei,
    Cohere,
}

pub(crate) fn json_response<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response {
    let body = serde_json::to_vec(value).expect("serialising a response cannot fail");
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// An error in the route's own wire format.
pub(crate) fn error(flavor: Flavor, status: StatusCode, message: &str) -> Response {
    let kind = if status.is_client_error() {
        "invalid_request_error"
    } else {
        "server_error"
    };
    error_typed(flavor, status, message, kind)
}

/// Like [`error`], with the OpenAI `type` given.
pub(crate) fn error_typed(
    flavor: Flavor,
    status: StatusCode,
    message: &str,
    openai_type: &str,
) -> Response {
    let body = match flavor {
        Flavor::OpenAi => json!({"error": {
            "message": message,
            "type": openai_type,
            "param": null,
            "code": null,
        }}),
        Flavor::Tei => {
            let kind = match status.as_u16() {
                429 => "overloaded",
                400 | 413 | 422 => "validation",
                503 => "unhealthy",
                _ => "backend",
            };
            json!({"error": message, "error_type": kind})
        }
        Flavor::Cohere => json!({"id": "stub-error", "message": message}),
    };
    json_response(status, &body)
}
