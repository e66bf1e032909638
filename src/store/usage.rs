//! Reading usage records back: totals per model, user, agent, key or
//! provider (with their cost), and the records themselves.

use serde::Serialize;
use sqlx::FromRow;

use super::Store;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    Model,
    User,
    Agent,
    /// The API key's id (records without a key are left out).
    Key,
    /// The answering provider's name (records without one are left out).
    Provider,
    /// The inbound dialect of chat requests (`chat`, `messages`,
    /// `responses`); embeddings and rerank are left out.
    Api,
}

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "model" => Some(GroupBy::Model),
            "user" => Some(GroupBy::User),
            "agent" => Some(GroupBy::Agent),
            "key" => Some(GroupBy::Key),
            "provider" => Some(GroupBy::Provider),
            "api" => Some(GroupBy::Api),
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
    /// Nano-units; unpriced records count 0.
    pub cost_nanos: i64,
    pub unpriced_requests: i64,
}

const TOTALS: &str = "COUNT(*) AS requests,
    CAST(COALESCE(SUM(r.prompt_tokens), 0) AS BIGINT) AS prompt_tokens,
    CAST(COALESCE(SUM(r.completion_tokens), 0) AS BIGINT) AS completion_tokens,
    CAST(COALESCE(SUM(CASE WHEN r.status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT) AS errors,
    CAST(COALESCE(SUM(r.cost_nanos), 0) AS BIGINT) AS cost_nanos,
    CAST(COALESCE(SUM(CASE WHEN r.cost_status = 'unpriced' THEN 1 ELSE 0 END), 0) AS BIGINT) AS unpriced_requests";

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
            GroupBy::Key => format!(
                "SELECT r.api_key_id AS key, {TOTALS} FROM usage_records r
                 WHERE r.api_key_id IS NOT NULL AND r.at >= $1 AND r.at < $2
                 GROUP BY r.api_key_id ORDER BY r.api_key_id"
            ),
            GroupBy::Api => format!(
                "SELECT r.api AS key, {TOTALS} FROM usage_records r
                 WHERE r.api IS NOT NULL AND r.at >= $1 AND r.at < $2
                 GROUP BY r.api ORDER BY r.api"
            ),
            GroupBy::Provider => format!(
                "SELECT r.provider AS key, {TOTALS} FROM usage_records r
                 WHERE r.provider IS NOT NULL AND r.at >= $1 AND r.at < $2
                 GROUP BY r.provider ORDER BY r.provider"
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
                CAST(COALESCE(AVG(r.latency_ms), 0) AS BIGINT) AS avg_latency_ms,
                CAST(COALESCE(SUM(r.cost_nanos), 0) AS BIGINT) AS cost_nanos
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

/// One usage record as `GET /api/admin/usage/records` shows it (the
/// user by e-mail).
#[derive(Clone, Debug, PartialEq, Eq, FromRow)]
pub struct UsageRow {
    pub id: String,
    pub at: i64,
    pub request_id: Option<String>,
    pub user_email: Option<String>,
    pub api_key_id: Option<String>,
    pub agent: Option<String>,
    pub device_id: Option<String>,
    pub model: String,
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    pub kind: String,
    pub api: Option<String>,
    pub status: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_nanos: Option<i64>,
    pub cost_status: String,
    pub price_version: Option<String>,
}

/// Which records to read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordFilter {
    pub request_id: Option<String>,
    pub from: i64,
    pub to: i64,
    pub limit: i64,
}

impl Store {
    /// Records with `from <= at < to` (and the request id, when given),
    /// newest first, at most `limit`.
    pub async fn usage_records(&self, f: &RecordFilter) -> Result<Vec<UsageRow>, sqlx::Error> {
        sqlx::query_as::<_, UsageRow>(
            "SELECT COALESCE(r.id, '') AS id, r.at, r.request_id, u.email AS user_email, r.api_key_id, r.agent,
                    r.device_id, r.model, r.provider, r.upstream_model, r.kind, r.api,
                    CAST(r.status AS BIGINT) AS status, r.prompt_tokens, r.completion_tokens,
                    r.cache_read_tokens, r.cache_write_tokens, r.reasoning_tokens, r.cost_nanos,
                    r.cost_status, r.price_version
             FROM usage_records r LEFT JOIN users u ON u.id = r.user_id
             WHERE r.at >= $1 AND r.at < $2 AND ($3 = '' OR r.request_id = $3)
             ORDER BY r.at DESC, r.id DESC LIMIT $4",
        )
        .bind(f.from)
        .bind(f.to)
        .bind(f.request_id.as_deref().unwrap_or(""))
        .bind(f.limit)
        .fetch_all(&self.pool)
        .await
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
    pub cost_nanos: i64,
}
