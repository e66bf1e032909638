//! The one domain error. Every domain module returns it; it carries the
//! contract's code, a plain-sentence message, the field at fault and what
//! kind of failure it is. It knows nothing of HTTP: `http::error` maps the
//! kind to a status and renders the contract's two shapes.

use std::borrow::Cow;

/// What kind of failure; `http::error` maps each to its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input (400).
    Invalid,
    /// No or bad credential (401).
    Unauthenticated,
    /// A credential that may not do this (403).
    Forbidden,
    /// No such thing (404).
    NotFound,
    /// A wrong route method (405).
    MethodNotAllowed,
    /// The body did not arrive in time (408).
    Timeout,
    /// The state forbids it (409).
    Conflict,
    /// The body is over its limit (413).
    TooLarge,
    /// Over a limit or a throttle (429).
    TooManyRequests,
    /// Our own failure (500).
    Internal,
    /// The model server could not be used (502).
    BadGateway,
    /// A dependency (the database) is not answering (503).
    Unavailable,
    /// The model server did not answer in time (504).
    GatewayTimeout,
    /// The model server's own error status, passed through.
    Upstream(u16),
}

impl ErrorKind {
    /// The status number the contract gives this kind.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::Invalid => 400,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::Timeout => 408,
            ErrorKind::Conflict => 409,
            ErrorKind::TooLarge => 413,
            ErrorKind::TooManyRequests => 429,
            ErrorKind::Internal => 500,
            ErrorKind::BadGateway => 502,
            ErrorKind::Unavailable => 503,
            ErrorKind::GatewayTimeout => 504,
            ErrorKind::Upstream(s) => s,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub code: Cow<'static, str>,
    pub message: String,
    pub param: Option<String>,
    pub retry_after: Option<u64>,
    /// Set when the error is an upstream attempt's (the relay marks the
    /// last one): the answer names the provider as a success would.
    pub attempted: Option<Box<Attempted>>,
    /// An upstream's error answer to relay as it came (pass-through to an
    /// `anthropic` provider): its status is the kind's, and the body,
    /// `Content-Type` and `retry-after` go out unchanged.
    pub raw: Option<Box<RawAnswer>>,
}

/// An upstream's error answer kept byte for byte (see [`Error::raw`]).
#[derive(Clone, Debug)]
pub struct RawAnswer {
    pub body: bytes::Bytes,
    pub content_type: Option<String>,
    pub retry_after: Option<String>,
}

/// The provider of a request's last upstream attempt, and how many attempts
/// were made (`x-gatehouse-provider`, `x-gatehouse-attempts`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempted {
    pub provider: String,
    pub attempts: u32,
}

/// Codes of refusals that the same request, sent again, meets again: their
/// answers say `x-should-retry: false` (the OpenAI SDKs retry every 409 and
/// 429 otherwise). A rate limit (`rate_limited`) passes, so it is not here.
const FINAL_REFUSALS: [&str; 4] = [
    "approval_pending",
    "approval_already_decided",
    "approval_expired",
    "budget_exhausted",
];

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(
        kind: ErrorKind,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Error {
            kind,
            code: code.into(),
            message: message.into(),
            param: None,
            retry_after: None,
            attempted: None,
            raw: None,
        }
    }
    /// The status number of this error (see [`ErrorKind::status`]).
    pub fn status(&self) -> u16 {
        self.kind.status()
    }
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
    /// Marks the error as the answer of an upstream attempt (see [`Attempted`]).
    pub fn with_attempted(mut self, provider: &str, attempts: u32) -> Self {
        self.attempted = Some(Box::new(Attempted {
            provider: provider.to_string(),
            attempts,
        }));
        self
    }
    /// Whether sending the same request again cannot help (see [`FINAL_REFUSALS`]).
    pub fn is_final_refusal(&self) -> bool {
        FINAL_REFUSALS.contains(&self.code.as_ref())
    }
    pub fn validation(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "validation_error", message).with_param(param)
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, code, message)
    }
    pub fn unauthorized(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, code, message)
    }
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, code, message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, code, message)
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, code, message)
    }
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            ErrorKind::TooLarge,
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
            ErrorKind::Internal,
            "internal_error",
            "The server failed to handle the request.",
        )
    }
    /// The OpenAI error shape (`{"error":{message,type,param,code}}`): the body
    /// of `/v1` errors and the message that ends a failed stream.
    pub fn openai_body(&self) -> serde_json::Value {
        serde_json::json!({"error": {
            "message": self.message,
            "type": openai_type(self.status()),
            "param": self.param,
            "code": self.code,
        }})
    }

    /// The `/api` shape (`{"detail":{code,message}}`).
    pub fn api_body(&self) -> serde_json::Value {
        serde_json::json!({"detail": {"code": self.code, "message": self.message}})
    }

    /// The database is not answering.
    pub fn database_unavailable() -> Self {
        Self::new(
            ErrorKind::Unavailable,
            "database_unavailable",
            "The database is not answering; try again shortly.",
        )
    }
}

/// OpenAI's error `type` for a status, as the contract lists them.
pub fn openai_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// Errors that mean "the database is not there" rather than "this write is wrong".
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::PoolTimedOut
            | sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
    ) || matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")))
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        if is_unavailable(&e) {
            tracing::warn!(error = %e, "database unavailable");
            Error::database_unavailable()
        } else {
            Error::internal(e)
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status(), self.code, self.message)
    }
}

impl std::error::Error for Error {}
