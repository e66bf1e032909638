//! Talking to upstream model servers: the shared upstream call and its error
//! mapping ([`upstream`]), the event-stream parser and framing ([`sse`]), the
//! chat relay used by `/v1/chat/completions` and the agent chat route
//! ([`chat`]), and the AG-UI translation of streamed agent chats ([`agui`]).

pub mod chat;

pub use crate::usage::UsageContext;
pub use crate::wire::sse::SseFrame;
pub use chat::{relay, ChatCall, ChatHooks, ChunkAction, NoHooks};
