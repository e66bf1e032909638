//! The cost of Messages requests (docs/spend.md): plain answers carry the
//! cost headers, streams carry `cost` and `cost_status` in the final
//! `message_delta`'s usage, translated to chat or passed through to an
//! `anthropic` provider (priced on the Messages usage under the one
//! convention), and the usage record keeps the same cost.

use gatehouse_stub_upstream::Script;
use reqwest::Response;
use serde_json::{json, Value};

use super::*;
use crate::common::models::{env, Env};
use crate::spend::cost::{header, record, recorded_cost, set_price};

async fn messages(env: &Env, request_id: &str, body: &Value) -> Response {
    crate::common::client()
        .post(env.app.u("/v1/messages"))
        .header("x-api-key", &env.key)
        .header("anthropic-version", "2023-06-01")
        .header("x-request-id", request_id)
        .json(body)
        .send()
        .await
        .expect("request")
}

/// The usage of the stream's `message_delta`s (exactly one).
async fn delta_usage(r: Response) -> Value {
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-gatehouse-cost-status"),
        None,
        "streams carry no cost headers"
    );
    assert_eq!(header(&r, "x-gatehouse-cost"), None);
    let events = messages_events(r).await;
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "message_delta")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(deltas.len(), 1, "{events:?}");
    assert_eq!(events.last().map(|(n, _)| n.as_str()), Some("message_stop"));
    deltas[0]["usage"].clone()
}

#[tokio::test]
async fn a_translated_message_carries_its_cost_in_headers_and_in_the_streams_message_delta() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    set_price(
        &env,
        "openai/up-chat",
        json!({"input": "1.00", "output": "2.00", "cache_read": "0.10"}),
    )
    .await;
    env.stub.script(
        "up-chat",
        Script {
            body: Some(
                json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "up",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1000, "completion_tokens": 500,
                                 "prompt_tokens_details": {"cached_tokens": 200}}})
                .to_string(),
            ),
            ..Script::default()
        },
    );
    let r = messages(&env, "msg-cost-plain", &messages_body("chat", "hello")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("exact"));
    // The contract's worked example.
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.001820000"));
    assert_eq!(header(&r, "x-gatehouse-currency"), Some("USD"));
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["type"], "message");
    assert!(
        body["usage"].get("cost").is_none(),
        "the body is not changed"
    );
    assert_eq!(record(&env, "msg-cost-plain").await["cost"], "0.001820000");

    env.stub.script(
        "up-chat",
        Script {
            content: Some("one two three".into()),
            usage: Some((1000, 500)),
            ..Script::default()
        },
    );
    let mut body = messages_body("chat", "hello");
    body["stream"] = json!(true);
    let usage = delta_usage(messages(&env, "msg-cost-stream", &body).await).await;
    assert_eq!(usage["input_tokens"], 1000);
    assert_eq!(usage["output_tokens"], 500);
    assert_eq!(usage["cost"], "0.002000000");
    assert_eq!(usage["cost_status"], "exact");
    let rec = record(&env, "msg-cost-stream").await;
    assert_eq!(recorded_cost(&rec), (json!("0.002000000"), json!("exact")));

    // Unpriced: the status without a cost.
    let r = env
        .app
        .delete("/api/admin/prices/openai/up-chat", &env.admin)
        .await;
    assert_eq!(r.status(), 204);
    let usage = delta_usage(messages(&env, "msg-cost-unpriced", &body).await).await;
    assert_eq!(usage["cost_status"], "unpriced");
    assert!(usage.get("cost").is_none(), "{usage}");
}

#[tokio::test]
async fn a_translated_stream_without_upstream_usage_is_priced_on_the_estimate_it_records() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    set_price(
        &env,
        "openai/up-chat",
        json!({"input": "1000", "output": "1000"}),
    )
    .await;
    // Upstream events without any usage: the gateway estimates.
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    env.stub.script(
        "up-chat",
        Script {
            stream_events: Some(vec![
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"content": "12345678"}), Value::Null),
                chunk(json!({}), json!("stop")),
            ]),
            ..Script::default()
        },
    );
    let mut body = messages_body("chat", "hello");
    body["stream"] = json!(true);
    let usage = delta_usage(messages(&env, "msg-cost-estimate", &body).await).await;
    assert_eq!(usage["cost_status"], "estimated");
    let rec = record(&env, "msg-cost-estimate").await;
    assert_eq!(rec["cost_status"], "estimated");
    assert_eq!(rec["completion_tokens"], 2, "a token per 4 characters");
    // The stream says what the record keeps.
    assert_eq!(usage["cost"], rec["cost"]);
    let tokens =
        rec["prompt_tokens"].as_i64().unwrap() + rec["completion_tokens"].as_i64().unwrap();
    assert_eq!(rec["cost"], format!("0.{:09}", tokens * 1_000_000));
}

#[tokio::test]
async fn a_passed_through_message_is_priced_on_its_messages_usage_with_cache_reads_and_writes() {
    let env = super::passthrough::claude_env().await;
    set_price(
        &env,
        "claude/claude-up",
        json!({"input": "1", "output": "2", "cache_read": "0.1", "cache_write": "1.25"}),
    )
    .await;
    // P = 100 + 200 read + 400 written = 700: 100 at 1, 200 at 0.1, 400 at
    // 1.25 and 500 out at 2 (per million) = 0.001620000.
    env.stub.script(
        "claude-up",
        Script {
            usage: Some((100, 500)),
            cache_tokens: Some((200, 400)),
            ..Script::default()
        },
    );
    let r = messages(&env, "pass-cost-plain", &messages_body("sonnet", "hello")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), Some("claude"));
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("exact"));
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.001620000"));
    assert_eq!(header(&r, "x-gatehouse-currency"), Some("USD"));
    let rec = record(&env, "pass-cost-plain").await;
    assert_eq!(rec["cost"], "0.001620000");
    assert_eq!(
        (rec["prompt_tokens"].clone(), rec["cached_tokens"].clone()),
        (json!(700), json!(200))
    );
    assert_eq!(rec["cache_write_tokens"], 400);

    let mut body = messages_body("sonnet", "hello");
    body["stream"] = json!(true);
    let usage = delta_usage(messages(&env, "pass-cost-stream", &body).await).await;
    assert_eq!(
        usage["output_tokens"], 500,
        "the upstream's usage as it came"
    );
    assert_eq!(usage["cost"], "0.001620000");
    assert_eq!(usage["cost_status"], "exact");
    assert_eq!(
        record(&env, "pass-cost-stream").await["cost"],
        "0.001620000"
    );

    // The price of another pair does not apply: unpriced, no cost.
    let r = env
        .app
        .delete("/api/admin/prices/claude/claude-up", &env.admin)
        .await;
    assert_eq!(r.status(), 204);
    let usage = delta_usage(messages(&env, "pass-cost-unpriced", &body).await).await;
    assert_eq!(usage["cost_status"], "unpriced");
    assert!(usage.get("cost").is_none(), "{usage}");
    let rec = record(&env, "pass-cost-unpriced").await;
    assert_eq!(recorded_cost(&rec), (Value::Null, json!("unpriced")));
}

#[tokio::test]
async fn an_agents_messages_stream_carries_its_cost_in_message_delta() {
    let env = env().await;
    crate::common::agent_chat::agent(
        &env,
        "mbot",
        "up-mbot",
        json!({"default_tool_mode": "auto"}),
    )
    .await;
    let token = crate::common::agent_chat::sign_in(&env, "mo@example.com", "mbot").await;
    set_price(&env, "openai/up-mbot", json!({"input": "1", "output": "2"})).await;
    env.stub.script(
        "up-mbot",
        Script {
            content: Some("an agent's answer".into()),
            usage: Some((1000, 500)),
            ..Script::default()
        },
    );
    let mut body = messages_body("claude-sonnet-4-5", "hi");
    body["stream"] = json!(true);
    let r = crate::common::client()
        .post(env.app.u("/v1/agents/mbot/messages"))
        .header("x-api-key", &token)
        .header("anthropic-version", "2023-06-01")
        .header("x-request-id", "agent-msg-cost")
        .json(&body)
        .send()
        .await
        .expect("request");
    let usage = delta_usage(r).await;
    assert_eq!(usage["cost"], "0.002000000");
    assert_eq!(usage["cost_status"], "exact");
    let rec = record(&env, "agent-msg-cost").await;
    assert_eq!(rec["cost"], "0.002000000");
    assert_eq!(rec["agent"], "mbot");
}
