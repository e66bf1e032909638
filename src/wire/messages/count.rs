//! The `count_tokens` estimate for targets that cannot count (contract,
//! "count_tokens"): `max(1, ceil(C/4))`, C the characters of the system
//! text, every text block or string content, tool_result text, compact JSON
//! of tool_use inputs, and each tool's name, description and compact JSON
//! `input_schema`. Never 0: Claude Code would never compact.

use serde_json::{Map, Value};

use super::to_chat::{system_text, tool_result_text};

/// The characters the estimate counts.
pub fn prompt_chars(body: &Map<String, Value>) -> usize {
    let n = |s: &str| s.chars().count();
    let mut c = system_text(body.get("system")).map_or(0, |s| n(&s));
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match m.get("content") {
            Some(Value::String(s)) => c += n(s),
            Some(Value::Array(blocks)) => {
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            c += b.get("text").and_then(Value::as_str).map_or(0, n);
                        }
                        Some("tool_result") => c += n(&tool_result_text(b)),
                        Some("tool_use") => {
                            c += b.get("input").map_or(0, |i| n(&i.to_string()));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    for t in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        c += t.get("name").and_then(Value::as_str).map_or(0, n);
        c += t.get("description").and_then(Value::as_str).map_or(0, n);
        c += t.get("input_schema").map_or(0, |s| n(&s.to_string()));
    }
    c
}

/// The estimate: at least 1.
pub fn estimate(body: &Map<String, Value>) -> i64 {
    crate::usage::estimate_tokens(prompt_chars(body)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn est(v: Value) -> i64 {
        estimate(v.as_object().unwrap())
    }

    #[test]
    fn every_counted_part_adds_its_characters() {
        let v = json!({"system": "abcd", "messages": [
            {"role": "user", "content": "efgh"},
            {"role": "assistant", "content": [{"type": "text", "text": "ij"}, {"type": "tool_use", "id": "t", "name": "x", "input": {"a": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}, {"type": "image"}]}],
            "tools": [{"name": "Read", "description": "rd", "input_schema": {}}]});
        // 4 + 4 + 2 + 7 ({"a":1}) + 2 + 4 + 2 + 2 ({}) = 27
        assert_eq!(prompt_chars(v.as_object().unwrap()), 27);
        assert_eq!(est(v), 7);
    }

    #[test]
    fn an_empty_prompt_still_counts_one() {
        assert_eq!(
            est(json!({"messages": [{"role": "user", "content": ""}]})),
            1
        );
        assert_eq!(
            est(json!({"messages": [{"role": "user", "content": "abcde"}]})),
            2
        );
    }
}
