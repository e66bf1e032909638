//! The cost of requests through the server: headers on plain answers, the
//! stream's usage chunk, the usage records (fixed, never recomputed), the
//! totals, metrics and the currency.

use crate::common;

use common::models::*;
use gatehouse_stub_upstream::Script;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A plain chat answer from the stub reporting exactly this `usage`.
fn answer_with(usage: Value) -> Script {
    Script {
        body: Some(
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "up",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                "finish_reason": "stop"}],
                   "usage": usage})
            .to_string(),
        ),
        ..Script::default()
    }
}

/// Sets a price, which must be taken; its answer.
pub(crate) async fn set_price(env: &Env, pair: &str, body: Value) -> Value {
    let r = env
        .app
        .put(&format!("/api/admin/prices/{pair}"), &env.admin, &body)
        .await;
    assert_eq!(r.status(), StatusCode::OK, "price {pair}");
    r.json().await.expect("json")
}

async fn chat(env: &Env, request_id: &str, body: Value) -> reqwest::Response {
    env.app
        .client
        .post(env.app.u("/v1/chat/completions"))
        .bearer_auth(&env.key)
        .header("x-request-id", request_id)
        .json(&body)
        .send()
        .await
        .expect("chat request")
}

pub(crate) fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The usage record of the request with this `x-request-id`, once written.
pub(crate) async fn record(env: &Env, request_id: &str) -> Value {
    poll(10, || async {
        let r = env
            .app
            .get(
                &format!("/api/admin/usage/records?request_id={request_id}"),
                &env.admin,
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let rows: Vec<Value> = r.json().await.expect("json");
        assert!(rows.len() <= 1, "{rows:?}");
        rows.into_iter().next()
    })
    .await
}

/// A usage record's `cost` and `cost_status`.
pub(crate) fn recorded_cost(rec: &Value) -> (Value, Value) {
    (rec["cost"].clone(), rec["cost_status"].clone())
}

fn hello() -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "hello"}]})
}

#[tokio::test]
async fn a_plain_answer_carries_its_cost_and_its_record_keeps_it_when_the_price_changes() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    let price = set_price(
        &env,
        "openai/up-chat",
        json!({"input": "1.00", "output": "2.00", "cache_read": "0.10"}),
    )
    .await;
    env.stub.script(
        "up-chat",
        answer_with(json!({"prompt_tokens": 1000, "completion_tokens": 500,
                           "prompt_tokens_details": {"cached_tokens": 200}})),
    );
    let r = chat(&env, "spend-plain-1", hello()).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("exact"));
    // The contract's worked example.
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.001820000"));
    assert_eq!(header(&r, "x-gatehouse-currency"), Some("USD"));
    let body: Value = r.json().await.expect("json");
    assert!(
        body["usage"].get("cost").is_none(),
        "the body is not changed"
    );

    let rec = record(&env, "spend-plain-1").await;
    assert_eq!(rec["cost"], "0.001820000");
    assert_eq!(rec["cost_status"], "exact");
    assert_eq!(rec["price_version"], price["version"]);
    assert_eq!(rec["currency"], "USD");
    assert_eq!(rec["provider"], "openai");
    assert_eq!(rec["upstream_model"], "up-chat");
    assert_eq!(rec["model"], "chat");
    assert_eq!(rec["status"], 200);
    assert_eq!(rec["user"], common::ADMIN_EMAIL);
    assert_eq!(
        (
            rec["prompt_tokens"].as_i64(),
            rec["completion_tokens"].as_i64()
        ),
        (Some(1000), Some(500))
    );
    assert_eq!(rec["cached_tokens"], 200);

    // A new price applies to the next request; the first record keeps its cost.
    set_price(&env, "openai/up-chat", json!({"input": "2", "output": "2"})).await;
    let r = chat(&env, "spend-plain-2", hello()).await;
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.003000000"));
    assert_eq!(
        env.app
            .delete("/api/admin/prices/openai/up-chat", &env.admin)
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    let r = chat(&env, "spend-plain-3", hello()).await;
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("unpriced"));
    assert_eq!(header(&r, "x-gatehouse-cost"), None);
    assert_eq!(header(&r, "x-gatehouse-currency"), None);
    assert_eq!(record(&env, "spend-plain-1").await["cost"], "0.001820000");
    assert_eq!(record(&env, "spend-plain-2").await["cost"], "0.003000000");
    let unpriced = record(&env, "spend-plain-3").await;
    assert_eq!(
        (unpriced["cost"].clone(), unpriced["cost_status"].clone()),
        (Value::Null, json!("unpriced"))
    );
    assert_eq!(unpriced["price_version"], Value::Null);
}

#[tokio::test]
async fn cache_writes_reasoning_and_the_request_fee_are_each_priced_at_their_rate() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    set_price(
        &env,
        "openai/up-chat",
        json!({"input": "1", "output": "2", "cache_read": "0.1",
        "cache_write": "1.25", "reasoning": "4", "request": "0.001"}),
    )
    .await;
    env.stub.script(
        "up-chat",
        answer_with(json!({"prompt_tokens": 1000, "completion_tokens": 500,
            "prompt_tokens_details": {"cached_tokens": 200, "cache_write_tokens": 300},
            "completion_tokens_details": {"reasoning_tokens": 100}})),
    );
    let r = chat(&env, "spend-rates", hello()).await;
    // 500 plain at 1, 200 cached at 0.1, 300 written at 1.25, 400 out at 2,
    // 100 reasoning at 4 (per million), plus 0.001 for the request.
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.003095000"));
    let rec = record(&env, "spend-rates").await;
    assert_eq!(rec["cache_write_tokens"], 300);
    assert_eq!(rec["reasoning_tokens"], 100);
    assert_eq!(rec["cost"], "0.003095000");
}

#[tokio::test]
async fn an_answer_without_usage_is_priced_on_the_estimate() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    set_price(
        &env,
        "openai/up-chat",
        json!({"input": "1000", "output": "1000"}),
    )
    .await;
    env.stub.script(
        "up-chat",
        Script {
            body: Some(
                json!({"id": "x", "object": "chat.completion", "model": "up",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "12345678"},
                             "finish_reason": "stop"}]})
                .to_string(),
            ),
            ..Script::default()
        },
    );
    let r = chat(&env, "spend-estimate", hello()).await;
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("estimated"));
    let rec = record(&env, "spend-estimate").await;
    assert_eq!(rec["cost_status"], "estimated");
    // A token per 4 characters, at 1000 per million tokens: 0.001 a token.
    let tokens =
        rec["prompt_tokens"].as_i64().unwrap() + rec["completion_tokens"].as_i64().unwrap();
    assert_eq!(rec["completion_tokens"], 2);
    assert_eq!(rec["cost"], format!("0.{:09}", tokens * 1_000_000));
}

#[tokio::test]
async fn a_stream_that_asked_for_usage_gets_the_cost_in_its_usage_chunk() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    set_price(&env, "openai/up-chat", json!({"input": "1", "output": "2"})).await;
    env.stub.script(
        "up-chat",
        Script {
            content: Some("one two three".into()),
            usage: Some((1000, 500)),
            ..Script::default()
        },
    );
    let mut body = hello();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = chat(&env, "spend-stream-usage", body.clone()).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-gatehouse-cost-status"),
        None,
        "streams carry no cost headers"
    );
    assert_eq!(header(&r, "x-gatehouse-cost"), None);
    let chunks = payloads(&sse_events(r).await);
    let usage: Vec<&Value> = chunks.iter().filter(|c| c["usage"].is_object()).collect();
    assert_eq!(usage.len(), 1, "{chunks:?}");
    assert_eq!(usage[0]["usage"]["prompt_tokens"], 1000);
    assert_eq!(usage[0]["usage"]["cost"], "0.002000000");
    assert_eq!(usage[0]["usage"]["cost_status"], "exact");
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    assert_eq!(
        record(&env, "spend-stream-usage").await["cost"],
        "0.002000000"
    );

    // A client that did not ask gets no usage chunk; the cost is recorded all the same.
    body.as_object_mut().unwrap().remove("stream_options");
    let r = chat(&env, "spend-stream-plain", body.clone()).await;
    let chunks = payloads(&sse_events(r).await);
    assert!(
        chunks
            .iter()
            .all(|c| c.get("usage").is_none_or(Value::is_null)),
        "{chunks:?}"
    );
    let rec = record(&env, "spend-stream-plain").await;
    assert_eq!(recorded_cost(&rec), (json!("0.002000000"), json!("exact")));

    // Unpriced: the status without a cost.
    env.app
        .delete("/api/admin/prices/openai/up-chat", &env.admin)
        .await;
    body["stream_options"] = json!({"include_usage": true});
    let chunks = payloads(&sse_events(chat(&env, "spend-stream-unpriced", body).await).await);
    let usage = chunks
        .iter()
        .find(|c| c["usage"].is_object())
        .expect("usage chunk");
    assert_eq!(usage["usage"]["cost_status"], "unpriced");
    assert!(usage["usage"].get("cost").is_none());
}

#[tokio::test]
async fn a_request_without_an_upstream_answer_costs_nothing() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    set_price(
        &env,
        "openai/up-chat",
        json!({"input": "1", "output": "2", "request": "5"}),
    )
    .await;
    env.stub.script("up-chat", Script::status(400));
    let r = chat(&env, "spend-failed", hello()).await;
    assert!(r.status().is_client_error(), "{}", r.status());
    assert_eq!(header(&r, "x-gatehouse-cost-status"), None);
    let rec = record(&env, "spend-failed").await;
    assert_eq!(recorded_cost(&rec), (json!("0.000000000"), json!("none")));
    assert_eq!(rec["price_version"], Value::Null);
}

#[tokio::test]
async fn embeddings_are_priced_on_their_prompt_tokens() {
    let env = env().await;
    env.model("emb", "embeddings", "openai", "up-emb").await;
    set_price(
        &env,
        "openai/up-emb",
        json!({"input": "1", "output": "1000000"}),
    )
    .await;
    let r = env
        .post(
            "/v1/embeddings",
            &json!({"model": "emb", "input": ["one two", "three"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("exact"));
    let cost = header(&r, "x-gatehouse-cost").map(str::to_string);
    let v: Value = r.json().await.expect("json");
    let prompt = v["usage"]["prompt_tokens"].as_i64().expect("prompt tokens");
    assert!(prompt > 0);
    assert_eq!(cost, Some(format!("0.{:09}", prompt * 1000)));
}

#[tokio::test]
async fn totals_carry_cost_currency_and_unpriced_requests_by_model_key_and_provider() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    env.model("free", "chat", "openai", "up-free").await;
    set_price(
        &env,
        "openai/up-chat",
        json!({"input": "1.00", "output": "2.00", "cache_read": "0.10"}),
    )
    .await;
    env.stub.script(
        "up-chat",
        answer_with(json!({"prompt_tokens": 1000, "completion_tokens": 500,
                           "prompt_tokens_details": {"cached_tokens": 200}})),
    );
    for i in 0..2 {
        assert_eq!(
            chat(&env, &format!("t{i}"), hello()).await.status(),
            StatusCode::OK
        );
    }
    let mut free = hello();
    free["model"] = json!("free");
    assert_eq!(chat(&env, "t-free", free).await.status(), StatusCode::OK);

    let row = wait_usage(&env, "model", "chat", 2).await;
    assert_eq!(row["cost"], "0.003640000");
    assert_eq!(row["currency"], "USD");
    assert_eq!(row["unpriced_requests"], 0);
    let row = wait_usage(&env, "model", "free", 1).await;
    assert_eq!(
        (row["cost"].clone(), row["unpriced_requests"].clone()),
        (json!("0.000000000"), json!(1))
    );
    let row = wait_usage(&env, "provider", "openai", 3).await;
    assert_eq!(
        (row["cost"].clone(), row["unpriced_requests"].clone()),
        (json!("0.003640000"), json!(1))
    );
    let key_id = record(&env, "t0").await["api_key_id"]
        .as_str()
        .expect("key id")
        .to_string();
    let row = wait_usage(&env, "key", &key_id, 3).await;
    assert_eq!(row["cost"], "0.003640000");

    let text = env
        .app
        .client
        .get(env.app.u("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("gatehouse_cost_nanos_total{model=\"chat\",provider=\"openai\"} 3640000"),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_unpriced_requests_total{model=\"free\",provider=\"openai\"} 1"),
        "{text}"
    );
}

async fn get(env: &Env, query: &str) -> reqwest::Response {
    env.app
        .get(&format!("/api/admin/usage/records{query}"), &env.admin)
        .await
}

#[tokio::test]
async fn records_are_read_newest_first_with_a_limit_of_1_to_1000() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    for i in 0..3 {
        chat(&env, &format!("rec-{i}"), hello()).await;
    }
    record(&env, "rec-2").await;
    let rows: Vec<Value> = get(&env, "?limit=2").await.json().await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["request_id"], "rec-2");
    assert_eq!(rows[1]["request_id"], "rec-1");
    let rows: Vec<Value> = get(&env, "?limit=1000").await.json().await.unwrap();
    assert_eq!(rows.len(), 3);
    let rows: Vec<Value> = get(&env, "?limit=1").await.json().await.unwrap();
    assert_eq!(rows.len(), 1);
    for bad in ["?limit=0", "?limit=1001"] {
        let r = get(&env, bad).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["detail"]["code"], "validation_error");
        assert!(v["detail"]["message"].as_str().unwrap().contains("'limit'"));
    }
    let rows: Vec<Value> = get(&env, "?from=2999-01-01T00:00:00Z")
        .await
        .json()
        .await
        .unwrap();
    assert!(rows.is_empty());
    let (_, token) = env.app.user("dev@example.com").await;
    let r = env.app.get("/api/admin/usage/records", &token).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_currency_setting_names_every_amount() {
    let env = env_with(|s| s.currency = gatehouse::spend::Currency::parse("EUR").unwrap()).await;
    env.model("chat", "chat", "openai", "up-chat").await;
    let price = set_price(&env, "openai/up-chat", json!({"input": "1", "output": "1"})).await;
    assert_eq!(price["currency"], "EUR");
    let r = chat(&env, "spend-eur", hello()).await;
    assert_eq!(header(&r, "x-gatehouse-currency"), Some("EUR"));
    assert_eq!(record(&env, "spend-eur").await["currency"], "EUR");
}

#[tokio::test]
async fn an_agent_chat_answer_carries_its_cost_and_its_record_names_the_agent() {
    let scene = common::scene::Scene::new().signed_in().await;
    let r = scene
        .app
        .put(
            "/api/admin/prices/p-chat-1/up-chat",
            &scene.admin,
            &json!({"input": "1.00", "output": "2.00", "cache_read": "0.10"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    scene.stub.script(
        &scene.upstream,
        answer_with(json!({"prompt_tokens": 1000, "completion_tokens": 500,
                           "prompt_tokens_details": {"cached_tokens": 200}})),
    );
    let r = scene
        .chat(
            &[("x-request-id", "spend-agent-1")],
            &json!({"messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("exact"));
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.001820000"));
    let rec = poll(10, || async {
        let rows: Vec<Value> = scene
            .app
            .get(
                "/api/admin/usage/records?request_id=spend-agent-1",
                &scene.admin,
            )
            .await
            .json()
            .await
            .expect("json");
        rows.into_iter().next()
    })
    .await;
    assert_eq!(rec["agent"], scene.address);
    assert_eq!(rec["cost"], "0.001820000");
    assert_eq!(rec["api_key_id"], Value::Null);
}

#[tokio::test]
async fn a_rerank_answer_carries_its_cost() {
    let env = env().await;
    env.model("rr", "scoring", "cohere", "rerank-v3").await;
    set_price(
        &env,
        "cohere/rerank-v3",
        json!({"input": "2", "output": "0", "request": "0.001"}),
    )
    .await;
    let r = env
        .post(
            "/v1/rerank",
            &json!({"model": "rr", "query": "which", "documents": ["one", "two"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-gatehouse-currency"), Some("USD"));
    let cost = header(&r, "x-gatehouse-cost").map(str::to_string);
    let status = header(&r, "x-gatehouse-cost-status").map(str::to_string);
    let v: Value = r.json().await.expect("json");
    let prompt = v["usage"]["prompt_tokens"].as_i64().expect("prompt tokens");
    // 2 per million tokens is 2000 nano-units a token, plus the request fee.
    assert_eq!(cost, Some(format!("0.{:09}", prompt * 2000 + 1_000_000)));
    assert!(
        matches!(status.as_deref(), Some("exact" | "estimated")),
        "{status:?}"
    );
}
