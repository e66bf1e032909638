//! Events an app reports (`POST /v1/agents/{agent}/events`): batch and
//! size limits, duplicates, and the admin listing with its cursor.

use super::*;

async fn accepted(r: Response) -> Value {
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_batch_of_100_events_is_accepted_and_101_is_too_many() {
    let env = env("ev100", json!({})).await;
    let v = accepted(env.post_events(&events(100, "a")).await).await;
    assert_eq!(v, json!({"accepted": 100, "duplicates": 0}));
    let r = env.post_events(&events(101, "b")).await;
    expect_error(r, 400, "too_many_events").await;
    assert_eq!(env.all_events().await.len(), 100);
    let e = &env.all_events().await[0];
    assert_eq!(e["id"], "a-0");
    assert_eq!(e["type"], "tool.run");
    assert_eq!(e["conversation_id"], "conv-1");
    assert_eq!(e["turn_id"], "turn:1");
    assert_eq!(e["data"], json!({"i": 0}));
    assert_eq!(e["device_id"], env.device_id.as_str());
}

#[tokio::test]
async fn an_empty_or_missing_batch_is_a_validation_error() {
    let env = env("ev0", json!({})).await;
    for body in [json!({"events": []}), json!({}), json!({"events": "x"})] {
        let r = env.post_events(&body).await;
        expect_error(r, 400, "validation_error").await;
    }
}

#[tokio::test]
async fn one_bad_event_refuses_the_whole_batch_and_stores_nothing() {
    let env = env("evbad", json!({})).await;
    let bad_events = [
        json!({"type": ""}),
        json!({"type": "t".repeat(65)}),
        json!({"data": {}}),
        json!({"type": "x", "data": [1]}),
        json!({"type": "x", "time": "yesterday"}),
        json!({"type": "x", "conversation_id": "has space"}),
        json!({"type": "x", "id": "i".repeat(129)}),
        json!("not an object"),
    ];
    for bad in bad_events {
        let mut batch = events(5, "ok");
        batch["events"]
            .as_array_mut()
            .unwrap()
            .insert(3, bad.clone());
        let r = env.post_events(&batch).await;
        expect_error(r, 400, "validation_error").await;
    }
    assert_eq!(env.all_events().await, Vec::<Value>::new());
    // A 64-character type is fine.
    let v = accepted(
        env.post_events(&json!({"events": [{"type": "t".repeat(64)}]}))
            .await,
    )
    .await;
    assert_eq!(v["accepted"], 1);
}

#[tokio::test]
async fn a_retried_batch_is_counted_as_duplicates_and_not_stored_again() {
    let env = env("evdup", json!({})).await;
    assert_eq!(
        accepted(env.post_events(&events(10, "r")).await).await,
        json!({"accepted": 10, "duplicates": 0})
    );
    assert_eq!(
        accepted(env.post_events(&events(10, "r")).await).await,
        json!({"accepted": 0, "duplicates": 10})
    );
    // Half old, half new.
    let mut mixed = events(5, "r");
    mixed["events"]
        .as_array_mut()
        .unwrap()
        .extend(events(3, "s")["events"].as_array().unwrap().clone());
    assert_eq!(
        accepted(env.post_events(&mixed).await).await,
        json!({"accepted": 3, "duplicates": 5})
    );
    // Events without ids are never duplicates.
    let anon = json!({"events": [{"type": "x"}, {"type": "x"}]});
    assert_eq!(accepted(env.post_events(&anon).await).await["accepted"], 2);
    assert_eq!(accepted(env.post_events(&anon).await).await["accepted"], 2);
    assert_eq!(env.all_events().await.len(), 17);
    // The same id from another device is that device's own event.
    let (phone, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    assert_eq!(
        accepted(env.post_events_as(&phone, &events(2, "r")).await).await,
        json!({"accepted": 2, "duplicates": 0})
    );
}

#[tokio::test]
async fn event_data_limit_is_16_kb_of_compact_json() {
    let env = env("evdata", json!({})).await;
    let data_of_len = |len: usize| {
        let mut d = json!({"p": ""});
        let base = serde_json::to_vec(&d).unwrap().len();
        d["p"] = json!("x".repeat(len - base));
        assert_eq!(serde_json::to_vec(&d).unwrap().len(), len);
        d
    };
    let r = env
        .post_events(&json!({"events": [{"type": "big", "data": data_of_len(16_384)}]}))
        .await;
    assert_eq!(accepted(r).await["accepted"], 1);
    let r = env
        .post_events(&json!({"events": [{"type": "big", "data": data_of_len(16_385)}]}))
        .await;
    expect_error(r, 400, "validation_error").await;
    assert_eq!(env.all_events().await.len(), 1);
}

#[tokio::test]
async fn events_body_limit_is_2_mib() {
    let env = env("evbody", json!({})).await;
    let body_of_len = |len: usize| {
        let mut b = json!({"events": [{"type": "x"}], "x_padding": ""});
        let base = serde_json::to_vec(&b).unwrap().len();
        b["x_padding"] = json!("p".repeat(len - base));
        let text = serde_json::to_string(&b).unwrap();
        assert_eq!(text.len(), len);
        text
    };
    let send = |text: String| {
        env.app
            .client
            .post(env.app.u(&env.path("events")))
            .bearer_auth(&env.access)
            .header("content-type", "application/json")
            .body(text)
            .send()
    };
    let r = send(body_of_len(2 * 1024 * 1024)).await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let r = send(body_of_len(2 * 1024 * 1024 + 1)).await.unwrap();
    expect_error(r, 413, "payload_too_large").await;
    assert_eq!(env.all_events().await.len(), 1);
}

#[tokio::test]
async fn admin_event_listing_pages_with_a_cursor_and_filters_by_device() {
    let env = env("evpage", json!({})).await;
    let (phone, phone_id) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    accepted(env.post_events(&events(3, "l")).await).await;
    accepted(env.post_events_as(&phone, &events(2, "p")).await).await;
    accepted(env.post_events(&events(2, "m")).await).await;

    let mut seen = vec![];
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &after {
            Some(a) => format!("events?limit=2&after={a}"),
            None => "events?limit=2".to_string(),
        };
        let v = env.admin_get(&q).await;
        let page = v["events"].as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|e| e["id"].as_str().unwrap().to_string()));
        pages += 1;
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
        assert!(pages < 10, "paging ends");
    }
    assert_eq!(seen, ["l-0", "l-1", "l-2", "p-0", "p-1", "m-0", "m-1"]);
    assert_eq!(pages, 4);

    let v = env.admin_get(&format!("events?device_id={phone_id}")).await;
    let ids: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["p-0", "p-1"]);
    assert_eq!(v["next"], Value::Null);
    let v = env
        .admin_get(&format!("events?device_id={}&limit=3", env.device_id))
        .await;
    assert_eq!(v["events"].as_array().unwrap().len(), 3);
    let v = env
        .admin_get(&format!(
            "events?device_id={}&limit=3&after={}",
            env.device_id,
            v["next"].as_str().unwrap()
        ))
        .await;
    let ids: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m-0", "m-1"]);
}

/// A page of events after `after`: (ids, cursors, next).
async fn events_page(env: &Scene, after: &str) -> (Vec<String>, Vec<i64>, Option<String>) {
    let v = env
        .admin_get(&format!("events?limit=7&after={after}"))
        .await;
    let page = v["events"].as_array().unwrap();
    let ids = page
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let cursors = page
        .iter()
        .map(|e| e["cursor"].as_str().unwrap().parse::<i64>().unwrap())
        .collect();
    (ids, cursors, v["next"].as_str().map(str::to_string))
}

#[tokio::test]
async fn paging_returns_every_event_once_in_stored_order_while_others_store() {
    let env = std::sync::Arc::new(env("evrace", json!({})).await);
    let mut writers = Vec::new();
    for w in 0..6 {
        let env = std::sync::Arc::clone(&env);
        writers.push(tokio::spawn(async move {
            let (device, _) = env
                .app
                .sign_in_access(&env.login, &env.address, &format!("device {w}"))
                .await;
            for b in 0..8 {
                accepted(
                    env.post_events_as(&device, &events(5, &format!("w{w}b{b}")))
                        .await,
                )
                .await;
            }
        }));
    }
    // Page all along, resuming from the last event seen when caught up.
    let mut seen: Vec<String> = Vec::new();
    let mut cursors: Vec<i64> = Vec::new();
    let mut after = String::new();
    loop {
        let done = writers.iter().all(|w| w.is_finished());
        let (ids, cs, next) = events_page(&env, &after).await;
        seen.extend(ids);
        if let Some(c) = cs.last() {
            after = c.to_string();
        }
        cursors.extend(cs);
        if next.is_none() {
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(seen.len(), 6 * 8 * 5, "every event exactly once");
    let unique: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice");
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "stored order");
    // Within a batch the order of posting holds.
    for w in 0..6 {
        for b in 0..8 {
            let prefix = format!("w{w}b{b}-");
            let mine: Vec<&String> = seen.iter().filter(|id| id.starts_with(&prefix)).collect();
            let expected: Vec<String> = (0..5).map(|i| format!("{prefix}{i}")).collect();
            assert_eq!(mine, expected.iter().collect::<Vec<_>>());
        }
    }
}

#[tokio::test]
async fn events_survive_a_restart() {
    let mut env = env("evrestart", json!({})).await;
    accepted(env.post_events(&events(4, "d")).await).await;
    env.app.restart().await;
    env.admin = env.app.admin_token().await;
    let all = env.all_events().await;
    assert_eq!(all.len(), 4);
    // And still count as duplicates.
    assert_eq!(
        accepted(env.post_events(&events(4, "d")).await).await,
        json!({"accepted": 0, "duplicates": 4})
    );
}
