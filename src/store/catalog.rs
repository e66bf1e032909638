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
    /// `anthropic` providers: sent when the client sent none (None: 2023-06-01).
    pub anthropic_version: Option<String>,
    /// `anthropic` providers: `forward`, `drop` or a JSON array (None: forward).
    pub beta_headers: Option<String>,
}

/// A model. `provider` and `upstream_model` repeat its first target, so
/// servers of the version before several targets still find one.
#[derive(Clone, Debug, FromRow)]
pub struct ModelRow {
    pub id: String,
    pub kind: String,
    pub provider: String,
    pub upstream_model: String,
    pub created_at: i64,
    pub routing: String,
    /// A JSON array of model ids; None: no fallbacks.
    pub fallbacks: Option<String>,
    pub max_attempts: i64,
    /// A JSON array of alias names; None: none.
    pub aliases: Option<String>,
    pub max_tokens_default: i64,
}

/// One of a model's targets, in order (`ordinal` from 0).
#[derive(Clone, Debug, PartialEq, Eq, FromRow)]
pub struct TargetRow {
    pub model_id: String,
    pub ordinal: i64,
    pub provider: String,
    pub upstream_model: String,
    pub weight: i64,
}

const MODEL_COLS: &str = "id, kind, provider, upstream_model, created_at, routing, fallbacks, max_attempts, aliases, max_tokens_default";

impl Store {
    pub async fn list_providers(&self) -> Result<Vec<ProviderRow>, sqlx::Error> {
        sqlx::query_as::<_, ProviderRow>(
            "SELECT name, type, base_url, api_key, timeout_s, created_at, anthropic_version, beta_headers
             FROM providers ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
    }

    pub async fn list_models(&self) -> Result<Vec<ModelRow>, sqlx::Error> {
        sqlx::query_as::<_, ModelRow>(&format!("SELECT {MODEL_COLS} FROM models ORDER BY id"))
            .fetch_all(&self.pool)
            .await
    }

    pub async fn model(&self, id: &str) -> Result<Option<ModelRow>, sqlx::Error> {
        sqlx::query_as::<_, ModelRow>(&format!("SELECT {MODEL_COLS} FROM models WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
    }

    /// Every model's targets, by model and order.
    pub async fn list_model_targets(&self) -> Result<Vec<TargetRow>, sqlx::Error> {
        sqlx::query_as::<_, TargetRow>(
            "SELECT model_id, ordinal, provider, upstream_model, weight FROM model_targets
             ORDER BY model_id, ordinal",
        )
        .fetch_all(&self.pool)
        .await
    }

    pub async fn model_targets(&self, id: &str) -> Result<Vec<TargetRow>, sqlx::Error> {
        sqlx::query_as::<_, TargetRow>(
            "SELECT model_id, ordinal, provider, upstream_model, weight FROM model_targets
             WHERE model_id = $1 ORDER BY ordinal",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await
    }

    /// Inserts or (with `replace`) overwrites a provider. Returns false when it exists and `replace` is off.
    pub async fn put_provider(&self, p: &ProviderRow, replace: bool) -> Result<bool, sqlx::Error> {
        let sql = if replace {
            "INSERT INTO providers (name, type, base_url, api_key, timeout_s, created_at, anthropic_version, beta_headers)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8)
             ON CONFLICT (name) DO UPDATE SET type = $2, base_url = $3, api_key = $4, timeout_s = $5,
                anthropic_version = $7, beta_headers = $8"
        } else {
            "INSERT INTO providers (name, type, base_url, api_key, timeout_s, created_at, anthropic_version, beta_headers)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8)
             ON CONFLICT (name) DO NOTHING"
        };
        let n = sqlx::query(sql)
            .bind(&p.name)
            .bind(&p.kind)
            .bind(&p.base_url)
            .bind(&p.api_key)
            .bind(p.timeout_s)
            .bind(now_ms())
            .bind(&p.anthropic_version)
            .bind(&p.beta_headers)
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

    /// Models with a target on this provider.
    pub async fn models_of_provider(&self, name: &str) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM models m WHERE m.provider = $1
             OR EXISTS (SELECT 1 FROM model_targets t WHERE t.model_id = m.id AND t.provider = $1)",
        )
        .bind(name)
        .fetch_one(&self.pool)
        .await
    }

    /// Ids of the models that name `id` among their fallbacks.
    pub async fn models_falling_back_on(&self, id: &str) -> Result<Vec<String>, sqlx::Error> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT id, fallbacks FROM models WHERE fallbacks IS NOT NULL")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .filter(|(_, f)| {
                serde_json::from_str::<Vec<String>>(f).is_ok_and(|ids| ids.iter().any(|x| x == id))
            })
            .map(|(m, _)| m)
            .collect())
    }

    /// Inserts or (with `replace`) overwrites a model and its targets (at
    /// least one), in one transaction. Returns false when it exists and
    /// `replace` is off.
    pub async fn put_model(
        &self,
        m: &ModelRow,
        targets: &[TargetRow],
        replace: bool,
    ) -> Result<bool, sqlx::Error> {
        let sql = if replace {
            "INSERT INTO models (id, kind, provider, upstream_model, created_at, routing, fallbacks, max_attempts,
                aliases, max_tokens_default)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)
             ON CONFLICT (id) DO UPDATE SET kind = $2, provider = $3, upstream_model = $4,
                routing = $6, fallbacks = $7, max_attempts = $8, aliases = $9, max_tokens_default = $10"
        } else {
            "INSERT INTO models (id, kind, provider, upstream_model, created_at, routing, fallbacks, max_attempts,
                aliases, max_tokens_default)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)
             ON CONFLICT (id) DO NOTHING"
        };
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(sql)
            .bind(&m.id)
            .bind(&m.kind)
            .bind(&m.provider)
            .bind(&m.upstream_model)
            .bind(now_ms())
            .bind(&m.routing)
            .bind(&m.fallbacks)
            .bind(m.max_attempts)
            .bind(&m.aliases)
            .bind(m.max_tokens_default)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            return Ok(false);
        }
        write_targets(&mut tx, &m.id, targets).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Changes an existing model and its targets; false when there is none.
    pub async fn update_model(
        &self,
        m: &ModelRow,
        targets: &[TargetRow],
    ) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE models SET provider = $2, upstream_model = $3, routing = $4, fallbacks = $5,
                max_attempts = $6, aliases = $7, max_tokens_default = $8 WHERE id = $1",
        )
        .bind(&m.id)
        .bind(&m.provider)
        .bind(&m.upstream_model)
        .bind(&m.routing)
        .bind(&m.fallbacks)
        .bind(m.max_attempts)
        .bind(&m.aliases)
        .bind(m.max_tokens_default)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            return Ok(false);
        }
        write_targets(&mut tx, &m.id, targets).await?;
        tx.commit().await?;
        Ok(true)
    }

    pub async fn agents_using_model(&self, id: &str) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT COUNT(*) FROM agents WHERE model = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
    }

    pub async fn delete_model(&self, id: &str) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM model_targets WHERE model_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let n = sqlx::query("DELETE FROM models WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }
}

async fn write_targets(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    model_id: &str,
    targets: &[TargetRow],
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM model_targets WHERE model_id = $1")
        .bind(model_id)
        .execute(&mut **tx)
        .await?;
    for (i, t) in targets.iter().enumerate() {
        sqlx::query(
            "INSERT INTO model_targets (model_id, ordinal, provider, upstream_model, weight)
             VALUES ($1,$2,$3,$4,$5)",
        )
        .bind(model_id)
        .bind(i as i64)
        .bind(&t.provider)
        .bind(&t.upstream_model)
        .bind(t.weight)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
