//! The AG-UI endpoint (`POST /v1/agents/{agent}/ag-ui`) end to end against
//! the stub upstream: a `RunAgentInput` in, AG-UI events only out. What the
//! upstream got is checked on what the stub recorded; every run's events by
//! the protocol's own packages (tests/agui/validate.mjs), and the real
//! client, `@ag-ui/client`'s `HttpAgent`, unmodified, runs against the route
//! (tests/agui/http_agent.mjs).

use crate::common;

use common::agent_chat::*;
use common::models::*;
use common::scene::Scene;
use common::stub::tool_call;
use gatehouse::wire::sse::SseEvent;
use gatehouse_stub_upstream::Script;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use super::agui::{agui_dir, validate};

const UP: &str = "up-agui-run";

/// Agent `runner` (auto tool mode unless `extra` says otherwise) on upstream
/// `up-agui-run`, ann@example.com signed in (`scene.access`).
async fn setup(extra: Value) -> Scene {
    let mut extra = extra;
    if extra.get("default_tool_mode").is_none() {
        extra["default_tool_mode"] = json!("auto");
    }
    agent_scene("runner", UP, extra, "ann@example.com").await
}

/// A RunAgentInput as HttpAgent sends one.
fn input(thread: &str, run: &str, messages: Value) -> Value {
    json!({"threadId": thread, "runId": run, "state": {}, "messages": messages,
           "tools": [], "context": [], "forwardedProps": {}})
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

/// POST /v1/agents/runner/ag-ui with the access token and extra headers.
async fn run(env: &Scene, body: &Value, headers: &[(&str, &str)]) -> Response {
    let mut req = env
        .app
        .client
        .post(env.app.u("/v1/agents/runner/ag-ui"))
        .bearer_auth(&env.access)
        .header("Accept", "text/event-stream")
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("ag-ui run")
}

/// A run answered 200 with an event stream; its events, after checking that
/// every SSE message is a bare `data:` AG-UI event (no `event:` line, no
/// OpenAI chunk, no `[DONE]`) and that exactly one terminal event ends it.
async fn events_of(r: Response) -> Vec<Value> {
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let sse: Vec<SseEvent> = sse_events(r).await;
    let events: Vec<Value> = sse
        .iter()
        .map(|e| {
            assert_eq!(e.event, None, "an `event:` line: {}", e.data);
            let v: Value = serde_json::from_str(&e.data).expect("each message is JSON");
            assert!(v["type"].is_string(), "not an AG-UI event: {v}");
            assert!(
                v.get("object").is_none() && v.get("choices").is_none(),
                "{v}"
            );
            v
        })
        .collect();
    assert_eq!(events[0]["type"], "RUN_STARTED");
    let terminal = |e: &&Value| e["type"] == "RUN_FINISHED" || e["type"] == "RUN_ERROR";
    assert_eq!(events.iter().filter(terminal).count(), 1, "{events:?}");
    assert!(terminal(&events.last().unwrap()), "{events:?}");
    events
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn joined(events: &[Value], kind: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

fn custom<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == name)
        .collect()
}

/// The OpenAI error of a refused run: status, code, param.
async fn refused(r: Response) -> (StatusCode, String, Option<String>) {
    let (status, err) = v1_error(r).await;
    (
        status,
        err["code"].as_str().unwrap_or_default().to_string(),
        err["param"].as_str().map(str::to_string),
    )
}

#[tokio::test]
async fn a_run_input_becomes_the_agents_chat_request_with_nothing_of_ag_ui_upstream() {
    let env = setup(json!({"instructions": "You are the runner."})).await;
    env.stub.script(
        UP,
        Script {
            content: Some("Forty-two.".into()),
            chunk_size: 3,
            usage: Some((30, 4)),
            ..Script::default()
        },
    );
    let call = json!({"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}});
    let mut body = input(
        "thread-1",
        "run-1",
        json!([
            {"id": "m0", "role": "developer", "content": "Answer in numbers."},
            {"id": "m1", "role": "user", "content": [{"type": "text", "text": "What is"},
                {"type": "image", "source": {"type": "url", "value": "https://example.com/q.png"}},
                {"type": "text", "text": "the answer?"}], "name": "ann", "metadata": {"k": 1}},
            {"id": "m2", "role": "assistant", "content": "Looking.", "toolCalls": [call]},
            {"id": "m3", "role": "tool", "toolCallId": "call_1", "content": "42"},
            {"id": "m4", "role": "reasoning", "content": "thinking"},
            {"id": "m5", "role": "activity", "activityType": "progress", "content": {"pct": 50}},
            {"id": "m6", "role": "system", "content": "Be exact."}
        ]),
    );
    body["tools"] = json!([{"name": "lookup", "description": "Looks up.", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}, "metadata": {"x": 1}}]);
    body["context"] = json!([{"description": "page", "value": "/faq"}, {"description": "locale", "value": "en-GB"}]);
    body["state"] = json!({"cart": ["secret-state"]});
    body["forwardedProps"] = json!({"forwarded": "secret-props"});
    body["parentRunId"] = json!("run-0");
    body["unknownMember"] = json!({"ignored": true});

    let r = run(&env, &body, &[]).await;
    assert!(r.headers().get("x-service-held-tools").is_none());
    let events = events_of(r).await;
    assert_eq!(
        (events[0]["threadId"].as_str(), events[0]["runId"].as_str()),
        (Some("thread-1"), Some("run-1"))
    );
    assert_eq!(
        types(&events)
            .into_iter()
            .filter(|t| *t != "TEXT_MESSAGE_CONTENT")
            .collect::<Vec<_>>(),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(joined(&events, "TEXT_MESSAGE_CONTENT"), "Forty-two.");
    let fin = events.last().unwrap();
    assert_eq!(
        (fin["threadId"].as_str(), fin["runId"].as_str()),
        (Some("thread-1"), Some("run-1"))
    );
    assert_eq!(
        fin["usage"],
        json!([{"model": "m-runner", "inputTokens": 30, "outputTokens": 4, "totalTokens": 34}])
    );

    let sent = env.last_sent();
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "system", "content": "You are the runner."},
            {"role": "system", "content": "page: /faq\nlocale: en-GB"},
            {"role": "system", "content": "Answer in numbers."},
            {"role": "user", "content": "What is\nthe answer?"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "system", "content": "Be exact."}
        ])
    );
    assert_eq!(
        sent["tools"],
        json!([{"type": "function", "function": {"name": "lookup", "description": "Looks up.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}])
    );
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(sent["model"], UP);
    let mut keys: Vec<&String> = sent.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["messages", "model", "stream", "stream_options", "tools"]
    );
    let raw = env.last_sent_text();
    for ag_ui in [
        "threadId",
        "runId",
        "forwardedProps",
        "secret-state",
        "secret-props",
        "toolCallId",
        "toolCalls",
        "metadata",
        "unknownMember",
        "parentRunId",
        "thinking",
        "activity",
    ] {
        assert!(!raw.contains(ag_ui), "{ag_ui} went upstream: {raw}");
    }

    // The usage record names the thread and the run as conversation and turn.
    let pool = env.app.app().store.pool.clone();
    let row: (Option<String>, Option<String>, i64) = poll(10, || {
        let pool = pool.clone();
        async move {
            sqlx::query_as(
                "SELECT conversation_id, turn_id, prompt_tokens FROM usage_records WHERE agent = 'runner'",
            )
            .fetch_optional(&pool)
            .await
            .expect("query")
        }
    })
    .await;
    assert_eq!(row, (Some("thread-1".into()), Some("run-1".into()), 30));
    validate(&[("mapped run", &events)]);
}

#[tokio::test]
async fn bad_bodies_and_ids_are_refused_with_the_field_named_and_nothing_goes_upstream() {
    let env = setup(json!({})).await;
    let ok = input("t-1", "r-1", json!([user("u1", "hi")]));
    let with = |k: &str, v: Value| {
        let mut b = ok.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = ok.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    let cases: Vec<(Value, &str)> = vec![
        (with("threadId", json!("")), "threadId"),
        (with("threadId", json!("has space")), "threadId"),
        (with("threadId", json!("t".repeat(129))), "threadId"),
        (with("threadId", json!(12)), "threadId"),
        (without("threadId"), "threadId"),
        (with("runId", json!("r/1")), "runId"),
        (with("runId", json!("r".repeat(129))), "runId"),
        (without("runId"), "runId"),
        (without("messages"), "messages"),
        (with("messages", json!({"id": "1"})), "messages"),
        (
            with(
                "messages",
                json!([{"id": "1", "role": "wizard", "content": "x"}]),
            ),
            "messages[0].role",
        ),
        (
            with(
                "messages",
                json!([user("1", "a"), {"role": "user", "content": "x"}]),
            ),
            "messages[1].id",
        ),
        (
            with(
                "messages",
                json!([{"id": "1", "role": "user", "content": 5}]),
            ),
            "messages[0].content",
        ),
        (
            with(
                "messages",
                json!([{"id": "1", "role": "tool", "content": "x"}]),
            ),
            "messages[0].toolCallId",
        ),
        (
            with(
                "messages",
                json!([{"id": "1", "role": "assistant", "toolCalls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}]),
            ),
            "messages[0].toolCalls[0].function.arguments",
        ),
        (
            with("tools", json!([{"name": "t"}])),
            "tools[0].description",
        ),
        (
            with("tools", json!([{"name": "has space", "description": "d"}])),
            "tools[0].name",
        ),
        (with("tools", json!({})), "tools"),
        (
            with("context", json!([{"description": "d", "value": 1}])),
            "context[0].value",
        ),
        (with("forwardedProps", Value::Null), "forwardedProps"),
    ];
    for (body, param) in &cases {
        let r = run(&env, body, &[]).await;
        assert_eq!(
            refused(r).await,
            (
                StatusCode::BAD_REQUEST,
                "validation_error".into(),
                Some(param.to_string())
            ),
            "{body}"
        );
    }
    // Not JSON, not an object.
    let r = env
        .app
        .client
        .post(env.app.u("/v1/agents/runner/ag-ui"))
        .bearer_auth(&env.access)
        .header("content-type", "application/json")
        .body("{\"threadId\":")
        .send()
        .await
        .unwrap();
    let (status, code, _) = refused(r).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "validation_error")
    );
    let r = run(&env, &json!(["not", "an", "object"]), &[]).await;
    assert_eq!(refused(r).await.2.as_deref(), Some("body"));
    // Ids at the limit are fine.
    let long = input(
        &"t".repeat(128),
        &"r".repeat(128),
        json!([user("u1", "hi")]),
    );
    let events = events_of(run(&env, &long, &[]).await).await;
    assert_eq!(events[0]["threadId"], "t".repeat(128));
    assert_eq!(env.sent().len(), 1, "only the good run went upstream");

    // Errors before the stream: agent chat's statuses, in the /v1 shape.
    let r = run(&env, &ok, &[("X-Service-Tool-Mode", "sometimes")]).await;
    let (status, code, param) = refused(r).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_header")
    );
    assert_eq!(param.as_deref(), Some("X-Service-Tool-Mode"));
    let r = run(&env, &ok, &[("X-Service-PII-Mode", "redact")]).await;
    assert_eq!(refused(r).await.1, "pii_mode_not_allowed");
    let r = env
        .app
        .client
        .post(env.app.u("/v1/agents/runner/ag-ui"))
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let other = env
        .app
        .client
        .post(env.app.u("/v1/agents/nobody/ag-ui"))
        .bearer_auth(&env.access)
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::FORBIDDEN);
    assert_eq!(env.sent().len(), 1);
}

#[tokio::test]
async fn held_tools_and_tool_modes_follow_agent_chats_rules() {
    let env = setup(json!({"tool_contract": ["search"]})).await;
    let tool =
        |name: &str| json!({"name": name, "description": "d", "parameters": {"type": "object"}});
    let mut body = input("t-held", "r-1", json!([user("u1", "find it")]));
    body["tools"] = json!([tool("search"), tool("delete_all"), tool("run_shell")]);
    let r = run(&env, &body, &[]).await;
    assert_eq!(r.headers()["x-service-held-tools"], "delete_all,run_shell");
    let events = events_of(r).await;
    assert_eq!(
        custom(&events, "service.held_tools")[0]["value"],
        json!({"tools": ["delete_all", "run_shell"]})
    );
    assert_eq!(events[1]["name"], "service.held_tools");
    let sent = env.last_sent();
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["search"]);

    // X-Service-Tool-Mode: off sends no tools at all.
    body["runId"] = json!("r-2");
    let r = run(&env, &body, &[("X-Service-Tool-Mode", "off")]).await;
    let events2 = events_of(r).await;
    assert!(
        env.last_sent().get("tools").is_none(),
        "{}",
        env.last_sent()
    );
    validate(&[("held", &events), ("mode off", &events2)]);
}

#[tokio::test]
async fn ask_mode_announces_approvals_and_a_pending_one_stops_the_next_run() {
    let env = setup(json!({"default_tool_mode": "ask"})).await;
    env.stub.script(
        UP,
        Script {
            content: Some("Sending.".into()),
            tool_calls: vec![tool_call("call_mail", "send_mail", r#"{"to":"team"}"#)],
            ..Script::default()
        },
    );
    let mut body = input("t-ask", "r-1", json!([user("u1", "mail the team")]));
    body["tools"] =
        json!([{"name": "send_mail", "description": "m", "parameters": {"type": "object"}}]);
    let events = events_of(run(&env, &body, &[]).await).await;
    let asked = custom(&events, "service.approval_requested");
    assert_eq!(
        asked.len(),
        1,
        "a tool the manifest lacks counts as execute"
    );
    let v = &asked[0]["value"];
    assert_eq!(
        (v["tool"].as_str(), v["tool_call_id"].as_str()),
        (Some("send_mail"), Some("call_mail"))
    );
    assert!(v.get("arguments").is_none());
    let n = events.len();
    assert_eq!(events[n - 2]["name"], "service.approval_requested");
    assert_eq!(events[n - 1]["type"], "RUN_FINISHED");
    assert_eq!(joined(&events, "TOOL_CALL_ARGS"), r#"{"to":"team"}"#);
    let msg_id = events[1]["messageId"].as_str().unwrap().to_string();

    // The app sends the tool result while the approval is pending: 409.
    let mut next = input(
        "t-ask",
        "r-2",
        json!([user("u1", "mail the team"),
            {"id": msg_id, "role": "assistant", "content": "Sending.", "toolCalls": [
                {"id": "call_mail", "type": "function", "function": {"name": "send_mail", "arguments": "{\"to\":\"team\"}"}}]},
            {"id": "t1", "role": "tool", "toolCallId": "call_mail", "content": "sent"}]),
    );
    next["tools"] = body["tools"].clone();
    let before = env.sent().len();
    let r = run(&env, &next, &[]).await;
    assert_eq!(r.headers()["x-should-retry"], "false");
    assert_eq!(refused(r).await.1, "approval_pending");
    assert_eq!(env.sent().len(), before);

    // Denied: the result reaches the upstream as the denial.
    let r = env
        .app
        .post(
            &format!("/v1/agents/runner/approvals/{}", v["id"].as_str().unwrap()),
            &env.access,
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    env.stub.script(UP, Script::content("Not sent."));
    next["runId"] = json!("r-3");
    let events3 = events_of(run(&env, &next, &[]).await).await;
    let tool_msg = env.last_sent()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(
        tool_msg,
        json!({"role": "tool", "tool_call_id": "call_mail", "content": "The user denied this tool call."})
    );
    validate(&[("approval", &events), ("after denial", &events3)]);
}

#[tokio::test]
async fn tokenize_reversible_events_carry_the_restored_values_also_across_split_tokens() {
    let email = "carol.king@example.com";
    let env =
        setup(json!({"pii": {"mode": "tokenize_reversible", "terms": ["Nightingale"]}})).await;
    // The stub echoes the user text, tokens and all, 3 characters a chunk:
    // every token is split across events; the call's arguments name a token too.
    env.stub.script(
        UP,
        Script {
            chunk_size: 3,
            tool_calls: vec![tool_call(
                "call_1",
                "notify",
                r#"{"to":"[EMAIL_1]","about":"[TERM_1]"}"#,
            )],
            ..Script::default()
        },
    );
    let text = format!("Mail {email} about Nightingale");
    let mut body = input("t-pii", "r-1", json!([user("u1", &text)]));
    body["tools"] = json!([{"name": "notify", "description": "n"}]);
    let events = events_of(run(&env, &body, &[]).await).await;
    let sent = env.last_sent_text();
    assert!(
        !sent.contains(email) && !sent.contains("Nightingale"),
        "{sent}"
    );
    assert!(sent.contains("[EMAIL_1]"), "{sent}");
    assert_eq!(
        custom(&events, "service.pii")[0]["value"],
        json!({"counts": {"email": 1, "term": 1}})
    );
    // (With tool calls the stub sends no text: the text is the next run's.)
    assert_eq!(
        joined(&events, "TOOL_CALL_ARGS"),
        format!(r#"{{"to":"{email}","about":"Nightingale"}}"#)
    );
    for e in custom(&events, "service.pii") {
        assert!(!e.to_string().contains(email));
    }

    env.stub.script(
        UP,
        Script {
            chunk_size: 3,
            ..Script::default()
        },
    );
    body["runId"] = json!("r-2");
    body["tools"] = json!([]);
    let events2 = events_of(run(&env, &body, &[]).await).await;
    let said = joined(&events2, "TEXT_MESSAGE_CONTENT");
    assert_eq!(said, format!("echo: {text}"));
    // No piece of a token in any event, though the tokens came split.
    for e in events2
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
    {
        let d = e["delta"].as_str().unwrap();
        assert!(!d.contains('[') && !d.contains(']'), "{d}");
    }
    assert!(
        events2
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .count()
            > 5
    );

    // redact: nothing is restored.
    let r = env
        .app
        .patch(
            "/api/admin/agents/runner",
            &env.admin,
            &json!({"pii": {"mode": "redact", "terms": ["Nightingale"]}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    body["runId"] = json!("r-3");
    let events3 = events_of(run(&env, &body, &[]).await).await;
    assert_eq!(
        joined(&events3, "TEXT_MESSAGE_CONTENT"),
        "echo: Mail [EMAIL] about [TERM]"
    );
    validate(&[
        ("pii args", &events),
        ("pii text", &events2),
        ("redact", &events3),
    ]);
}

#[tokio::test]
async fn a_failure_after_the_stream_began_ends_the_run_with_one_run_error() {
    let env = setup(json!({})).await;
    env.stub.script(
        UP,
        Script {
            content: Some("one two three".into()),
            close_after_chunks: Some(2),
            ..Script::default()
        },
    );
    let body = input("t-fail", "r-1", json!([user("u1", "x")]));
    let events = events_of(run(&env, &body, &[]).await).await;
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_ERROR"
        ]
    );
    assert_eq!(events[5]["code"], "upstream_error");
    assert_eq!(joined(&events, "TEXT_MESSAGE_CONTENT"), "one two ");

    // Cut before any text: started, then the error.
    env.stub.script(
        UP,
        Script {
            content: Some("never".into()),
            close_after_chunks: Some(0),
            ..Script::default()
        },
    );
    let events2 = events_of(run(&env, &body, &[]).await).await;
    assert_eq!(types(&events2), ["RUN_STARTED", "RUN_ERROR"]);

    // An error before the stream began: an HTTP error, no events.
    env.stub.script(
        UP,
        Script {
            status: Some(500),
            error_message: Some("model crashed".into()),
            ..Script::default()
        },
    );
    let r = run(&env, &body, &[]).await;
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let (status, err) = v1_error(r).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(err["code"], "upstream_error");
    validate(&[("cut mid-way", &events), ("cut at once", &events2)]);
}

#[tokio::test]
async fn the_model_servers_idle_limit_mid_run_ends_it_with_run_error() {
    let env = setup(json!({})).await;
    // A provider that waits at most 1 s between events, and the agent on it.
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "p-slow", "type": "openai", "base_url": env.stub.openai_base_url(), "timeout_s": 1}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = env
        .app
        .post(
            "/api/admin/models",
            &env.admin,
            &json!({"id": "m-slow", "kind": "chat", "provider": "p-slow", "upstream_model": "up-slow"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = env
        .app
        .patch(
            "/api/admin/agents/runner",
            &env.admin,
            &json!({"model": "m-slow"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    env.stub.script(
        "up-slow",
        Script {
            content: Some("slow answer".into()),
            chunk_interval_ms: 1500,
            ..Script::default()
        },
    );
    let body = input("t-slow", "r-1", json!([user("u1", "x")]));
    let events = events_of(run(&env, &body, &[]).await).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR");
    assert_eq!(last["code"], "upstream_timeout");
    validate(&[("idle limit", &events)]);
}

/// Runs tests/agui/http_agent.mjs (HttpAgent, unmodified) with this plan,
/// calling `between(n)` after run `n` and before the next; its report:
/// `{"runs": [...], "messages": [...]}`.
async fn http_agent(plan: &Value, mut between: impl FnMut(usize)) -> Value {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let dir = agui_dir();
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), serde_json::to_vec(plan).unwrap()).unwrap();
    let mut child = tokio::process::Command::new("node")
        .arg("http_agent.mjs")
        .arg(file.path())
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = async || {
        let l = lines.next_line().await.expect("read");
        let l = l.expect("a line from http_agent.mjs");
        serde_json::from_str::<Value>(&l).unwrap_or_else(|e| panic!("{e}: {l}"))
    };
    let n = plan["runs"].as_array().map_or(0, Vec::len);
    let mut runs = vec![];
    for i in 0..n {
        runs.push(next().await);
        if i + 1 < n {
            between(i);
            stdin.write_all(b"next\n").await.expect("write");
        }
    }
    let last = next().await;
    let status = child.wait().await.expect("node ends");
    assert!(status.success(), "http_agent.mjs failed");
    json!({"runs": runs, "messages": last["messages"]})
}

#[tokio::test]
async fn http_agent_assembles_text_and_tool_calls_and_sends_the_tool_result_back() {
    let env = setup(json!({})).await;
    env.stub.script(
        UP,
        Script {
            content: Some("Let me check the weather.".into()),
            tool_calls: vec![tool_call("call_w", "get_weather", r#"{"city":"Paris"}"#)],
            chunk_size: 4,
            ..Script::default()
        },
    );
    let url = env.app.u("/v1/agents/runner/ag-ui");
    let tools = json!([{"name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    // Run 1: the question. Run 2: the tool's result, and the model's text.
    let plan = json!({
        "url": url, "headers": {"Authorization": format!("Bearer {}", env.access)},
        "threadId": "thread-http",
        "runs": [
            {"add": [user("u1", "Weather in Paris?")], "tools": tools, "context": [{"description": "units", "value": "metric"}],
             "forwardedProps": {"app": "demo"}},
            {"add": [{"id": "tool-1", "role": "tool", "toolCallId": "call_w", "content": "18 C, sunny"}], "tools": tools}
        ]
    });
    let report = http_agent(&plan, |_| {
        env.stub.script(UP, Script::content("18 C in Paris."))
    })
    .await;
    let runs = report["runs"].as_array().unwrap();
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r["error"], Value::Null, "run {i}: {r}");
        assert_eq!(r["schemaErrors"], json!([]), "run {i}");
    }
    let messages = report["messages"].as_array().unwrap();
    // The user's, the assistant's (text and the call), the tool's, the answer.
    let assistant = &messages[1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], "Let me check the weather.");
    assert_eq!(
        assistant["toolCalls"],
        json!([{"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]),
        "{report}"
    );
    assert_eq!(messages[2]["role"], "tool");
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"], "18 C in Paris.");
    assert_eq!(messages.len(), 4, "{messages:?}");

    // What reached the upstream on the second run: the whole conversation,
    // the tool result as a `tool` message.
    let sent = env.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0]["messages"],
        json!([{"role": "system", "content": "units: metric"}, {"role": "user", "content": "Weather in Paris?"}])
    );
    assert_eq!(
        sent[1]["messages"],
        json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Let me check the weather.", "tool_calls": [
                {"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_w", "content": "18 C, sunny"}
        ])
    );
    assert!(!env.last_sent_text().contains("demo"));
    // Both runs in one thread; each its own run id; HttpAgent checked the
    // order (verifyEvents) as it ran; the validator checks them again.
    let events: Vec<Vec<Value>> = runs
        .iter()
        .map(|r| r["events"].as_array().unwrap().clone())
        .collect();
    assert_eq!(events[0][0]["threadId"], "thread-http");
    assert_eq!(events[1][0]["threadId"], "thread-http");
    assert_ne!(events[0][0]["runId"], events[1][0]["runId"]);
    validate(&[
        ("http agent run 1", &events[0]),
        ("http agent run 2", &events[1]),
    ]);
}

#[tokio::test]
async fn http_agent_gets_approval_requests_and_its_pending_tool_result_refused() {
    let env = setup(json!({"default_tool_mode": "ask"})).await;
    env.stub.script(
        UP,
        Script {
            tool_calls: vec![tool_call("call_x", "wipe", "{}")],
            ..Script::default()
        },
    );
    let url = env.app.u("/v1/agents/runner/ag-ui");
    let plan = json!({
        "url": url, "headers": {"Authorization": format!("Bearer {}", env.access)},
        "threadId": "thread-ask",
        "runs": [
            {"add": [user("u1", "wipe it")], "tools": [{"name": "wipe", "description": "w"}]},
            {"add": [{"id": "tool-1", "role": "tool", "toolCallId": "call_x", "content": "done"}],
             "tools": [{"name": "wipe", "description": "w"}]}
        ]
    });
    let report = http_agent(&plan, |_| {}).await;
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs[0]["error"], Value::Null);
    let asked: Vec<&Value> = runs[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "service.approval_requested")
        .collect();
    assert_eq!(asked.len(), 1);
    assert_eq!(runs[1]["error"]["status"], 409, "{}", runs[1]);
    assert!(runs[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("approval_pending"));
    assert_eq!(env.sent().len(), 1);
}

#[tokio::test]
async fn http_agent_sees_a_run_the_model_server_cut_off_end_with_run_error() {
    let env = setup(json!({})).await;
    env.stub.script(
        UP,
        Script {
            content: Some("half an answer".into()),
            close_after_chunks: Some(2),
            ..Script::default()
        },
    );
    let plan = json!({
        "url": env.app.u("/v1/agents/runner/ag-ui"),
        "headers": {"Authorization": format!("Bearer {}", env.access)},
        "threadId": "thread-cut",
        "runs": [{"add": [user("u1", "talk")]}]
    });
    let report = http_agent(&plan, |_| {}).await;
    let run = &report["runs"][0];
    let events = run["events"].as_array().unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{run}");
    assert_eq!(last["code"], "upstream_error");
    assert!(last["message"]
        .as_str()
        .unwrap()
        .contains("closed the stream"));
    assert_eq!(run["schemaErrors"], json!([]));
    // HttpAgent ends such a run without throwing: what came before the cut
    // is in its messages, the RUN_ERROR went to its subscribers.
    assert_eq!(run["error"], Value::Null);
    assert_eq!(run["newMessages"][0]["content"], "half an ");
}

#[tokio::test]
async fn a_run_input_of_the_body_limit_is_taken_and_one_byte_more_is_413() {
    const LIMIT: usize = 4096;
    let env = Scene::new()
        .settings(|s| s.max_body_bytes = LIMIT)
        .with_model("m-runner", UP)
        .with_agent("runner", json!({"default_tool_mode": "auto"}))
        .user("ann@example.com", "test device")
        .signed_in()
        .await;
    // A body of exactly `size` bytes: the user text pads it.
    let body_of = |size: usize| {
        let mut b = input("t-size", "r-1", json!([user("u1", "")]));
        let bare = serde_json::to_vec(&b).unwrap().len();
        b["messages"][0]["content"] = json!("x".repeat(size - bare));
        let bytes = serde_json::to_vec(&b).unwrap();
        assert_eq!(bytes.len(), size);
        bytes
    };
    let post = |bytes: Vec<u8>| {
        env.app
            .client
            .post(env.app.u("/v1/agents/runner/ag-ui"))
            .bearer_auth(&env.access)
            .header("content-type", "application/json")
            .body(bytes)
            .send()
    };
    let events = events_of(post(body_of(LIMIT)).await.unwrap()).await;
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    let r = post(body_of(LIMIT + 1)).await.unwrap();
    let (status, code, _) = refused(r).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    assert_eq!(env.sent().len(), 1);
}

#[tokio::test]
async fn the_agents_rate_limit_admits_runs_up_to_it_and_refuses_the_next_before_any_event() {
    let env = setup(json!({"limits": {"requests_per_minute": 2}})).await;
    let body = input("t-limit", "r-1", json!([user("u1", "hi")]));
    for _ in 0..2 {
        let r = run(&env, &body, &[]).await;
        assert_eq!(r.headers()["x-ratelimit-limit-requests"], "2");
        // Routing headers as on agent chat.
        assert_eq!(r.headers()["x-gatehouse-provider"], "p-m-runner");
        assert_eq!(r.headers()["x-gatehouse-attempts"], "1");
        events_of(r).await;
    }
    let r = run(&env, &body, &[]).await;
    assert!(r.headers().get("retry-after").is_some());
    let (status, code, _) = refused(r).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    assert_eq!(env.sent().len(), 2);
}

#[tokio::test]
async fn http_agent_gets_the_restored_values_in_its_messages_with_tokenize_reversible() {
    let email = "carol.king@example.com";
    let env = setup(json!({"pii": {"mode": "tokenize_reversible"}})).await;
    // The echo carries the token back, 3 characters an event.
    env.stub.script(
        UP,
        Script {
            chunk_size: 3,
            ..Script::default()
        },
    );
    let text = format!("Write to {email} today");
    let plan = json!({
        "url": env.app.u("/v1/agents/runner/ag-ui"),
        "headers": {"Authorization": format!("Bearer {}", env.access)},
        "threadId": "thread-pii",
        "runs": [{"add": [user("u1", &text)]}]
    });
    let report = http_agent(&plan, |_| {}).await;
    let run = &report["runs"][0];
    assert_eq!(run["error"], Value::Null, "{run}");
    assert_eq!(run["schemaErrors"], json!([]));
    assert_eq!(
        report["messages"][1]["content"],
        format!("echo: {text}"),
        "{report}"
    );
    let pii: Vec<&Value> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "service.pii")
        .collect();
    assert_eq!(pii[0]["value"], json!({"counts": {"email": 1}}));
    assert!(!env.last_sent_text().contains(email));
}
