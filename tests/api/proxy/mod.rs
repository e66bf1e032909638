//! The chat relay: `/v1/chat/completions` to the upstream and back.

mod chat;
mod writes;
