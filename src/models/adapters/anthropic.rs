//! Anthropic's Messages API (`{base_url}/v1/messages`) for the chat relay:
//! a chat request goes as a Messages request, and the answer (whole, or
//! event by event) comes back as chat. The translation itself is
//! [`crate::wire::messages`]; the provider's headers (`x-api-key`,
//! `anthropic-version`) are set where every upstream call is made
//! ([`crate::models::upstream::post`]).

use bytes::Bytes;
use serde_json::{Map, Value};

use super::{ChatAdapter, ChatEvents};
use crate::error::Error;
use crate::models::Model;
use crate::wire::messages::{events::MessagesToChat, from_chat, to_chat_answer};
use crate::wire::sse::SseEvent;

pub struct Anthropic;

impl ChatAdapter for Anthropic {
    fn chat_path(&self) -> &'static str {
        "/v1/messages"
    }

    fn chat_request(&self, chat: Bytes, model: &Model) -> Result<Bytes, Error> {
        let body: Map<String, Value> = serde_json::from_slice(&chat).map_err(Error::internal)?;
        let t = from_chat::translate(&body, model.max_tokens_default)?;
        if !t.dropped.is_empty() {
            crate::wire::translation_dropped::count(&t.dropped);
            tracing::debug!(dropped = ?t.dropped, "chat members Messages has no place for were not sent");
        }
        serde_json::to_vec(&t.body)
            .map(Bytes::from)
            .map_err(Error::internal)
    }

    fn chat_answer(&self, answer: Bytes) -> Result<Bytes, String> {
        to_chat_answer::translate(&answer).map(Bytes::from)
    }

    fn chat_events(&self) -> Option<Box<dyn ChatEvents>> {
        Some(Box::new(MessagesToChat::new()))
    }
}

impl ChatEvents for MessagesToChat {
    fn translate(&mut self, event: SseEvent) -> Result<Vec<SseEvent>, String> {
        MessagesToChat::translate(self, event)
    }
}
