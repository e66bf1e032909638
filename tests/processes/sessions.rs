//! Sessions and password hashes through the real binary (contract,
//! "Hardening" → "Sessions", "Password hashes"): `gatehouse users
//! set-password` ends the user's login tokens and agent sign-ins on the
//! running servers within a second; hashes are Argon2id at OWASP's minimum.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::procs::{agent_setup, eventually, new_sign_in, spawn_server};
use serde_json::{json, Value};

fn set_password(db: &str, email: &str, password: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args([
            "users",
            "set-password",
            "--email",
            email,
            "--password-stdin",
        ])
        .env("GATEHOUSE_DATABASE_URL", db)
        .env("GATEHOUSE_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
}

async fn code(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    let code = v["detail"]["code"]
        .as_str()
        .or(v["error"]["code"].as_str())
        .unwrap_or("")
        .to_string();
    (status, code)
}

#[tokio::test]
async fn set_password_on_the_command_line_ends_tokens_and_sign_ins_on_every_server_within_a_second()
{
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let (db, _dir) = common::fresh_database().await;
    let postgres = db.starts_with("postgres");
    let a = spawn_server(&db, &[]).await;
    // Several servers share only a PostgreSQL database.
    let b = if postgres {
        Some(spawn_server(&db, &[]).await)
    } else {
        None
    };
    let c = common::client();
    let setup = agent_setup(&c, &a.url, &stub.openai_base_url(), "up", "pw", json!({})).await;
    let s = new_sign_in(&c, &a.url, &setup.user, "pw", "laptop").await;
    let access = s["access_token"].as_str().unwrap().to_string();
    let urls: Vec<String> = std::iter::once(a.url.clone())
        .chain(b.as_ref().map(|b| b.url.clone()))
        .collect();
    for url in &urls {
        let r = c
            .get(format!("{url}/api/users/me"))
            .bearer_auth(&setup.user)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let r = c
            .get(format!("{url}/v1/agents/pw/profile"))
            .bearer_auth(&access)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }

    set_password(&db, "dev@example.com", "a-new-password-2");
    for url in &urls {
        let ended = eventually(Duration::from_secs(1), || async {
            let me = c
                .get(format!("{url}/api/users/me"))
                .bearer_auth(&setup.user)
                .send()
                .await
                .unwrap();
            let profile = c
                .get(format!("{url}/v1/agents/pw/profile"))
                .bearer_auth(&access)
                .send()
                .await
                .unwrap();
            code(me).await == (401, "invalid_token".into())
                && code(profile).await == (401, "sign_in_ended".into())
        })
        .await;
        assert!(ended.is_some(), "still accepted on {url} a second later");
    }
}

#[tokio::test]
async fn password_hashes_are_argon2id_at_owasps_minimum() {
    let (db, _dir) = common::fresh_database().await;
    let p = spawn_server(&db, &[]).await;
    let c = common::client();
    let admin = common::procs::login(&c, &p.url, common::ADMIN_EMAIL, common::ADMIN_PASSWORD).await;
    let r = common::procs::post(
        &c,
        &p.url,
        &admin,
        "/api/admin/users",
        &json!({"email": "h@example.com", "password": "password-123"}),
    )
    .await;
    assert_eq!(r.status(), 201);
    drop(p);
    let pool = sqlx::any::AnyPoolOptions::new();
    sqlx::any::install_default_drivers();
    let pool = pool.connect(&db).await.unwrap();
    let hash: String =
        sqlx::query_scalar("SELECT password_hash FROM users WHERE email = 'h@example.com'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let parts: Vec<&str> = hash.split('$').collect();
    assert_eq!(parts[1], "argon2id", "{hash}");
    let params: std::collections::HashMap<&str, u64> = parts[3]
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k, v.parse().ok()?))
        })
        .collect();
    assert!(params["m"] >= 19_456, "{hash}");
    assert!(params["t"] >= 2, "{hash}");
    assert!(params["p"] >= 1, "{hash}");
}
