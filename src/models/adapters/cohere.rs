//! Cohere v2: `{base_url}/v2/embed` and `{base_url}/v2/rerank`.
//!
//! Embeddings ask for `embedding_types: ["float"]` (the gateway encodes
//! base64 itself), with `input_type` `"search_document"` unless the client
//! sent its own `input_type` string (e.g. `"search_query"`), and
//! `output_dimension` from `dimensions`. Tokens come from
//! `meta.billed_units.input_tokens` when present.

use serde::Serialize;
use serde_json::Value;

use super::{int_at, scores, vectors_in_order, Adapter, EmbedAnswer, RerankAnswer, UpstreamCall};
use crate::models::requests::{EmbedRequest, RerankRequest};

pub struct Cohere;

#[derive(Serialize)]
struct EmbedBody<'a> {
    model: &'a str,
    texts: &'a [String],
    input_type: &'a str,
    embedding_types: [&'static str; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    output_dimension: Option<u64>,
}

#[derive(Serialize)]
struct RerankBody<'a> {
    model: &'a str,
    query: &'a str,
    documents: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    top_n: Option<u64>,
}

impl Adapter for Cohere {
    fn embed_call(
        &self,
        upstream_model: &str,
        req: &EmbedRequest,
    ) -> Result<UpstreamCall, serde_json::Error> {
        let input_type = req
            .extra
            .get("input_type")
            .and_then(Value::as_str)
            .unwrap_or("search_document");
        UpstreamCall::json(
            "/v2/embed",
            &EmbedBody {
                model: upstream_model,
                texts: &req.inputs,
                input_type,
                embedding_types: ["float"],
                output_dimension: req.dimensions,
            },
        )
    }

    fn parse_embed(&self, answer: Value, inputs: usize) -> Result<EmbedAnswer, String> {
        let embeddings = answer
            .get("embeddings")
            .ok_or_else(|| "it has no 'embeddings'".to_string())?;
        // v2: {"embeddings": {"float": [...]}}; v1 answered a bare list.
        let floats = embeddings.get("float").unwrap_or(embeddings);
        Ok(EmbedAnswer {
            vectors: vectors_in_order(floats, inputs)?,
            prompt_tokens: int_at(&answer, &["meta", "billed_units", "input_tokens"]),
        })
    }

    fn rerank_call(
        &self,
        upstream_model: &str,
        req: &RerankRequest,
    ) -> Result<UpstreamCall, serde_json::Error> {
        UpstreamCall::json(
            "/v2/rerank",
            &RerankBody {
                model: upstream_model,
                query: &req.query,
                documents: &req.documents,
                top_n: req.top_n,
            },
        )
    }

    fn parse_rerank(&self, answer: Value, documents: usize) -> Result<RerankAnswer, String> {
        let results = answer
            .get("results")
            .ok_or_else(|| "it has no 'results'".to_string())?;
        Ok(RerankAnswer {
            scores: scores(results, documents, &["relevance_score"])?,
            prompt_tokens: int_at(&answer, &["meta", "billed_units", "input_tokens"]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::adapters::Vector;
    use serde_json::{json, Map};

    #[test]
    fn embed_asks_for_floats_as_documents_and_reads_billed_tokens() {
        let mut req = EmbedRequest {
            inputs: vec!["a".into()],
            single: true,
            encoding_format: None,
            dimensions: Some(16),
            user: None,
            extra: Map::new(),
        };
        let call = Cohere.embed_call("embed-v4", &req).unwrap();
        assert_eq!(call.path, "/v2/embed");
        let v: Value = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(
            v,
            json!({"model": "embed-v4", "texts": ["a"], "input_type": "search_document",
                   "embedding_types": ["float"], "output_dimension": 16})
        );
        req.extra.insert("input_type".into(), json!("search_query"));
        let v: Value = serde_json::from_slice(&Cohere.embed_call("m", &req).unwrap().body).unwrap();
        assert_eq!(v["input_type"], "search_query");

        let a = Cohere
            .parse_embed(
                json!({"embeddings": {"float": [[0.5, 1.0]]}, "meta": {"billed_units": {"input_tokens": 4}}}),
                1,
            )
            .unwrap();
        assert_eq!(a.vectors, vec![Vector::Json(vec![0.5, 1.0])]);
        assert_eq!(a.prompt_tokens, Some(4));
        assert!(Cohere.parse_embed(json!({"id": "x"}), 1).is_err());
    }

    #[test]
    fn rerank_sends_top_n_and_reads_results() {
        let req = RerankRequest {
            query: "q".into(),
            documents: vec!["a".into(), "b".into()],
            top_n: None,
            return_documents: true,
            extra: Map::new(),
        };
        let v: Value =
            serde_json::from_slice(&Cohere.rerank_call("rr", &req).unwrap().body).unwrap();
        assert_eq!(
            v,
            json!({"model": "rr", "query": "q", "documents": ["a", "b"]})
        );
        let a = Cohere
            .parse_rerank(
                json!({"results": [{"index": 1, "relevance_score": 0.75}], "meta": {"billed_units": {"search_units": 1}}}),
                2,
            )
            .unwrap();
        assert_eq!((a.scores, a.prompt_tokens), (vec![(1, 0.75)], None));
    }
}
