//! Reading usage records back: totals per model, user or agent.

use serde::Serialize;
use sqlx::FromRow;

use super::Store;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    Model,
    User,
    Agent,
}

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "model" => Some(GroupBy::Model),
            "user" => Some(GroupBy::User),
            "agent" => Some(GroupBy::Agent),
            _ => None,
        }
    }
}

/// Totals of one group. `errors` counts records with status 400 or more.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, FromRow)]
pub struct UsageTotals {
    pub key: String,
    pub requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub errors: i64,
}

const TOTALS: &str = "COUNT(*) AS requests,
    CAST(COALESCE(SUM(r.prompt_tokens), 0) AS BIGINT) AS prompt_tokens,
    CAST(COALESCE(SUM(r.completion_tokens), 0) AS BIGINT) AS completion_tokens,
    CAST(COALESCE(SUM(CASE WHEN r.status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT) AS errors";

impl Store {
    /// Totals of the records with `from <= at < to` (Unix ms), by group,
    /// ordered by key. Users are keyed by e-mail; records without an agent
    /// are left out of the agent grouping.
    pub async fn usage_totals(
        &self,
        from: i64,
        to: i64,
        group: GroupBy,
    ) -> Result<Vec<UsageTotals>, sqlx::Error> {
        let sql = match group {
            GroupBy::Model => format!(
                "SELECT r.model AS key, {TOTALS} FROM usage_records r
                 WHERE r.at >= $1 AND r.at < $2 GROUP BY r.model ORDER BY r.model"
            ),
            GroupBy::User => format!(
                "SELECT u.email AS key, {TOTALS} FROM usage_records r JOIN users u ON u.id = r.user_id
                 WHERE r.at >= $1 AND r.at < $2 GROUP BY u.email ORDER BY u.email"
            ),
            GroupBy::Agent => format!(
                "SELECT r.agent AS key, {TOTALS} FROM usage_records r
                 WHERE r.agent IS NOT NULL AND r.at >= $1 AND r.at < $2 GROUP BY r.agent ORDER BY r.agent"
            ),
        };
        sqlx::query_as::<_, UsageTotals>(&sql)
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await
    }

    /// Records with `from <= at < to` in buckets of `bucket_ms` (bucket 0
    /// starts at `from`); empty buckets are absent.
    pub async fn usage_series(
        &self,
        from: i64,
        to: i64,
        bucket_ms: i64,
    ) -> Result<Vec<UsagePoint>, sqlx::Error> {
        sqlx::query_as::<_, UsagePoint>(
            "SELECT CAST((r.at - $1) / $3 AS BIGINT) AS bucket, COUNT(*) AS requests,
                CAST(COALESCE(SUM(CASE WHEN r.status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT) AS errors,
                CAST(COALESCE(SUM(r.prompt_tokens + r.completion_tokens), 0) AS BIGINT) AS tokens,
                CAST(COALESCE(AVG(r.latency_ms), 0) AS BIGINT) AS avg_latency_ms
             FROM usage_records r WHERE r.at >= $1 AND r.at < $2
             GROUP BY CAST((r.at - $1) / $3 AS BIGINT) ORDER BY 1",
        )
        .bind(from)
        .bind(to)
        .bind(bucket_ms.max(1))
        .fetch_all(&self.pool)
        .await
    }

    /// Whether any request was ever recorded (the console tells a fresh
    /// install from a quiet range).
    pub async fn any_usage_record(&self) -> Result<bool, sqlx::Error> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM (SELECT 1 FROM usage_records LIMIT 1) r")
                .fetch_one(&self.pool)
                .await?;
        Ok(n > 0)
    }
}

/// One bucket of the usage over time.
#[derive(Clone, Debug, PartialEq, Eq, FromRow)]
pub struct UsagePoint {
    pub bucket: i64,
    pub requests: i64,
    pub errors: i64,
    pub tokens: i64,
    pub avg_latency_ms: i64,
}
