//! On PostgreSQL, each server listens for invalidations from the others and
//! hands them to `on_heard`; it knows nothing of who holds the caches.

use std::future::Future;
use std::time::Duration;

use crate::runtime::Invalidation;
use crate::store::{notify, Backend, Store};

/// What the listener heard.
#[derive(Clone, Debug)]
pub enum Heard {
    One(Invalidation),
    /// Notifications may have been lost (start, reconnect): drop every cache.
    Everything,
}

pub fn spawn<F, Fut>(
    store: &Store,
    database_url: String,
    on_heard: F,
) -> Option<tokio::task::JoinHandle<()>>
where
    F: Fn(Heard) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    if store.backend != Backend::Postgres {
        return None;
    }
    Some(tokio::spawn(async move {
        loop {
            match sqlx::postgres::PgListener::connect(&database_url).await {
                Ok(mut l) => {
                    if let Err(e) = l.listen(notify::CHANNEL).await {
                        tracing::warn!(error = %e, "LISTEN failed");
                    } else {
                        // Whatever was missed while disconnected is unknown: start clean.
                        on_heard(Heard::Everything).await;
                        loop {
                            match l.try_recv().await {
                                Ok(Some(n)) => {
                                    if let Some(inv) = notify::decode(n.payload()) {
                                        on_heard(Heard::One(inv)).await;
                                    }
                                }
                                Ok(None) => {
                                    // The connection dropped and was re-established: notifications may be lost.
                                    on_heard(Heard::Everything).await;
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, "notification channel failed");
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot open the notification channel"),
            }
            on_heard(Heard::Everything).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }))
}
