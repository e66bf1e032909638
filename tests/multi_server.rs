//! Issue 8: several servers on one PostgreSQL behave as one. These tests run
//! when GATEHOUSE_TEST_DATABASE_URL is a PostgreSQL URL (scripts/test.sh
//! starts a private cluster); on SQLite, one server owns the file, so there
//! is nothing to share and they are reported as not applicable.

mod common;

use std::time::Duration;

use common::procs::{eventually, spawn_server};
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn pg_db() -> Option<String> {
    let base = std::env::var("GATEHOUSE_TEST_DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))?;
    let _ = base;
    let (url, _) = fresh_database().await;
    Some(url)
}

macro_rules! pg_or_skip {
    () => {
        match pg_db().await {
            Some(db) => db,
            None => {
                eprintln!(
                    "not applicable on SQLite: set GATEHOUSE_TEST_DATABASE_URL=postgres://..."
                );
                return;
            }
        }
    };
}

async fn login(c: &reqwest::Client, url: &str, email: &str, pw: &str) -> String {
    let r = c
        .post(format!("{url}/api/auth/jwt/login"))
        .form(&[("username", email), ("password", pw)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "login at {url}");
    r.json::<Value>().await.unwrap()["access_token"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn servers_starting_at_once_migrate_once_and_share_the_signing_secret() {
    let db = pg_or_skip!();
    let (a, b, c) = tokio::join!(
        spawn_server(&db, &[]),
        spawn_server(&db, &[]),
        spawn_server(&db, &[])
    );
    let client = client();
    let token = login(&client, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    for s in [&a, &b, &c] {
        let r = client
            .get(format!("{}/api/users/me", s.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "a token from server A works on {}", s.url);
    }
}

#[tokio::test]
async fn a_key_revoked_on_one_server_is_refused_on_another_within_a_second() {
    let db = pg_or_skip!();
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let token = login(&c, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let r = c
        .post(format!("{}/api/api-keys", a.url))
        .bearer_auth(&token)
        .json(&json!({"name": "k"}))
        .send()
        .await
        .unwrap();
    let created: Value = r.json().await.unwrap();
    let key = created["key"].as_str().unwrap().to_string();
    // B validates (and caches) the key.
    for _ in 0..3 {
        assert_eq!(
            c.get(format!("{}/v1/models", b.url))
                .bearer_auth(&key)
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }
    let r = c
        .delete(format!(
            "{}/api/api-keys/{}",
            a.url,
            created["id"].as_str().unwrap()
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let took = eventually(Duration::from_secs(1), || async {
        c.get(format!("{}/v1/models", b.url))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status()
            == StatusCode::UNAUTHORIZED
    })
    .await;
    assert!(
        took.is_some(),
        "server B still accepts the revoked key after 1 s"
    );
}

#[tokio::test]
async fn a_user_disabled_on_one_server_is_refused_on_another_within_a_second() {
    let db = pg_or_skip!();
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let admin = login(&c, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let r = c
        .post(format!("{}/api/admin/users", a.url))
        .bearer_auth(&admin)
        .json(&json!({"email": "u@example.com", "password": "password-123"}))
        .send()
        .await
        .unwrap();
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let user = login(&c, &b.url, "u@example.com", "password-123").await;
    assert_eq!(
        c.get(format!("{}/api/users/me", b.url))
            .bearer_auth(&user)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let r = c
        .patch(format!("{}/api/admin/users/{id}", a.url))
        .bearer_auth(&admin)
        .json(&json!({"is_active": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let took = eventually(Duration::from_secs(1), || async {
        c.get(format!("{}/api/users/me", b.url))
            .bearer_auth(&user)
            .send()
            .await
            .unwrap()
            .status()
            == StatusCode::UNAUTHORIZED
    })
    .await;
    assert!(
        took.is_some(),
        "server B still accepts the disabled user's token after 1 s"
    );
}

#[tokio::test]
async fn a_model_added_on_one_server_is_served_by_another() {
    let db = pg_or_skip!();
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let admin = login(&c, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let key = c
        .post(format!("{}/api/api-keys", b.url))
        .bearer_auth(&admin)
        .json(&json!({"name": "k"}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    c.post(format!("{}/api/admin/providers", a.url))
        .bearer_auth(&admin)
        .json(&json!({"name": "p", "type": "tei", "base_url": "http://127.0.0.1:9"}))
        .send()
        .await
        .unwrap();
    c.post(format!("{}/api/admin/models", a.url))
        .bearer_auth(&admin)
        .json(&json!({"id": "e", "kind": "embeddings", "provider": "p", "upstream_model": "x"}))
        .send()
        .await
        .unwrap();
    let took = eventually(Duration::from_secs(1), || async {
        let v: Value = c
            .get(format!("{}/v1/models", b.url))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["data"].as_array().is_some_and(|d| d.len() == 1)
    })
    .await;
    assert!(
        took.is_some(),
        "server B does not list the model added on A"
    );
}
