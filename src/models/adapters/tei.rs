//! text-embeddings-inference: `{base_url}/embed` (`{"inputs", "dimensions"?}`
//! → a bare array of float arrays) and `{base_url}/rerank`
//! (`{"query", "texts"}` → a bare array of `{"index", "score"}`).
//!
//! TEI serves one model per server and reports no usage, so the body carries
//! no model and tokens are estimated. It cannot answer base64: the gateway
//! encodes. It has no `top_n`: the gateway cuts the list.

use serde::Serialize;
use serde_json::Value;

use super::{scores, vectors_in_order, Adapter, EmbedAnswer, RerankAnswer, UpstreamCall};
use crate::models::requests::{EmbedRequest, RerankRequest};

pub struct Tei;

#[derive(Serialize)]
struct EmbedBody<'a> {
    inputs: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u64>,
}

#[derive(Serialize)]
struct RerankBody<'a> {
    query: &'a str,
    texts: &'a [String],
    raw_scores: bool,
    return_text: bool,
}

impl Adapter for Tei {
    fn embed_call(
        &self,
        _upstream_model: &str,
        req: &EmbedRequest,
    ) -> Result<UpstreamCall, serde_json::Error> {
        UpstreamCall::json(
            "/embed",
            &EmbedBody {
                inputs: &req.inputs,
                dimensions: req.dimensions,
            },
        )
    }

    fn parse_embed(&self, answer: Value, inputs: usize) -> Result<EmbedAnswer, String> {
        Ok(EmbedAnswer {
            vectors: vectors_in_order(&answer, inputs)?,
            prompt_tokens: None,
        })
    }

    fn rerank_call(
        &self,
        _upstream_model: &str,
        req: &RerankRequest,
    ) -> Result<UpstreamCall, serde_json::Error> {
        UpstreamCall::json(
            "/rerank",
            &RerankBody {
                query: &req.query,
                texts: &req.documents,
                raw_scores: false,
                return_text: false,
            },
        )
    }

    fn parse_rerank(&self, answer: Value, documents: usize) -> Result<RerankAnswer, String> {
        Ok(RerankAnswer {
            scores: scores(&answer, documents, &["score", "relevance_score"])?,
            prompt_tokens: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::adapters::Vector;
    use serde_json::{json, Map};

    #[test]
    fn embed_sends_inputs_and_dimensions_and_reads_a_bare_array() {
        let req = EmbedRequest {
            inputs: vec!["a".into(), "b".into()],
            single: false,
            encoding_format: None,
            dimensions: Some(3),
            user: Some("ignored".into()),
            extra: Map::new(),
        };
        let call = Tei.embed_call("ignored", &req).unwrap();
        assert_eq!(call.path, "/embed");
        let v: Value = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(v, json!({"inputs": ["a", "b"], "dimensions": 3}));
        let a = Tei.parse_embed(json!([[0.5], [1.5]]), 2).unwrap();
        assert_eq!(
            a.vectors,
            vec![Vector::Json(vec![0.5]), Vector::Json(vec![1.5])]
        );
        assert_eq!(a.prompt_tokens, None);
        assert!(Tei.parse_embed(json!([[0.5]]), 2).is_err());
        assert!(Tei.parse_embed(json!([["x"]]), 1).is_err());
    }

    #[test]
    fn rerank_sends_texts_and_reads_index_score_pairs() {
        let req = RerankRequest {
            query: "q".into(),
            documents: vec!["d".into()],
            top_n: Some(1),
            return_documents: true,
            extra: Map::new(),
        };
        let call = Tei.rerank_call("ignored", &req).unwrap();
        assert_eq!(call.path, "/rerank");
        let v: Value = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(
            v,
            json!({"query": "q", "texts": ["d"], "raw_scores": false, "return_text": false})
        );
        let a = Tei
            .parse_rerank(json!([{"index": 0, "score": 0.25}]), 1)
            .unwrap();
        assert_eq!(a.scores, vec![(0, 0.25)]);
    }
}
