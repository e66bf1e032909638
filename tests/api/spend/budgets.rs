//! Budgets in money through the real server (contract, "Budgets"): the
//! `budget_per_day` and `budget_per_month` fields, the reservation at
//! admission and the settlement at the end, the 429 and its headers, the
//! remaining/reset headers, the unpriced policy, spend across a restart and
//! 40 concurrent requests against a budget for 10.

use crate::common;

use std::time::Duration;

use chrono::{Datelike, TimeZone, Utc};
use common::models::*;
use gatehouse_stub_upstream::Script;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

/// One request's cost and reservation: "hi" is 1 prompt token (2 chars),
/// `max_tokens` 5, and the stub reports (1, 5); at 1000 per 1M tokens in
/// and out, 6 tokens cost 0.006.
const COST: &str = "0.006000000";
const COST_NANOS: i64 = 6_000_000;

async fn priced_env() -> Env {
    priced_env_with(|_| {}).await
}

async fn priced_env_with(f: impl FnOnce(&mut gatehouse::config::Settings)) -> Env {
    let env = env_with(f).await;
    env.model("chat", "chat", "openai", "up-chat").await;
    env.stub.script(
        "up-chat",
        Script {
            usage: Some((1, 5)),
            ..Script::content("hello there")
        },
    );
    let r = env
        .app
        .put(
            "/api/admin/prices/openai/up-chat",
            &env.admin,
            &json!({"input": "1000", "output": "1000"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    env
}

fn body() -> Value {
    json!({"model": "chat", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
}

/// A key named `ci` with these limits: (id, secret).
async fn key_with(env: &Env, limits: Value) -> (String, String) {
    let r = env
        .app
        .post(
            "/api/api-keys",
            &env.admin,
            &json!({"name": "ci", "limits": limits}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().await.expect("json");
    (
        v["id"].as_str().expect("id").to_string(),
        v["key"].as_str().expect("key").to_string(),
    )
}

async fn chat(env: &Env, key: &str, body: &Value) -> Response {
    env.post_with("/v1/chat/completions", key, body).await
}

fn header(r: &Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn key_used(env: &Env, id: &str) -> Value {
    let r = env
        .app
        .get(&format!("/api/api-keys/{id}/limits"), &env.admin)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.expect("json");
    v["used"].clone()
}

/// Seconds until the next 00:00 UTC, and until the 1st of next month.
fn until_day_end() -> i64 {
    let now = Utc::now();
    let next = (now.date_naive() + chrono::Days::new(1))
        .and_hms_opt(0, 0, 0)
        .expect("midnight");
    (next.and_utc() - now).num_seconds()
}

fn until_month_end() -> i64 {
    let now = Utc::now();
    let (y, m) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    let next = Utc
        .with_ymd_and_hms(y, m, 1, 0, 0, 0)
        .single()
        .expect("1st");
    (next - now).num_seconds()
}

#[tokio::test]
async fn budgets_are_amounts_from_one_nano_to_a_billion_and_one_past_each_bound_is_refused() {
    let env = priced_env().await;
    for field in ["budget_per_day", "budget_per_month"] {
        for (sent, shown) in [
            ("0.000000001", "0.000000001"),
            ("1000000000", "1000000000.000000000"),
        ] {
            let r = env
                .app
                .post(
                    "/api/api-keys",
                    &env.admin,
                    &json!({"name": "b", "limits": {field: sent}}),
                )
                .await;
            assert_eq!(r.status(), StatusCode::CREATED, "{field} {sent}");
            let v: Value = r.json().await.expect("json");
            assert_eq!(v["limits"][field], shown);
        }
        for bad in [
            json!("0"),
            json!("-1"),
            json!(5),
            json!("1.0000000001"),
            json!("1000000000.000000001"),
        ] {
            let r = env
                .app
                .post(
                    "/api/api-keys",
                    &env.admin,
                    &json!({"name": "b", "limits": {field: bad}}),
                )
                .await;
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{field} {bad}");
            let v: Value = r.json().await.expect("json");
            assert_eq!(v["detail"]["code"], "validation_error", "{v}");
            let message = v["detail"]["message"].as_str().expect("message");
            assert!(message.contains(&format!("limits.{field}")), "{message}");
        }
    }
    // Users and agents take them too; the views show amounts or null.
    let (user_id, _login) = env.app.user("ann@example.com").await;
    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{user_id}"),
            &env.admin,
            &json!({"limits": {"budget_per_month": "12.5"}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{user_id}"),
            &env.admin,
            &json!({"limits": {"budget_per_month": 12.5}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = env
        .app
        .get(&format!("/api/admin/users/{user_id}/limits"), &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["limits"]["budget_per_month"], "12.500000000");
    assert_eq!(v["limits"]["budget_per_day"], Value::Null);
    for field in ["spend_today", "spend_this_month", "reserved"] {
        assert_eq!(v["used"][field], "0.000000000", "{field}");
    }
}

#[tokio::test]
async fn a_used_up_budget_refuses_with_429_budget_exhausted_retry_after_and_no_retry() {
    let env = priced_env().await;
    // Exactly two requests' worth.
    let (id, key) = key_with(&env, json!({"budget_per_day": "0.012"})).await;
    for i in 0..2 {
        let r = chat(&env, &key, &body()).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        // A plain answer is settled before its headers: its own cost counts.
        let left = 12_000_000 - (i + 1) * COST_NANOS;
        assert_eq!(
            header(&r, "x-gatehouse-budget-remaining").as_deref(),
            Some(format!("0.{left:09}").as_str())
        );
        let reset = i64::try_from(common::reset_secs(
            &header(&r, "x-gatehouse-budget-reset").expect("reset"),
        ))
        .expect("seconds");
        assert!((reset - until_day_end()).abs() <= 2, "{reset}");
        assert_eq!(header(&r, "x-gatehouse-cost").as_deref(), Some(COST));
    }
    let r = chat(&env, &key, &body()).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "x-should-retry").as_deref(), Some("false"));
    let retry: i64 = header(&r, "retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(
        retry >= 1 && (retry - until_day_end()).abs() <= 2,
        "{retry}"
    );
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some("0.000000000")
    );
    assert!(header(&r, "x-gatehouse-budget-reset").is_some());
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["error"]["code"], "budget_exhausted");
    assert_eq!(v["error"]["param"], Value::Null);
    assert_eq!(
        v["error"]["message"],
        "Budget budget_per_day of API key 'ci' (0.012000000 USD) is used up; it renews at 00:00 UTC."
    );
    // The refused request reserved and cost nothing.
    let used = key_used(&env, &id).await;
    assert_eq!(used["spend_today"], "0.012000000");
    assert_eq!(used["spend_this_month"], "0.012000000");
    assert_eq!(used["reserved"], "0.000000000");
    // Raised later: applies at once against what was spent.
    let r = env
        .app
        .patch(
            &format!("/api/api-keys/{id}"),
            &env.admin,
            &json!({"limits": {"budget_per_day": "0.018"}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = chat(&env, &key, &body()).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some("0.000000000")
    );
}

#[tokio::test]
async fn a_users_month_budget_refuses_until_the_first_of_next_month() {
    let env = priced_env().await;
    let (user_id, login) = env.app.user("ann@example.com").await;
    let r = env
        .app
        .patch(
            &format!("/api/admin/users/{user_id}"),
            &env.admin,
            &json!({"limits": {"budget_per_month": "0.006"}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    // The key has no budget of its own: the user's applies.
    let key = env.app.api_key(&login, json!({"name": "ann's"})).await;
    let r = chat(&env, &key, &body()).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = chat(&env, &key, &body()).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = header(&r, "retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((retry - until_month_end()).abs() <= 2, "{retry}");
    assert_eq!(header(&r, "x-should-retry").as_deref(), Some("false"));
    let v: Value = r.json().await.expect("json");
    assert_eq!(
        v["error"]["message"],
        format!(
            "Budget budget_per_month of user '{}' (0.006000000 USD) is used up; it renews on the 1st of next month at 00:00 UTC.",
            "ann@example.com"
        )
    );
}

#[tokio::test]
async fn a_stream_counts_its_reservation_in_the_headers_and_settles_when_it_ends() {
    let env = priced_env().await;
    env.stub.script(
        "up-chat",
        Script {
            usage: Some((1, 5)),
            chunk_interval_ms: 20,
            ..Script::content("hello there")
        },
    );
    let (id, key) = key_with(&env, json!({"budget_per_day": "1"})).await;
    let mut b = body();
    b["stream"] = json!(true);
    // A reservation of 1 prompt token and 100 completion tokens: 0.101.
    b["max_tokens"] = json!(100);
    let r = chat(&env, &key, &b).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some("0.899000000")
    );
    assert!(header(&r, "x-gatehouse-budget-reset").is_some());
    let text = r.text().await.expect("stream");
    assert!(text.contains("[DONE]"));
    // Settled at the end: the reservation released, the cost (6 tokens) added.
    let used = poll(5, || async {
        let u = key_used(&env, &id).await;
        (u["reserved"] == "0.000000000").then_some(u)
    })
    .await;
    assert_eq!(used["spend_today"], COST);
}

#[tokio::test]
async fn a_stream_the_client_leaves_releases_its_reservation_and_keeps_its_cost() {
    let env = priced_env().await;
    env.stub.script(
        "up-slow",
        Script {
            usage: Some((1, 5)),
            chunk_size: 1,
            chunk_interval_ms: 200,
            ..Script::content("a long answer that takes its time")
        },
    );
    env.model("slow", "chat", "openai", "up-slow").await;
    let r = env
        .app
        .put(
            "/api/admin/prices/openai/up-slow",
            &env.admin,
            &json!({"input": "1000", "output": "1000"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (id, key) = key_with(&env, json!({"budget_per_day": "1"})).await;
    let mut b = body();
    b["model"] = json!("slow");
    b["stream"] = json!(true);
    let mut r = chat(&env, &key, &b).await;
    assert_eq!(r.status(), StatusCode::OK);
    let first = r.chunk().await.expect("read").expect("a first chunk");
    assert!(!first.is_empty());
    // Open while it runs.
    let used = key_used(&env, &id).await;
    assert_eq!(used["reserved"], COST, "{used}");
    drop(r);
    // Gone: settled on what was relayed, the reservation released.
    let used = poll(10, || async {
        let u = key_used(&env, &id).await;
        (u["reserved"] == "0.000000000").then_some(u)
    })
    .await;
    let spent = used["spend_today"].as_str().expect("amount").to_string();
    // The record's cost is the spend (priced on what was relayed).
    let records: Vec<Value> = poll(10, || async {
        let rows: Vec<Value> = env
            .app
            .get("/api/admin/usage/records?limit=10", &env.admin)
            .await
            .json()
            .await
            .expect("json");
        let mine: Vec<Value> = rows.into_iter().filter(|r| r["model"] == "slow").collect();
        (!mine.is_empty()).then_some(mine)
    })
    .await;
    assert_eq!(records[0]["status"], 499);
    assert_eq!(records[0]["cost"].as_str(), Some(spent.as_str()));
}

#[tokio::test]
async fn spend_survives_a_restart() {
    let mut env = priced_env().await;
    let (id, key) = key_with(&env, json!({"budget_per_day": "0.006"})).await;
    let r = chat(&env, &key, &body()).await;
    assert_eq!(r.status(), StatusCode::OK);
    env.app.restart().await;
    let used = key_used(&env, &id).await;
    assert_eq!(used["spend_today"], COST);
    assert_eq!(used["spend_this_month"], COST);
    let r = chat(&env, &key, &body()).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn forty_concurrent_requests_against_a_budget_for_ten_admit_exactly_ten() {
    let env = priced_env().await;
    env.stub.script(
        "up-chat",
        Script {
            usage: Some((1, 5)),
            delay_ms: 50,
            ..Script::content("hello there")
        },
    );
    let (id, key) = key_with(&env, json!({"budget_per_day": "0.06"})).await;
    let b = body();
    let answers = futures_util::future::join_all((0..40).map(|_| chat(&env, &key, &b))).await;
    let ok = answers
        .iter()
        .filter(|r| r.status() == StatusCode::OK)
        .count();
    let refused = answers
        .iter()
        .filter(|r| r.status() == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((ok, refused), (10, 30));
    let used = poll(5, || async {
        let u = key_used(&env, &id).await;
        (u["reserved"] == "0.000000000").then_some(u)
    })
    .await;
    assert_eq!(used["spend_today"], "0.060000000");
}

#[tokio::test]
async fn an_unpriced_model_under_a_budget_is_admitted_at_no_cost_by_default() {
    let env = priced_env().await;
    env.model("free", "chat", "openai", "up-free").await;
    let (id, key) = key_with(&env, json!({"budget_per_day": "0.000000001"})).await;
    let mut b = body();
    b["model"] = json!("free");
    for _ in 0..3 {
        let r = chat(&env, &key, &b).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            header(&r, "x-gatehouse-budget-remaining").as_deref(),
            Some("0.000000001")
        );
    }
    let used = key_used(&env, &id).await;
    assert_eq!(used["spend_today"], "0.000000000");
}

#[tokio::test]
async fn the_refuse_policy_refuses_an_unpriced_model_only_under_a_budget() {
    let env = priced_env_with(|s| {
        s.unpriced_policy = gatehouse::spend::budget::UnpricedPolicy::Refuse;
    })
    .await;
    env.model("free", "chat", "openai", "up-free").await;
    let (_, key) = key_with(&env, json!({"budget_per_day": "1"})).await;
    let mut b = body();
    b["model"] = json!("free");
    let r = chat(&env, &key, &b).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "model_unpriced");
    assert_eq!(v["error"]["param"], "model");
    // Priced models pass; without a budget nothing is refused for this.
    assert_eq!(chat(&env, &key, &body()).await.status(), StatusCode::OK);
    assert_eq!(chat(&env, &env.key, &b).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_reservation_takes_the_dearest_reachable_target_and_the_default_completion() {
    let env = priced_env_with(|s| s.reserve_output_tokens = 10).await;
    // A fallback that costs ten times more.
    env.model("dear", "chat", "openai", "up-dear").await;
    let r = env
        .app
        .put(
            "/api/admin/prices/openai/up-dear",
            &env.admin,
            &json!({"input": "10000", "output": "10000"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .app
        .patch(
            "/api/admin/models/chat",
            &env.admin,
            &json!({"fallbacks": ["dear"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text().await);
    env.stub.script(
        "up-chat",
        Script {
            usage: Some((1, 5)),
            chunk_interval_ms: 300,
            ..Script::content("slow answer")
        },
    );
    let (_, key) = key_with(&env, json!({"budget_per_day": "1"})).await;
    let mut b =
        json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    // 1 prompt token and the default 10 completion tokens at 10000 per 1M: 0.11.
    let r = chat(&env, &key, &b).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some("0.890000000")
    );
    drop(r);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // max_completion_tokens wins over max_tokens.
    b["max_tokens"] = json!(1000);
    b["max_completion_tokens"] = json!(2);
    let r = chat(&env, &key, &b).await;
    assert_eq!(r.status(), StatusCode::OK);
    let left = header(&r, "x-gatehouse-budget-remaining").expect("remaining");
    // What the first (cut) stream cost is settled; this one holds 0.03.
    let left: f64 = left.parse().expect("amount");
    assert!(left <= 0.97 && left > 0.9, "{left}");
}

#[tokio::test]
async fn agent_chat_fits_the_agents_budget_shared_by_its_users() {
    use common::agent_chat::{agent, chat as agent_chat, sign_in};
    let env = priced_env().await;
    agent(
        &env,
        "helper",
        "up-chat",
        json!({"limits": {"budget_per_day": "0.012"}}),
    )
    .await;
    let t1 = sign_in(&env, "u1@example.com", "helper").await;
    let t2 = sign_in(&env, "u2@example.com", "helper").await;
    let b = json!({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let r = agent_chat(&env, "helper", &t1, &b, &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some(COST)
    );
    let r = agent_chat(&env, "helper", &t2, &b, &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    // Used up by its two users together.
    let r = agent_chat(&env, "helper", &t1, &b, &[]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "x-should-retry").as_deref(), Some("false"));
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "budget_exhausted");
    assert_eq!(
        v["error"]["message"],
        "Budget budget_per_day of agent 'helper' (0.012000000 USD) is used up; it renews at 00:00 UTC."
    );
    let v: Value = env
        .app
        .get("/api/admin/agents/helper/limits", &env.admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["used"]["spend_today"], "0.012000000");
    assert_eq!(v["used"]["reserved"], "0.000000000");
    // Counted per period in the metrics.
    let metrics = env
        .app
        .client
        .get(env.app.u("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("gatehouse_budget_refusals_total{period=\"day\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("gatehouse_budget_refusals_total{period=\"month\"} 0"));
}

#[tokio::test]
async fn messages_and_responses_requests_count_against_the_same_budget() {
    let env = priced_env().await;
    let (id, key) = key_with(&env, json!({"budget_per_day": "0.012"})).await;
    // A Messages request: "hi" and max_tokens 5 reserve what chat does.
    let r = env
        .post_with(
            "/v1/messages",
            &key,
            &json!({"model": "chat", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some(COST)
    );
    let r = env
        .post_with(
            "/v1/responses",
            &key,
            &json!({"model": "chat", "max_output_tokens": 5, "input": "hi"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .post_with(
            "/v1/messages",
            &key,
            &json!({"model": "chat", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "x-should-retry").as_deref(), Some("false"));
    assert!(header(&r, "retry-after").is_some());
    let text = r.text().await.expect("body");
    assert!(
        text.contains("budget_exhausted") || text.contains("is used up"),
        "{text}"
    );
    let used = key_used(&env, &id).await;
    assert_eq!(used["spend_today"], "0.012000000");
}

#[tokio::test]
async fn a_codex_shaped_responses_stream_reserves_its_texts_estimate_and_its_maximum() {
    let env = priced_env().await;
    let (_, key) = key_with(&env, json!({"budget_per_day": "1"})).await;
    // Text of instructions and input, as a tree counts it: 14 + 4 + 8, and
    // the reasoning item's 8 (its type is a name, not text): 34 characters,
    // 9 tokens; with 100 out, a reservation of 0.109.
    let body = json!({
        "model": "chat",
        "instructions": "You are terse.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "abcd"}]},
            {"type": "reasoning", "summary": [], "encrypted_content": "xxxxxxxx"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi there"}]}
        ],
        "max_output_tokens": 100,
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"]
    });
    let r = env.post_with("/v1/responses", &key, &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some("0.891000000")
    );
    assert!(r
        .text()
        .await
        .expect("stream")
        .contains("response.completed"));
}
