//! Limits shared by several `gatehouse serve` processes on one PostgreSQL
//! database: requests per minute and the login throttle hold across them.
//! Not applicable on SQLite (one server owns the file). The same limits in
//! one server: `tests/api/limits`.

use std::time::Duration;

use crate::common::procs::spawn_server;
use crate::common::*;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

const MODEL: &str = "gpt";

fn chat_body() -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
}

fn header(r: &Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn pg_url() -> Option<String> {
    std::env::var("GATEHOUSE_TEST_DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))
}

async fn login_at(c: &reqwest::Client, url: &str, email: &str, pw: &str) -> Response {
    c.post(format!("{url}/api/auth/jwt/login"))
        .form(&[("username", email), ("password", pw)])
        .send()
        .await
        .expect("login")
}

#[tokio::test]
async fn three_servers_admit_at_most_ten_percent_over_requests_per_minute() {
    if pg_url().is_none() {
        eprintln!("not applicable on SQLite: set GATEHOUSE_TEST_DATABASE_URL=postgres://...");
        return;
    }
    let (db, _) = fresh_database().await;
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let (a, b, c) = tokio::join!(
        spawn_server(&db, &[]),
        spawn_server(&db, &[]),
        spawn_server(&db, &[])
    );
    let client = client();
    let admin: Value = login_at(&client, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .json()
        .await
        .expect("json");
    let admin = admin["access_token"].as_str().expect("token").to_string();
    let post = |url: String, body: Value| {
        let client = client.clone();
        let admin = admin.clone();
        async move {
            client
                .post(url)
                .bearer_auth(admin)
                .json(&body)
                .send()
                .await
                .expect("post")
        }
    };
    let r = post(
        format!("{}/api/admin/providers", a.url),
        json!({"name": "p", "type": "openai", "base_url": stub.openai_base_url(), "timeout_s": 5}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = post(
        format!("{}/api/admin/models", a.url),
        json!({"id": MODEL, "kind": "chat", "provider": "p", "upstream_model": "up"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = post(
        format!("{}/api/api-keys", a.url),
        json!({"name": "shared", "limits": {"requests_per_minute": 60}}),
    )
    .await;
    let key: Value = r.json().await.expect("json");
    let key = key["key"].as_str().expect("key").to_string();
    // The model list reaches the other servers through NOTIFY.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let urls = [a.url.clone(), b.url.clone(), c.url.clone()];
    let mut tasks = Vec::new();
    for i in 0..200 {
        let url = format!("{}/v1/chat/completions", urls[i % 3]);
        let client = client.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .json(&chat_body())
                .send()
                .await
                .expect("chat")
                .status()
        }));
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut ok = 0;
    for t in tasks {
        let s = t.await.expect("task");
        assert!(
            s == StatusCode::OK || s == StatusCode::TOO_MANY_REQUESTS,
            "{s}"
        );
        if s == StatusCode::OK {
            ok += 1;
        }
    }
    eprintln!("admitted {ok} of a limit of 60 across three servers");
    assert!((60..=66).contains(&ok), "admitted {ok} of 60");
}

#[tokio::test]
async fn the_login_throttle_counts_across_three_servers() {
    if pg_url().is_none() {
        eprintln!("not applicable on SQLite: set GATEHOUSE_TEST_DATABASE_URL=postgres://...");
        return;
    }
    let (db, _) = fresh_database().await;
    let extra = [("GATEHOUSE_LOGIN_MAX_FAILURES", "3")];
    let (a, b, c) = tokio::join!(
        spawn_server(&db, &extra),
        spawn_server(&db, &extra),
        spawn_server(&db, &extra)
    );
    let client = client();
    // Ten wrong passwords at once, spread over the servers: three are checked.
    let mut tasks = Vec::new();
    for i in 0..10 {
        let url = [&a.url, &b.url, &c.url][i % 3].clone();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            login_at(&client, &url, ADMIN_EMAIL, "wrong-password")
                .await
                .status()
        }));
    }
    let mut checked = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.expect("task") {
            StatusCode::BAD_REQUEST => checked += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            s => panic!("unexpected {s}"),
        }
    }
    assert_eq!((checked, refused), (3, 7));
    // Even the right password waits now, on every server.
    for url in [&a.url, &b.url, &c.url] {
        let r = login_at(&client, url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(header(&r, "retry-after").is_some());
    }
}
