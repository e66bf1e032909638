//! On PostgreSQL, each server listens for invalidations from the others.

use std::sync::Arc;
use std::time::Duration;

use crate::app::{App, Invalidation};
use crate::store::{notify, Backend};

pub fn spawn(app: Arc<App>) -> Option<tokio::task::JoinHandle<()>> {
    if app.store.backend != Backend::Postgres {
        return None;
    }
    Some(tokio::spawn(async move {
        loop {
            match sqlx::postgres::PgListener::connect(&app.settings.database_url).await {
                Ok(mut l) => {
                    if let Err(e) = l.listen(notify::CHANNEL).await {
                        tracing::warn!(error = %e, "LISTEN failed");
                    } else {
                        // Whatever was missed while disconnected is unknown: start clean.
                        drop_all(&app).await;
                        loop {
                            match l.try_recv().await {
                                Ok(Some(n)) => {
                                    if let Some(inv) = notify::decode(n.payload()) {
                                        app.invalidate_local(&inv).await;
                                    }
                                }
                                Ok(None) => {
                                    // The connection dropped and was re-established: notifications may be lost.
                                    drop_all(&app).await;
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
            drop_all(&app).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }))
}

async fn drop_all(app: &App) {
    app.caches.users.clear();
    app.caches.api_keys.clear();
    app.caches.sign_ins.clear();
    app.caches.agents.clear();
    app.caches.manifests.clear();
    app.caches.tools.clear();
    app.invalidate_local(&Invalidation::Catalog).await;
}
