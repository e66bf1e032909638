//! Upstream request bodies built once per request, not once per attempt.
//!
//! A chat body is serialised once without its `model`; each attempt's bytes
//! are that serialisation with the target's upstream model name put in
//! front, and the last result is kept, so attempts on targets that share an
//! upstream model name (several servers of one model: the usual case) send
//! the very same bytes.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Map, Value};

pub struct ChatBody {
    /// The JSON object without `model`, `{...}`.
    rest: Bytes,
    last: Option<(String, Bytes)>,
}

impl ChatBody {
    /// `body`'s `model` (if any) is left out; [`ChatBody::for_model`] puts one
    /// in. `tools`, when given, are the tools of the `tools` list, each as
    /// JSON text (kept as the client wrote it), and replace any `tools` field
    /// of `body`.
    pub fn new(
        body: &Map<String, Value>,
        tools: Option<&[&str]>,
    ) -> Result<ChatBody, serde_json::Error> {
        let tools_len: usize = tools.map_or(0, |ts| ts.iter().map(|t| t.len() + 1).sum());
        // Serialise the fields without copying the map.
        let mut out = Vec::with_capacity(256 + tools_len);
        out.push(b'{');
        let mut first = true;
        let skip = |k: &str| k == "model" || (tools.is_some() && k == "tools");
        for (k, v) in body.iter().filter(|(k, _)| !skip(k)) {
            if !first {
                out.push(b',');
            }
            first = false;
            serde_json::to_writer(&mut out, k)?;
            out.push(b':');
            serde_json::to_writer(&mut out, v)?;
        }
        if let Some(ts) = tools {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(b"\"tools\":[");
            for (i, t) in ts.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(t.as_bytes());
            }
            out.push(b']');
        }
        out.push(b'}');
        Ok(ChatBody {
            rest: Bytes::from(out),
            last: None,
        })
    }

    /// The body for a target whose upstream model is `upstream_model`.
    pub fn for_model(&mut self, upstream_model: &str) -> Bytes {
        if let Some((m, b)) = &self.last {
            if m == upstream_model {
                return b.clone();
            }
        }
        let mut out = BytesMut::with_capacity(self.rest.len() + upstream_model.len() + 16);
        out.put_slice(b"{\"model\":");
        // A string always serialises.
        let _ = serde_json::to_writer((&mut out).writer(), upstream_model);
        let inner = &self.rest[1..];
        if inner != b"}" {
            out.put_u8(b',');
        }
        out.put_slice(inner);
        let b = out.freeze();
        self.last = Some((upstream_model.to_string(), b.clone()));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn each_model_name_goes_in_front_of_the_same_fields() {
        let body = map(
            json!({"model": "alias", "messages": [{"role": "user", "content": "hé \"q\""}],
                              "stream": true, "x": {"n": [1, null]}}),
        );
        let mut b = ChatBody::new(&body, None).expect("serialises");
        for name in ["up/llama-70b", "other \"name\""] {
            let v: Value = serde_json::from_slice(&b.for_model(name)).expect("JSON");
            let mut want = body.clone();
            want.insert("model".into(), json!(name));
            assert_eq!(v, Value::Object(want));
        }
    }

    #[test]
    fn a_tools_list_kept_as_text_goes_in_as_written_in_place_of_any_tools_field() {
        let body = map(json!({"model": "alias", "messages": [], "tools": "stale"}));
        let tools = [
            r#"{"function":{"name":"a","x":1.50}}"#,
            r#"{ "function" : {"name":"b"} }"#,
        ];
        let mut b = ChatBody::new(&body, Some(&tools[..])).expect("serialises");
        assert_eq!(
            &b.for_model("u")[..],
            br#"{"model":"u","messages":[],"tools":[{"function":{"name":"a","x":1.50}},{ "function" : {"name":"b"} }]}"#
        );
        let mut b = ChatBody::new(&Map::new(), Some(&tools[..1])).expect("serialises");
        assert_eq!(
            &b.for_model("u")[..],
            br#"{"model":"u","tools":[{"function":{"name":"a","x":1.50}}]}"#
        );
    }

    #[test]
    fn attempts_on_the_same_upstream_model_share_the_bytes() {
        let mut b = ChatBody::new(&map(json!({"messages": []})), None).expect("serialises");
        let one = b.for_model("m");
        let two = b.for_model("m");
        assert_eq!(one.as_ptr(), two.as_ptr(), "not built again");
    }

    #[test]
    fn a_body_with_nothing_but_model_still_is_an_object() {
        let mut b = ChatBody::new(&map(json!({"model": "a"})), None).expect("serialises");
        assert_eq!(&b.for_model("u")[..], br#"{"model":"u"}"#);
        let mut b = ChatBody::new(&Map::new(), None).expect("serialises");
        assert_eq!(&b.for_model("u")[..], br#"{"model":"u"}"#);
    }
}
