//! Web console sessions: rows keyed by the hash of the cookie's secret.

use sqlx::FromRow;

use super::Store;

#[derive(Clone, Debug, FromRow)]
pub struct ConsoleSessionRow {
    pub token_hash: String,
    pub user_id: String,
    pub csrf_token: String,
    pub created_at: i64,
    pub expires_at: i64,
}

impl Store {
    pub async fn create_console_session(&self, row: &ConsoleSessionRow) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO console_sessions (token_hash, user_id, csrf_token, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&row.token_hash)
        .bind(&row.user_id)
        .bind(&row.csrf_token)
        .bind(row.created_at)
        .bind(row.expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The session of a cookie, if it has not expired at `now`.
    pub async fn console_session(
        &self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<ConsoleSessionRow>, sqlx::Error> {
        sqlx::query_as::<_, ConsoleSessionRow>(
            "SELECT token_hash, user_id, csrf_token, created_at, expires_at FROM console_sessions
             WHERE token_hash = $1 AND expires_at > $2",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
    }

    /// Ends one session (sign-out); expired rows are swept on the way.
    pub async fn delete_console_session(
        &self,
        token_hash: &str,
        now: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM console_sessions WHERE token_hash = $1 OR expires_at <= $2")
            .bind(token_hash)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Ends every console session of a user (disabled, or a new password).
    pub async fn delete_console_sessions_of_user(&self, user_id: &str) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM console_sessions WHERE user_id = $1")
            .bind(user_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
