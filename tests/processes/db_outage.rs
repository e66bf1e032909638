//! PostgreSQL stops in the middle of load and comes back. Nothing
//! that was answered as accepted (events, approvals, sign-ins) may be lost,
//! requests meanwhile fail fast with 503, and service resumes by itself.
//! Runs when GATEHOUSE_TEST_PG_FAULT=1 (scripts/test.sh sets it): it starts
//! and stops a private cluster of its own with scripts/pg.sh.

use crate::common;

use std::time::{Duration, Instant};

use common::pg_cluster::{fault_tests_enabled, Cluster};
use common::procs::{agent_setup, eventually, get_json, new_sign_in, spawn_server};
use common::stub::{calling, tool_call};
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn nothing_accepted_is_lost_when_the_database_stops_mid_load_and_service_resumes() {
    if !fault_tests_enabled() {
        return;
    }
    let cluster = Cluster::new();
    let db = cluster.run("start");
    let server = spawn_server(&db, &[("GATEHOUSE_DB_ACQUIRE_TIMEOUT_S", "1")]).await;
    let url = server.url.clone();
    let c = client();
    let stub = gatehouse_stub_upstream::Stub::start().await;
    stub.script("fault-up", calling(vec![tool_call("call_x", "run", "{}")]));

    // Setup.
    let setup = agent_setup(
        &c,
        &url,
        &stub.openai_base_url(),
        "fault-up",
        "fault",
        json!({"name": "F", "default_tool_mode": "ask"}),
    )
    .await;
    let (admin, user) = (setup.admin, setup.user);
    let access = new_sign_in(&c, &url, &user, "fault", "main").await["access_token"]
        .as_str()
        .expect("access token")
        .to_string();

    // Load: event batches, sign-ins and chats (each creating an approval) in a loop;
    // remember what was answered as accepted.
    let (mut events_ok, mut signins_ok, mut approvals_ok) = (vec![], vec![], vec![]);
    let (mut unavailable, mut other_errors) = (0, vec![]);
    // Phases are timed from when each step finished: stopping PostgreSQL can take
    // seconds on a busy machine (the shutdown checkpoint), and the outage must
    // still see requests.
    let start = Instant::now();
    let mut paused_at: Option<Instant> = None;
    let mut restarted_at: Option<Instant> = None;
    let (mut stopped, mut restarted) = (false, false);
    let mut i = 0;
    while restarted_at.is_none_or(|t| t.elapsed() < Duration::from_secs(4)) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the fault test ran away"
        );
        if !stopped && start.elapsed() > Duration::from_secs(3) {
            cluster.run("pause");
            stopped = true;
            paused_at = Some(Instant::now());
            let ready = c
                .get(format!("{url}/readyz"))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(ready, 503, "/readyz must say the database is away");
        }
        let outage_long_enough = paused_at.is_some_and(|t| t.elapsed() > Duration::from_secs(3))
            && (unavailable >= 3
                || paused_at.is_some_and(|t| t.elapsed() > Duration::from_secs(20)));
        if stopped && !restarted && outage_long_enough {
            cluster.run("start");
            restarted = true;
            restarted_at = Some(Instant::now());
        }
        i += 1;
        let ids: Vec<String> = (0..5).map(|k| format!("ev-{i}-{k}")).collect();
        let batch = json!({"events": ids.iter().map(|id| json!({"id": id, "type": "tool.run"})).collect::<Vec<_>>()});
        let t0 = Instant::now();
        let r = c
            .post(format!("{url}/v1/agents/fault/events"))
            .bearer_auth(&access)
            .json(&batch)
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            202 => events_ok.extend(ids),
            503 => {
                unavailable += 1;
                assert!(
                    t0.elapsed() < Duration::from_secs(4),
                    "a request during the outage must fail fast"
                );
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"]["code"], "database_unavailable");
            }
            s => other_errors.push(format!("events {s}")),
        }
        let r = c
            .post(format!("{url}/api/agent-tokens"))
            .bearer_auth(&user)
            .json(&json!({"agent": "fault", "device_label": format!("d{i}")}))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            201 => signins_ok.push(
                r.json::<Value>().await.unwrap()["device_id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ),
            503 => unavailable += 1,
            s => other_errors.push(format!("sign-in {s}")),
        }
        let chat = json!({"model": "x", "messages": [{"role": "user", "content": "go"}], "tools": [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]});
        let r = c
            .post(format!("{url}/v1/agents/fault/chat/completions"))
            .bearer_auth(&access)
            .json(&chat)
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => {
                let v: Value = r.json().await.unwrap();
                approvals_ok.push(
                    v["approvals"][0]["id"]
                        .as_str()
                        .expect("approval in the answer")
                        .to_string(),
                );
            }
            503 => unavailable += 1,
            s => other_errors.push(format!("chat {s}")),
        }
    }
    assert!(stopped && restarted);
    assert!(
        unavailable > 0,
        "the outage was not seen: the test did not test it"
    );
    assert!(
        other_errors.is_empty(),
        "only 503 is acceptable during the outage: {other_errors:?}"
    );

    // Service resumes by itself.
    let back = eventually(Duration::from_secs(20), || async {
        c.get(format!("{url}/readyz"))
            .send()
            .await
            .map(|r| r.status() == 200)
            .unwrap_or(false)
    })
    .await;
    assert!(back.is_some(), "/readyz never recovered");
    let r = c
        .post(format!("{url}/v1/agents/fault/events"))
        .bearer_auth(&access)
        .json(&json!({"events": [{"id": "after", "type": "t"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "events accepted again after the outage");
    events_ok.push("after".into());

    // Everything accepted is there.
    let mut stored = std::collections::HashSet::new();
    let mut after: Option<String> = None;
    loop {
        let q = after
            .as_ref()
            .map(|a| format!("&after={a}"))
            .unwrap_or_default();
        let v = get_json(
            &c,
            &url,
            &admin,
            &format!("/api/admin/agents/fault/events?limit=1000{q}"),
        )
        .await;
        for e in v["events"].as_array().unwrap() {
            stored.insert(e["id"].as_str().unwrap_or_default().to_string());
        }
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    let lost: Vec<&String> = events_ok
        .iter()
        .filter(|id| !stored.contains(*id))
        .collect();
    assert!(lost.is_empty(), "accepted events lost: {lost:?}");
    let v = get_json(&c, &url, &user, "/api/agent-tokens/mine").await;
    let live: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["device_id"].as_str())
        .collect();
    for d in &signins_ok {
        assert!(live.contains(&d.as_str()), "accepted sign-in {d} lost");
    }
    let v = get_json(&c, &url, &admin, "/api/admin/agents/fault/approvals").await;
    let have: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    for a in &approvals_ok {
        assert!(have.contains(&a.as_str()), "accepted approval {a} lost");
    }
    eprintln!(
        "accepted: {} events, {} sign-ins, {} approvals; {} requests refused with 503 during the outage",
        events_ok.len(),
        signins_ok.len(),
        approvals_ok.len(),
        unavailable
    );
}
