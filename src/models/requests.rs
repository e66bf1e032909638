//! The checked bodies of `/v1/embeddings` and `/v1/rerank`: parsed once, so
//! the adapters and the relay see only valid requests.

use serde_json::{Map, Value};

use crate::error::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

impl Encoding {
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Float => "float",
            Encoding::Base64 => "base64",
        }
    }
}

/// A checked `/v1/embeddings` body.
#[derive(Clone, Debug)]
pub struct EmbedRequest {
    pub inputs: Vec<String>,
    /// `input` was one string (not a list).
    pub single: bool,
    /// As the client sent it; absent means float.
    pub encoding_format: Option<Encoding>,
    pub dimensions: Option<u64>,
    pub user: Option<String>,
    /// Fields the gateway does not know (passed to OpenAI-compatible upstreams).
    pub extra: Map<String, Value>,
}

/// A checked `/v1/rerank` body.
#[derive(Clone, Debug)]
pub struct RerankRequest {
    pub query: String,
    /// The client's texts (from strings or `{"text"}` objects).
    pub documents: Vec<String>,
    pub top_n: Option<u64>,
    pub return_documents: bool,
    /// Fields the gateway does not know (passed to OpenAI-compatible upstreams).
    pub extra: Map<String, Value>,
}

impl EmbedRequest {
    /// Checks the body (its `model` was handled by the caller).
    pub fn from_body(mut body: Map<String, Value>) -> Result<EmbedRequest, Error> {
        body.remove("model");
        let bad_input = |m: &str| Error::validation("input", m);
        let (inputs, single) = match body.remove("input") {
            Some(Value::String(s)) if s.is_empty() => {
                return Err(bad_input("'input' must not be empty."))
            }
            Some(Value::String(s)) => (vec![s], true),
            Some(Value::Array(a)) if a.is_empty() => {
                return Err(bad_input("'input' must not be an empty list."))
            }
            Some(Value::Array(a)) => {
                let mut inputs = Vec::with_capacity(a.len());
                for (i, v) in a.into_iter().enumerate() {
                    match v {
                        Value::String(s) if !s.is_empty() => inputs.push(s),
                        Value::String(_) => {
                            return Err(bad_input(&format!("'input' item {i} is empty.")))
                        }
                        _ => {
                            return Err(bad_input(&format!(
                                "'input' must be a string or a list of strings; item {i} is not a string."
                            )))
                        }
                    }
                }
                (inputs, false)
            }
            None | Some(Value::Null) => {
                return Err(bad_input(
                    "'input' is required: a string or a list of strings.",
                ))
            }
            Some(_) => return Err(bad_input("'input' must be a string or a list of strings.")),
        };
        let encoding_format = match body.remove("encoding_format") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "float" => Some(Encoding::Float),
            Some(Value::String(s)) if s == "base64" => Some(Encoding::Base64),
            Some(_) => {
                return Err(Error::validation(
                    "encoding_format",
                    "'encoding_format' must be \"float\" or \"base64\".",
                ))
            }
        };
        let dimensions = match body.remove("dimensions") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|d| *d >= 1).ok_or_else(|| {
                Error::validation(
                    "dimensions",
                    "'dimensions' must be an integer of at least 1.",
                )
            })?),
        };
        let user = match body.remove("user") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(Error::validation("user", "'user' must be a string.")),
        };
        Ok(EmbedRequest {
            inputs,
            single,
            encoding_format,
            dimensions,
            user,
            extra: body,
        })
    }
}

impl RerankRequest {
    /// Checks the body (its `model` was handled by the caller).
    pub fn from_body(mut body: Map<String, Value>) -> Result<RerankRequest, Error> {
        body.remove("model");
        let query = match body.remove("query") {
            Some(Value::String(q)) if q.trim().is_empty() => {
                return Err(Error::validation("query", "'query' must not be empty."))
            }
            Some(Value::String(q)) => q,
            None | Some(Value::Null) => {
                return Err(Error::validation("query", "'query' is required."))
            }
            Some(_) => return Err(Error::validation("query", "'query' must be a string.")),
        };
        let bad_docs = |m: String| Error::validation("documents", m);
        let documents = match body.remove("documents") {
            Some(Value::Array(a)) if a.is_empty() => {
                return Err(bad_docs("'documents' must not be an empty list.".into()))
            }
            Some(Value::Array(a)) => {
                let mut docs = Vec::with_capacity(a.len());
                for (i, d) in a.into_iter().enumerate() {
                    match d {
                        Value::String(s) => docs.push(s),
                        Value::Object(mut o) => match o.remove("text") {
                            Some(Value::String(s)) => docs.push(s),
                            _ => return Err(bad_docs(format!(
                                "Document {i} is an object without a 'text' string."
                            ))),
                        },
                        _ => {
                            return Err(bad_docs(format!(
                                "Each document must be a string or {{\"text\": string}}; document {i} is neither."
                            )))
                        }
                    }
                }
                docs
            }
            None | Some(Value::Null) => {
                return Err(bad_docs(
                    "'documents' is required: a list of strings.".into(),
                ))
            }
            Some(_) => return Err(bad_docs("'documents' must be a list.".into())),
        };
        let top_n = match body.remove("top_n") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                Error::validation("top_n", "'top_n' must be an integer of at least 1.")
            })?),
        };
        let return_documents = match body.remove("return_documents") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                return Err(Error::validation(
                    "return_documents",
                    "'return_documents' must be true or false.",
                ))
            }
        };
        Ok(RerankRequest {
            query,
            documents,
            top_n,
            return_documents,
            extra: body,
        })
    }
}
