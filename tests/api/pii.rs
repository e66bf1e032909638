//! PII protection on agent chat, end to end against the stub upstream:
//! redact and tokenize_reversible in every place of the body, restore of
//! plain and streamed answers (tokens split at every offset), tool-call
//! arguments, the conversation vault, the header rules, and that found
//! values reach neither the upstream nor the database.

use crate::common;

use common::agent_chat::*;
use common::models::*;
use common::stub::tool_call;
use gatehouse_stub_upstream::{Script, ScriptToolCall};
use reqwest::StatusCode;
use serde_json::{json, Value};

const EMAIL: &str = "jane.doe@example.com";
const EMAIL2: &str = "bob.stone@example.org";
const PHONE: &str = "+44 20 7946 0958";
const CARD: &str = "4111 1111 1111 1111";
const BAD_CARD: &str = "4111 1111 1111 1112";
const IBAN: &str = "GB82 WEST 1234 5698 7654 32";
const IP: &str = "203.0.113.45";
const SSN: &str = "219-09-9999";
const GITHUB: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
const TERM: &str = "Nightingale";

/// Every value the scanner must find.
const FOUND: [&str; 9] = [EMAIL, EMAIL2, PHONE, CARD, IBAN, IP, SSN, GITHUB, TERM];

fn pii(mode: &str, choosable: bool) -> Value {
    json!({"pii": {"mode": mode, "user_choosable": choosable, "terms": [TERM]}})
}

fn user(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

/// What the gateway sent upstream for `upstream`, as raw text, one per request.
fn sent(env: &impl Gateway, upstream: &str) -> Vec<String> {
    env.stub()
        .requests_for_model(upstream)
        .into_iter()
        .map(|r| r.raw_body)
        .collect()
}

fn assert_absent(haystack: &str, what: &str) {
    for v in FOUND {
        assert!(!haystack.contains(v), "{v} reached {what}: {haystack}");
    }
}

/// Waits for `n` usage records, then checks no found value is stored anywhere.
async fn assert_nothing_stored(env: &impl Gateway, n: i64) {
    poll(10, || async { (usage_count(env).await >= n).then_some(()) }).await;
    assert_absent(&stored_text(env).await, "the database");
}

/// A body that carries a value in every place the gateway must scan.
fn everywhere_body() -> Value {
    json!({"messages": [
        {"role": "system", "content": format!("Account owner {EMAIL}, card {CARD}.")},
        {"role": "user", "content": [
            {"type": "text", "text": format!("Call {PHONE} or wire to {IBAN}.")},
            {"type": "image_url", "image_url": {"url": "https://img.example/x.png"}}
        ]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup",
             "arguments": json!({"ip": IP, "ssn": SSN}).to_string()}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": format!("key {GITHUB} for project {TERM}, cc {EMAIL2}")},
        {"role": "user", "content": format!("My old card {BAD_CARD}; mail {EMAIL}.")}
    ]})
}

#[tokio::test]
async fn redact_replaces_every_kind_in_every_place_and_nothing_comes_back() {
    let env = agent_scene(
        "redactor",
        "up-redact",
        pii("redact", false),
        "ann@example.com",
    )
    .await;
    let token = env.access.clone();
    let answer = chat_json(&env, "redactor", &token, &everywhere_body(), &[]).await;

    let up = &env.stub.requests_for_model("up-redact")[0];
    assert_absent(&up.raw_body, "the upstream");
    let m = &up.body["messages"];
    assert_eq!(m[0]["content"], "Account owner [EMAIL], card [CARD].");
    assert_eq!(
        m[1]["content"][0]["text"],
        "Call [PHONE] or wire to [IBAN]."
    );
    assert_eq!(
        m[1]["content"][1]["image_url"]["url"],
        "https://img.example/x.png"
    );
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        json!({"ip": "[IP]", "ssn": "[SSN]"}).to_string()
    );
    assert_eq!(
        m[3]["content"],
        "key [SECRET] for project [TERM], cc [EMAIL]"
    );
    // A card number that fails Luhn is not a card.
    assert_eq!(
        m[4]["content"],
        format!("My old card {BAD_CARD}; mail [EMAIL].")
    );
    assert!(
        !up.raw_body.contains("copy") && !up.raw_body.contains("_1]"),
        "redact adds no note and no tokens"
    );
    assert_eq!(m.as_array().unwrap().len(), 5);

    // Nothing comes back: the echo carries the placeholder.
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        format!("echo: My old card {BAD_CARD}; mail [EMAIL].")
    );
    assert_nothing_stored(&env, 1).await;
}

#[tokio::test]
async fn redact_applies_to_streams_too() {
    let env = agent_scene(
        "redactor",
        "up-redact-s",
        pii("redact", false),
        "ann@example.com",
    )
    .await;
    let token = env.access.clone();
    let events = chat_stream(&env, "redactor", &token, &everywhere_body(), &[]).await;
    let chunks = data_messages(&events);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    assert_eq!(
        content_of(&chunks),
        format!("echo: My old card {BAD_CARD}; mail [EMAIL].")
    );
    assert_absent(&sent(&env, "up-redact-s")[0], "the upstream");
    assert_nothing_stored(&env, 1).await;
}

#[tokio::test]
async fn tokenize_sends_numbered_tokens_with_the_note_and_restores_the_answer() {
    let env = agent_scene(
        "tok",
        "up-tok",
        pii("tokenize_reversible", false),
        "ann@example.com",
    )
    .await;
    let token = env.access.clone();
    let text = format!(
        "Mail {EMAIL} and {EMAIL2}, then {EMAIL} again; call {PHONE}; card {CARD}; iban {IBAN}; ip {IP}; ssn {SSN}; key {GITHUB}; {TERM}."
    );
    let answer = chat_json(&env, "tok", &token, &user(&text), &[]).await;

    let up = &env.stub.requests_for_model("up-tok")[0];
    assert_absent(&up.raw_body, "the upstream");
    let m = up.body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 2, "the note, then the user's message: {m:?}");
    assert_eq!(
        m[0],
        json!({"role": "system", "content": gatehouse_pii::TOKEN_NOTE})
    );
    assert_eq!(
        m[1]["content"],
        "Mail [EMAIL_1] and [EMAIL_2], then [EMAIL_1] again; call [PHONE_1]; card [CARD_1]; iban [IBAN_1]; ip [IP_1]; ssn [SSN_1]; key [SECRET_1]; [TERM_1]."
    );
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        format!("echo: {text}")
    );
    assert_nothing_stored(&env, 1).await;
}

#[tokio::test]
async fn the_note_follows_the_agents_instructions() {
    let mut extra = pii("tokenize_reversible", false);
    extra["instructions"] = json!("You help with billing.");
    let env = agent_scene("tok", "up-tok-i", extra, "ann@example.com").await;
    let token = env.access.clone();
    // No value found: no note.
    chat_json(&env, "tok", &token, &user("nothing personal here"), &[]).await;
    chat_json(&env, "tok", &token, &user(&format!("mail {EMAIL}")), &[]).await;
    let reqs = env.stub.requests_for_model("up-tok-i");
    let first = reqs[0].body["messages"].as_array().unwrap();
    assert_eq!(first.len(), 2);
    assert!(!reqs[0].raw_body.contains("placeholder tokens"));
    let second = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(second[0]["content"], "You help with billing.");
    assert_eq!(second[1]["content"], gatehouse_pii::TOKEN_NOTE);
    assert_eq!(second[2]["content"], "mail [EMAIL_1]");
}

#[tokio::test]
async fn streamed_answers_are_restored_wherever_the_chunks_split_the_tokens() {
    let env = env().await;
    agent(
        &env,
        "tok",
        "up-tok-base",
        pii("tokenize_reversible", false),
    )
    .await;
    let token = sign_in(&env, "ann@example.com", "tok").await;
    let text = format!(
        "[{EMAIL}] {EMAIL2},{PHONE} [x] [EMAIL_ {CARD}, {IBAN}! ip={IP} ssn {SSN} {GITHUB} {TERM}[TERM_9]"
    );
    for n in [1usize, 2, 3, 5, 7] {
        let upstream = format!("up-tok-{n}");
        env.stub.script(
            &upstream,
            Script {
                chunk_size: n,
                ..Script::default()
            },
        );
        // The agent's model now points at this upstream.
        let model = format!("m-tok-{n}");
        env.model(&model, "chat", "openai", &upstream).await;
        let r = env
            .app
            .patch(
                "/api/admin/agents/tok",
                &env.admin,
                &json!({"model": model}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);

        let events = chat_stream(&env, "tok", &token, &user(&text), &[]).await;
        assert!(events.iter().all(|e| e.event.is_none()), "no AG-UI unasked");
        let chunks = data_messages(&events);
        assert_eq!(chunks.last(), Some(&json!("[DONE]")), "chunk size {n}");
        let chunks = &chunks[..chunks.len() - 1];
        assert_eq!(
            content_of(chunks),
            format!("echo: {text}"),
            "chunk size {n}"
        );
        for c in chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["model"], model);
        }
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
        let up = sent(&env, &upstream);
        assert_eq!(up.len(), 1);
        assert_absent(&up[0], "the upstream");
        assert!(up[0].contains("[EMAIL_1]") && up[0].contains("[TERM_1]"));
    }
    assert_nothing_stored(&env, 5).await;
}

fn mail_calls() -> Vec<ScriptToolCall> {
    vec![
        tool_call(
            "call_mail",
            "send_mail",
            r#"{"to":"[EMAIL_1]","cc":["[EMAIL_2]"],"body":"Card [CARD_1] ok"}"#,
        ),
        tool_call("call_sms", "send_sms", r#"{"to":"[PHONE_1]"}"#),
    ]
}

fn restored_mail_args() -> Vec<Value> {
    vec![
        json!({"to": EMAIL, "cc": [EMAIL2], "body": format!("Card {CARD} ok")}),
        json!({"to": PHONE}),
    ]
}

#[tokio::test]
async fn tool_call_arguments_come_back_restored_plain_and_streamed() {
    let env = agent_scene(
        "tok",
        "up-tok-tools",
        pii("tokenize_reversible", false),
        "ann@example.com",
    )
    .await;
    let token = env.access.clone();
    let text = format!("Mail {EMAIL} cc {EMAIL2}, card {CARD}, text {PHONE}");
    let auto = [("X-Service-Tool-Mode", "auto")];

    env.stub.script(
        "up-tok-tools",
        Script {
            content: Some("Sending to [EMAIL_1].".into()),
            tool_calls: mail_calls(),
            ..Script::default()
        },
    );
    let answer = chat_json(&env, "tok", &token, &user(&text), &auto).await;
    let msg = &answer["choices"][0]["message"];
    assert_eq!(msg["content"], format!("Sending to {EMAIL}."));
    let args: Vec<Value> = msg["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(args, restored_mail_args());

    for n in [1usize, 2, 3, 5, 7] {
        env.stub.script(
            "up-tok-tools",
            Script {
                content: Some("Sending to [EMAIL_1].".into()),
                tool_calls: mail_calls(),
                chunk_size: n,
                ..Script::default()
            },
        );
        let events = chat_stream(&env, "tok", &token, &user(&text), &auto).await;
        let chunks = data_messages(&events);
        assert_eq!(chunks.last(), Some(&json!("[DONE]")));
        assert_eq!(
            content_of(&chunks),
            format!("Sending to {EMAIL}."),
            "size {n}"
        );
        let calls = tool_calls_of(&chunks);
        assert_eq!(calls.len(), 2, "size {n}");
        assert_eq!(
            (calls[0].0.as_str(), calls[0].1.as_str()),
            ("call_mail", "send_mail")
        );
        let args: Vec<Value> = calls
            .iter()
            .map(|c| serde_json::from_str(&c.2).unwrap_or_else(|e| panic!("{e}: {}", c.2)))
            .collect();
        assert_eq!(args, restored_mail_args(), "size {n}");
    }
    for raw in sent(&env, "up-tok-tools") {
        assert_absent(&raw, "the upstream");
    }
    assert_nothing_stored(&env, 6).await;
}

#[tokio::test]
async fn approvals_keep_the_tokens_in_the_database_and_show_the_values_to_the_user() {
    let env = agent_scene(
        "tok",
        "up-tok-ask",
        pii("tokenize_reversible", false),
        "ann@example.com",
    )
    .await;
    let token = env.access.clone();
    let text = format!("Mail {EMAIL} cc {EMAIL2}, card {CARD}, text {PHONE}");
    let ask = [("X-Service-Tool-Mode", "ask")];
    env.stub.script(
        "up-tok-ask",
        Script {
            tool_calls: mail_calls(),
            ..Script::default()
        },
    );
    let answer = chat_json(&env, "tok", &token, &user(&text), &ask).await;
    let approvals = answer["approvals"].as_array().expect("approvals");
    assert_eq!(approvals.len(), 2);
    let tool_args =
        answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].clone();
    assert_eq!(
        approvals[0]["arguments"], tool_args,
        "the call as the user sees it"
    );

    let mut stream_body = user(&text);
    stream_body["stream"] = json!(true);
    let events = chat_stream(&env, "tok", &token, &stream_body, &ask).await;
    let chunks = data_messages(&events);
    let extra = &chunks[chunks.len() - 2];
    assert_eq!(extra["approvals"].as_array().unwrap().len(), 2);
    let args: Value =
        serde_json::from_str(extra["approvals"][0]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, restored_mail_args()[0]);

    let r = env
        .app
        .get("/api/admin/agents/tok/approvals", &env.admin)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let listed = r.text().await.unwrap();
    assert_absent(&listed, "the admin's approval list");
    assert_nothing_stored(&env, 2).await;
}

#[tokio::test]
async fn one_value_keeps_its_token_through_a_conversation_and_the_vault_is_sealed() {
    let env = agent_scene(
        "tok",
        "up-tok-conv",
        pii("tokenize_reversible", false),
        "ann@example.com",
    )
    .await;
    let token = env.access.clone();
    let conv = |c: &'static str| [("X-Service-Conversation-Id", c)];

    let a = chat_json(
        &env,
        "tok",
        &token,
        &user(&format!("mail {EMAIL}")),
        &conv("conv-1"),
    )
    .await;
    assert_eq!(
        a["choices"][0]["message"]["content"],
        format!("echo: mail {EMAIL}")
    );
    let text = format!("now {EMAIL2} and {EMAIL}, call {PHONE}");
    let b = chat_json(&env, "tok", &token, &user(&text), &conv("conv-1")).await;
    assert_eq!(
        b["choices"][0]["message"]["content"],
        format!("echo: {text}")
    );
    // The model may use a token from an earlier turn: it is restored.
    env.stub.script(
        "up-tok-conv",
        Script::content("Done: [EMAIL_1], [EMAIL_2], [PHONE_1]."),
    );
    let c = chat_json(&env, "tok", &token, &user("thanks"), &conv("conv-1")).await;
    assert_eq!(
        c["choices"][0]["message"]["content"],
        format!("Done: {EMAIL}, {EMAIL2}, {PHONE}.")
    );
    // Another conversation numbers afresh, and does not know conv-1's tokens.
    env.stub.unscript("up-tok-conv");
    chat_json(
        &env,
        "tok",
        &token,
        &user(&format!("hi {EMAIL2}")),
        &conv("conv-2"),
    )
    .await;
    env.stub.script("up-tok-conv", Script::content("[EMAIL_2]"));
    let d = chat_json(&env, "tok", &token, &user("?"), &conv("conv-2")).await;
    assert_eq!(d["choices"][0]["message"]["content"], "[EMAIL_2]");

    let up: Vec<Value> = env
        .stub
        .requests_for_model("up-tok-conv")
        .into_iter()
        .map(|r| r.body["messages"].clone())
        .collect();
    let last_user = |m: &Value| {
        m.as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|x| x["role"] == "user")
            .unwrap()["content"]
            .clone()
    };
    assert_eq!(last_user(&up[0]), "mail [EMAIL_1]");
    assert_eq!(
        last_user(&up[1]),
        "now [EMAIL_2] and [EMAIL_1], call [PHONE_1]"
    );
    assert_eq!(last_user(&up[3]), "hi [EMAIL_1]");
    // A turn without new values still carries the note: earlier tokens may be in play.
    assert_eq!(up[2][0]["content"], gatehouse_pii::TOKEN_NOTE);

    let pool = &env.app.app().store.pool;
    let sealed: Vec<String> = sqlx::query_scalar("SELECT sealed FROM pii_vaults")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(sealed.len(), 2, "one vault per conversation");
    for s in &sealed {
        for v in [EMAIL, EMAIL2, PHONE, "example", "EMAIL_1", "conv-1"] {
            assert!(!s.contains(v), "{v} in a sealed vault");
        }
    }
    let keys: Vec<String> = sqlx::query_scalar("SELECT conversation_key FROM pii_vaults")
        .fetch_all(pool)
        .await
        .unwrap();
    assert!(keys.iter().all(|k| !k.contains("conv-")));
    assert_nothing_stored(&env, 5).await;
}

#[tokio::test]
async fn another_user_in_the_same_conversation_id_gets_another_vault() {
    let env = agent_scene(
        "tok",
        "up-tok-users",
        pii("tokenize_reversible", false),
        "ann@example.com",
    )
    .await;
    let ann = env.access.clone();
    let bob = sign_in(&env, "bob@example.com", "tok").await;
    let conv = [("X-Service-Conversation-Id", "shared-id")];
    chat_json(&env, "tok", &ann, &user(&format!("mail {EMAIL}")), &conv).await;
    env.stub
        .script("up-tok-users", Script::content("[EMAIL_1]"));
    let b = chat_json(&env, "tok", &bob, &user("who?"), &conv).await;
    assert_eq!(b["choices"][0]["message"]["content"], "[EMAIL_1]");
}

#[tokio::test]
async fn the_pii_mode_header_follows_the_agents_rules() {
    let env = env().await;
    agent(&env, "fixed", "up-fixed", pii("redact", false)).await;
    agent(&env, "choose", "up-choose", pii("off", true)).await;
    let (_, login) = env.app.user("ann@example.com").await;
    let fixed = sign_in_as(&env, &login, "fixed").await;
    let choose = sign_in_as(&env, &login, "choose").await;
    let body = user(&format!("mail {EMAIL}"));

    let r = chat(
        &env,
        "fixed",
        &fixed,
        &body,
        &[("X-Service-PII-Mode", "redact")],
    )
    .await;
    let (status, err) = v1_error(r).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["code"], "pii_mode_not_allowed");
    assert_eq!(err["type"], "invalid_request_error");
    for bad in ["loud", "off", "REDACT", ""] {
        let r = chat(
            &env,
            "choose",
            &choose,
            &body,
            &[("X-Service-PII-Mode", bad)],
        )
        .await;
        let (status, err) = v1_error(r).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(err["code"], "invalid_header", "{bad:?}");
        assert!(err["message"]
            .as_str()
            .unwrap()
            .contains("X-Service-PII-Mode"));
    }
    let r = chat(
        &env,
        "fixed",
        &fixed,
        &body,
        &[("X-Service-PII-Mode", "nonsense")],
    )
    .await;
    assert_eq!(v1_error(r).await.1["code"], "invalid_header");
    assert!(env.stub.requests_for_model("up-fixed").is_empty());
    assert!(env.stub.requests_for_model("up-choose").is_empty());

    // The agent's own mode without the header.
    chat_json(&env, "fixed", &fixed, &body, &[]).await;
    chat_json(&env, "choose", &choose, &body, &[]).await;
    let t = chat_json(
        &env,
        "choose",
        &choose,
        &body,
        &[("X-Service-PII-Mode", "tokenize_reversible")],
    )
    .await;
    assert_eq!(
        t["choices"][0]["message"]["content"],
        format!("echo: mail {EMAIL}")
    );
    let r = chat_json(
        &env,
        "choose",
        &choose,
        &body,
        &[("X-Service-PII-Mode", "redact")],
    )
    .await;
    assert_eq!(r["choices"][0]["message"]["content"], "echo: mail [EMAIL]");

    let up = |m: &str| -> Vec<Value> {
        env.stub
            .requests_for_model(m)
            .into_iter()
            .map(|r| r.body["messages"].as_array().unwrap().last().unwrap()["content"].clone())
            .collect()
    };
    assert_eq!(up("up-fixed"), vec![json!("mail [EMAIL]")]);
    assert_eq!(
        up("up-choose"),
        vec![
            json!(format!("mail {EMAIL}")),
            json!("mail [EMAIL_1]"),
            json!("mail [EMAIL]")
        ]
    );

    let r = env.app.get("/v1/agents/choose/profile", &choose).await;
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["pii"]["modes"], json!(["redact", "tokenize_reversible"]));
    let r = env.app.get("/v1/agents/fixed/profile", &fixed).await;
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["pii"]["modes"], json!([]));
}
