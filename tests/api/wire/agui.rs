//! AG-UI events on streamed agent chat (`X-Service-Events: ag-ui`), end to
//! end against the stub upstream: text, parallel tool calls, held tools,
//! approvals, PII counts, failures. Every run's events are checked here for
//! order and content, and by the protocol's own packages (@ag-ui/core
//! schemas, @ag-ui/client verifyEvents) through tests/agui/validate.mjs.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use common::agent_chat::*;
use common::models::*;
use common::scene::Scene;
use common::stub::tool_call;
use gatehouse::wire::sse::SseEvent;
use gatehouse_stub_upstream::{Script, ScriptToolCall};
use reqwest::StatusCode;
use serde_json::{json, Value};

const AG_UI: (&str, &str) = ("X-Service-Events", "ag-ui");

fn user(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

/// tests/agui, its packages (@ag-ui/core, @ag-ui/client) installed.
pub(super) fn agui_dir() -> PathBuf {
    static NPM: Mutex<()> = Mutex::new(());
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agui");
    let _guard = NPM.lock().unwrap_or_else(|e| e.into_inner());
    if !dir.join("node_modules/@ag-ui/client").exists() {
        let st = Command::new("npm")
            .args(["ci", "--silent"])
            .current_dir(&dir)
            .status()
            .expect("npm runs");
        assert!(st.success(), "npm ci in tests/agui failed");
    }
    dir
}

/// Runs the protocol's validator on the runs; asserts all of them passed.
pub(super) fn validate(runs: &[(&str, &[Value])]) {
    let dir = agui_dir();
    let doc: Vec<Value> = runs
        .iter()
        .map(|(name, events)| json!({"name": name, "events": events}))
        .collect();
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = Command::new("node")
        .arg("validate.mjs")
        .arg(file.path())
        .current_dir(&dir)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "validator failed:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        serde_json::to_string_pretty(&doc).unwrap()
    );
    assert!(
        stdout.contains(&format!("{} passed, 0 failed", runs.len())),
        "{stdout}"
    );
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

fn custom<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == name)
        .collect()
}

/// The common rules of a run that ended normally: RUN_STARTED is the first
/// SSE message, RUN_FINISHED the last event, the OpenAI chunks keep their
/// shape and the stream ends with [DONE]. Returns the AG-UI events.
fn check_finished_run(sse: &[SseEvent], thread: Option<&str>, run: Option<&str>) -> Vec<Value> {
    assert_eq!(
        sse[0].event.as_deref(),
        Some("ag-ui"),
        "first message is an event"
    );
    assert!(sse
        .iter()
        .all(|e| e.event.is_none() || e.event.as_deref() == Some("ag-ui")));
    let events = agui_events(sse);
    let first = &events[0];
    assert_eq!(first["type"], "RUN_STARTED");
    let (t, r) = (
        first["threadId"].as_str().unwrap(),
        first["runId"].as_str().unwrap(),
    );
    assert!(!t.is_empty() && !r.is_empty());
    if let Some(thread) = thread {
        assert_eq!(t, thread);
    }
    if let Some(run) = run {
        assert_eq!(r, run);
    }
    assert_eq!(
        types(&events)
            .iter()
            .filter(|x| **x == "RUN_STARTED")
            .count(),
        1
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(
        (last["threadId"].as_str(), last["runId"].as_str()),
        (Some(t), Some(r))
    );
    assert!(last["usage"].is_array(), "usage on RUN_FINISHED: {last}");
    assert!(of_type(&events, "RUN_ERROR").is_empty());
    for e in &events {
        assert!(e["timestamp"].is_i64(), "{e}");
    }
    check_chunks(sse, true);
    events
}

/// Every plain data message is a chat.completion.chunk (or the approvals
/// chunk, or an error when `ok` is false), and the stream ends with [DONE].
fn check_chunks(sse: &[SseEvent], ok: bool) {
    let data = data_messages(sse);
    assert_eq!(sse.last().unwrap().event, None);
    assert_eq!(data.last(), Some(&json!("[DONE]")));
    for c in &data[..data.len() - 1] {
        if !ok && c.get("error").is_some() {
            continue;
        }
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        assert!(
            c["id"].is_string() && c["created"].is_u64() && c["model"].is_string(),
            "{c}"
        );
        let choices = c["choices"].as_array().expect("choices");
        if choices.is_empty() {
            assert!(
                c["approvals"].is_array(),
                "only the approvals chunk has no choices: {c}"
            );
        }
    }
}

/// Data payloads without what differs from run to run (id, created).
fn shape(sse: &[SseEvent]) -> Vec<Value> {
    data_messages(sse)
        .into_iter()
        .map(|mut c| {
            if let Some(o) = c.as_object_mut() {
                o.remove("id");
                o.remove("created");
            }
            c
        })
        .collect()
}

/// The common scene with agent `helper` (auto tool mode unless `extra` says
/// otherwise) on upstream `up-agui`, and ann@example.com's access token.
async fn setup(extra: Value) -> (Scene, String) {
    let mut extra = extra;
    if extra.get("default_tool_mode").is_none() {
        extra["default_tool_mode"] = json!("auto");
    }
    let env = agent_scene("helper", "up-agui", extra, "ann@example.com").await;
    let token = env.access.clone();
    (env, token)
}

#[tokio::test]
async fn a_text_answer_is_a_run_with_one_message_and_the_chunks_are_unchanged() {
    let (env, token) = setup(json!({})).await;
    env.stub.script(
        "up-agui",
        Script {
            content: Some("Hello there, how can I help you today?".into()),
            chunk_size: 5,
            usage: Some((12, 9)),
            ..Script::default()
        },
    );
    let headers = [
        AG_UI,
        ("X-Service-Conversation-Id", "conv:42"),
        ("X-Service-Turn-Id", "turn-7"),
    ];
    let body = user("hi");
    let with = chat_stream(&env, "helper", &token, &body, &headers).await;
    let events = check_finished_run(&with, Some("conv:42"), Some("turn-7"));
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
    let start = &events[1];
    assert_eq!(start["role"], "assistant");
    let text: String = of_type(&events, "TEXT_MESSAGE_CONTENT")
        .iter()
        .map(|e| {
            assert_eq!(e["messageId"], start["messageId"]);
            e["delta"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, "Hello there, how can I help you today?");
    assert_eq!(content_of(&data_messages(&with)), text);
    assert_eq!(
        events.last().unwrap()["usage"],
        json!([{"model": "m-helper", "inputTokens": 12, "outputTokens": 9, "totalTokens": 21}])
    );

    // Without the header: no `event:` lines, the same chunks.
    let r = chat(
        &env,
        "helper",
        &token,
        &json!({"messages": [{"role": "user", "content": "hi"}], "stream": true}),
        &headers[1..],
    )
    .await;
    let raw = r.text().await.unwrap();
    assert!(!raw.contains("event:"), "{raw}");
    let mut parser = gatehouse::wire::sse::SseParser::new();
    parser.push(raw.as_bytes());
    let mut without = vec![];
    while let Some(e) = parser.next_event() {
        without.push(e);
    }
    without.extend(parser.finish());
    assert!(without.iter().all(|e| e.event.is_none()));
    assert_eq!(shape(&with), shape(&without));

    // A second run in the same conversation: same thread, new run.
    let again = chat_stream(
        &env,
        "helper",
        &token,
        &body,
        &[
            AG_UI,
            ("X-Service-Conversation-Id", "conv:42"),
            ("X-Service-Turn-Id", "turn-8"),
        ],
    )
    .await;
    let events2 = check_finished_run(&again, Some("conv:42"), Some("turn-8"));
    validate(&[("text", &events), ("text again", &events2)]);
}

#[tokio::test]
async fn thread_and_run_ids_are_generated_when_the_headers_are_absent() {
    let (env, token) = setup(json!({})).await;
    let a = chat_stream(&env, "helper", &token, &user("one"), &[AG_UI]).await;
    let b = chat_stream(&env, "helper", &token, &user("two"), &[AG_UI]).await;
    let ea = check_finished_run(&a, None, None);
    let eb = check_finished_run(&b, None, None);
    assert_ne!(ea[0]["threadId"], eb[0]["threadId"]);
    assert_ne!(ea[0]["runId"], eb[0]["runId"]);
    assert_ne!(ea[0]["threadId"], ea[0]["runId"]);
    // Only the conversation id given: the thread is it, the run is generated.
    let c = chat_stream(
        &env,
        "helper",
        &token,
        &user("three"),
        &[AG_UI, ("X-Service-Conversation-Id", "c1")],
    )
    .await;
    let ec = check_finished_run(&c, Some("c1"), None);
    assert_eq!(content_of(&data_messages(&c)), "echo: three");
    validate(&[
        ("generated a", &ea),
        ("generated b", &eb),
        ("thread only", &ec),
    ]);
}

fn two_calls() -> Vec<ScriptToolCall> {
    vec![
        tool_call(
            "call_weather",
            "get_weather",
            r#"{"city":"Paris","unit":"celsius"}"#,
        ),
        tool_call("call_time", "get_time", r#"{"tz":"Europe/Paris"}"#),
    ]
}

#[tokio::test]
async fn parallel_tool_calls_each_start_carry_their_arguments_and_end() {
    let (env, token) = setup(json!({})).await;
    env.stub.script(
        "up-agui",
        Script {
            tool_calls: two_calls(),
            chunk_size: 3,
            ..Script::default()
        },
    );
    let sse = chat_stream(&env, "helper", &token, &user("weather?"), &[AG_UI]).await;
    let events = check_finished_run(&sse, None, None);
    assert!(
        of_type(&events, "TEXT_MESSAGE_START").is_empty(),
        "no text, no message"
    );
    let starts = of_type(&events, "TOOL_CALL_START");
    assert_eq!(starts.len(), 2);
    for (start, call) in starts.iter().zip(two_calls()) {
        assert_eq!(start["toolCallId"], call.id.as_str());
        assert_eq!(start["toolCallName"], call.name.as_str());
        let args: String = of_type(&events, "TOOL_CALL_ARGS")
            .iter()
            .filter(|e| e["toolCallId"] == call.id.as_str())
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(args, call.arguments);
        let ends = of_type(&events, "TOOL_CALL_END");
        assert_eq!(
            ends.iter()
                .filter(|e| e["toolCallId"] == call.id.as_str())
                .count(),
            1
        );
    }
    let calls = tool_calls_of(&data_messages(&sse));
    assert_eq!(
        calls[1],
        (
            "call_time".into(),
            "get_time".into(),
            r#"{"tz":"Europe/Paris"}"#.into()
        )
    );

    // Text and a tool call in one answer.
    env.stub.script(
        "up-agui",
        Script {
            content: Some("Let me look that up.".into()),
            tool_calls: two_calls()[..1].to_vec(),
            ..Script::default()
        },
    );
    let sse2 = chat_stream(&env, "helper", &token, &user("weather?"), &[AG_UI]).await;
    let events2 = check_finished_run(&sse2, None, None);
    let start = of_type(&events2, "TOOL_CALL_START")[0];
    assert_eq!(
        start["parentMessageId"],
        of_type(&events2, "TEXT_MESSAGE_START")[0]["messageId"]
    );
    validate(&[
        ("two tool calls", &events),
        ("text and a tool call", &events2),
    ]);
}

#[tokio::test]
async fn held_tools_are_announced_after_the_run_starts() {
    let (env, token) = setup(json!({"tool_contract": ["search"]})).await;
    let tool = |name: &str| json!({"type": "function", "function": {"name": name, "description": "d", "parameters": {"type": "object", "properties": {}}}});
    let mut body = user("find it");
    body["tools"] = json!([tool("search"), tool("delete_all"), tool("run_shell")]);
    body["stream"] = json!(true);
    let r = chat(&env, "helper", &token, &body, &[AG_UI]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-service-held-tools"], "delete_all,run_shell");
    let sse = sse_events(r).await;
    let events = check_finished_run(&sse, None, None);
    assert_eq!(events[1]["type"], "CUSTOM");
    assert_eq!(events[1]["name"], "service.held_tools");
    assert_eq!(
        events[1]["value"],
        json!({"tools": ["delete_all", "run_shell"]})
    );
    assert_eq!(custom(&events, "service.held_tools").len(), 1);
    let sent = &env.stub.requests_for_model("up-agui")[0].body;
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);

    // Nothing held: no event.
    body["tools"] = json!([tool("search")]);
    let sse2 = chat_stream(&env, "helper", &token, &body, &[AG_UI]).await;
    let events2 = check_finished_run(&sse2, None, None);
    assert!(custom(&events2, "service.held_tools").is_empty());
    validate(&[("held tools", &events), ("none held", &events2)]);
}

#[tokio::test]
async fn approvals_are_announced_before_the_run_finishes() {
    let (env, token) = setup(json!({"default_tool_mode": "ask"})).await;
    let r = env
        .app
        .put(
            "/v1/agents/helper/manifest",
            &token,
            &json!({"app_name": "t", "app_version": "1", "sdk": "rust", "tools": [
                {"name": "get_weather", "description": "w", "parameters": {"type": "object"}, "class": "read"},
                {"name": "send_mail", "description": "m", "parameters": {"type": "object"}, "class": "write"}
            ]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    env.stub.script(
        "up-agui",
        Script {
            content: Some("Sending.".into()),
            tool_calls: vec![
                two_calls()[0].clone(),
                tool_call("call_mail", "send_mail", r#"{"to":"team"}"#),
            ],
            ..Script::default()
        },
    );
    let sse = chat_stream(&env, "helper", &token, &user("mail the team"), &[AG_UI]).await;
    let events = check_finished_run(&sse, None, None);
    let asked = custom(&events, "service.approval_requested");
    assert_eq!(asked.len(), 1, "only the write tool needs one");
    let v = &asked[0]["value"];
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["expires_at", "id", "tool", "tool_call_id"]);
    assert_eq!(v["tool"], "send_mail");
    assert_eq!(v["tool_call_id"], "call_mail");
    // After both tool calls ended, just before RUN_FINISHED.
    let n = events.len();
    assert_eq!(events[n - 2]["name"], "service.approval_requested");
    let mail_end = events
        .iter()
        .position(|e| e["type"] == "TOOL_CALL_END" && e["toolCallId"] == "call_mail")
        .unwrap();
    assert!(mail_end < n - 2);

    // The approvals chunk is the last before [DONE] and names the same approval.
    let data = data_messages(&sse);
    let chunk = &data[data.len() - 2];
    assert_eq!(chunk["choices"], json!([]));
    assert_eq!(chunk["approvals"][0]["id"], v["id"]);
    assert_eq!(chunk["approvals"][0]["expires_at"], v["expires_at"]);
    assert_eq!(chunk["id"], data[0]["id"]);
    // The AG-UI events come before it: nothing of AG-UI after RUN_FINISHED.
    let fin = sse
        .iter()
        .position(|e| e.event.is_some() && e.data.contains("RUN_FINISHED"))
        .unwrap();
    assert!(sse[fin + 1..].iter().all(|e| e.event.is_none()));
    validate(&[("approval", &events)]);
}

#[tokio::test]
async fn pii_counts_are_announced_and_no_value_is_in_any_event() {
    let email = "carol.king@example.com";
    let phone = "+44 20 7946 0958";
    let (env, token) = setup(json!({"pii": {"mode": "redact", "terms": ["Nightingale"]}})).await;
    let text = format!("Mail {email}, cc {email}, call {phone} about Nightingale");
    let sse = chat_stream(&env, "helper", &token, &user(&text), &[AG_UI]).await;
    let events = check_finished_run(&sse, None, None);
    let pii = custom(&events, "service.pii");
    assert_eq!(pii.len(), 1);
    assert_eq!(
        pii[0]["value"],
        json!({"counts": {"email": 2, "phone": 1, "term": 1}})
    );
    assert_eq!(events[1]["name"], "service.pii", "announced at the start");
    for e in &sse {
        for v in [email, phone, "Nightingale"] {
            assert!(!e.data.contains(v), "{v} in {}", e.data);
        }
    }
    // tokenize_reversible: counts too; the events carry the tokens, never the values
    // (the OpenAI chunks of the same stream carry the restored text).
    let r = env
        .app
        .patch(
            "/api/admin/agents/helper",
            &env.admin,
            &json!({"pii": {"mode": "tokenize_reversible", "terms": ["Nightingale"]}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let sse2 = chat_stream(&env, "helper", &token, &user(&text), &[AG_UI]).await;
    let events2 = check_finished_run(&sse2, None, None);
    assert_eq!(
        custom(&events2, "service.pii")[0]["value"],
        json!({"counts": {"email": 2, "phone": 1, "term": 1}})
    );
    let said: String = of_type(&events2, "TEXT_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(
        said.contains("[EMAIL_1]") && said.contains("[TERM_1]"),
        "{said}"
    );
    for v in [email, phone, "Nightingale"] {
        assert!(!said.contains(v), "{v} reached an AG-UI event: {said}");
    }
    validate(&[("pii redact", &events), ("pii tokenize", &events2)]);
}

#[tokio::test]
async fn an_upstream_failure_mid_stream_ends_the_run_with_run_error() {
    let (env, token) = setup(json!({})).await;
    env.stub.script(
        "up-agui",
        Script {
            content: Some("a long answer that will not finish".into()),
            close_after_chunks: Some(2),
            ..Script::default()
        },
    );
    let sse = chat_stream(
        &env,
        "helper",
        &token,
        &user("x"),
        &[AG_UI, ("X-Service-Turn-Id", "t-err")],
    )
    .await;
    check_chunks(&sse, false);
    let events = agui_events(&sse);
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_eq!(events[0]["runId"], "t-err");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{events:?}");
    assert_eq!(last["code"], "upstream_error");
    assert!(last["message"]
        .as_str()
        .unwrap()
        .contains("closed the stream"));
    assert!(of_type(&events, "RUN_FINISHED").is_empty());
    // The open message was ended before the error.
    assert_eq!(events[events.len() - 2]["type"], "TEXT_MESSAGE_END");
    let data = data_messages(&sse);
    assert_eq!(data[data.len() - 2]["error"]["code"], "upstream_error");
    // The RUN_ERROR event comes before the error chunk; nothing AG-UI after it.
    let err_at = sse
        .iter()
        .position(|e| e.data.contains("RUN_ERROR"))
        .unwrap();
    assert!(sse[err_at + 1..].iter().all(|e| e.event.is_none()));

    // Cut before any content.
    env.stub.script(
        "up-agui",
        Script {
            content: Some("never".into()),
            close_after_chunks: Some(0),
            ..Script::default()
        },
    );
    let sse2 = chat_stream(&env, "helper", &token, &user("x"), &[AG_UI]).await;
    let events2 = agui_events(&sse2);
    assert_eq!(types(&events2), ["RUN_STARTED", "RUN_ERROR"]);
    validate(&[("cut mid-way", &events), ("cut at once", &events2)]);
}

#[tokio::test]
async fn events_read_with_the_upstream_failure_are_described_before_run_error() {
    let (env, token) = setup(json!({})).await;
    let mut runs = vec![];
    // The role chunk, "one ", "two " and the drop in one read; then with
    // 0.2 s between events, "two " and the drop in one read.
    for interval in [0, 200] {
        env.stub.script(
            "up-agui",
            Script {
                content: Some("one two three".into()),
                close_after_chunks: Some(2),
                close_with_last_chunk: true,
                chunk_interval_ms: interval,
                ..Script::default()
            },
        );
        let sse = chat_stream(&env, "helper", &token, &user("x"), &[AG_UI]).await;
        check_chunks(&sse, false);
        let events = agui_events(&sse);
        assert_eq!(
            types(&events),
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_ERROR"
            ],
            "{interval} ms: {events:?}"
        );
        let said: Vec<&str> = of_type(&events, "TEXT_MESSAGE_CONTENT")
            .iter()
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(said, ["one ", "two "]);
        assert_eq!(events[5]["code"], "upstream_error");
        let data = data_messages(&sse);
        assert_eq!(content_of(&data), "one two ");
        assert_eq!(data[data.len() - 2]["error"]["code"], "upstream_error");
        runs.push(events);
    }
    validate(&[
        ("cut in one read", &runs[0]),
        ("cut with the last event", &runs[1]),
    ]);
}

#[tokio::test]
async fn an_upstream_error_before_the_stream_is_an_http_error_without_events() {
    let (env, token) = setup(json!({})).await;
    env.stub.script(
        "up-agui",
        Script {
            status: Some(500),
            error_message: Some("model crashed".into()),
            ..Script::default()
        },
    );
    let mut body = user("x");
    body["stream"] = json!(true);
    let r = chat(&env, "helper", &token, &body, &[AG_UI]).await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let text = r.text().await.unwrap();
    assert!(!text.contains("event:") && !text.contains("RUN_"), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "upstream_error");
    assert_eq!(v["error"]["message"], "model crashed");
}

#[tokio::test]
async fn a_plain_answer_ignores_the_header() {
    let (env, token) = setup(json!({})).await;
    env.stub.script(
        "up-agui",
        Script {
            content: Some("plain".into()),
            tool_calls: two_calls(),
            ..Script::default()
        },
    );
    let strip = |mut v: Value| {
        let o = v.as_object_mut().unwrap();
        o.remove("id");
        o.remove("created");
        v
    };
    let with = chat(&env, "helper", &token, &user("x"), &[AG_UI]).await;
    assert!(with.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let with: Value = with.json().await.unwrap();
    let without = chat_json(&env, "helper", &token, &user("x"), &[]).await;
    assert_eq!(strip(with), strip(without));

    // A bad value of the header is refused.
    let r = chat(
        &env,
        "helper",
        &token,
        &user("x"),
        &[("X-Service-Events", "sse")],
    )
    .await;
    let (status, err) = v1_error(r).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["code"], "invalid_header");
}
