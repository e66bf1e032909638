//! Wire formats: how each dialect a client or an upstream speaks is read and
//! written, as bytes and as JSON, with its event-stream grammar and its
//! translation to and from OpenAI chat, the gateway's common tongue. One
//! folder (or file) per dialect; everything here is pure (no I/O, no
//! database, no HTTP types), so each piece is tested on plain values and
//! fuzzed on its own.
//!
//! - [`json`]: byte-level JSON checks shared by the dialects (what a tree
//!   would read, numbers, typed parsing with errors that name the field).
//! - [`sse`]: the server-sent events parser and frames.
//! - [`chat`]: OpenAI chat completions: request bodies read once (raw when
//!   possible), answers and stream chunks rewritten by splicing.
//! - [`agui`]: AG-UI protocol events made from a chat stream, and AG-UI's
//!   `RunAgentInput` read as a chat body.

pub mod agui;
pub mod chat;
pub mod ids;
pub mod json;
pub mod messages;
pub mod responses;
pub mod sse;
pub mod translation_dropped;

/// The longest tool name, in bytes.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// The tool-name rule every dialect's tools follow here (OpenAI's function
/// names): 1 to 64 of `A-Za-z0-9_-`.
pub fn is_tool_name(s: &str) -> bool {
    (1..=MAX_TOOL_NAME_LEN).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// A tool call of an assistant answer, in any dialect (chat's `tool_calls`,
/// Messages' `tool_use` blocks, Responses' function calls): what approvals
/// and the tool rules need of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model gave them (JSON text).
    pub arguments: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_accept_1_to_64_of_their_alphabet() {
        assert!(is_tool_name("read_file-2"));
        assert!(is_tool_name(&"t".repeat(64)));
        assert!(!is_tool_name(&"t".repeat(65)));
        assert!(!is_tool_name("a.b"));
        assert!(!is_tool_name(""));
    }
}
