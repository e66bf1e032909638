//! Limits and budgets (requests and tokens per minute, tokens per day,
//! requests in parallel) of keys, users and agents, end to end against the
//! stub upstream, with their refusals and rate headers. SQLite by default;
//! PostgreSQL when GATEHOUSE_TEST_DATABASE_URL is a postgres:// URL. Several
//! server processes on one database: `tests/processes/limits.rs`.

mod store;

use crate::common;

use std::time::Duration;

use common::agent_chat::{agent, chat, sign_in};
use common::models::*;
use common::*;
use gatehouse_stub_upstream::Script;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

const MODEL: &str = "gpt";

async fn chat_env() -> Env {
    let env = env().await;
    env.model(MODEL, "chat", "openai", "up-gpt").await;
    // 10 prompt + 5 completion tokens per answer.
    env.stub.script(
        "up-gpt",
        Script {
            usage: Some((10, 5)),
            ..Script::content("hello there")
        },
    );
    env
}

fn chat_body() -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
}

/// A new key of the admin with these limits; returns (id, secret).
async fn key_with(env: &Env, limits: Value) -> (String, String) {
    let r = env
        .app
        .post(
            "/api/api-keys",
            &env.admin,
            &json!({"name": "limited", "limits": limits}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["limits"], normalised(&limits));
    (
        v["id"].as_str().expect("id").to_string(),
        v["key"].as_str().expect("key").to_string(),
    )
}

fn normalised(limits: &Value) -> Value {
    let mut out = json!({"requests_per_minute": null, "tokens_per_minute": null, "tokens_per_day": null, "max_parallel": null, "budget_per_day": null, "budget_per_month": null});
    for (k, v) in limits.as_object().expect("object") {
        out[k] = v.clone();
    }
    out
}

async fn chat_with(env: &Env, key: &str) -> Response {
    env.post_with("/v1/chat/completions", key, &chat_body())
        .await
}

fn header(r: &Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A 429 in the OpenAI shape with `code`; returns Retry-After.
async fn assert_refused(r: Response, code: &str) -> u64 {
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&r, "retry-after")
        .expect("Retry-After")
        .parse()
        .expect("whole seconds");
    assert!(retry >= 1);
    // A used-up budget says no retry will cure it (the OpenAI SDKs retry
    // every 429 otherwise); a rate limit does not.
    let should_retry = header(&r, "x-should-retry");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let expected = (code == "budget_exhausted").then(|| "false".to_string());
    assert_eq!(should_retry, expected, "x-should-retry on {code}");
    retry
}

#[tokio::test]
async fn reset_headers_of_per_minute_limits_stay_within_the_minute() {
    let env = chat_env().await;
    let (_, key) = key_with(
        &env,
        json!({"requests_per_minute": 10, "tokens_per_minute": 1000}),
    )
    .await;
    for i in 0..3 {
        let r = chat_with(&env, &key).await;
        assert_eq!(r.status(), StatusCode::OK);
        let requests = header(&r, "x-ratelimit-reset-requests").expect("requests reset");
        let tokens = header(&r, "x-ratelimit-reset-tokens").expect("tokens reset");
        // This request is counted: the window is whole again within the minute.
        assert!(
            (1..=60).contains(&reset_secs(&requests)),
            "request {i}: {requests}"
        );
        // Tokens are counted when a request ends: the first sees none.
        let t = reset_secs(&tokens);
        assert!(t <= 60 && (i == 0 || t >= 1), "request {i}: {tokens}");
    }
}

#[tokio::test]
async fn requests_per_minute_admits_up_to_the_limit_and_refuses_the_next_with_headers() {
    let env = chat_env().await;
    let (_, key) = key_with(&env, json!({"requests_per_minute": 3})).await;
    for remaining in ["2", "1", "0"] {
        let r = chat_with(&env, &key).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            header(&r, "x-ratelimit-limit-requests").as_deref(),
            Some("3")
        );
        assert_eq!(
            header(&r, "x-ratelimit-remaining-requests").as_deref(),
            Some(remaining)
        );
        let reset = header(&r, "x-ratelimit-reset-requests").expect("reset");
        assert!(reset.ends_with('s'), "{reset}");
    }
    let r = chat_with(&env, &key).await;
    assert_eq!(
        header(&r, "x-ratelimit-remaining-requests").as_deref(),
        Some("0")
    );
    let retry = assert_refused(r, "rate_limited").await;
    assert!((59..=61).contains(&retry), "Retry-After {retry}");
    // A key without limits is not touched, and gets no rate headers.
    let r = env.post("/v1/chat/completions", &chat_body()).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(header(&r, "x-ratelimit-limit-requests").is_none());
}

#[tokio::test]
async fn tokens_per_minute_counts_a_requests_tokens_when_it_ends() {
    let env = chat_env().await;
    // 15 tokens an answer: 0, 15 and 30 are below 31; 45 is not.
    let (_, key) = key_with(&env, json!({"tokens_per_minute": 31})).await;
    for remaining in ["31", "16", "1"] {
        let r = chat_with(&env, &key).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            header(&r, "x-ratelimit-limit-tokens").as_deref(),
            Some("31")
        );
        assert_eq!(
            header(&r, "x-ratelimit-remaining-tokens").as_deref(),
            Some(remaining)
        );
    }
    let r = chat_with(&env, &key).await;
    assert_eq!(
        header(&r, "x-ratelimit-remaining-tokens").as_deref(),
        Some("0")
    );
    assert_refused(r, "rate_limited").await;
}

#[tokio::test]
async fn tokens_per_day_refuses_with_budget_exhausted_once_used_up() {
    let env = chat_env().await;
    let (id, key) = key_with(&env, json!({"tokens_per_day": 30})).await;
    for _ in 0..2 {
        assert_eq!(chat_with(&env, &key).await.status(), StatusCode::OK);
    }
    let retry = assert_refused(chat_with(&env, &key).await, "budget_exhausted").await;
    assert!(retry <= 86_400, "until midnight UTC: {retry}");
    let v: Value = env
        .app
        .get(&format!("/api/api-keys/{id}/limits"), &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["used"]["tokens_today"], 30);
    assert_eq!(v["limits"]["tokens_per_day"], 30);
}

#[tokio::test]
async fn max_parallel_refuses_a_request_while_slow_ones_run_and_admits_after() {
    let env = chat_env().await;
    env.stub.script(
        "up-gpt",
        Script {
            delay_ms: 1500,
            ..Script::content("slow")
        },
    );
    let (id, key) = key_with(&env, json!({"max_parallel": 2})).await;
    let slow = || {
        let c = env.app.client.clone();
        let url = env.app.u("/v1/chat/completions");
        let key = key.clone();
        tokio::spawn(async move {
            c.post(url)
                .bearer_auth(key)
                .json(&chat_body())
                .send()
                .await
                .expect("send")
                .status()
        })
    };
    let (a, b) = (slow(), slow());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v: Value = env
        .app
        .get(&format!("/api/api-keys/{id}/limits"), &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["used"]["in_flight"], 2);
    let retry = assert_refused(chat_with(&env, &key).await, "rate_limited").await;
    assert_eq!(retry, 1);
    assert_eq!(a.await.expect("task"), StatusCode::OK);
    assert_eq!(b.await.expect("task"), StatusCode::OK);
    assert_eq!(chat_with(&env, &key).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_key_and_its_user_must_both_fit() {
    let env = chat_env().await;
    let (user_id, login) = env.app.user("ann@example.com").await;
    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{user_id}"),
            &env.admin,
            &json!({"limits": {"requests_per_minute": 2}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["limits"]["requests_per_minute"], 2);
    let k1 = env
        .app
        .api_key(
            &login,
            json!({"name": "a", "limits": {"requests_per_minute": 10}}),
        )
        .await;
    let k2 = env.app.api_key(&login, json!({"name": "b"})).await;
    assert_eq!(chat_with(&env, &k1).await.status(), StatusCode::OK);
    let r = chat_with(&env, &k2).await;
    assert_eq!(r.status(), StatusCode::OK);
    // The user's limit is the tighter: it shows.
    assert_eq!(
        header(&r, "x-ratelimit-limit-requests").as_deref(),
        Some("2")
    );
    // The user's two requests are used up, whichever key made them.
    for k in [&k1, &k2] {
        let r = chat_with(&env, k).await;
        let body_ok = r.status() == StatusCode::TOO_MANY_REQUESTS;
        let msg: Value = r.json().await.expect("json");
        assert!(body_ok, "{msg}");
        assert!(
            msg["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("user"),
            "{msg}"
        );
    }
    let v: Value = env
        .app
        .get(&format!("/api/admin/users/{user_id}/limits"), &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["used"]["requests_this_minute"], 2, "{v}");
    // Removing the user's limit lets the key's own limit rule again.
    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{user_id}"),
            &env.admin,
            &json!({"limits": null}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(chat_with(&env, &k1).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn agent_chat_fits_the_agents_and_the_users_limits() {
    let env = chat_env().await;
    agent(
        &env,
        "helper",
        "up-gpt",
        json!({"limits": {"requests_per_minute": 2}}),
    )
    .await;
    let t1 = sign_in(&env, "u1@example.com", "helper").await;
    let t2 = sign_in(&env, "u2@example.com", "helper").await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let r = chat(&env, "helper", &t1, &body, &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-ratelimit-limit-requests").as_deref(),
        Some("2")
    );
    assert_eq!(
        chat(&env, "helper", &t2, &body, &[]).await.status(),
        StatusCode::OK
    );
    // The agent's two requests a minute are shared by all its users.
    assert_refused(chat(&env, "helper", &t1, &body, &[]).await, "rate_limited").await;
    let v: Value = env
        .app
        .get("/api/admin/agents/helper", &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["limits"]["requests_per_minute"], 2);
    let r = env
        .app
        .patch(
            "/api/admin/agents/helper",
            &env.admin,
            &json!({"limits": null}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        chat(&env, "helper", &t1, &body, &[]).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn embeddings_are_limited_too() {
    let env = chat_env().await;
    env.model("emb", "embeddings", "tei", "up-emb").await;
    let (_, key) = key_with(&env, json!({"requests_per_minute": 1})).await;
    let r = env
        .post_with(
            "/v1/embeddings",
            &key,
            &json!({"model": "emb", "input": "hello"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-ratelimit-remaining-requests").as_deref(),
        Some("0")
    );
    let r = env
        .post_with(
            "/v1/embeddings",
            &key,
            &json!({"model": "emb", "input": "hello"}),
        )
        .await;
    assert_refused(r, "rate_limited").await;
}

#[tokio::test]
async fn zero_negative_fractional_and_text_limits_are_refused_with_validation_error() {
    let env = chat_env().await;
    let (user_id, _) = env.app.user("bob@example.com").await;
    let (key_id, _) = key_with(&env, json!({})).await;
    for (field, bad) in [
        ("requests_per_minute", json!(0)),
        ("tokens_per_minute", json!(-5)),
        ("tokens_per_day", json!(1.5)),
        ("max_parallel", json!("2")),
    ] {
        let limits = json!({ field: bad });
        let answers = [
            env.app
                .post(
                    "/api/api-keys",
                    &env.admin,
                    &json!({"name": "x", "limits": limits}),
                )
                .await,
            env.app
                .patch(
                    &format!("/api/api-keys/{key_id}"),
                    &env.admin,
                    &json!({"limits": limits}),
                )
                .await,
            env.app
                .patch(
                    &format!("/api/admin/users/{user_id}"),
                    &env.admin,
                    &json!({"limits": limits}),
                )
                .await,
            env.app
                .post(
                    "/api/admin/agents",
                    &env.admin,
                    &json!({"address": "a1", "name": "A", "model": MODEL, "limits": limits}),
                )
                .await,
        ];
        for r in answers {
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{field} = {bad}");
            let v: Value = r.json().await.expect("json");
            assert_eq!(v["detail"]["code"], "validation_error", "{v}");
            assert!(
                v["detail"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains(&format!("limits.{field}")),
                "{v}"
            );
        }
    }
    // Nothing was written by the refused PATCH.
    let v: Value = env
        .app
        .get(&format!("/api/admin/users/{user_id}/limits"), &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["limits"]["requests_per_minute"], Value::Null);
}

#[tokio::test]
async fn a_key_owner_sets_and_reads_its_keys_limits_and_others_get_404() {
    let env = chat_env().await;
    let (id, key) = key_with(&env, json!({})).await;
    let r = env
        .app
        .patch(
            &format!("/api/api-keys/{id}"),
            &env.admin,
            &json!({"limits": {"requests_per_minute": 1, "max_parallel": 3}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(chat_with(&env, &key).await.status(), StatusCode::OK);
    assert_refused(chat_with(&env, &key).await, "rate_limited").await;
    let v: Value = env
        .app
        .get(&format!("/api/api-keys/{id}/limits"), &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(
        v,
        json!({"limits": {"requests_per_minute": 1, "tokens_per_minute": null, "tokens_per_day": null, "max_parallel": 3,
                          "budget_per_day": null, "budget_per_month": null},
               "used": {"requests_this_minute": 1, "tokens_this_minute": 15, "tokens_today": 15, "in_flight": 0,
                        "spend_today": "0.000000000", "spend_this_month": "0.000000000", "reserved": "0.000000000"}})
    );
    let (_, other) = env.app.user("eve@example.com").await;
    for r in [
        env.app
            .get(&format!("/api/api-keys/{id}/limits"), &other)
            .await,
        env.app
            .patch(
                &format!("/api/api-keys/{id}"),
                &other,
                &json!({"limits": null}),
            )
            .await,
    ] {
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["detail"]["code"], "api_key_not_found");
    }
}

#[tokio::test]
async fn a_restart_keeps_the_days_token_budget() {
    let mut env = chat_env().await;
    let (_, key) = key_with(&env, json!({"tokens_per_day": 16})).await;
    assert_eq!(chat_with(&env, &key).await.status(), StatusCode::OK);
    env.app.restart().await;
    // 15 of 16 used before the restart: one more is admitted, then none.
    assert_eq!(chat_with(&env, &key).await.status(), StatusCode::OK);
    assert_refused(chat_with(&env, &key).await, "budget_exhausted").await;
}

const CONFIG: &str = r#"
[[providers]]
name = "local"
type = "openai"
base_url = "http://127.0.0.1:9/v1"

[[models]]
id = "chat-1"
kind = "chat"
provider = "local"
upstream_model = "up"

[[agents]]
address = "helpdesk"
name = "Helpdesk"
model = "chat-1"
"#;

#[tokio::test]
async fn an_agents_limits_can_be_set_in_the_config_file_and_bad_ones_stop_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!("{CONFIG}limits = {{ requests_per_minute = 30, max_parallel = 2, budget_per_month = \"25\" }}\n"),
    )
    .expect("write");
    let p = path.clone();
    let app = spawn_app_with(move |s| s.config_file = Some(p)).await;
    let admin = app.admin_token().await;
    let v: Value = app
        .get("/api/admin/agents/helpdesk", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(
        v["limits"],
        json!({"requests_per_minute": 30, "tokens_per_minute": null, "tokens_per_day": null, "max_parallel": 2,
               "budget_per_day": null, "budget_per_month": "25.000000000"})
    );
    // The agent's limits view shows its spend.
    let v: Value = app
        .get("/api/admin/agents/helpdesk/limits", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["used"]["spend_this_month"], "0.000000000", "{v}");
    assert_eq!(v["limits"]["budget_per_month"], "25.000000000");
    let r = app.get("/api/admin/agents/nobody/limits", &admin).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // A budget as a TOML number stops the start, naming the field.
    std::fs::write(
        &path,
        format!("{CONFIG}limits = {{ budget_per_day = 5 }}\n"),
    )
    .expect("write");
    let (db, _db_dir) = fresh_database().await;
    let mut settings = gatehouse::config::Settings::for_database(&db);
    settings.config_file = Some(path.clone());
    let err = match gatehouse::start(settings).await {
        Ok(_) => panic!("the start must fail"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("limits.budget_per_day"), "{err}");

    std::fs::write(&path, format!("{CONFIG}limits = {{ max_parallel = 0 }}\n")).expect("write");
    let (db, _db_dir) = fresh_database().await;
    let mut settings = gatehouse::config::Settings::for_database(&db);
    settings.config_file = Some(path);
    let err = match gatehouse::start(settings).await {
        Ok(_) => panic!("the start must fail"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("agent helpdesk") && err.contains("limits.max_parallel"),
        "{err}"
    );
}

#[tokio::test]
async fn a_streamed_answer_holds_its_place_until_it_ends_and_then_counts_its_tokens() {
    let env = chat_env().await;
    env.stub.script(
        "up-gpt",
        Script {
            usage: Some((10, 5)),
            chunk_interval_ms: 100,
            ..Script::content("one two three four five six seven eight")
        },
    );
    let (id, key) = key_with(&env, json!({"max_parallel": 1, "tokens_per_minute": 1000})).await;
    let mut body = chat_body();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = env.post_with("/v1/chat/completions", &key, &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-ratelimit-limit-tokens").as_deref(),
        Some("1000")
    );
    // While the stream runs, its place is taken.
    assert_refused(chat_with(&env, &key).await, "rate_limited").await;
    let events = sse_events(r).await;
    assert!(!events.is_empty());
    let used = poll(5, || async {
        let v: Value = env
            .app
            .get(&format!("/api/api-keys/{id}/limits"), &env.admin)
            .await
            .json()
            .await
            .expect("json");
        (v["used"]["in_flight"] == 0).then_some(v["used"].clone())
    })
    .await;
    assert_eq!(used["tokens_this_minute"], 15, "{used}");
    assert_eq!(chat_with(&env, &key).await.status(), StatusCode::OK);
}
