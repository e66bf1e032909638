//! Records written off the request path: a bounded queue to one task that
//! writes them in batches, one transaction each. The usage records and the
//! MCP call audit both go through it.
//!
//! The writer lingers a moment after the first record of a batch that is not
//! full, retries while the database is away (the bounded queue behind it
//! absorbs, and the sender counts, the overflow), and when told to finish
//! (shutdown) writes what is queued and ends.

use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

/// How long the writer waits for more records after the first of a batch
/// that is not full. Each transaction ends in an fsync (some 150 µs of CPU
/// on a virtual disk, and a wake-up of SQLite's thread) and rewrites its
/// last, partly filled pages: waiting bounds the commits to about a hundred
/// a second under any load, with more records in each (a record is still
/// written within ~10 ms).
pub const LINGER: Duration = Duration::from_millis(10);

/// What a writer writes: its records, how a batch is stored and where its
/// fate is counted.
pub trait BatchTarget: Send + Sync + 'static {
    type Record: Send + 'static;
    /// Names the records in log lines (`usage`, `MCP audit`).
    const WHAT: &'static str;
    /// The most records one transaction writes.
    const BATCH: usize;
    /// Once per batch, before the first attempt to write it.
    fn taken(&self, _batch: &[Self::Record]) {}
    /// Stores the batch in one transaction.
    fn write<'a>(&'a self, batch: &'a [Self::Record]) -> BoxFuture<'a, Result<(), sqlx::Error>>;
    /// `n` records were stored.
    fn written(&self, _n: u64) {}
    /// `n` records were lost: the database refused them several times.
    fn failed(&self, _n: u64) {}
}

/// The writer task; [`BatchWriter::finish`] writes what is queued and ends it.
pub struct BatchWriter {
    what: &'static str,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<()>,
}

impl BatchWriter {
    /// Takes no more records, writes every queued one and ends, waiting at
    /// most `within` (a database that is away must not hold the shutdown).
    pub async fn finish(mut self, within: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(within, &mut self.handle)
            .await
            .is_err()
        {
            tracing::error!(
                "{} records could not all be written before shutdown",
                self.what
            );
            self.handle.abort();
        }
    }
}

/// Starts the writer of `target` behind a queue of `capacity` records,
/// lingering `linger` ([`LINGER`]) for more after a batch's first record; it
/// ends when every sender is dropped or when told to finish, after writing
/// what is queued. Senders use `try_send` and count a full queue themselves.
pub fn start<T: BatchTarget>(
    target: T,
    capacity: usize,
    linger: Duration,
) -> (mpsc::Sender<T::Record>, BatchWriter) {
    let (tx, mut rx) = mpsc::channel::<T::Record>(capacity.max(1));
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(T::BATCH);
        let mut closing = false;
        loop {
            let got = tokio::select! {
                biased;
                n = rx.recv_many(&mut batch, T::BATCH) => n,
                _ = &mut stopped, if !closing => {
                    // Records already queued stay readable; later ones are refused.
                    closing = true;
                    rx.close();
                    continue;
                }
            };
            if got == 0 {
                break;
            }
            // Records share transactions (one fsync each): unless the batch
            // is full, sleep a moment and then take what came. Sleeping
            // rather than waiting on the queue matters: a waiting receiver is
            // woken by every send, a wake-up of this thread (a syscall on the
            // request's path) per request. Not while closing: what is queued
            // is all there is.
            if !closing && batch.len() < T::BATCH {
                tokio::select! {
                    biased;
                    _ = &mut stopped => {
                        closing = true;
                        rx.close();
                    }
                    _ = tokio::time::sleep(linger) => {}
                }
                while batch.len() < T::BATCH {
                    match rx.try_recv() {
                        Ok(record) => batch.push(record),
                        Err(_) => break,
                    }
                }
            }
            let n = batch.len() as u64;
            target.taken(&batch);
            let mut attempt: u32 = 0;
            loop {
                match target.write(&batch).await {
                    Ok(()) => {
                        target.written(n);
                        break;
                    }
                    // While the database is away, keep the batch and retry: the
                    // bounded queue behind it absorbs (and counts) the overflow.
                    Err(e) if crate::store::is_unavailable(&e) => {
                        attempt += 1;
                        if attempt == 1 {
                            tracing::warn!(error = %e, "database unavailable; {} records wait", T::WHAT);
                        }
                        tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt.min(20))))
                            .await;
                    }
                    Err(e) if attempt < 3 => {
                        attempt += 1;
                        tracing::warn!(error = %e, attempt, "{} batch write failed; retrying", T::WHAT);
                        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, records = n, "{} batch lost", T::WHAT);
                        target.failed(n);
                        break;
                    }
                }
            }
            batch.clear();
        }
    });
    (
        tx,
        BatchWriter {
            what: T::WHAT,
            stop: Some(stop),
            handle,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Keeps the batches it is given.
    #[derive(Clone, Default)]
    struct Kept(Arc<parking_lot::Mutex<Vec<Vec<u32>>>>);

    impl BatchTarget for Kept {
        type Record = u32;
        const WHAT: &'static str = "test";
        const BATCH: usize = 3;
        fn write<'a>(&'a self, batch: &'a [u32]) -> BoxFuture<'a, Result<(), sqlx::Error>> {
            self.0.lock().push(batch.to_vec());
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn finishing_writes_what_is_queued_without_waiting_out_the_linger() {
        let kept = Kept::default();
        // A linger no test would wait out: only finishing can end it.
        let (tx, writer) = start(kept.clone(), 100, Duration::from_secs(3600));
        for n in 0..5 {
            tx.try_send(n).expect("queued");
        }
        writer.finish(Duration::from_secs(30)).await;
        let batches = kept.0.lock().clone();
        assert!(batches.iter().all(|b| b.len() <= 3), "{batches:?}");
        assert_eq!(batches.concat(), vec![0, 1, 2, 3, 4]);
        // Finished: later records are refused, not silently queued.
        assert!(tx.try_send(5).is_err());
    }
}
