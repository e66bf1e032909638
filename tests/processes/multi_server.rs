//! Several servers on one PostgreSQL behave as one. These tests run
//! when GATEHOUSE_TEST_DATABASE_URL is a PostgreSQL URL (scripts/test.sh
//! starts a private cluster); on SQLite, one server owns the file, so there
//! is nothing to share and they are reported as not applicable.

use crate::common;

use std::time::Duration;

use common::procs::{agent_setup, eventually, get_json, login, new_sign_in, spawn_server};
use common::stub::{calling, tool_call};
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
        let v = get_json(&c, &b.url, &key, "/v1/models").await;
        v["data"].as_array().is_some_and(|d| d.len() == 1)
    })
    .await;
    assert!(
        took.is_some(),
        "server B does not list the model added on A"
    );
}

#[tokio::test]
async fn an_alias_added_on_one_server_resolves_on_another_within_a_second() {
    let db = pg_or_skip!();
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let admin = login(&c, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let post = |url: String, body: Value| {
        let c = c.clone();
        let admin = admin.clone();
        async move {
            c.post(url)
                .bearer_auth(admin)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let r = post(
        format!("{}/api/admin/providers", a.url),
        json!({"name": "claude", "type": "anthropic", "base_url": stub.url()}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = post(
        format!("{}/api/admin/models", a.url),
        json!({"id": "sonnet", "kind": "chat", "provider": "claude", "upstream_model": "ms-claude"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let key = post(format!("{}/api/api-keys", b.url), json!({"name": "k"}))
        .await
        .json::<Value>()
        .await
        .unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c
        .patch(format!("{}/api/admin/models/sonnet", a.url))
        .bearer_auth(&admin)
        .json(&json!({"aliases": ["claude-sonnet-*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body =
        json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]});
    let took = eventually(Duration::from_secs(1), || async {
        let r = c
            .post(format!("{}/v1/chat/completions", b.url))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .unwrap();
        r.status() == StatusCode::OK
    })
    .await;
    assert!(
        took.is_some(),
        "server B does not resolve the alias added on A"
    );
    assert_eq!(stub.requests_for_model("ms-claude")[0].path, "/v1/messages");
}

#[tokio::test]
async fn of_concurrent_renewals_spread_over_servers_exactly_one_succeeds() {
    let db = pg_or_skip!();
    let (a, b, s3) = tokio::join!(
        spawn_server(&db, &[]),
        spawn_server(&db, &[]),
        spawn_server(&db, &[])
    );
    let c = client();
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let user = agent_setup(
        &c,
        &a.url,
        &stub.openai_base_url(),
        "ms-up",
        "race",
        json!({}),
    )
    .await
    .user;
    let pair = new_sign_in(&c, &a.url, &user, "race", "laptop").await;
    let refresh = pair["refresh_token"].as_str().unwrap().to_string();
    let urls = [a.url.clone(), b.url.clone(), s3.url.clone()];
    let mut tasks = vec![];
    for i in 0..24 {
        let (c, url, rt) = (c.clone(), urls[i % 3].clone(), refresh.clone());
        tasks.push(tokio::spawn(async move {
            c.post(format!("{url}/api/agent-tokens/refresh"))
                .json(&json!({"refresh_token": rt}))
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let s = t.await.unwrap();
        if s == StatusCode::OK {
            ok += 1;
        } else {
            assert_eq!(s, StatusCode::UNAUTHORIZED);
        }
    }
    assert_eq!(ok, 1, "exactly one renewal may win");
}

#[tokio::test]
async fn reuse_detected_on_one_server_ends_sign_ins_on_every_server_within_a_second() {
    let db = pg_or_skip!();
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let user = agent_setup(
        &c,
        &a.url,
        &stub.openai_base_url(),
        "ms-up",
        "reuse",
        json!({}),
    )
    .await
    .user;
    let phone = new_sign_in(&c, &a.url, &user, "reuse", "phone").await;
    let laptop = new_sign_in(&c, &a.url, &user, "reuse", "laptop").await;
    let laptop_access = laptop["access_token"].as_str().unwrap().to_string();
    // Server B has validated (and cached) the laptop's access token.
    let profile = |url: String, t: String| {
        let c = c.clone();
        async move {
            c.get(format!("{url}/v1/agents/reuse/profile"))
                .bearer_auth(t)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(profile(b.url.clone(), laptop_access.clone()).await, 200);
    let old = phone["refresh_token"].as_str().unwrap().to_string();
    let r = c
        .post(format!("{}/api/agent-tokens/refresh", a.url))
        .json(&json!({"refresh_token": old}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(format!("{}/api/agent-tokens/refresh", a.url))
        .json(&json!({"refresh_token": old}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["detail"]["code"],
        "refresh_token_reused"
    );
    let took = eventually(Duration::from_secs(1), || {
        let fut = profile(b.url.clone(), laptop_access.clone());
        async move { fut.await == StatusCode::UNAUTHORIZED }
    })
    .await;
    assert!(
        took.is_some(),
        "server B still accepts an access token of an ended sign-in after 1 s"
    );
}

#[tokio::test]
async fn a_sign_in_ended_on_one_server_is_refused_on_another_within_a_second() {
    let db = pg_or_skip!();
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let user = agent_setup(
        &c,
        &a.url,
        &stub.openai_base_url(),
        "ms-up",
        "ending",
        json!({}),
    )
    .await
    .user;
    let s = new_sign_in(&c, &a.url, &user, "ending", "tablet").await;
    let access = s["access_token"].as_str().unwrap().to_string();
    let get = || {
        let (c, url, t) = (c.clone(), b.url.clone(), access.clone());
        async move {
            c.get(format!("{url}/v1/agents/ending/profile"))
                .bearer_auth(t)
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(get().await.status(), 200);
    let r = c
        .delete(format!(
            "{}/api/agent-tokens/{}",
            a.url,
            s["device_id"].as_str().unwrap()
        ))
        .bearer_auth(&user)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let took = eventually(Duration::from_secs(1), || async {
        get().await.status() == StatusCode::UNAUTHORIZED
    })
    .await;
    assert!(
        took.is_some(),
        "server B still accepts the ended sign-in after 1 s"
    );
    let v: Value = get().await.json().await.unwrap();
    assert_eq!(v["error"]["code"], "sign_in_ended");
}

#[tokio::test]
async fn an_approval_created_on_one_server_is_answered_on_another_and_enforced_on_a_third() {
    let db = pg_or_skip!();
    let (a, b, s3) = tokio::join!(
        spawn_server(&db, &[]),
        spawn_server(&db, &[]),
        spawn_server(&db, &[])
    );
    let c = client();
    let stub = gatehouse_stub_upstream::Stub::start().await;
    stub.script(
        "ms-up",
        calling(vec![tool_call(
            "call_1",
            "delete_file",
            "{\"path\":\"/tmp/x\"}",
        )]),
    );
    let user = agent_setup(
        &c,
        &a.url,
        &stub.openai_base_url(),
        "ms-up",
        "appr",
        json!({"default_tool_mode": "ask"}),
    )
    .await
    .user;
    let s = new_sign_in(&c, &a.url, &user, "appr", "desk").await;
    let access = s["access_token"].as_str().unwrap().to_string();
    let tools = json!([{"type": "function", "function": {"name": "delete_file", "parameters": {"type": "object"}}}]);
    let r = c
        .post(format!("{}/v1/agents/appr/chat/completions", a.url))
        .bearer_auth(&access)
        .json(&json!({"model": "x", "messages": [{"role": "user", "content": "clean up"}], "tools": tools}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let approval = v["approvals"][0]["id"]
        .as_str()
        .expect("an approval")
        .to_string();
    let followup = json!({"model": "x", "messages": [
        {"role": "user", "content": "clean up"},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "delete_file", "arguments": "{\"path\":\"/tmp/x\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "deleted"}
    ]});
    // Pending: refused on the third server.
    let r = c
        .post(format!("{}/v1/agents/appr/chat/completions", s3.url))
        .bearer_auth(&access)
        .json(&followup)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    // Denied on the second server.
    let r = c
        .post(format!("{}/v1/agents/appr/approvals/{approval}", b.url))
        .bearer_auth(&access)
        .json(&json!({"decision": "deny"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    stub.script("ms-up", gatehouse_stub_upstream::Script::default());
    let r = c
        .post(format!("{}/v1/agents/appr/chat/completions", s3.url))
        .bearer_auth(&access)
        .json(&followup)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let last = stub
        .requests_for_model("ms-up")
        .pop()
        .expect("the upstream got the follow-up");
    let msgs = last.body["messages"].as_array().unwrap();
    assert_eq!(
        msgs.last().unwrap()["content"],
        "The user denied this tool call."
    );
}

#[tokio::test]
async fn a_price_set_or_ended_on_one_server_applies_on_another_within_a_second() {
    let db = pg_or_skip!();
    let stub = gatehouse_stub_upstream::Stub::start().await;
    let (a, b) = tokio::join!(spawn_server(&db, &[]), spawn_server(&db, &[]));
    let c = client();
    let admin = login(&c, &a.url, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let send = |method: reqwest::Method, url: String, body: Value| {
        let c = c.clone();
        let admin = admin.clone();
        async move {
            c.request(method, url)
                .bearer_auth(admin)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let r = send(
        reqwest::Method::POST,
        format!("{}/api/admin/providers", a.url),
        json!({"name": "vllm", "type": "openai", "base_url": stub.openai_base_url()}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = send(
        reqwest::Method::POST,
        format!("{}/api/admin/models", a.url),
        json!({"id": "chat", "kind": "chat", "provider": "vllm", "upstream_model": "org/m"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let key = send(
        reqwest::Method::POST,
        format!("{}/api/api-keys", b.url),
        json!({"name": "k"}),
    )
    .await
    .json::<Value>()
    .await
    .unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
    let status_on_b = || async {
        let r = c
            .post(format!("{}/v1/chat/completions", b.url))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .unwrap();
        r.headers()
            .get("x-gatehouse-cost-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(status_on_b().await.as_deref(), Some("unpriced"));

    let r = send(
        reqwest::Method::PUT,
        format!("{}/api/admin/prices/vllm/org/m", a.url),
        json!({"input": "1", "output": "2"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let took = eventually(Duration::from_secs(1), || async {
        status_on_b().await.as_deref() == Some("exact")
    })
    .await;
    assert!(
        took.is_some(),
        "server B does not price with the price set on A"
    );

    let r = send(
        reqwest::Method::DELETE,
        format!("{}/api/admin/prices/vllm/org/m", a.url),
        Value::Null,
    )
    .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let took = eventually(Duration::from_secs(1), || async {
        status_on_b().await.as_deref() == Some("unpriced")
    })
    .await;
    assert!(
        took.is_some(),
        "server B still prices a pair whose price A ended"
    );
}
