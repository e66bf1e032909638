//! The one error type. Rendered as `{"detail":{code,message}}` on `/api/...`
//! and in the OpenAI shape on `/v1/...`; the `render_errors` middleware picks
//! the shape from the request path so handlers never care.

use std::borrow::Cow;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Cow<'static, str>,
    pub message: String,
    pub param: Option<String>,
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }
    pub fn validation(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "validation_error", message).with_param(param)
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn unauthorized(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, message)
    }
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("The request body is larger than the limit of {limit} bytes."),
        )
    }
    pub fn admin_only() -> Self {
        Self::forbidden("forbidden", "This route is for administrators.")
    }
    /// An unexpected failure: the cause goes to the log, the client gets a plain sentence.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "The server failed to handle the request.",
        )
    }

    /// The `/api` shape.
    pub fn api_body(&self) -> serde_json::Value {
        json!({"detail": {"code": self.code, "message": self.message}})
    }

    /// The OpenAI shape used on `/v1`.
    pub fn openai_body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": openai_type(self.status),
            "param": self.param,
            "code": self.code,
        }})
    }
}

pub fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            e if crate::usage::is_unavailable(&e) => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "database_unavailable",
                    "The database is not answering; try again shortly.",
                )
            }
            other => ApiError::internal(other),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.api_body();
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert("retry-after", v);
            }
        }
        resp.extensions_mut().insert(self);
        resp
    }
}

/// Re-renders errors in the OpenAI shape for `/v1/...` paths.
pub async fn render_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let v1 = req.uri().path().starts_with("/v1/") || req.uri().path() == "/v1";
    let mut resp = next.run(req).await;
    if v1 {
        if let Some(err) = resp.extensions_mut().remove::<ApiError>() {
            let mut new = (err.status, axum::Json(err.openai_body())).into_response();
            for (k, v) in resp.headers() {
                if k != axum::http::header::CONTENT_TYPE && k != axum::http::header::CONTENT_LENGTH
                {
                    new.headers_mut().insert(k.clone(), v.clone());
                }
            }
            return new;
        }
    }
    resp
}
