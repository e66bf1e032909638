//! Hostile input (contract section "Hardening"): tool lists on agent chat,
//! legacy function fields, metrics labels and the metrics token.

mod common;

use std::time::{Duration, Instant};

use common::agent_chat::{agent, chat, sign_in};
use common::models::{env, env_with, v1_error, Env};
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

async fn held_agent(env: &Env, address: &str, upstream: &str) -> String {
    agent(
        env,
        address,
        upstream,
        json!({"tool_contract": ["known"], "default_tool_mode": "auto"}),
    )
    .await;
    sign_in(env, &format!("u@{address}.test"), address).await
}

/// The tools the admin list shows as held.
async fn admin_tools(env: &Env, address: &str) -> Vec<Value> {
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
    let env = env().await;
    let token = held_agent(&env, "cap", "up-cap").await;

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
    let env = env().await;
    let token = held_agent(&env, "flood", "up-flood").await;
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
    let env = env().await;
    let token = held_agent(&env, "names", "up-names").await;
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
    let env = env().await;
    let token = held_agent(&env, "legacy", "up-legacy").await;
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
