//! Agents as an admin sets them (the admin API, the config file) and sees
//! their data, and as a signed-in app reads them (the profile route).

use super::*;
use crate::common::agents::{two_agents, AGENT};
use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn s(v: &Value, k: &str) -> String {
    v[k].as_str()
        .unwrap_or_else(|| panic!("{k} in {v}"))
        .to_string()
}

#[tokio::test]
async fn profile_offers_pii_modes_only_when_the_user_may_choose() {
    let app = spawn_app().await;
    let admin = two_agents(&app).await;
    let r = app
        .patch(
            &format!("/api/admin/agents/{AGENT}"),
            &admin,
            &json!({"pii": {"mode": "redact", "user_choosable": true}, "tool_contract": ["lookup"], "allow_local_mcp": true, "default_tool_mode": "auto"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (_, login) = app.user("ann@example.com").await;
    let t = app.sign_in(&login, AGENT, "phone").await;
    let p: Value = app
        .profile(AGENT, &s(&t, "access_token"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        p["pii"],
        json!({"mode": "redact", "user_choosable": true, "modes": ["redact", "tokenize_reversible"]})
    );
    assert_eq!(p["tool_contract"], json!(["lookup"]));
    assert_eq!(p["allow_local_mcp"], true);
    assert_eq!(p["default_tool_mode"], "auto");
}

#[tokio::test]
async fn agent_changes_are_seen_by_agent_routes_at_once() {
    let app = spawn_app().await;
    let admin = two_agents(&app).await;
    let (_, ann) = app.user("ann@example.com").await;
    let t = app.sign_in(&ann, AGENT, "laptop").await;
    let p: Value = app
        .profile(AGENT, &s(&t, "access_token"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(p["name"], format!("Agent {AGENT}"));
    app.patch(
        &format!("/api/admin/agents/{AGENT}"),
        &admin,
        &json!({"name": "Support"}),
    )
    .await;
    let p: Value = app
        .profile(AGENT, &s(&t, "access_token"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(p["name"], "Support");
}

#[tokio::test]
async fn admin_agent_crud_validates_every_field() {
    let app = spawn_app().await;
    let admin = two_agents(&app).await;
    let create = |body: Value| {
        let app = &app;
        let admin = admin.clone();
        async move { app.post("/api/admin/agents", &admin, &body).await }
    };
    // Address: 64 allowed characters pass, 65 or others do not.
    let long = format!("a.b_c-d@{}", "x".repeat(56));
    assert_eq!(long.len(), 64);
    let r = create(json!({"address": long, "name": "Long", "model": "chat-1",
        "default_tool_mode": "read_only", "tool_contract": ["search", "get-order"],
        "pii": {"mode": "tokenize_reversible", "terms": ["Acme Corp"]},
        "allow_local_mcp": true, "instructions": "Be brief.", "allowed_users": ["Ann@Example.com"]}))
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["address"], long.as_str());
    assert_eq!(v["default_tool_mode"], "read_only");
    assert_eq!(v["tool_contract"], json!(["search", "get-order"]));
    assert_eq!(
        v["pii"],
        json!({"mode": "tokenize_reversible", "user_choosable": false, "terms": ["Acme Corp"]})
    );
    assert_eq!(v["allow_local_mcp"], true);
    assert_eq!(v["instructions"], "Be brief.");
    assert_eq!(v["allowed_users"], json!(["ann@example.com"]));
    assert!(v["created_at"].is_string() && v["updated_at"].is_string());
    for bad in [
        format!("{long}y"),
        "Upper".to_string(),
        "".to_string(),
        "a b".to_string(),
    ] {
        let r = create(json!({"address": bad, "name": "x", "model": "chat-1"})).await;
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["detail"]["code"], "validation_error", "{bad}");
    }
    // Every default filled.
    let r = create(json!({"address": "plain", "name": "Plain", "model": "chat-1"})).await;
    let v: Value = r.json().await.unwrap();
    for (k, want) in [
        ("default_tool_mode", json!("ask")),
        ("tool_contract", json!([])),
        (
            "pii",
            json!({"mode": "off", "user_choosable": false, "terms": []}),
        ),
        ("allow_local_mcp", json!(false)),
        ("instructions", Value::Null),
        ("allowed_users", Value::Null),
    ] {
        assert_eq!(v[k], want, "{k}");
    }
    // Model checks.
    let r = create(json!({"address": "emb", "name": "x", "model": "emb-1"})).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["detail"]["code"], "model_kind_mismatch");
    let msg = s(&v["detail"], "message");
    assert!(msg.contains("send it to /v1/embeddings"), "{msg}");
    assert_eq!(
        api_code(create(json!({"address": "unk", "name": "x", "model": "nope"})).await).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    // Other fields.
    for bad in [
        json!({"default_tool_mode": "sometimes"}),
        json!({"tool_contract": ["has space"]}),
        json!({"tool_contract": ["x".repeat(65)]}),
        json!({"pii": {"mode": "scramble"}}),
        json!({"pii": {"user_choosable": "yes"}}),
        json!({"allowed_users": ["not-an-email"]}),
        json!({"allow_local_mcp": "true"}),
        json!({"name": ""}),
    ] {
        let mut body = json!({"address": "fields", "name": "x", "model": "chat-1"});
        for (k, x) in bad.as_object().unwrap() {
            body[k] = x.clone();
        }
        assert_eq!(
            api_code(create(body).await).await,
            (StatusCode::BAD_REQUEST, "validation_error".into()),
            "{bad}"
        );
    }
    // Taken.
    assert_eq!(
        api_code(create(json!({"address": AGENT, "name": "x", "model": "chat-1"})).await).await,
        (StatusCode::CONFLICT, "agent_exists".into())
    );
    // Read, list, change.
    let r = app.get(&format!("/api/admin/agents/{AGENT}"), &admin).await;
    assert_eq!(r.status(), StatusCode::OK);
    let list: Vec<Value> = app
        .get("/api/admin/agents", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.len(), 4);
    let r = app
        .patch(
            &format!("/api/admin/agents/{AGENT}"),
            &admin,
            &json!({"model": "emb-1"}),
        )
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "model_kind_mismatch".into())
    );
    let r = app
        .patch(
            &format!("/api/admin/agents/{AGENT}"),
            &admin,
            &json!({"name": null}),
        )
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
    let r = app
        .patch(
            &format!("/api/admin/agents/{AGENT}"),
            &admin,
            &json!({"instructions": "Hello.", "tool_contract": ["a"], "allowed_users": ["x@y.zz"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["instructions"], "Hello.");
    assert_eq!(v["name"], format!("Agent {AGENT}"));
    let v: Value = app
        .patch(
            &format!("/api/admin/agents/{AGENT}"),
            &admin,
            &json!({"instructions": null, "allowed_users": null}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["instructions"], Value::Null);
    assert_eq!(v["allowed_users"], Value::Null);
    assert_eq!(v["tool_contract"], json!(["a"]));
    // Unknown agents, non-admins.
    assert_eq!(
        api_code(app.get("/api/admin/agents/nope", &admin).await).await,
        (StatusCode::NOT_FOUND, "agent_not_found".into())
    );
    assert_eq!(
        api_code(
            app.patch("/api/admin/agents/nope", &admin, &json!({"name": "x"}))
                .await
        )
        .await,
        (StatusCode::NOT_FOUND, "agent_not_found".into())
    );
    let (_, ann) = app.user("ann@example.com").await;
    for r in [
        app.get("/api/admin/agents", &ann).await,
        app.post(
            "/api/admin/agents",
            &ann,
            &json!({"address": "z", "name": "z", "model": "chat-1"}),
        )
        .await,
        app.get(&format!("/api/admin/agents/{AGENT}"), &ann).await,
        app.patch(
            &format!("/api/admin/agents/{AGENT}"),
            &ann,
            &json!({"name": "z"}),
        )
        .await,
    ] {
        assert_eq!(
            api_code(r).await,
            (StatusCode::FORBIDDEN, "forbidden".into())
        );
    }
}

#[tokio::test]
async fn agents_can_be_declared_in_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        r#"
[[providers]]
name = "local"
type = "openai"
base_url = "http://127.0.0.1:9/v1"

[[models]]
id = "chat-1"
kind = "chat"
provider = "local"
upstream_model = "up"

[[agents]]
address = "helpdesk"
name = "Helpdesk"
model = "chat-1"
default_tool_mode = "read_only"
tool_contract = ["search"]
allowed_users = ["Ann@Example.com"]
pii = { mode = "redact", user_choosable = true }
"#,
    )
    .unwrap();
    let p = path.clone();
    let mut app = spawn_app_with(move |s| s.config_file = Some(p)).await;
    let admin = app.admin_token().await;
    let v: Value = app
        .get("/api/admin/agents/helpdesk", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["name"], "Helpdesk");
    assert_eq!(v["default_tool_mode"], "read_only");
    assert_eq!(v["tool_contract"], json!(["search"]));
    assert_eq!(v["allowed_users"], json!(["ann@example.com"]));
    assert_eq!(
        v["pii"],
        json!({"mode": "redact", "user_choosable": true, "terms": []})
    );
    let (_, ann) = app.user("ann@example.com").await;
    let t = app.sign_in(&ann, "helpdesk", "laptop").await;
    // The file wins on the next start: an upsert, and the narrowed list applies.
    std::fs::write(
        &path,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace("Ann@Example.com", "bob@example.com")
            .replace("Helpdesk\"", "Help desk\""),
    )
    .unwrap();
    app.restart().await;
    let v: Value = app
        .get("/api/admin/agents/helpdesk", &admin)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["name"], "Help desk");
    assert_eq!(
        api_code(app.refresh(&s(&t, "refresh_token")).await).await,
        (StatusCode::UNAUTHORIZED, "sign_in_ended".into())
    );
}

#[tokio::test]
async fn a_bad_agent_in_the_config_file_stops_the_start_with_its_reason() {
    for (table, want) in [
        ("model = \"missing\"", "model"),
        (
            "model = \"missing\"\ntool_contracts = [\"x\"]",
            "unknown field `tool_contracts`",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.toml");
        std::fs::write(
            &path,
            format!("[[agents]]\naddress = \"helpdesk\"\nname = \"H\"\n{table}\n"),
        )
        .unwrap();
        let (db, _db_dir) = fresh_database().await;
        let mut settings = gatehouse::config::Settings::for_database(&db);
        settings.config_file = Some(path);
        let err = match gatehouse::start(settings).await {
            Ok(_) => panic!("the start must fail"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("agent helpdesk") && err.contains(want),
            "{err}"
        );
    }
}

#[tokio::test]
async fn admin_agent_data_views_need_an_admin_and_an_existing_agent() {
    let env = env("adm", json!({})).await;
    for path in [
        env.admin_path("tools"),
        env.admin_path("events"),
        env.admin_path("approvals"),
    ] {
        let (s, code) = api_code(env.app.get(&path, &env.login).await).await;
        assert_eq!((s.as_u16(), code.as_str()), (403, "forbidden"), "{path}");
        let missing = path.replace(&env.address, "nobody@acme");
        let (s, code) = api_code(env.app.get(&missing, &env.admin).await).await;
        assert_eq!(
            (s.as_u16(), code.as_str()),
            (404, "agent_not_found"),
            "{missing}"
        );
    }
    let accept = env.admin_path("tools/run/accept");
    let (s, code) = api_code(env.app.post(&accept, &env.login, &json!({})).await).await;
    assert_eq!((s.as_u16(), code.as_str()), (403, "forbidden"));
    for q in ["approvals?status=maybe", "events?limit=0", "events?limit=x"] {
        let (s, code) = api_code(env.app.get(&env.admin_path(q), &env.admin).await).await;
        assert_eq!(
            (s.as_u16(), code.as_str()),
            (400, "validation_error"),
            "{q}"
        );
    }
}
