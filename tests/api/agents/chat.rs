//! Agent chat (`/v1/agents/{agent}/chat/completions`): the X-Service-*
//! headers, what reaches the upstream (the agent's model, instructions),
//! usage records, the route's path, and tokens of another agent.

use super::*;

#[tokio::test]
async fn bad_service_header_values_are_invalid_header_naming_the_header() {
    let env = env(
        "hdr",
        json!({"pii": {"mode": "off", "user_choosable": true}}),
    )
    .await;
    let long = "c".repeat(129);
    for (name, value) in [
        ("X-Service-Tool-Mode", "sometimes"),
        ("X-Service-Tool-Mode", "ASK"),
        ("X-Service-Conversation-Id", long.as_str()),
        ("X-Service-Conversation-Id", "has space"),
        ("X-Service-Conversation-Id", "a/b"),
        ("X-Service-Turn-Id", long.as_str()),
        ("X-Service-Turn-Id", "t@1"),
        ("X-Service-PII-Mode", "everything"),
        ("X-Service-Events", "all"),
    ] {
        let r = env.chat(&[(name, value)], &chat_body("hi", &[])).await;
        let e = expect_error(r, 400, "invalid_header").await;
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains(&name.to_lowercase()),
            "the message names {name}: {e}"
        );
    }
    assert!(env.sent().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn conversation_and_turn_ids_of_128_characters_are_accepted() {
    let env = env("hdrok", json!({})).await;
    let id = format!("{}:_.-9", "c".repeat(123));
    assert_eq!(id.len(), 128);
    let r = env
        .chat(
            &[
                ("X-Service-Conversation-Id", &id),
                ("X-Service-Turn-Id", &id),
            ],
            &chat_body("hi", &[]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .chat(
            &[("X-Service-Conversation-Id", &format!("{id}x"))],
            &chat_body("hi", &[]),
        )
        .await;
    expect_error(r, 400, "invalid_header").await;
}

#[tokio::test]
async fn pii_mode_header_is_refused_when_the_agent_does_not_let_the_user_choose() {
    let env = env(
        "hdrpii",
        json!({"pii": {"mode": "redact", "user_choosable": false}}),
    )
    .await;
    for value in ["redact", "tokenize_reversible"] {
        let r = env
            .chat(&[("X-Service-PII-Mode", value)], &chat_body("hi", &[]))
            .await;
        expect_error(r, 400, "pii_mode_not_allowed").await;
    }
    assert!(env.sent().is_empty());
}

#[tokio::test]
async fn pii_mode_header_is_taken_when_the_agent_lets_the_user_choose() {
    let env = env(
        "hdrpiiok",
        json!({"pii": {"mode": "off", "user_choosable": true}}),
    )
    .await;
    let r = env
        .chat(
            &[("X-Service-PII-Mode", "redact")],
            &chat_body("mail me at jane.doe@example.com", &[]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        env.last_sent()["messages"][0]["content"],
        "mail me at [EMAIL]"
    );
}

#[tokio::test]
async fn the_agents_model_replaces_the_clients_and_instructions_come_first() {
    let env = env(
        "model",
        json!({"instructions": "You are the ACME support agent."}),
    )
    .await;
    let mut body = chat_body("hello", &[]);
    body["messages"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"role": "system", "content": "client system"}));
    body["temperature"] = json!(0.5);
    body["x_vendor"] = json!({"k": 1});
    let (v, _) = env.chat_ok("auto", &body).await;
    assert_eq!(v["model"], env.model_id.as_str());
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hello");

    let sent = env.last_sent();
    assert_eq!(sent["model"], env.upstream.as_str());
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "system", "content": "You are the ACME support agent."},
            {"role": "system", "content": "client system"},
            {"role": "user", "content": "hello"}
        ])
    );
    assert_eq!(sent["temperature"], 0.5);
    assert_eq!(sent["x_vendor"], json!({"k": 1}));

    // Streamed too.
    body["stream"] = json!(true);
    let r = env.chat(&[], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    let chunks = payloads(&sse_events(r).await);
    for c in &chunks[..chunks.len() - 1] {
        assert_eq!(c["model"], env.model_id.as_str());
    }
    assert_eq!(env.last_sent()["model"], env.upstream.as_str());
}

#[tokio::test]
async fn without_pii_protection_each_field_reaches_the_upstream_as_the_client_wrote_it() {
    let env = env("fieldstext", json!({"instructions": "Be \"brief\"."})).await;
    env.manifest_ok(&std_manifest()).await;
    // Spellings a JSON tree would not keep: a float's, an escape, white space
    // inside a value.
    let text = r#"{ "model" : "m", "temperature": 0.50,
        "messages": [ {"role":"user", "content":"h\u00e9 \"q\""} ],
        "x_vendor": {"n": [1.0, 2e2]},
        "tools": [{"type":"function","function":{"name":"read_file"}},{"type":"function","function":{"name":"run"}}],
        "tool_choice": {"type":"function","function":{"name":"run"}} }"#;
    let r = chat_raw(&env, "read_only", text).await;
    assert_eq!(r.status(), StatusCode::OK);
    let raw = env.last_sent_text();
    for written in [
        r#""temperature":0.50"#,
        r#""x_vendor":{"n": [1.0, 2e2]}"#,
        r#"{"role":"user", "content":"h\u00e9 \"q\""}"#,
        r#""tools":[{"type":"function","function":{"name":"read_file"}}]"#,
    ] {
        assert!(raw.contains(written), "{written} in {raw}");
    }
    let sent: Value = serde_json::from_str(&raw).expect("JSON");
    assert_eq!(sent["model"], env.upstream.as_str());
    assert_eq!(
        sent["messages"],
        json!([{"role": "system", "content": "Be \"brief\"."},
               {"role": "user", "content": "h\u{e9} \"q\""}])
    );
    // The tool choice named a tool the rules took out.
    assert!(sent.get("tool_choice").is_none(), "{sent}");
}

#[tokio::test]
async fn without_instructions_the_messages_go_up_unchanged() {
    let env = env("modelnoinst", json!({})).await;
    let body = chat_body("hello", &[]);
    env.chat_ok("auto", &body).await;
    assert_eq!(env.last_sent()["messages"], body["messages"]);
}

#[tokio::test]
async fn the_usage_record_of_an_agent_chat_keeps_conversation_and_turn_ids() {
    let env = env("usage", json!({})).await;
    let r = env
        .chat(
            &[
                ("X-Service-Conversation-Id", "conv-42"),
                ("X-Service-Turn-Id", "turn:7"),
            ],
            &chat_body("hi", &[]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let pool = env.app.app().store.pool.clone();
    let address = env.address.clone();
    let row: (Option<String>, Option<String>, Option<String>, Option<String>, String) =
        poll(10, || {
            let pool = pool.clone();
            let address = address.clone();
            async move {
                sqlx::query_as(
                    "SELECT conversation_id, turn_id, device_id, user_id, model FROM usage_records WHERE agent = $1",
                )
                .bind(address)
                .fetch_optional(&pool)
                .await
                .expect("query")
            }
        })
        .await;
    assert_eq!(row.0.as_deref(), Some("conv-42"));
    assert_eq!(row.1.as_deref(), Some("turn:7"));
    assert_eq!(row.2.as_deref(), Some(env.device_id.as_str()));
    assert!(row.3.is_some());
    assert_eq!(row.4, env.model_id);
}

/// Agent chat is served before the router (`http::Dispatch`): the agent in
/// its path is percent-decoded as the router's routes decode it, and a path
/// or method the route does not take is answered as the router answers it.
#[tokio::test]
async fn agent_chat_path_is_decoded_and_near_misses_are_answered_as_by_the_router() {
    let env = env("dispatch", json!({})).await;
    let post = |path: String| {
        env.app
            .client
            .post(env.app.u(&path))
            .bearer_auth(&env.access)
            .json(&chat_body("hi", &[]))
            .send()
    };
    let encoded = env.address.replace('@', "%40");
    let r = post(format!("/v1/agents/{encoded}/chat/completions"))
        .await
        .expect("chat");
    assert_eq!(r.status(), StatusCode::OK, "a percent-encoded agent");
    // Not UTF-8 once decoded: it names no agent, so not this token's.
    let r = post("/v1/agents/%FF/chat/completions".into())
        .await
        .expect("chat");
    expect_error(r, 403, "agent_mismatch").await;
    // The agent decodes, another parameter does not: that one's own error.
    let r = env
        .app
        .client
        .post(env.app.u(&format!("/v1/agents/{encoded}/approvals/%FF")))
        .bearer_auth(&env.access)
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .expect("post");
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "an approval id that does not decode"
    );
    for path in [
        format!("/v1/agents/{}/chat/completions/", env.address),
        format!("/v1/agents/{}/chat/completion", env.address),
    ] {
        let r = post(path.clone()).await.expect("post");
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let r = env
        .app
        .client
        .get(env.app.u(&env.path("chat/completions")))
        .bearer_auth(&env.access)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "method_not_allowed");
    assert_eq!(
        env.stub.requests_for_model(&env.upstream).len(),
        1,
        "only the first reached the upstream"
    );
}

#[tokio::test]
async fn agent_routes_refuse_another_agents_token() {
    let env = env("mismatch", json!({})).await;
    let other = env.other_agent().await;
    let r = env.put_manifest_as(&other, &std_manifest()).await;
    expect_error(r, 403, "agent_mismatch").await;
    let r = env.post_events_as(&other, &events(1, "x")).await;
    expect_error(r, 403, "agent_mismatch").await;
    let r = env.chat_as(&other, &[], &chat_body("hi", &[])).await;
    expect_error(r, 403, "agent_mismatch").await;
    let r = env
        .app
        .put(&env.path("manifest"), &env.login, &std_manifest())
        .await;
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "a login token is not an access token"
    );
}
