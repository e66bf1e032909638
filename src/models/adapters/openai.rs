//! OpenAI-compatible servers (OpenAI, vLLM, Ollama, llama.cpp, Jina):
//! `{base_url}/embeddings` and `{base_url}/rerank` (Jina / vLLM shape).
//!
//! Both bodies are the client's own, with `model` set to the upstream's name:
//! `encoding_format`, `dimensions`, `user` and every unknown field pass
//! through. For rerank, `documents` go as plain strings and
//! `return_documents` is not sent (the answer carries the client's own text).

use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    int_at, numbers, order_by_index, scores, Adapter, EmbedAnswer, RerankAnswer, UpstreamCall,
    Vector,
};
use crate::models::requests::{EmbedRequest, RerankRequest};

pub struct OpenAi;

#[derive(Serialize)]
#[serde(untagged)]
enum Input<'a> {
    One(&'a str),
    Many(&'a [String]),
}

#[derive(Serialize)]
struct EmbedBody<'a> {
    model: &'a str,
    input: Input<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding_format: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct RerankBody<'a> {
    model: &'a str,
    query: &'a str,
    documents: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    top_n: Option<u64>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl Adapter for OpenAi {
    fn embed_call(
        &self,
        upstream_model: &str,
        req: &EmbedRequest,
    ) -> Result<UpstreamCall, serde_json::Error> {
        let input = match (req.single, req.inputs.first()) {
            (true, Some(one)) => Input::One(one),
            _ => Input::Many(&req.inputs),
        };
        UpstreamCall::json(
            "/embeddings",
            &EmbedBody {
                model: upstream_model,
                input,
                encoding_format: req.encoding_format.map(|e| e.as_str()),
                dimensions: req.dimensions,
                user: req.user.as_deref(),
                extra: &req.extra,
            },
        )
    }

    fn parse_embed(&self, answer: Value, inputs: usize) -> Result<EmbedAnswer, String> {
        let data = answer
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| "it has no 'data' list".to_string())?;
        let mut items = Vec::with_capacity(data.len());
        for (pos, item) in data.iter().enumerate() {
            let index = match item.get("index") {
                None | Some(Value::Null) => pos,
                Some(i) => i
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .ok_or_else(|| "an embedding index is not a number".to_string())?,
            };
            let vector = match item.get("embedding") {
                Some(Value::String(s)) => Vector::Base64(s.clone()),
                Some(v) => Vector::Json(numbers(v)?),
                None => return Err("an item has no 'embedding'".into()),
            };
            items.push((index, vector));
        }
        Ok(EmbedAnswer {
            vectors: order_by_index(items, inputs)?,
            prompt_tokens: int_at(&answer, &["usage", "prompt_tokens"])
                .or_else(|| int_at(&answer, &["usage", "total_tokens"])),
        })
    }

    fn rerank_call(
        &self,
        upstream_model: &str,
        req: &RerankRequest,
    ) -> Result<UpstreamCall, serde_json::Error> {
        UpstreamCall::json(
            "/rerank",
            &RerankBody {
                model: upstream_model,
                query: &req.query,
                documents: &req.documents,
                top_n: req.top_n,
                extra: &req.extra,
            },
        )
    }

    fn parse_rerank(&self, answer: Value, documents: usize) -> Result<RerankAnswer, String> {
        let results = answer
            .get("results")
            .ok_or_else(|| "it has no 'results'".to_string())?;
        Ok(RerankAnswer {
            scores: scores(results, documents, &["relevance_score", "score"])?,
            prompt_tokens: int_at(&answer, &["usage", "prompt_tokens"])
                .or_else(|| int_at(&answer, &["usage", "total_tokens"])),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::requests::Encoding;
    use serde_json::json;

    fn embed_req(single: bool) -> EmbedRequest {
        let mut extra = Map::new();
        extra.insert("truncate_prompt_tokens".into(), json!(8));
        EmbedRequest {
            inputs: vec!["a".into()],
            single,
            encoding_format: Some(Encoding::Base64),
            dimensions: Some(4),
            user: Some("u-1".into()),
            extra,
        }
    }

    #[test]
    fn embed_body_is_the_clients_with_the_upstream_model() {
        let call = OpenAi.embed_call("up", &embed_req(true)).unwrap();
        assert_eq!(call.path, "/embeddings");
        let v: Value = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(
            v,
            json!({"model": "up", "input": "a", "encoding_format": "base64", "dimensions": 4,
                   "user": "u-1", "truncate_prompt_tokens": 8})
        );
        let v: Value =
            serde_json::from_slice(&OpenAi.embed_call("up", &embed_req(false)).unwrap().body)
                .unwrap();
        assert_eq!(v["input"], json!(["a"]));
    }

    #[test]
    fn embed_answers_are_ordered_by_index_with_usage() {
        let a = OpenAi
            .parse_embed(
                json!({"data": [{"index": 1, "embedding": "AACAPw=="}, {"index": 0, "embedding": [0.5]}],
                       "usage": {"prompt_tokens": 3, "total_tokens": 3}}),
                2,
            )
            .unwrap();
        assert_eq!(
            a.vectors,
            vec![Vector::Json(vec![0.5]), Vector::Base64("AACAPw==".into())]
        );
        assert_eq!(a.prompt_tokens, Some(3));
        assert!(OpenAi.parse_embed(json!({"data": "x"}), 1).is_err());
        assert!(OpenAi.parse_embed(json!([[1.0]]), 1).is_err());
    }

    #[test]
    fn rerank_body_sends_plain_documents_and_unknown_fields() {
        let mut extra = Map::new();
        extra.insert("max_chunks_per_doc".into(), json!(2));
        let req = RerankRequest {
            query: "q".into(),
            documents: vec!["d0".into(), "d1".into()],
            top_n: Some(1),
            return_documents: false,
            extra,
        };
        let v: Value =
            serde_json::from_slice(&OpenAi.rerank_call("up", &req).unwrap().body).unwrap();
        assert_eq!(
            v,
            json!({"model": "up", "query": "q", "documents": ["d0", "d1"], "top_n": 1, "max_chunks_per_doc": 2})
        );
        let a = OpenAi
            .parse_rerank(
                json!({"results": [{"index": 1, "relevance_score": 0.9, "document": {"text": "d1"}}],
                       "usage": {"total_tokens": 7}}),
                2,
            )
            .unwrap();
        assert_eq!((a.scores, a.prompt_tokens), (vec![(1, 0.9)], Some(7)));
    }
}
