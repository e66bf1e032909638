//! Anthropic's Messages dialect, inbound: a client speaks Messages, an
//! `openai` upstream speaks chat. Pure functions, each file one step:
//!
//! - [`request`]: the body's checks (the contract's fields, 400
//!   `validation_error` naming the member).
//! - [`to_chat`]: a Messages request as an OpenAI chat request (tool names
//!   made acceptable and mapped back, Anthropic-only members dropped and
//!   counted).
//! - [`from_chat_answer`]: a chat answer as a Messages answer, and the usage
//!   convention (prompt includes cache).
//! - [`stream`]: chat stream chunks as Messages SSE events.
//! - [`count`]: the `count_tokens` estimate.
//! - [`error`]: Anthropic's error shape.
//!
//! The opposite direction (chat to an `anthropic` upstream) lives in its own
//! files beside these.

pub mod count;
pub mod error;
pub mod from_chat_answer;
pub mod request;
pub mod stream;
pub mod to_chat;
pub mod turn_body;
