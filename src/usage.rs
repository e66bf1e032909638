//! Usage accounting off the request path: a bounded queue to one writer that
//! batches inserts. A full queue or a failed write is counted (and shown in
//! /metrics), never silently lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::mpsc;

use crate::store::Store;

#[derive(Clone, Debug, Default)]
pub struct UsageRecord {
    pub at: i64,
    pub user_id: Option<String>,
    pub api_key_id: Option<String>,
    pub agent: Option<String>,
    pub device_id: Option<String>,
    pub model: String,
    pub kind: &'static str,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub latency_ms: i64,
    pub status: u16,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
}

#[derive(Default)]
pub struct UsageCounters {
    pub written: AtomicU64,
    /// Records refused because the queue was full.
    pub dropped: AtomicU64,
    /// Records lost because the database refused the batch.
    pub failed: AtomicU64,
}

#[derive(Clone)]
pub struct UsageSink {
    tx: mpsc::Sender<UsageRecord>,
    pub counters: Arc<UsageCounters>,
}

impl UsageSink {
    pub fn record(&self, r: UsageRecord) {
        if self.tx.try_send(r).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

const BATCH: usize = 256;

/// Starts the writer; it ends when every sink is dropped, after writing what is queued.
pub fn start(store: Store, capacity: usize) -> (UsageSink, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<UsageRecord>(capacity.max(1));
    let counters = Arc::new(UsageCounters::default());
    let c = Arc::clone(&counters);
    let handle = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(BATCH);
        while rx.recv_many(&mut batch, BATCH).await > 0 {
            let n = batch.len() as u64;
            let mut attempt: u32 = 0;
            loop {
                match write_batch(&store, &batch).await {
                    Ok(()) => {
                        c.written.fetch_add(n, Ordering::Relaxed);
                        break;
                    }
                    // While the database is away, keep the batch and retry: the
                    // bounded queue behind it absorbs (and counts) the overflow.
                    Err(e) if is_unavailable(&e) => {
                        attempt += 1;
                        if attempt == 1 {
                            tracing::warn!(error = %e, "database unavailable; usage records wait");
                        }
                        tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt.min(20))))
                            .await;
                    }
                    Err(e) if attempt < 3 => {
                        attempt += 1;
                        tracing::warn!(error = %e, attempt, "usage batch write failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, records = n, "usage batch lost");
                        c.failed.fetch_add(n, Ordering::Relaxed);
                        break;
                    }
                }
            }
            batch.clear();
        }
    });
    (UsageSink { tx, counters }, handle)
}

/// Errors that mean "the database is not there" rather than "this write is wrong".
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::PoolTimedOut
            | sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
    ) || matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")))
}

async fn write_batch(store: &Store, batch: &[UsageRecord]) -> Result<(), sqlx::Error> {
    let mut tx = store.pool.begin().await?;
    for r in batch {
        sqlx::query(
            "INSERT INTO usage_records (id, at, user_id, api_key_id, agent, device_id, model, kind,
                prompt_tokens, completion_tokens, latency_ms, status, conversation_id, turn_id)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)",
        )
        .bind(crate::store::new_id())
        .bind(r.at)
        .bind(&r.user_id)
        .bind(&r.api_key_id)
        .bind(&r.agent)
        .bind(&r.device_id)
        .bind(&r.model)
        .bind(r.kind)
        .bind(r.prompt_tokens)
        .bind(r.completion_tokens)
        .bind(r.latency_ms)
        .bind(i64::from(r.status))
        .bind(&r.conversation_id)
        .bind(&r.turn_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// `last_used_at` stamps, kept in memory and written in batches so a request
/// never waits on a database write for them.
#[derive(Default)]
pub struct LastUsed {
    pub api_keys: DashMap<String, i64>,
    pub sign_ins: DashMap<String, i64>,
}

impl LastUsed {
    pub fn drain(map: &DashMap<String, i64>) -> Vec<(String, i64)> {
        let keys: Vec<String> = map.iter().map(|e| e.key().clone()).collect();
        keys.into_iter().filter_map(|k| map.remove(&k)).collect()
    }
}
