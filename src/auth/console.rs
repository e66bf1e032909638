//! Web console sessions. The cookie carries a random secret (`gcs_…`); the
//! database keeps only its hash, the user and the session's CSRF token, so a
//! session ends for good at sign-out, on every server, and a copy of the
//! database opens no session.

use std::sync::Arc;

use crate::auth::{ct_eq, new_secret, sha256_hex, Auth};
use crate::error::Result;
use crate::store::console::ConsoleSessionRow;
use crate::store::now_ms;
use crate::users::UserInfo;

/// A live console session.
#[derive(Clone, Debug)]
pub struct ConsoleSession {
    pub user: Arc<UserInfo>,
    /// The token every state-changing form must carry.
    pub csrf: String,
    pub expires_at: i64,
}

/// What a new session hands out: the cookie's secret and the session.
pub struct Started {
    pub secret: String,
    pub lifetime_s: i64,
}

/// Starts a session for a user who just proved who they are. It lives as
/// long as a login token.
pub async fn start(auth: &Auth, user_id: &str) -> Result<Started> {
    let secret = new_secret("gcs_");
    let now = now_ms();
    let lifetime_s = auth.lifetimes.login_token;
    auth.store
        .create_console_session(&ConsoleSessionRow {
            token_hash: sha256_hex(&secret),
            user_id: user_id.to_string(),
            csrf_token: new_secret(""),
            created_at: now,
            expires_at: now + lifetime_s * 1000,
        })
        .await?;
    Ok(Started { secret, lifetime_s })
}

/// The session a cookie names: `None` when unknown, expired, ended, or its
/// user is disabled or gone.
pub async fn check(auth: &Auth, secret: &str) -> Result<Option<ConsoleSession>> {
    if !secret.starts_with("gcs_") || secret.len() > 100 {
        return Ok(None);
    }
    let hash = sha256_hex(secret);
    let Some(row) = auth.store.console_session(&hash, now_ms()).await? else {
        return Ok(None);
    };
    if !ct_eq(&row.token_hash, &hash) {
        return Ok(None);
    }
    match auth.user(&row.user_id).await? {
        Some(user) if user.is_active => Ok(Some(ConsoleSession {
            user,
            csrf: row.csrf_token,
            expires_at: row.expires_at,
        })),
        _ => Ok(None),
    }
}

/// Ends the session a cookie names (sign-out).
pub async fn end(auth: &Auth, secret: &str) -> Result<()> {
    auth.store
        .delete_console_session(&sha256_hex(secret), now_ms())
        .await?;
    Ok(())
}

/// Whether a form's CSRF token is the session's (constant time).
pub fn csrf_matches(session: &ConsoleSession, presented: &str) -> bool {
    !presented.is_empty() && ct_eq(&session.csrf, presented)
}
