//! The login throttle through the real binary (contract, "Hardening" →
//! "Login"): the client address behind trusted proxies, and a lockout that
//! ends when the oldest counted failure leaves the window.

use crate::common;

use std::time::{Duration, Instant};

use common::procs::{spawn_server, Proc};
use serde_json::Value;

async fn server(extra: &[(&str, &str)]) -> (Proc, Option<tempfile::TempDir>) {
    let (db, dir) = common::fresh_database().await;
    (spawn_server(&db, extra).await, dir)
}

/// One login at `p`, with these `X-Forwarded-For` headers: status and code.
async fn login(p: &Proc, user: &str, password: &str, forwarded: &[&str]) -> (u16, String) {
    let mut req = common::client()
        .post(format!("{}/api/auth/jwt/login", p.url))
        .form(&[("username", user), ("password", password)]);
    for f in forwarded {
        req = req.header("x-forwarded-for", *f);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (
        status,
        v["detail"]["code"].as_str().unwrap_or("").to_string(),
    )
}

fn nobody(i: usize) -> String {
    format!("nobody{i}@example.com")
}

#[tokio::test]
async fn a_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let (p, _dir) = server(&[
        ("GATEHOUSE_LOGIN_MAX_FAILURES_PER_ADDR", "3"),
        ("GATEHOUSE_LOGIN_MAX_FAILURES", "100"),
    ])
    .await;
    for i in 0..3 {
        let spoofed = format!("198.51.100.{i}");
        assert_eq!(
            login(&p, &nobody(i), "wrong", &[&spoofed]).await,
            (400, "login_bad_credentials".into())
        );
    }
    // A new made-up address each time changes nothing: the peer is counted.
    assert_eq!(
        login(&p, &nobody(9), "wrong", &["198.51.100.77"]).await,
        (429, "too_many_attempts".into())
    );
    assert_eq!(
        login(&p, common::ADMIN_EMAIL, common::ADMIN_PASSWORD, &[])
            .await
            .0,
        429
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_is_counted_by_its_forwarded_address() {
    let (p, _dir) = server(&[
        ("GATEHOUSE_TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.1"),
        ("GATEHOUSE_LOGIN_MAX_FAILURES_PER_ADDR", "3"),
        ("GATEHOUSE_LOGIN_MAX_FAILURES", "100"),
    ])
    .await;
    // The attacker behind the proxy (which appends the address it saw).
    for i in 0..3 {
        assert_eq!(
            login(&p, &nobody(i), "wrong", &["203.0.113.5"]).await.0,
            400
        );
    }
    assert_eq!(
        login(&p, &nobody(4), "wrong", &["203.0.113.5"]).await,
        (429, "too_many_attempts".into())
    );
    // Prepending a made-up address does not escape: the rightmost
    // untrusted address counts; trusted hops (a second proxy) are skipped.
    assert_eq!(
        login(&p, &nobody(5), "wrong", &["192.0.2.1, 203.0.113.5"])
            .await
            .0,
        429
    );
    assert_eq!(
        login(
            &p,
            &nobody(6),
            "wrong",
            &["192.0.2.1, 203.0.113.5, 10.1.2.3"]
        )
        .await
        .0,
        429
    );
    assert_eq!(
        login(&p, &nobody(7), "wrong", &["192.0.2.1", "203.0.113.5"])
            .await
            .0,
        429
    );
    // Everyone else behind the same proxy still signs in.
    assert_eq!(
        login(
            &p,
            common::ADMIN_EMAIL,
            common::ADMIN_PASSWORD,
            &["203.0.113.6"]
        )
        .await
        .0,
        200
    );
    assert_eq!(
        login(
            &p,
            common::ADMIN_EMAIL,
            common::ADMIN_PASSWORD,
            &["203.0.113.5, 203.0.113.6, 10.9.9.9"]
        )
        .await
        .0,
        200
    );
}

#[tokio::test]
async fn a_lockout_ends_when_the_oldest_counted_failure_leaves_the_window() {
    let (p, _dir) = server(&[
        ("GATEHOUSE_LOGIN_LOCKOUT_S", "3"),
        ("GATEHOUSE_LOGIN_MAX_FAILURES", "2"),
    ])
    .await;
    let admin = common::ADMIN_EMAIL;
    let t0 = Instant::now();
    assert_eq!(login(&p, admin, "wrong", &[]).await.0, 400);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let t1 = Instant::now();
    assert_eq!(login(&p, admin, "wrong", &[]).await.0, 400);
    // Locked, even with the right password; refused attempts do not extend it.
    assert_eq!(login(&p, admin, common::ADMIN_PASSWORD, &[]).await.0, 429);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(login(&p, admin, common::ADMIN_PASSWORD, &[]).await.0, 429);
    // The first failure leaves the window at t0 + 3 s: one more is checked.
    let left = (t0 + Duration::from_millis(3300)).saturating_duration_since(Instant::now());
    tokio::time::sleep(left).await;
    assert_eq!(login(&p, admin, "wrong", &[]).await.0, 400);
    // Full again until the second failure leaves, at t1 + 3 s.
    assert_eq!(login(&p, admin, common::ADMIN_PASSWORD, &[]).await.0, 429);
    let left = (t1 + Duration::from_millis(3300)).saturating_duration_since(Instant::now());
    tokio::time::sleep(left).await;
    assert_eq!(login(&p, admin, common::ADMIN_PASSWORD, &[]).await.0, 200);
}

#[tokio::test]
async fn of_many_guesses_arriving_at_once_only_the_limit_is_checked() {
    let (p, _dir) = server(&[("GATEHOUSE_LOGIN_MAX_FAILURES", "5")]).await;
    let guesses = (0..30).map(|i| {
        let p = &p;
        async move { login(p, common::ADMIN_EMAIL, &format!("guess-{i}"), &[]).await }
    });
    let answers = futures_util::future::join_all(guesses).await;
    let checked = answers.iter().filter(|a| a.0 == 400).count();
    let refused = answers
        .iter()
        .filter(|a| *a == &(429, "too_many_attempts".to_string()))
        .count();
    assert_eq!((checked, refused), (5, 25), "{answers:?}");
}
