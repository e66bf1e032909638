//! Database access. One `AnyPool` serves SQLite (embedded default) and
//! PostgreSQL (scale-out) with the same portable SQL: `$N` placeholders, text
//! ids, BIGINT timestamps in Unix milliseconds.

pub mod agent_data;
pub mod agents;
pub mod batch;
pub mod catalog;
pub mod console;
pub mod keys;
pub mod limits;
pub mod listener;
pub mod notify;
pub mod signins;
pub mod sso;
pub mod usage;
pub mod users;

use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Clone)]
pub struct Store {
    pub pool: AnyPool,
    pub backend: Backend,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Turns `sqlite://PATH` into a URL that creates the file when missing.
fn normalize_url(url: &str) -> String {
    if url.starts_with("sqlite:") && !url.contains("mode=") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}mode=rwc")
    } else {
        url.to_string()
    }
}

/// How to reach the database (read from the settings by the caller).
#[derive(Clone, Debug)]
pub struct DbOptions {
    pub url: String,
    pub max_connections: u32,
    pub acquire_timeout_s: u64,
}

pub use crate::error::is_unavailable;

impl Store {
    pub async fn connect(opts: &DbOptions) -> Result<Store, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let url = normalize_url(&opts.url);
        let backend = if url.starts_with("postgres") {
            Backend::Postgres
        } else if url.starts_with("sqlite") {
            Backend::Sqlite
        } else {
            return Err(sqlx::Error::Configuration(
                "GATEHOUSE_DATABASE_URL must start with sqlite:// or postgres://".into(),
            ));
        };
        let options: AnyConnectOptions = url.parse()?;
        let max = match backend {
            Backend::Sqlite => opts.max_connections.min(8),
            Backend::Postgres => opts.max_connections,
        };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(opts.acquire_timeout_s))
            // A SQLite connection is an open file: checking it with a query
            // before each use is a wasted round trip to its thread. A
            // PostgreSQL connection can die with the server, so it is checked.
            .test_before_acquire(backend == Backend::Postgres)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL for concurrent readers; FULL so a commit is on disk
                        // before we answer; busy_timeout so writers queue instead of failing.
                        conn.execute("PRAGMA journal_mode=WAL").await?;
                        conn.execute("PRAGMA synchronous=FULL").await?;
                        conn.execute("PRAGMA busy_timeout=10000").await?;
                        conn.execute("PRAGMA foreign_keys=ON").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        Ok(Store { pool, backend })
    }

    /// Runs pending migrations. On PostgreSQL the migrator holds an advisory
    /// lock, so several servers starting at once apply each migration once.
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        MIGRATOR.run(&self.pool).await
    }

    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    pub async fn get_setting(&self, key: &str) -> Result<Option<String>, sqlx::Error> {
        sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
    }

    /// Stores `value` unless the key exists; returns the value that won, so
    /// servers racing to create the signing secret all end up with one.
    pub async fn setting_insert_or_get(
        &self,
        key: &str,
        value: &str,
    ) -> Result<String, sqlx::Error> {
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(value)
        .execute(&self.pool)
        .await?;
        let v: String = sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_one(&self.pool)
            .await?;
        Ok(v)
    }
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

pub fn b(v: bool) -> i64 {
    i64::from(v)
}
