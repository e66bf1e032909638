//! `POST /v1/agents/{agent}/responses`: the agent's model and instructions,
//! built-in tools removed, tool modes and approvals on function and custom
//! calls, and PII protection with restore in Responses shapes.

use super::*;
use common::agent_chat::{agent, sign_in};

const EMAIL: &str = "jane.doe@example.com";

fn path(address: &str) -> String {
    format!("/v1/agents/{address}/responses")
}

#[tokio::test]
async fn the_agent_route_uses_the_agents_model_and_instructions_and_removes_built_in_tools() {
    let env = env().await;
    agent(
        &env,
        "rbot",
        "up-rbot",
        json!({"instructions": "You are the repo bot.", "default_tool_mode": "auto"}),
    )
    .await;
    let token = sign_in(&env, "ann@example.com", "rbot").await;
    let body = json!({"model": "whatever", "instructions": "client says", "input": "hi",
        "tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"}, {"type": "namespace", "name": "ns"}],
        "tool_choice": {"type": "web_search"}});
    let r = post_responses(&env, &path("rbot"), &token, &body, &[]).await;
    assert_eq!(r.headers()["x-gatehouse-dropped-tools"], "web_search,ns");
    let v = json_ok(r).await;
    assert_eq!(v["model"], "m-rbot");
    assert_eq!(v["output"][0]["content"][0]["text"], "echo: hi");
    let sent = &env.stub.requests_for_model("up-rbot")[0].body;
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "You are the repo bot."})
    );
    assert_eq!(
        sent["messages"][1],
        json!({"role": "system", "content": "client says"})
    );
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
    assert!(
        sent.get("tool_choice").is_none(),
        "a tool_choice naming a removed tool is dropped"
    );

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let evs = stream_of(
        post_responses(
            &env,
            &path("rbot"),
            &token,
            &streamed,
            &[("X-Service-Events", "ag-ui")],
        )
        .await,
    )
    .await;
    assert_eq!(evs.last().unwrap()["type"], "response.completed");

    // Refusals of the agent route.
    let (s, e) = v1_error(
        post_responses(
            &env,
            &path("rbot"),
            &token,
            &body,
            &[("X-Service-Tool-Mode", "sometimes")],
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_header"))
    );
    let tools = |n: usize| {
        (0..n)
            .map(|i| json!({"type": "function", "name": format!("t{i}")}))
            .collect::<Vec<_>>()
    };
    let (s, e) = v1_error(
        post_responses(
            &env,
            &path("rbot"),
            &token,
            &json!({"input": "x", "tools": tools(129)}),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str(), e["param"].as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("too_many_tools"),
            Some("tools")
        )
    );
    assert_eq!(
        post_responses(
            &env,
            &path("rbot"),
            &token,
            &json!({"input": "x", "tools": tools(128)}),
            &[]
        )
        .await
        .status(),
        StatusCode::OK
    );
    let (s, e) = v1_error(
        post_responses(
            &env,
            &path("rbot"),
            &token,
            &json!({"input": "x", "tools": [{"type": "custom", "name": "a.b"}]}),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str(), e["param"].as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("validation_error"),
            Some("tools")
        )
    );
    let (s, e) = v1_error(
        post_responses(
            &env,
            &path("rbot"),
            &token,
            &json!({"input": "x", "previous_response_id": "resp_1"}),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("previous_response_unsupported")
        )
    );
    let (s, _) =
        v1_error(post_responses(&env, &path("rbot"), &env.key, &json!({"input": "x"}), &[]).await)
            .await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "an API key is not an agent access token"
    );
}

#[tokio::test]
async fn ask_mode_calls_get_approvals_and_their_outputs_wait_for_the_decision() {
    let env = env().await;
    agent(
        &env,
        "askbot",
        "up-ask",
        json!({"default_tool_mode": "ask"}),
    )
    .await;
    let token = sign_in(&env, "ann@example.com", "askbot").await;
    env.stub.script(
        "up-ask",
        calling(vec![
            tool_call("call_w", "write_file", r#"{"path":"a.txt"}"#),
            tool_call("call_p", "apply_patch", r#"{"input":"*** Begin"}"#),
        ]),
    );
    let tools = json!([{"type": "function", "name": "write_file"}, {"type": "custom", "name": "apply_patch"}]);
    let conv = [("session-id", "sess-1")];
    let body = json!({"input": "edit", "tools": tools});
    let v = json_ok(post_responses(&env, &path("askbot"), &token, &body, &conv).await).await;
    let approvals = v["approvals"].as_array().expect("approvals on the answer");
    assert_eq!(approvals.len(), 2);
    assert_eq!(approvals[0]["tool_call_id"], "call_w");
    assert_eq!(approvals[1]["tool_call_id"], "call_p");
    assert_eq!(v["output"][1]["type"], "custom_tool_call");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let evs =
        stream_of(post_responses(&env, &path("askbot"), &token, &streamed, &conv).await).await;
    let streamed_approvals = evs.last().unwrap()["response"]["approvals"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(streamed_approvals.len(), 2);
    assert_eq!(
        streamed_approvals[1]["arguments"], "*** Begin",
        "a custom call's approval carries its input"
    );

    // The output of a call whose approval is pending: 409, nothing upstream.
    env.stub.unscript("up-ask");
    let n = env.stub.requests_for_model("up-ask").len();
    let answer = json!({"tools": tools, "input": [
        {"role": "user", "content": "edit"},
        {"type": "function_call", "call_id": "call_w", "name": "write_file", "arguments": "{\"path\":\"a.txt\"}"},
        {"type": "function_call_output", "call_id": "call_w", "output": "written"}
    ]});
    let (s, e) =
        v1_error(post_responses(&env, &path("askbot"), &token, &answer, &conv).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::CONFLICT, Some("approval_pending"))
    );
    assert_eq!(env.stub.requests_for_model("up-ask").len(), n);

    // Denied: the output reaches the upstream as the fixed text.
    for a in [&approvals[0], &streamed_approvals[0]] {
        let r = env
            .app
            .post(
                &format!("/v1/agents/askbot/approvals/{}", a["id"].as_str().unwrap()),
                &token,
                &json!({"decision": "deny"}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    json_ok(post_responses(&env, &path("askbot"), &token, &answer, &conv).await).await;
    let sent = env.stub.requests_for_model("up-ask");
    let m = sent.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        m.last().unwrap()["content"],
        "The user denied this tool call."
    );

    let conv_of: Vec<Option<String>> = sqlx::query_scalar("SELECT conversation_id FROM approvals")
        .fetch_all(&env.app.app().store.pool)
        .await
        .unwrap();
    assert!(
        conv_of.iter().all(|c| c.as_deref() == Some("sess-1")),
        "Codex's session is the approvals' conversation: {conv_of:?}"
    );
}

#[tokio::test]
async fn tokenized_pii_never_goes_upstream_and_comes_back_restored_plain_and_streamed() {
    let env = env().await;
    agent(&env, "pbot", "up-pii", json!({"default_tool_mode": "auto", "pii": {"mode": "tokenize_reversible", "user_choosable": false, "terms": []}})).await;
    let token = sign_in(&env, "ann@example.com", "pbot").await;
    let text = format!("mail {EMAIL} please");
    let body = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
        "instructions": format!("owner {EMAIL}")});
    let v = json_ok(post_responses(&env, &path("pbot"), &token, &body, &[]).await).await;
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        format!("echo: {text}")
    );
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let evs = stream_of(post_responses(&env, &path("pbot"), &token, &streamed, &[]).await).await;
    let deltas: String = of_type(&evs, "response.output_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        deltas,
        format!("echo: {text}"),
        "a token split across deltas is restored"
    );
    assert_eq!(
        of_type(&evs, "response.output_text.done")[0]["text"],
        format!("echo: {text}")
    );
    assert_eq!(
        evs.last().unwrap()["response"]["output"][0]["content"][0]["text"],
        format!("echo: {text}")
    );
    for sent in env.stub.requests_for_model("up-pii") {
        assert!(!sent.raw_body.contains(EMAIL), "{}", sent.raw_body);
        assert!(sent.raw_body.contains("[EMAIL_1]"));
    }
}

#[tokio::test]
async fn the_agent_route_bridges_a_native_provider_so_its_rules_see_every_answer() {
    let env = env().await;
    let r = env
        .app
        .patch(
            "/api/admin/providers/openai",
            &env.admin,
            &json!({"responses": "native"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    agent(
        &env,
        "natbot",
        "up-natbot",
        json!({"default_tool_mode": "ask"}),
    )
    .await;
    let token = sign_in(&env, "ann@example.com", "natbot").await;
    env.stub
        .script("up-natbot", calling(vec![tool_call("call_x", "run", "{}")]));
    let v = json_ok(
        post_responses(
            &env,
            &path("natbot"),
            &token,
            &json!({"input": "go", "tools": [{"type": "function", "name": "run"}]}),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!(v["approvals"][0]["tool_call_id"], "call_x");
    assert_eq!(
        env.stub.requests_for_model("up-natbot")[0].path,
        "/v1/chat/completions"
    );
}

/// The agent's Responses route is served before the router
/// (`http::Dispatch`), as agent chat is: the agent in its path is
/// percent-decoded as the router decodes it, and a path or method the route
/// does not take is answered as the router answers it.
#[tokio::test]
async fn the_agent_path_is_decoded_and_near_misses_are_answered_as_by_the_router() {
    let env = env().await;
    agent(
        &env,
        "rbot",
        "up-rbot",
        json!({"default_tool_mode": "auto"}),
    )
    .await;
    let token = sign_in(&env, "ann@example.com", "rbot").await;
    let body = json!({"model": "whatever", "input": "hi"});
    let r = post_responses(&env, "/v1/agents/%72bot/responses", &token, &body, &[]).await;
    assert_eq!(
        json_ok(r).await["output"][0]["content"][0]["text"],
        "echo: hi"
    );
    let r = post_responses(&env, "/v1/agents/rbot/responses/", &token, &body, &[]).await;
    let (s, e) = v1_error(r).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let r = env.app.get("/v1/agents/rbot/responses", &token).await;
    let (s, e) = v1_error(r).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    assert_eq!(env.stub.requests_for_model("up-rbot").len(), 1);
}
