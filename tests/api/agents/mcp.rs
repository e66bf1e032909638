//! The agent side of MCP tool calls (`gatehouse::mcp::agent::AgentSide`) on a
//! running server: what it records and decides shows on the admin API, and
//! what admins decide there changes its next answer. The `/mcp` transport in
//! front of it is the gateway's (tests/api/mcp*); here the agent side is
//! driven as the gateway drives it, with the server's own state and database.

use super::*;

use gatehouse::agents::tools::ToolClass;
use gatehouse::agents::ToolMode;
use gatehouse::mcp::agent::{AgentCaller, AgentSide, CallStep, DenyReason, ResolvedTool, Verdict};
use gatehouse::mcp::tools::canonical_json;

struct Tool {
    name: &'static str,
    class: ToolClass,
    description: String,
    schema: Value,
}

impl Tool {
    fn new(name: &'static str, class: ToolClass) -> Tool {
        Tool {
            name,
            class,
            description: format!("The {name} tool."),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        }
    }
    fn resolved(&self) -> ResolvedTool<'_> {
        ResolvedTool {
            server: "alpha",
            full_name: self.name,
            exposed: self.name,
            class: self.class,
            description: Some(&self.description),
            input_schema: Some(&self.schema),
        }
    }
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new("alpha__get_note", ToolClass::Read),
        Tool::new("alpha__write_note", ToolClass::Write),
        Tool::new("alpha__run", ToolClass::Execute),
    ]
}

impl Scene {
    fn state(&self) -> &gatehouse::app::App {
        &self.app.server.as_ref().expect("running server").app
    }

    async fn caller(&self, mode: ToolMode) -> AgentCaller {
        AgentCaller {
            agent: self
                .state()
                .agent(&self.address)
                .await
                .expect("db")
                .expect("agent"),
            user_id: self.user_id.clone(),
            device_id: self.device_id.clone(),
            mode,
        }
    }

    /// `tools/list` through the agent side: (listed names, held names).
    async fn mcp_list(&self, mode: ToolMode, tools: &[Tool]) -> (Vec<String>, Vec<String>) {
        let caller = self.caller(mode).await;
        let mut side = AgentSide::load(
            &self.state().agents,
            &self.state().store,
            self.state().settings.approval_ttl,
            &caller,
        )
        .await
        .expect("load");
        let resolved: Vec<ResolvedTool> = tools.iter().map(Tool::resolved).collect();
        let l = side.list(&resolved).await.expect("list");
        let names = |ix: &[usize]| -> Vec<String> {
            ix.iter().map(|i| tools[*i].name.to_string()).collect()
        };
        (names(&l.keep), names(&l.held))
    }

    async fn mcp_call(&self, mode: ToolMode, tool: &Tool, args: &Value) -> CallStep {
        let caller = self.caller(mode).await;
        let mut side = AgentSide::load(
            &self.state().agents,
            &self.state().store,
            self.state().settings.approval_ttl,
            &caller,
        )
        .await
        .expect("load");
        side.call(&tool.resolved(), &canonical_json(args))
            .await
            .expect("call")
    }

    async fn admin_post(&self, rest: &str, body: &Value) -> Response {
        self.app
            .post(&self.admin_path(rest), &self.admin, body)
            .await
    }
}

fn approval_id(step: &CallStep) -> String {
    match step {
        CallStep::Answer(result, Verdict::Held(id)) => {
            assert_eq!(result["isError"], true);
            assert_eq!(
                result["content"][0]["text"],
                format!("Approval required: approval {id} is pending. Call the tool again with the same arguments once it is approved.")
            );
            assert_eq!(result["_meta"]["gatehouse/approval"]["id"], id.as_str());
            assert_eq!(result["_meta"]["gatehouse/approval"]["status"], "pending");
            id.clone()
        }
        other => panic!("expected a pending approval, got {other:?}"),
    }
}

#[tokio::test]
async fn each_mode_lists_and_admits_mcp_tools_by_class() {
    let env = env("mcpmode", json!({})).await;
    let t = tools();
    let (listed, held) = env.mcp_list(ToolMode::Off, &t).await;
    assert!(listed.is_empty() && held.is_empty());
    let (listed, _) = env.mcp_list(ToolMode::ReadOnly, &t).await;
    assert_eq!(listed, ["alpha__get_note"]);
    for mode in [ToolMode::Ask, ToolMode::Auto] {
        assert_eq!(env.mcp_list(mode, &t).await.0.len(), 3);
    }
    let args = json!({"text": "hi"});
    assert_eq!(
        env.mcp_call(ToolMode::Off, &t[0], &args).await,
        CallStep::Unknown(Verdict::Denied(DenyReason::ToolMode, None))
    );
    assert_eq!(
        env.mcp_call(ToolMode::ReadOnly, &t[1], &args).await,
        CallStep::Unknown(Verdict::Denied(DenyReason::ToolMode, None))
    );
    assert_eq!(
        env.mcp_call(ToolMode::ReadOnly, &t[0], &args).await,
        CallStep::Upstream(Verdict::Allowed)
    );
    assert_eq!(
        env.mcp_call(ToolMode::Auto, &t[2], &args).await,
        CallStep::Upstream(Verdict::Allowed)
    );
    assert_eq!(
        env.mcp_call(ToolMode::Ask, &t[0], &args).await,
        CallStep::Upstream(Verdict::Allowed),
        "a read tool needs no approval in ask mode"
    );
    assert_eq!(env.admin_get("approvals").await, json!([]));
}

#[tokio::test]
async fn mcp_tools_show_in_the_agents_tool_list_with_their_server() {
    let env = env("mcptools", json!({"tool_contract": ["alpha__get_note"]})).await;
    env.manifest_ok(&std_manifest()).await;
    let (listed, held) = env.mcp_list(ToolMode::Auto, &tools()).await;
    assert_eq!(listed, ["alpha__get_note"]);
    assert_eq!(held, ["alpha__write_note", "alpha__run"]);
    let all = env.admin_get("tools").await;
    let by_name = |n: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("{n} in {all}"))
    };
    let w = by_name("alpha__write_note");
    assert_eq!(w["source"], "mcp");
    assert_eq!(w["server"], "alpha");
    assert_eq!(w["class"], "write");
    assert_eq!(w["description"], "The alpha__write_note tool.");
    assert_eq!(w["status"], "held");
    assert_eq!(by_name("alpha__get_note")["status"], "contract");
    assert_eq!(by_name("read_file")["source"], "device");
    assert_eq!(by_name("read_file")["server"], Value::Null);
}

#[tokio::test]
async fn an_accepted_mcp_tool_is_listed_until_it_changes_and_a_rejected_one_stays_held() {
    let env = env("mcphold", json!({"tool_contract": ["alpha__get_note"]})).await;
    let mut t = tools();
    env.mcp_list(ToolMode::Auto, &t).await;
    let r = env
        .admin_post("tools/alpha__write_note/accept", &json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["status"].as_str(), v["source"].as_str()),
        (Some("accepted"), Some("mcp"))
    );
    let r = env.admin_post("tools/alpha__run/reject", &json!({})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let (listed, held) = env.mcp_list(ToolMode::Auto, &t).await;
    assert_eq!(listed, ["alpha__get_note", "alpha__write_note"]);
    assert_eq!(held, ["alpha__run"]);
    let args = json!({"text": "x"});
    assert_eq!(
        env.mcp_call(ToolMode::Auto, &t[1], &args).await,
        CallStep::Upstream(Verdict::Allowed)
    );
    assert_eq!(
        env.mcp_call(ToolMode::Auto, &t[2], &args).await,
        CallStep::Unknown(Verdict::Denied(DenyReason::ToolHeld, None))
    );

    // The upstream changes the accepted tool's description: held again.
    t[1].description = "Writes a note, and now deletes others.".into();
    let (listed, held) = env.mcp_list(ToolMode::Auto, &t).await;
    assert_eq!(listed, ["alpha__get_note"]);
    assert_eq!(held, ["alpha__write_note", "alpha__run"]);
    assert_eq!(
        env.admin_tool_status("alpha__write_note").await.as_deref(),
        Some("held")
    );
    // Accepted again as it is now, then its schema changes: held again.
    env.admin_post("tools/alpha__write_note/accept", &json!({}))
        .await;
    assert_eq!(env.mcp_list(ToolMode::Auto, &t).await.0.len(), 2);
    t[1].schema = json!({"type": "object", "properties": {"all": {"type": "boolean"}}});
    assert_eq!(
        env.mcp_call(ToolMode::Auto, &t[1], &args).await,
        CallStep::Unknown(Verdict::Denied(DenyReason::ToolHeld, None))
    );
    // And its class.
    t[1].schema = tools()[1].schema.clone();
    env.mcp_list(ToolMode::Auto, &t).await;
    env.admin_post("tools/alpha__write_note/accept", &json!({}))
        .await;
    t[1].class = ToolClass::Execute;
    assert_eq!(
        env.mcp_list(ToolMode::Auto, &t).await.1,
        ["alpha__write_note", "alpha__run"]
    );
}

#[tokio::test]
async fn local_mcp_or_an_empty_contract_holds_no_mcp_tool() {
    let env = env(
        "mcplocal",
        json!({"tool_contract": ["x"], "allow_local_mcp": true}),
    )
    .await;
    let (listed, held) = env.mcp_list(ToolMode::Auto, &tools()).await;
    assert_eq!(listed.len(), 3);
    assert!(held.is_empty());
    let env = env_with("mcpempty", json!({}), |_| {}).await;
    assert!(env.mcp_list(ToolMode::Auto, &tools()).await.1.is_empty());
}

#[tokio::test]
async fn an_ask_mode_call_waits_for_its_approval_then_goes_upstream_once() {
    let env = env("mcpask", json!({})).await;
    let t = tools();
    let args = json!({"text": "hello", "n": 1.0});
    let id = approval_id(&env.mcp_call(ToolMode::Ask, &t[1], &args).await);
    // Called again while pending: the same answer, no new approval.
    let again = env
        .mcp_call(ToolMode::Ask, &t[1], &json!({"n": 1, "text": "hello"}))
        .await;
    assert_eq!(
        approval_id(&again),
        id,
        "same canonical arguments, same approval"
    );
    let listed = env.admin_get("approvals").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let a = &listed[0];
    assert_eq!(a["id"], id.as_str());
    assert_eq!(a["source"], "mcp");
    assert_eq!(a["server"], "alpha");
    assert_eq!(a["tool"], "alpha__write_note");
    assert_eq!(a["tool_call_id"], Value::Null);
    assert_eq!(a["arguments"], r#"{"n":1,"text":"hello"}"#);
    assert_eq!(a["status"], "pending");
    assert_eq!(a["decided_at"], Value::Null);
    assert_eq!(a["used_at"], Value::Null);

    // Other arguments are another approval.
    let other = approval_id(
        &env.mcp_call(ToolMode::Ask, &t[1], &json!({"text": "bye"}))
            .await,
    );
    assert_ne!(other, id);

    // An admin approves: the next call goes upstream, once.
    let r = env
        .admin_post(&format!("approvals/{id}"), &json!({"decision": "approve"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["status"].as_str(), v["source"].as_str()),
        (Some("approved"), Some("mcp"))
    );
    assert_eq!(
        env.mcp_call(ToolMode::Ask, &t[1], &args).await,
        CallStep::Upstream(Verdict::Approved(id.clone()))
    );
    let used = env.admin_get("approvals?status=approved").await;
    assert!(used[0]["used_at"].as_str().is_some(), "{used}");
    // Used: the same call asks anew.
    let next = approval_id(&env.mcp_call(ToolMode::Ask, &t[1], &args).await);
    assert_ne!(next, id);
    assert_eq!(
        env.admin_get("approvals?status=pending")
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn a_denied_mcp_call_is_answered_denied_once_then_asks_again() {
    let env = env("mcpdeny", json!({})).await;
    let t = tools();
    let args = json!({"cmd": "rm"});
    let id = approval_id(&env.mcp_call(ToolMode::Ask, &t[2], &args).await);
    // The user denies on their own route.
    let r = env
        .answer(&env.access, &id, &json!({"decision": "deny"}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    match env.mcp_call(ToolMode::Ask, &t[2], &args).await {
        CallStep::Answer(result, Verdict::Denied(DenyReason::ApprovalDenied, Some(a))) => {
            assert_eq!(a, id);
            assert_eq!(
                result,
                json!({"isError": true, "content": [{"type": "text", "text": DENIED_TEXT}]})
            );
        }
        other => panic!("expected the denied result, got {other:?}"),
    }
    let next = approval_id(&env.mcp_call(ToolMode::Ask, &t[2], &args).await);
    assert_ne!(next, id);
    // The admin's route decides MCP approvals too; decided is decided.
    let r = env
        .admin_post(&format!("approvals/{id}"), &json!({"decision": "approve"}))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn an_expired_mcp_approval_gives_way_to_a_new_one() {
    let env = env_with("mcpexp", json!({}), |s| s.approval_ttl = 1).await;
    let t = tools();
    let args = json!({});
    let id = approval_id(&env.mcp_call(ToolMode::Ask, &t[1], &args).await);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = env
        .admin_post(&format!("approvals/{id}"), &json!({"decision": "approve"}))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let next = approval_id(&env.mcp_call(ToolMode::Ask, &t[1], &args).await);
    assert_ne!(next, id);
    assert_eq!(
        env.admin_get("approvals?status=expired").await[0]["id"],
        id.as_str()
    );
}

#[tokio::test]
async fn approvals_are_per_user() {
    let env = env("mcpusers", json!({})).await;
    let t = tools();
    let args = json!({"text": "same"});
    let id = approval_id(&env.mcp_call(ToolMode::Ask, &t[1], &args).await);
    env.admin_post(&format!("approvals/{id}"), &json!({"decision": "approve"}))
        .await;
    // Another user's identical call does not ride on alice's approval.
    let (bob_id, _) = env.app.user("bob@example.com").await;
    let mut bob = env.caller(ToolMode::Ask).await;
    bob.user_id = bob_id;
    let mut side = AgentSide::load(
        &env.state().agents,
        &env.state().store,
        env.state().settings.approval_ttl,
        &bob,
    )
    .await
    .unwrap();
    let step = side
        .call(&t[1].resolved(), &canonical_json(&args))
        .await
        .unwrap();
    assert_ne!(approval_id(&step), id);
}
