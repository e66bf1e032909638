//! Parsing of JSON input into typed values, with errors that name the field.

use std::marker::PhantomData;

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result};

/// For `deserialize_with`: a field that is present, even as `null`
/// (`Option<&RawValue>` alone reads `null` as absent).
pub fn present<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<&'de serde_json::value::RawValue>, D::Error> {
    Deserialize::deserialize(d).map(Some)
}

/// The longest run of digits [`tree_would_read`] lets through: any number
/// with at most this many digits before an exponent of at most two digits
/// is a finite `f64`.
pub const MAX_DIGIT_RUN: usize = 200;

/// Whether JSON text that serde has skipped through (which checks only its
/// syntax) would also be read into a tree: valid UTF-8, no `\uD800`–`\uDFFF`
/// escape (a lone one fails a tree; pairs are left to it too), nested at
/// most 127 deep (serde's limit is 128 and is not applied while skipping),
/// no run of more than [`MAX_DIGIT_RUN`] digits and no exponent of more than
/// two digits (numbers a tree could find out of range), and no key that is
/// serde_json's raw-value token (a tree reads an object whose first key is
/// [`RAW_VALUE_TOKEN`] as the JSON text its value holds) or has an escape
/// (it could spell the token). False leaves the text to a tree, which reads
/// it or says what is wrong.
pub fn tree_would_read(text: &[u8]) -> bool {
    if std::str::from_utf8(text).is_err() {
        return false;
    }
    let (mut depth, mut run, mut exponent) = (0usize, 0usize, false);
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                // To the closing quote, escape by escape: a chat body is
                // mostly text, and a byte at a time was a third of reading one.
                i += 1;
                let (start, mut escaped) = (i, false);
                loop {
                    let rest = text.get(i..).unwrap_or_default();
                    let Some(at) = memchr::memchr2(b'"', b'\\', rest) else {
                        i = text.len();
                        break;
                    };
                    i += at;
                    if text[i] == b'"' {
                        break;
                    }
                    if is_surrogate_escape(&text[i + 1..]) {
                        return false;
                    }
                    escaped = true;
                    i += 2;
                }
                let after = text.get(i + 1..).unwrap_or_default();
                let key = after.iter().find(|&&b| !is_ws(b)) == Some(&b':');
                if key && (escaped || text.get(start..i) == Some(RAW_VALUE_TOKEN)) {
                    return false;
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > 127 {
                    return false;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'0'..=b'9' => {
                run += 1;
                if run > MAX_DIGIT_RUN || (exponent && run > 2) {
                    return false;
                }
                i += 1;
                continue;
            }
            b'e' | b'E' => exponent = true,
            b'+' | b'-' => {}
            _ => exponent = false,
        }
        run = 0;
        i += 1;
    }
    true
}

/// JSON's white space (not `is_ascii_whitespace`, which takes a form feed too).
pub fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The key by which serde_json's tree reader (with its `raw_value` feature)
/// takes an object for embedded JSON text.
pub const RAW_VALUE_TOKEN: &[u8] = b"$serde_json::private::RawValue";

/// Whether the text after a backslash escapes a surrogate (`uD800`–`uDFFF`).
fn is_surrogate_escape(after: &[u8]) -> bool {
    after.first() == Some(&b'u')
        && matches!(after.get(1), Some(b'd' | b'D'))
        && matches!(after.get(2), Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'))
}

/// Whether the inside of a JSON array that serde has skipped through is
/// only plain numbers a tree reads as finite floats: digits, signs, points,
/// exponents, commas and white space, with the number rules of
/// [`tree_would_read`]. One pass where a check of the bytes and then
/// [`tree_would_read`] took two (an embeddings answer is mostly numbers).
pub fn plain_finite_numbers(inner: &[u8]) -> bool {
    let (mut run, mut exponent) = (0usize, false);
    for &b in inner {
        match b {
            b'0'..=b'9' => {
                run += 1;
                if run > MAX_DIGIT_RUN || (exponent && run > 2) {
                    return false;
                }
                continue;
            }
            b'e' | b'E' => exponent = true,
            b'+' | b'-' => {}
            b'.' | b',' | b' ' | b'\t' | b'\n' | b'\r' => exponent = false,
            _ => return false,
        }
        run = 0;
    }
    true
}

/// `T` read only from a JSON object. A derived `Deserialize` also takes an
/// array of the fields in order (`["a", [1]]` for `{model, messages}`),
/// which a reader that stands in for a tree's `get("field")` must refuse.
#[derive(Debug)]
pub struct MapOnly<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = MapOnly<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<MapOnly<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(MapOnly)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// Parses JSON into `T`; a failure names the field that was wrong.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(Error::validation(
            "body",
            "The request body is empty; send a JSON object.",
        ));
    }
    // The common case first: path tracking costs an allocation per object
    // key (a fifth of agent chat's CPU went to parsing its body). Only a
    // body that fails is parsed again to name the field.
    if let Ok(value) = serde_json::from_slice::<T>(bytes) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let what = match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                "The body is not valid JSON"
            }
            _ => "The body does not have the expected shape",
        };
        let param = if path == "." {
            "body".to_string()
        } else {
            path
        };
        // serde messages name types and fields, never the values sent.
        Error::validation(param, format!("{what}: {inner}."))
    })?;
    de.end().map_err(|_| {
        Error::validation(
            "body",
            "The body has trailing characters after the JSON value.",
        )
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two passes [`plain_finite_numbers`] stands for.
    fn plain_then_tree(inner: &[u8]) -> bool {
        inner.iter().all(|b| b"0123456789eE+-., \t\n\r".contains(b)) && tree_would_read(inner)
    }

    #[test]
    fn plain_finite_numbers_agrees_with_a_byte_check_then_tree_would_read() {
        let long = "9".repeat(MAX_DIGIT_RUN);
        let longer = "9".repeat(MAX_DIGIT_RUN + 1);
        let mut cases: Vec<String> = [
            "",
            "1",
            "-0.5, 2e10,3E-07",
            " 1 ,\t2\n",
            "1e100",
            "1e1000",
            "1.5e+99",
            "1e+999",
            "1e-5.5",
            "1e5 5",
            "\"1\"",
            "[1]",
            "1,null",
            "x",
            "1\u{e9}",
            "1e+1.11111",
        ]
        .iter()
        .map(|c| c.to_string())
        .collect();
        cases.push(long.clone());
        cases.push(longer);
        cases.push(format!("0.{long}"));
        cases.push(format!("1e2{long}"));
        // Every short string over the alphabet that matters, and one byte past it.
        let alphabet = b"09eE+-., x";
        let mut strings = vec![Vec::new()];
        for _ in 0..4 {
            strings = strings
                .iter()
                .flat_map(|s| {
                    alphabet.iter().map(move |c| {
                        let mut s = s.clone();
                        s.push(*c);
                        s
                    })
                })
                .collect();
            for s in &strings {
                assert_eq!(
                    plain_finite_numbers(s),
                    plain_then_tree(s),
                    "{}",
                    String::from_utf8_lossy(s)
                );
            }
        }
        for c in cases {
            assert_eq!(
                plain_finite_numbers(c.as_bytes()),
                plain_then_tree(c.as_bytes()),
                "{c}"
            );
        }
        assert!(plain_finite_numbers(b"1.5, -2e10"));
        assert!(!plain_finite_numbers(b"1e100"));
        assert!(!plain_finite_numbers(format!("1{long}").as_bytes()));
    }

    /// [`tree_would_read`] a byte at a time, as it was before strings were
    /// skipped with `memchr`.
    fn byte_by_byte(text: &[u8]) -> bool {
        if std::str::from_utf8(text).is_err() {
            return false;
        }
        let (mut depth, mut run, mut exponent) = (0usize, 0usize, false);
        let mut i = 0;
        while i < text.len() {
            match text[i] {
                b'"' => {
                    i += 1;
                    while i < text.len() && text[i] != b'"' {
                        if text[i] == b'\\' {
                            i += 1;
                            if is_surrogate_escape(&text[i..]) {
                                return false;
                            }
                        }
                        i += 1;
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    if depth > 127 {
                        return false;
                    }
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                b'0'..=b'9' => {
                    run += 1;
                    if run > MAX_DIGIT_RUN || (exponent && run > 2) {
                        return false;
                    }
                    i += 1;
                    continue;
                }
                b'e' | b'E' => exponent = true,
                b'+' | b'-' => {}
                _ => exponent = false,
            }
            run = 0;
            i += 1;
        }
        true
    }

    #[test]
    fn a_key_that_is_or_could_spell_the_raw_value_token_is_left_to_a_tree() {
        let token = std::str::from_utf8(RAW_VALUE_TOKEN).unwrap();
        for (text, would) in [
            (format!(r#"{{"a": [{{"{token}": "[1, 2]"}}]}}"#), false),
            (
                format!(r#"{{"a": [{{"x": 1, "{token}" : "[1, 2]"}}]}}"#),
                false,
            ),
            (format!(r#"{{"a": "{token}", "b": ["{token}"]}}"#), true),
            (
                r#"{"a": [{"\u0024serde_json::private::RawValue": "[1]"}]}"#.to_string(),
                false,
            ),
            (r#"{"a\n": 1}"#.to_string(), false),
            (r#"{"a": "line\nbreak"}"#.to_string(), true),
        ] {
            assert_eq!(tree_would_read(text.as_bytes()), would, "{text}");
        }
        // What a tree does with the token: reads the string as JSON text.
        let tree: serde_json::Value =
            serde_json::from_str(&format!(r#"{{"a": {{"{token}": "[1, 2]"}}}}"#)).unwrap();
        assert_eq!(tree, serde_json::json!({"a": [1, 2]}));
    }

    #[test]
    fn tree_would_read_skips_strings_as_a_byte_at_a_time_did() {
        // Every string of up to 5 bytes over what matters in and around
        // strings, and those bytes around a long string.
        let alphabet = b"\"\\ud8Dx1e[";
        let mut strings = vec![Vec::new()];
        for _ in 0..5 {
            strings = strings
                .iter()
                .flat_map(|s| {
                    alphabet.iter().map(move |c| {
                        let mut s = s.clone();
                        s.push(*c);
                        s
                    })
                })
                .collect();
            for s in &strings {
                assert_eq!(
                    tree_would_read(s),
                    byte_by_byte(s),
                    "{}",
                    String::from_utf8_lossy(s)
                );
                let long = [&b"\""[..], &[b'a'; 100], s, &[b'b'; 100], s].concat();
                assert_eq!(
                    tree_would_read(&long),
                    byte_by_byte(&long),
                    "{}",
                    String::from_utf8_lossy(&long)
                );
            }
        }
        assert!(!tree_would_read(br#"{"a": "x\ud800"}"#));
        assert!(tree_would_read(br#"{"a": "x\\ud800"}"#));
        assert!(!tree_would_read(
            format!(r#"{{"a": "{}", "b": 1e400}}"#, "y".repeat(300)).as_bytes()
        ));
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Shape {
        name: String,
        inner: Inner,
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        count: u32,
    }

    #[test]
    fn a_good_body_parses_and_a_wrong_field_is_named_in_the_error() {
        let ok: Shape = parse_json(br#"{"name":"a","inner":{"count":3}}"#).unwrap();
        assert_eq!(ok.inner.count, 3);
        let err = parse_json::<Shape>(br#"{"name":"a","inner":{"count":"three"}}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("inner.count"), "{err:?}");
        assert!(err
            .message
            .starts_with("The body does not have the expected shape"));
    }

    #[test]
    fn bad_json_empty_bodies_and_trailing_characters_are_refused_with_their_reason() {
        let err = parse_json::<serde_json::Value>(b"{\"a\":").unwrap_err();
        assert!(
            err.message.starts_with("The body is not valid JSON"),
            "{err:?}"
        );
        let err = parse_json::<serde_json::Value>(b"  \n").unwrap_err();
        assert!(err.message.contains("empty"), "{err:?}");
        let err = parse_json::<serde_json::Value>(b"{} x").unwrap_err();
        assert!(err.message.contains("trailing"), "{err:?}");
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Pair<'a> {
        #[serde(borrow)]
        a: &'a str,
        b: Option<u8>,
    }

    #[test]
    fn map_only_reads_objects_and_refuses_the_array_form_a_derive_accepts() {
        let ok: MapOnly<Pair> = serde_json::from_str(r#"{"b": 1, "a": "x"}"#).unwrap();
        assert_eq!(ok.0, Pair { a: "x", b: Some(1) });
        // What a derived reader alone takes.
        assert!(serde_json::from_str::<Pair>(r#"["x", 1]"#).is_ok());
        assert!(serde_json::from_str::<MapOnly<Pair>>(r#"["x", 1]"#).is_err());
        assert!(serde_json::from_str::<MapOnly<Pair>>(r#"{"a": "x", "a": "y"}"#).is_err());
    }

    #[test]
    fn text_a_tree_would_not_read_is_told_apart() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for (text, reads) in [
            (
                r#"{"a": [1.5e-05, -2, "x\"y\\", {"b": null}], "c": "\u00e9"}"#.to_string(),
                true,
            ),
            (deep(127), true),
            (deep(128), false),
            (r#"{"a": "\ud800"}"#.to_string(), false),
            (r#"{"a": "\uDBFF\uDC00"}"#.to_string(), false),
            (r#"{"a": "\\ud800"}"#.to_string(), true),
            (r#"{"a": 1e400}"#.to_string(), false),
            (r#"{"a": 1e99, "b": "1e400"}"#.to_string(), true),
            (format!(r#"{{"a": 1{}}}"#, "0".repeat(MAX_DIGIT_RUN)), false),
            (
                format!(r#"{{"a": 1{}}}"#, "0".repeat(MAX_DIGIT_RUN - 1)),
                true,
            ),
        ] {
            assert_eq!(tree_would_read(text.as_bytes()), reads, "{text}");
            if reads {
                assert!(
                    serde_json::from_str::<serde_json::Value>(&text).is_ok(),
                    "{text}"
                );
            }
        }
        assert!(!tree_would_read(b"{\"a\": \"\xff\"}"));
    }
}
