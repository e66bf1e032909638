//! OpenAI-compatible servers (OpenAI, vLLM, Ollama, llama.cpp, Jina):
//! `{base_url}/chat/completions` (the relay's own dialect: nothing to
//! translate), `{base_url}/embeddings` and `{base_url}/rerank` (Jina / vLLM
//! shape).
//!
//! Both bodies are the client's own, with `model` set to the upstream's name:
//! `encoding_format`, `dimensions`, `user` and every unknown field pass
//! through. For rerank, `documents` go as plain strings and
//! `return_documents` is not sent (the answer carries the client's own text).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{
    json_answer, numbers, order_by_index, scores, Adapter, ChatAdapter, EmbedAnswer, NumbersText,
    RerankAnswer, UpstreamCall, Vector,
};
use crate::models::requests::{EmbedRequest, RerankRequest};
use crate::wire::json::MapOnly;

pub struct OpenAi;

impl ChatAdapter for OpenAi {
    fn chat_path(&self) -> &'static str {
        "/chat/completions"
    }
}

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

/// An embeddings answer read without a tree; see [`embed_answer_as_text`].
#[derive(Deserialize)]
struct EmbedReply<'a> {
    #[serde(borrow)]
    data: Vec<MapOnly<EmbedItem<'a>>>,
    #[serde(default)]
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct EmbedItem<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow)]
    embedding: &'a RawValue,
}

/// The answer with each embedding kept as the upstream's text, when every
/// one is a plain array of numbers and nothing else is unusual about it
/// (`None`: read it as a tree, which also names what is wrong).
fn embed_answer_as_text(answer: &[u8], inputs: usize) -> Option<Result<EmbedAnswer, String>> {
    let MapOnly(reply): MapOnly<EmbedReply> = serde_json::from_slice(answer).ok()?;
    let mut items = Vec::with_capacity(reply.data.len());
    for (pos, MapOnly(item)) in reply.data.iter().enumerate() {
        let index = match item.index {
            None => pos,
            Some(i) => usize::try_from(i).ok()?,
        };
        items.push((index, Vector::Text(NumbersText::new(item.embedding)?)));
    }
    Some(order_by_index(items, inputs).map(|vectors| EmbedAnswer {
        vectors,
        prompt_tokens: reported_tokens(reply.usage.as_ref()),
    }))
}

/// A rerank answer read without a tree; see [`rerank_answer_plain`].
#[derive(Deserialize)]
struct RerankReply {
    results: Vec<MapOnly<RerankItem>>,
    #[serde(default)]
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct RerankItem {
    index: u64,
    #[serde(default)]
    relevance_score: Option<f64>,
    #[serde(default)]
    score: Option<f64>,
}

/// The answer's scores read straight into numbers (the documents the upstream
/// may echo are skipped, not built), when nothing about it is unusual
/// (`None`: read it as a tree, which also names what is wrong).
fn rerank_answer_plain(answer: &[u8], documents: usize) -> Option<RerankAnswer> {
    let MapOnly(reply): MapOnly<RerankReply> = serde_json::from_slice(answer).ok()?;
    let scores = reply
        .results
        .iter()
        .map(|MapOnly(r)| {
            let index = usize::try_from(r.index).ok().filter(|i| *i < documents)?;
            Some((index, r.relevance_score.or(r.score)?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(RerankAnswer {
        scores,
        prompt_tokens: reported_tokens(reply.usage.as_ref()),
    })
}

/// The tokens an OpenAI-shaped `usage` reports: `prompt_tokens`, else `total_tokens`.
fn reported_tokens(usage: Option<&Value>) -> Option<i64> {
    let count = |k: &str| usage?.get(k)?.as_i64();
    count("prompt_tokens").or_else(|| count("total_tokens"))
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
            prompt_tokens: reported_tokens(answer.get("usage")),
        })
    }

    fn parse_embed_bytes(&self, answer: &[u8], inputs: usize) -> Result<EmbedAnswer, String> {
        match embed_answer_as_text(answer, inputs) {
            Some(parsed) => parsed,
            None => self.parse_embed(json_answer(answer)?, inputs),
        }
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

    fn parse_rerank_bytes(&self, answer: &[u8], documents: usize) -> Result<RerankAnswer, String> {
        match rerank_answer_plain(answer, documents) {
            Some(parsed) => Ok(parsed),
            None => self.parse_rerank(json_answer(answer)?, documents),
        }
    }

    fn parse_rerank(&self, answer: Value, documents: usize) -> Result<RerankAnswer, String> {
        let results = answer
            .get("results")
            .ok_or_else(|| "it has no 'results'".to_string())?;
        Ok(RerankAnswer {
            scores: scores(results, documents, &["relevance_score", "score"])?,
            prompt_tokens: reported_tokens(answer.get("usage")),
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

    fn text(v: &Vector) -> &str {
        match v {
            Vector::Text(t) => t.0.get(),
            other => panic!("not kept as text: {other:?}"),
        }
    }

    #[test]
    fn plain_number_arrays_go_out_as_the_upstream_wrote_them_in_index_order() {
        let answer = br#"{"object": "list", "data": [
            {"object": "embedding", "index": 1, "embedding": [1.0E-5, -0.000]},
            {"object": "embedding", "index": 0, "embedding": [ 0.1000000000000000055511151231257827 ,2e+07,-3]}],
            "model": "m", "usage": {"total_tokens": 4}}"#;
        let a = OpenAi.parse_embed_bytes(answer, 2).unwrap();
        assert_eq!(
            text(&a.vectors[0]),
            "[ 0.1000000000000000055511151231257827 ,2e+07,-3]"
        );
        assert_eq!(text(&a.vectors[1]), "[1.0E-5, -0.000]");
        assert_eq!(a.prompt_tokens, Some(4));
        // The same numbers as the tree would give, written as the upstream wrote them.
        let out = serde_json::to_string(&a.vectors).unwrap();
        assert_eq!(
            out,
            "[[ 0.1000000000000000055511151231257827 ,2e+07,-3],[1.0E-5, -0.000]]"
        );
        let tree = OpenAi
            .parse_embed(serde_json::from_slice(answer).unwrap(), 2)
            .unwrap();
        let floats: Vec<Vec<f64>> = serde_json::from_str(&out).unwrap();
        assert_eq!(
            tree.vectors,
            floats.into_iter().map(Vector::Json).collect::<Vec<_>>()
        );
        // Base64 asked for: the same float32 bytes either way.
        assert_eq!(a.vectors[0].to_base64(), tree.vectors[0].to_base64());
    }

    #[test]
    fn an_answer_the_text_path_cannot_vouch_for_is_read_as_a_tree() {
        let read = |body: &str, n| OpenAi.parse_embed_bytes(body.as_bytes(), n);
        // Exponents past two digits, or numbers past 200 digits, may not be
        // finite floats: the tree reads them (and refuses what is out of range).
        let a = read(r#"{"data": [{"embedding": [1e-300, 0.5]}]}"#, 1).unwrap();
        assert_eq!(a.vectors, vec![Vector::Json(vec![1e-300, 0.5])]);
        let huge = format!(r#"{{"data": [{{"embedding": [1{}]}}]}}"#, "0".repeat(400));
        assert_eq!(read(&huge, 1).unwrap_err(), "it is not JSON");
        let a = read(r#"{"data": [{"index": 0, "embedding": "AACAPw=="}]}"#, 1).unwrap();
        assert_eq!(a.vectors, vec![Vector::Base64("AACAPw==".into())]);
        // What is wrong is named as before.
        for (body, n, message) in [
            (
                r#"{"data": [{"embedding": [1, "x"]}]}"#,
                1,
                "an embedding holds something that is not a number",
            ),
            (
                r#"{"data": [{"embedding": [[1]]}]}"#,
                1,
                "an embedding holds something that is not a number",
            ),
            (
                r#"{"data": [{"embedding": [1]}]}"#,
                2,
                "1 embeddings for 2 inputs",
            ),
            (
                r#"{"data": [{"index": 3, "embedding": [1]}]}"#,
                1,
                "embedding index 3 is out of range",
            ),
            (
                r#"{"data": [{"index": -1, "embedding": [1]}]}"#,
                1,
                "an embedding index is not a number",
            ),
            (
                r#"{"data": [{"index": 0}]}"#,
                1,
                "an item has no 'embedding'",
            ),
            (r#"{"data": "x"}"#, 1, "it has no 'data' list"),
            ("not json", 1, "it is not JSON"),
            // The array forms a derived reader takes.
            (
                r#"[[{"embedding": [1]}], null]"#,
                1,
                "it has no 'data' list",
            ),
            (r#"{"data": [[0, [1]]]}"#, 1, "an item has no 'embedding'"),
        ] {
            assert_eq!(read(body, n).unwrap_err(), message, "{body}");
        }
    }

    #[test]
    fn rerank_scores_are_read_straight_and_agree_with_the_tree() {
        let answer = br#"{"id": "r", "results": [
            {"index": 1, "relevance_score": 0.25, "document": {"text": "a \"long\" echo"}},
            {"index": 0, "score": 1}], "usage": {"prompt_tokens": 9, "total_tokens": 12}}"#;
        let plain = rerank_answer_plain(answer, 2).expect("read without a tree");
        assert_eq!(plain.scores, vec![(1, 0.25), (0, 1.0)]);
        assert_eq!(plain.prompt_tokens, Some(9));
        let tree = OpenAi
            .parse_rerank(serde_json::from_slice(answer).unwrap(), 2)
            .unwrap();
        assert_eq!(
            (tree.scores, tree.prompt_tokens),
            (plain.scores, plain.prompt_tokens)
        );
    }

    #[test]
    fn an_unusual_rerank_answer_is_read_as_a_tree_and_named_as_before() {
        let read = |body: &str, n| OpenAi.parse_rerank_bytes(body.as_bytes(), n);
        // A score that is not a number under the first key: the tree looks at the next.
        let a = read(
            r#"{"results": [{"index": 0, "relevance_score": "high", "score": 0.5}]}"#,
            1,
        )
        .unwrap();
        assert_eq!(a.scores, vec![(0, 0.5)]);
        for (body, message) in [
            (
                r#"{"results": [{"index": 2, "score": 0.5}]}"#,
                "a result has no valid document index",
            ),
            (r#"{"results": [{"index": 0}]}"#, "a result has no score"),
            (r#"{"results": {"index": 0}}"#, "the results are not a list"),
            ("[]", "it has no 'results'"),
            ("not json", "it is not JSON"),
            // The array forms a derived reader takes.
            (r#"[[{"index": 0, "score": 1}]]"#, "it has no 'results'"),
            (
                r#"{"results": [[0, 0.5]]}"#,
                "a result has no valid document index",
            ),
        ] {
            assert_eq!(read(body, 2).unwrap_err(), message, "{body}");
        }
    }
}
