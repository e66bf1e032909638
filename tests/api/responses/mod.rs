//! The OpenAI Responses API (`/v1/responses`, `/v1/agents/{agent}/responses`)
//! end to end against the stub upstream: the bridge (Responses → chat and
//! back, plain and streamed), native providers, every refused input, the
//! stored-response routes, the provider setting, and the agent route.

use crate::common;

mod agent;
mod cost;

use common::models::*;
use common::stub::{calling, tool_call};
use gatehouse::wire::sse::SseEvent;
use gatehouse_stub_upstream::Script;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

pub(crate) async fn post_responses(
    env: &Env,
    path: &str,
    token: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Response {
    let mut req = env
        .app
        .client
        .post(env.app.u(path))
        .bearer_auth(token)
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("responses request")
}

async fn create(env: &Env, body: &Value) -> Response {
    post_responses(env, "/v1/responses", &env.key, body, &[]).await
}

pub(crate) async fn json_ok(r: Response) -> Value {
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The events of a Responses stream, checked against the grammar: each
/// named as its `type`, numbered 0, 1, ..., created and in progress first,
/// exactly one terminal event, last.
pub(crate) fn grammar(events: &[SseEvent]) -> Vec<Value> {
    let evs: Vec<Value> = events
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(&e.data).expect("every event is JSON (no [DONE])");
            assert_eq!(
                e.event.as_deref(),
                v["type"].as_str(),
                "event name is its type"
            );
            v
        })
        .collect();
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e["sequence_number"], json!(i), "{e}");
    }
    assert_eq!(evs[0]["type"], "response.created");
    assert_eq!(evs[1]["type"], "response.in_progress");
    let terminal = [
        "response.completed",
        "response.incomplete",
        "response.failed",
    ];
    let n = evs
        .iter()
        .filter(|e| terminal.contains(&e["type"].as_str().unwrap()))
        .count();
    assert_eq!(n, 1, "exactly one terminal event");
    assert!(terminal.contains(&evs.last().unwrap()["type"].as_str().unwrap()));
    assert_eq!(
        evs.last().unwrap()["response"]["id"],
        evs[0]["response"]["id"]
    );
    evs
}

pub(crate) async fn stream_of(r: Response) -> Vec<Value> {
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    grammar(&sse_events(r).await)
}

pub(crate) fn of_type<'a>(evs: &'a [Value], t: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| e["type"] == t).collect()
}

#[tokio::test]
async fn a_plain_request_is_bridged_to_chat_and_answered_as_a_response() {
    let env = env().await;
    env.model("gpt-r", "chat", "openai", "up-r").await;
    let body = json!({"model": "gpt-r", "instructions": "Be brief.", "input": "hello there",
        "max_output_tokens": 30, "temperature": 0.5, "store": false, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k1", "metadata": {"a": "b"}});
    let r = create(&env, &body).await;
    assert_eq!(r.headers()["x-gatehouse-provider"], "openai");
    assert!(r.headers().get("x-gatehouse-dropped-tools").is_none());
    let v = json_ok(r).await;
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(v["id"].as_str().unwrap().len(), 5 + 32);
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "gpt-r");
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(v["output"][0]["content"][0]["text"], "echo: hello there");
    assert_eq!(v["usage"]["input_tokens"], 10);
    assert_eq!(
        v["usage"]["total_tokens"],
        v["usage"]["input_tokens"].as_i64().unwrap()
            + v["usage"]["output_tokens"].as_i64().unwrap()
    );
    assert_eq!(v["instructions"], "Be brief.");
    assert_eq!(v["metadata"], json!({"a": "b"}));
    assert_eq!(v["max_output_tokens"], 30);
    assert_eq!(v["store"], false);

    let sent = &env.stub.requests_for_model("up-r")[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.body,
        json!({"model": "up-r", "messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}],
            "max_tokens": 30, "temperature": 0.5}),
        "only what the bridge translates goes upstream"
    );
}

#[tokio::test]
async fn a_stream_follows_the_event_grammar_and_ends_with_response_completed() {
    let env = env().await;
    env.model("gpt-s", "chat", "openai", "up-s").await;
    let r = create(
        &env,
        &json!({"model": "gpt-s", "input": "a longer question", "stream": true}),
    )
    .await;
    let evs = stream_of(r).await;
    let text: String = of_type(&evs, "response.output_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "echo: a longer question");
    assert!(
        of_type(&evs, "response.output_text.delta").len() > 1,
        "deltas as they came"
    );
    let done = &evs.last().unwrap()["response"];
    assert_eq!(evs.last().unwrap()["type"], "response.completed");
    assert_eq!(done["model"], "gpt-s");
    assert_eq!(
        done["output"][0]["content"][0]["text"],
        "echo: a longer question"
    );
    assert_eq!(done["usage"]["input_tokens"], 10);
    assert_eq!(evs[0]["response"]["status"], "in_progress");
    let sent = &env.stub.requests_for_model("up-s")[0];
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn function_and_custom_tool_calls_round_trip_plain_and_streamed() {
    let env = env().await;
    env.model("gpt-t", "chat", "openai", "up-t").await;
    env.stub.script(
        "up-t",
        calling(vec![
            tool_call("call_1", "exec_command", r#"{"cmd":"ls"}"#),
            tool_call("call_2", "apply_patch", r#"{"input":"*** Begin Patch"}"#),
        ]),
    );
    let tools = json!([
        {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
        {"type": "custom", "name": "apply_patch", "description": "edit files", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
        {"type": "web_search"}
    ]);
    let mut body = json!({"model": "gpt-t", "input": "list files", "tools": tools, "tool_choice": "auto", "parallel_tool_calls": true});
    let r = create(&env, &body).await;
    assert_eq!(r.headers()["x-gatehouse-dropped-tools"], "web_search");
    let v = json_ok(r).await;
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "no message item for null content: {out:?}");
    assert_eq!(out[0]["type"], "function_call");
    assert_eq!(
        (
            out[0]["call_id"].as_str(),
            out[0]["name"].as_str(),
            out[0]["arguments"].as_str()
        ),
        (
            Some("call_1"),
            Some("exec_command"),
            Some(r#"{"cmd":"ls"}"#)
        )
    );
    assert_eq!(out[1]["type"], "custom_tool_call");
    assert_eq!(out[1]["input"], "*** Begin Patch");
    assert_eq!(v["tools"], tools, "tools echoed as sent");
    let sent = &env.stub.requests_for_model("up-t")[0].body;
    assert_eq!(
        sent["tools"].as_array().unwrap().len(),
        2,
        "the built-in tool is not sent"
    );
    assert_eq!(
        sent["tools"][1]["function"]["parameters"]["required"],
        json!(["input"])
    );

    body["stream"] = json!(true);
    let evs = stream_of(create(&env, &body).await).await;
    let added: Vec<&str> = of_type(&evs, "response.output_item.added")
        .iter()
        .map(|e| e["item"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["function_call", "custom_tool_call"]);
    let args: String = of_type(&evs, "response.function_call_arguments.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"cmd":"ls"}"#);
    assert_eq!(
        of_type(&evs, "response.function_call_arguments.done")[0]["name"],
        "exec_command"
    );
    assert_eq!(
        of_type(&evs, "response.custom_tool_call_input.delta").len(),
        1
    );
    assert_eq!(
        of_type(&evs, "response.custom_tool_call_input.done")[0]["input"],
        "*** Begin Patch"
    );
    assert_eq!(
        evs.last().unwrap()["response"]["output"][1]["call_id"],
        "call_2"
    );

    // The next turn carries the calls and their outputs.
    env.stub.unscript("up-t");
    let next = json!({"model": "gpt-t", "tools": tools, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}", "status": "completed"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "patched"},
        {"role": "user", "content": "thanks"}
    ]});
    let v = json_ok(create(&env, &next).await).await;
    assert_eq!(v["output"][0]["content"][0]["text"], "echo: thanks");
    let sent = env.stub.requests_for_model("up-t");
    let m = &sent.last().unwrap().body["messages"];
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(m[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        m[1]["tool_calls"][1]["function"]["arguments"],
        r#"{"input":"*** Begin Patch"}"#
    );
    assert_eq!(
        m[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a.txt"})
    );
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "call_2", "content": "patched"})
    );
}

#[tokio::test]
async fn every_refused_input_gets_its_code_and_param_and_nothing_goes_upstream() {
    let env = env().await;
    env.model("gpt-bad", "chat", "openai", "up-bad").await;
    let m = |extra: Value| {
        let mut b = json!({"model": "gpt-bad", "input": "x"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases = [
        (
            m(json!({"previous_response_id": "resp_1"})),
            "previous_response_unsupported",
            "previous_response_id",
        ),
        (
            m(json!({"conversation": "conv_1"})),
            "previous_response_unsupported",
            "conversation",
        ),
        (
            m(
                json!({"input": [{"role": "user", "content": "a"}, {"type": "item_reference", "id": "msg_1"}]}),
            ),
            "previous_response_unsupported",
            "input[1]",
        ),
        (
            m(
                json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            ),
            "unsupported_input",
            "input[0].content[0]",
        ),
        (
            m(
                json!({"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
            ),
            "unsupported_input",
            "input[0].content[0]",
        ),
        (
            m(
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}),
            ),
            "unsupported_input",
            "input[0].content[0]",
        ),
        (
            m(
                json!({"input": [{"role": "user", "content": "a"}, {"type": "computer_call", "call_id": "c"}]}),
            ),
            "unsupported_input",
            "input[1]",
        ),
        (
            m(json!({"input": [{"type": "web_search_call", "id": "w"}]})),
            "unsupported_input",
            "input[0]",
        ),
        (
            m(json!({"input": [{"type": "mystery"}]})),
            "unsupported_input",
            "input[0]",
        ),
        (m(json!({"input": ""})), "validation_error", "input"),
        (m(json!({"input": []})), "validation_error", "input"),
        (json!({"model": "gpt-bad"}), "validation_error", "input"),
        (m(json!({"stream": "yes"})), "validation_error", "stream"),
        (
            m(json!({"max_output_tokens": 0})),
            "validation_error",
            "max_output_tokens",
        ),
        (m(json!({"tools": "all"})), "validation_error", "tools"),
        (
            m(json!({"instructions": 5})),
            "validation_error",
            "instructions",
        ),
        (
            m(json!({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}})),
            "validation_error",
            "tool_choice",
        ),
        (
            m(
                json!({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}),
            ),
            "validation_error",
            "tool_choice",
        ),
    ];
    for (body, code, param) in cases {
        let (s, e) = v1_error(create(&env, &body).await).await;
        assert_eq!(
            (s, e["code"].as_str(), e["param"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code), Some(param)),
            "{body}"
        );
        if code == "previous_response_unsupported" {
            assert_eq!(e["type"], "invalid_request_error");
        }
    }
    // At the limit: max_output_tokens 1 passes.
    assert_eq!(
        create(&env, &m(json!({"max_output_tokens": 1})))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        env.stub.requests_for_model("up-bad").len(),
        1,
        "only the good request went upstream"
    );

    // The model's errors come first, as on chat.
    let (s, e) = v1_error(create(&env, &json!({"model": "nope", "input": []})).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("model_not_found"))
    );
    env.model("emb", "embeddings", "openai", "up-emb").await;
    let (s, e) = v1_error(create(&env, &json!({"model": "emb", "input": "x"})).await).await;
    assert_eq!(
        (s, e["code"].as_str(), e["param"].as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("model_kind_mismatch"),
            Some("model")
        )
    );
    let (s, e) = v1_error(create(&env, &json!({"input": "x"})).await).await;
    assert_eq!(
        (s, e["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("model"))
    );
    let (s, _) =
        v1_error(post_responses(&env, "/v1/responses", "gtk_wrong", &m(json!({})), &[]).await)
            .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn stored_response_routes_answer_response_not_found_after_the_key() {
    let env = env().await;
    let c = &env.app.client;
    for (method, path) in [
        ("GET", "/v1/responses/resp_1"),
        ("DELETE", "/v1/responses/resp_1"),
        ("GET", "/v1/responses/resp_1/input_items"),
        ("POST", "/v1/responses/resp_1/cancel"),
        ("POST", "/v1/responses/compact"),
        ("POST", "/v1/responses/input_tokens"),
    ] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = c.request(m.clone(), env.app.u(path)).send().await.unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path} without a key"
        );
        let r = c
            .request(m, env.app.u(path))
            .bearer_auth(&env.key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let (s, e) = v1_error(r).await;
        assert_eq!(
            (s, e["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("response_not_found")),
            "{method} {path}"
        );
    }
    let doc = env.app.openapi().await;
    for path in [
        "/v1/responses",
        "/v1/agents/{agent}/responses",
        "/v1/responses/{id}/input_items",
        "/v1/responses/{id}/cancel",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} in /openapi.json");
    }
    assert!(doc["paths"]["/v1/responses/{id}"]["get"].is_object());
    assert!(doc["paths"]["/v1/responses/{id}"]["delete"].is_object());
}

async fn usage_rows(
    env: &Env,
    n: i64,
) -> Vec<(
    String,
    i64,
    i64,
    i64,
    Option<String>,
    Option<String>,
    String,
)> {
    let pool = &env.app.app().store.pool;
    poll(10, || async {
        let c: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM usage_records")
            .fetch_one(pool)
            .await
            .unwrap();
        (c >= n).then_some(())
    })
    .await;
    sqlx::query_as("SELECT model, prompt_tokens, completion_tokens, status, conversation_id, turn_id, kind FROM usage_records ORDER BY at")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn codex_session_and_turn_headers_name_the_usage_records_conversation_and_turn() {
    let env = env().await;
    env.model("gpt-u", "chat", "openai", "up-u").await;
    let body = json!({"model": "gpt-u", "input": "hi", "stream": true});
    let codex = [
        ("session-id", "0199-session"),
        ("thread-id", "0199-thread"),
        (
            "x-codex-turn-metadata",
            r#"{"turn_id":"turn-7","sandbox":"none"}"#,
        ),
    ];
    stream_of(post_responses(&env, "/v1/responses", &env.key, &body, &codex).await).await;
    let ours = [
        ("X-Service-Conversation-Id", "conv-1"),
        ("session-id", "0199-session"),
        ("x-codex-turn-metadata", "{\"turn_id\":\"has space\"}"),
    ];
    json_ok(
        post_responses(
            &env,
            "/v1/responses",
            &env.key,
            &json!({"model": "gpt-u", "input": "hi"}),
            &ours,
        )
        .await,
    )
    .await;
    let rows = usage_rows(&env, 2).await;
    assert_eq!(rows[0].0, "gpt-u");
    assert_eq!((rows[0].1, rows[0].3), (10, 200));
    assert_eq!(rows[0].6, "chat");
    assert_eq!(
        (rows[0].4.as_deref(), rows[0].5.as_deref()),
        (Some("0199-session"), Some("turn-7"))
    );
    assert_eq!(
        (rows[1].4.as_deref(), rows[1].5.as_deref()),
        (Some("conv-1"), None),
        "a turn id that is not an id is ignored"
    );
    let sent = &env.stub.requests_for_model("up-u")[0];
    assert!(
        sent.header("session-id").is_none(),
        "no client header goes upstream"
    );
}

#[tokio::test]
async fn a_stream_cut_after_it_began_ends_with_response_failed_and_an_error_before_it_is_plain_http(
) {
    let env = env().await;
    env.model("gpt-f", "chat", "openai", "up-f").await;
    env.stub.script(
        "up-f",
        Script {
            content: Some("a long answer that gets cut".into()),
            close_after_chunks: Some(2),
            ..Script::default()
        },
    );
    let evs = stream_of(
        create(
            &env,
            &json!({"model": "gpt-f", "input": "x", "stream": true}),
        )
        .await,
    )
    .await;
    let last = evs.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["status"], "failed");
    assert_eq!(last["response"]["error"]["code"], "upstream_error");
    assert!(
        of_type(&evs, "response.output_item.done").is_empty(),
        "items already added get no done"
    );

    env.stub.script("up-f", Script::status(500));
    let r = create(
        &env,
        &json!({"model": "gpt-f", "input": "x", "stream": true}),
    )
    .await;
    let (s, e) = v1_error(r).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("upstream_error")),
        "as chat"
    );
    let rows = usage_rows(&env, 2).await;
    assert_eq!(rows.iter().map(|r| r.3).collect::<Vec<_>>(), [502, 500]);
}

#[tokio::test]
async fn length_finish_is_an_incomplete_response() {
    let env = env().await;
    env.model("gpt-l", "chat", "openai", "up-l").await;
    let finish = r#"{"id":"x","object":"chat.completion","created":1,"model":"up-l","choices":[{"index":0,"message":{"role":"assistant","content":"trunc"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    env.stub.script(
        "up-l",
        Script {
            body: Some(finish.into()),
            ..Script::default()
        },
    );
    let v = json_ok(create(&env, &json!({"model": "gpt-l", "input": "x"})).await).await;
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
}

async fn set_mode(env: &Env, provider: &str, mode: &str) -> Value {
    let r = env
        .app
        .patch(
            &format!("/api/admin/providers/{provider}"),
            &env.admin,
            &json!({"responses": mode}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

/// `/v1/responses` is served before the router (`http::Dispatch`) by its
/// exact path and method, as chat is; anything near it is answered as the
/// router answers it.
#[tokio::test]
async fn near_misses_of_the_responses_route_are_answered_as_by_the_router() {
    let env = env().await;
    env.model("gpt-d", "chat", "openai", "up-d").await;
    let body = json!({"model": "gpt-d", "input": "hi"});
    let r = post_responses(&env, "/v1/responses?x=1", &env.key, &body, &[]).await;
    assert_eq!(
        json_ok(r).await["output"][0]["content"][0]["text"],
        "echo: hi"
    );
    let r = post_responses(&env, "/v1/responses/resp_1", &env.key, &body, &[]).await;
    let (s, e) = v1_error(r).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("response_not_found"))
    );
    let (s, e) = v1_error(env.app.get("/v1/responses", &env.key).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    assert_eq!(env.stub.requests_for_model("up-d").len(), 1);
}

/// The env with `nat`, an `openai` provider in native mode (key `sk-nat`),
/// and the model `gpt-n` on it (upstream `up-n`).
pub(super) async fn native_env() -> Env {
    let env = env().await;
    env.provider(
        "nat",
        "openai",
        &env.stub.openai_base_url(),
        Some("sk-nat"),
        5,
    )
    .await;
    set_mode(&env, "nat", "native").await;
    env.model("gpt-n", "chat", "nat", "up-n").await;
    env
}

#[tokio::test]
async fn the_providers_responses_mode_is_set_shown_and_validated() {
    let env = env().await;
    let p: Value = env
        .app
        .get("/api/admin/providers/openai", &env.admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(p["responses"], "bridge", "the default");
    let p = set_mode(&env, "openai", "native").await;
    assert_eq!(p["responses"], "native");
    assert_eq!(
        p["has_api_key"], true,
        "a PATCH keeps the fields it does not name"
    );
    assert_eq!(p["timeout_s"], 5);
    let list: Value = env
        .app
        .get("/api/admin/providers", &env.admin)
        .await
        .json()
        .await
        .unwrap();
    let openai = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "openai")
        .unwrap();
    assert_eq!(openai["responses"], "native");
    for (path, body, param) in [
        (
            "/api/admin/providers/openai",
            json!({"responses": "sideways"}),
            "responses",
        ),
        (
            "/api/admin/providers/openai",
            json!({"responses": 1}),
            "responses",
        ),
        (
            "/api/admin/providers/openai",
            json!({"name": "other"}),
            "name",
        ),
        (
            "/api/admin/providers/openai",
            json!({"type": "tei"}),
            "type",
        ),
        (
            "/api/admin/providers/tei",
            json!({"responses": "bridge"}),
            "responses",
        ),
    ] {
        let r = env.app.patch(path, &env.admin, &body).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["detail"]["code"], "validation_error", "{e}");
        assert!(
            e["detail"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("'{param}'")),
            "{e}"
        );
    }
    let r = env
        .app
        .patch(
            "/api/admin/providers/none",
            &env.admin,
            &json!({"responses": "native"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "cx", "type": "cohere", "base_url": "http://x", "responses": "native"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = env
        .app
        .post(
            "/api/admin/providers",
            &env.admin,
            &json!({"name": "nx", "type": "openai", "base_url": "http://x", "responses": "native"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.json::<Value>().await.unwrap()["responses"], "native");
    let r = env
        .app
        .patch(
            "/api/admin/providers/nx",
            &env.admin,
            &json!({"timeout_s": 9}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.unwrap()["timeout_s"],
        9,
        "any field but name and type"
    );
}

#[tokio::test]
async fn a_native_provider_gets_the_clients_bytes_with_only_the_model_replaced() {
    let env = native_env().await;
    // Written as a client might: spaces, a member order a tree would sort,
    // a number a tree would write as 1.5, an escape it would write as é.
    let text = r#"{ "stream" : false, "model" : "gpt-n", "temperature": 1.50,
        "input": [{"type": "message", "role": "user", "content": "caf\u00e9"}],
        "metadata": {"z": 1, "a": 2} }"#;
    let r = env.post_text("/v1/responses", text).await;
    assert_eq!(r.status(), 200);
    let seen = env.stub.requests_for_model("up-n");
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].raw_body,
        text.replace(r#""gpt-n""#, r#""up-n""#),
        "the client's bytes, only the model's name replaced"
    );
}

#[tokio::test]
async fn a_native_provider_gets_the_body_unchanged_but_model_and_its_answers_name_the_alias() {
    let env = native_env().await;
    let body = json!({"model": "gpt-n", "input": [{"role": "user", "content": "hi"}], "store": true,
        "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"}, "prompt_cache_key": "k",
        "client_metadata": {"x": 1}, "future_field": [1, 2], "tools": [{"type": "web_search"}]});
    let r = create(&env, &body).await;
    assert!(
        r.headers().get("x-gatehouse-dropped-tools").is_none(),
        "native keeps built-in tools"
    );
    let v = json_ok(r).await;
    assert_eq!(v["model"], "gpt-n");
    assert_eq!(v["output"][0]["content"][0]["text"], "echo: hi");
    let sent = &env.stub.requests_for_model("up-n")[0];
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-nat"));
    let mut expected = body.clone();
    expected["model"] = json!("up-n");
    assert_eq!(sent.body, expected);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let evs = stream_of(create(&env, &streamed).await).await;
    for e in evs.iter().filter(|e| e.get("response").is_some()) {
        assert_eq!(e["response"]["model"], "gpt-n", "{e}");
    }
    assert_eq!(evs.last().unwrap()["type"], "response.completed");

    env.stub.script(
        "up-n",
        Script {
            close_after_chunks: Some(1),
            usage: Some((7, 3)),
            ..Script::default()
        },
    );
    let evs = stream_of(create(&env, &streamed).await).await;
    let last = evs.last().unwrap();
    assert_eq!(
        last["type"], "response.failed",
        "a native stream without its terminal event gets one"
    );
    assert_eq!(last["response"]["id"], evs[0]["response"]["id"]);

    env.stub.script(
        "up-n",
        Script {
            usage: Some((7, 3)),
            ..Script::default()
        },
    );
    json_ok(create(&env, &body).await).await;
    let rows = usage_rows(&env, 4).await;
    let last = rows.last().unwrap();
    assert_eq!(
        (last.0.as_str(), last.1, last.2, last.3),
        ("gpt-n", 7, 3, 200),
        "tokens from the native answer"
    );
}

#[tokio::test]
async fn a_model_may_mix_native_and_bridged_targets_through_a_fallback() {
    let env = env().await;
    env.provider("nat", "openai", &env.stub.openai_base_url(), None, 5)
        .await;
    set_mode(&env, "nat", "native").await;
    env.model("gpt-fb", "chat", "openai", "up-fb").await;
    env.model("gpt-nat", "chat", "nat", "up-nat").await;
    let r = env
        .app
        .patch(
            "/api/admin/models/gpt-fb",
            &env.admin,
            &json!({"fallbacks": ["gpt-nat"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    env.stub.script("up-fb", Script::status(503));
    let r = create(&env, &json!({"model": "gpt-fb", "input": "hi"})).await;
    assert_eq!(r.headers()["x-gatehouse-provider"], "nat");
    let v = json_ok(r).await;
    assert_eq!(
        v["model"], "gpt-nat",
        "a fallback's answer names the fallback"
    );
    assert_eq!(
        env.stub.requests_for_model("up-nat")[0].path,
        "/v1/responses"
    );
}

#[tokio::test]
async fn a_responses_request_counts_as_one_request_against_the_keys_limit() {
    let env = env().await;
    env.model("gpt-lim", "chat", "openai", "up-lim").await;
    let r = env
        .app
        .post(
            "/api/api-keys",
            &env.admin,
            &json!({"name": "limited", "limits": {"requests_per_minute": 2}}),
        )
        .await;
    let key = r.json::<Value>().await.unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"model": "gpt-lim", "input": "x"});
    for remaining in ["1", "0"] {
        let r = post_responses(&env, "/v1/responses", &key, &body, &[]).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["x-ratelimit-remaining-requests"], remaining);
    }
    let r = post_responses(&env, "/v1/responses", &key, &body, &[]).await;
    assert!(r.headers().get("retry-after").is_some());
    let (s, e) = v1_error(r).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited"))
    );
    assert_eq!(env.stub.requests_for_model("up-lim").len(), 2);
}

#[tokio::test]
async fn metrics_name_the_responses_route_templates() {
    let env = env().await;
    env.model("gpt-m", "chat", "openai", "up-m").await;
    json_ok(create(&env, &json!({"model": "gpt-m", "input": "x"})).await).await;
    let r = env
        .app
        .client
        .get(env.app.u("/v1/responses/resp_9"))
        .bearer_auth(&env.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let metrics = env
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
        metrics.contains(r#"route="/v1/responses",status="200""#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"route="/v1/responses/{id}",status="404""#),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_upstream_gone_quiet_mid_stream_ends_it_with_response_failed_upstream_timeout() {
    let env = env().await;
    env.provider("slow", "openai", &env.stub.openai_base_url(), None, 1)
        .await;
    env.model("gpt-q", "chat", "slow", "up-q").await;
    env.stub.script(
        "up-q",
        Script {
            content: Some("one two three four".into()),
            chunk_interval_ms: 1500,
            ..Script::default()
        },
    );
    let evs = stream_of(
        create(
            &env,
            &json!({"model": "gpt-q", "input": "x", "stream": true}),
        )
        .await,
    )
    .await;
    let last = evs.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["error"]["code"], "upstream_timeout");
}

#[tokio::test]
async fn a_client_that_leaves_a_stream_cancels_the_upstream_and_is_recorded_499() {
    use futures_util::StreamExt;
    let env = env().await;
    env.model("gpt-c", "chat", "openai", "up-c").await;
    env.stub.script(
        "up-c",
        Script {
            content: Some("x".repeat(400)),
            chunk_interval_ms: 100,
            ..Script::default()
        },
    );
    let r = create(
        &env,
        &json!({"model": "gpt-c", "input": "x", "stream": true}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut stream = r.bytes_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).starts_with("event: response.created\n"),
        "{first:?}"
    );
    stream.next().await.unwrap().unwrap();
    drop(stream);
    poll(5, || async {
        (env.stub.cancelled_streams() == 1).then_some(())
    })
    .await;
    let rows = usage_rows(&env, 1).await;
    assert_eq!(rows[0].3, 499);
}

#[tokio::test]
async fn an_agent_call_with_pii_in_its_arguments_comes_back_restored_in_every_event() {
    use common::agent_chat::{agent, sign_in};
    let env = env().await;
    agent(&env, "pargs", "up-pargs", json!({"default_tool_mode": "auto", "pii": {"mode": "tokenize_reversible", "user_choosable": false, "terms": []}})).await;
    let token = sign_in(&env, "ann@example.com", "pargs").await;
    // The model repeats the token it was given; the client sees the value.
    env.stub.script(
        "up-pargs",
        calling(vec![tool_call(
            "call_m",
            "send_mail",
            r#"{"to":"[EMAIL_1]"}"#,
        )]),
    );
    let body = json!({"input": "mail jane.doe@example.com", "tools": [{"type": "function", "name": "send_mail"}], "stream": true});
    let evs =
        stream_of(post_responses(&env, "/v1/agents/pargs/responses", &token, &body, &[]).await)
            .await;
    let args: String = of_type(&evs, "response.function_call_arguments.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"to":"jane.doe@example.com"}"#);
    assert_eq!(
        of_type(&evs, "response.function_call_arguments.done")[0]["arguments"],
        r#"{"to":"jane.doe@example.com"}"#
    );
    assert_eq!(
        evs.last().unwrap()["response"]["output"][0]["arguments"],
        r#"{"to":"jane.doe@example.com"}"#
    );
    assert!(!env.stub.requests_for_model("up-pargs")[0]
        .raw_body
        .contains("jane.doe@example.com"));
}

#[tokio::test]
async fn a_bridged_request_reaches_an_anthropic_provider_through_its_chat_adapter() {
    let env = env().await;
    let r = env.app.post("/api/admin/providers", &env.admin,
        &json!({"name": "claude", "type": "anthropic", "base_url": env.stub.url(), "api_key": "sk-ant", "timeout_s": 5})).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let p: Value = r.json().await.unwrap();
    assert!(p.get("responses").is_none(), "an openai setting only");
    env.model("claude-r", "chat", "claude", "claude-up-r").await;
    env.stub.script(
        "claude-up-r",
        Script {
            content: Some("Hello from Claude".into()),
            ..Script::default()
        },
    );
    let v = json_ok(create(&env, &json!({"model": "claude-r", "input": "hi", "instructions": "Be brief.", "max_output_tokens": 64})).await).await;
    assert_eq!(v["output"][0]["content"][0]["text"], "Hello from Claude");
    assert_eq!(v["model"], "claude-r");
    let evs = stream_of(
        create(
            &env,
            &json!({"model": "claude-r", "input": "hi", "stream": true}),
        )
        .await,
    )
    .await;
    let text: String = of_type(&evs, "response.output_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello from Claude");
    let sent = env.stub.requests_for_model("claude-up-r");
    assert_eq!(sent[0].path, "/v1/messages");
    assert!(sent[0].body["system"].to_string().contains("Be brief."));
    // The generic PATCH takes the anthropic fields too, and refuses `responses` there.
    let r = env
        .app
        .patch(
            "/api/admin/providers/claude",
            &env.admin,
            &json!({"anthropic_version": "2023-06-01", "beta_headers": "drop"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["beta_headers"], "drop");
    let r = env
        .app
        .patch(
            "/api/admin/providers/claude",
            &env.admin,
            &json!({"responses": "native"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}
