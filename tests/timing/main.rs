//! Tests that measure times and memory of a real `gatehouse serve`: a
//! separate test binary so no other test of the suite runs beside them.

#[path = "../common/mod.rs"]
mod common;

mod login_flood;
mod slow_connections;

/// Held for the whole of each test here: the tests of one binary run side by
/// side, and a login flood beside a timed request would spoil the times.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ALONE.lock().await
}
