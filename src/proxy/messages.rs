//! The Messages dialect inbound, on the one relay ([`crate::proxy::chat`]):
//! [`MessagesHooks`] wraps a route's chat hooks (none, or the agent turn's)
//! and turns what the relay hands them (chat answers and chunks) into
//! Messages answers and events. The relay keeps retries, fallbacks, limits,
//! usage and the routing headers; it never learns the dialect.
//!
//! The order around a chunk: tool call ids made acceptable to a Messages
//! client and long tool names mapped back first (so approvals and AG-UI
//! events name what the client sees), then the inner hooks (PII restore,
//! approvals, AG-UI events), then the translation. AG-UI frames go after
//! `message_start` (Anthropic clients require it first).
//!
//! Seam for pass-through: a Messages request whose attempt goes to a
//! provider that speaks Messages itself (type `anthropic`) is to pass the
//! client's body through rather than be translated; [`passes_through`] is
//! where the attempt's `ProviderType` decides. Not wired yet: until it is,
//! such an attempt goes through the `anthropic` chat adapter (Messages →
//! chat here, chat → Messages there, and back), which works but drops what
//! chat cannot carry (thinking, cache_control, server tools).

use serde_json::{json, Value};

use crate::error::Error;
use crate::models::ProviderType;
use crate::proxy::chat::{ChatHooks, ChunkAction};
use crate::usage::Tokens;
use crate::wire::messages::error::stream_error;
use crate::wire::messages::from_chat_answer::{block_id, messages_answer, new_message_id};
use crate::wire::messages::stream::{frame, ToMessages};
use crate::wire::messages::to_chat::ToolNames;
use crate::wire::sse::SseFrame;

/// Whether a Messages request goes to a provider of this type as it came
/// (pass-through) rather than translated to chat: `anthropic` will, once
/// the relay learns to pass a body through (see the module documentation).
pub fn passes_through(kind: ProviderType) -> bool {
    match kind {
        ProviderType::Openai
        | ProviderType::Tei
        | ProviderType::Cohere
        | ProviderType::Anthropic => false,
    }
}

/// Chat hooks `H` answered in Messages' shape; see the module documentation.
pub struct MessagesHooks<H> {
    inner: H,
    names: ToolNames,
    /// The name the client sent.
    model: String,
    /// The id of the model it resolved to: an answer under another id came
    /// from a fallback, and names it (as on chat).
    model_id: String,
    input_estimate: i64,
    stream: ToMessages,
}

impl<H: ChatHooks> MessagesHooks<H> {
    /// `model`: the name the answer carries; `input_estimate`: the
    /// gateway's estimate of the prompt (for `message_start`).
    pub fn new(
        inner: H,
        model: &str,
        model_id: &str,
        input_estimate: i64,
        names: ToolNames,
    ) -> Self {
        MessagesHooks {
            stream: ToMessages::new(
                new_message_id(),
                model.to_string(),
                input_estimate,
                names.clone(),
            ),
            inner,
            names,
            model: model.to_string(),
            model_id: model_id.to_string(),
            input_estimate,
        }
    }

    /// The name an answer carries: the client's, or a fallback's id.
    fn answer_model(&self, relayed: Option<&Value>) -> String {
        match relayed.and_then(Value::as_str) {
            Some(m) if m != self.model_id => m.to_string(),
            _ => self.model.clone(),
        }
    }

    /// Tool call ids and names as the Messages client will see them.
    fn client_calls(&self, calls: Option<&mut Value>) {
        let Some(Value::Array(calls)) = calls else {
            return;
        };
        for (i, c) in calls.iter_mut().enumerate() {
            let at = c
                .get("index")
                .and_then(Value::as_u64)
                .map_or(i, |x| x as usize);
            if let Some(Value::String(id)) = c.get_mut("id") {
                *id = block_id(id, at);
            }
            if !self.names.is_empty() {
                if let Some(Value::String(n)) = c.pointer_mut("/function/name") {
                    *n = self.names.original(n).to_string();
                }
            }
        }
    }
}

impl<H: ChatHooks> ChatHooks for MessagesHooks<H> {
    const EDITS_ANSWERS: bool = true;

    async fn on_response(&mut self, response: &mut Value) -> Result<(), Error> {
        self.client_calls(response.pointer_mut("/choices/0/message/tool_calls"));
        self.inner.on_response(response).await?;
        let approvals = response.get("approvals").cloned();
        let fallback = Tokens {
            prompt: self.input_estimate,
            ..Tokens::default()
        };
        let model = self.answer_model(response.get("model"));
        let mut answer = messages_answer(
            response,
            self.stream.id(),
            &model,
            &ToolNames::default(),
            fallback,
        );
        if let Some(a) = approvals {
            answer["approvals"] = a;
        }
        *response = answer;
        Ok(())
    }

    fn on_chunk(&mut self, chunk: &mut Value, before: &mut Vec<SseFrame>) -> ChunkAction {
        if let Some(Value::Array(choices)) = chunk.get_mut("choices") {
            for c in choices.iter_mut() {
                let calls = c.pointer_mut("/delta/tool_calls");
                self.client_calls(calls);
            }
        }
        // AG-UI's messageId is the message's id.
        chunk["id"] = json!(self.stream.id());
        if !self.stream.started() {
            let model = self.answer_model(chunk.get("model"));
            self.stream.set_model(model);
        }
        let mut inner = Vec::new();
        let action = self.inner.on_chunk(chunk, &mut inner);
        self.stream.start(before);
        before.extend(inner);
        if action == ChunkAction::Send {
            self.stream.chunk(chunk, before);
        }
        ChunkAction::Drop
    }

    async fn on_stream_end(&mut self, usage: Option<&Value>) -> Vec<SseFrame> {
        let inner = self.inner.on_stream_end(usage).await;
        let mut out = Vec::new();
        self.stream.start(&mut out);
        let mut after_delta = Vec::new();
        let mut approvals = None;
        for f in inner {
            // The inner hooks speak chat: a closing chunk (restored text,
            // approvals) or an error.
            let SseFrame::Data(data) = &f else {
                after_delta.push(f);
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if let Some(e) = v.get("error") {
                let message = e.get("message").and_then(Value::as_str).unwrap_or("");
                out.extend(after_delta);
                out.push(frame(json!({"type": "error",
                    "error": {"type": "api_error", "message": message}})));
                return out;
            }
            if let Some(a) = v.get("approvals") {
                approvals = Some(a.clone());
            } else {
                self.stream.chunk(&v, &mut out);
            }
        }
        self.stream.finish(usage, &mut out);
        out.extend(after_delta);
        if let Some(a) = approvals {
            out.push(frame(json!({"type": "service.approvals", "approvals": a})));
        }
        self.stream.stop(&mut out);
        out
    }

    fn on_stream_error(&mut self, error: &Error) -> Vec<SseFrame> {
        let mut out = Vec::new();
        self.stream.start(&mut out);
        out.extend(self.inner.on_stream_error(error));
        out
    }

    fn stream_done(&self) -> &'static [u8] {
        // This dialect has no `[DONE]`.
        b""
    }

    fn error_frame(&self, error: &Error) -> SseFrame {
        frame(stream_error(error))
    }
}
