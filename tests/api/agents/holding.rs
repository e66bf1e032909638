//! Holding by the agent's tool contract: tools outside it are held (kept
//! from the upstream and named in `X-Service-Held-Tools`) until an admin
//! accepts them, and held again when a device changes them.

use super::*;

#[tokio::test]
async fn a_decided_tool_is_held_again_when_the_device_changes_it() {
    let env = env("rebind", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &["write_file", "run"]);
    for (name, verb) in [("write_file", "accept"), ("run", "reject")] {
        let r = env
            .app
            .post(
                &env.admin_path(&format!("tools/{name}/{verb}")),
                &env.admin,
                &json!({}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    // The same manifest again (keys reordered): decisions stand.
    env.manifest_ok(&std_manifest()).await;
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("accepted")
    );
    assert_eq!(
        env.admin_tool_status("run").await.as_deref(),
        Some("rejected")
    );
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("run"));

    // A new description, a new class, new parameters: held again each time.
    let mut described = tool("write_file", "write");
    described["description"] = json!("Now also deletes files.");
    env.manifest_ok(&manifest(vec![
        tool("read_file", "read"),
        described,
        tool("run", "execute"),
    ]))
    .await;
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("held")
    );
    let tools = env.admin_get("tools").await;
    let wf = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "write_file")
        .unwrap();
    assert_eq!(wf["description"], "Now also deletes files.");
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run"));

    let r = env
        .app
        .post(
            &env.admin_path("tools/write_file/accept"),
            &env.admin,
            &json!({}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut reparam = tool("write_file", "write");
    reparam["description"] = json!("Now also deletes files.");
    reparam["parameters"] = json!({"type": "object", "properties": {"glob": {"type": "string"}}});
    env.manifest_ok(&manifest(vec![
        tool("read_file", "read"),
        reparam,
        tool("run", "write"),
    ]))
    .await;
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("held")
    );
    assert_eq!(env.admin_tool_status("run").await.as_deref(), Some("held"));
    // A contract tool stays trusted by name whatever the device says.
    env.manifest_ok(&manifest(vec![tool("read_file", "execute")]))
        .await;
    let (_, held) = env.chat_ok("auto", &chat_body("hi", &["read_file"])).await;
    assert_eq!(held, None);
}

#[tokio::test]
async fn tools_outside_the_contract_are_held_until_an_admin_accepts_them() {
    let env = env("hold", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &["write_file", "read_file", "undeclared", "run"]);
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,undeclared,run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));

    assert_eq!(
        env.admin_tool_status("read_file").await.as_deref(),
        Some("contract")
    );
    assert_eq!(
        env.admin_tool_status("write_file").await.as_deref(),
        Some("held")
    );
    assert_eq!(env.admin_tool_status("run").await.as_deref(), Some("held"));
    assert_eq!(
        env.admin_tool_status("undeclared").await.as_deref(),
        Some("held"),
        "a tool offered in chat but missing from the manifest shows too"
    );
    let tools = env.admin_get("tools").await;
    let wf = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "write_file")
        .unwrap();
    assert_eq!(wf["class"], "write");
    assert_eq!(wf["description"], "The write_file tool.");
    // Beside MCP tools, a device's tools say where they come from.
    assert_eq!(wf["source"], "device");
    assert_eq!(wf["server"], Value::Null);
    assert!(gatehouse::time::parse_rfc3339(wf["first_seen_at"].as_str().unwrap()).is_some());

    let r = env
        .app
        .post(
            &env.admin_path("tools/write_file/accept"),
            &env.admin,
            &json!({}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["name"], "write_file");
    assert_eq!(v["status"], "accepted");

    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("undeclared,run"));
    assert_eq!(
        tool_names(&env.last_sent()),
        names(&["write_file", "read_file"])
    );
}

#[tokio::test]
async fn a_rejected_tool_stays_held_and_named() {
    let env = env("holdrej", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &["read_file", "write_file", "run"]);
    let r = env
        .app
        .post(&env.admin_path("tools/run/reject"), &env.admin, &json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "rejected");
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
    assert_eq!(
        env.admin_tool_status("run").await.as_deref(),
        Some("rejected")
    );

    // Accepted, then rejected again: held again.
    let accept = env.admin_path("tools/write_file/accept");
    let reject = env.admin_path("tools/write_file/reject");
    assert_eq!(
        env.app.post(&accept, &env.admin, &json!({})).await.status(),
        200
    );
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("run"));
    assert_eq!(
        env.app.post(&reject, &env.admin, &json!({})).await.status(),
        200
    );
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}

#[tokio::test]
async fn an_empty_contract_holds_nothing() {
    let env = env("holdnone", json!({"tool_contract": []})).await;
    env.manifest_ok(&std_manifest()).await;
    let (_, held) = env.chat_ok("auto", &chat_body("hi", &ALL_OFFERED)).await;
    assert_eq!(held, None);
    assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED));
}

#[tokio::test]
async fn allow_local_mcp_holds_nothing() {
    let env = env("holdmcp", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let body = chat_body("hi", &ALL_OFFERED);
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held.as_deref(), Some("write_file,run,undeclared"));

    let r = env
        .app
        .patch(
            &format!("/api/admin/agents/{}", env.address),
            &env.admin,
            &json!({"allow_local_mcp": true}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (_, held) = env.chat_ok("auto", &body).await;
    assert_eq!(held, None);
    assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED));
}

#[tokio::test]
async fn held_tools_still_obey_the_tool_mode_once_accepted() {
    let env = env("holdmode", json!({"tool_contract": ["read_file"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let accept = env.admin_path("tools/write_file/accept");
    assert_eq!(
        env.app.post(&accept, &env.admin, &json!({})).await.status(),
        200
    );
    let (_, held) = env
        .chat_ok(
            "read_only",
            &chat_body("hi", &["read_file", "write_file", "run"]),
        )
        .await;
    assert_eq!(held.as_deref(), Some("run"));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}

#[tokio::test]
async fn a_streamed_answer_names_held_tools_in_its_header_too() {
    let env = env("holdstream", json!({"tool_contract": ["read_file"]})).await;
    let mut body = chat_body("hi", &["read_file", "run"]);
    body["stream"] = json!(true);
    let r = env.chat(&[("X-Service-Tool-Mode", "auto")], &body).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()
            .get("x-service-held-tools")
            .and_then(|v| v.to_str().ok()),
        Some("run")
    );
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}
