//! `POST /v1/agents/{agent}/chat/completions`: the agent's model, its
//! instructions first, tool rules, approvals, PII protection, AG-UI events.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use gatehouse_pii::{Counts, Mode as PiiMode, Scanner, Vault};
use serde_json::{json, Value};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::approvals::ApprovalState;
use crate::agents::chat::parse_headers;
use crate::agents::tools::ToolPolicy;
use crate::app::AppState;
use crate::error::{Error, ErrorKind, Result};
use crate::http::access::AccessNote;
use crate::http::agent_auth::{agent_segment, decoded_agent, AgentAccess, AgentInPath};
use crate::http::agent_data::{manifest_classes, tool_decisions};
use crate::http::extract::read_body;
use crate::http::limits::{add_headers, admit, end_hook};
use crate::limits::Subject;
use crate::models::{resolve, ModelKind};
use crate::pii::{choose_mode, protect_body, VaultStore, TOKEN_NOTE};
use crate::proxy::agent_hooks::{AgentChatContext, AgentHooks};
use crate::proxy::{relay, ChatCall, UsageContext};
use crate::runtime::Invalidation;
use crate::wire::chat::body::{ChatInput, RawChat};
use crate::wire::chat::check_body;
use crate::wire::chat::request::{ChatRequest, Upstream};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(agent_chat))
}

const ROUTE: &str = "/v1/agents/{agent}/chat/completions";

/// This route for `http::Dispatch` (the caller checked the method): a path
/// the router would match with an `{agent}` that decodes; any other goes to
/// the router.
pub(super) fn direct_route(req: &Request) -> Option<(&'static str, super::Direct)> {
    direct_agent(req.uri().path())?;
    Some((ROUTE, |mut req, app| {
        if let Some(agent) = direct_agent(req.uri().path()) {
            req.extensions_mut().insert(AgentInPath(agent));
        }
        axum::handler::Handler::call(agent_chat, req, app)
    }))
}

/// The decoded `{agent}` of `/v1/agents/{agent}/chat/completions`.
fn direct_agent(path: &str) -> Option<String> {
    let segment = agent_segment(path)?;
    let rest = &path["/v1/agents/".len() + segment.len()..];
    if rest != "/chat/completions" {
        return None;
    }
    decoded_agent(segment)
}

async fn scanner(app: &AppState, terms: &[String]) -> Result<Arc<Scanner>> {
    let terms = terms.to_vec();
    let built = app
        .caches
        .scanners
        .get_or_load(&terms.join("\u{1}"), || async move {
            let s = tokio::task::spawn_blocking(move || Scanner::new(&terms))
                .await
                .map_err(Error::internal)?
                .map_err(Error::internal)?;
            Ok::<_, Error>(Some(Arc::new(s)))
        })
        .await?;
    built.ok_or_else(|| Error::internal("scanner cache returned nothing"))
}

/// Chat through the agent's own model under the agent's tool rules.
#[utoipa::path(post, path = "/v1/agents/{agent}/chat/completions", tag = "agent", params(("agent" = String, Path),
    ("X-Service-Tool-Mode" = Option<String>, Header, description = "off, read_only, ask or auto"),
    ("X-Service-Conversation-Id" = Option<String>, Header), ("X-Service-Turn-Id" = Option<String>, Header),
    ("X-Service-PII-Mode" = Option<String>, Header, description = "redact or tokenize_reversible, where the agent lets the user choose"),
    ("X-Service-Events" = Option<String>, Header, description = "ag-ui: AG-UI events in the stream")),
    responses((status = 200, description = "A chat completion (or an SSE stream), with `approvals` when some are needed; header X-Service-Held-Tools"),
              (status = 400, description = "invalid_header, pii_mode_not_allowed, validation_error"), (status = 409, description = "approval_pending")))]
async fn agent_chat(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    let h = parse_headers(|name| req.headers().get(name).map(|v| v.as_bytes()))?;
    let agent = Arc::clone(&access.agent);
    let pii_mode = choose_mode(
        agent.pii.mode,
        agent.pii.user_choosable,
        h.pii_mode.as_deref(),
    )?;
    let note = AccessNote::of(req.extensions());
    note.set(|f| f.model = Some(agent.model.clone()));
    let bytes = read_body(req).await?;
    // Only PII protection edits inside every field: without it, the fields
    // may stay the client's text.
    let mut request = ChatRequest::parse(&bytes, pii_mode == PiiMode::Off)?;
    // Tool checks first: a refused list records nothing and reaches no upstream.
    request.refuse_legacy_functions()?;
    let offered = request.offered_tools()?;
    // Fields kept as text passed these checks as they were read.
    if let Some(fields) = request.fields() {
        check_body(fields)?;
    }
    let model = resolve(&app.catalog(), &agent.model, ModelKind::Chat).map_err(|_| {
        Error::new(
            ErrorKind::Unavailable,
            "agent_model_unavailable",
            "The agent's model is not configured; ask an administrator.",
        )
    })?;
    let address = agent.address.as_str().to_string();
    let device = access.sign_in.device_id.clone();
    // The user's and the agent's limits (sign-ins have none of their own).
    let subjects = [
        Subject::user(&access.user.id, access.user.limits),
        Subject::agent(&address, agent.limits),
    ];
    let admission = match admit(&app, &subjects).await {
        Ok(a) => a,
        Err(refused) => return Ok(*refused),
    };
    let rate_headers = admission.headers;

    if let Some(instructions) = &agent.instructions {
        request.put_instructions(instructions);
    }

    // Tool rules.
    let mode = h.tool_mode.unwrap_or(agent.default_tool_mode);
    let classes = manifest_classes(&app, &address, &device).await?;
    let holding = !agent.tool_contract.is_empty() && !agent.allow_local_mcp;
    let decisions = if holding {
        tool_decisions(&app, &address).await?
    } else {
        Arc::new(HashMap::new())
    };
    let policy = ToolPolicy {
        mode,
        classes: &classes,
        contract: &agent.tool_contract,
        decisions: &decisions,
        allow_local_mcp: agent.allow_local_mcp,
    };
    let decision = policy.decide(&offered.names());
    if request.has_tool_fields() {
        request.apply(&decision.keep);
    }
    let unseen: Vec<String> = decision
        .held
        .iter()
        .filter(|t| !decisions.contains_key(**t))
        .map(|t| t.to_string())
        .collect();
    if !unseen.is_empty() {
        // Held tools show in the admin's list even if no manifest named them.
        app.store.record_offered_tools(&address, &unseen).await?;
        app.invalidate(Invalidation::Tools(address.clone())).await;
    }

    // Answers to approvals.
    let answered = request.answered_calls();
    if !answered.is_empty() {
        let now = crate::store::now_ms();
        let states: HashMap<String, ApprovalState> = app
            .store
            .approval_states(
                &address,
                &access.user.id,
                h.conversation_id.as_deref(),
                &answered,
            )
            .await?
            .into_iter()
            .filter_map(|(id, (s, exp))| Some((id, ApprovalState::parse(&s)?.effective(exp, now))))
            .collect();
        request.answer_calls(crate::agents::approvals::fate_of(&states))?;
    }

    // PII.
    let mut counts = Counts::new();
    let mut vault_out = None;
    if pii_mode != PiiMode::Off {
        let scanner = scanner(&app, &agent.pii.terms).await?;
        let vault_key = h
            .conversation_id
            .as_deref()
            .map(|c| VaultStore::key(&address, &access.user.id, c));
        let mut vault = match (&vault_key, pii_mode) {
            (Some(k), PiiMode::TokenizeReversible) => app.vaults.load(&app.store, k).await?,
            _ => Vault::new(),
        };
        request.with_tools_as_values(|body| {
            protect_body(body, &scanner, pii_mode, &mut vault, &mut counts)
        })?;
        if pii_mode == PiiMode::TokenizeReversible {
            if !vault.is_empty() {
                let at = usize::from(agent.instructions.is_some());
                if let Some(Value::Array(messages)) = request.tree()?.get_mut("messages") {
                    messages.insert(
                        at.min(messages.len()),
                        json!({"role": "system", "content": TOKEN_NOTE}),
                    );
                }
            }
            if let Some(k) = &vault_key {
                // Saved on every turn that uses it: the lifetime counts from the last use.
                if !vault.is_empty() {
                    app.vaults
                        .save(&app.store, k, &vault, app.settings.pii_vault_ttl_s)
                        .await?;
                }
            }
            vault_out = Some(Arc::new(vault));
        }
    }

    let stream = request.is_stream();
    let ag_ui = (h.ag_ui && stream).then(|| {
        let gen = || uuid::Uuid::new_v4().to_string();
        (
            h.conversation_id.clone().unwrap_or_else(gen),
            h.turn_id.clone().unwrap_or_else(gen),
        )
    });
    let hooks = AgentHooks::new(AgentChatContext {
        store: app.store.clone(),
        approval_ttl: app.settings.approval_ttl,
        agent: address.clone(),
        model_alias: model.id.clone(),
        user_id: access.user.id.clone(),
        device_id: device.clone(),
        conversation_id: h.conversation_id.clone(),
        mode,
        classes: Arc::clone(&classes),
        held: decision.held.iter().map(|t| t.to_string()).collect(),
        pii_counts: counts,
        vault: vault_out,
        ag_ui,
    });
    let usage = UsageContext {
        user_id: Some(access.user.id.clone()),
        api_key_id: None,
        agent: Some(address),
        device_id: Some(device),
        conversation_id: h.conversation_id,
        turn_id: h.turn_id,
        on_end: end_hook(admission),
    };
    let (body, tools) = match request.into_upstream() {
        Upstream::Tree(fields, tools) => (ChatInput::Tree(fields), tools),
        Upstream::Text {
            after_model,
            stream,
            prompt_chars,
        } => (
            ChatInput::Raw(RawChat::assembled(after_model, stream, prompt_chars)),
            None,
        ),
    };
    let relayed = relay(
        &app.http,
        &app.usage,
        ChatCall {
            model,
            body,
            tools,
            usage,
        },
        hooks,
    )
    .await;
    let mut resp = match relayed {
        Ok(r) => crate::http::v1::relayed_response(r),
        Err(e) => {
            let mut resp = e.into_response();
            add_headers(&mut resp, &rate_headers);
            return Ok(resp);
        }
    };
    add_headers(&mut resp, &rate_headers);
    if !decision.held.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&decision.held.join(",")) {
            resp.headers_mut().insert("x-service-held-tools", v);
        }
    }
    Ok(resp)
}
