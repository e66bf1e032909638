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
}
