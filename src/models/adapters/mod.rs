//! Upstream adapters: one per provider type (`openai`, `tei`, `cohere`), each
//! turning our request into the upstream's wire format and its answer back.
//! Adapters do no I/O, so each is tested on plain values; the call itself
//! (key, deadline, error mapping) is [`crate::models::upstream`].
//!
//! - Embeddings and rerank ([`Adapter`]): the answer comes back in a neutral
//!   form that [`crate::models::retrieval`] shapes into the contract's answer.
//! - Chat ([`ChatAdapter`]): the relay ([`crate::proxy::chat`]) speaks OpenAI
//!   chat; an adapter translates a chat request into its upstream's dialect
//!   and the answer (whole, or event by event) back into chat. A provider
//!   type serves chat when [`chat_adapter`] has an adapter for it; adding a
//!   dialect is adding an adapter, the relay never learns dialects.

pub mod anthropic;
pub mod cohere;
pub mod openai;
pub mod tei;

use base64::Engine as _;
use bytes::Bytes;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::error::Error;
use crate::models::requests::{EmbedRequest, RerankRequest};
use crate::models::ProviderType;
use crate::wire::sse::SseEvent;

/// A request for the upstream: a path under the provider's `base_url`, and a JSON body.
#[derive(Debug)]
pub struct UpstreamCall {
    pub path: &'static str,
    pub body: Vec<u8>,
}

impl UpstreamCall {
    pub fn json<T: Serialize>(path: &'static str, body: &T) -> Result<Self, serde_json::Error> {
        Ok(UpstreamCall {
            path,
            body: serde_json::to_vec(body)?,
        })
    }
}

/// One embedding as an upstream gave it.
#[derive(Clone, Debug, PartialEq)]
pub enum Vector {
    /// Numbers from JSON (kept as f64 so they go out exactly as they came).
    Json(Vec<f64>),
    /// A JSON array of numbers as the upstream wrote it (see [`NumbersText`]).
    Text(NumbersText),
    /// Numbers decoded from base64.
    F32(Vec<f32>),
    /// Base64 of little-endian float32, as the upstream sent it.
    Base64(String),
}

/// A JSON array of plain numbers, kept as the upstream's text: a vector of
/// a thousand numbers read into floats and written out again cost more than
/// the rest of an embeddings request.
#[derive(Clone, Debug)]
pub struct NumbersText(Box<serde_json::value::RawValue>);

impl NumbersText {
    /// `raw` when it is an array of numbers that read as finite floats: only
    /// digits, signs, points, commas and white space between its brackets (a
    /// valid JSON value with no other byte can be nothing else), and numbers
    /// a tree reads without finding them out of range
    /// ([`crate::wire::json::plain_finite_numbers`]).
    pub fn new(raw: &serde_json::value::RawValue) -> Option<NumbersText> {
        let inner = raw.get().strip_prefix('[')?.strip_suffix(']')?;
        crate::wire::json::plain_finite_numbers(inner.as_bytes())
            .then(|| NumbersText(raw.to_owned()))
    }

    /// The numbers as floats (finite: see [`NumbersText::new`]).
    pub fn floats(&self) -> Result<Vec<f64>, String> {
        serde_json::from_str(self.0.get())
            .map_err(|_| "an embedding is not an array of numbers".to_string())
    }
}

impl PartialEq for NumbersText {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Vector {
    /// Base64 of little-endian float32.
    pub fn to_base64(&self) -> String {
        let mut bytes = Vec::new();
        match self {
            Vector::Base64(s) => return s.clone(),
            // Finite numbers, checked when it was made.
            Vector::Text(t) => return Vector::Json(t.floats().unwrap_or_default()).to_base64(),
            Vector::Json(v) => {
                bytes.reserve(v.len() * 4);
                for x in v {
                    bytes.extend_from_slice(&(*x as f32).to_le_bytes());
                }
            }
            Vector::F32(v) => {
                bytes.reserve(v.len() * 4);
                for x in v {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// Numbers, decoding base64 when needed.
    pub fn into_floats(self) -> Result<Vector, String> {
        match self {
            Vector::Base64(s) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s.as_bytes())
                    .map_err(|_| "an embedding is not valid base64".to_string())?;
                if bytes.len() % 4 != 0 {
                    return Err("a base64 embedding is not a whole number of float32".into());
                }
                Ok(Vector::F32(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                ))
            }
            v => Ok(v),
        }
    }
}

impl Serialize for Vector {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Vector::Json(v) => v.serialize(s),
            Vector::Text(t) => t.0.serialize(s),
            Vector::F32(v) => v.serialize(s),
            Vector::Base64(b) => b.serialize(s),
        }
    }
}

/// An embeddings answer: one vector per input, in input order.
#[derive(Debug)]
pub struct EmbedAnswer {
    pub vectors: Vec<Vector>,
    /// What the upstream reported, if it did.
    pub prompt_tokens: Option<i64>,
}

/// A rerank answer: (document index, score), in any order.
#[derive(Debug)]
pub struct RerankAnswer {
    pub scores: Vec<(usize, f64)>,
    pub prompt_tokens: Option<i64>,
}

/// One upstream dialect for embeddings and rerank. `Err` from a parser is a
/// sentence saying what was wrong with the answer.
pub trait Adapter: Sync {
    fn embed_call(
        &self,
        upstream_model: &str,
        req: &EmbedRequest,
    ) -> Result<UpstreamCall, serde_json::Error>;
    fn parse_embed(&self, answer: Value, inputs: usize) -> Result<EmbedAnswer, String>;
    /// [`Adapter::parse_embed`] of the answer's bytes; an adapter may read
    /// them without a tree.
    fn parse_embed_bytes(&self, answer: &[u8], inputs: usize) -> Result<EmbedAnswer, String> {
        self.parse_embed(json_answer(answer)?, inputs)
    }
    fn rerank_call(
        &self,
        upstream_model: &str,
        req: &RerankRequest,
    ) -> Result<UpstreamCall, serde_json::Error>;
    fn parse_rerank(&self, answer: Value, documents: usize) -> Result<RerankAnswer, String>;
    /// [`Adapter::parse_rerank`] of the answer's bytes; an adapter may read
    /// them without a tree.
    fn parse_rerank_bytes(&self, answer: &[u8], documents: usize) -> Result<RerankAnswer, String> {
        self.parse_rerank(json_answer(answer)?, documents)
    }
}

/// One upstream dialect for chat completions. The relay hands an adapter the
/// request as OpenAI chat JSON (the upstream's model already in `model`) and
/// gets back OpenAI chat: a plain answer's bytes, and a stream's events. The
/// defaults are OpenAI's own dialect, which needs no translation (the relay
/// then keeps its splicing fast paths).
pub trait ChatAdapter: Sync {
    /// The path under the provider's `base_url`.
    fn chat_path(&self) -> &'static str;

    /// The upstream's dialect, as the access line names it (`upstream_api`).
    fn upstream_api(&self) -> &'static str {
        "chat"
    }

    /// The upstream's request body for a chat request (`chat`: OpenAI chat
    /// JSON with the upstream's model) to a target of `model`.
    fn chat_request(&self, chat: Bytes, model: &crate::models::Model) -> Result<Bytes, Error> {
        let _ = model;
        Ok(chat)
    }

    /// A plain answer of the upstream as an OpenAI chat answer; `Err` says
    /// what was wrong with it.
    fn chat_answer(&self, answer: Bytes) -> Result<Bytes, String> {
        Ok(answer)
    }

    /// A translator of the upstream's stream events into chat chunks, or
    /// `None` when the events are chat chunks already.
    fn chat_events(&self) -> Option<Box<dyn ChatEvents>> {
        None
    }
}

/// Turns one stream's upstream events, in order, into OpenAI chat events
/// (`data:` chunks, and `[DONE]` at the end).
pub trait ChatEvents: Send {
    /// The chat events for one upstream event (none, one or several); `Err`
    /// says what was wrong with it.
    fn translate(&mut self, event: SseEvent) -> Result<Vec<SseEvent>, String>;
}

/// The chat adapter of a provider type; `None` for types that do not serve
/// chat completions.
pub fn chat_adapter(kind: ProviderType) -> Option<&'static dyn ChatAdapter> {
    match kind {
        ProviderType::Openai => Some(&openai::OpenAi),
        ProviderType::Anthropic => Some(&anthropic::Anthropic),
        ProviderType::Tei | ProviderType::Cohere => None,
    }
}

/// The embeddings and rerank adapter of a provider type; `None` for types
/// that serve chat only (`anthropic`: such targets are refused when saved).
pub fn adapter(kind: ProviderType) -> Option<&'static dyn Adapter> {
    match kind {
        ProviderType::Openai => Some(&openai::OpenAi),
        ProviderType::Tei => Some(&tei::Tei),
        ProviderType::Cohere => Some(&cohere::Cohere),
        ProviderType::Anthropic => None,
    }
}

/// A JSON array of numbers.
/// An answer's bytes as JSON.
pub fn json_answer(answer: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(answer).map_err(|_| "it is not JSON".to_string())
}

pub(crate) fn numbers(v: &Value) -> Result<Vec<f64>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| "an embedding is not an array of numbers".to_string())?;
    arr.iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| "an embedding holds something that is not a number".to_string())
        })
        .collect()
}

/// A list of embeddings, each an array of numbers; exactly `n` of them.
pub(crate) fn vectors_in_order(v: &Value, n: usize) -> Result<Vec<Vector>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| "the embeddings are not a list".to_string())?;
    if arr.len() != n {
        return Err(format!("{} embeddings for {n} inputs", arr.len()));
    }
    arr.iter().map(|x| numbers(x).map(Vector::Json)).collect()
}

/// Puts indexed vectors in order; every index in `0..n` exactly once.
pub(crate) fn order_by_index(items: Vec<(usize, Vector)>, n: usize) -> Result<Vec<Vector>, String> {
    if items.len() != n {
        return Err(format!("{} embeddings for {n} inputs", items.len()));
    }
    let mut slots: Vec<Option<Vector>> = vec![None; n];
    for (i, v) in items {
        match slots.get_mut(i) {
            Some(slot @ None) => *slot = Some(v),
            Some(Some(_)) => return Err(format!("embedding index {i} comes twice")),
            None => return Err(format!("embedding index {i} is out of range")),
        }
    }
    slots
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| "an embedding is missing".to_string())
}

/// Rerank results: objects with an `index` below `n` and a score under one of `score_keys`.
pub(crate) fn scores(
    v: &Value,
    n: usize,
    score_keys: &[&str],
) -> Result<Vec<(usize, f64)>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| "the results are not a list".to_string())?;
    arr.iter()
        .map(|r| {
            let index = r
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .filter(|i| *i < n)
                .ok_or_else(|| "a result has no valid document index".to_string())?;
            let score = score_keys
                .iter()
                .find_map(|k| r.get(*k).and_then(Value::as_f64))
                .ok_or_else(|| "a result has no score".to_string())?;
            Ok((index, score))
        })
        .collect()
}

pub(crate) fn int_at(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_i64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base64_is_little_endian_float32_and_round_trips() {
        let v = Vector::Json(vec![1.0, -2.5]);
        let b = v.to_base64();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&b)
            .unwrap();
        assert_eq!(
            bytes,
            [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat()
        );
        assert_eq!(
            Vector::Base64(b).into_floats().unwrap(),
            Vector::F32(vec![1.0, -2.5])
        );
        assert!(Vector::Base64("AAA".into()).into_floats().is_err());
        assert!(Vector::Base64("AAAAAAA=".into()).into_floats().is_err());
    }

    #[test]
    fn indexed_vectors_must_cover_every_input_once() {
        let v = |x: f64| Vector::Json(vec![x]);
        assert_eq!(
            order_by_index(vec![(1, v(1.0)), (0, v(0.0))], 2).unwrap(),
            vec![v(0.0), v(1.0)]
        );
        assert!(order_by_index(vec![(0, v(0.0)), (0, v(1.0))], 2).is_err());
        assert!(order_by_index(vec![(0, v(0.0)), (2, v(1.0))], 2).is_err());
        assert!(order_by_index(vec![(0, v(0.0))], 2).is_err());
    }

    #[test]
    fn scores_need_an_index_in_range_and_a_number() {
        let r = json!([{"index": 1, "score": 0.5}, {"index": 0, "relevance_score": 0.25}]);
        assert_eq!(
            scores(&r, 2, &["relevance_score", "score"]).unwrap(),
            vec![(1, 0.5), (0, 0.25)]
        );
        assert!(scores(&json!([{"index": 2, "score": 0.5}]), 2, &["score"]).is_err());
        assert!(scores(&json!([{"index": 0}]), 2, &["score"]).is_err());
        assert!(scores(&json!({"index": 0}), 2, &["score"]).is_err());
    }
}
