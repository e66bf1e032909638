//! Agent sign-in (`/api/agent-tokens`): the access and rotating refresh
//! tokens, reuse detection, renewal races, ending sign-ins, and the access
//! token as the agent routes check it.

use crate::common;

use std::time::Duration;

use base64::Engine;
use common::agents::{two_agents, AGENT, OTHER_AGENT};
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn s(v: &Value, k: &str) -> String {
    v[k].as_str()
        .unwrap_or_else(|| panic!("{k} in {v}"))
        .to_string()
}

/// The `jti` claim of a JWT (read without checking: the test issued it).
fn jti(jwt: &str) -> String {
    let payload = jwt.split('.').nth(1).expect("payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64");
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    s(&v, "jti")
}

#[tokio::test]
async fn sign_in_answers_the_contract_shape_and_the_access_token_reads_the_profile() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (uid, login) = app.user("ann@example.com").await;
    let r = app.try_sign_in(&login, AGENT, "Ann's laptop").await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let t: Value = r.json().await.unwrap();
    let mut keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "access_token",
            "agent",
            "device_id",
            "expires_in",
            "refresh_expires_in",
            "refresh_token",
            "token_type"
        ]
    );
    assert_eq!(t["token_type"], "bearer");
    assert_eq!(t["expires_in"], 900);
    assert_eq!(t["refresh_expires_in"], 2_592_000);
    assert_eq!(t["agent"], AGENT);
    assert!(s(&t, "refresh_token").starts_with("gtr_"));

    let r = app.profile(AGENT, &s(&t, "access_token")).await;
    assert_eq!(r.status(), StatusCode::OK);
    let p: Value = r.json().await.unwrap();
    assert_eq!(
        p,
        json!({
            "address": AGENT, "name": format!("Agent {AGENT}"), "model": "chat-1",
            "default_tool_mode": "ask", "tool_modes": ["off", "read_only", "ask", "auto"],
            "pii": {"mode": "off", "user_choosable": false, "modes": []},
            "allow_local_mcp": false, "tool_contract": [],
            "user": {"id": uid, "email": "ann@example.com"},
            "device_id": t["device_id"], "device_label": "Ann's laptop",
        })
    );
    // The agent's address may arrive percent-encoded.
    let r = app.profile("support%40acme", &s(&t, "access_token")).await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn renewal_with_the_current_token_keeps_the_device_and_rotates_both_tokens() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t1 = app.sign_in(&login, AGENT, "laptop").await;
    let t2 = app.refreshed(&s(&t1, "refresh_token")).await;
    assert_eq!(t2["device_id"], t1["device_id"]);
    assert_eq!(t2["agent"], AGENT);
    assert_eq!(t2["token_type"], "bearer");
    assert_ne!(t2["refresh_token"], t1["refresh_token"]);
    assert_ne!(t2["access_token"], t1["access_token"]);
    assert!(s(&t2, "refresh_token").starts_with("gtr_"));
    let r = app.profile(AGENT, &s(&t2, "access_token")).await;
    assert_eq!(r.status(), StatusCode::OK);
    // The newest token keeps rotating.
    let t3 = app.refreshed(&s(&t2, "refresh_token")).await;
    assert_eq!(t3["device_id"], t1["device_id"]);
}

#[tokio::test]
async fn reusing_a_superseded_refresh_token_ends_the_sign_in() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t1 = app.sign_in(&login, AGENT, "laptop").await;
    let t2 = app.refreshed(&s(&t1, "refresh_token")).await;
    assert_eq!(
        api_code(app.refresh(&s(&t1, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "refresh_token_reused".into())
    );
    // Reported the same way when presented again.
    assert_eq!(
        api_code(app.refresh(&s(&t1, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "refresh_token_reused".into())
    );
    assert_eq!(
        api_code(app.refresh(&s(&t2, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    assert_eq!(
        v1_code(app.profile(AGENT, &s(&t2, "access_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    assert!(app.mine(&login).await.is_empty());
}

#[tokio::test]
async fn reuse_ends_every_sign_in_of_that_user_on_every_device_and_agent_only() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, ann) = app.user("ann@example.com").await;
    let (_, bob) = app.user("bob@example.com").await;
    let a1 = app.sign_in(&ann, AGENT, "laptop").await;
    let a2 = app.sign_in(&ann, OTHER_AGENT, "phone").await;
    let a3 = app.sign_in(&ann, AGENT, "tablet").await;
    let b1 = app.sign_in(&bob, AGENT, "bob's laptop").await;
    assert_eq!(app.mine(&ann).await.len(), 3);
    // Warm the cache of every access token first: the ending must evict them.
    for (agent, t) in [(AGENT, &a1), (OTHER_AGENT, &a2), (AGENT, &a3), (AGENT, &b1)] {
        assert_eq!(
            app.profile(agent, &s(t, "access_token")).await.status(),
            StatusCode::OK
        );
    }
    let a1b = app.refreshed(&s(&a1, "refresh_token")).await;
    assert_eq!(
        api_code(app.refresh(&s(&a1, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "refresh_token_reused".into())
    );
    for (agent, t) in [(AGENT, &a1b), (OTHER_AGENT, &a2), (AGENT, &a3)] {
        assert_eq!(
            v1_code(app.profile(agent, &s(t, "access_token")).await).await,
            (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
        );
        assert_eq!(
            api_code(app.refresh(&s(t, "refresh_token")).await).await,
            (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
        );
    }
    assert!(app.mine(&ann).await.is_empty());
    // Bob is untouched.
    assert_eq!(
        app.profile(AGENT, &s(&b1, "access_token")).await.status(),
        StatusCode::OK
    );
    assert_eq!(app.mine(&bob).await.len(), 1);
    app.refreshed(&s(&b1, "refresh_token")).await;
    // Ann can sign in again.
    app.sign_in(&ann, AGENT, "laptop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_twenty_concurrent_renewals_with_one_token_exactly_one_succeeds() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    let token = s(&t, "refresh_token");
    let url = app.u("/api/agent-tokens/refresh");
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (client, url, token, barrier) = (
            app.client.clone(),
            url.clone(),
            token.clone(),
            barrier.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = client
                .post(url)
                .json(&json!({"refresh_token": token}))
                .send()
                .await
                .expect("send");
            api_code(r).await
        }));
    }
    let mut ok = 0;
    let mut refused = Vec::new();
    for t in tasks {
        let (status, code) = t.await.expect("task");
        if status == StatusCode::OK {
            ok += 1;
        } else {
            refused.push((status, code));
        }
    }
    assert_eq!(ok, 1, "exactly one renewal wins: {refused:?}");
    assert_eq!(refused.len(), 19);
    // The losers presented a token that was superseded: that is reuse.
    assert!(
        refused
            .iter()
            .all(|(st, c)| *st == StatusCode::UNAUTHORIZED && c == "refresh_token_reused"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn ending_a_sign_in_refuses_its_refresh_and_its_cached_access_token_at_once() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    let access = s(&t, "access_token");
    assert_eq!(app.profile(AGENT, &access).await.status(), StatusCode::OK);
    let r = app
        .delete(&format!("/api/agent-tokens/{}", s(&t, "device_id")), &login)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        v1_code(app.profile(AGENT, &access).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    assert_eq!(
        api_code(app.refresh(&s(&t, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    assert!(app.mine(&login).await.is_empty());
    // Ended already: nothing left to end.
    assert_eq!(
        api_code(
            app.delete(&format!("/api/agent-tokens/{}", s(&t, "device_id")), &login)
                .await
        )
        .await,
        (StatusCode::NOT_FOUND, "sign_in_not_found".into())
    );
}

#[tokio::test]
async fn a_device_may_end_itself_with_its_access_token_but_no_other() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let laptop = app.sign_in(&login, AGENT, "laptop").await;
    let phone = app.sign_in(&login, AGENT, "phone").await;
    let r = app
        .delete(
            &format!("/api/agent-tokens/{}", s(&phone, "device_id")),
            &s(&laptop, "access_token"),
        )
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::NOT_FOUND, "sign_in_not_found".into())
    );
    let r = app
        .delete(
            &format!("/api/agent-tokens/{}", s(&laptop, "device_id")),
            &s(&laptop, "access_token"),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let left = app.mine(&s(&phone, "access_token")).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["device_id"], phone["device_id"]);
}

#[tokio::test]
async fn mine_lists_live_sign_ins_with_their_fields_for_login_and_access_tokens() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let (_, bob) = app.user("bob@example.com").await;
    let a = app.sign_in(&login, AGENT, "laptop").await;
    let b = app.sign_in(&login, OTHER_AGENT, "phone").await;
    app.sign_in(&bob, AGENT, "bob's").await;
    let list = app.mine(&login).await;
    assert_eq!(list.len(), 2);
    let entry = list
        .iter()
        .find(|e| e["device_id"] == a["device_id"])
        .expect("laptop listed");
    let mut keys: Vec<&str> = entry
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "agent",
            "created_at",
            "device_id",
            "device_label",
            "expires_at",
            "last_used_at"
        ]
    );
    assert_eq!(entry["agent"], AGENT);
    assert_eq!(entry["device_label"], "laptop");
    let created = chrono::DateTime::parse_from_rfc3339(&s(entry, "created_at")).unwrap();
    let expires = chrono::DateTime::parse_from_rfc3339(&s(entry, "expires_at")).unwrap();
    let days = (expires - created).num_seconds();
    assert!((2_591_990..=2_592_010).contains(&days), "{days}");
    // Using the access token moves last_used_at (before it is written out too).
    tokio::time::sleep(Duration::from_millis(20)).await;
    app.profile(OTHER_AGENT, &s(&b, "access_token")).await;
    let list = app.mine(&s(&b, "access_token")).await;
    let phone = list
        .iter()
        .find(|e| e["device_id"] == b["device_id"])
        .unwrap();
    assert!(s(phone, "last_used_at") > s(phone, "created_at"), "{phone}");
}

#[tokio::test]
async fn sign_in_errors_have_the_contract_codes() {
    let app = spawn_app().await;
    let admin = two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    assert_eq!(
        api_code(app.try_sign_in(&login, "nobody", "laptop").await).await,
        (StatusCode::NOT_FOUND, "agent_not_found".into())
    );
    let r = app.try_sign_in(&login, "Not An Address", "laptop").await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["detail"]["code"], "validation_error");
    // allowed_users keeps everybody else out.
    let r = app
        .patch(
            &format!("/api/admin/agents/{AGENT}"),
            &admin,
            &json!({"allowed_users": ["Bob@Example.com"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        api_code(app.try_sign_in(&login, AGENT, "laptop").await).await,
        (StatusCode::FORBIDDEN, "agent_forbidden".into())
    );
    let (_, bob) = app.user("bob@example.com").await;
    app.sign_in(&bob, AGENT, "laptop").await;
    // The label: 1 to 200 characters.
    app.sign_in(&login, OTHER_AGENT, &"é".repeat(200)).await;
    for bad in [json!("x".repeat(201)), json!(""), json!(null), json!(7)] {
        let r = app
            .post(
                "/api/agent-tokens",
                &login,
                &json!({"agent": OTHER_AGENT, "device_label": bad}),
            )
            .await;
        assert_eq!(
            api_code(r).await,
            (StatusCode::BAD_REQUEST, "validation_error".into()),
            "{bad}"
        );
    }
    let r = app
        .post("/api/agent-tokens", &login, &json!({"agent": OTHER_AGENT}))
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
}

#[tokio::test]
async fn only_login_tokens_start_a_sign_in_and_only_access_tokens_open_agent_routes() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let key = app.api_key(&login, json!({"name": "k"})).await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    let access = s(&t, "access_token");
    for token in [
        &access,
        &key,
        &s(&t, "refresh_token"),
        &"garbage".to_string(),
    ] {
        assert_eq!(
            api_code(app.try_sign_in(token, AGENT, "x").await).await,
            (StatusCode::UNAUTHORIZED, "invalid_token".into())
        );
    }
    for token in [
        &login,
        &key,
        &s(&t, "refresh_token"),
        &"garbage".to_string(),
    ] {
        let r = app.profile(AGENT, token).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_token");
        assert_eq!(v["error"]["type"], "authentication_error");
    }
    let r = app
        .client
        .get(app.u(&format!("/v1/agents/{AGENT}/profile")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        v1_code(r).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".into())
    );
    // A token signed with another secret.
    let forged = gatehouse::auth::tokens::TokenKeys::new(b"another-secret-another-secret-32")
        .issue("access", "u", 60, Some(&s(&t, "device_id")), Some(AGENT))
        .0;
    assert_eq!(
        v1_code(app.profile(AGENT, &forged).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".into())
    );
    // An access token is not accepted on the rest of /api either.
    assert_eq!(
        api_code(app.get("/api/users/me", &access).await).await,
        (StatusCode::UNAUTHORIZED, "invalid_token".into())
    );
}

#[tokio::test]
async fn an_access_token_on_another_agents_path_is_agent_mismatch() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    // `%FF` does not decode to UTF-8: it names no agent, so not the token's.
    for path_agent in [OTHER_AGENT, "no-such-agent", "%FF"] {
        let r = app.profile(path_agent, &s(&t, "access_token")).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "agent_mismatch");
        assert_eq!(v["error"]["type"], "permission_error");
    }
}

#[tokio::test]
async fn expired_access_token_is_token_expired_and_refresh_gives_a_working_one() {
    let app = spawn_app_with(|s| s.access_token_ttl = 1).await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    assert_eq!(t["expires_in"], 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        v1_code(app.profile(AGENT, &s(&t, "access_token")).await).await,
        (StatusCode::UNAUTHORIZED, "token_expired".into())
    );
    assert_eq!(
        api_code(
            app.get("/api/agent-tokens/mine", &s(&t, "access_token"))
                .await
        )
        .await,
        (StatusCode::UNAUTHORIZED, "token_expired".into())
    );
    let t2 = app.refreshed(&s(&t, "refresh_token")).await;
    assert_eq!(
        app.profile(AGENT, &s(&t2, "access_token")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn expired_refresh_token_is_refresh_token_expired() {
    let app = spawn_app_with(|s| s.refresh_token_ttl = 1).await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    assert_eq!(t["refresh_expires_in"], 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        api_code(app.refresh(&s(&t, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "refresh_token_expired".into())
    );
    // A sign-in that can no longer be renewed is not live.
    assert!(app.mine(&login).await.is_empty());
}

#[tokio::test]
async fn anything_else_presented_for_renewal_is_invalid_refresh_token() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    let unknown = format!("gtr_{}", "A".repeat(43));
    for bad in [
        unknown.as_str(),
        "",
        "abc",
        &s(&t, "access_token"),
        &login,
        &s(&t, "refresh_token")[..20],
    ] {
        assert_eq!(
            api_code(app.refresh(bad).await).await,
            (StatusCode::UNAUTHORIZED, "invalid_refresh_token".into()),
            "{bad}"
        );
    }
    // A wrong shape is a validation error, not a credential one.
    let r = app
        .client
        .post(app.u("/api/agent-tokens/refresh"))
        .json(&json!({"token": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    // The sign-in itself was not harmed by any of this.
    app.refreshed(&s(&t, "refresh_token")).await;
}

#[tokio::test]
async fn unknown_or_foreign_device_is_sign_in_not_found() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, ann) = app.user("ann@example.com").await;
    let (_, bob) = app.user("bob@example.com").await;
    let t = app.sign_in(&ann, AGENT, "laptop").await;
    for path in [
        "/api/agent-tokens/nope".to_string(),
        format!("/api/agent-tokens/{}", s(&t, "device_id")),
    ] {
        assert_eq!(
            api_code(app.delete(&path, &bob).await).await,
            (StatusCode::NOT_FOUND, "sign_in_not_found".into())
        );
    }
    // Bob's attempt changed nothing.
    assert_eq!(
        app.profile(AGENT, &s(&t, "access_token")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn admin_lists_a_users_sign_ins_with_ended_ones_and_can_end_one() {
    let app = spawn_app().await;
    let admin = two_agents(&app).await;
    let (uid, ann) = app.user("ann@example.com").await;
    let a = app.sign_in(&ann, AGENT, "laptop").await;
    let b = app.sign_in(&ann, OTHER_AGENT, "phone").await;
    app.delete(&format!("/api/agent-tokens/{}", s(&a, "device_id")), &ann)
        .await;
    let r = app
        .get("/api/admin/sign-ins?user=Ann@Example.com", &admin)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let list: Vec<Value> = r.json().await.unwrap();
    assert_eq!(list.len(), 2);
    let ended = list
        .iter()
        .find(|e| e["device_id"] == a["device_id"])
        .unwrap();
    assert_eq!(ended["end_reason"], "signed_out");
    assert!(ended["ended_at"].is_string());
    assert_eq!(ended["user"], "ann@example.com");
    assert_eq!(ended["user_id"], uid.as_str());
    let live = list
        .iter()
        .find(|e| e["device_id"] == b["device_id"])
        .unwrap();
    assert!(live["ended_at"].is_null() && live["end_reason"].is_null());
    assert_eq!(live["device_label"], "phone");

    let r = app
        .delete(
            &format!("/api/admin/sign-ins/{}", s(&b, "device_id")),
            &admin,
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        api_code(app.refresh(&s(&b, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    assert_eq!(
        v1_code(app.profile(OTHER_AGENT, &s(&b, "access_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    for path in [
        format!("/api/admin/sign-ins/{}", s(&b, "device_id")),
        "/api/admin/sign-ins/nope".to_string(),
    ] {
        assert_eq!(
            api_code(app.delete(&path, &admin).await).await,
            (StatusCode::NOT_FOUND, "sign_in_not_found".into())
        );
    }
    // Non-admins, a missing or unknown user.
    assert_eq!(
        api_code(
            app.get("/api/admin/sign-ins?user=ann@example.com", &ann)
                .await
        )
        .await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
    assert_eq!(
        api_code(app.delete("/api/admin/sign-ins/nope", &ann).await).await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
    assert_eq!(
        api_code(
            app.get("/api/admin/sign-ins?user=who@example.com", &admin)
                .await
        )
        .await,
        (StatusCode::NOT_FOUND, "user_not_found".into())
    );
}

#[tokio::test]
async fn disabling_a_user_ends_their_sign_ins_for_good() {
    let app = spawn_app().await;
    let admin = two_agents(&app).await;
    let (uid, ann) = app.user("ann@example.com").await;
    let t = app.sign_in(&ann, AGENT, "laptop").await;
    assert_eq!(
        app.profile(AGENT, &s(&t, "access_token")).await.status(),
        StatusCode::OK
    );
    let r = app
        .patch(
            &format!("/api/admin/users/{uid}"),
            &admin,
            &json!({"is_active": false}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        v1_code(app.profile(AGENT, &s(&t, "access_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    assert_eq!(
        api_code(app.refresh(&s(&t, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    app.patch(
        &format!("/api/admin/users/{uid}"),
        &admin,
        &json!({"is_active": true}),
    )
    .await;
    assert_eq!(
        api_code(app.refresh(&s(&t, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    let list: Vec<Value> = app
        .get("/api/admin/sign-ins?user=ann@example.com", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list[0]["end_reason"], "user_disabled");
}

#[tokio::test]
async fn narrowing_allowed_users_signs_out_the_users_left_out() {
    let app = spawn_app().await;
    let admin = two_agents(&app).await;
    let (_, ann) = app.user("ann@example.com").await;
    let (_, bob) = app.user("bob@example.com").await;
    let a = app.sign_in(&ann, AGENT, "laptop").await;
    let b = app.sign_in(&bob, AGENT, "laptop").await;
    let a_other = app.sign_in(&ann, OTHER_AGENT, "laptop").await;
    app.profile(AGENT, &s(&a, "access_token")).await;
    let r = app
        .patch(
            &format!("/api/admin/agents/{AGENT}"),
            &admin,
            &json!({"allowed_users": ["bob@example.com"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        v1_code(app.profile(AGENT, &s(&a, "access_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
    assert_eq!(
        app.profile(AGENT, &s(&b, "access_token")).await.status(),
        StatusCode::OK
    );
    // Another agent's sign-in of the same user is not concerned.
    assert_eq!(
        app.profile(OTHER_AGENT, &s(&a_other, "access_token"))
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn only_hashes_of_refresh_tokens_and_access_token_ids_are_stored() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let (_, ann) = app.user("ann@example.com").await;
    let t1 = app.sign_in(&ann, AGENT, "laptop").await;
    let t2 = app.refreshed(&s(&t1, "refresh_token")).await;
    let pool = &app.app().store.pool;
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT token_hash, state FROM refresh_tokens ORDER BY created_at")
            .fetch_all(pool)
            .await
            .unwrap();
    let sha = gatehouse::auth::sha256_hex;
    assert_eq!(
        rows,
        vec![
            (sha(&s(&t1, "refresh_token")), "used".to_string()),
            (sha(&s(&t2, "refresh_token")), "current".to_string()),
        ]
    );
    let jtis: Vec<String> =
        sqlx::query_scalar("SELECT jti_hash FROM access_tokens ORDER BY created_at")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(
        jtis,
        vec![
            sha(&jti(&s(&t1, "access_token"))),
            sha(&jti(&s(&t2, "access_token")))
        ]
    );
    // No column of any sign-in table holds a token or token id in the clear.
    let secrets = [
        s(&t1, "refresh_token"),
        s(&t2, "refresh_token"),
        jti(&s(&t1, "access_token")),
        jti(&s(&t2, "access_token")),
    ];
    for table in ["refresh_tokens", "access_tokens", "sign_ins"] {
        let cols: Vec<String> = match table {
            "refresh_tokens" => vec!["token_hash".into(), "device_id".into(), "state".into()],
            "access_tokens" => vec!["jti_hash".into(), "device_id".into()],
            _ => vec!["device_id".into(), "device_label".into(), "agent".into()],
        };
        for col in cols {
            let values: Vec<String> = sqlx::query_scalar(&format!("SELECT {col} FROM {table}"))
                .fetch_all(pool)
                .await
                .unwrap();
            for v in values {
                assert!(!secrets.contains(&v), "{table}.{col} holds a secret");
            }
        }
    }
}

#[tokio::test]
async fn sign_ins_and_tokens_survive_a_restart() {
    let mut app = spawn_app().await;
    two_agents(&app).await;
    let (_, ann) = app.user("ann@example.com").await;
    let t = app.sign_in(&ann, AGENT, "laptop").await;
    let old = app.refreshed(&s(&t, "refresh_token")).await;
    app.profile(AGENT, &s(&old, "access_token")).await;
    app.restart().await;
    // The last use was written out on shutdown.
    let last: Option<i64> =
        sqlx::query_scalar("SELECT last_used_at FROM sign_ins WHERE device_id = $1")
            .bind(s(&t, "device_id"))
            .fetch_one(&app.app().store.pool)
            .await
            .unwrap();
    assert!(last.is_some());
    assert_eq!(
        app.profile(AGENT, &s(&old, "access_token")).await.status(),
        StatusCode::OK
    );
    let list = app.mine(&ann).await;
    assert_eq!(list.len(), 1);
    let next = app.refreshed(&s(&old, "refresh_token")).await;
    assert_eq!(next["device_id"], t["device_id"]);
    assert_eq!(
        app.profile(AGENT, &s(&next, "access_token")).await.status(),
        StatusCode::OK
    );
    // Reuse detection still knows the tokens issued before the restart.
    assert_eq!(
        api_code(app.refresh(&s(&t, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "refresh_token_reused".into())
    );
    // And the agent is still there, with its settings.
    let admin = app.admin_token().await;
    let v: Value = app
        .get(&format!("/api/admin/agents/{AGENT}"), &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["model"], "chat-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewal_races_across_two_servers_on_one_database_have_one_winner() {
    let app = spawn_app().await;
    two_agents(&app).await;
    let second = gatehouse::start(app.settings.clone())
        .await
        .expect("second server");
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    let token = s(&t, "refresh_token");
    let urls = [
        app.u("/api/agent-tokens/refresh"),
        format!("{}/api/agent-tokens/refresh", second.url()),
    ];
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (client, url, token, barrier) = (
            app.client.clone(),
            urls[i % 2].clone(),
            token.clone(),
            barrier.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = client
                .post(url)
                .json(&json!({"refresh_token": token}))
                .send()
                .await
                .expect("send");
            r.status()
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.expect("task") == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 1);
    second.shutdown().await;
}

/// On PostgreSQL an ending reaches the other servers' caches by NOTIFY.
#[tokio::test]
async fn an_ending_on_one_server_is_seen_by_another_servers_cache() {
    let app = spawn_app().await;
    if app.app().store.backend != gatehouse::store::Backend::Postgres {
        return; // One SQLite file serves one server; there is nobody to tell.
    }
    two_agents(&app).await;
    let second = gatehouse::start(app.settings.clone())
        .await
        .expect("second server");
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "laptop").await;
    let on_second = format!("{}/v1/agents/{AGENT}/profile", second.url());
    let get = || {
        app.client
            .get(&on_second)
            .bearer_auth(s(&t, "access_token"))
            .send()
    };
    assert_eq!(get().await.unwrap().status(), StatusCode::OK);
    let r = app
        .delete(&format!("/api/agent-tokens/{}", s(&t, "device_id")), &login)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    // The notification is delivered asynchronously: allow it a moment.
    let mut status = StatusCode::OK;
    for _ in 0..50 {
        status = get().await.unwrap().status();
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    second.shutdown().await;
}
