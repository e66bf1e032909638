//! Approvals in ask mode: which calls need one, how they are announced
//! (plain and streamed answers), deciding them, and what reaches the
//! upstream as the result of an approved, denied or expired call.

use super::*;

/// An env in ask mode whose upstream answers with calls of write_file,
/// read_file and run.
async fn approvals_env(tag: &str, f: impl FnOnce(&mut gatehouse::config::Settings)) -> Scene {
    let env = env_with(tag, json!({"default_tool_mode": "ask"}), f).await;
    env.manifest_ok(&std_manifest()).await;
    script_calls(
        &env,
        vec![
            call("call_w", "write_file", r#"{"path":"a.txt","text":"hi"}"#),
            call("call_r", "read_file", r#"{"path":"b.txt"}"#),
            call("call_x", "run", r#"{"cmd":"ls"}"#),
        ],
    );
    env
}

/// Asks once and returns the approvals of the answer by tool name.
async fn ask(env: &Scene) -> Vec<Value> {
    let (v, _) = env
        .chat_ok(
            "ask",
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    env.stub.unscript(&env.upstream);
    v["approvals"].as_array().expect("approvals").clone()
}

#[tokio::test]
async fn ask_mode_asks_approval_for_write_and_execute_calls_but_not_read_calls() {
    let env = approvals_env("apr", |_| {}).await;
    let before = gatehouse::store::now_ms();
    let (v, _) = env
        .chat_ok(
            "ask",
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    // The answer itself is the upstream's, unchanged.
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3);
    let approvals = v["approvals"].as_array().expect("approvals array");
    assert_eq!(approvals.len(), 2, "{approvals:?}");
    let w = &approvals[0];
    assert_eq!(w["tool_call_id"], "call_w");
    assert_eq!(w["tool"], "write_file");
    assert_eq!(w["arguments"], r#"{"path":"a.txt","text":"hi"}"#);
    assert_eq!(w["status"], "pending");
    assert!(w["id"].as_str().is_some_and(|s| !s.is_empty()));
    let exp = gatehouse::time::parse_rfc3339(w["expires_at"].as_str().unwrap()).unwrap();
    assert!(
        exp >= before + 599_000 && exp <= gatehouse::store::now_ms() + 601_000,
        "expires in the approval TTL (600 s)"
    );
    assert_eq!(approvals[1]["tool_call_id"], "call_x");
    assert_eq!(approvals[1]["tool"], "run");
    assert_ne!(approvals[0]["id"], approvals[1]["id"]);

    let listed = env.admin_get("approvals?status=pending").await;
    let mut ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![
        w["id"].as_str().unwrap(),
        approvals[1]["id"].as_str().unwrap(),
    ];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(env.admin_get("approvals?status=approved").await, json!([]));
}

#[tokio::test]
async fn a_call_of_an_undeclared_tool_needs_approval_in_ask_mode() {
    let env = env("aprund", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    script_calls(&env, vec![call("call_u", "undeclared", "{}")]);
    let (v, _) = env.chat_ok("ask", &chat_body("go", &["undeclared"])).await;
    assert_eq!(v["approvals"][0]["tool"], "undeclared");
}

#[tokio::test]
async fn ask_mode_finds_calls_whatever_the_upstream_escapes_and_passes_call_free_answers_as_sent() {
    let env = env("aprraw", json!({"default_tool_mode": "ask"})).await;
    env.manifest_ok(&std_manifest()).await;
    // A server that escapes its keys still gets its calls approved.
    let escaped = r#"{"id":"c1","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool\u005fcalls":[{"id":"call_e","type":"function","function":{"name":"write_file","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    env.stub.script(
        &env.upstream,
        Script {
            body: Some(escaped.into()),
            ..Script::default()
        },
    );
    let (v, _) = env
        .chat_ok("ask", &chat_body("do it", &["write_file"]))
        .await;
    let approvals = v["approvals"].as_array().expect("approvals");
    assert_eq!(approvals.len(), 1, "{v}");
    assert_eq!(approvals[0]["tool_call_id"], "call_e");

    // An answer without calls goes back as the upstream wrote it, `model` aside.
    let plain = r#"{"id":"c2","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"1.50 done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"x_extra":1.50}"#;
    env.stub.script(
        &env.upstream,
        Script {
            body: Some(plain.into()),
            ..Script::default()
        },
    );
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &chat_body("hi", &["write_file"]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.expect("body");
    assert_eq!(
        text,
        plain.replace(r#""model":"up""#, &format!(r#""model":"{}""#, env.model_id))
    );
}

#[tokio::test]
async fn ask_mode_answer_without_write_calls_carries_no_approvals() {
    let env = env("aprread", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    script_calls(&env, vec![call("call_r", "read_file", "{}")]);
    let (v, _) = env.chat_ok("ask", &chat_body("go", &["read_file"])).await;
    assert!(v.get("approvals").is_none(), "{v}");
    assert_eq!(env.admin_get("approvals").await, json!([]));
}

#[tokio::test]
async fn auto_mode_asks_no_approvals() {
    let env = approvals_env("aprauto", |_| {}).await;
    let (v, _) = env
        .chat_ok(
            "auto",
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    assert!(v.get("approvals").is_none(), "{v}");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(env.admin_get("approvals").await, json!([]));
}

#[tokio::test]
async fn streamed_ask_answer_ends_with_an_approvals_chunk_before_done() {
    let env = approvals_env("aprstream", |_| {}).await;
    let mut body = chat_body("do it", &["read_file", "write_file", "run"]);
    body["stream"] = json!(true);
    let r = env.chat(&[("X-Service-Tool-Mode", "ask")], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    let extra = &chunks[chunks.len() - 2];
    assert_eq!(extra["object"], "chat.completion.chunk");
    assert_eq!(extra["choices"], json!([]));
    let approvals = extra["approvals"].as_array().expect("approvals chunk");
    let tools: Vec<&str> = approvals
        .iter()
        .map(|a| a["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["write_file", "run"]);
    assert_eq!(approvals[0]["tool_call_id"], "call_w");
    assert_eq!(approvals[0]["arguments"], r#"{"path":"a.txt","text":"hi"}"#);
    assert_eq!(approvals[0]["status"], "pending");
    assert!(approvals[0]["expires_at"].is_string());
    let first = &chunks[0];
    assert_eq!(extra["id"], first["id"]);
    assert_eq!(extra["created"], first["created"]);
    assert_eq!(extra["model"], env.model_id.as_str());
    for c in &chunks[..chunks.len() - 2] {
        assert!(c.get("approvals").is_none(), "only the last chunk: {c}");
        assert_eq!(c["model"], env.model_id.as_str());
    }
    // Those approvals are real: they can be answered.
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn streamed_answer_without_approvals_has_no_extra_chunk() {
    let env = approvals_env("aprstreamauto", |_| {}).await;
    let mut body = chat_body("do it", &["read_file", "write_file", "run"]);
    body["stream"] = json!(true);
    let r = env.chat(&[("X-Service-Tool-Mode", "auto")], &body).await;
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    for c in &chunks[..chunks.len() - 1] {
        assert!(c.get("approvals").is_none(), "{c}");
        assert!(!c["choices"].as_array().unwrap().is_empty(), "{c}");
    }
}

#[tokio::test]
async fn an_approval_is_decided_once() {
    let env = approvals_env("aprdecide", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(
            &env.access,
            id,
            &json!({"decision": "approve", "reason": "fine"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], id);
    assert_eq!(v["status"], "approved");
    assert_eq!(v["tool_call_id"], "call_w");
    assert_eq!(v["tool"], "write_file");
    assert!(gatehouse::time::parse_rfc3339(v["decided_at"].as_str().unwrap()).is_some());

    for decision in ["approve", "deny"] {
        let r = env
            .answer(&env.access, id, &json!({"decision": decision}))
            .await;
        expect_error(r, 409, "approval_already_decided").await;
    }
    let listed = env.admin_get("approvals?status=approved").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id);
    let pending = env.admin_get("approvals?status=pending").await;
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["tool"], "run");

    let other = approvals[1]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, other, &json!({"decision": "deny"}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "denied");
    assert_eq!(
        env.admin_get("approvals?status=denied").await[0]["id"],
        other
    );
}

#[tokio::test]
async fn unknown_or_another_users_approval_is_not_found() {
    let env = approvals_env("aprnf", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(
            &env.access,
            "apr_does_not_exist",
            &json!({"decision": "approve"}),
        )
        .await;
    expect_error(r, 404, "approval_not_found").await;

    let (_, bob_login) = env.app.user("bob@example.com").await;
    let (bob, _) = env
        .app
        .sign_in_access(&bob_login, &env.address, "bob-laptop")
        .await;
    let r = env.answer(&bob, id, &json!({"decision": "approve"})).await;
    expect_error(r, 404, "approval_not_found").await;
    // Still pending for its owner.
    let r = env
        .answer(&env.access, id, &json!({"decision": "approve"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_bad_decision_is_a_validation_error() {
    let env = approvals_env("aprbad", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    for body in [
        json!({"decision": "maybe"}),
        json!({}),
        json!({"decision": true}),
    ] {
        let r = env.answer(&env.access, id, &body).await;
        expect_error(r, 400, "validation_error").await;
    }
    let r = env
        .answer(&env.access, id, &json!({"decision": "maybe"}))
        .await;
    let e = expect_error(r, 400, "validation_error").await;
    assert_eq!(e["param"], "decision");
    // Nothing was decided.
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_tool_result_for_a_pending_call_is_refused_with_approval_pending() {
    let env = approvals_env("aprpend", |_| {}).await;
    ask(&env).await;
    let n = env.sent().len();
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "written"),
        )
        .await;
    expect_error(r, 409, "approval_pending").await;
    assert_eq!(env.sent().len(), n, "nothing went upstream");
    // A read call needs no approval: its result passes.
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_r", "read_file", "contents"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), "contents");
}

#[tokio::test]
async fn approvals_bind_to_their_conversation() {
    let env = approvals_env("aprconv", |_| {}).await;
    let in_c1 = [
        ("X-Service-Tool-Mode", "ask"),
        ("X-Service-Conversation-Id", "c1"),
    ];
    let in_c2 = [
        ("X-Service-Tool-Mode", "ask"),
        ("X-Service-Conversation-Id", "c2"),
    ];
    let r = env
        .chat(
            &in_c1,
            &chat_body("do it", &["read_file", "write_file", "run"]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    env.stub.unscript(&env.upstream);
    let w = v["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["tool"] == "write_file")
        .unwrap()
        .clone();
    // Pending in c1: another conversation (or none) with the same call id is not blocked.
    let r = env
        .chat(&in_c2, &tool_result_body("call_w", "write_file", "from c2"))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), "from c2");
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "no conversation"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    expect_error(
        env.chat(&in_c1, &tool_result_body("call_w", "write_file", "x"))
            .await,
        409,
        "approval_pending",
    )
    .await;
    // Denied in c1 decides nothing in c2.
    let r = env
        .answer(
            &env.access,
            w["id"].as_str().unwrap(),
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .chat(
            &in_c1,
            &tool_result_body("call_w", "write_file", "written anyway"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), DENIED_TEXT);
    let r = env
        .chat(
            &in_c2,
            &tool_result_body("call_w", "write_file", "c2 result"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), "c2 result");
}

#[tokio::test]
async fn a_denied_calls_result_reaches_the_upstream_as_the_fixed_text() {
    let env = approvals_env("aprdeny", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "written anyway"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), DENIED_TEXT);
}

#[tokio::test]
async fn an_approved_calls_result_reaches_the_upstream_unchanged() {
    let env = approvals_env("aprok", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, id, &json!({"decision": "approve"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = tool_result_body("call_w", "write_file", "written");
    let r = env.chat(&[("X-Service-Tool-Mode", "ask")], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    let sent = env.last_sent();
    assert_eq!(tool_message_content(&sent), "written");
    assert_eq!(sent["messages"], body["messages"]);
}

#[tokio::test]
async fn an_expired_approval_cannot_be_answered_and_its_result_counts_as_denied() {
    let env = approvals_env("aprexp", |s| s.approval_ttl = 1).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = env
        .answer(&env.access, id, &json!({"decision": "approve"}))
        .await;
    expect_error(r, 409, "approval_expired").await;
    let expired = env.admin_get("approvals?status=expired").await;
    assert_eq!(expired.as_array().unwrap().len(), 2);
    assert_eq!(env.admin_get("approvals?status=pending").await, json!([]));

    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "written"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), DENIED_TEXT);
}

#[tokio::test]
async fn the_approvals_chunk_comes_after_the_usage_chunk_when_usage_is_asked() {
    let env = approvals_env("aprusage", |_| {}).await;
    let mut body = chat_body("do it", &["read_file", "write_file", "run"]);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = env.chat(&[("X-Service-Tool-Mode", "ask")], &body).await;
    let chunks = payloads(&sse_events(r).await);
    let n = chunks.len();
    assert_eq!(chunks[n - 1], json!("[DONE]"));
    assert_eq!(chunks[n - 2]["approvals"].as_array().unwrap().len(), 2);
    assert!(chunks[n - 3]["usage"].is_object(), "{}", chunks[n - 3]);
    assert!(chunks[n - 3].get("approvals").is_none());
}

#[tokio::test]
async fn another_agents_approval_is_not_found() {
    let env = approvals_env("aprother", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let other = env.other_agent().await;
    let r = env
        .app
        .post(
            &format!("/v1/agents/other@acme/approvals/{id}"),
            &other,
            &json!({"decision": "approve"}),
        )
        .await;
    expect_error(r, 404, "approval_not_found").await;
}

/// An admin's decision on `POST /api/admin/agents/{address}/approvals/{id}`.
async fn admin_decide(env: &Scene, id: &str, body: &Value) -> Response {
    env.app
        .post(
            &env.admin_path(&format!("approvals/{id}")),
            &env.admin,
            body,
        )
        .await
}

/// Asserts the `/api` error shape with this status and code.
async fn expect_detail(r: Response, status: u16, code: &str) {
    assert_eq!(r.status().as_u16(), status, "status for {code}");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["detail"]["code"], code, "{v}");
    assert!(v["detail"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn an_admin_decides_a_users_chat_approval_and_the_user_sees_it_decided() {
    let env = approvals_env("apradmin", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = admin_decide(
        &env,
        id,
        &json!({"decision": "approve", "reason": "looks fine"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], id);
    assert_eq!(v["source"], "chat");
    assert_eq!(v["status"], "approved");
    assert_eq!(v["tool_call_id"], "call_w");
    assert_eq!(v["reason"], "looks fine");
    assert!(gatehouse::time::parse_rfc3339(v["decided_at"].as_str().unwrap()).is_some());
    // The user's route now finds it decided.
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    expect_error(r, 409, "approval_already_decided").await;
    // And the approved call's result reaches the upstream unchanged.
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_w", "write_file", "written"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), "written");

    // A denial by the admin: the result becomes the fixed text.
    let other = approvals[1]["id"].as_str().unwrap();
    let r = admin_decide(&env, other, &json!({"decision": "deny"})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "denied");
    let r = env
        .chat(
            &[("X-Service-Tool-Mode", "ask")],
            &tool_result_body("call_x", "run", "ran"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_message_content(&env.last_sent()), DENIED_TEXT);
}

#[tokio::test]
async fn an_admins_decision_is_taken_once_and_user_decisions_count() {
    let env = approvals_env("apradm409", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .answer(&env.access, id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    for decision in ["approve", "deny"] {
        let r = admin_decide(&env, id, &json!({"decision": decision})).await;
        expect_detail(r, 409, "approval_already_decided").await;
    }
    let listed = env.admin_get("approvals?status=denied").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id);
}

#[tokio::test]
async fn an_admin_cannot_decide_an_expired_approval() {
    let env = approvals_env("apradmexp", |s| s.approval_ttl = 1).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = admin_decide(&env, id, &json!({"decision": "approve"})).await;
    expect_detail(r, 409, "approval_expired").await;
    assert_eq!(
        env.admin_get("approvals?status=expired").await[0]["source"],
        "chat"
    );
}

#[tokio::test]
async fn an_admin_decision_on_an_unknown_or_other_agents_approval_is_not_found() {
    let env = approvals_env("apradm404", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = admin_decide(&env, "apr_nope", &json!({"decision": "approve"})).await;
    expect_detail(r, 404, "approval_not_found").await;
    env.other_agent().await;
    let r = env
        .app
        .post(
            &format!("/api/admin/agents/other@acme/approvals/{id}"),
            &env.admin,
            &json!({"decision": "approve"}),
        )
        .await;
    expect_detail(r, 404, "approval_not_found").await;
    let r = env
        .app
        .post(
            &format!("/api/admin/agents/nobody@acme/approvals/{id}"),
            &env.admin,
            &json!({"decision": "approve"}),
        )
        .await;
    expect_detail(r, 404, "agent_not_found").await;
    // Still pending on its own agent.
    assert_eq!(
        env.admin_get("approvals?status=pending")
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn only_admins_decide_on_the_admin_route_and_bad_decisions_are_refused() {
    let env = approvals_env("apradmbad", |_| {}).await;
    let approvals = ask(&env).await;
    let id = approvals[0]["id"].as_str().unwrap();
    let r = env
        .app
        .post(
            &env.admin_path(&format!("approvals/{id}")),
            &env.login,
            &json!({"decision": "approve"}),
        )
        .await;
    expect_detail(r, 403, "forbidden").await;
    for body in [json!({"decision": "maybe"}), json!({})] {
        expect_detail(admin_decide(&env, id, &body).await, 400, "validation_error").await;
    }
    let long = "x".repeat(1001);
    let r = admin_decide(&env, id, &json!({"decision": "deny", "reason": long})).await;
    expect_detail(r, 400, "validation_error").await;
    // A reason at the limit passes.
    let r = admin_decide(
        &env,
        id,
        &json!({"decision": "deny", "reason": "x".repeat(1000)}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn listed_chat_approvals_carry_their_source() {
    let env = approvals_env("aprsource", |_| {}).await;
    ask(&env).await;
    let listed = env.admin_get("approvals").await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2);
    for a in listed {
        assert_eq!(a["source"], "chat", "{a}");
        assert_eq!(a["server"], Value::Null, "{a}");
        assert!(a["tool_call_id"].is_string(), "{a}");
    }
}
