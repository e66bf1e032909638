//! The body a native attempt sends (a Messages pass-through, a Responses
//! request to a native upstream): the client's bytes with only `model`
//! replaced, or a tree the gateway changed.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::Error;

/// The body a native attempt sends, `model` aside.
pub enum NativeBody {
    /// The client's bytes as they came, and where its `model` is in them:
    /// only that is replaced (no tree written out again: Claude Code's
    /// bodies run to hundreds of kilobytes, and every byte of the rest,
    /// number formats and member order included, reaches the upstream).
    Client {
        bytes: Bytes,
        model_at: std::ops::Range<usize>,
    },
    /// A body the gateway changed (the agent route's rules), written from
    /// its tree.
    Tree(Map<String, Value>),
}

impl NativeBody {
    /// The client's bytes when their `model` can be found (a string member
    /// written once), else `tree`.
    pub fn of(bytes: Bytes, tree: impl FnOnce() -> Map<String, Value>) -> NativeBody {
        match crate::wire::messages::passed::model_at(&bytes) {
            Some(model_at) => NativeBody::Client { bytes, model_at },
            None => NativeBody::Tree(tree()),
        }
    }

    pub fn for_model(&mut self, upstream_model: &str) -> Result<Bytes, Error> {
        match self {
            NativeBody::Client { bytes, model_at } => {
                let mut out = Vec::with_capacity(bytes.len() + upstream_model.len());
                out.extend_from_slice(&bytes[..model_at.start]);
                crate::wire::sse::json_str(&mut out, upstream_model);
                out.extend_from_slice(&bytes[model_at.end..]);
                Ok(out.into())
            }
            NativeBody::Tree(body) => {
                let client = body.insert("model".into(), Value::String(upstream_model.to_string()));
                let out = serde_json::to_vec(body);
                if let Some(m) = client {
                    body.insert("model".into(), m);
                }
                Ok(out.map_err(Error::internal)?.into())
            }
        }
    }
}
