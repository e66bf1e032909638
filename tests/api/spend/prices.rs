//! `/api/admin/prices`: versions, validation at each limit, errors, and
//! `[[prices]]` in the config file.

use crate::common;

use common::models::*;
use common::{api_code, spawn_app_with};
use reqwest::StatusCode;
use serde_json::{json, Value};

const PAIR: &str = "/api/admin/prices/openai/meta-llama/Llama-3.3-70B";

async fn put(env: &Env, path: &str, body: Value) -> reqwest::Response {
    env.app.put(path, &env.admin, &body).await
}

async fn json_of<T: serde::de::DeserializeOwned>(r: reqwest::Response) -> T {
    r.json().await.expect("json")
}

async fn history(app: &common::TestApp, admin: &str) -> Vec<Value> {
    json_of(app.get("/api/admin/prices?history=true", admin).await).await
}

#[tokio::test]
async fn a_price_is_versioned_per_pair_and_an_equal_body_makes_no_new_version() {
    let env = env().await;
    let r = put(
        &env,
        PAIR,
        json!({"input": "1.00", "output": "2", "cache_read": "0.1"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v1: Value = json_of(r).await;
    assert_eq!(v1["provider"], "openai");
    assert_eq!(v1["upstream_model"], "meta-llama/Llama-3.3-70B");
    assert_eq!(v1["currency"], "USD");
    assert_eq!(v1["input"], "1.000000000");
    assert_eq!(v1["output"], "2.000000000");
    assert_eq!(v1["cache_read"], "0.100000000");
    // Unset rates stay null: not filled in from the fallback rule.
    assert_eq!(v1["cache_write"], Value::Null);
    assert_eq!(v1["reasoning"], Value::Null);
    assert_eq!(v1["request"], Value::Null);
    assert_eq!(v1["tiers"], json!([]));
    assert_eq!(v1["effective_to"], Value::Null);

    // The same price written differently: the same version back.
    let again: Value = json_of(
        put(
            &env,
            PAIR,
            json!({"input": "1", "output": "2.000000000", "cache_read": "0.10"}),
        )
        .await,
    )
    .await;
    assert_eq!(again, v1);
    let got: Value = json_of(env.app.get(PAIR, &env.admin).await).await;
    assert_eq!(got, v1);

    let v2: Value = json_of(
        put(
            &env,
            PAIR,
            json!({"input": "1", "output": "3",
        "tiers": [{"above_prompt_tokens": 1000, "input": "2", "output": "6"}]}),
        )
        .await,
    )
    .await;
    assert_ne!(v2["version"], v1["version"]);
    assert_eq!(v2["tiers"][0]["above_prompt_tokens"], 1000);
    assert_eq!(v2["tiers"][0]["output"], "6.000000000");
    assert_eq!(v2["tiers"][0]["cache_read"], Value::Null);

    put(
        &env,
        "/api/admin/prices/tei/bge",
        json!({"input": "0.01", "output": "0"}),
    )
    .await;
    let current: Vec<Value> = json_of(env.app.get("/api/admin/prices", &env.admin).await).await;
    let pairs: Vec<(&str, &str)> = current
        .iter()
        .map(|p| {
            (
                p["provider"].as_str().unwrap(),
                p["upstream_model"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [("openai", "meta-llama/Llama-3.3-70B"), ("tei", "bge")]
    );
    assert_eq!(current[0]["version"], v2["version"]);

    let history: Vec<Value> = json_of(
        env.app
            .get("/api/admin/prices?history=true&provider=openai", &env.admin)
            .await,
    )
    .await;
    assert_eq!(history.len(), 2);
    assert_eq!(history[0]["version"], v1["version"]);
    // The old version ends when the new one starts.
    assert_eq!(history[0]["effective_to"], v2["effective_from"]);
    assert_eq!(history[1]["effective_to"], Value::Null);

    let r = env.app.delete(PAIR, &env.admin).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        api_code(env.app.get(PAIR, &env.admin).await).await,
        (StatusCode::NOT_FOUND, "price_not_found".into())
    );
    assert_eq!(
        api_code(env.app.delete(PAIR, &env.admin).await).await,
        (StatusCode::NOT_FOUND, "price_not_found".into())
    );
    let history: Vec<Value> = json_of(
        env.app
            .get("/api/admin/prices?history=true&provider=openai", &env.admin)
            .await,
    )
    .await;
    assert!(history.iter().all(|p| !p["effective_to"].is_null()));
}

/// 400 naming `field` in the message, and the pair's price unchanged.
async fn refused(env: &Env, body: Value, field: &str) {
    let before: Value = json_of(env.app.get(PAIR, &env.admin).await).await;
    let r = put(env, PAIR, body.clone()).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
    let v: Value = json_of(r).await;
    assert_eq!(v["detail"]["code"], "validation_error");
    let message = v["detail"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("'{field}'")),
        "{field}: {message}"
    );
    let after: Value = json_of(env.app.get(PAIR, &env.admin).await).await;
    assert_eq!(after, before);
}

fn tiers(n: usize) -> Value {
    let list: Vec<Value> = (1..=n)
        .map(|i| json!({"above_prompt_tokens": 1000 * i, "input": "1", "output": "1"}))
        .collect();
    json!({"input": "1", "output": "1", "tiers": list})
}

#[tokio::test]
async fn each_bound_is_accepted_at_the_limit_and_refused_one_past_it() {
    let env = env().await;
    assert_eq!(
        put(&env, PAIR, json!({"input": "1", "output": "1"}))
            .await
            .status(),
        StatusCode::OK
    );
    for field in [
        "input",
        "output",
        "cache_read",
        "cache_write",
        "reasoning",
        "request",
    ] {
        let mut body = json!({"input": "1", "output": "1"});
        body[field] = json!("1000000");
        assert_eq!(
            put(&env, PAIR, body.clone()).await.status(),
            StatusCode::OK,
            "{field}"
        );
        body[field] = json!("1000000.000000001");
        refused(&env, body.clone(), field).await;
        body[field] = json!(5);
        refused(&env, body.clone(), field).await;
        body[field] = json!("0.0000000001");
        refused(&env, body, field).await;
    }
    refused(&env, json!({"output": "1"}), "input").await;
    refused(&env, json!({"input": "-1", "output": "1"}), "input").await;
    assert_eq!(put(&env, PAIR, tiers(8)).await.status(), StatusCode::OK);
    refused(&env, tiers(9), "tiers").await;
    let mut body = tiers(3);
    body["tiers"][1]["above_prompt_tokens"] = json!(1000);
    refused(&env, body.clone(), "tiers[1].above_prompt_tokens").await;
    body["tiers"][1]["above_prompt_tokens"] = json!(1001);
    assert_eq!(put(&env, PAIR, body.clone()).await.status(), StatusCode::OK);
    body["tiers"][0]["above_prompt_tokens"] = json!(0);
    refused(&env, body.clone(), "tiers[0].above_prompt_tokens").await;
    body["tiers"][0]["above_prompt_tokens"] = json!(1);
    body["tiers"][2].as_object_mut().unwrap().remove("input");
    refused(&env, body, "tiers[2].input").await;
}

#[tokio::test]
async fn an_unknown_provider_is_404_and_a_non_admin_403() {
    let env = env().await;
    assert_eq!(
        api_code(
            put(
                &env,
                "/api/admin/prices/nobody/m",
                json!({"input": "1", "output": "1"})
            )
            .await
        )
        .await,
        (StatusCode::NOT_FOUND, "provider_not_found".into())
    );
    let (_, token) = env.app.user("dev@example.com").await;
    for r in [
        env.app
            .put(PAIR, &token, &json!({"input": "1", "output": "1"}))
            .await,
        env.app.get(PAIR, &token).await,
        env.app.get("/api/admin/prices", &token).await,
        env.app.delete(PAIR, &token).await,
    ] {
        assert_eq!(
            api_code(r).await,
            (StatusCode::FORBIDDEN, "forbidden".into())
        );
    }
}

#[tokio::test]
async fn prices_route_is_in_the_openapi_document() {
    let env = env().await;
    let doc = env.app.openapi().await;
    assert!(doc["paths"]["/api/admin/prices"]["get"].is_object());
    let pair = &doc["paths"]["/api/admin/prices/{provider}/{upstream_model}"];
    for m in ["get", "put", "delete"] {
        assert!(pair[m].is_object(), "{m}");
    }
    assert!(doc["paths"]["/api/admin/usage/records"]["get"].is_object());
}

const CONFIG: &str = r#"
[[providers]]
name = "vllm-1"
type = "openai"
base_url = "http://127.0.0.1:9/v1"

[[prices]]
provider = "vllm-1"
upstream_model = "meta-llama/Llama-3.3-70B"
input = "0.20"
output = "0.60"
tiers = [{ above_prompt_tokens = 100000, input = "0.40", output = "1.20" }]
"#;

#[tokio::test]
async fn prices_in_the_config_file_apply_at_start_and_an_unchanged_file_makes_no_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, CONFIG).expect("write");
    let p = path.clone();
    let mut app = spawn_app_with(move |s| s.config_file = Some(p)).await;
    let admin = app.admin_token().await;
    let first = history(&app, &admin).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["input"], "0.200000000");
    assert_eq!(first[0]["tiers"][0]["output"], "1.200000000");
    app.restart().await;
    let admin = app.admin_token().await;
    assert_eq!(history(&app, &admin).await, first);

    // A changed file: a new version on the next start.
    std::fs::write(&path, CONFIG.replace("0.60", "0.70")).expect("write");
    app.restart().await;
    let admin = app.admin_token().await;
    let after = history(&app, &admin).await;
    assert_eq!(after.len(), 2);
    assert_eq!(after[1]["output"], "0.700000000");

    // A bad entry stops the start, naming the pair and the field.
    std::fs::write(&path, CONFIG.replace("output = \"0.60\"", "output = 0.6")).expect("write");
    let (db, _db_dir) = common::fresh_database().await;
    let mut settings = gatehouse::config::Settings::for_database(&db);
    settings.config_file = Some(path);
    let err = match gatehouse::start(settings).await {
        Ok(_) => panic!("the start must fail"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("price vllm-1/meta-llama/Llama-3.3-70B") && err.contains("'output'"),
        "{err}"
    );
}
