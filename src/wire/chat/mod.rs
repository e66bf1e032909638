//! OpenAI chat completions (`/v1/chat/completions`): the request body as the
//! relay and the agent turn read it ([`body`], [`request`], [`raw_fields`]),
//! and answers and stream chunks as the relay rewrites them.

pub mod body;
pub mod raw_fields;
pub mod request;
