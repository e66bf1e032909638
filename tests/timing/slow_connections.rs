//! Hundreds of slow (slowloris) connections never delay an ordinary request
//! by more than a few milliseconds (contract, "Hardening" → "Connections").
//! A file of its own: it measures times, so it runs alone.

use crate::common;

use std::time::{Duration, Instant};

use common::procs::{login, post, spawn_server};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn timed(
    c: &reqwest::Client,
    n: usize,
    req: impl Fn() -> reqwest::RequestBuilder,
) -> Duration {
    let _ = c;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let r = req().send().await.expect("request");
        assert!(r.status().is_success(), "{}", r.status());
        let _ = r.bytes().await;
        times.push(start.elapsed());
    }
    median(times)
}

#[tokio::test]
async fn three_hundred_slow_connections_do_not_delay_ordinary_requests() {
    let _alone = crate::alone().await;
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let (db, _dir) = common::fresh_database().await;
    let p = spawn_server(&db, &[]).await;
    let c = common::client();
    let admin = login(&c, &p.url, common::ADMIN_EMAIL, common::ADMIN_PASSWORD).await;
    for (path, body) in [
        (
            "/api/admin/providers",
            json!({"name": "stub", "type": "openai", "base_url": stub.openai_base_url()}),
        ),
        (
            "/api/admin/models",
            json!({"id": "m", "kind": "chat", "provider": "stub", "upstream_model": "up"}),
        ),
    ] {
        assert_eq!(post(&c, &p.url, &admin, path, &body).await.status(), 201);
    }
    let r = post(&c, &p.url, &admin, "/api/api-keys", &json!({"name": "k"})).await;
    let key = r.json::<Value>().await.unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let health = || c.get(format!("{}/healthz", p.url));
    let model = || {
        c.post(format!("{}/v1/chat/completions", p.url))
            .bearer_auth(&key)
            .json(&chat)
    };
    // Warm up, then the times without slow connections.
    timed(&c, 5, health).await;
    timed(&c, 5, model).await;
    let base_health = timed(&c, 30, health).await;
    let base_model = timed(&c, 30, model).await;

    let target = p.url.trim_start_matches("http://").to_string();
    let mut slow = Vec::new();
    for i in 0..300 {
        let target = target.clone();
        slow.push(tokio::spawn(async move {
            let Ok(mut s) = TcpStream::connect(&target).await else {
                return;
            };
            let _ = s
                .write_all(
                    format!("POST /api/auth/jwt/login HTTP/1.1\r\nHost: x\r\nX-{i}: ").as_bytes(),
                )
                .await;
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if s.write_all(b"a").await.is_err() {
                    return;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Up to three rounds: a real slowloris problem delays every round, while
    // a moment of load from elsewhere on a shared machine does not last.
    let few_ms = Duration::from_millis(5);
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let slow_health = timed(&c, 30, health).await;
        let slow_model = timed(&c, 30, model).await;
        rounds.push((slow_health, slow_model));
        if slow_health < base_health + few_ms && slow_model < base_model + few_ms {
            break;
        }
    }
    let (slow_health, slow_model) = rounds[rounds.len() - 1];
    for s in &slow {
        s.abort();
    }
    eprintln!(
        "median /healthz {base_health:?} -> {slow_health:?}, chat {base_model:?} -> {slow_model:?} with 300 slow connections ({} rounds)",
        rounds.len()
    );
    assert!(
        slow_health < base_health + few_ms,
        "/healthz {base_health:?} -> {slow_health:?}"
    );
    assert!(
        slow_model < base_model + few_ms,
        "chat {base_model:?} -> {slow_model:?}"
    );
}
