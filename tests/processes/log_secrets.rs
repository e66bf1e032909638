//! No secret and no found PII value in the logs, at any level (contract
//! "Operations", "Logs"): a real `gatehouse serve` at `debug` (our own
//! crate at `trace`) serves every kind of request that carries a
//! credential or PII; then all of its standard output and error is searched
//! for each secret, its last 16 characters, and each found value (a phone
//! number also without its spaces). Needs `npm ci` in tests/oidc (the test
//! OpenID Connect provider; scripts/test.sh does it).

use crate::common;

use common::captured::{serve, stop, Api};
use common::oidc::{pkce_pair, query_param, Browser, OidcProvider};
use common::{ADMIN_EMAIL, ADMIN_PASSWORD};
use gatehouse_stub_upstream::Stub;
use serde_json::{json, Value};

const GATEHOUSE_SECRET: &str = "deployment-secret-7f3a9c2e5b8d1f4a6c0e9b2d";
const PROVIDER_KEY: &str = "sk-provider-key-51c8e2a7d94b3f60";
const SSO_CLIENT_SECRET: &str = "sso-client-secret-a83f5d21c9e7b604";
const USER_PASSWORD: &str = "user-password-Q8w2e4r6t";
const WRONG_PASSWORD: &str = "wrong-password-Z1x3c5v7b";
const BOGUS_KEY: &str = "gtk_bogus0key0that0looks0real0c4e8a1f3b7d9";

const EMAIL: &str = "jane.doe@example.com";
const PHONE: &str = "+44 20 7946 0958";
const CARD: &str = "4111 1111 1111 1111";
const IBAN: &str = "GB82 WEST 1234 5698 7654 32";
const TERM: &str = "Nightingale";

fn pii_text() -> String {
    format!("Mail {EMAIL}, call {PHONE}, card {CARD}, wire to {IBAN}, ask {TERM}.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_or_found_pii_value_appears_in_debug_and_trace_logs() {
    let stub = Stub::start().await;
    let s = serve(&[
        ("GATEHOUSE_LOG", "debug,gatehouse=trace"),
        ("GATEHOUSE_SECRET", GATEHOUSE_SECRET),
    ])
    .await;
    let api = Api::new(&s.url);
    let mut secrets: Vec<String> = [
        ADMIN_PASSWORD,
        GATEHOUSE_SECRET,
        PROVIDER_KEY,
        SSO_CLIENT_SECRET,
        USER_PASSWORD,
        WRONG_PASSWORD,
        BOGUS_KEY,
    ]
    .map(str::to_string)
    .to_vec();

    // Logins: right and wrong passwords.
    let admin = api.token(ADMIN_EMAIL, ADMIN_PASSWORD).await;
    secrets.push(admin.clone());
    let r = api.login(ADMIN_EMAIL, WRONG_PASSWORD).await;
    assert_eq!(r.status(), 400);

    // A provider with a key; models of every kind.
    api.post(
        &admin,
        "/api/admin/providers",
        json!({"name": "stub", "type": "openai", "base_url": stub.openai_base_url(),
               "api_key": PROVIDER_KEY}),
    )
    .await;
    for (id, kind, upstream) in [
        ("chat-m", "chat", "up-chat"),
        ("embed-m", "embeddings", "up-embed"),
        ("rerank-m", "scoring", "up-rerank"),
    ] {
        api.post(
            &admin,
            "/api/admin/models",
            json!({"id": id, "kind": kind, "provider": "stub", "upstream_model": upstream}),
        )
        .await;
    }
    assert!(
        stub.requests().is_empty(),
        "nothing upstream yet: setup only"
    );

    // A user, an API key, and every model route with it.
    api.post(
        &admin,
        "/api/admin/users",
        json!({"email": "dev@example.com", "password": USER_PASSWORD}),
    )
    .await;
    let user = api.token("dev@example.com", USER_PASSWORD).await;
    secrets.push(user.clone());
    let key = api.post(&user, "/api/api-keys", json!({"name": "k"})).await["key"]
        .as_str()
        .unwrap()
        .to_string();
    secrets.push(key.clone());
    let chat = json!({"model": "chat-m", "messages": [{"role": "user", "content": pii_text()}]});
    api.post(&key, "/v1/chat/completions", chat.clone()).await;
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let r = api
        .c
        .post(format!("{}/v1/chat/completions", api.url))
        .bearer_auth(&key)
        .json(&streamed)
        .send()
        .await
        .unwrap();
    assert!(r.text().await.unwrap().contains("[DONE]"));
    api.post(
        &key,
        "/v1/embeddings",
        json!({"model": "embed-m", "input": pii_text()}),
    )
    .await;
    api.post(
        &key,
        "/v1/rerank",
        json!({"model": "rerank-m", "query": pii_text(), "documents": [pii_text(), "b"]}),
    )
    .await;
    assert!(
        stub.requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {PROVIDER_KEY}"))),
        "the provider key went upstream"
    );

    // Refused credentials.
    for bad in [BOGUS_KEY, "not-a-token"] {
        let r = api
            .c
            .get(format!("{}/v1/models", api.url))
            .bearer_auth(bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }

    // Agents with PII protection: sign in, chat, refresh, chat streamed.
    let mut found = vec![EMAIL, PHONE, CARD, IBAN, TERM];
    for (address, mode) in [("redactor", "redact"), ("tokenizer", "tokenize_reversible")] {
        api.post(
            &admin,
            "/api/admin/agents",
            json!({"address": address, "name": address, "model": "chat-m",
                   "pii": {"mode": mode, "terms": [TERM]}}),
        )
        .await;
        let sign_in = api
            .post(
                &user,
                "/api/agent-tokens",
                json!({"agent": address, "device_label": "laptop"}),
            )
            .await;
        let access = sign_in["access_token"].as_str().unwrap().to_string();
        let refresh = sign_in["refresh_token"].as_str().unwrap().to_string();
        secrets.extend([access.clone(), refresh.clone()]);
        let body = json!({"messages": [{"role": "user", "content": pii_text()}]});
        let path = format!("/v1/agents/{address}/chat/completions");
        api.post(&access, &path, body.clone()).await;
        let renewed: Value = api
            .c
            .post(format!("{}/api/agent-tokens/refresh", api.url))
            .json(&json!({"refresh_token": refresh}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let access = renewed["access_token"].as_str().unwrap().to_string();
        secrets.extend([
            access.clone(),
            renewed["refresh_token"].as_str().unwrap().to_string(),
        ]);
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let r = api
            .c
            .post(format!("{}{path}", api.url))
            .bearer_auth(&access)
            .json(&streamed)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.text().await.unwrap().contains("[DONE]"));
        // The old refresh token again: refused (and a reuse alarm, if any, quiet about it).
        let r = api
            .c
            .post(format!("{}/api/agent-tokens/refresh", api.url))
            .json(&json!({"refresh_token": refresh}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error());
    }
    // What the upstream got had no found value (the PII was protected).
    let agent_bodies: Vec<String> = stub
        .requests()
        .iter()
        .filter(|r| r.raw_body.contains("[EMAIL") || r.raw_body.contains("EMAIL_"))
        .map(|r| r.raw_body.clone())
        .collect();
    assert!(!agent_bodies.is_empty(), "the agents' PII was replaced");

    // Single sign-on: an app's whole sign-in (client secret, code, login token).
    let idp = OidcProvider::start();
    idp.register(
        "gatehouse",
        SSO_CLIENT_SECRET,
        &[&format!("{}/api/auth/sso/corp/callback", api.url)],
    )
    .await;
    api.post(
        &admin,
        "/api/admin/sso",
        json!({"name": "corp", "issuer": idp.issuer, "client_id": "gatehouse",
               "client_secret": SSO_CLIENT_SECRET, "create_users": true}),
    )
    .await;
    idp.next_user("sso-1", "sso.user@example.com", true, &[])
        .await;
    let (verifier, challenge) = pkce_pair();
    let app_redirect = "http://127.0.0.1:53682/callback";
    let stop_at = Browser::new()
        .walk(
            &format!(
                "{}/api/auth/sso/corp/authorize?redirect_uri={}&state=s1&code_challenge={challenge}&code_challenge_method=S256",
                api.url,
                url::form_urlencoded::byte_serialize(app_redirect.as_bytes()).collect::<String>()
            ),
            Some(app_redirect),
        )
        .await;
    let code = query_param(&stop_at.url, "code").unwrap_or_else(|| panic!("no code: {stop_at:?}"));
    secrets.extend([code.clone(), verifier.clone()]);
    let r = api
        .c
        .post(format!("{}/api/auth/sso/token", api.url))
        .json(&json!({"code": code, "code_verifier": verifier, "redirect_uri": app_redirect}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    secrets.push(v["access_token"].as_str().unwrap().to_string());

    let (out, err, _) = stop(s);
    let all = format!("{out}\n{err}");
    if let Ok(path) = std::env::var("GATEHOUSE_TEST_LOG_DUMP") {
        std::fs::write(path, &all).unwrap();
    }
    // One debug line per upstream attempt: 4 with the key, 2 chats per agent.
    let attempts: Vec<&str> = all
        .lines()
        .filter(|l| l.contains("upstream attempt"))
        .collect();
    assert_eq!(attempts.len(), 8, "{attempts:#?}");
    for l in &attempts {
        for part in [
            "provider=stub",
            "upstream_model=up-",
            "status=200",
            "duration_ms=",
            "request_id=",
        ] {
            assert!(l.contains(part), "{part} in {l}");
        }
    }
    for secret in &secrets {
        let tail = &secret[secret.len().saturating_sub(16)..];
        if let Some(line) = all.lines().find(|l| l.contains(tail)) {
            panic!("a secret (or its last 16 characters) {tail:?} shows: {line}");
        }
    }
    let phone_plain = PHONE.replace(' ', "");
    found.push(&phone_plain);
    for value in found {
        if let Some(line) = all.lines().find(|l| l.contains(value)) {
            panic!("a found PII value {value:?} shows: {line}");
        }
    }
}
