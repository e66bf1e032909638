//! Embedding and rerank routes: OpenAI (`/v1/embeddings`, `/v1/rerank`),
//! TEI (`/embed`, `/rerank`), Cohere v2 (`/v2/embed`, `/v2/rerank`).

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};

use crate::reply::{error, json_response, Flavor};
use crate::{det, Shared, DEFAULT_DIMS};

/// Largest embedding the stub will make.
const MAX_DIMS: usize = 65_536;

/// Inputs as OpenAI / TEI accept them: a string, strings, token ids, or
/// lists of token ids (token ids become their decimal text, space-joined).
fn inputs(v: &Value) -> Option<Vec<String>> {
    fn ids(a: &[Value]) -> Option<String> {
        let mut out = String::new();
        for (i, x) in a.iter().enumerate() {
            let n = x.as_u64()?;
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&n.to_string());
        }
        Some(out)
    }
    match v {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(a) if a.is_empty() => None,
        Value::Array(a) => match &a[0] {
            Value::String(_) => a.iter().map(|x| x.as_str().map(str::to_string)).collect(),
            Value::Number(_) => Some(vec![ids(a)?]),
            Value::Array(_) => a.iter().map(|x| ids(x.as_array()?)).collect(),
            _ => None,
        },
        _ => None,
    }
}

fn strings(v: Option<&Value>) -> Option<Vec<&str>> {
    v?.as_array()?.iter().map(Value::as_str).collect()
}

fn dims(v: Option<&Value>) -> Result<usize, String> {
    match v {
        None | Some(Value::Null) => Ok(DEFAULT_DIMS),
        Some(x) => match x.as_u64() {
            Some(n) if n >= 1 && n as usize <= MAX_DIMS => Ok(n as usize),
            _ => Err(format!("dimensions must be an integer in 1..={MAX_DIMS}")),
        },
    }
}

fn token_count<'a>(texts: impl IntoIterator<Item = &'a str>) -> u64 {
    texts.into_iter().map(det::words).sum::<u64>().max(1)
}

fn top_n(v: Option<&Value>) -> Option<usize> {
    v.and_then(Value::as_u64).map(|n| n as usize)
}

/// (index, score) sorted by falling score, ties by index.
fn ranked(query: &str, docs: &[&str]) -> Vec<(usize, f64)> {
    let mut r: Vec<(usize, f64)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (i, det::score_for(query, d)))
        .collect();
    r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    r
}

fn base64_f32(v: &[f32]) -> String {
    let mut bytes = Vec::with_capacity(v.len() * 4);
    for x in v {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn model_of(body: &Value) -> &str {
    body.get("model").and_then(Value::as_str).unwrap_or("")
}

fn bad(flavor: Flavor, msg: &str) -> Response {
    error(flavor, StatusCode::BAD_REQUEST, msg)
}

// ---------------------------------------------------------------- OpenAI

#[derive(Serialize)]
#[serde(untagged)]
enum EmbeddingValue {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct EmbeddingItem {
    object: &'static str,
    index: usize,
    embedding: EmbeddingValue,
}

#[derive(Serialize)]
struct EmbeddingUsage {
    prompt_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
struct EmbeddingList<'a> {
    object: &'static str,
    data: Vec<EmbeddingItem>,
    model: &'a str,
    usage: EmbeddingUsage,
}

pub(crate) fn openai_embeddings(_shared: &Shared, body: &Value) -> Response {
    let f = Flavor::OpenAi;
    let Some(texts) = body.get("input").and_then(inputs) else {
        return bad(
            f,
            "'input' must be a non-empty string, array of strings, or token ids",
        );
    };
    let d = match dims(body.get("dimensions")) {
        Ok(d) => d,
        Err(e) => return bad(f, &e),
    };
    let b64 = match body.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => return bad(f, &format!("unknown encoding_format {other:?}")),
    };
    let tokens = token_count(texts.iter().map(String::as_str));
    let data = texts
        .iter()
        .enumerate()
        .map(|(index, t)| {
            let v = det::embedding_for(t, d);
            EmbeddingItem {
                object: "embedding",
                index,
                embedding: if b64 {
                    EmbeddingValue::Base64(base64_f32(&v))
                } else {
                    EmbeddingValue::Float(v)
                },
            }
        })
        .collect();
    json_response(
        StatusCode::OK,
        &EmbeddingList {
            object: "list",
            data,
            model: model_of(body),
            usage: EmbeddingUsage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        },
    )
}

/// Documents as Jina / vLLM accept them: strings or `{"text": ..}` objects.
fn documents(v: Option<&Value>) -> Option<Vec<&str>> {
    v?.as_array()?
        .iter()
        .map(|d| d.as_str().or_else(|| d.get("text")?.as_str()))
        .collect()
}

pub(crate) fn openai_rerank(shared: &Shared, body: &Value) -> Response {
    let f = Flavor::OpenAi;
    let Some(query) = body.get("query").and_then(Value::as_str) else {
        return bad(f, "'query' must be a string");
    };
    let Some(docs) = documents(body.get("documents")) else {
        return bad(f, "'documents' must be an array of strings");
    };
    let return_documents = body
        .get("return_documents")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let mut r = ranked(query, &docs);
    if let Some(n) = top_n(body.get("top_n")) {
        r.truncate(n);
    }
    let results: Vec<Value> = r
        .into_iter()
        .map(|(i, s)| {
            if return_documents {
                json!({"index": i, "relevance_score": s, "document": {"text": docs[i]}})
            } else {
                json!({"index": i, "relevance_score": s})
            }
        })
        .collect();
    let tokens = token_count(std::iter::once(query).chain(docs.iter().copied()));
    json_response(
        StatusCode::OK,
        &json!({
            "id": format!("rerank-stub-{}", shared.next_id()),
            "model": model_of(body),
            "results": results,
            "usage": {"total_tokens": tokens},
        }),
    )
}

// ---------------------------------------------------------------- TEI

pub(crate) fn tei_embed(body: &Value) -> Response {
    let f = Flavor::Tei;
    let Some(texts) = body.get("inputs").and_then(inputs) else {
        return bad(f, "`inputs` cannot be empty");
    };
    let d = match dims(body.get("dimensions")) {
        Ok(d) => d,
        Err(e) => return bad(f, &e),
    };
    let out: Vec<Vec<f32>> = texts.iter().map(|t| det::embedding_for(t, d)).collect();
    json_response(StatusCode::OK, &out)
}

#[derive(Serialize)]
struct TeiRank<'a> {
    index: usize,
    score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

pub(crate) fn tei_rerank(body: &Value) -> Response {
    let f = Flavor::Tei;
    let Some(query) = body.get("query").and_then(Value::as_str) else {
        return bad(f, "`query` must be a string");
    };
    let Some(texts) = strings(body.get("texts")) else {
        return bad(f, "`texts` must be an array of strings");
    };
    if texts.is_empty() {
        return bad(f, "`texts` cannot be empty");
    }
    let raw = body.get("raw_scores").and_then(Value::as_bool) == Some(true);
    let return_text = body.get("return_text").and_then(Value::as_bool) == Some(true);
    let out: Vec<TeiRank<'_>> = ranked(query, &texts)
        .into_iter()
        .map(|(index, s)| TeiRank {
            index,
            score: if raw { det::logit(s) } else { s },
            text: return_text.then_some(texts[index]),
        })
        .collect();
    json_response(StatusCode::OK, &out)
}

// ---------------------------------------------------------------- Cohere v2

fn cohere_id(shared: &Shared) -> String {
    format!("00000000-0000-4000-8000-{:012x}", shared.next_id())
}

pub(crate) fn cohere_embed(shared: &Shared, body: &Value) -> Response {
    let f = Flavor::Cohere;
    let Some(texts) = strings(body.get("texts")) else {
        return bad(f, "invalid request: texts must be an array of strings");
    };
    let d = match dims(body.get("output_dimension")) {
        Ok(d) => d,
        Err(e) => return bad(f, &format!("invalid request: output_{e}")),
    };
    let types = match body.get("embedding_types") {
        None | Some(Value::Null) => vec!["float"],
        Some(v) => match strings(Some(v)) {
            Some(t) => t,
            None => return bad(f, "invalid request: embedding_types must be an array"),
        },
    };
    let mut embeddings = serde_json::Map::new();
    for t in types {
        match t {
            "float" => {
                let vs: Vec<Vec<f32>> = texts.iter().map(|x| det::embedding_for(x, d)).collect();
                embeddings.insert("float".into(), json!(vs));
            }
            "base64" => {
                let vs: Vec<String> = texts
                    .iter()
                    .map(|x| base64_f32(&det::embedding_for(x, d)))
                    .collect();
                embeddings.insert("base64".into(), json!(vs));
            }
            other => {
                return bad(
                    f,
                    &format!("invalid request: stub supports embedding_types float and base64, not {other:?}"),
                )
            }
        }
    }
    json_response(
        StatusCode::OK,
        &json!({
            "id": cohere_id(shared),
            "embeddings": embeddings,
            "texts": texts,
            "meta": {
                "api_version": {"version": "2"},
                "billed_units": {"input_tokens": token_count(texts.iter().copied())},
            },
        }),
    )
}

pub(crate) fn cohere_rerank(shared: &Shared, body: &Value) -> Response {
    let f = Flavor::Cohere;
    let Some(query) = body.get("query").and_then(Value::as_str) else {
        return bad(f, "invalid request: query must be a string");
    };
    let Some(docs) = strings(body.get("documents")) else {
        return bad(f, "invalid request: documents must be an array of strings");
    };
    let mut r = ranked(query, &docs);
    if let Some(n) = top_n(body.get("top_n")) {
        r.truncate(n);
    }
    let results: Vec<Value> = r
        .into_iter()
        .map(|(i, s)| json!({"index": i, "relevance_score": s}))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "id": cohere_id(shared),
            "results": results,
            "meta": {
                "api_version": {"version": "2"},
                "billed_units": {"search_units": 1},
            },
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_accept_strings_and_token_ids() {
        assert_eq!(inputs(&json!("a b")), Some(vec!["a b".to_string()]));
        assert_eq!(
            inputs(&json!(["x", "y"])),
            Some(vec!["x".to_string(), "y".to_string()])
        );
        assert_eq!(inputs(&json!([1, 2, 3])), Some(vec!["1 2 3".to_string()]));
        assert_eq!(
            inputs(&json!([[1], [2, 3]])),
            Some(vec!["1".to_string(), "2 3".to_string()])
        );
        assert_eq!(inputs(&json!([])), None);
        assert_eq!(inputs(&json!(["x", 1])), None);
        assert_eq!(inputs(&json!(5)), None);
    }
}
