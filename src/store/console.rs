//! Web console sessions: rows keyed by the hash of the cookie's secret.

use sqlx::FromRow;

use super::agent_data::{ApprovalRow, EventRow};
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

    /// Tools waiting for an administrator's decision, oldest first (the
    /// caller leaves out the ones a contract names).
    pub async fn held_tools(&self, limit: i64) -> Result<Vec<(String, String)>, sqlx::Error> {
        sqlx::query_as::<_, (String, String)>(
            "SELECT agent, name FROM agent_tools WHERE status = 'held'
             ORDER BY first_seen_at, agent, name LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }

    /// Open approvals (pending, not expired at `now`) per agent.
    pub async fn open_approvals(&self, now: i64) -> Result<Vec<(String, i64)>, sqlx::Error> {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT agent, COUNT(*) FROM approvals WHERE status = 'pending' AND expires_at > $1
             GROUP BY agent ORDER BY agent",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await
    }

    /// The newest `limit` approvals of an agent, optionally of one stored status.
    pub async fn recent_approvals(
        &self,
        agent: &str,
        status: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ApprovalRow>, sqlx::Error> {
        sqlx::query_as::<_, ApprovalRow>(&format!(
            "SELECT {} FROM approvals WHERE agent = $1 AND ($2 IS NULL OR status = $2)
             ORDER BY created_at DESC, id LIMIT $3",
            super::agent_data::APPROVAL_COLS
        ))
        .bind(agent)
        .bind(status)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }

    /// A page of an agent's events after the cursor (a `commit_seq`), in stored order, by device and type.
    pub async fn find_events(
        &self,
        agent: &str,
        device_id: Option<&str>,
        kind: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, sqlx::Error> {
        sqlx::query_as::<_, EventRow>(
            "SELECT seq_id, agent, device_id, user_id, event_id, type, time, conversation_id,
                    turn_id, data, received_at, commit_seq
             FROM events WHERE agent = $1 AND ($2 IS NULL OR device_id = $2)
             AND ($3 IS NULL OR type = $3) AND commit_seq > $4
             ORDER BY commit_seq LIMIT $5",
        )
        .bind(agent)
        .bind(device_id)
        .bind(kind)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }
}
