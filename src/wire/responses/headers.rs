//! Codex's session and turn headers, as conversation and turn ids (contract,
//! "Codex specifics"): `session-id`, else `thread-id`; the `turn_id` of
//! `x-codex-turn-metadata`. A value that is not an id is ignored.

use crate::wire::ids::is_conversation_id;

/// (conversation id, turn id) from Codex's headers, read through `h`, a
/// lookup by header name.
pub fn codex_ids<'a>(h: impl Fn(&str) -> Option<&'a [u8]>) -> (Option<String>, Option<String>) {
    let id = |v: &str| is_conversation_id(v).then(|| v.to_string());
    let text = |name: &str| h(name).and_then(|v| std::str::from_utf8(v).ok());
    let conversation = ["session-id", "thread-id"]
        .into_iter()
        .find_map(|n| text(n).and_then(id));
    let turn = text("x-codex-turn-metadata")
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m.get("turn_id")?.as_str().and_then(id));
    (conversation, turn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(pairs: &[(&str, &str)]) -> (Option<String>, Option<String>) {
        codex_ids(|name| {
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes())
        })
    }

    #[test]
    fn session_then_thread_and_the_turn_of_the_metadata() {
        assert_eq!(
            ids(&[
                ("session-id", "s-1"),
                ("thread-id", "t-1"),
                ("x-codex-turn-metadata", r#"{"turn_id":"u-2"}"#)
            ]),
            (Some("s-1".into()), Some("u-2".into()))
        );
        assert_eq!(ids(&[("thread-id", "t-1")]), (Some("t-1".into()), None));
    }

    #[test]
    fn values_that_are_not_ids_are_ignored() {
        assert_eq!(
            ids(&[
                ("session-id", "has space"),
                ("thread-id", "t-1"),
                ("x-codex-turn-metadata", "{not json")
            ]),
            (Some("t-1".into()), None)
        );
        assert_eq!(
            ids(&[("x-codex-turn-metadata", r#"{"turn_id":"a/b"}"#)]),
            (None, None)
        );
    }
}
