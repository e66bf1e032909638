//! Talking to upstream model servers: the shared upstream call and its error
//! mapping ([`upstream`]), the event-stream parser and framing ([`sse`]), and
//! the chat relay used by `/v1/chat/completions` and the agent chat route
//! ([`chat`]).

pub mod chat;
pub mod sse;
pub mod upstream;

pub use crate::usage::UsageContext;
pub use chat::{relay, ChatCall, ChatHooks, ChunkAction, NoHooks};
pub use sse::SseFrame;
