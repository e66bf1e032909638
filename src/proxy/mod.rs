//! The chat relay ([`chat`]): one chat completion from the client to the
//! model's upstream and back, plain or streamed, with retries and fallbacks
//! over the model's targets, usage recorded, and hooks for what a route adds
//! around it (the agent turn's answer side: `crate::agents::hooks`). Wire
//! formats are `crate::wire`'s; upstream dialects are the adapters'
//! (`crate::models::adapters`).

pub mod chat;
pub mod messages;
pub mod messages_rules;
pub mod native_body;
pub mod responses;

pub use crate::usage::UsageContext;
pub use crate::wire::sse::SseFrame;
pub use chat::{relay, ChatCall, ChatHooks, ChunkAction, NoHooks};
