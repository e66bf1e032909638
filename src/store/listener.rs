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
    Fut: Future<Output = ()> + Send + 'static,
{
    if store.backend != Backend::Postgres {
        return Some(tokio::spawn(watch_users(store.clone(), on_heard)));
    }
    let store = store.clone();
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
                                // The connection dropped: listen again below
                                // (and start clean once listening).
                                Ok(None) => break,
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
            // Without the channel, changes made on other servers go unseen.
            // While the database answers, the caches are dropped (they refill
            // from it). While it does not, cached credentials are kept up to
            // their lifetime (the safety net), so that a caller seen lately
            // keeps working through an outage (docs/deployment.md); they are
            // dropped once the channel is back, above.
            if store.ping().await {
                on_heard(Heard::Everything).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }))
}

/// On SQLite no other server shares the database, but the command line
/// (`gatehouse users set-password`, `users disable`) may change users under
/// a running server: a change of the users table drops every cache, so the
/// change applies within a second, not at the end of the cache lifetime.
async fn watch_users<F, Fut>(store: Store, on_heard: F)
where
    F: Fn(Heard) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let fingerprint = || async {
        sqlx::query_as::<_, (i64, i64)>("SELECT COUNT(*), COALESCE(MAX(updated_at), 0) FROM users")
            .fetch_one(&store.pool)
            .await
            .ok()
    };
    let mut last = fingerprint().await;
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = fingerprint().await;
        if now.is_some() && now != last {
            if last.is_some() {
                on_heard(Heard::Everything).await;
            }
            last = now;
        }
    }
}
