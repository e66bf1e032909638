//! The contract's "Hardening" rules that cut across areas: tool lists on
//! agent chat, legacy function fields, metrics labels and the metrics token,
//! what the deployment secret keeps out of the database, password changes
//! and the maximum age of a sign-in, the bootstrap admin, login fields
//! bounded before hashing, and PII scanned in every field.

use crate::common;

use std::time::{Duration, Instant};

use common::agent_chat::{agent_scene, chat};
use common::models::{env, env_with, v1_error};
use common::scene::Scene;
use common::{api_code, client};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn tools(n: usize, prefix: &str) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"type": "function", "function": {"name": format!("{prefix}{i}"), "parameters": {"type": "object"}}}))
            .collect(),
    )
}

fn body_with_tools(tools: Value) -> Value {
    json!({"model": "x", "messages": [{"role": "user", "content": "hi"}], "tools": tools})
}

/// The common scene with agent `address` holding every tool but `known`
/// (auto tool mode) on `upstream`; the user's access token.
async fn held_agent(address: &str, upstream: &str) -> (Scene, String) {
    let env = agent_scene(
        address,
        upstream,
        json!({"tool_contract": ["known"], "default_tool_mode": "auto"}),
        &format!("u@{address}.test"),
    )
    .await;
    let token = env.access.clone();
    (env, token)
}

/// The tools the admin list shows as held.
async fn admin_tools(env: &Scene, address: &str) -> Vec<Value> {
    let r = env
        .app
        .get(&format!("/api/admin/agents/{address}/tools"), &env.admin)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let all: Vec<Value> = r.json().await.unwrap();
    all.into_iter().filter(|t| t["status"] == "held").collect()
}

#[tokio::test]
async fn a_request_at_the_tool_cap_is_served_and_one_past_it_is_refused_without_effects() {
    let (env, token) = held_agent("cap", "up-cap").await;

    let at = chat(&env, "cap", &token, &body_with_tools(tools(128, "t")), &[]).await;
    assert_eq!(at.status(), StatusCode::OK);
    let held = at.headers()["x-service-held-tools"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(held.split(',').count(), 128);
    assert_eq!(admin_tools(&env, "cap").await.len(), 128);
    let upstream_calls = env.stub.requests_for_model("up-cap").len();

    let past = chat(&env, "cap", &token, &body_with_tools(tools(129, "p")), &[]).await;
    let (status, err) = v1_error(past).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["code"], "too_many_tools");
    assert_eq!(err["param"], "tools");
    // Nothing recorded, nothing sent upstream.
    assert_eq!(admin_tools(&env, "cap").await.len(), 128);
    assert_eq!(env.stub.requests_for_model("up-cap").len(), upstream_calls);
}

#[tokio::test]
async fn ten_thousand_tools_are_refused_at_once() {
    let (env, token) = held_agent("flood", "up-flood").await;
    let start = Instant::now();
    let r = chat(
        &env,
        "flood",
        &token,
        &body_with_tools(tools(10_000, "f")),
        &[],
    )
    .await;
    let (status, err) = v1_error(r).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["code"], "too_many_tools");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(admin_tools(&env, "flood").await.is_empty());
    assert!(env.stub.requests_for_model("up-flood").is_empty());
}

#[tokio::test]
async fn a_tool_name_outside_the_rule_is_refused_and_nothing_is_held() {
    let (env, token) = held_agent("names", "up-names").await;
    for bad in ["<img src=x>", "", "a b", &"n".repeat(65)] {
        let body = body_with_tools(json!([{"type": "function", "function": {"name": bad}}]));
        let (status, err) = v1_error(chat(&env, "names", &token, &body, &[]).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(err["code"], "validation_error");
        assert_eq!(err["param"], "tools");
    }
    assert!(admin_tools(&env, "names").await.is_empty());
    assert!(env.stub.requests_for_model("up-names").is_empty());
}

#[tokio::test]
async fn legacy_functions_are_refused_on_agent_chat() {
    let (env, token) = held_agent("legacy", "up-legacy").await;
    let cases = [
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "functions": [{"name": "f", "parameters": {}}]}),
            "functions",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "function_call": "auto"}),
            "function_call",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}, {"role": "function", "name": "f", "content": "done"}]}),
            "messages",
        ),
    ];
    for (body, param) in cases {
        let (status, err) = v1_error(chat(&env, "legacy", &token, &body, &[]).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(err["code"], "validation_error");
        assert_eq!(err["param"], param);
        assert!(err["message"]
            .as_str()
            .unwrap()
            .contains("use tools and tool_choice"));
    }
    assert!(env.stub.requests_for_model("up-legacy").is_empty());
}

#[tokio::test]
async fn made_up_methods_do_not_grow_the_metrics() {
    let env = env().await;
    for m in ["BREW", "FOO1", "FOO2", "PURGE"] {
        let r = client()
            .request(
                reqwest::Method::from_bytes(m.as_bytes()).unwrap(),
                env.app.u(&format!("/x/{m}")),
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error());
    }
    let text = client()
        .get(env.app.u("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for m in ["BREW", "FOO1", "FOO2", "PURGE", "/x/"] {
        assert!(!text.contains(m), "{m} in metrics");
    }
    assert!(
        text.contains(r#"method="other",route="unmatched""#),
        "{text}"
    );
}

#[tokio::test]
async fn the_metrics_token_is_required_when_set() {
    let env = env_with(|s| s.metrics_token = Some("metrics-secret-token".into())).await;
    let r = client().get(env.app.u("/metrics")).send().await.unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".to_string())
    );
    let r = client()
        .get(env.app.u("/metrics"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = client()
        .get(env.app.u("/metrics"))
        .bearer_auth("metrics-secret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("gatehouse_http_requests_total"));
}

const SECRET: &str = "a-deployment-secret-of-forty-characters!";

#[tokio::test]
async fn with_gatehouse_secret_the_database_holds_no_provider_key_and_no_signing_secret() {
    let env = env_with(|s| s.secret = Some(SECRET.into())).await;
    let key = "sk-live-0123456789abcdef0123456789";
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "hosted", "type": "openai", "base_url": env.stub.openai_base_url(), "api_key": key}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    env.model("hosted-chat", "chat", "hosted", "up-sealed")
        .await;
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "hosted-chat", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    // The upstream still gets the key ...
    let sent = env.stub.requests_for_model("up-sealed");
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    // ... but the database has neither the key, nor a part of it, nor a secret.
    let pool = &env.app.app().store.pool;
    let stored: Vec<Option<String>> = sqlx::query_scalar("SELECT api_key FROM providers")
        .fetch_all(pool)
        .await
        .unwrap();
    for v in stored.iter().flatten() {
        assert!(!v.contains(&key[8..]), "provider key stored readable: {v}");
        assert!(v.starts_with("sealed:v1:"), "{v}");
    }
    let settings: Vec<String> = sqlx::query_scalar("SELECT value FROM settings")
        .fetch_all(pool)
        .await
        .unwrap();
    assert!(
        settings.iter().all(|v| !v.contains(SECRET)),
        "the secret is in the database"
    );
    let generated: Option<String> =
        sqlx::query_scalar("SELECT value FROM settings WHERE key = 'token_secret'")
            .fetch_optional(pool)
            .await
            .unwrap();
    assert!(
        generated.is_none(),
        "a signing secret was kept in the database"
    );
}

#[tokio::test]
async fn a_password_change_ends_login_tokens_and_sign_ins_issued_before_it() {
    let env = Scene::new()
        .with_model("m-pw", "up-pw")
        .with_agent("pw", json!({}))
        .user("pw@example.com", "laptop")
        .signed_in()
        .await;
    let (id, login) = (env.user_id.clone(), env.login.clone());
    let (access, refresh) = (env.access.clone(), env.refresh.clone());
    assert_eq!(
        env.app.get("/api/users/me", &login).await.status(),
        StatusCode::OK
    );

    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{id}"),
            &env.admin,
            &json!({"password": "a-new-password-2"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);

    assert_eq!(
        api_code(env.app.get("/api/users/me", &login).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".to_string())
    );
    let (status, err) = v1_error(env.app.profile("pw", &access).await).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("sign_in_ended"))
    );
    assert_eq!(
        api_code(env.app.refresh(&refresh).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".to_string())
    );
    // The new password works at once, and its token is accepted.
    let fresh = env
        .app
        .login_token("pw@example.com", "a-new-password-2")
        .await;
    assert_eq!(
        env.app.get("/api/users/me", &fresh).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        env.app
            .login("pw@example.com", "user-password-1")
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn a_sign_in_lives_at_most_its_maximum_age_however_often_renewed() {
    let env = Scene::new()
        .settings(|s| s.sign_in_max_age = 8)
        .with_model("m-aged", "up-aged")
        .with_agent("aged", json!({}))
        .user("aged@example.com", "phone")
        .signed_in()
        .await;
    let first = &env.tokens;
    assert!(first["expires_in"].as_i64().unwrap() <= 8);
    assert!(first["refresh_expires_in"].as_i64().unwrap() <= 8);
    let mut refresh = first["refresh_token"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let renewed = env.app.refreshed(&refresh).await;
    // What is left of the eight seconds, rounded up: at most 5.
    assert!(renewed["expires_in"].as_i64().unwrap() <= 5, "{renewed}");
    assert!(
        renewed["refresh_expires_in"].as_i64().unwrap() <= 5,
        "{renewed}"
    );
    refresh = renewed["refresh_token"].as_str().unwrap().to_string();
    let access = renewed["access_token"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    assert_eq!(
        api_code(env.app.refresh(&refresh).await).await,
        (
            StatusCode::UNAUTHORIZED,
            "refresh_token_expired".to_string()
        )
    );
    let (status, err) = v1_error(env.app.profile("aged", &access).await).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("token_expired"))
    );
}

#[tokio::test]
async fn the_bootstrap_admin_is_left_alone_when_it_exists() {
    let mut env = env().await;
    let (other_id, _) = env.app.user("second-admin@example.com").await;
    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{other_id}"),
            &env.admin,
            &json!({"is_admin": true}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let second = env
        .app
        .login_token("second-admin@example.com", "user-password-1")
        .await;
    let me: Value = env
        .app
        .get("/api/users/me", &env.admin)
        .await
        .json()
        .await
        .unwrap();
    let admin_id = me["id"].as_str().unwrap().to_string();
    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{admin_id}"),
            &second,
            &json!({"password": "changed-by-the-operator", "is_active": false}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    env.app.restart().await;
    // Still disabled, and the environment's password was not put back.
    assert_eq!(
        env.app
            .login(common::ADMIN_EMAIL, common::ADMIN_PASSWORD)
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );
    let users: Vec<Value> = env
        .app
        .get("/api/admin/users", &second)
        .await
        .json()
        .await
        .unwrap();
    let admin = users.iter().find(|u| u["id"] == admin_id.as_str()).unwrap();
    assert_eq!(admin["is_active"], false);
}

#[tokio::test]
async fn an_api_key_whose_model_list_cannot_be_read_allows_no_model() {
    let env = env().await;
    env.model("fc-chat", "chat", "openai", "up-fc").await;
    let key = env
        .app
        .api_key(
            &env.admin,
            json!({"name": "limited", "models": ["fc-chat"]}),
        )
        .await;
    sqlx::query("UPDATE api_keys SET models = 'not a list' WHERE name = 'limited'")
        .execute(&env.app.app().store.pool)
        .await
        .unwrap();
    let r = env
        .post_with(
            "/v1/chat/completions",
            &key,
            &json!({"model": "fc-chat", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    let (status, err) = v1_error(r).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("model_not_allowed"))
    );
    assert!(env.stub.requests_for_model("up-fc").is_empty());
}

#[tokio::test]
async fn login_fields_are_bounded_before_any_hashing() {
    let env = env().await;
    let name_at = format!("{}@example.com", "a".repeat(320 - 12));
    assert_eq!(name_at.chars().count(), 320);
    assert_eq!(
        api_code(env.app.login(&name_at, "whatever-1").await).await,
        (StatusCode::BAD_REQUEST, "login_bad_credentials".to_string())
    );
    let name_over = format!("a{name_at}");
    assert_eq!(
        api_code(env.app.login(&name_over, "whatever-1").await).await,
        (StatusCode::BAD_REQUEST, "validation_error".to_string())
    );
    assert_eq!(
        api_code(env.app.login("nobody@example.com", &"p".repeat(1024)).await).await,
        (StatusCode::BAD_REQUEST, "login_bad_credentials".to_string())
    );
    assert_eq!(
        api_code(env.app.login("nobody@example.com", &"p".repeat(1025)).await).await,
        (StatusCode::BAD_REQUEST, "validation_error".to_string())
    );
}

#[tokio::test]
async fn pii_is_scanned_in_every_text_field_that_goes_upstream() {
    let env = agent_scene(
        "scan",
        "up-scan",
        json!({"pii": {"mode": "redact"}, "default_tool_mode": "auto"}),
        "scan@example.com",
    )
    .await;
    let token = env.access.clone();
    let mail = "carol.secret@example.org";
    let body = json!({
        "messages": [
            {"role": "user", "name": mail, "content": "hello"},
            {"role": "assistant", "refusal": mail, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": format!("{{\"who\":\"{mail}\"}}")}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}
        ],
        "user": mail,
        "prediction": {"type": "content", "content": mail},
        "tools": [{"type": "function", "function": {"name": "lookup", "description": format!("Looks up {mail}"), "parameters": {"type": "object", "properties": {"who": {"type": "string", "description": mail}}}}}]
    });
    let r = chat(&env, "scan", &token, &body, &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    let sent = env.stub.requests_for_model("up-scan");
    let raw = &sent[0].raw_body;
    assert!(!raw.contains(mail), "{raw}");
    let b = &sent[0].body;
    assert_eq!(b["user"], "[EMAIL]");
    assert_eq!(b["messages"][0]["name"], "[EMAIL]");
    assert_eq!(b["tools"][0]["function"]["description"], "Looks up [EMAIL]");
    assert_eq!(b["tools"][0]["function"]["name"], "lookup");
}
