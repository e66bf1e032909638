use sqlx::FromRow;

use super::{now_ms, Store};

#[derive(Clone, Debug, FromRow)]
pub struct ApiKeyRow {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub key_hash: String,
    /// JSON array of model ids, or NULL for every model.
    pub models: Option<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    /// The `limits` object as JSON text; NULL for none.
    pub limits: Option<String>,
    /// The `mcp` grant as JSON text; NULL for no MCP access.
    pub mcp: Option<String>,
}

const COLS: &str =
    "id, user_id, name, key_hash, models, created_at, expires_at, last_used_at, limits, mcp";

impl Store {
    pub async fn insert_api_key(&self, row: &ApiKeyRow) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO api_keys (id, user_id, name, key_hash, models, created_at, expires_at, limits, mcp)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&row.id)
        .bind(&row.user_id)
        .bind(&row.name)
        .bind(&row.key_hash)
        .bind(&row.models)
        .bind(row.created_at)
        .bind(row.expires_at)
        .bind(&row.limits)
        .bind(&row.mcp)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn list_api_keys(&self, user_id: &str) -> Result<Vec<ApiKeyRow>, sqlx::Error> {
        sqlx::query_as::<_, ApiKeyRow>(&format!(
            "SELECT {COLS} FROM api_keys WHERE user_id = $1 AND revoked_at IS NULL ORDER BY created_at, id"
        ))
        .bind(user_id)
        .fetch_all(&self.pool)
        .await
    }

    /// Revokes the caller's key; returns its hash (to evict from caches) or None.
    pub async fn revoke_api_key(
        &self,
        user_id: &str,
        id: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        sqlx::query_scalar(
            "UPDATE api_keys SET revoked_at = $3 WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL
             RETURNING key_hash",
        )
        .bind(id)
        .bind(user_id)
        .bind(now_ms())
        .fetch_optional(&self.pool)
        .await
    }

    /// Whether any user has a key that is not revoked (the console's
    /// first-run steps).
    pub async fn any_api_key(&self) -> Result<bool, sqlx::Error> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM api_keys WHERE revoked_at IS NULL LIMIT 1) k",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }

    pub async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRow>, sqlx::Error> {
        sqlx::query_as::<_, ApiKeyRow>(&format!(
            "SELECT {COLS} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
    }

    pub async fn touch_api_keys(&self, stamps: &[(String, i64)]) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        for (id, at) in stamps {
            sqlx::query("UPDATE api_keys SET last_used_at = $2 WHERE id = $1")
                .bind(id)
                .bind(*at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }
}
