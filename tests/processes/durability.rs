//! Durability (contract, "Hardening" → "Durability"): `kill -9` of a real
//! server under load, a restart on the same database, and everything that
//! was answered 2xx is there: events, approval decisions, sign-ins,
//! renewals, users and keys. SQLite by default; PostgreSQL when
//! GATEHOUSE_TEST_DATABASE_URL points at one.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::procs::{agent_setup, get_json, login, new_sign_in, spawn_server};
use common::stub::{calling, tool_call};
use parking_lot::Mutex;
use serde_json::{json, Value};

#[derive(Default)]
struct Answered {
    events: Vec<String>,
    /// (approval id, decision)
    decisions: Vec<(String, String)>,
    sign_ins: Vec<String>,
    /// The refresh token of each renewal chain's last answered renewal.
    refresh: Vec<Option<String>>,
    users: Vec<String>,
    keys: Vec<String>,
}

#[tokio::test]
async fn everything_answered_2xx_survives_kill_9_under_load() {
    let stub = gatehouse_stub_upstream::Stub::start().await;
    stub.script(
        "dur-up",
        calling(vec![tool_call(
            "call_1",
            "delete_file",
            "{\"path\":\"/tmp/x\"}",
        )]),
    );
    let (db, _dir) = common::fresh_database().await;
    let mut p = spawn_server(&db, &[]).await;
    let url = p.url.clone();
    let c = common::client();
    let setup = agent_setup(
        &c,
        &url,
        &stub.openai_base_url(),
        "dur-up",
        "dur",
        json!({"default_tool_mode": "ask"}),
    )
    .await;
    let s = new_sign_in(&c, &url, &setup.user, "dur", "desk").await;
    let access = s["access_token"].as_str().unwrap().to_string();
    // Pending approvals to decide under load, one per conversation.
    let tools = json!([{"type": "function", "function": {"name": "delete_file", "parameters": {"type": "object"}}}]);
    let mut pending = Vec::new();
    for i in 0..40 {
        let r = c
            .post(format!("{url}/v1/agents/dur/chat/completions"))
            .bearer_auth(&access)
            .header("x-service-conversation-id", format!("conv-{i}"))
            .json(&json!({"model": "x", "messages": [{"role": "user", "content": "clean up"}], "tools": tools}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        pending.push(v["approvals"][0]["id"].as_str().unwrap().to_string());
    }
    let renewals: Vec<String> = {
        let mut v = Vec::new();
        for i in 0..4 {
            let s = new_sign_in(&c, &url, &setup.user, "dur", &format!("renewing-{i}")).await;
            v.push(s["refresh_token"].as_str().unwrap().to_string());
        }
        v
    };

    let answered = Arc::new(Mutex::new(Answered {
        refresh: vec![None; renewals.len()],
        ..Answered::default()
    }));
    let mut load = Vec::new();
    // Events: 4 writers.
    for w in 0..4 {
        let (url, access, answered) = (url.clone(), access.clone(), Arc::clone(&answered));
        load.push(tokio::spawn(async move {
            let c = common::client();
            for n in 0.. {
                let ids: Vec<String> = (0..5).map(|k| format!("ev-{w}-{n}-{k}")).collect();
                let events: Vec<Value> = ids
                    .iter()
                    .map(|id| json!({"id": id, "type": "tool.used", "data": {"n": n}}))
                    .collect();
                let r = c
                    .post(format!("{url}/v1/agents/dur/events"))
                    .bearer_auth(&access)
                    .json(&json!({"events": events}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => answered.lock().events.extend(ids),
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        }));
    }
    // Approval decisions.
    {
        let (url, access, answered) = (url.clone(), access.clone(), Arc::clone(&answered));
        load.push(tokio::spawn(async move {
            let c = common::client();
            for (i, id) in pending.into_iter().enumerate() {
                let decision = if i % 2 == 0 { "approve" } else { "deny" };
                let r = c
                    .post(format!("{url}/v1/agents/dur/approvals/{id}"))
                    .bearer_auth(&access)
                    .json(&json!({"decision": decision}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => {
                        answered.lock().decisions.push((id, decision.into()))
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
                tokio::time::sleep(Duration::from_millis(80)).await;
            }
        }));
    }
    // Sign-ins.
    {
        let (url, login_token, answered) = (url.clone(), setup.user.clone(), Arc::clone(&answered));
        load.push(tokio::spawn(async move {
            let c = common::client();
            for n in 0.. {
                let r = c
                    .post(format!("{url}/api/agent-tokens"))
                    .bearer_auth(&login_token)
                    .json(&json!({"agent": "dur", "device_label": format!("device-{n}")}))
                    .send()
                    .await;
                let Ok(r) = r else { return };
                if r.status().is_success() {
                    let v: Value = r.json().await.unwrap_or(Value::Null);
                    if let Some(d) = v["device_id"].as_str() {
                        answered.lock().sign_ins.push(d.to_string());
                    }
                }
            }
        }));
    }
    // Renewal chains.
    for (chain, first) in renewals.into_iter().enumerate() {
        let (url, answered) = (url.clone(), Arc::clone(&answered));
        load.push(tokio::spawn(async move {
            let c = common::client();
            let mut token = first;
            loop {
                let r = c
                    .post(format!("{url}/api/agent-tokens/refresh"))
                    .json(&json!({"refresh_token": token}))
                    .send()
                    .await;
                let Ok(r) = r else { return };
                if !r.status().is_success() {
                    return;
                }
                let Ok(v) = r.json::<Value>().await else {
                    return;
                };
                token = v["refresh_token"].as_str().unwrap_or("").to_string();
                answered.lock().refresh[chain] = Some(token.clone());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    // Users and keys.
    {
        let (url, admin, answered) = (url.clone(), setup.admin.clone(), Arc::clone(&answered));
        load.push(tokio::spawn(async move {
            let c = common::client();
            for n in 0.. {
                let email = format!("load{n}@example.com");
                let r = c
                    .post(format!("{url}/api/admin/users"))
                    .bearer_auth(&admin)
                    .json(&json!({"email": email, "password": "password-123"}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => answered.lock().users.push(email),
                    Ok(_) => {}
                    Err(_) => return,
                }
                let r = c
                    .post(format!("{url}/api/api-keys"))
                    .bearer_auth(&admin)
                    .json(&json!({"name": format!("key-{n}")}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => {
                        let v: Value = r.json().await.unwrap_or(Value::Null);
                        if let Some(id) = v["id"].as_str() {
                            answered.lock().keys.push(id.to_string());
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_millis(2500)).await;
    p.child.kill().unwrap(); // SIGKILL
    p.child.wait().unwrap();
    for t in load {
        let _ = tokio::time::timeout(Duration::from_secs(40), t).await;
    }
    let answered = std::mem::take(&mut *answered.lock());
    eprintln!(
        "answered before kill -9: {} events, {} decisions, {} sign-ins, {} renewals chains, {} users, {} keys",
        answered.events.len(),
        answered.decisions.len(),
        answered.sign_ins.len(),
        answered.refresh.iter().flatten().count(),
        answered.users.len(),
        answered.keys.len()
    );
    assert!(!answered.events.is_empty() && !answered.decisions.is_empty());
    assert!(!answered.sign_ins.is_empty() && !answered.users.is_empty());

    let p = spawn_server(&db, &[]).await;
    let url = p.url.clone();
    let admin = login(&c, &url, common::ADMIN_EMAIL, common::ADMIN_PASSWORD).await;

    let mut stored = HashSet::new();
    let mut after = String::new();
    loop {
        let page = get_json(
            &c,
            &url,
            &admin,
            &format!("/api/admin/agents/dur/events?limit=1000&after={after}"),
        )
        .await;
        for e in page["events"].as_array().unwrap() {
            stored.insert(e["id"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(n) => after = n.to_string(),
            None => break,
        }
    }
    let lost: Vec<&String> = answered
        .events
        .iter()
        .filter(|e| !stored.contains(*e))
        .collect();
    assert!(lost.is_empty(), "events lost: {lost:?}");

    let approvals = get_json(&c, &url, &admin, "/api/admin/agents/dur/approvals").await;
    for (id, decision) in &answered.decisions {
        let a = approvals
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id.as_str())
            .unwrap_or_else(|| panic!("approval {id} lost"));
        let want = if decision == "approve" {
            "approved"
        } else {
            "denied"
        };
        assert_eq!(a["status"], want, "decision on {id} lost: {a}");
    }

    let user = login(&c, &url, "dev@example.com", "password-123").await;
    let mine = get_json(&c, &url, &user, "/api/agent-tokens/mine").await;
    let live: HashSet<&str> = mine
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["device_id"].as_str())
        .collect();
    for d in &answered.sign_ins {
        assert!(live.contains(d.as_str()), "sign-in {d} lost");
    }
    // The last answered renewal's token is known: it renews, or (when a
    // later renewal was stored but its answer cut by the kill) it counts as
    // reused, which ends the user's sign-ins. A lost renewal would make it
    // unknown: `invalid_refresh_token`.
    for token in answered.refresh.iter().flatten() {
        let r = c
            .post(format!("{url}/api/agent-tokens/refresh"))
            .json(&json!({"refresh_token": token}))
            .send()
            .await
            .unwrap();
        if r.status() != 200 {
            let code = r.json::<Value>().await.unwrap()["detail"]["code"].clone();
            assert!(
                code == "refresh_token_reused" || code == "sign_in_ended",
                "the last answered renewal was lost: {code}"
            );
        }
    }

    let users = get_json(&c, &url, &admin, "/api/admin/users").await;
    let emails: HashSet<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["email"].as_str())
        .collect();
    for u in &answered.users {
        assert!(emails.contains(u.as_str()), "user {u} lost");
    }
    let keys = get_json(&c, &url, &admin, "/api/api-keys").await;
    let ids: HashSet<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["id"].as_str())
        .collect();
    for k in &answered.keys {
        assert!(ids.contains(k.as_str()), "key {k} lost");
    }
}
