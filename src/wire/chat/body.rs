//! Upstream request bodies built once per request, not once per attempt.
//!
//! A chat body is serialised once without its `model`; each attempt's bytes
//! are that serialisation with the target's upstream model name put in
//! front, and the last result is kept, so attempts on targets that share an
//! upstream model name (several servers of one model: the usual case) send
//! the very same bytes.

use bytes::{BufMut, Bytes, BytesMut};
use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::wire::json::MapOnly;

pub struct ChatBody {
    /// What goes before the upstream model's name, and after it.
    head: Bytes,
    tail: Bytes,
    last: Option<(String, Bytes)>,
}

/// A chat request as the relay takes it: the client's bytes when
/// [`RawChat::read`] could vouch for them (or agent chat assembled them from
/// the client's text: [`RawChat::assembled`]), else a tree.
pub enum ChatInput {
    Raw(RawChat),
    Tree(Map<String, Value>),
    /// No chat body: every target of the request speaks the client's own
    /// dialect, and the hooks send each attempt natively (a Messages
    /// request to `anthropic` targets only), so a translation would never
    /// be sent.
    NativeOnly {
        stream: bool,
        /// The characters of the client's prompt, as its dialect counts them.
        prompt_chars: usize,
        /// The client's maximum completion, when a whole number ≥ 1.
        max_completion: Option<u64>,
    },
}

/// A plain chat body read without a tree, in the usual case: `model` a
/// string, `messages` a non-empty list of message objects, `stream` absent
/// or a boolean, no `stream_options`, no key read here written twice. The
/// upstream gets the client's bytes with the model's name spliced in (and
/// for a stream, usage asked for); parsing the body into a tree and writing
/// it out again cost more than the rest of the request's own work. (Agent
/// chat assembles one from the fields it kept as text: [`RawChat::assembled`].)
pub struct RawChat {
    /// The body before the model's name, the name (without its quotes),
    /// and the body after it.
    head: Bytes,
    name: Bytes,
    tail: Bytes,
    pub stream: bool,
    /// Characters of text in the messages (see [`crate::wire::chat::prompt_chars`]).
    pub prompt_chars: usize,
    /// `max_completion_tokens`, else `max_tokens`, when a whole number ≥ 1
    /// (a budget's reservation).
    pub max_completion: Option<u64>,
}

#[derive(Deserialize)]
struct ChatView<'a> {
    #[serde(borrow)]
    model: &'a RawValue,
    #[serde(borrow)]
    messages: Vec<MapOnly<MessageView<'a>>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    stream_options: Option<&'a RawValue>,
    #[serde(borrow, default)]
    max_completion_tokens: Option<&'a RawValue>,
    #[serde(borrow, default)]
    max_tokens: Option<&'a RawValue>,
}

impl RawChat {
    /// `bytes` read in the usual case (see [`RawChat`]); None for anything
    /// else, which the tree path reads (and names what is wrong with).
    pub fn read(bytes: Bytes) -> Option<RawChat> {
        // What serde skips (the fields not named here) it checks only for
        // syntax; the upstream gets them as they are.
        if !crate::wire::json::tree_would_read(&bytes) {
            return None;
        }
        let MapOnly(view): MapOnly<ChatView> = serde_json::from_slice(&bytes).ok()?;
        if view.messages.is_empty() || view.stream_options.is_some() {
            return None;
        }
        let name = view.model.get();
        // A plain string: no escapes to undo, not empty.
        let plain = name.len() > 2
            && name.starts_with('"')
            && !name.as_bytes()[1..name.len() - 1].contains(&b'\\');
        if !plain {
            return None;
        }
        let start = (name.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
        let prompt_chars = view.messages.iter().map(|MapOnly(m)| m.chars()).sum();
        let stream = view.stream.unwrap_or(false);
        let whole = |v: Option<&RawValue>| crate::spend::budget::whole_text(v.map(RawValue::get));
        let max_completion = whole(view.max_completion_tokens).or(whole(view.max_tokens));
        let end = start + name.len();
        Some(RawChat {
            head: bytes.slice(..start),
            name: bytes.slice(start + 1..end - 1),
            tail: bytes.slice(end..),
            stream,
            prompt_chars,
            max_completion,
        })
    }

    /// A body its caller assembled (agent chat: see
    /// [`ChatRequest`](crate::wire::chat::request::ChatRequest)): `tail` is what
    /// follows the model's name, the object's other members and its `}`.
    /// No `stream_options` among them (the relay adds one for a stream).
    pub fn assembled(tail: Bytes, stream: bool, prompt_chars: usize) -> RawChat {
        RawChat {
            head: Bytes::from_static(b"{\"model\":"),
            name: Bytes::new(),
            tail,
            stream,
            prompt_chars,
            max_completion: None,
        }
    }

    /// The model the client named (none for an assembled body).
    pub fn model(&self) -> &str {
        // Checked in `read`: a string without escapes, in valid JSON text.
        std::str::from_utf8(&self.name).unwrap_or("")
    }
}

impl ChatInput {
    /// The prompt's characters and the body's maximum completion (see
    /// [`RawChat::max_completion`]): a budget's reservation.
    pub fn reserve_figures(&self) -> (usize, Option<u64>) {
        match self {
            ChatInput::Raw(raw) => (raw.prompt_chars, raw.max_completion),
            ChatInput::Tree(body) => (crate::wire::chat::prompt_chars(body), max_completion(body)),
            ChatInput::NativeOnly {
                prompt_chars,
                max_completion,
                ..
            } => (*prompt_chars, *max_completion),
        }
    }
}

/// `max_completion_tokens`, else `max_tokens`, when a whole number ≥ 1.
pub fn max_completion(body: &Map<String, Value>) -> Option<u64> {
    use crate::spend::budget::whole;
    whole(body.get("max_completion_tokens")).or(whole(body.get("max_tokens")))
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
            crate::wire::chat::tools::write_tools(&mut out, ts);
        }
        out.push(b'}');
        // `{"model":NAME` then `,` and the fields, or `}` when there are none.
        let tail = if out.len() == 2 {
            Bytes::from_static(b"}")
        } else {
            out[0] = b',';
            Bytes::from(out)
        };
        Ok(ChatBody {
            head: Bytes::from_static(b"{\"model\":"),
            tail,
            last: None,
        })
    }

    /// The bytes around the model's name (the client's own, or those agent
    /// chat assembled); for a stream, usage asked for (`stream_options` is
    /// absent: see [`RawChat`]).
    pub fn spliced(raw: &RawChat) -> ChatBody {
        let head = raw.head.clone();
        let mut tail = raw.tail.clone();
        if raw.stream {
            // Valid JSON text: an object whose last byte but white space is `}`.
            let end = tail.iter().rposition(|&b| b == b'}').unwrap_or(tail.len());
            let mut t = BytesMut::with_capacity(end + 48);
            t.put_slice(&tail[..end]);
            t.put_slice(b",\"stream_options\":{\"include_usage\":true}}");
            tail = t.freeze();
        }
        ChatBody {
            head,
            tail,
            last: None,
        }
    }

    /// The body for a target whose upstream model is `upstream_model`.
    pub fn for_model(&mut self, upstream_model: &str) -> Bytes {
        if let Some((m, b)) = &self.last {
            if m == upstream_model {
                return b.clone();
            }
        }
        let mut out =
            BytesMut::with_capacity(self.head.len() + self.tail.len() + upstream_model.len() + 8);
        out.put_slice(&self.head);
        // A string always serialises.
        let _ = serde_json::to_writer((&mut out).writer(), upstream_model);
        out.put_slice(&self.tail);
        let b = out.freeze();
        self.last = Some((upstream_model.to_string(), b.clone()));
        b
    }
}

/// A chat message read without a tree: what the relay and the tool rules
/// need of it. Any other shape fails to read, and the caller reads a tree.
#[derive(Deserialize)]
pub struct MessageView<'a> {
    #[serde(borrow, default)]
    pub role: Option<Cow<'a, str>>,
    /// Read for `role: "tool"` messages (see [`answered_calls`](crate::wire::chat::answered_calls)).
    #[serde(borrow, default)]
    pub tool_call_id: Option<Cow<'a, str>>,
    #[serde(default)]
    content: Option<ContentView>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<MapOnly<CallView<'a>>>>,
}

impl MessageView<'_> {
    /// Characters of text in the message, as
    /// [`prompt_chars`](crate::wire::chat::prompt_chars) counts them.
    pub fn chars(&self) -> usize {
        self.content.as_ref().map_or(0, |c| c.0)
            + self.tool_calls.as_ref().map_or(0, |calls| {
                calls
                    .iter()
                    .filter_map(|MapOnly(c)| c.function.as_ref()?.0.arguments.as_ref())
                    .map(|a| a.chars().count())
                    .sum()
            })
    }
}

/// A message's `content`: the characters of its text.
struct ContentView(usize);

#[derive(Deserialize)]
struct PartView<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct CallView<'a> {
    #[serde(borrow, default)]
    function: Option<MapOnly<FunctionView<'a>>>,
}

#[derive(Deserialize)]
struct FunctionView<'a> {
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

impl<'de> Deserialize<'de> for ContentView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ContentView;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of parts")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ContentView, E> {
                Ok(ContentView(v.chars().count()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<ContentView, E> {
                Ok(ContentView(0))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ContentView, A::Error> {
                let mut chars = 0;
                while let Some(MapOnly(p)) = seq.next_element::<MapOnly<PartView<'de>>>()? {
                    chars += p.text.map_or(0, |t| t.chars().count());
                }
                Ok(ContentView(chars))
            }
        }
        d.deserialize_any(V)
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

    /// What the tree path sends for `body` (the checks passed).
    fn tree_bytes(body: &str, upstream_model: &str) -> (Value, usize) {
        let mut tree: Map<String, Value> = serde_json::from_str(body).expect("JSON");
        let stream = crate::wire::chat::is_stream(&tree);
        let _ = crate::wire::chat::ask_for_usage(&mut tree, stream);
        let chars = crate::wire::chat::prompt_chars(&tree);
        let mut b = ChatBody::new(&tree, None).expect("serialises");
        (
            serde_json::from_slice(&b.for_model(upstream_model)).expect("JSON"),
            chars,
        )
    }

    #[test]
    fn a_usual_chat_body_goes_up_as_the_clients_bytes_with_the_model_spliced_in() {
        let body = r#"{ "model" : "alias", "temperature": 0.50,
            "messages": [{"role": "system", "content": "Be \"brief\"\n"},
                         {"role": "user", "content": [{"type": "text", "text": "héllo"}, {"type": "image_url"}]},
                         {"role": "assistant", "content": null,
                          "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}],
            "x": {"n": [1, null]} }"#;
        let raw = RawChat::read(Bytes::from(body)).expect("read without a tree");
        assert_eq!(raw.model(), "alias");
        assert!(!raw.stream);
        let mut b = ChatBody::spliced(&raw);
        let sent = b.for_model("up/\"llama\"");
        let text = std::str::from_utf8(&sent).unwrap();
        // The client's own bytes around the name (0.50 stays 0.50).
        assert!(
            text.starts_with(r#"{ "model" : "up/\"llama\"", "temperature": 0.50,"#),
            "{text}"
        );
        let (tree, chars) = tree_bytes(body, "up/\"llama\"");
        assert_eq!(serde_json::from_slice::<Value>(&sent).unwrap(), tree);
        assert_eq!(raw.prompt_chars, chars);
        assert_eq!(chars, 11 + 5 + 7);
    }

    #[test]
    fn a_usual_stream_asks_the_upstream_for_usage() {
        let body = r#"{"model": "alias", "stream": true, "messages": [{"role": "user", "content": "hi"}]}
        "#;
        let raw = RawChat::read(Bytes::from(body)).expect("read without a tree");
        assert!(raw.stream);
        let sent: Value = serde_json::from_slice(&ChatBody::spliced(&raw).for_model("u")).unwrap();
        assert_eq!(sent, tree_bytes(body, "u").0);
        assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn any_other_body_is_left_to_the_tree() {
        for body in [
            r#"{"model": "a", "stream": true, "stream_options": {"include_usage": false}, "messages": [{}]}"#,
            r#"{"model": "a", "stream_options": null, "messages": [{}]}"#,
            r#"{"model": "a\u0062", "messages": [{}]}"#,
            r#"{"model": "", "messages": [{}]}"#,
            r#"{"model": 7, "messages": [{}]}"#,
            r#"{"messages": [{}]}"#,
            r#"{"model": "a", "messages": []}"#,
            r#"{"model": "a", "messages": {}}"#,
            r#"{"model": "a", "model": "b", "messages": [{}]}"#,
            r#"{"model": "a", "messages": [{}], "messages": [{}]}"#,
            r#"{"model": "a", "stream": "yes", "messages": [{}]}"#,
            r#"{"model": "a", "messages": ["hi"]}"#,
            r#"{"model": "a", "messages": [{"content": 5}]}"#,
            r#"{"model": "a", "messages": [{}]} x"#,
            r#"[{"model": "a"}]"#,
            // What a tree refuses in a field the reader skips.
            r#"{"model": "a", "messages": [{"role": "\ud800"}]}"#,
            r#"{"model": "a", "messages": [{}], "temperature": 1e400}"#,
            // The array forms a derived reader takes, at every level.
            r#"["a", [{}]]"#,
            r#"{"model": "a", "messages": [[null, null]]}"#,
            r#"{"model": "a", "messages": [{"content": [["x"]]}]}"#,
            r#"{"model": "a", "messages": [{"tool_calls": [[{"arguments": "x"}]]}]}"#,
            r#"{"model": "a", "messages": [{"tool_calls": [{"function": ["x"]}]}]}"#,
            "",
        ] {
            assert!(RawChat::read(Bytes::from(body)).is_none(), "{body}");
        }
        let deep = format!(
            r#"{{"model": "a", "messages": [{{}}], "x": {}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(RawChat::read(Bytes::from(deep)).is_none());
        let not_utf8 = b"{\"model\": \"a\", \"messages\": [{\"role\": \"\xff\"}]}";
        assert!(RawChat::read(Bytes::from_static(not_utf8)).is_none());
    }
}
