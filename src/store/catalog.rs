use sqlx::FromRow;

use super::{now_ms, Store};

#[derive(Clone, Debug, FromRow)]
pub struct ProviderRow {
    pub name: String,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub base_url: String,
    pub api_key: Option<String>,
    pub timeout_s: i64,
    pub created_at: i64,
}

#[derive(Clone, Debug, FromRow)]
pub struct ModelRow {
    pub id: String,
    pub kind: String,
    pub provider: String,
    pub upstream_model: String,
    pub created_at: i64,
}

impl Store {
    pub async fn list_providers(&self) -> Result<Vec<ProviderRow>, sqlx::Error> {
        sqlx::query_as::<_, ProviderRow>(
            "SELECT name, type, base_url, api_key, timeout_s, created_at FROM providers ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
    }

    pub async fn list_models(&self) -> Result<Vec<ModelRow>, sqlx::Error> {
        sqlx::query_as::<_, ModelRow>(
            "SELECT id, kind, provider, upstream_model, created_at FROM models ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
    }

    /// Inserts or (with `replace`) overwrites a provider. Returns false when it exists and `replace` is off.
    pub async fn put_provider(&self, p: &ProviderRow, replace: bool) -> Result<bool, sqlx::Error> {
        let sql = if replace {
            "INSERT INTO providers (name, type, base_url, api_key, timeout_s, created_at) VALUES ($1,$2,$3,$4,$5,$6)
             ON CONFLICT (name) DO UPDATE SET type = $2, base_url = $3, api_key = $4, timeout_s = $5"
        } else {
            "INSERT INTO providers (name, type, base_url, api_key, timeout_s, created_at) VALUES ($1,$2,$3,$4,$5,$6)
             ON CONFLICT (name) DO NOTHING"
        };
        let n = sqlx::query(sql)
            .bind(&p.name)
            .bind(&p.kind)
            .bind(&p.base_url)
            .bind(&p.api_key)
            .bind(p.timeout_s)
            .bind(now_ms())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    pub async fn delete_provider(&self, name: &str) -> Result<bool, sqlx::Error> {
        let n = sqlx::query("DELETE FROM providers WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    pub async fn models_of_provider(&self, name: &str) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT COUNT(*) FROM models WHERE provider = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
    }

    pub async fn put_model(&self, m: &ModelRow, replace: bool) -> Result<bool, sqlx::Error> {
        let sql = if replace {
            "INSERT INTO models (id, kind, provider, upstream_model, created_at) VALUES ($1,$2,$3,$4,$5)
             ON CONFLICT (id) DO UPDATE SET kind = $2, provider = $3, upstream_model = $4"
        } else {
            "INSERT INTO models (id, kind, provider, upstream_model, created_at) VALUES ($1,$2,$3,$4,$5)
             ON CONFLICT (id) DO NOTHING"
        };
        let n = sqlx::query(sql)
            .bind(&m.id)
            .bind(&m.kind)
            .bind(&m.provider)
            .bind(&m.upstream_model)
            .bind(now_ms())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    pub async fn agents_using_model(&self, id: &str) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT COUNT(*) FROM agents WHERE model = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
    }

    pub async fn delete_model(&self, id: &str) -> Result<bool, sqlx::Error> {
        let n = sqlx::query("DELETE FROM models WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n > 0)
    }
}
