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
