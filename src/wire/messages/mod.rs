//! Anthropic's Messages dialect: its translation to and from OpenAI chat.
//!
//! Outbound (chat routes to an `anthropic` provider): [`from_chat`] turns a
//! chat request into a Messages request, [`to_chat_answer`] a Messages
//! answer into a chat answer, and [`events`] a Messages stream into chat
//! chunks, event by event. Each is pure, with its tests beside it.

pub mod events;
pub mod from_chat;
pub mod to_chat_answer;
