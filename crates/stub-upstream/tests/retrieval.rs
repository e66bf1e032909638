//! Embedding and rerank routes of the three wire formats.

mod common;

use base64::Engine as _;
use common::*;
use gatehouse_stub_upstream::{embedding_for, score_for, Script, Stub};
use serde_json::{json, Value};

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[tokio::test]
async fn openai_embeddings_float_shape_and_deterministic_vectors() {
    let stub = Stub::start().await;
    let (status, v) = post(
        &format!("{}/embeddings", stub.openai_base_url()),
        json!({"model": "emb", "input": ["hello world", "foo"]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "emb");
    assert_eq!(v["usage"], json!({"prompt_tokens": 3, "total_tokens": 3}));
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, (d, text)) in data.iter().zip(["hello world", "foo"]).enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        assert_eq!(d.as_object().unwrap().len(), 3);
        assert_eq!(floats(&d["embedding"]), embedding_for(text, 8));
    }
}

#[tokio::test]
async fn openai_embeddings_single_string_dimensions_and_base64() {
    let stub = Stub::start().await;
    let url = format!("{}/embeddings", stub.openai_base_url());
    let (_, v) = post(
        &url,
        json!({"model": "emb", "input": "one", "dimensions": 16}),
    )
    .await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert_eq!(floats(&v["data"][0]["embedding"]), embedding_for("one", 16));

    let (_, v) = post(
        &url,
        json!({"model": "emb", "input": ["one"], "encoding_format": "base64", "dimensions": 4}),
    )
    .await;
    let b64 = v["data"][0]["embedding"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(decoded, embedding_for("one", 4));
}

#[tokio::test]
async fn openai_embeddings_reject_missing_input() {
    let stub = Stub::start().await;
    let (status, v) = post(
        &format!("{}/embeddings", stub.openai_base_url()),
        json!({"model": "emb"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"].is_string());
}

#[tokio::test]
async fn openai_rerank_sorted_truncated_with_documents() {
    let stub = Stub::start().await;
    let docs = ["blue whale", "the red fox", "a red car", "red fox den"];
    let (status, v) = post(
        &format!("{}/rerank", stub.openai_base_url()),
        json!({"model": "rr", "query": "red fox", "documents": docs, "top_n": 3}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(v["id"].as_str().unwrap().starts_with("rerank-stub-"));
    assert_eq!(v["model"], "rr");
    assert_eq!(v["usage"], json!({"total_tokens": 13}));
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let idx: Vec<u64> = results
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    // "the red fox" (11 chars) and "red fox den" (11) tie on words and length:
    // ties go to the lower index; then "a red car".
    assert_eq!(idx, [1, 3, 2]);
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(
            r["relevance_score"].as_f64().unwrap(),
            score_for("red fox", docs[i])
        );
        assert_eq!(r["document"], json!({"text": docs[i]}));
    }

    let (_, v) = post(
        &format!("{}/rerank", stub.openai_base_url()),
        json!({"model": "rr", "query": "red", "documents": docs, "return_documents": false}),
    )
    .await;
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|r| r.get("document").is_none()));
    let scores: Vec<f64> = results
        .iter()
        .map(|r| r["relevance_score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

#[tokio::test]
async fn tei_embed_returns_bare_array_of_vectors() {
    let stub = Stub::start().await;
    let (status, v) = post(
        &format!("{}/embed", stub.url()),
        json!({"inputs": ["a b", "c"], "truncate": true, "normalize": true}),
    )
    .await;
    assert_eq!(status, 200);
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(floats(&arr[0]), embedding_for("a b", 8));
    assert_eq!(floats(&arr[1]), embedding_for("c", 8));

    let (_, v) = post(
        &format!("{}/embed", stub.url()),
        json!({"inputs": "single", "dimensions": 3}),
    )
    .await;
    assert_eq!(floats(&v[0]), embedding_for("single", 3));
    assert_eq!(v.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn tei_rerank_returns_all_texts_sorted_with_optional_text() {
    let stub = Stub::start().await;
    let texts = ["nothing here", "deep learning", "learning rust"];
    let (status, v) = post(
        &format!("{}/rerank", stub.url()),
        json!({"query": "learning rust", "texts": texts, "return_text": true}),
    )
    .await;
    assert_eq!(status, 200);
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 3);
    assert_eq!(
        arr[0],
        json!({"index": 2, "score": score_for("learning rust", texts[2]), "text": "learning rust"})
    );
    assert_eq!(arr[1]["index"], 1);
    assert_eq!(arr[2]["index"], 0);

    let (_, v) = post(
        &format!("{}/rerank", stub.url()),
        json!({"query": "learning rust", "texts": texts, "raw_scores": true}),
    )
    .await;
    let first = &v[0];
    assert_eq!(first.as_object().unwrap().len(), 2, "no text unless asked");
    let raw = first["score"].as_f64().unwrap();
    let sigmoid = 1.0 / (1.0 + (-raw).exp());
    assert!((sigmoid - score_for("learning rust", texts[2])).abs() < 1e-9);
}

#[tokio::test]
async fn tei_routes_use_tei_script_and_tei_error_format() {
    let stub = Stub::start().await;
    stub.script(
        "tei",
        Script {
            status: Some(429),
            error_message: Some("queue full".into()),
            ..Script::default()
        },
    );
    let (status, v) = post(&format!("{}/embed", stub.url()), json!({"inputs": "x"})).await;
    assert_eq!(status, 429);
    assert_eq!(
        v,
        json!({"error": "queue full", "error_type": "overloaded"})
    );
    assert_eq!(stub.requests_for_model("tei").len(), 1);
}

#[tokio::test]
async fn cohere_embed_v2_shape() {
    let stub = Stub::start().await;
    let (status, v) = post(
        &format!("{}/v2/embed", stub.url()),
        json!({"model": "embed-v4.0", "texts": ["hi there", "yo"],
               "input_type": "search_document", "embedding_types": ["float"],
               "output_dimension": 16}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(v["id"].is_string());
    assert_eq!(v["texts"], json!(["hi there", "yo"]));
    assert_eq!(v["meta"]["billed_units"], json!({"input_tokens": 3}));
    let emb = v["embeddings"].as_object().unwrap();
    assert_eq!(emb.len(), 1);
    let float = emb["float"].as_array().unwrap();
    assert_eq!(floats(&float[0]), embedding_for("hi there", 16));
    assert_eq!(floats(&float[1]), embedding_for("yo", 16));
}

#[tokio::test]
async fn cohere_rerank_v2_has_no_document_text() {
    let stub = Stub::start().await;
    let docs = ["cats purr", "dogs bark loudly", "dogs"];
    let (status, v) = post(
        &format!("{}/v2/rerank", stub.url()),
        json!({"model": "rerank-v3.5", "query": "dogs", "documents": docs, "top_n": 2}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(v["id"].is_string());
    assert_eq!(v["meta"]["billed_units"], json!({"search_units": 1}));
    assert_eq!(
        v["results"],
        json!([
            {"index": 2, "relevance_score": score_for("dogs", "dogs")},
            {"index": 1, "relevance_score": score_for("dogs", "dogs bark loudly")}
        ])
    );
}

#[tokio::test]
async fn cohere_routes_answer_errors_in_cohere_format() {
    let stub = Stub::start().await;
    stub.script("co-err", Script::status(500));
    let (status, v) = post(
        &format!("{}/v2/rerank", stub.url()),
        json!({"model": "co-err", "query": "q", "documents": ["d"]}),
    )
    .await;
    assert_eq!(status, 500);
    assert_eq!(v["message"], "stub error");
    assert!(v["id"].is_string());
}
