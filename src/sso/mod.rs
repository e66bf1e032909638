//! Single sign-on with OpenID Connect: provider settings, the relying-party
//! flow (done by the `openidconnect` library), the rules that turn a verified
//! identity into a Gatehouse user, and the one-time `gtc_` codes that hand a
//! sign-in to an agent app (RFC 8252).
//!
//! Domain code: no HTTP types. Errors are [`SsoError`]; the HTTP layer maps
//! each to the contract's status and code.

pub mod codes;
pub mod decision;
pub mod flow;
pub mod oidc;
pub mod redirect;
pub mod settings;

pub use decision::{decide, Decision, Identity};
pub use flow::{AppRequest, CallbackParams, SignedIn, Sso};
pub use settings::{NewSsoProvider, SsoProvider, SsoProviderPatch, SsoProviderView};

/// How long a sign-in started at `authorize` may take at the provider.
pub const STATE_TTL_MS: i64 = 10 * 60 * 1000;
/// How long an app's `gtc_` code can be exchanged.
pub const CODE_TTL_MS: i64 = 60 * 1000;

#[derive(Debug, thiserror::Error)]
pub enum SsoError {
    /// A bad field in provider settings (400 `validation_error`, `param` names it).
    #[error("{message}")]
    Invalid { param: String, message: String },
    /// The issuer's discovery document is unreachable or unusable (400 `sso_discovery_failed`).
    #[error("{0}")]
    Discovery(String),
    /// The sign-in is refused; the message says why (403 `sso_denied`).
    #[error("{0}")]
    Denied(String),
    /// An app's code exchange failed (400 `invalid_grant`).
    #[error("{0}")]
    InvalidGrant(String),
    /// An app's redirect URI is not acceptable (400 `invalid_redirect_uri`, no redirect).
    #[error("{0}")]
    InvalidRedirectUri(String),
    /// A bad parameter of an app's authorize request (400 `validation_error`).
    #[error("{message}")]
    BadRequest { param: String, message: String },
    /// 404 `sso_provider_not_found`.
    #[error("No SSO provider is named '{0}'.")]
    NotFound(String),
    /// 409 `sso_provider_exists`.
    #[error("An SSO provider named '{0}' exists already.")]
    Exists(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// Something on our side (500); the message is for logs.
    #[error("{0}")]
    Internal(String),
}

impl SsoError {
    pub fn invalid(param: &str, message: impl Into<String>) -> SsoError {
        SsoError::Invalid {
            param: param.to_string(),
            message: message.into(),
        }
    }

    pub fn bad_request(param: &str, message: impl Into<String>) -> SsoError {
        SsoError::BadRequest {
            param: param.to_string(),
            message: message.into(),
        }
    }

    /// The contract's error code.
    pub fn code(&self) -> &'static str {
        match self {
            SsoError::Invalid { .. } | SsoError::BadRequest { .. } => "validation_error",
            SsoError::Discovery(_) => "sso_discovery_failed",
            SsoError::Denied(_) => "sso_denied",
            SsoError::InvalidGrant(_) => "invalid_grant",
            SsoError::InvalidRedirectUri(_) => "invalid_redirect_uri",
            SsoError::NotFound(_) => "sso_provider_not_found",
            SsoError::Exists(_) => "sso_provider_exists",
            SsoError::Database(_) | SsoError::Internal(_) => "internal_error",
        }
    }
}

impl From<SsoError> for crate::error::Error {
    fn from(e: SsoError) -> Self {
        use crate::error::Error;
        let code = e.code();
        match e {
            SsoError::Invalid { param, message } | SsoError::BadRequest { param, message } => {
                Error::validation(param, message)
            }
            SsoError::Discovery(m)
            | SsoError::InvalidGrant(m)
            | SsoError::InvalidRedirectUri(m) => Error::bad_request(code, m),
            SsoError::Denied(m) => Error::forbidden(code, m),
            e @ SsoError::NotFound(_) => Error::not_found(code, e.to_string()),
            e @ SsoError::Exists(_) => Error::conflict(code, e.to_string()),
            SsoError::Database(db) => Error::from(db),
            SsoError::Internal(m) => Error::internal(m),
        }
    }
}
