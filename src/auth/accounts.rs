//! User accounts and API keys as an administrator changes them: the rules and
//! flows shared by the admin API and the command line (`gatehouse users ...`,
//! `gatehouse keys ...`). Callers send the returned invalidations, so servers
//! holding a changed user, key or sign-in in cache drop it.

use crate::error::{Error, Result};
use crate::runtime::Invalidation;
use crate::store::keys::ApiKeyRow;
use crate::store::users::UserRow;
use crate::store::{new_id, now_ms, Store};
use crate::time::rfc3339;
use crate::users::Email;

use super::passwords;
use super::signins::EndReason;

/// A user as the admin API and `gatehouse users list` show it: no password data.
pub fn user_json(u: &UserRow) -> serde_json::Value {
    serde_json::json!({
        "id": u.id, "email": u.email, "is_admin": u.admin(), "is_active": u.active(),
        "created_at": rfc3339(u.created_at),
    })
}

/// Checks the password rules, then hashes (Argon2id, off the async threads).
async fn checked_hash(password: String) -> Result<String> {
    passwords::check_password_rules(&password).map_err(|m| Error::validation("password", m))?;
    passwords::hash(password).await.map_err(Error::internal)
}

/// Creates a user. A malformed e-mail or a password outside the rules is a
/// validation error; a taken e-mail is 409 `user_exists`.
pub async fn create_user(
    store: &Store,
    email: &str,
    password: String,
    is_admin: bool,
) -> Result<UserRow> {
    let email = Email::parse(email)?.into_string();
    let hash = checked_hash(password).await?;
    store
        .create_user(&email, &hash, is_admin)
        .await?
        .ok_or_else(|| Error::conflict("user_exists", "A user with this e-mail already exists."))
}

/// What an administrator may change about a user.
#[derive(Debug, Default)]
pub struct UserChange {
    pub is_active: Option<bool>,
    pub is_admin: Option<bool>,
    pub password: Option<String>,
}

/// Changes a user; an unknown id is 404 `user_not_found`. Disabling ends the
/// user's sign-ins (ended, not merely refused, so enabling the user again
/// does not revive them). Returns the user and what to invalidate.
pub async fn update_user(
    store: &Store,
    id: &str,
    change: UserChange,
) -> Result<(UserRow, Vec<Invalidation>)> {
    let hash = match change.password {
        Some(p) => Some(checked_hash(p).await?),
        None => None,
    };
    let user = store
        .update_user(id, change.is_active, change.is_admin, hash.as_deref())
        .await?
        .ok_or_else(|| Error::not_found("user_not_found", "There is no user with this id."))?;
    let mut stale = Vec::new();
    if change.is_active == Some(false) {
        let devices = store
            .end_user_sign_ins(id, EndReason::UserDisabled.as_str(), now_ms())
            .await?;
        stale.extend(devices.into_iter().map(Invalidation::SignIn));
    }
    stale.push(Invalidation::User(id.to_string()));
    Ok((user, stale))
}

/// The user with this e-mail; none is 404 `user_not_found`.
pub async fn user_by_email(store: &Store, email: &str) -> Result<UserRow> {
    let email = Email::parse(email)?;
    store.user_by_email(email.as_str()).await?.ok_or_else(|| {
        Error::not_found(
            "user_not_found",
            format!("There is no user with the e-mail {email}."),
        )
    })
}

/// A new API key as asked for (`POST /api/api-keys`, `gatehouse keys create`).
#[derive(Debug, Default)]
pub struct NewKey {
    pub name: String,
    /// RFC 3339; must be in the future.
    pub expires_at: Option<String>,
    /// Model ids the key may use; `None` means every model.
    pub models: Option<Vec<String>>,
}

pub const MAX_KEY_NAME_CHARS: usize = 200;

impl NewKey {
    /// Checks the request as `POST /api/api-keys` does; returns the row to
    /// store for `user_id` with this `key_hash`.
    pub fn validate(&self, user_id: &str, key_hash: String, now: i64) -> Result<ApiKeyRow> {
        let name = self.name.trim();
        if name.is_empty() || name.chars().count() > MAX_KEY_NAME_CHARS {
            return Err(Error::validation(
                "name",
                format!("'name' must be 1 to {MAX_KEY_NAME_CHARS} characters."),
            ));
        }
        let expires_at = match self.expires_at.as_deref() {
            None => None,
            Some(s) => {
                let t = chrono::DateTime::parse_from_rfc3339(s.trim()).map_err(|_| {
                    Error::validation("expires_at", "'expires_at' must be an RFC 3339 timestamp.")
                })?;
                let ms = t.timestamp_millis();
                if ms <= now {
                    return Err(Error::validation(
                        "expires_at",
                        "'expires_at' must be in the future.",
                    ));
                }
                Some(ms)
            }
        };
        let models = match &self.models {
            None => None,
            Some(m) if m.is_empty() || m.iter().any(|id| id.trim().is_empty()) => {
                return Err(Error::validation(
                    "models",
                    "'models' must be a non-empty list of model ids, or left out for every model.",
                ));
            }
            Some(m) => Some(serde_json::to_string(m).map_err(Error::internal)?),
        };
        Ok(ApiKeyRow {
            id: new_id(),
            user_id: user_id.to_string(),
            name: name.to_string(),
            key_hash,
            models,
            created_at: now,
            expires_at,
            last_used_at: None,
        })
    }
}

/// Creates an API key for `user_id`; returns the stored row and the secret
/// (`gtk_...`), which exists nowhere else: only its hash is stored.
pub async fn create_key(store: &Store, user_id: &str, new: NewKey) -> Result<(ApiKeyRow, String)> {
    let secret = super::new_secret("gtk_");
    let row = new.validate(user_id, super::sha256_hex(&secret), now_ms())?;
    store.insert_api_key(&row).await?;
    Ok((row, secret))
}

/// A key as `GET /api/api-keys` shows it; with `secret` only in the answer
/// that creates it.
pub fn key_json(row: &ApiKeyRow, secret: Option<&str>) -> serde_json::Value {
    let models: Option<Vec<String>> = row
        .models
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok());
    let mut v = serde_json::json!({
        "id": row.id,
        "name": row.name,
        "created_at": rfc3339(row.created_at),
        "expires_at": row.expires_at.map(rfc3339),
        "models": models,
        "last_used_at": row.last_used_at.map(rfc3339),
    });
    if let Some(k) = secret {
        v["key"] = serde_json::json!(k);
    }
    v
}
