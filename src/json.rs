//! Parsing of JSON input into typed values, with errors that name the field.

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

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
}
