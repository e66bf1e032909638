//! Agent sign-ins and their tokens. Refresh tokens and access-token ids are
//! stored only as SHA-256 hashes. Rotation is decided by one conditional
//! UPDATE, so of several servers racing with one token exactly one wins.

use sqlx::FromRow;

use super::Store;

#[derive(Clone, Debug, FromRow)]
pub struct SignInRow {
    pub device_id: String,
    pub user_id: String,
    pub user_email: String,
    pub agent: String,
    pub device_label: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    /// Expiry of the current refresh token.
    pub expires_at: i64,
    pub ended_at: Option<i64>,
    pub end_reason: Option<String>,
}

/// A hashed secret and when it stops working.
#[derive(Clone, Debug)]
pub struct TokenRecord {
    pub hash: String,
    pub expires_at: i64,
}

/// What the database knows about a presented refresh token.
#[derive(Clone, Debug, FromRow)]
pub struct RefreshStatus {
    pub state: String,
    pub expires_at: i64,
    pub device_id: String,
    pub user_id: String,
    pub ended_at: Option<i64>,
    pub end_reason: Option<String>,
}

pub const CURRENT: &str = "current";
pub const USED: &str = "used";

const SELECT: &str =
    "SELECT s.device_id, s.user_id, u.email AS user_email, s.agent, s.device_label, \
                      s.created_at, s.last_used_at, s.expires_at, s.ended_at, s.end_reason \
                      FROM sign_ins s JOIN users u ON u.id = s.user_id";

impl Store {
    /// Stores a new sign-in with its first refresh token and access-token id.
    pub async fn create_sign_in(
        &self,
        row: &SignInRow,
        refresh: &TokenRecord,
        access: &TokenRecord,
    ) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO sign_ins (device_id, user_id, agent, device_label, created_at, last_used_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&row.device_id)
        .bind(&row.user_id)
        .bind(&row.agent)
        .bind(&row.device_label)
        .bind(row.created_at)
        .bind(row.last_used_at)
        .bind(row.expires_at)
        .execute(&mut *tx)
        .await?;
        insert_refresh(&mut tx, &row.device_id, refresh, row.created_at).await?;
        insert_access(&mut tx, &row.device_id, access, row.created_at).await?;
        tx.commit().await
    }

    /// Swaps the current refresh token `old_hash` for `new_refresh` in one
    /// transaction. The first statement is the conditional UPDATE that decides
    /// a race: only a current, unexpired token of a live sign-in matches, and
    /// once it is `used` no other transaction can match it. `mint` makes the
    /// access token for the sign-in (its id hash is stored here) and may hand
    /// back anything else. `None`: the token did not qualify; nothing changed.
    pub async fn rotate_refresh_token<T>(
        &self,
        old_hash: &str,
        mut new_refresh: TokenRecord,
        now: i64,
        max_age_ms: i64,
        mint: impl FnOnce(&SignInRow) -> (TokenRecord, T),
    ) -> Result<Option<(SignInRow, T)>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let device: Option<String> = sqlx::query_scalar(
            "UPDATE refresh_tokens SET state = $4
             WHERE token_hash = $1 AND state = $3 AND expires_at > $2
               AND EXISTS (SELECT 1 FROM sign_ins s
                           WHERE s.device_id = refresh_tokens.device_id AND s.ended_at IS NULL)
             RETURNING device_id",
        )
        .bind(old_hash)
        .bind(now)
        .bind(CURRENT)
        .bind(USED)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(device) = device else {
            return Ok(None);
        };
        let mut row = sqlx::query_as::<_, SignInRow>(&format!("{SELECT} WHERE s.device_id = $1"))
            .bind(&device)
            .fetch_one(&mut *tx)
            .await?;
        // However often renewed, a sign-in ends at its maximum age.
        new_refresh.expires_at = new_refresh.expires_at.min(row.created_at + max_age_ms);
        insert_refresh(&mut tx, &device, &new_refresh, now).await?;
        sqlx::query("UPDATE sign_ins SET expires_at = $2 WHERE device_id = $1")
            .bind(&device)
            .bind(new_refresh.expires_at)
            .execute(&mut *tx)
            .await?;
        row.expires_at = new_refresh.expires_at;
        let (access, extra) = mint(&row);
        insert_access(&mut tx, &device, &access, now).await?;
        // Keep the device's history bounded: a superseded refresh token past its
        // own expiry no longer signals reuse, and an expired access token is refused anyway.
        sqlx::query(
            "DELETE FROM refresh_tokens WHERE device_id = $1 AND state = $3 AND expires_at <= $2",
        )
        .bind(&device)
        .bind(now)
        .bind(USED)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM access_tokens WHERE device_id = $1 AND expires_at <= $2")
            .bind(&device)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some((row, extra)))
    }

    pub async fn refresh_token_status(
        &self,
        hash: &str,
    ) -> Result<Option<RefreshStatus>, sqlx::Error> {
        sqlx::query_as::<_, RefreshStatus>(
            "SELECT r.state, r.expires_at, r.device_id, s.user_id, s.ended_at, s.end_reason
             FROM refresh_tokens r JOIN sign_ins s ON s.device_id = r.device_id
             WHERE r.token_hash = $1",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
    }

    /// The sign-in an access token (by the hash of its id) was issued for.
    pub async fn sign_in_by_access(
        &self,
        jti_hash: &str,
    ) -> Result<Option<SignInRow>, sqlx::Error> {
        sqlx::query_as::<_, SignInRow>(&format!(
            "{SELECT} JOIN access_tokens a ON a.device_id = s.device_id WHERE a.jti_hash = $1"
        ))
        .bind(jti_hash)
        .fetch_optional(&self.pool)
        .await
    }

    /// Ends one live sign-in (only `owner`'s, when given); returns whether it did.
    pub async fn end_sign_in(
        &self,
        device_id: &str,
        owner: Option<&str>,
        reason: &str,
        now: i64,
    ) -> Result<bool, sqlx::Error> {
        const SQL: &str = "UPDATE sign_ins SET ended_at = $2, end_reason = $3
                           WHERE device_id = $1 AND ended_at IS NULL";
        let res = match owner {
            Some(user) => {
                sqlx::query(&format!("{SQL} AND user_id = $4"))
                    .bind(device_id)
                    .bind(now)
                    .bind(reason)
                    .bind(user)
                    .execute(&self.pool)
                    .await?
            }
            None => {
                sqlx::query(SQL)
                    .bind(device_id)
                    .bind(now)
                    .bind(reason)
                    .execute(&self.pool)
                    .await?
            }
        };
        Ok(res.rows_affected() > 0)
    }

    /// Ends every live sign-in of a user; returns their device ids.
    pub async fn end_user_sign_ins(
        &self,
        user_id: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar(
            "UPDATE sign_ins SET ended_at = $2, end_reason = $3
             WHERE user_id = $1 AND ended_at IS NULL RETURNING device_id",
        )
        .bind(user_id)
        .bind(now)
        .bind(reason)
        .fetch_all(&self.pool)
        .await
    }

    pub async fn live_sign_ins_of_agent(&self, agent: &str) -> Result<Vec<SignInRow>, sqlx::Error> {
        sqlx::query_as::<_, SignInRow>(&format!(
            "{SELECT} WHERE s.agent = $1 AND s.ended_at IS NULL"
        ))
        .bind(agent)
        .fetch_all(&self.pool)
        .await
    }

    /// A user's sign-ins, newest first: live ones only (not ended, refresh token
    /// not expired at `now`), or every one ever made.
    pub async fn sign_ins_of_user(
        &self,
        user_id: &str,
        live_only: bool,
        now: i64,
    ) -> Result<Vec<SignInRow>, sqlx::Error> {
        const ORDER: &str = "ORDER BY s.created_at DESC, s.device_id DESC";
        if live_only {
            sqlx::query_as::<_, SignInRow>(&format!(
                "{SELECT} WHERE s.user_id = $1 AND s.ended_at IS NULL AND s.expires_at > $2 {ORDER}"
            ))
            .bind(user_id)
            .bind(now)
            .fetch_all(&self.pool)
            .await
        } else {
            sqlx::query_as::<_, SignInRow>(&format!("{SELECT} WHERE s.user_id = $1 {ORDER}"))
                .bind(user_id)
                .fetch_all(&self.pool)
                .await
        }
    }
}

/// Which sign-ins a list shows.
#[derive(Clone, Debug, Default)]
pub struct SignInFilter<'a> {
    pub user_id: Option<&'a str>,
    pub agent: Option<&'a str>,
    /// Only live ones (not ended, refresh token not expired).
    pub live_only: bool,
}

impl Store {
    /// A page of sign-ins, newest first, strictly after the cursor
    /// `(created_at, device_id)` of the last entry of the previous page.
    pub async fn list_sign_ins(
        &self,
        filter: &SignInFilter<'_>,
        before: Option<(i64, &str)>,
        limit: i64,
        now: i64,
    ) -> Result<Vec<SignInRow>, sqlx::Error> {
        sqlx::query_as::<_, SignInRow>(&format!(
            "{SELECT} WHERE ($1 IS NULL OR s.user_id = $1) AND ($2 IS NULL OR s.agent = $2)
             AND ($3 = 0 OR (s.ended_at IS NULL AND s.expires_at > $4))
             AND ($5 IS NULL OR s.created_at < $5 OR (s.created_at = $5 AND s.device_id < $6))
             ORDER BY s.created_at DESC, s.device_id DESC LIMIT $7"
        ))
        .bind(filter.user_id)
        .bind(filter.agent)
        .bind(i64::from(filter.live_only))
        .bind(now)
        .bind(before.map(|b| b.0))
        .bind(before.map(|b| b.1))
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }
}

async fn insert_refresh(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    device_id: &str,
    t: &TokenRecord,
    now: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO refresh_tokens (token_hash, device_id, state, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&t.hash)
    .bind(device_id)
    .bind(CURRENT)
    .bind(now)
    .bind(t.expires_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn insert_access(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    device_id: &str,
    t: &TokenRecord,
    now: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO access_tokens (jti_hash, device_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(&t.hash)
    .bind(device_id)
    .bind(now)
    .bind(t.expires_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
