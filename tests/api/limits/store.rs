//! The limiters and login throttles of several "servers" (each with its own
//! connection pool, as separate processes have) on one real database: shared
//! counts, day budgets that survive a restart, and servers cut off from it. SQLite by default; PostgreSQL when
//! GATEHOUSE_TEST_DATABASE_URL is a postgres:// URL.

use crate::common;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gatehouse::config::Settings;
use gatehouse::limits::login::LoginThrottle;
use gatehouse::limits::{Limiter, Limits, Subject};
use gatehouse::store::Store;

async fn stores(n: usize) -> (Vec<Store>, Option<tempfile::TempDir>) {
    let (url, dir) = common::fresh_database().await;
    let mut out = Vec::new();
    for _ in 0..n {
        let s = Store::connect(&Settings::for_database(&url).db_options())
            .await
            .expect("connect");
        s.migrate().await.expect("migrate");
        out.push(s);
    }
    (out, dir)
}

fn rpm(n: u64) -> Limits {
    Limits {
        requests_per_minute: Some(n),
        ..Limits::default()
    }
}

#[tokio::test]
async fn the_days_token_budget_survives_a_restart() {
    let (s, _dir) = stores(1).await;
    let limits = Limits {
        tokens_per_day: Some(50),
        ..Limits::default()
    };
    let key = [Subject::api_key("k1", limits)];
    let first = Limiter::new(Some(s[0].clone()));
    let mut a = first.admit(&key).await.expect("fresh budget");
    a.finish(40);
    drop(a);
    first.flush().await;
    drop(first);

    // A new process: nothing in memory, everything from the database.
    let second = Limiter::new(Some(s[0].clone()));
    assert_eq!(second.used("k:k1").await.tokens_today, 40);
    let mut a = second.admit(&key).await.expect("40 of 50 used");
    a.finish(10);
    drop(a);
    let r = second.admit(&key).await.err().expect("50 of 50 used");
    assert_eq!(r.code, "budget_exhausted");
}

#[tokio::test]
async fn counts_are_written_in_the_background_without_a_clean_stop() {
    let (s, _dir) = stores(1).await;
    let first = Limiter::new(Some(s[0].clone()));
    let task = first.spawn();
    let key = [Subject::api_key("k1", rpm(100))];
    for _ in 0..7 {
        drop(first.admit(&key).await.expect("admitted"));
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    task.abort();
    // No flush: as after kill -9, a moment later.
    let second = Limiter::new(Some(s[0].clone()));
    assert_eq!(second.used("k:k1").await.requests_this_minute, 7);
}

/// Fires `total` requests at once, spread over the limiters; returns how
/// many were admitted.
async fn burst(limiters: &[Limiter], subject: &Subject, total: usize) -> usize {
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..total {
        let l = limiters[i % limiters.len()].clone();
        let s = subject.clone();
        let admitted = Arc::clone(&admitted);
        tasks.push(tokio::spawn(async move {
            if let Ok(a) = l.admit(std::slice::from_ref(&s)).await {
                admitted.fetch_add(1, Ordering::Relaxed);
                // A short request, so the bursts overlap.
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(a);
            }
        }));
        if i % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    admitted.load(Ordering::Relaxed)
}

async fn cluster(
    n: usize,
) -> (
    Vec<Limiter>,
    Vec<tokio::task::JoinHandle<()>>,
    Option<tempfile::TempDir>,
) {
    let (stores, dir) = stores(n).await;
    let limiters: Vec<Limiter> = stores.into_iter().map(|s| Limiter::new(Some(s))).collect();
    for l in &limiters {
        l.announce().await.expect("announce");
    }
    for l in &limiters {
        l.announce().await.expect("announce");
        assert_eq!(l.servers(), n as i64);
    }
    let tasks = limiters.iter().map(Limiter::spawn).collect();
    (limiters, tasks, dir)
}

#[tokio::test]
async fn three_servers_admit_at_most_ten_percent_over_a_shared_limit() {
    let (limiters, tasks, _dir) = cluster(3).await;
    // 90 a minute: each server may run ahead by 3 between syncs.
    let subject = Subject::api_key("shared", rpm(90));
    let admitted = burst(&limiters, &subject, 300).await;
    eprintln!("admitted {admitted} of 90");
    assert!(
        (90..=99).contains(&admitted),
        "admitted {admitted} of a limit of 90"
    );
    for t in tasks {
        t.abort();
    }
}

#[tokio::test]
async fn three_servers_reserve_each_request_of_a_small_limit_exactly() {
    let (limiters, tasks, _dir) = cluster(3).await;
    // 12 a minute is below 10 per server: every request is reserved.
    let subject = Subject::user("u1", rpm(12));
    let admitted = burst(&limiters, &subject, 60).await;
    assert_eq!(admitted, 12);
    for t in tasks {
        t.abort();
    }
}

#[tokio::test]
async fn three_servers_share_a_day_budget() {
    let (limiters, tasks, _dir) = cluster(3).await;
    let limits = Limits {
        tokens_per_day: Some(100),
        ..Limits::default()
    };
    let subject = [Subject::agent("bot", limits)];
    for l in &limiters {
        let mut a = l.admit(&subject).await.expect("budget left");
        a.finish(40);
    }
    // 120 of 100 used across the servers; within a sync every one knows.
    tokio::time::sleep(Duration::from_millis(700)).await;
    for l in &limiters {
        let r = l.admit(&subject).await.err().expect("budget used up");
        assert_eq!(r.code, "budget_exhausted");
    }
    for t in tasks {
        t.abort();
    }
}

fn addr(s: &str) -> IpAddr {
    s.parse().expect("address")
}

#[tokio::test]
async fn login_attempts_arriving_at_once_on_three_servers_are_counted_up_to_the_limit() {
    let (stores, _dir) = stores(3).await;
    let throttles: Vec<Arc<LoginThrottle>> = stores
        .into_iter()
        .map(|s| Arc::new(LoginThrottle::new(s, 300, 5, 50)))
        .collect();
    let mut tasks = Vec::new();
    for i in 0..30 {
        let t = Arc::clone(&throttles[i % 3]);
        tasks.push(tokio::spawn(async move {
            t.attempt("victim@example.com", addr(&format!("10.0.0.{i}")))
                .await
                .unwrap_or_else(|e| panic!("database: {e}"))
        }));
    }
    let mut counted = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => counted += 1,
            Err(retry) => assert!((1..=300).contains(&retry), "retry {retry}"),
        }
    }
    assert_eq!(counted, 5, "exactly the limit is counted (and checked)");
}

#[tokio::test]
async fn the_login_lockout_slides_and_ends_when_the_oldest_failure_leaves() {
    let (stores, _dir) = stores(2).await;
    let a = LoginThrottle::new(stores[0].clone(), 3, 2, 50);
    let b = LoginThrottle::new(stores[1].clone(), 3, 2, 50);
    let ip = addr("192.0.2.1");
    let t0 = 1_800_000_000_000;
    a.attempt_at("x@example.com", ip, t0)
        .await
        .expect("db")
        .expect("first counted");
    b.attempt_at("x@example.com", ip, t0 + 1000)
        .await
        .expect("db")
        .expect("second counted, on the other server");
    // Locked: the oldest (t0) leaves at t0 + 3 s.
    let wait = a
        .attempt_at("x@example.com", ip, t0 + 1500)
        .await
        .expect("db")
        .expect_err("third refused");
    assert_eq!(wait, 2);
    // Refused attempts do not extend the lockout.
    let wait = b
        .attempt_at("x@example.com", ip, t0 + 2500)
        .await
        .expect("db")
        .expect_err("still refused");
    assert_eq!(wait, 1);
    // The oldest has left: one more may be checked, then locked until t0+1s+3s.
    a.attempt_at("x@example.com", ip, t0 + 3000)
        .await
        .expect("db")
        .expect("counted after the oldest left");
    let wait = a
        .attempt_at("x@example.com", ip, t0 + 3100)
        .await
        .expect("db")
        .expect_err("full again");
    assert_eq!(wait, 1);
}

#[tokio::test]
async fn a_right_password_uncounts_itself_and_forgives_the_account() {
    let (stores, _dir) = stores(1).await;
    let t = LoginThrottle::new(stores[0].clone(), 300, 2, 3);
    let ip = addr("192.0.2.7");
    t.attempt("y@example.com", ip)
        .await
        .expect("db")
        .expect("1");
    let ok = t
        .attempt("y@example.com", ip)
        .await
        .expect("db")
        .expect("2");
    t.succeeded(ok).await.expect("db");
    // The account starts over; the address keeps its one failure.
    t.attempt("y@example.com", ip)
        .await
        .expect("db")
        .expect("counted");
    t.attempt("y@example.com", ip)
        .await
        .expect("db")
        .expect("counted");
    // Now the address has 3 counted failures (its maximum).
    let wait = t
        .attempt("other@example.com", ip)
        .await
        .expect("db")
        .expect_err("address locked");
    assert!((299..=300).contains(&wait), "{wait}");
}

#[tokio::test]
async fn a_server_cut_off_from_the_database_keeps_enforcing_without_waiting() {
    let (s, _dir) = stores(1).await;
    let l = Limiter::new(Some(s[0].clone()));
    s[0].pool.close().await;
    let key = [Subject::api_key("k1", rpm(3))];
    let started = std::time::Instant::now();
    for _ in 0..3 {
        drop(l.admit(&key).await.expect("admitted from what it knows"));
    }
    let r = l.admit(&key).await.err().expect("still limited");
    assert_eq!(r.code, "rate_limited");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn three_servers_cut_off_from_the_database_each_take_only_their_part() {
    let (limiters, tasks, _dir) = cluster(3).await;
    for t in &tasks {
        t.abort();
    }
    let subject = Subject::api_key("shared", rpm(30));
    // Known to all: 6 used, on every server, before the database went away.
    let admitted = burst(&limiters, &subject, 6).await;
    assert_eq!(admitted, 6);
    for l in &limiters {
        l.sync_once().await.expect("sync");
    }
    for l in &limiters {
        l.close_store_for_tests().await;
    }
    let admitted = burst(&limiters, &subject, 90).await;
    // 24 left, split three ways: nobody can overshoot the cluster's limit.
    assert!((1..=24).contains(&admitted), "admitted {admitted}");
}
