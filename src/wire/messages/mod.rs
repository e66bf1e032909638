//! Anthropic's Messages dialect: its translation to and from OpenAI chat.
//! Pure functions, each file one step, with its tests beside it.
//!
//! Inbound (a client speaks Messages, an `openai` upstream speaks chat):
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
//! - [`turn_body`]: a Messages body as the agent turn edits it.
//!
//! Outbound (chat routes to an `anthropic` provider): [`from_chat`] turns a
//! chat request into a Messages request, [`to_chat_answer`] a Messages
//! answer into a chat answer, and [`events`] a Messages stream into chat
//! chunks, event by event.

pub mod count;
pub mod error;
pub mod events;
pub mod from_chat;
pub mod from_chat_answer;
pub mod models_list;
pub mod passed;
pub mod request;
pub mod stream;
pub mod to_chat;
pub mod to_chat_answer;
pub mod turn_body;
