//! Tool modes (`X-Service-Tool-Mode` and the agent's default) and tool
//! classes from the manifest: which of the offered tools reach the upstream,
//! kept exactly as the client wrote them.

use super::*;

#[tokio::test]
async fn tool_mode_off_sends_no_tools_upstream() {
    let env = env("modeoff", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let mut body = chat_body("hi", &ALL_OFFERED);
    body["tool_choice"] = json!("auto");
    body["parallel_tool_calls"] = json!(true);
    let (v, held) = env.chat_ok("off", &body).await;
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hi");
    assert_eq!(held, None);
    let sent = env.last_sent();
    assert!(sent.get("tools").is_none(), "{sent}");
    assert!(sent.get("tool_choice").is_none(), "{sent}");
}

/// An app sends the same `tools` list every turn; from the second turn on it
/// is a list the gateway has read before, which it finds in the body without
/// reading it again (`agents::tools`' unit tests check that way against a
/// whole read). What reaches the upstream is the turn's own body all the same.
#[tokio::test]
async fn a_tools_list_sent_again_reaches_the_upstream_like_the_first_time() {
    let env = env("again", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let list = ["read_file", "write_file", "run"];
    let turns = [
        chat_body("first turn", &list),
        {
            let mut b = chat_body("second turn", &list);
            b["tool_choice"] = json!({"type": "function", "function": {"name": "run"}});
            b["messages"][0]["content"] = json!("second \"tools\": turn");
            b
        },
        chat_body("third turn", &["read_file", "write_file", "runs"]),
        chat_body("fourth turn", &list),
    ];
    for (i, body) in turns.iter().enumerate() {
        env.chat_ok("read_only", body).await;
        let sent = env.last_sent();
        assert_eq!(sent["messages"], body["messages"], "turn {i}");
        assert_eq!(sent["model"], json!(env.upstream), "turn {i}");
        assert_eq!(sent["tools"], json!([offered(&list)[0]]), "turn {i}");
        assert!(sent.get("tool_choice").is_none(), "turn {i}: {sent}");
        env.chat_ok("auto", body).await;
        let sent = env.last_sent();
        assert_eq!(sent["tools"], body["tools"], "turn {i}");
        assert_eq!(sent.get("tool_choice"), body.get("tool_choice"), "turn {i}");
    }
}

#[tokio::test]
async fn tool_mode_read_only_sends_only_read_tools() {
    let env = env("modero", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    env.chat_ok("read_only", &chat_body("hi", &ALL_OFFERED))
        .await;
    let sent = env.last_sent();
    assert_eq!(tool_names(&sent), names(&["read_file"]));
    // The kept tool goes up unchanged.
    assert_eq!(sent["tools"][0], offered(&["read_file"])[0]);
}

#[tokio::test]
async fn kept_tools_reach_the_upstream_exactly_as_the_client_wrote_them() {
    let env = env("toolsraw", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    // Escapes, a float's spelling and key order a JSON tree would not keep.
    let read = r#"{"type":"function","function":{"name":"read_file","description":"Reads \u00e9 \"quoted\"","parameters":{"type":"object","properties":{"n":{"type":"number","default":1.50,"maximum":1e3}},"required":["n"]}}}"#;
    let write =
        r#"{"type":"function","function":{"name":"write_file","parameters":{"type":"object"}}}"#;
    let text = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"tools":[ {read} , {write} ]}}"#
    );
    let r = chat_raw(&env, "read_only", &text).await;
    assert_eq!(r.status(), StatusCode::OK);
    let raw = env.last_sent_text();
    assert!(raw.contains(&format!(r#""tools":[{read}]"#)), "{raw}");
    assert!(!raw.contains("write_file"), "{raw}");
}

#[tokio::test]
async fn a_tool_that_names_itself_twice_or_is_no_function_tool_is_refused_and_reaches_no_upstream()
{
    let env = env("toolstwice", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let before = env.sent().len();
    // Kept tools are not parsed by the gateway: a schema nested past what a
    // parsed body allowed is refused all the same.
    let deep = format!(
        r#"[{{"type":"function","function":{{"name":"read_file","parameters":{}1{}}}}}]"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    for tools in [
        r#"[{"type":"function","function":{"name":"read_file","name":"run"}}]"#,
        r#"[{"type":"function","function":{"name":"read_file"},"function":{"name":"run"}}]"#,
        r#"[["function",{"name":"read_file"}]]"#,
        r#"[{"type":"custom","custom":{"name":"run"},"function":{"name":"read_file"}}]"#,
        &deep,
    ] {
        let text = format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":{tools}}}"#);
        let r = chat_raw(&env, "read_only", &text).await;
        let e = expect_error(r, 400, "validation_error").await;
        assert_eq!(e["param"], "tools", "{tools}");
    }
    assert_eq!(env.sent().len(), before, "nothing reached the upstream");
}

#[tokio::test]
async fn tool_modes_ask_and_auto_send_every_tool_undeclared_ones_included() {
    let env = env("modeall", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    for mode in ["ask", "auto"] {
        env.chat_ok(mode, &chat_body("hi", &ALL_OFFERED)).await;
        assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED), "{mode}");
    }
}

#[tokio::test]
async fn without_the_header_the_agents_default_tool_mode_applies() {
    let env = env("moded", json!({"default_tool_mode": "read_only"})).await;
    env.manifest_ok(&std_manifest()).await;
    let r = env.chat(&[], &chat_body("hi", &ALL_OFFERED)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
    // The header overrides the default.
    env.chat_ok("auto", &chat_body("hi", &ALL_OFFERED)).await;
    assert_eq!(tool_names(&env.last_sent()), names(&ALL_OFFERED));
}

#[tokio::test]
async fn tool_choice_naming_a_removed_tool_is_dropped_and_one_naming_a_kept_tool_stays() {
    let env = env("modechoice", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let choose = |name: &str| {
        let mut b = chat_body("hi", &ALL_OFFERED);
        b["tool_choice"] = json!({"type": "function", "function": {"name": name}});
        b
    };
    env.chat_ok("read_only", &choose("write_file")).await;
    let sent = env.last_sent();
    assert!(sent.get("tool_choice").is_none(), "{sent}");
    assert_eq!(tool_names(&sent), names(&["read_file"]));

    env.chat_ok("read_only", &choose("read_file")).await;
    assert_eq!(
        env.last_sent()["tool_choice"],
        json!({"type": "function", "function": {"name": "read_file"}})
    );
}

#[tokio::test]
async fn classes_come_from_the_devices_latest_manifest() {
    let env = env("modeclass", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    // A second device declares write_file as read; a third declares nothing.
    let (phone, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    let (tablet, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "tablet")
        .await;
    let r = env
        .put_manifest_as(
            &phone,
            &manifest(vec![tool("read_file", "read"), tool("write_file", "read")]),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let ro = [("X-Service-Tool-Mode", "read_only")];
    let body = chat_body("hi", &ALL_OFFERED);

    assert_eq!(env.chat_as(&phone, &ro, &body).await.status(), 200);
    assert_eq!(
        tool_names(&env.last_sent()),
        names(&["read_file", "write_file"])
    );
    assert_eq!(env.chat(&ro, &body).await.status(), 200);
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
    // No manifest: every tool counts as execute.
    assert_eq!(env.chat_as(&tablet, &ro, &body).await.status(), 200);
    assert_eq!(tool_names(&env.last_sent()), None);

    // A newer manifest of the first device replaces its classes.
    env.manifest_ok(&manifest(vec![tool("run", "read")])).await;
    assert_eq!(env.chat(&ro, &body).await.status(), 200);
    assert_eq!(tool_names(&env.last_sent()), names(&["run"]));
}
