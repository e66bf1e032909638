//! Agent sign-ins: one per device, with a short-lived access token (a signed
//! JWT naming the device and agent) and a rotating refresh token (`gtr_...`).
//!
//! Renewal swaps the current refresh token for a new one; presenting a
//! superseded one is taken as theft and ends every sign-in of that user. An
//! ended sign-in's access tokens are refused at once: the check is cached per
//! access token and every write that ends a sign-in evicts it here and, via
//! `App::invalidate`, on the other servers.

use std::sync::Arc;

use serde_json::json;

use crate::agents::Agent;
use crate::auth::tokens::{self, Claims};
use crate::auth::Auth;
use crate::auth::{new_secret, sha256_hex};
use crate::error::{Error, Result};
use crate::runtime::Invalidation;
use crate::store::signins::{RefreshStatus, SignInRow, TokenRecord, USED};
use crate::store::{new_id, now_ms, Store};
use crate::users::UserInfo;

pub const REFRESH_PREFIX: &str = "gtr_";
pub const MAX_LABEL_CHARS: usize = 200;

/// What the hot path needs to know about a sign-in.
#[derive(Clone, Debug)]
pub struct SignInInfo {
    pub device_id: String,
    pub user_id: String,
    pub agent: String,
    pub device_label: String,
    pub ended: bool,
}

impl From<&SignInRow> for SignInInfo {
    fn from(r: &SignInRow) -> Self {
        SignInInfo {
            device_id: r.device_id.clone(),
            user_id: r.user_id.clone(),
            agent: r.agent.clone(),
            device_label: r.device_label.clone(),
            ended: r.ended_at.is_some(),
        }
    }
}

/// Why a sign-in ended (stored in `sign_ins.end_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The user (or the device itself) signed out.
    SignedOut,
    RevokedByAdmin,
    /// A superseded refresh token of this user was presented.
    RefreshTokenReused,
    UserDisabled,
    /// The agent's `allowed_users` no longer lists the user.
    UserNotAllowed,
    /// The user's password changed.
    PasswordChanged,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::SignedOut => "signed_out",
            EndReason::RevokedByAdmin => "revoked_by_admin",
            EndReason::RefreshTokenReused => "refresh_token_reused",
            EndReason::UserDisabled => "user_disabled",
            EndReason::UserNotAllowed => "user_not_allowed",
            EndReason::PasswordChanged => "password_changed",
        }
    }
}

/// A device label: 1 to 200 characters once trimmed, no control characters.
pub fn parse_device_label(raw: &str) -> Result<String> {
    let label = raw.trim();
    let n = label.chars().count();
    if n == 0 || n > MAX_LABEL_CHARS || label.chars().any(char::is_control) {
        return Err(Error::validation(
            "device_label",
            format!("'device_label' must be 1 to {MAX_LABEL_CHARS} characters, without control characters."),
        ));
    }
    Ok(label.to_string())
}

/// Tokens handed to the app, on sign-in and on every renewal.
pub struct Issued {
    pub access_token: String,
    pub refresh_token: String,
    pub expires_in: i64,
    pub refresh_expires_in: i64,
    pub device_id: String,
    pub agent: String,
}

impl Issued {
    pub fn view(&self) -> serde_json::Value {
        json!({
            "access_token": self.access_token,
            "token_type": "bearer",
            "expires_in": self.expires_in,
            "refresh_token": self.refresh_token,
            "refresh_expires_in": self.refresh_expires_in,
            "device_id": self.device_id,
            "agent": self.agent,
        })
    }
}

/// Why a renewal was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshRefusal {
    /// A superseded token; `end_all`: the user still has sign-ins to end.
    Reused {
        end_all: bool,
    },
    Expired,
    Ended,
    Invalid,
}

/// Decides, after the conditional swap failed, what the presented token was.
/// A superseded token within its lifetime is reuse while its sign-in is live,
/// and stays reported as reuse once reuse ended it (so every loser of a race
/// hears the same code); a sign-in ended otherwise reports `Ended`.
pub fn classify(status: Option<&RefreshStatus>, now: i64) -> RefreshRefusal {
    let Some(s) = status else {
        return RefreshRefusal::Invalid;
    };
    let expired = s.expires_at <= now;
    let ended_by_reuse = s.end_reason.as_deref() == Some(EndReason::RefreshTokenReused.as_str());
    match (s.state == USED, s.ended_at.is_some(), expired) {
        (true, false, false) => RefreshRefusal::Reused { end_all: true },
        (true, true, false) if ended_by_reuse => RefreshRefusal::Reused { end_all: false },
        (_, true, _) => RefreshRefusal::Ended,
        (_, false, true) => RefreshRefusal::Expired,
        // Current, live and unexpired, yet the swap did not match: the state
        // only moves forward, so this cannot happen; refuse without detail.
        (false, false, false) => RefreshRefusal::Invalid,
    }
}

impl RefreshRefusal {
    pub fn error(self) -> Error {
        let (code, message) = match self {
            RefreshRefusal::Reused { .. } => (
                "refresh_token_reused",
                "This refresh token was already used, so it may have been copied: every agent sign-in of this user has ended. Log in and sign in again.",
            ),
            RefreshRefusal::Expired => (
                "refresh_token_expired",
                "The refresh token has expired. Log in and sign in again.",
            ),
            RefreshRefusal::Ended => (
                "sign_in_ended",
                "This sign-in has ended. Log in and sign in again.",
            ),
            RefreshRefusal::Invalid => (
                "invalid_refresh_token",
                "The refresh token is not valid. Log in and sign in again.",
            ),
        };
        Error::unauthorized(code, message)
    }
}

/// Whole seconds from `now` to `until`, rounded up (as `expires_in` says them).
fn seconds_left(until: i64, now: i64) -> i64 {
    (until - now + 999).div_euclid(1000).max(0)
}

/// An access token for a sign-in that ends at `ends_at` (Unix ms) at the latest.
fn mint_access(
    auth: &Auth,
    user_id: &str,
    device_id: &str,
    agent: &str,
    ends_at: i64,
) -> (String, TokenRecord) {
    let (token, claims) = auth.tokens.issue_until(
        tokens::ACCESS,
        user_id,
        auth.lifetimes.access_token,
        ends_at,
        Some(device_id),
        Some(agent),
    );
    let record = TokenRecord {
        hash: sha256_hex(&claims.jti),
        expires_at: claims.exp_ms,
    };
    (token, record)
}

/// Starts a sign-in for `user` on a new device of `agent`.
pub async fn sign_in(auth: &Auth, user: &UserInfo, agent: &Agent, label: String) -> Result<Issued> {
    if !agent.allows_user(&user.email) {
        return Err(Error::forbidden(
            "agent_forbidden",
            format!(
                "You may not sign in to the agent '{}'; ask an administrator.",
                agent.address
            ),
        ));
    }
    let s = &auth.lifetimes;
    let now = now_ms();
    let device_id = new_id();
    let refresh_token = new_secret(REFRESH_PREFIX);
    let ends_at = now + s.sign_in_max_age * 1000;
    let refresh = TokenRecord {
        hash: sha256_hex(&refresh_token),
        expires_at: (now + s.refresh_token * 1000).min(ends_at),
    };
    let (access_token, access) =
        mint_access(auth, &user.id, &device_id, agent.address.as_str(), ends_at);
    let row = SignInRow {
        device_id: device_id.clone(),
        user_id: user.id.clone(),
        user_email: user.email.clone(),
        agent: agent.address.to_string(),
        device_label: label,
        created_at: now,
        // Signing in is the device's first use.
        last_used_at: Some(now),
        expires_at: refresh.expires_at,
        ended_at: None,
        end_reason: None,
    };
    auth.store.create_sign_in(&row, &refresh, &access).await?;
    Ok(Issued {
        access_token,
        refresh_token,
        // Minted a moment after `now`: never say more than the lifetime.
        expires_in: seconds_left(access.expires_at, now).min(s.access_token),
        refresh_expires_in: seconds_left(refresh.expires_at, now).min(s.refresh_token),
        device_id,
        agent: row.agent,
    })
}

/// Renews a sign-in: the presented refresh token is used up, a new one and a
/// new access token come back. A superseded token ends all the user's sign-ins
/// before the refusal is returned.
pub async fn renew(auth: &Auth, presented: &str) -> Result<Issued> {
    if !presented.starts_with(REFRESH_PREFIX) || presented.len() > 256 {
        return Err(RefreshRefusal::Invalid.error());
    }
    let s = &auth.lifetimes;
    let old_hash = sha256_hex(presented);
    let now = now_ms();
    let refresh_token = new_secret(REFRESH_PREFIX);
    let refresh = TokenRecord {
        hash: sha256_hex(&refresh_token),
        expires_at: now + s.refresh_token * 1000,
    };
    let max_age_ms = s.sign_in_max_age * 1000;
    let rotated = auth
        .store
        .rotate_refresh_token(&old_hash, refresh, now, max_age_ms, |row| {
            let ends_at = row.created_at + max_age_ms;
            let (token, record) =
                mint_access(auth, &row.user_id, &row.device_id, &row.agent, ends_at);
            let expires_at = record.expires_at;
            (record, (token, expires_at))
        })
        .await?;
    let Some((row, (access_token, access_expires_at))) = rotated else {
        let status = auth.store.refresh_token_status(&old_hash).await?;
        let refusal = classify(status.as_ref(), now);
        if let (RefreshRefusal::Reused { end_all: true }, Some(st)) = (refusal, &status) {
            end_all_of_user(auth, &st.user_id, EndReason::RefreshTokenReused).await?;
            tracing::warn!(device_id = %st.device_id, "superseded refresh token presented; all sign-ins of the user ended");
        }
        return Err(refusal.error());
    };
    // Disabling a user ends their sign-ins; this catches a user disabled by other means.
    if !auth.user(&row.user_id).await?.is_some_and(|u| u.is_active) {
        end(auth, &row.device_id, None, EndReason::UserDisabled).await?;
        return Err(RefreshRefusal::Ended.error());
    }
    auth.last_used.sign_ins.insert(row.device_id.clone(), now);
    Ok(Issued {
        access_token,
        refresh_token,
        expires_in: seconds_left(access_expires_at, now).min(s.access_token),
        // The store capped the refresh token at the sign-in's maximum age.
        refresh_expires_in: seconds_left(row.expires_at, now).min(s.refresh_token),
        device_id: row.device_id,
        agent: row.agent,
    })
}

/// Ends one live sign-in (only `owner`'s, when given); false when there was none.
pub async fn end(
    auth: &Auth,
    device_id: &str,
    owner: Option<&str>,
    reason: EndReason,
) -> Result<bool, sqlx::Error> {
    let ended = auth
        .store
        .end_sign_in(device_id, owner, reason.as_str(), now_ms())
        .await?;
    if ended {
        auth.invalidate(Invalidation::SignIn(device_id.to_string()))
            .await;
    }
    Ok(ended)
}

/// Ends every live sign-in of a user, on every device and agent.
pub async fn end_all_of_user(
    auth: &Auth,
    user_id: &str,
    reason: EndReason,
) -> Result<usize, sqlx::Error> {
    let devices = auth
        .store
        .end_user_sign_ins(user_id, reason.as_str(), now_ms())
        .await?;
    for d in &devices {
        auth.invalidate(Invalidation::SignIn(d.clone())).await;
    }
    Ok(devices.len())
}

/// Ends the live sign-ins of `agent` whose user it no longer allows; returns
/// their device ids, for the caller to invalidate.
pub async fn end_unallowed(store: &Store, agent: &Agent) -> Result<Vec<String>, sqlx::Error> {
    if agent.allowed_users.is_none() {
        return Ok(Vec::new());
    }
    let now = now_ms();
    let mut ended = Vec::new();
    for row in store.live_sign_ins_of_agent(agent.address.as_str()).await? {
        if !agent.allows_user(&row.user_email)
            && store
                .end_sign_in(
                    &row.device_id,
                    None,
                    EndReason::UserNotAllowed.as_str(),
                    now,
                )
                .await?
        {
            ended.push(row.device_id);
        }
    }
    Ok(ended)
}

fn invalid_access() -> Error {
    Error::unauthorized(
        "invalid_token",
        "The access token is not valid; renew it or sign in again.",
    )
}

/// The live sign-in and active user behind a verified access token. Cached per
/// access token; a miss reads the database once.
pub async fn check_access(
    auth: &Auth,
    claims: &Claims,
) -> Result<(Arc<SignInInfo>, Arc<UserInfo>)> {
    let (Some(sid), Some(agt)) = (&claims.sid, &claims.agt) else {
        return Err(invalid_access());
    };
    let key = sha256_hex(&claims.jti);
    let info = auth
        .sign_ins
        .get_or_load(key.as_str(), || async {
            let row = auth.store.sign_in_by_access(&key).await?;
            Ok::<_, sqlx::Error>(row.map(|r| Arc::new(SignInInfo::from(&r))))
        })
        .await?
        .ok_or_else(invalid_access)?;
    if &info.device_id != sid || &info.agent != agt || info.user_id != claims.sub {
        return Err(invalid_access());
    }
    if info.ended {
        return Err(RefreshRefusal::Ended.error());
    }
    match auth.user(&info.user_id).await? {
        Some(u) if u.is_active => Ok((info, u)),
        _ => Err(Error::unauthorized(
            "sign_in_ended",
            "This sign-in's user is disabled.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: &str, expires_at: i64, ended: Option<&str>) -> RefreshStatus {
        RefreshStatus {
            state: state.into(),
            expires_at,
            device_id: "d".into(),
            user_id: "u".into(),
            ended_at: ended.map(|_| 1),
            end_reason: ended.map(str::to_string),
        }
    }

    #[test]
    fn refusals_are_classified_by_state_sign_in_and_expiry() {
        use RefreshRefusal::*;
        let now = 100;
        let cases = [
            (None, Invalid),
            (Some(status("used", 200, None)), Reused { end_all: true }),
            (
                Some(status("used", 200, Some("refresh_token_reused"))),
                Reused { end_all: false },
            ),
            (Some(status("used", 200, Some("signed_out"))), Ended),
            (Some(status("used", 100, None)), Expired),
            (Some(status("current", 200, Some("signed_out"))), Ended),
            (
                Some(status("current", 200, Some("refresh_token_reused"))),
                Ended,
            ),
            (Some(status("current", 100, None)), Expired),
            (Some(status("current", 50, Some("user_disabled"))), Ended),
            (Some(status("current", 200, None)), Invalid),
        ];
        for (s, want) in cases {
            assert_eq!(classify(s.as_ref(), now), want, "{s:?}");
        }
    }

    #[test]
    fn refusal_codes_are_the_contracts() {
        let codes: Vec<_> = [
            RefreshRefusal::Reused { end_all: false },
            RefreshRefusal::Expired,
            RefreshRefusal::Ended,
            RefreshRefusal::Invalid,
        ]
        .into_iter()
        .map(|r| (r.error().status(), r.error().code.to_string()))
        .collect();
        assert_eq!(
            codes,
            vec![
                (401, "refresh_token_reused".to_string()),
                (401, "refresh_token_expired".to_string()),
                (401, "sign_in_ended".to_string()),
                (401, "invalid_refresh_token".to_string()),
            ]
        );
    }

    #[test]
    fn device_labels_are_1_to_200_characters() {
        assert!(parse_device_label(&"é".repeat(200)).is_ok());
        assert!(parse_device_label(&"x".repeat(201)).is_err());
        assert!(parse_device_label("").is_err());
        assert!(parse_device_label("   ").is_err());
        assert!(parse_device_label("a\nb").is_err());
        assert_eq!(
            parse_device_label("  Ann's laptop ").ok().as_deref(),
            Some("Ann's laptop")
        );
    }
}
