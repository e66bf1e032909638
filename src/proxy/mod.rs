//! The chat relay.
pub mod agui;
