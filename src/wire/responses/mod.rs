//! OpenAI Responses API (`/v1/responses`): request bodies read and checked
//! ([`request`]), their translation into chat completions (the bridge), the
//! chat answer made into a Responses answer ([`answer`]), and a chat stream
//! made into the Responses event grammar ([`stream`]). Codex's session and
//! turn headers are read by [`headers`]. Pure: no I/O.
//!
//! The gateway stores nothing: every request carries its whole transcript,
//! and what would need stored state (`previous_response_id`, `conversation`,
//! item references) is refused.

pub mod answer;
pub mod headers;
pub mod native;
pub mod raw;
pub mod request;
pub mod stream;

pub use answer::{Echo, ResponseMeta};
pub use raw::RawResponses;
pub use request::ResponsesRequest;
pub use stream::ResponsesStream;

pub use crate::wire::ids::new_id;

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_the_prefix_and_32_lowercase_hex_digits() {
        let id = super::new_id("resp_");
        let hex = id.strip_prefix("resp_").unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }
}
