//! Identifiers that parse once: conversation, turn and event ids (tool
//! names follow the wire's rule, [`crate::wire::is_tool_name`]).

/// 1 to 128 of ASCII letters, digits, `.` `_` `:` `-` (conversation, turn and event ids).
pub fn is_conversation_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// A new id with this prefix and 32 lowercase hex digits (`resp_...`, `msg_...`).
pub fn new_id(prefix: &str) -> String {
    // Without `format!`: ids are made for every response and item.
    let mut buf = uuid::Uuid::encode_buffer();
    let hex = uuid::Uuid::new_v4().simple().encode_lower(&mut buf);
    let mut id = String::with_capacity(prefix.len() + hex.len());
    id.push_str(prefix);
    id.push_str(hex);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_ids_accept_1_to_128_allowed_characters() {
        assert!(is_conversation_id("a"));
        assert!(is_conversation_id(&"x".repeat(128)));
        assert!(!is_conversation_id(&"x".repeat(129)));
        assert!(!is_conversation_id(""));
        assert!(is_conversation_id("conv-1:turn_2.a"));
        for bad in ["a b", "a/b", "é", "a@b", "a\n"] {
            assert!(!is_conversation_id(bad), "{bad:?}");
        }
    }
}
