//! The chat relay.
