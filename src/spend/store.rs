//! Prices and their versions (issue 34). A pair has at most one current
//! version (`effective_to IS NULL`, held by a unique index); setting a
//! different price ends it and starts the next at the same instant.

use sqlx::FromRow;

use crate::spend::amount::Amount;
use crate::spend::price::{Price, PriceSpec, Rates};
use crate::store::{new_id, now_ms, Store};

#[derive(FromRow)]
struct PriceRow {
    version: String,
    provider: String,
    upstream_model: String,
    input: i64,
    output: i64,
    cache_read: Option<i64>,
    cache_write: Option<i64>,
    reasoning: Option<i64>,
    request: Option<i64>,
    tiers: String,
    effective_from: i64,
    effective_to: Option<i64>,
}

const COLS: &str = "version, provider, upstream_model, input, output, cache_read, cache_write,
    reasoning, request, tiers, effective_from, effective_to";

fn amount(n: i64) -> Amount {
    Amount(u64::try_from(n).unwrap_or(0))
}

fn nanos(a: Amount) -> i64 {
    i64::try_from(a.nanos()).unwrap_or(i64::MAX)
}

impl From<PriceRow> for Price {
    fn from(r: PriceRow) -> Price {
        Price {
            version: r.version.into(),
            provider: r.provider,
            upstream_model: r.upstream_model,
            spec: PriceSpec {
                base: Rates {
                    input: amount(r.input),
                    output: amount(r.output),
                    cache_read: r.cache_read.map(amount),
                    cache_write: r.cache_write.map(amount),
                    reasoning: r.reasoning.map(amount),
                },
                request: r.request.map(amount),
                tiers: PriceSpec::tiers_from_json(&r.tiers),
            },
            effective_from: r.effective_from,
            effective_to: r.effective_to,
        }
    }
}

/// What setting a price did.
#[derive(Debug, PartialEq, Eq)]
pub enum PriceSet {
    /// A new version, now current.
    Created(Price),
    /// The body equalled the current version: nothing changed.
    Unchanged(Price),
}

impl Store {
    /// Every current version, by provider then upstream model.
    pub async fn current_prices(&self) -> Result<Vec<Price>, sqlx::Error> {
        self.list_prices(false, None).await
    }

    /// Current versions (or every version with `history`), optionally of one
    /// provider, ordered by provider, upstream model and start.
    pub async fn list_prices(
        &self,
        history: bool,
        provider: Option<&str>,
    ) -> Result<Vec<Price>, sqlx::Error> {
        let current = if history {
            ""
        } else {
            "AND effective_to IS NULL"
        };
        let sql = format!(
            "SELECT {COLS} FROM prices WHERE ($1 = '' OR provider = $1) {current}
             ORDER BY provider, upstream_model, effective_from, seq"
        );
        let rows = sqlx::query_as::<_, PriceRow>(&sql)
            .bind(provider.unwrap_or(""))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(Price::from).collect())
    }

    /// The current version of a pair.
    pub async fn current_price(
        &self,
        provider: &str,
        upstream_model: &str,
    ) -> Result<Option<Price>, sqlx::Error> {
        let sql = format!(
            "SELECT {COLS} FROM prices
             WHERE provider = $1 AND upstream_model = $2 AND effective_to IS NULL"
        );
        Ok(sqlx::query_as::<_, PriceRow>(&sql)
            .bind(provider)
            .bind(upstream_model)
            .fetch_optional(&self.pool)
            .await?
            .map(Price::from))
    }

    /// Sets a pair's price: a new version unless `spec` equals the current
    /// one. Two servers setting one pair at once: the unique index lets one
    /// win, and the other tries again on top of it.
    pub async fn put_price(
        &self,
        provider: &str,
        upstream_model: &str,
        spec: &PriceSpec,
    ) -> Result<PriceSet, sqlx::Error> {
        let mut tries = 0;
        loop {
            match self.try_put_price(provider, upstream_model, spec).await {
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() && tries < 3 => {
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    async fn try_put_price(
        &self,
        provider: &str,
        upstream_model: &str,
        spec: &PriceSpec,
    ) -> Result<PriceSet, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        // A write first: SQLite takes its write lock now (a read first would
        // fail with SQLITE_BUSY when upgrading while another connection
        // writes), and PostgreSQL locks the pair's current row, so two PUTs
        // of one pair run one after the other.
        sqlx::query(
            "UPDATE prices SET effective_to = effective_to
             WHERE provider = $1 AND upstream_model = $2 AND effective_to IS NULL",
        )
        .bind(provider)
        .bind(upstream_model)
        .execute(&mut *tx)
        .await?;
        let sql = format!(
            "SELECT {COLS} FROM prices
             WHERE provider = $1 AND upstream_model = $2 AND effective_to IS NULL"
        );
        let current: Option<Price> = sqlx::query_as::<_, PriceRow>(&sql)
            .bind(provider)
            .bind(upstream_model)
            .fetch_optional(&mut *tx)
            .await?
            .map(Price::from);
        if let Some(p) = current {
            if p.spec == *spec {
                return Ok(PriceSet::Unchanged(p));
            }
        }
        let now = now_ms();
        sqlx::query(
            "UPDATE prices SET effective_to = $3
             WHERE provider = $1 AND upstream_model = $2 AND effective_to IS NULL",
        )
        .bind(provider)
        .bind(upstream_model)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let seq: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(MAX(seq), 0) + 1 AS BIGINT) FROM prices
             WHERE provider = $1 AND upstream_model = $2",
        )
        .bind(provider)
        .bind(upstream_model)
        .fetch_one(&mut *tx)
        .await?;
        let price = Price {
            version: new_id().into(),
            provider: provider.to_string(),
            upstream_model: upstream_model.to_string(),
            spec: spec.clone(),
            effective_from: now,
            effective_to: None,
        };
        let r = &price.spec.base;
        sqlx::query(
            "INSERT INTO prices (version, provider, upstream_model, input, output, cache_read,
                cache_write, reasoning, request, tiers, effective_from, effective_to, seq)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,NULL,$12)",
        )
        .bind(&*price.version)
        .bind(provider)
        .bind(upstream_model)
        .bind(nanos(r.input))
        .bind(nanos(r.output))
        .bind(r.cache_read.map(nanos))
        .bind(r.cache_write.map(nanos))
        .bind(r.reasoning.map(nanos))
        .bind(price.spec.request.map(nanos))
        .bind(price.spec.tiers_json())
        .bind(now)
        .bind(seq)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(PriceSet::Created(price))
    }

    /// Ends a pair's current version now; false when none was current.
    pub async fn end_price(
        &self,
        provider: &str,
        upstream_model: &str,
    ) -> Result<bool, sqlx::Error> {
        let n = sqlx::query(
            "UPDATE prices SET effective_to = $3
             WHERE provider = $1 AND upstream_model = $2 AND effective_to IS NULL",
        )
        .bind(provider)
        .bind(upstream_model)
        .bind(now_ms())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DbOptions;
    use serde_json::json;

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&DbOptions {
            url: format!("sqlite://{}", dir.path().join("p.db").display()),
            max_connections: 2,
            acquire_timeout_s: 5,
        })
        .await
        .unwrap();
        store.migrate().await.unwrap();
        (dir, store)
    }

    fn spec(v: serde_json::Value) -> PriceSpec {
        PriceSpec::from_json(&v).unwrap()
    }

    #[tokio::test]
    async fn a_different_price_ends_the_current_version_and_an_equal_one_changes_nothing() {
        let (_d, s) = store().await;
        let a = spec(json!({"input": "1", "output": "2", "cache_read": "0.1",
            "tiers": [{"above_prompt_tokens": 5, "input": "3", "output": "4"}]}));
        let PriceSet::Created(v1) = s.put_price("p", "org/m", &a).await.unwrap() else {
            panic!("first version")
        };
        assert_eq!(v1.spec, a);
        let again = s.put_price("p", "org/m", &spec(json!({"input": "1.0", "output": "2",
            "cache_read": "0.10", "tiers": [{"above_prompt_tokens": 5, "input": "3", "output": "4"}]})))
            .await
            .unwrap();
        assert_eq!(again, PriceSet::Unchanged(v1.clone()));
        let PriceSet::Created(v2) = s
            .put_price("p", "org/m", &spec(json!({"input": "1", "output": "3"})))
            .await
            .unwrap()
        else {
            panic!("second version")
        };
        assert_ne!(v1.version, v2.version);
        let all = s.list_prices(true, Some("p")).await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].version, v1.version);
        assert_eq!(all[0].effective_to, Some(v2.effective_from));
        assert_eq!(all[1].effective_to, None);
        assert_eq!(s.current_prices().await.unwrap(), vec![v2.clone()]);
        assert!(s.end_price("p", "org/m").await.unwrap());
        assert!(!s.end_price("p", "org/m").await.unwrap());
        assert_eq!(s.current_price("p", "org/m").await.unwrap(), None);
        assert!(s.list_prices(true, Some("other")).await.unwrap().is_empty());
    }
}
