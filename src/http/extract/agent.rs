//! Credentials of agent apps: the access token on `/v1/agents/{agent}/...`,
//! and "a login token or an access token" on the caller's own sign-in routes.

use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;

use crate::agents::Agent;
use crate::app::AppState;
use crate::auth::signins::{self, SignInInfo};
use crate::auth::tokens::{self, Claims, TokenError};
use crate::error::{Error, Result};
use crate::http::edge::access::AccessNote;
use crate::http::extract::{bearer, login_user};
use crate::users::UserInfo;

fn invalid(message: &str) -> Error {
    Error::unauthorized("invalid_token", message.to_string())
}

/// Verifies a bearer token's signature and expiry; other secrets are named.
fn verify(state: &AppState, token: &str) -> Result<Arc<Claims>> {
    if token.starts_with("gtk_") {
        return Err(invalid(
            "An API key cannot be used here; send the agent's access token.",
        ));
    }
    if token.starts_with(signins::REFRESH_PREFIX) {
        return Err(invalid(
            "A refresh token cannot be used here; renew it at POST /api/agent-tokens/refresh.",
        ));
    }
    state.auth.tokens.verify(token).map_err(|e| match e {
        TokenError::Expired => Error::unauthorized(
            "token_expired",
            "The token has expired; renew an access token at POST /api/agent-tokens/refresh, or log in again.",
        ),
        TokenError::Invalid => invalid("The token is not valid."),
    })
}

/// An agent app on one device, by its access token. Only access tokens are
/// accepted; the sign-in must be live, its user active, and the path's
/// `{agent}` the sign-in's agent.
pub struct AgentAccess {
    pub user: Arc<UserInfo>,
    pub sign_in: Arc<SignInInfo>,
    pub agent: Arc<Agent>,
}

impl FromRequestParts<AppState> for AgentAccess {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let token = bearer(parts).ok_or_else(|| {
            invalid("Send the agent's access token as Authorization: Bearer <ACCESS_TOKEN>.")
        })?;
        let claims = verify(state, token)?;
        if claims.typ != tokens::ACCESS {
            return Err(invalid(
                "A login token cannot be used on agent routes; exchange it for an access token at POST /api/agent-tokens.",
            ));
        }
        let (sign_in, user) = signins::check_access(&state.auth, &claims).await?;
        if let Some(path_agent) = path_agent(parts, state).await {
            if path_agent != sign_in.agent {
                return Err(Error::forbidden(
                    "agent_mismatch",
                    format!(
                        "This access token belongs to the agent '{}', not to '{path_agent}'.",
                        sign_in.agent
                    ),
                ));
            }
        }
        let agent = state.agent(&sign_in.agent).await?.ok_or_else(|| {
            Error::not_found("agent_not_found", "This sign-in's agent no longer exists.")
        })?;
        state
            .auth
            .last_used
            .sign_ins
            .insert(sign_in.device_id.clone(), crate::store::now_ms());
        AccessNote::note(&parts.extensions, |f| {
            f.user_id = Some(user.id.clone());
            f.device_id = Some(sign_in.device_id.clone());
            f.agent = Some(sign_in.agent.clone());
        });
        Ok(AgentAccess {
            user,
            sign_in,
            agent,
        })
    }
}

/// The `{agent}` of an agent route served before the router
/// (`http::Dispatch`), percent-decoded.
#[derive(Clone, Debug)]
pub struct AgentInPath(pub String);

/// The path's `{agent}`, percent-decoded so `support%40acme` matches
/// `support@acme`; `None` on routes without one. One that is not UTF-8 once
/// decoded names no agent, so it is kept as sent and matches none (another
/// parameter that does not decode is left to that parameter's extractor).
async fn path_agent(parts: &mut Parts, state: &AppState) -> Option<String> {
    use axum::extract::rejection::RawPathParamsRejection;
    if let Some(AgentInPath(a)) = parts.extensions.get::<AgentInPath>() {
        return Some(a.clone());
    }
    match RawPathParams::from_request_parts(parts, state).await {
        Ok(p) => p
            .iter()
            .find(|(k, _)| *k == "agent")
            .map(|(_, v)| v.to_string()),
        Err(RawPathParamsRejection::InvalidUtf8InPathParam(_)) => {
            let segment = agent_segment(parts.uri.path())?;
            Some(decoded_agent(segment).unwrap_or_else(|| segment.to_string()))
        }
        Err(_) => None,
    }
}

/// `segment` percent-decoded, if that gives UTF-8 (as the router decodes path parameters).
pub fn decoded_agent(segment: &str) -> Option<String> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()
        .map(|a| a.into_owned())
}

/// The raw `{agent}` segment of `/v1/agents/{agent}/...`.
pub fn agent_segment(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/agents/")?;
    let end = rest.find('/').unwrap_or(rest.len());
    Some(&rest[..end]).filter(|a| !a.is_empty())
}

/// A user by login token, or one device of theirs by its access token.
pub enum Caller {
    Login(Arc<UserInfo>),
    Device {
        user: Arc<UserInfo>,
        sign_in: Arc<SignInInfo>,
    },
}

impl Caller {
    pub fn user(&self) -> &UserInfo {
        match self {
            Caller::Login(u) | Caller::Device { user: u, .. } => u,
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let token = bearer(parts).ok_or_else(|| {
            invalid(
                "Send a login token or the agent's access token as Authorization: Bearer <token>.",
            )
        })?;
        let claims = verify(state, token)?;
        match claims.typ.as_str() {
            tokens::LOGIN => {
                let u = login_user(state, token).await?;
                AccessNote::note(&parts.extensions, |f| f.user_id = Some(u.id.clone()));
                Ok(Caller::Login(u))
            }
            tokens::ACCESS => {
                let (sign_in, user) = signins::check_access(&state.auth, &claims).await?;
                state
                    .auth
                    .last_used
                    .sign_ins
                    .insert(sign_in.device_id.clone(), crate::store::now_ms());
                AccessNote::note(&parts.extensions, |f| {
                    f.user_id = Some(user.id.clone());
                    f.device_id = Some(sign_in.device_id.clone());
                    f.agent = Some(sign_in.agent.clone());
                });
                Ok(Caller::Device { user, sign_in })
            }
            _ => Err(invalid("The token is not valid.")),
        }
    }
}
