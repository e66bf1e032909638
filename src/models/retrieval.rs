//! Embeddings and rerank: the request rules, the call through the provider's
//! adapter, and the contract's answer, whatever the upstream spoke.
//!
//! Token usage is the upstream's when it reports it (OpenAI-compatible
//! `usage`, Cohere `meta.billed_units.input_tokens`), else an estimate of one
//! token per four characters, rounded up, per text ([`estimate_tokens`]).
//! For rerank the estimate counts the query once per document (a cross-encoder
//! reads each query–document pair) plus every document.

use serde::Serialize;

use crate::error::Error;
use bytes::Bytes;
use serde_json::Value;

use crate::models::adapters::{self, Adapter, UpstreamCall, Vector};
use crate::models::observed::Attempt;
pub use crate::models::requests::{EmbedRequest, Encoding, RerankRequest};
use crate::models::routing::{next_pick, Answered, Failure};
use crate::models::upstream;
use crate::models::upstream::AttemptError;
use crate::models::Model;
use crate::models::ProviderType;
use crate::usage::{estimate_tokens, Tokens};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RetrievalUsage {
    pub prompt_tokens: i64,
    pub total_tokens: i64,
}

impl RetrievalUsage {
    fn of(prompt_tokens: i64) -> Self {
        RetrievalUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct EmbeddingItem {
    pub object: &'static str,
    pub index: usize,
    pub embedding: Vector,
}

#[derive(Debug, Serialize)]
pub struct EmbeddingsResponse {
    pub object: &'static str,
    pub data: Vec<EmbeddingItem>,
    pub model: String,
    pub usage: RetrievalUsage,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DocumentText {
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RerankResult {
    pub index: usize,
    pub relevance_score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<DocumentText>,
}

#[derive(Debug, Serialize)]
pub struct RerankResponse {
    pub id: String,
    pub model: String,
    pub results: Vec<RerankResult>,
    pub usage: RerankUsage,
    pub meta: RerankMeta,
}

/// Rerank's `usage`: `completion_tokens` (always 0) besides the prompt's,
/// for clients that read a rerank answer as Cohere's or Together's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RerankUsage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
}

/// Cohere's `meta` (API version 2, one search unit a request): the Vercel AI
/// SDK's Cohere and Together providers need it to read the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RerankMeta {
    pub api_version: ApiVersion,
    pub billed_units: BilledUnits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ApiVersion {
    pub version: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BilledUnits {
    pub search_units: u32,
}

impl RerankMeta {
    pub const V2: RerankMeta = RerankMeta {
        api_version: ApiVersion { version: "2" },
        billed_units: BilledUnits { search_units: 1 },
    };
}

/// Estimated tokens of embedding inputs.
pub fn estimate_embed_tokens(inputs: &[String]) -> i64 {
    inputs
        .iter()
        .map(|s| estimate_tokens(s.chars().count()))
        .sum()
}

/// Estimated tokens of a rerank: each (query, document) pair.
pub fn estimate_rerank_tokens(query: &str, documents: &[String]) -> i64 {
    let q = estimate_tokens(query.chars().count());
    documents
        .iter()
        .map(|d| q + estimate_tokens(d.chars().count()))
        .sum()
}

/// The vectors in the encoding the client asked for (float by default).
pub fn encode_vectors(
    vectors: Vec<Vector>,
    want: Option<Encoding>,
) -> Result<Vec<EmbeddingItem>, String> {
    vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match want.unwrap_or(Encoding::Float) {
                Encoding::Float => v.into_floats()?,
                Encoding::Base64 => match v {
                    b @ Vector::Base64(_) => b,
                    Vector::Text(t) => Vector::Base64(Vector::Json(t.floats()?).to_base64()),
                    v => Vector::Base64(v.to_base64()),
                },
            };
            Ok(EmbeddingItem {
                object: "embedding",
                index,
                embedding,
            })
        })
        .collect()
}

/// Rerank results: by falling score (ties by document order), each document
/// once, at most `top_n`, with the client's own text unless it said not to.
pub fn shape_results(
    mut scores: Vec<(usize, f64)>,
    documents: Vec<String>,
    top_n: Option<u64>,
    return_documents: bool,
) -> Vec<RerankResult> {
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut texts: Vec<Option<String>> = documents.into_iter().map(Some).collect();
    let limit = top_n
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(scores.len().min(limit));
    for (index, relevance_score) in scores {
        if out.len() >= limit {
            break;
        }
        // Taking the text marks the document as used: duplicates are skipped.
        let Some(text) = texts.get_mut(index).and_then(Option::take) else {
            continue;
        };
        out.push(RerankResult {
            index,
            relevance_score,
            document: return_documents.then_some(DocumentText { text }),
        });
    }
    out
}

/// Calls the model's targets (then its fallbacks) until one gives a usable
/// answer; see [`crate::models::routing`] for which failures move on. The
/// body for each kind of provider and upstream model is built once per
/// request and its bytes reused by later attempts.
async fn routed<T>(
    client: &crate::models::upstream::UpstreamClient,
    model: &Model,
    operation: &'static str,
    build: impl Fn(&dyn Adapter, &str) -> Result<UpstreamCall, serde_json::Error>,
    parse: impl Fn(&dyn Adapter, &[u8]) -> Result<T, String>,
) -> Result<(T, Answered), Error> {
    let chain = model.chain();
    let mut attempts = model.attempts(&chain);
    let mut bodies: Vec<(ProviderType, &str, &'static str, Bytes)> = Vec::new();
    let mut last: Option<Error> = None;
    while let Some(mut pick) = next_pick(&mut attempts) {
        let target = pick.target;
        let Some(adapter) = adapters::adapter(target.provider.kind) else {
            return Err(Error::new(
                crate::error::ErrorKind::Internal,
                "provider_unsupported",
                format!(
                    "The model '{}' runs on an {} provider ('{}'), which serves chat models only.",
                    chain[pick.stage].id,
                    target.provider.kind.as_str(),
                    target.provider.name
                ),
            ));
        };
        let key = (target.provider.kind, target.upstream_model.as_str());
        let (path, body) = match bodies.iter().find(|b| (b.0, b.1) == key) {
            Some(b) => (b.2, b.3.clone()),
            None => {
                let call = build(adapter, &target.upstream_model).map_err(Error::internal)?;
                let body = Bytes::from(call.body);
                bodies.push((key.0, key.1, call.path, body.clone()));
                (call.path, body)
            }
        };
        target.stats.attempt();
        let answered = Answered {
            model: chain[pick.stage].id.clone(),
            provider: target.provider.name.clone(),
            upstream_model: target.upstream_model.clone(),
            attempts: attempts.made(),
        };
        let mut attempt = Attempt::start(operation, &target.provider, &target.upstream_model);
        let sent = upstream::post_for_bytes(client, &target.provider, path, body);
        let result = attempt.scope(sent).await.and_then(|answer| {
            attempt.status(200);
            if attempt.wants_answer() {
                if let Ok(v) = serde_json::from_slice::<Value>(&answer) {
                    attempt.answer(v.get("model"), v.get("usage"));
                }
            }
            parse(adapter, &answer)
                .map_err(|m| AttemptError::new(Failure::BadAnswer, upstream::bad_answer(m)))
        });
        match result {
            Ok(v) => {
                pick.guard.ok();
                return Ok((v, answered));
            }
            Err(e) => {
                attempt.failed(e.failure);
                let error = answered.mark(e.error);
                if !target.failed(&mut pick.guard, e.failure, false).retry {
                    return Err(error);
                }
                last = Some(error);
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::internal("the model has no target")))
}

/// `/v1/embeddings` through the model's targets.
pub async fn embed(
    client: &crate::models::upstream::UpstreamClient,
    model: &Model,
    req: EmbedRequest,
) -> Result<(EmbeddingsResponse, Tokens, Answered), Error> {
    let inputs = req.inputs.len();
    let ((data, reported), answered) = routed(
        client,
        model,
        "embeddings",
        |a, m| a.embed_call(m, &req),
        |a, answer| {
            let parsed = a.parse_embed_bytes(answer, inputs)?;
            let data = encode_vectors(parsed.vectors, req.encoding_format)?;
            Ok((data, parsed.prompt_tokens))
        },
    )
    .await?;
    let estimated_prompt = reported.is_none();
    let prompt = reported.unwrap_or_else(|| estimate_embed_tokens(&req.inputs));
    Ok((
        EmbeddingsResponse {
            object: "list",
            data,
            model: answered.model.clone(),
            usage: RetrievalUsage::of(prompt),
        },
        Tokens {
            prompt,
            estimated: estimated_prompt,
            ..Tokens::default()
        },
        answered,
    ))
}

/// An answer that names its model (`model`): the name a client sent for it
/// may be one of its aliases.
pub trait NamesModel {
    fn set_model(&mut self, name: &str);
}

impl NamesModel for EmbeddingsResponse {
    fn set_model(&mut self, name: &str) {
        self.model = name.to_string();
    }
}

impl NamesModel for RerankResponse {
    fn set_model(&mut self, name: &str) {
        self.model = name.to_string();
    }
}

/// `/v1/rerank` through the model's targets.
pub async fn rerank(
    client: &crate::models::upstream::UpstreamClient,
    model: &Model,
    req: RerankRequest,
) -> Result<(RerankResponse, Tokens, Answered), Error> {
    let documents = req.documents.len();
    let (parsed, answered) = routed(
        client,
        model,
        "rerank",
        |a, m| a.rerank_call(m, &req),
        |a, answer| a.parse_rerank_bytes(answer, documents),
    )
    .await?;
    let estimated_prompt = parsed.prompt_tokens.is_none();
    let prompt = parsed
        .prompt_tokens
        .unwrap_or_else(|| estimate_rerank_tokens(&req.query, &req.documents));
    let results = shape_results(
        parsed.scores,
        req.documents,
        req.top_n,
        req.return_documents,
    );
    Ok((
        RerankResponse {
            id: format!("rerank-{}", uuid::Uuid::new_v4().simple()),
            model: answered.model.clone(),
            results,
            usage: RerankUsage {
                prompt_tokens: prompt,
                completion_tokens: 0,
                total_tokens: prompt,
            },
            meta: RerankMeta::V2,
        },
        Tokens {
            prompt,
            estimated: estimated_prompt,
            ..Tokens::default()
        },
        answered,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::{Map, Value};

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn embed_err(v: Value) -> Option<String> {
        EmbedRequest::from_body(map(v)).err().and_then(|e| {
            assert_eq!(e.code, "validation_error");
            assert_eq!(e.status(), 400);
            e.param
        })
    }

    fn rerank_err(v: Value) -> Option<String> {
        RerankRequest::from_body(map(v)).err().and_then(|e| {
            assert_eq!(e.code, "validation_error");
            e.param
        })
    }

    #[test]
    fn embed_input_must_be_a_non_empty_string_or_list_of_strings() {
        let r = EmbedRequest::from_body(map(json!({"model": "m", "input": "hi", "x": 1}))).unwrap();
        assert_eq!((r.inputs, r.single), (vec!["hi".to_string()], true));
        assert_eq!(r.extra, map(json!({"x": 1})));
        let r = EmbedRequest::from_body(map(json!({"input": ["a", "b"]}))).unwrap();
        assert_eq!((r.inputs.len(), r.single), (2, false));
        for bad in [
            json!({"input": ""}),
            json!({"input": []}),
            json!({"input": ["a", 1]}),
            json!({"input": ["a", ""]}),
            json!({"input": [[1, 2]]}),
            json!({"input": 5}),
            json!({}),
        ] {
            assert_eq!(embed_err(bad.clone()), Some("input".into()), "{bad}");
        }
    }

    #[test]
    fn embed_options_are_checked() {
        let r = EmbedRequest::from_body(map(
            json!({"input": "a", "encoding_format": "base64", "dimensions": 8, "user": "u"}),
        ))
        .unwrap();
        assert_eq!(r.encoding_format, Some(Encoding::Base64));
        assert_eq!(r.dimensions, Some(8));
        assert_eq!(r.user.as_deref(), Some("u"));
        assert_eq!(
            embed_err(json!({"input": "a", "encoding_format": "int8"})),
            Some("encoding_format".into())
        );
        assert_eq!(
            embed_err(json!({"input": "a", "dimensions": 0})),
            Some("dimensions".into())
        );
        assert_eq!(
            embed_err(json!({"input": "a", "dimensions": 1.5})),
            Some("dimensions".into())
        );
        assert_eq!(
            embed_err(json!({"input": "a", "user": 3})),
            Some("user".into())
        );
        assert!(
            embed_err(json!({"input": "a", "dimensions": null, "encoding_format": null})).is_none()
        );
    }

    #[test]
    fn rerank_body_rules() {
        let r = RerankRequest::from_body(map(json!({
            "model": "m", "query": "q", "documents": ["a", {"text": "b", "id": 7}],
            "top_n": 1, "return_documents": false, "extra": true
        })))
        .unwrap();
        assert_eq!(r.documents, vec!["a".to_string(), "b".to_string()]);
        assert_eq!((r.top_n, r.return_documents), (Some(1), false));
        assert_eq!(r.extra, map(json!({"extra": true})));
        let ok = RerankRequest::from_body(map(json!({"query": "q", "documents": ["a"]}))).unwrap();
        assert_eq!((ok.top_n, ok.return_documents), (None, true));

        let docs = json!(["a"]);
        for (bad, param) in [
            (json!({"query": "", "documents": docs}), "query"),
            (json!({"query": "  ", "documents": docs}), "query"),
            (json!({"documents": docs}), "query"),
            (json!({"query": 1, "documents": docs}), "query"),
            (json!({"query": "q", "documents": []}), "documents"),
            (json!({"query": "q"}), "documents"),
            (json!({"query": "q", "documents": "a"}), "documents"),
            (json!({"query": "q", "documents": [1]}), "documents"),
            (
                json!({"query": "q", "documents": [{"txt": "a"}]}),
                "documents",
            ),
            (
                json!({"query": "q", "documents": docs, "top_n": 0}),
                "top_n",
            ),
            (
                json!({"query": "q", "documents": docs, "top_n": -1}),
                "top_n",
            ),
            (
                json!({"query": "q", "documents": docs, "top_n": 1.5}),
                "top_n",
            ),
            (
                json!({"query": "q", "documents": docs, "top_n": "2"}),
                "top_n",
            ),
            (
                json!({"query": "q", "documents": docs, "return_documents": "no"}),
                "return_documents",
            ),
        ] {
            assert_eq!(rerank_err(bad.clone()), Some(param.into()), "{bad}");
        }
    }

    #[test]
    fn results_fall_by_score_are_cut_at_top_n_and_carry_the_clients_text() {
        let docs = || vec!["zero".to_string(), "one".to_string(), "two".to_string()];
        let scores = vec![(0, 0.1), (2, 0.9), (1, 0.5)];
        let r = shape_results(scores.clone(), docs(), None, true);
        assert_eq!(
            r.iter()
                .map(|x| (x.index, x.relevance_score))
                .collect::<Vec<_>>(),
            vec![(2, 0.9), (1, 0.5), (0, 0.1)]
        );
        assert_eq!(r[0].document.as_ref().map(|d| d.text.as_str()), Some("two"));
        let r = shape_results(scores.clone(), docs(), Some(2), false);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|x| x.document.is_none()));
        assert_eq!(shape_results(scores, docs(), Some(10), true).len(), 3);
        // ties keep document order; a repeated index counts once
        let r = shape_results(vec![(1, 0.5), (0, 0.5), (1, 0.4)], docs(), None, true);
        assert_eq!(r.iter().map(|x| x.index).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn vectors_come_out_in_the_asked_encoding() {
        let items = encode_vectors(
            vec![Vector::Json(vec![0.5]), Vector::Base64("AACAPw==".into())],
            None,
        )
        .unwrap();
        assert_eq!(items[0].embedding, Vector::Json(vec![0.5]));
        assert_eq!(items[1].embedding, Vector::F32(vec![1.0]));
        assert_eq!(items[1].index, 1);
        let items = encode_vectors(vec![Vector::Json(vec![1.0])], Some(Encoding::Base64)).unwrap();
        assert_eq!(items[0].embedding, Vector::Base64("AACAPw==".into()));
        assert!(encode_vectors(vec![Vector::Base64("!".into())], Some(Encoding::Float)).is_err());
    }

    #[test]
    fn estimates_are_four_characters_a_token_per_text() {
        assert_eq!(estimate_embed_tokens(&["abcde".into(), "a".into()]), 3);
        assert_eq!(
            estimate_rerank_tokens("abcd", &["a".into(), "abcdefgh".into()]),
            1 + 1 + 1 + 2
        );
    }
}
