//! The cost of Responses requests (docs/spend.md): plain answers carry the
//! cost headers, streams carry `cost` and `cost_status` in the terminal
//! response's `usage`, bridged to chat or native, and the usage record
//! keeps the same cost.

use super::*;
use crate::spend::cost::{header, record, recorded_cost, set_price};

async fn create_as(env: &Env, request_id: &str, body: &Value) -> Response {
    post_responses(
        env,
        "/v1/responses",
        &env.key,
        body,
        &[("x-request-id", request_id)],
    )
    .await
}

/// The terminal event's response `usage`, after checking the grammar.
async fn completed_usage(r: Response) -> Value {
    assert_eq!(
        r.headers().get("x-gatehouse-cost-status"),
        None,
        "streams carry no cost headers"
    );
    let evs = stream_of(r).await;
    let last = evs.last().expect("a terminal event");
    assert_eq!(last["type"], "response.completed", "{last}");
    last["response"]["usage"].clone()
}

#[tokio::test]
async fn a_bridged_response_carries_its_cost_in_headers_and_in_response_completed() {
    let env = env().await;
    env.model("gpt-c", "chat", "openai", "up-c").await;
    set_price(
        &env,
        "openai/up-c",
        json!({"input": "1.00", "output": "2.00", "cache_read": "0.10", "reasoning": "4"}),
    )
    .await;
    env.stub.script(
        "up-c",
        Script {
            body: Some(
                json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "up",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1000, "completion_tokens": 500,
                                 "prompt_tokens_details": {"cached_tokens": 200},
                                 "completion_tokens_details": {"reasoning_tokens": 100}}})
                .to_string(),
            ),
            ..Script::default()
        },
    );
    let r = create_as(
        &env,
        "resp-cost-plain",
        &json!({"model": "gpt-c", "input": "hi"}),
    )
    .await;
    // 800 in at 1, 200 cached at 0.1, 400 out at 2, 100 reasoning at 4.
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("exact"));
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.002020000"));
    assert_eq!(header(&r, "x-gatehouse-currency"), Some("USD"));
    let v = json_ok(r).await;
    assert_eq!(v["object"], "response");
    assert!(v["usage"].get("cost").is_none(), "the body is not changed");
    assert_eq!(record(&env, "resp-cost-plain").await["cost"], "0.002020000");

    env.stub.script(
        "up-c",
        Script {
            content: Some("one two three".into()),
            usage: Some((1000, 500)),
            ..Script::default()
        },
    );
    let body = json!({"model": "gpt-c", "input": "hi", "stream": true});
    let usage = completed_usage(create_as(&env, "resp-cost-stream", &body).await).await;
    assert_eq!(usage["input_tokens"], 1000);
    assert_eq!(usage["cost"], "0.002000000");
    assert_eq!(usage["cost_status"], "exact");
    let rec = record(&env, "resp-cost-stream").await;
    assert_eq!(recorded_cost(&rec), (json!("0.002000000"), json!("exact")));

    let r = env
        .app
        .delete("/api/admin/prices/openai/up-c", &env.admin)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let usage = completed_usage(create_as(&env, "resp-cost-unpriced", &body).await).await;
    assert_eq!(usage["cost_status"], "unpriced");
    assert!(usage.get("cost").is_none(), "{usage}");
}

#[tokio::test]
async fn a_native_response_carries_its_cost_in_headers_and_in_the_upstreams_response_completed() {
    let env = native_env().await;
    set_price(
        &env,
        "nat/up-n",
        json!({"input": "1", "output": "2", "request": "0.5"}),
    )
    .await;
    env.stub.script(
        "up-n",
        Script {
            usage: Some((1000, 500)),
            ..Script::default()
        },
    );
    let body = json!({"model": "gpt-n", "input": "hi"});
    let r = create_as(&env, "native-cost-plain", &body).await;
    // 0.002 for the tokens and 0.5 for the request.
    assert_eq!(header(&r, "x-gatehouse-cost"), Some("0.502000000"));
    assert_eq!(header(&r, "x-gatehouse-cost-status"), Some("exact"));
    let v = json_ok(r).await;
    assert!(v["usage"].get("cost").is_none(), "the body is not changed");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = create_as(&env, "native-cost-stream", &streamed).await;
    assert_eq!(r.headers()["x-gatehouse-provider"], "nat");
    let usage = completed_usage(r).await;
    assert_eq!(
        usage["output_tokens"], 500,
        "the upstream's usage as it came"
    );
    assert_eq!(usage["cost"], "0.502000000");
    assert_eq!(usage["cost_status"], "exact");
    assert_eq!(
        record(&env, "native-cost-stream").await["cost"],
        "0.502000000"
    );
}

#[tokio::test]
async fn an_agents_responses_stream_carries_its_cost_in_response_completed() {
    let env = env().await;
    common::agent_chat::agent(
        &env,
        "cbot",
        "up-cbot",
        json!({"default_tool_mode": "auto"}),
    )
    .await;
    let token = common::agent_chat::sign_in(&env, "cat@example.com", "cbot").await;
    set_price(&env, "openai/up-cbot", json!({"input": "1", "output": "2"})).await;
    env.stub.script(
        "up-cbot",
        Script {
            content: Some("an agent's answer".into()),
            usage: Some((1000, 500)),
            ..Script::default()
        },
    );
    let r = post_responses(
        &env,
        "/v1/agents/cbot/responses",
        &token,
        &json!({"input": "hi", "stream": true}),
        &[("x-request-id", "agent-resp-cost")],
    )
    .await;
    let usage = completed_usage(r).await;
    assert_eq!(usage["cost"], "0.002000000");
    assert_eq!(usage["cost_status"], "exact");
    let rec = record(&env, "agent-resp-cost").await;
    assert_eq!(rec["cost"], "0.002000000");
    assert_eq!(rec["agent"], "cbot");
}
