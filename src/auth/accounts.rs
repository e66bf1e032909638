//! Accounts: creating and changing users, and creating API keys. The admin
//! API, the user's own API and the command line all go through these, so a
//! rule is written once.

use crate::auth::signins::{self, EndReason};
use crate::auth::{new_secret, passwords, sha256_hex, Auth};
use crate::error::{Error, Result};
use crate::runtime::Invalidation;
use crate::store::keys::ApiKeyRow;
use crate::store::users::UserRow;
use crate::store::{new_id, now_ms, Store};
use crate::users::Email;

/// Hashes a password that follows the rules (else `validation_error`, param `password`).
pub async fn hash_new_password(password: String) -> Result<String> {
    passwords::check_password_rules(&password).map_err(|m| Error::validation("password", m))?;
    passwords::hash(password).await.map_err(Error::internal)
}

/// Sets a user's password by e-mail (the command line's `users set-password`).
pub async fn set_password(auth: &Auth, email: &str, password: String) -> Result<UserRow> {
    let user = user_by_email(&auth.store, email).await?;
    let change = UserChange {
        password: Some(password),
        ..UserChange::default()
    };
    update_user(auth, &user.id, change).await
}

/// Creates a user; a taken e-mail is 409 `user_exists`.
pub async fn create_user(
    store: &Store,
    email: &str,
    password: String,
    is_admin: bool,
) -> Result<UserRow> {
    let email = Email::parse(email)?;
    let hash = hash_new_password(password).await?;
    store
        .create_user(email.as_str(), &hash, is_admin)
        .await?
        .ok_or_else(|| Error::conflict("user_exists", "A user with this e-mail already exists."))
}

/// What an administrator may change on a user.
#[derive(Debug, Default)]
pub struct UserChange {
    pub is_active: Option<bool>,
    pub is_admin: Option<bool>,
    pub password: Option<String>,
}

/// Changes a user. Disabling ends the user's sign-ins (ended, not merely
/// refused, so re-enabling does not revive them); a new password ends them
/// and every login token issued before it. Every cached credential of the
/// user is dropped here and on the other servers.
pub async fn update_user(auth: &Auth, id: &str, change: UserChange) -> Result<UserRow> {
    let password_changed = change.password.is_some();
    let hash = match change.password {
        Some(p) => Some(hash_new_password(p).await?),
        None => None,
    };
    let user = auth
        .store
        .update_user(id, change.is_active, change.is_admin, hash.as_deref())
        .await?
        .ok_or_else(|| Error::not_found("user_not_found", "There is no user with this id."))?;
    if change.is_active == Some(false) {
        signins::end_all_of_user(auth, id, EndReason::UserDisabled).await?;
    } else if password_changed {
        // Login tokens issued before now are refused (`tokens_valid_after`).
        signins::end_all_of_user(auth, id, EndReason::PasswordChanged).await?;
    }
    if change.is_active == Some(false) || hash.is_some() {
        // Console sessions are checked against the database on every page.
        auth.store.delete_console_sessions_of_user(id).await?;
    }
    auth.invalidate(Invalidation::User(id.to_string())).await;
    Ok(user)
}

/// Checks an e-mail and password under the login throttle: the API's login
/// and the console's sign-in both go through here. Unknown user, wrong
/// password and disabled user are one error (`login_bad_credentials`);
/// past the throttle, `too_many_attempts` with the seconds to wait. The
/// attempt is counted (in the database, for every server) before the
/// password is checked, so no more than the limit are checked per window.
pub async fn password_login(
    auth: &Auth,
    throttle: &crate::limits::login::LoginThrottle,
    email: &str,
    password: String,
    client_ip: std::net::IpAddr,
) -> Result<UserRow> {
    let email = email.trim().to_lowercase();
    let attempt = match throttle.attempt(&email, client_ip).await? {
        Ok(a) => a,
        Err(wait) => {
            let mut e = Error::new(
                crate::error::ErrorKind::TooManyRequests,
                "too_many_attempts",
                format!("Too many failed logins; try again in {wait} seconds."),
            );
            e.retry_after = Some(wait);
            return Err(e);
        }
    };
    let user = auth.store.user_by_email(&email).await?;
    // Verify even when the user is unknown, so both cases cost the same time.
    let ok = passwords::verify(user.as_ref().map(|u| u.password_hash.clone()), password).await;
    match user {
        Some(u) if ok && u.active() => {
            throttle.succeeded(attempt).await?;
            Ok(u)
        }
        // The attempt stays counted as a failure.
        _ => Err(Error::bad_request(
            "login_bad_credentials",
            "The e-mail or password is wrong.",
        )),
    }
}

/// A request for a new API key, as the API and the command line take it.
#[derive(Clone, Debug, Default)]
pub struct NewKey {
    pub name: String,
    /// RFC 3339.
    pub expires_at: Option<String>,
    pub models: Option<Vec<String>>,
    pub limits: crate::limits::Limits,
    /// The key's `mcp` grant, checked by the caller (`None`: no MCP access).
    pub mcp: Option<crate::users::mcp_grant::McpGrant>,
}

/// Checks `new` and creates the key for `user_id`. Returns the stored row and
/// the secret (`gtk_…`), which is never stored and never shown again.
pub async fn create_key(store: &Store, user_id: &str, new: NewKey) -> Result<(ApiKeyRow, String)> {
    let row = new_key_row(user_id, new, now_ms())?;
    let secret = new_secret("gtk_");
    let row = ApiKeyRow {
        key_hash: sha256_hex(&secret),
        ..row
    };
    store.insert_api_key(&row).await?;
    Ok((row, secret))
}

/// Checks `new` without creating anything (the command line refuses bad
/// input before it opens the database).
pub fn check_new_key(new: &NewKey) -> Result<()> {
    new_key_row("", new.clone(), now_ms()).map(|_| ())
}

/// The user with this e-mail; none is 404 `user_not_found`.
pub async fn user_by_email(store: &Store, email: &str) -> Result<UserRow> {
    let email = Email::parse(email)?;
    store
        .user_by_email(email.as_str())
        .await?
        .ok_or_else(|| Error::not_found("user_not_found", "There is no user with this e-mail."))
}

/// A user as the admin API and `gatehouse users list` show it: no password data.
pub fn user_json(u: &UserRow) -> serde_json::Value {
    serde_json::json!({
        "id": u.id, "email": u.email, "is_admin": u.admin(), "is_active": u.active(),
        "created_at": crate::time::rfc3339(u.created_at),
        "limits": crate::limits::Limits::from_db_or_closed(u.limits.as_deref(), &u.id),
        "mcp": crate::users::mcp_grant::McpGrant::from_db_or_closed(u.mcp.as_deref(), &u.id),
    })
}

/// A key as `GET /api/api-keys` and `gatehouse keys list` show it; the
/// secret only in the answer that creates it.
pub fn key_json(row: &ApiKeyRow, secret: Option<&str>) -> serde_json::Value {
    let models: Option<Vec<String>> = row
        .models
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok());
    let mut v = serde_json::json!({
        "id": row.id,
        "name": row.name,
        "created_at": crate::time::rfc3339(row.created_at),
        "expires_at": row.expires_at.map(crate::time::rfc3339),
        "models": models,
        "last_used_at": row.last_used_at.map(crate::time::rfc3339),
        "limits": crate::limits::Limits::from_db_or_closed(row.limits.as_deref(), &row.id),
        "mcp": crate::users::mcp_grant::McpGrant::from_db_or_closed(row.mcp.as_deref(), &row.id),
    });
    if let Some(k) = secret {
        v["key"] = serde_json::json!(k);
    }
    v
}

/// The rules of a new key (name, expiry in the future, a non-empty model list).
fn new_key_row(user_id: &str, new: NewKey, now: i64) -> Result<ApiKeyRow> {
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(Error::validation(
            "name",
            "'name' must be 1 to 200 characters.",
        ));
    }
    let expires_at = match new.expires_at.as_deref() {
        None => None,
        Some(s) => {
            let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|_| {
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
    let models = match new.models {
        None => None,
        Some(models) => {
            if models.is_empty() || models.iter().any(|m| m.trim().is_empty()) {
                return Err(Error::validation(
                    "models",
                    "'models' must be a non-empty list of model ids, or left out for every model.",
                ));
            }
            Some(serde_json::to_string(&models).map_err(Error::internal)?)
        }
    };
    Ok(ApiKeyRow {
        id: new_id(),
        user_id: user_id.to_string(),
        name: name.to_string(),
        key_hash: String::new(),
        models,
        created_at: now,
        expires_at,
        last_used_at: None,
        limits: new.limits.to_db(),
        mcp: crate::users::mcp_grant::McpGrant::to_db(new.mcp.as_ref()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, expires_at: Option<&str>, models: Option<Vec<&str>>) -> NewKey {
        NewKey {
            name: name.into(),
            expires_at: expires_at.map(str::to_string),
            models: models.map(|m| m.into_iter().map(str::to_string).collect()),
            limits: crate::limits::Limits::default(),
            mcp: None,
        }
    }

    #[test]
    fn key_rules_name_the_field_at_fault() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .timestamp_millis();
        let param = |k: NewKey| new_key_row("u", k, now).unwrap_err().param;
        assert_eq!(param(key(" ", None, None)).as_deref(), Some("name"));
        assert_eq!(
            param(key(&"n".repeat(201), None, None)).as_deref(),
            Some("name")
        );
        assert_eq!(
            param(key("k", Some("yesterday"), None)).as_deref(),
            Some("expires_at")
        );
        assert_eq!(
            param(key("k", Some("2025-12-31T23:59:59Z"), None)).as_deref(),
            Some("expires_at")
        );
        assert_eq!(
            param(key("k", None, Some(vec![]))).as_deref(),
            Some("models")
        );
        assert_eq!(
            param(key("k", None, Some(vec![" "]))).as_deref(),
            Some("models")
        );
        let ok = new_key_row(
            "u",
            key(" k ", Some("2026-02-01T00:00:00Z"), Some(vec!["m"])),
            now,
        )
        .unwrap();
        assert_eq!(ok.name, "k");
        assert_eq!(ok.models.as_deref(), Some(r#"["m"]"#));
        assert!(ok.expires_at.is_some());
    }
}
