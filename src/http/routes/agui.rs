//! `POST /v1/agents/{agent}/ag-ui`: the AG-UI endpoint. An AG-UI front end
//! (`@ag-ui/client`'s `HttpAgent`, CopilotKit) sends a `RunAgentInput` and
//! reads AG-UI events only. The run is an agent chat turn: the body is
//! mapped to a chat request (`wire::agui::input`), then agent chat takes it
//! with every rule, and its AG-UI events alone are the answer.

use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use gatehouse_pii::Mode as PiiMode;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::agents::chat::ChatHeaders;
use crate::app::AppState;
use crate::error::{Error, Result};
use crate::http::extract::agent::AgentAccess;
use crate::http::routes::agent_chat::{take_turn, TurnShape};
use crate::wire::agui::input;
use crate::wire::chat::request::ChatRequest;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(agent_agui))
}

/// An AG-UI run on the agent: `RunAgentInput` in, AG-UI events out.
#[utoipa::path(post, path = "/v1/agents/{agent}/ag-ui", tag = "agent", params(("agent" = String, Path),
    ("X-Service-Tool-Mode" = Option<String>, Header, description = "off, read_only, ask or auto"),
    ("X-Service-PII-Mode" = Option<String>, Header, description = "redact or tokenize_reversible, where the agent lets the user choose")),
    responses((status = 200, description = "An SSE stream of AG-UI events (`data:` messages only): RUN_STARTED, text and tool-call events, CUSTOM service events, and last RUN_FINISHED or RUN_ERROR; header X-Service-Held-Tools"),
              (status = 400, description = "validation_error (param names the RunAgentInput field; threadId and runId follow the conversation id rule), invalid_header, pii_mode_not_allowed"),
              (status = 409, description = "approval_pending")))]
async fn agent_agui(
    State(app): State<AppState>,
    access: AgentAccess,
    req: Request,
) -> Result<Response> {
    const AG_UI: TurnShape = TurnShape {
        read: read_run,
        events_only: true,
    };
    take_turn(&app, access, req, AG_UI).await
}

/// The run's chat request; `threadId` and `runId` become the conversation
/// and the turn.
fn read_run(bytes: &Bytes, pii_mode: PiiMode, h: &mut ChatHeaders) -> Result<ChatRequest> {
    let run = input::read(bytes)?;
    h.conversation_id = Some(run.thread_id);
    h.turn_id = Some(run.run_id);
    h.ag_ui = true;
    let chat = serde_json::to_vec(&run.chat).map_err(Error::internal)?;
    ChatRequest::parse(&Bytes::from(chat), pii_mode == PiiMode::Off)
}
