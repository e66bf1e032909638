//! The manifest an app sends (`PUT /v1/agents/{agent}/manifest`): what
//! counts as seen before, its limits at the limit and one past it, and
//! refusals that leave the device's latest manifest in place.

use super::*;

#[tokio::test]
async fn manifest_seen_before_ignores_key_order_and_white_space_and_spans_devices() {
    let env = env("mseen", json!({})).await;
    let first = env.manifest_ok(&std_manifest()).await;
    assert_eq!(first["seen_before"], false);
    let hash = first["manifest_hash"].as_str().expect("hash").to_string();
    let hex = hash.strip_prefix("sha256:").expect("sha256: prefix");
    assert_eq!(hex.len(), 64, "{hash}");
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");

    let again = env.manifest_ok(&std_manifest()).await;
    assert_eq!(again, json!({"seen_before": true, "manifest_hash": hash}));

    // Same content, keys reordered and spaced out.
    let tools: Vec<String> = ["read_file:read", "write_file:write", "run:execute"]
        .iter()
        .map(|nc| {
            let (n, c) = nc.split_once(':').unwrap();
            format!(
                r#"{{ "class" : "{c}",
                     "parameters": {{"required": ["path"], "properties": {{"path": {{"type": "string"}}}}, "type": "object"}},
                     "description": "The {n} tool.", "name": "{n}" }}"#
            )
        })
        .collect();
    let raw = format!(
        "{{\n  \"tools\": [ {} ],\n  \"sdk\": \"gatehouse-py/0.5\",\n\t\"app_version\" : \"1.0.0\",  \"app_name\":\"Test App\"\n}}",
        tools.join(" ,\n ")
    );
    let r = env.put_manifest_raw(raw).await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({"seen_before": true, "manifest_hash": hash}));

    // Another device of the same agent (and user) sends it: seen before.
    let (access2, _) = env
        .app
        .sign_in_access(&env.login, &env.address, "phone")
        .await;
    let r = env.put_manifest_as(&access2, &std_manifest()).await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({"seen_before": true, "manifest_hash": hash}));

    // A different manifest is new and hashes differently.
    let mut other = std_manifest();
    other["app_version"] = json!("1.0.1");
    let v = env.manifest_ok(&other).await;
    assert_eq!(v["seen_before"], false);
    assert_ne!(v["manifest_hash"], json!(hash));
}

#[tokio::test]
async fn manifest_seen_before_is_per_agent() {
    let env = env("mper", json!({})).await;
    let other_access = env.other_agent().await;
    assert_eq!(env.manifest_ok(&std_manifest()).await["seen_before"], false);
    let r = env
        .app
        .put(
            "/v1/agents/other@acme/manifest",
            &other_access,
            &std_manifest(),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["seen_before"], false, "another agent never saw it");
}

/// A manifest whose JSON text is exactly `len` bytes, padded with an unknown key.
fn manifest_text_of_len(len: usize) -> String {
    let mut m = std_manifest();
    m["x_padding"] = json!("");
    let base = serde_json::to_string(&m).unwrap().len();
    m["x_padding"] = json!("p".repeat(len - base));
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(text.len(), len);
    text
}

#[tokio::test]
async fn manifest_body_of_512_kb_is_accepted_and_one_byte_more_is_manifest_too_large() {
    let env = env("mbody", json!({})).await;
    let r = env.put_manifest_raw(manifest_text_of_len(524_288)).await;
    assert_eq!(r.status(), StatusCode::OK, "exactly 524,288 bytes");
    let r = env.put_manifest_raw(manifest_text_of_len(524_289)).await;
    expect_error(r, 413, "manifest_too_large").await;
}

#[tokio::test]
async fn manifest_may_list_200_tools_but_not_201() {
    let env = env("mtools", json!({})).await;
    let tools = |n: usize| (0..n).map(|i| tool(&format!("t{i}"), "read")).collect();
    env.manifest_ok(&manifest(tools(200))).await;
    let r = env.put_manifest(&manifest(tools(201))).await;
    let e = expect_error(r, 400, "too_many_tools").await;
    assert_eq!(e["param"], "tools");
}

#[tokio::test]
async fn manifest_may_carry_100_context_entries_but_not_101() {
    let env = env("mctx", json!({})).await;
    let with = |n: usize| {
        let mut m = std_manifest();
        m["context"] = Value::Array(
            (0..n)
                .map(|i| json!({"name": format!("c{i}"), "value": format!("v{i}")}))
                .collect(),
        );
        m
    };
    env.manifest_ok(&with(100)).await;
    let r = env.put_manifest(&with(101)).await;
    expect_error(r, 400, "too_many_context_entries").await;
}

#[tokio::test]
async fn tool_description_limit_is_4000_characters_not_bytes() {
    let env = env("mdesc", json!({})).await;
    let with = |n: usize| {
        let mut t = tool("long_desc", "read");
        t["description"] = json!("é".repeat(n)); // two bytes each
        manifest(vec![tool("read_file", "read"), t])
    };
    env.manifest_ok(&with(4000)).await;
    let r = env.put_manifest(&with(4001)).await;
    let e = expect_error(r, 400, "manifest_invalid").await;
    assert!(
        e["message"].as_str().unwrap().contains("long_desc"),
        "the message names the tool: {e}"
    );
}

#[tokio::test]
async fn tool_parameters_limit_is_32768_bytes_of_compact_json() {
    let env = env("mparams", json!({})).await;
    let params_of_len = |len: usize| {
        let mut p = json!({"type": "object", "description": ""});
        let base = serde_json::to_vec(&p).unwrap().len();
        p["description"] = json!("d".repeat(len - base));
        assert_eq!(serde_json::to_vec(&p).unwrap().len(), len);
        p
    };
    let with = |len: usize| {
        let mut t = tool("big_params", "write");
        t["parameters"] = params_of_len(len);
        manifest(vec![t])
    };
    // Pretty-printed text is longer, but only the compact size counts.
    let pretty = serde_json::to_string_pretty(&with(32_768)).unwrap();
    let r = env.put_manifest_raw(pretty).await;
    assert_eq!(r.status(), StatusCode::OK, "exactly 32,768 bytes compact");
    let r = env.put_manifest(&with(32_769)).await;
    let e = expect_error(r, 400, "manifest_invalid").await;
    assert!(
        e["message"].as_str().unwrap().contains("big_params"),
        "the message names the tool: {e}"
    );
}

#[tokio::test]
async fn malformed_manifests_are_manifest_invalid() {
    let env = env("mbad", json!({})).await;
    let mut bad_class = std_manifest();
    bad_class["tools"][1]["class"] = json!("dangerous");
    let mut no_class = std_manifest();
    no_class["tools"][1]
        .as_object_mut()
        .unwrap()
        .remove("class");
    let mut schema_not_object = std_manifest();
    schema_not_object["tools"][0]["parameters"] = json!("a string");
    let mut schema_bad_type = std_manifest();
    schema_bad_type["tools"][0]["parameters"] = json!({"type": 5});
    let mut schema_bad_properties = std_manifest();
    schema_bad_properties["tools"][0]["parameters"] = json!({"type": "object", "properties": []});
    let duplicate = manifest(vec![tool("read_file", "read"), tool("read_file", "write")]);
    let bad_name = manifest(vec![tool("read file", "read")]);
    let long_name = manifest(vec![tool(&"t".repeat(65), "read")]);
    let mut no_app_name = std_manifest();
    no_app_name.as_object_mut().unwrap().remove("app_name");
    let mut tools_not_list = std_manifest();
    tools_not_list["tools"] = json!({"read_file": "read"});
    for (what, m) in [
        ("bad class", bad_class),
        ("no class", no_class),
        ("parameters not an object", schema_not_object),
        ("schema type of wrong type", schema_bad_type),
        ("schema properties of wrong type", schema_bad_properties),
        ("duplicate names", duplicate),
        ("bad tool name", bad_name),
        ("tool name of 65", long_name),
        ("no app_name", no_app_name),
        ("tools not a list", tools_not_list),
    ] {
        let r = env.put_manifest(&m).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{what}");
        expect_error(r, 400, "manifest_invalid").await;
    }
    let r = env.put_manifest_raw("{not json".into()).await;
    expect_error(r, 400, "manifest_invalid").await;
    // A 64-character name is fine.
    env.manifest_ok(&manifest(vec![tool(&"t".repeat(64), "read")]))
        .await;
}

#[tokio::test]
async fn a_refused_manifest_does_not_replace_the_devices_latest() {
    let env = env("mkeep", json!({})).await;
    env.manifest_ok(&std_manifest()).await;
    let mut bad = std_manifest();
    bad["tools"][1]["class"] = json!("read");
    bad["tools"][2]["class"] = json!("nope");
    env.put_manifest(&bad).await;
    env.chat_ok("read_only", &chat_body("hi", &["read_file", "write_file"]))
        .await;
    assert_eq!(tool_names(&env.last_sent()), names(&["read_file"]));
}
