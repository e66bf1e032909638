//! What a route's hooks do to a Messages answer that passes through to an
//! `anthropic` provider ([`crate::proxy::messages`]): the agent turn's
//! answer side (approvals on `tool_use` blocks, PII restore, AG-UI events)
//! read in Messages terms, in `crate::agents::hooks`. The key route has
//! none ([`NoHooks`]): its answers go as they came, only `model` set.
//!
//! The end of a passed-through stream and its failure go through the same
//! hooks' `on_stream_end` / `on_stream_error` (chat-shaped frames: AG-UI
//! events, the approvals chunk, an error), which
//! [`crate::proxy::messages::MessagesHooks`] puts in Messages terms.

use std::future::Future;

use serde_json::Value;

use crate::error::Error;
use crate::proxy::chat::NoHooks;
use crate::wire::sse::SseFrame;

/// A route's rules on passed-through Messages answers; the defaults relay
/// them as they came.
pub trait MessagesRules: Send {
    /// Whether passed-through answers and events go through these rules
    /// (false: relayed as they came, without a parse for the rules).
    fn rules_passed(&self) -> bool {
        false
    }

    /// A plain passed-through answer (`model` already set); may edit it.
    fn on_passed_answer(
        &mut self,
        answer: &mut Value,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = answer;
        async { Ok(()) }
    }

    /// One passed-through stream event (`kind` its `type`; `model` already
    /// set on `message_start`): pushes onto `out` what goes to the client in
    /// its place, in order (the event itself, edited or not, or nothing).
    fn on_passed_event(&mut self, kind: &str, event: Value, out: &mut Vec<SseFrame>) {
        let _ = kind;
        out.push(crate::wire::messages::stream::frame(event));
    }
}

impl MessagesRules for NoHooks {}
