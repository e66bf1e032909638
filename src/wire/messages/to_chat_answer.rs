//! Anthropic Messages answer → OpenAI chat answer, and the usage convention
//! both directions of the outbound translation share: prompt tokens are
//! `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`,
//! cached tokens the cache reads.

use serde_json::{json, Map, Value};

/// Messages usage figures (from one object, or merged over a stream).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessagesUsage {
    pub input: i64,
    pub output: i64,
    pub cache_read: i64,
    pub cache_creation: i64,
}

/// The figures one Messages `usage` object carries (None: absent, or not
/// a whole number), read from a tree or typed from its text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageCounts {
    pub input: Option<i64>,
    pub output: Option<i64>,
    pub cache_read: Option<i64>,
    pub cache_creation: Option<i64>,
}

impl UsageCounts {
    /// The figures of a `usage` tree (members that are not whole numbers
    /// ignored).
    pub fn of(usage: &Value) -> UsageCounts {
        let get = |k: &str| usage.get(k).and_then(Value::as_i64);
        UsageCounts {
            input: get("input_tokens"),
            output: get("output_tokens"),
            cache_read: get("cache_read_input_tokens"),
            cache_creation: get("cache_creation_input_tokens"),
        }
    }
}

impl MessagesUsage {
    /// Overwrites the figures `usage` carries (a stream's later events win).
    pub fn merge(&mut self, usage: &Value) {
        self.merge_counts(&UsageCounts::of(usage));
    }

    /// [`Self::merge`] for figures already read.
    pub fn merge_counts(&mut self, c: &UsageCounts) {
        let pairs = [
            (&mut self.input, c.input),
            (&mut self.output, c.output),
            (&mut self.cache_read, c.cache_read),
            (&mut self.cache_creation, c.cache_creation),
        ];
        for (field, n) in pairs {
            if let Some(n) = n {
                *field = n;
            }
        }
    }

    /// The usage record's tokens under the one convention.
    pub fn tokens(&self) -> crate::usage::Tokens {
        crate::usage::Tokens {
            prompt: self.input + self.cache_read + self.cache_creation,
            completion: self.output,
            cache_read: self.cache_read,
            cache_write: self.cache_creation,
            ..crate::usage::Tokens::default()
        }
    }

    /// Chat's `usage` object under the one convention.
    pub fn chat(&self) -> Value {
        let prompt = self.input + self.cache_read + self.cache_creation;
        json!({
            "prompt_tokens": prompt,
            "completion_tokens": self.output,
            "total_tokens": prompt + self.output,
            "prompt_tokens_details": {"cached_tokens": self.cache_read},
        })
    }
}

/// Chat's `finish_reason` for a Messages `stop_reason`.
pub fn finish_reason(stop_reason: Option<&str>) -> Option<&'static str> {
    Some(match stop_reason? {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        // end_turn, stop_sequence, pause_turn, and whatever comes next.
        _ => "stop",
    })
}

/// Seconds since the epoch, for chat's `created`.
pub fn now_s() -> i64 {
    crate::store::now_ms() / 1000
}

/// A whole Messages answer as a chat completion; `Err` says what is wrong.
pub fn translate(answer: &[u8]) -> Result<Vec<u8>, String> {
    let v: Value = serde_json::from_slice(answer).map_err(|_| "it is not JSON".to_string())?;
    let obj = v.as_object().ok_or("it is not a JSON object")?;
    if obj.get("type").and_then(Value::as_str) == Some("error") {
        return Err("it is an error".into());
    }
    let blocks = obj
        .get("content")
        .and_then(Value::as_array)
        .ok_or("it has no 'content' list")?;
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                text.push_str(b.get("text").and_then(Value::as_str).unwrap_or_default())
            }
            Some("tool_use") => calls.push(json!({
                "id": b.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": b.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": serde_json::to_string(b.get("input").unwrap_or(&json!({})))
                        .unwrap_or_else(|_| "{}".into()),
                },
            })),
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert(
        "content".into(),
        if text.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        },
    );
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut usage = MessagesUsage::default();
    let has_usage = obj.get("usage").is_some_and(Value::is_object);
    if let Some(u) = obj.get("usage") {
        usage.merge(u);
    }
    let mut out = json!({
        "id": obj.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion",
        "created": now_s(),
        "model": obj.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason(obj.get("stop_reason").and_then(Value::as_str)),
        }],
    });
    if has_usage {
        out["usage"] = usage.chat();
    }
    serde_json::to_vec(&out).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(v: Value) -> Value {
        serde_json::from_slice(&translate(v.to_string().as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn text_blocks_join_tool_use_becomes_tool_calls_and_thinking_is_omitted() {
        let a = tr(
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Hello "}, {"type": "text", "text": "there"},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "Oslo"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                      "cache_creation_input_tokens": 20}}),
        );
        assert_eq!(a["object"], "chat.completion");
        let m = &a["choices"][0]["message"];
        assert_eq!(m["content"], "Hello there");
        assert_eq!(
            m["tool_calls"],
            json!([{"id": "toolu_1", "type": "function",
            "function": {"name": "get", "arguments": "{\"city\":\"Oslo\"}"}}])
        );
        assert_eq!(a["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            a["usage"],
            json!({"prompt_tokens": 130, "completion_tokens": 5, "total_tokens": 135,
            "prompt_tokens_details": {"cached_tokens": 100}})
        );
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        for (s, f) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("pause_turn", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
        ] {
            assert_eq!(finish_reason(Some(s)), Some(f));
        }
        assert_eq!(finish_reason(None), None);
    }

    #[test]
    fn answers_that_are_not_messages_are_refused() {
        for bad in [
            "nope",
            "[]",
            r#"{"type":"error","error":{}}"#,
            r#"{"id":"x"}"#,
        ] {
            assert!(translate(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
