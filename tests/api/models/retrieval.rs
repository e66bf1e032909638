//! `/v1/embeddings` and `/v1/rerank` through each adapter (openai, tei,
//! cohere) against the stub upstream, their input rules and failures, and
//! the usage totals of `/api/admin/usage`.

use crate::common;

use base64::Engine as _;
use common::models::*;
use gatehouse_stub_upstream::{embedding_for, score_for, Script, TEI_SCRIPT_KEY};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

fn from_base64(v: &Value) -> Vec<f32> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.as_str().expect("a base64 string"))
        .expect("valid base64");
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Checks the contract's embeddings shape and returns the vectors' JSON.
fn check_list(v: &Value, model: &str, n: usize) -> Vec<Value> {
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], model);
    let data = v["data"].as_array().expect("data");
    assert_eq!(data.len(), n);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
    }
    let u = &v["usage"];
    assert!(u["prompt_tokens"].as_i64().unwrap() >= 1, "{u}");
    assert_eq!(u["prompt_tokens"], u["total_tokens"]);
    data.iter().map(|d| d["embedding"].clone()).collect()
}

#[tokio::test]
async fn openai_embeddings_pass_fields_through_and_answer_floats_or_base64() {
    let env = env().await;
    env.model("emb", "embeddings", "openai", "up-emb").await;
    let r = env
        .post(
            "/v1/embeddings",
            &json!({"model": "emb", "input": ["hello world", "second text"], "x_extra": {"k": 1}, "user": "end-user-7"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let vecs = check_list(&v, "emb", 2);
    assert_eq!(floats(&vecs[0]), embedding_for("hello world", 8));
    assert_eq!(floats(&vecs[1]), embedding_for("second text", 8));
    assert_eq!(v["usage"]["prompt_tokens"], 4, "the upstream's count");

    let r = env
        .post(
            "/v1/embeddings",
            &json!({"model": "emb", "input": "one text", "encoding_format": "base64", "dimensions": 5}),
        )
        .await;
    let v: Value = r.json().await.unwrap();
    let vecs = check_list(&v, "emb", 1);
    assert_eq!(from_base64(&vecs[0]), embedding_for("one text", 5));

    let seen = env.stub.requests_for_model("up-emb");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/v1/embeddings");
    assert_eq!(
        seen[0].body,
        json!({"model": "up-emb", "input": ["hello world", "second text"], "x_extra": {"k": 1}, "user": "end-user-7"})
    );
    assert_eq!(
        seen[1].body,
        json!({"model": "up-emb", "input": "one text", "encoding_format": "base64", "dimensions": 5})
    );
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-upstream"));
}

#[tokio::test]
async fn tei_embeddings_send_inputs_and_the_gateway_encodes_base64() {
    let env = env().await;
    env.model("emb-tei", "embeddings", "tei", "bge-small").await;
    let v: Value = env
        .post(
            "/v1/embeddings",
            &json!({"model": "emb-tei", "input": ["alpha", "beta gamma"], "dimensions": 6}),
        )
        .await
        .json()
        .await
        .unwrap();
    let vecs = check_list(&v, "emb-tei", 2);
    assert_eq!(floats(&vecs[1]), embedding_for("beta gamma", 6));
    // TEI reports no usage: one token per four characters, rounded up, per text.
    assert_eq!(v["usage"]["prompt_tokens"], 2 + 3);

    let v: Value = env
        .post(
            "/v1/embeddings",
            &json!({"model": "emb-tei", "input": "alpha", "encoding_format": "base64"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let vecs = check_list(&v, "emb-tei", 1);
    assert_eq!(from_base64(&vecs[0]), embedding_for("alpha", 8));

    let seen = env.stub.requests_for_model(TEI_SCRIPT_KEY);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/embed");
    assert_eq!(
        seen[0].body,
        json!({"inputs": ["alpha", "beta gamma"], "dimensions": 6})
    );
    assert_eq!(seen[1].body, json!({"inputs": ["alpha"]}));
}

#[tokio::test]
async fn cohere_embeddings_ask_for_float_documents_and_report_billed_tokens() {
    let env = env().await;
    env.model("emb-co", "embeddings", "cohere", "embed-v4.0")
        .await;
    let v: Value = env
        .post(
            "/v1/embeddings",
            &json!({"model": "emb-co", "input": ["a b c", "d"], "dimensions": 4, "encoding_format": "base64"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let vecs = check_list(&v, "emb-co", 2);
    assert_eq!(from_base64(&vecs[0]), embedding_for("a b c", 4));
    assert_eq!(from_base64(&vecs[1]), embedding_for("d", 4));
    assert_eq!(
        v["usage"]["prompt_tokens"], 4,
        "meta.billed_units.input_tokens"
    );

    let seen = env.stub.requests_for_model("embed-v4.0");
    assert_eq!(seen[0].path, "/v2/embed");
    assert_eq!(
        seen[0].body,
        json!({"model": "embed-v4.0", "texts": ["a b c", "d"], "input_type": "search_document",
               "embedding_types": ["float"], "output_dimension": 4})
    );
    assert_eq!(seen[0].header("authorization"), Some("Bearer co-key"));
}

#[tokio::test]
async fn embeddings_refuse_empty_or_non_string_input() {
    let env = env().await;
    env.model("emb", "embeddings", "openai", "up-emb").await;
    for input in [
        json!(""),
        json!([]),
        json!(["ok", 1]),
        json!(["ok", ""]),
        json!([[1, 2, 3]]),
        json!(null),
        json!({"text": "x"}),
    ] {
        let (s, e) = v1_error(
            env.post("/v1/embeddings", &json!({"model": "emb", "input": input}))
                .await,
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{input}");
        assert_eq!(e["code"], "validation_error", "{input}");
        assert_eq!(e["param"], "input", "{input}");
    }
    for (field, value) in [("encoding_format", json!("int8")), ("dimensions", json!(0))] {
        let mut body = json!({"model": "emb", "input": "x"});
        body[field] = value;
        let (s, e) = v1_error(env.post("/v1/embeddings", &body).await).await;
        assert_eq!(
            (s, e["param"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field))
        );
    }
    assert!(env.stub.requests().is_empty());
}

#[tokio::test]
async fn embeddings_and_rerank_refuse_models_of_other_kinds_with_advice() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    env.model("emb", "embeddings", "openai", "up-emb").await;
    env.model("rr", "scoring", "openai", "up-rr").await;
    let embed = |m: &str| json!({"model": m, "input": "x"});
    let rerank = |m: &str| json!({"model": m, "query": "q", "documents": ["d"]});
    for (path, body, advice) in [
        (
            "/v1/embeddings",
            embed("chat"),
            "is a chat model: send it to /v1/chat/completions",
        ),
        (
            "/v1/embeddings",
            embed("rr"),
            "is a scoring (rerank) model: send it to /v1/rerank",
        ),
        (
            "/v1/rerank",
            rerank("chat"),
            "is a chat model: send it to /v1/chat/completions",
        ),
        (
            "/v1/rerank",
            rerank("emb"),
            "is an embeddings model: send it to /v1/embeddings",
        ),
    ] {
        let (s, e) = v1_error(env.post(path, &body).await).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path} {body}");
        assert_eq!(e["code"], "model_kind_mismatch");
        assert_eq!(e["param"], "model");
        assert!(e["message"].as_str().unwrap().contains(advice), "{e}");
    }
    for (path, body) in [
        ("/v1/embeddings", embed("nope")),
        ("/v1/rerank", rerank("nope")),
    ] {
        let (s, e) = v1_error(env.post(path, &body).await).await;
        assert_eq!(
            (s, e["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("model_not_found"))
        );
    }
    for (path, body) in [
        ("/v1/embeddings", json!({"model": 1, "input": "x"})),
        ("/v1/rerank", json!({"query": "q", "documents": ["d"]})),
    ] {
        let (s, e) = v1_error(env.post(path, &body).await).await;
        assert_eq!(
            (s, e["param"].as_str()),
            (StatusCode::BAD_REQUEST, Some("model"))
        );
    }
    let limited = env
        .app
        .api_key(&env.admin, json!({"name": "l", "models": ["chat"]}))
        .await;
    for (path, body) in [
        ("/v1/embeddings", embed("emb")),
        ("/v1/rerank", rerank("rr")),
    ] {
        let (s, e) = v1_error(env.post_with(path, &limited, &body).await).await;
        assert_eq!(
            (s, e["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("model_not_allowed"))
        );
    }
    assert!(env.stub.requests().is_empty());
}

const QUERY: &str = "red fox";

fn documents() -> Value {
    json!(["the red fox jumps", "a red car", "blue whale", {"text": "red fox"}, "fox"])
}

fn doc_texts() -> Vec<&'static str> {
    vec![
        "the red fox jumps",
        "a red car",
        "blue whale",
        "red fox",
        "fox",
    ]
}

/// (index, score) by falling score, ties by index: what the contract promises.
fn expected_ranking() -> Vec<(usize, f64)> {
    let mut r: Vec<(usize, f64)> = doc_texts()
        .iter()
        .enumerate()
        .map(|(i, d)| (i, score_for(QUERY, d)))
        .collect();
    r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    r
}

#[tokio::test]
async fn rerank_through_every_adapter_sorts_by_falling_score_with_the_clients_text() {
    let env = env().await;
    env.model("rr-openai", "scoring", "openai", "up-rerank")
        .await;
    env.model("rr-tei", "scoring", "tei", "bge-reranker").await;
    env.model("rr-cohere", "scoring", "cohere", "rerank-v3.5")
        .await;
    let texts = doc_texts();
    for model in ["rr-openai", "rr-tei", "rr-cohere"] {
        let r = env
            .post(
                "/v1/rerank",
                &json!({"model": model, "query": QUERY, "documents": documents()}),
            )
            .await;
        assert_eq!(r.status(), 200, "{model}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["model"], model);
        assert!(v["id"].as_str().is_some_and(|s| !s.is_empty()));
        let results = v["results"].as_array().unwrap();
        let got: Vec<(usize, f64)> = results
            .iter()
            .map(|r| {
                (
                    r["index"].as_u64().unwrap() as usize,
                    r["relevance_score"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, expected_ranking(), "{model}");
        for r in results {
            let i = r["index"].as_u64().unwrap() as usize;
            assert_eq!(r["document"], json!({"text": texts[i]}), "{model}");
        }
        let u = &v["usage"];
        assert!(u["prompt_tokens"].as_i64().unwrap() >= 1);
        assert_eq!(u["prompt_tokens"], u["total_tokens"]);
        // Cohere's fields as well, for clients that read them (the Vercel AI
        // SDK's Cohere and Together providers).
        assert_eq!(u["completion_tokens"], 0, "{model}");
        assert_eq!(
            v["meta"],
            json!({"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}),
            "{model}"
        );
    }
    let plain: Vec<Value> = texts.iter().map(|t| json!(t)).collect();
    let openai = &env.stub.requests_for_model("up-rerank")[0];
    assert_eq!(openai.path, "/v1/rerank");
    assert_eq!(
        openai.body,
        json!({"model": "up-rerank", "query": QUERY, "documents": plain})
    );
    let tei = &env.stub.requests_for_model(TEI_SCRIPT_KEY)[0];
    assert_eq!(tei.path, "/rerank");
    assert_eq!(
        tei.body,
        json!({"query": QUERY, "texts": plain, "raw_scores": false, "return_text": false})
    );
    let cohere = &env.stub.requests_for_model("rerank-v3.5")[0];
    assert_eq!(cohere.path, "/v2/rerank");
    assert_eq!(
        cohere.body,
        json!({"model": "rerank-v3.5", "query": QUERY, "documents": plain})
    );
}

#[tokio::test]
async fn rerank_cuts_at_top_n_and_leaves_documents_out_on_request() {
    let env = env().await;
    env.model("rr-openai", "scoring", "openai", "up-rerank")
        .await;
    env.model("rr-tei", "scoring", "tei", "bge-reranker").await;
    env.model("rr-cohere", "scoring", "cohere", "rerank-v3.5")
        .await;
    for model in ["rr-openai", "rr-tei", "rr-cohere"] {
        let v: Value = env
            .post(
                "/v1/rerank",
                &json!({"model": model, "query": QUERY, "documents": documents(),
                        "top_n": 2, "return_documents": false, "x_unknown": 1}),
            )
            .await
            .json()
            .await
            .unwrap();
        let results = v["results"].as_array().unwrap();
        let got: Vec<usize> = results
            .iter()
            .map(|r| r["index"].as_u64().unwrap() as usize)
            .collect();
        let want: Vec<usize> = expected_ranking().iter().take(2).map(|r| r.0).collect();
        assert_eq!(got, want, "{model}");
        assert!(
            results.iter().all(|r| r.get("document").is_none()),
            "{model}: {v}"
        );
        // More than there are: all of them.
        let v: Value = env
            .post(
                "/v1/rerank",
                &json!({"model": model, "query": QUERY, "documents": documents(), "top_n": 50}),
            )
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["results"].as_array().unwrap().len(), 5, "{model}");
    }
    // OpenAI-compatible upstreams get top_n and unknown fields; Cohere top_n only.
    let openai = &env.stub.requests_for_model("up-rerank")[0];
    assert_eq!(openai.body["top_n"], 2);
    assert_eq!(openai.body["x_unknown"], 1);
    assert!(openai.body.get("return_documents").is_none());
    let cohere = &env.stub.requests_for_model("rerank-v3.5")[0];
    assert_eq!(cohere.body["top_n"], 2);
    assert!(cohere.body.get("x_unknown").is_none());
}

#[tokio::test]
async fn rerank_refuses_bad_bodies() {
    let env = env().await;
    env.model("rr", "scoring", "openai", "up-rr").await;
    let docs = json!(["a", "b"]);
    for (body, param) in [
        (json!({"query": "q", "documents": []}), "documents"),
        (json!({"query": "q"}), "documents"),
        (json!({"query": "q", "documents": "a"}), "documents"),
        (json!({"query": "q", "documents": ["a", 3]}), "documents"),
        (
            json!({"query": "q", "documents": [{"content": "a"}]}),
            "documents",
        ),
        (json!({"query": "", "documents": docs}), "query"),
        (json!({"documents": docs}), "query"),
        (json!({"query": ["q"], "documents": docs}), "query"),
        (
            json!({"query": "q", "documents": docs, "top_n": 0}),
            "top_n",
        ),
        (
            json!({"query": "q", "documents": docs, "top_n": -2}),
            "top_n",
        ),
        (
            json!({"query": "q", "documents": docs, "top_n": 1.5}),
            "top_n",
        ),
        (
            json!({"query": "q", "documents": docs, "return_documents": "yes"}),
            "return_documents",
        ),
    ] {
        let mut body = body;
        body["model"] = json!("rr");
        let (s, e) = v1_error(env.post("/v1/rerank", &body).await).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(e["code"], "validation_error", "{body}");
        assert_eq!(e["param"], param, "{body}");
    }
    assert!(env.stub.requests().is_empty());
}

#[tokio::test]
async fn retrieval_upstream_failures_map_to_the_contracts_errors() {
    let env = env().await;
    env.model("emb-tei", "embeddings", "tei", "bge").await;
    env.model("rr-co", "scoring", "cohere", "co-fail").await;
    env.model("emb-g", "embeddings", "openai", "up-garbage")
        .await;
    env.provider("dead", "tei", "http://127.0.0.1:9", None, 5)
        .await;
    env.model("emb-dead", "embeddings", "dead", "x").await;
    env.provider("slow", "openai", &env.stub.openai_base_url(), None, 1)
        .await;
    env.model("rr-slow", "scoring", "slow", "up-hang").await;

    env.stub.script(
        TEI_SCRIPT_KEY,
        Script {
            status: Some(429),
            error_message: Some("Model is overloaded".into()),
            ..Script::default()
        },
    );
    env.stub.script(
        "co-fail",
        Script {
            status: Some(400),
            error_message: Some("invalid request: too many documents".into()),
            ..Script::default()
        },
    );
    env.stub.script(
        "up-garbage",
        Script {
            garbage: true,
            ..Script::default()
        },
    );
    env.stub.script(
        "up-hang",
        Script {
            hang: true,
            ..Script::default()
        },
    );
    let embed = |m: &str| json!({"model": m, "input": "x"});
    let rerank = |m: &str| json!({"model": m, "query": "q", "documents": ["d"]});

    let (s, e) = v1_error(env.post("/v1/embeddings", &embed("emb-tei")).await).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        (e["code"].as_str(), e["message"].as_str()),
        (Some("upstream_error"), Some("Model is overloaded"))
    );
    let (s, e) = v1_error(env.post("/v1/rerank", &rerank("rr-co")).await).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        (e["code"].as_str(), e["message"].as_str()),
        (
            Some("upstream_error"),
            Some("invalid request: too many documents")
        )
    );
    let (s, e) = v1_error(env.post("/v1/embeddings", &embed("emb-g")).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("upstream_error"))
    );
    let (s, e) = v1_error(env.post("/v1/embeddings", &embed("emb-dead")).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("upstream_unavailable"))
    );
    let (s, e) = v1_error(env.post("/v1/rerank", &rerank("rr-slow")).await).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::GATEWAY_TIMEOUT, Some("upstream_timeout"))
    );
}

#[tokio::test]
async fn usage_totals_count_every_request_by_model_and_user_with_errors() {
    let env = env().await;
    env.model("chat", "chat", "openai", "up-chat").await;
    env.model("emb", "embeddings", "openai", "up-emb").await;
    env.stub.script(
        "up-chat",
        Script {
            content: Some("fine".into()),
            usage: Some((5, 2)),
            ..Script::default()
        },
    );
    let (_, user_token) = env.app.user("second@example.com").await;
    let user_key = env.app.api_key(&user_token, json!({"name": "u"})).await;
    let chat = json!({"model": "chat", "messages": [{"role": "user", "content": "x"}]});

    // admin: 2 chats, 1 embedding; second user: 1 chat, 1 chat failing upstream.
    assert_eq!(env.post("/v1/chat/completions", &chat).await.status(), 200);
    assert_eq!(env.post("/v1/chat/completions", &chat).await.status(), 200);
    let r = env
        .post(
            "/v1/embeddings",
            &json!({"model": "emb", "input": ["a b", "c"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = env
        .post_with("/v1/chat/completions", &user_key, &chat)
        .await;
    assert_eq!(r.status(), 200);
    env.stub.script("up-chat", Script::status(503));
    let r = env
        .post_with("/v1/chat/completions", &user_key, &chat)
        .await;
    assert_eq!(r.status(), 503);
    // A request refused before the upstream counts too (bad input: 400).
    let r = env
        .post_with(
            "/v1/embeddings",
            &user_key,
            &json!({"model": "emb", "input": []}),
        )
        .await;
    assert_eq!(r.status(), 400);

    let chat_row = wait_usage(&env, "model", "chat", 4).await;
    assert_eq!(
        chat_row,
        json!({"key": "chat", "requests": 4, "prompt_tokens": 15, "completion_tokens": 6, "errors": 1,
               "cost": "0.000000000", "currency": "USD", "unpriced_requests": 3})
    );
    let emb_row = wait_usage(&env, "model", "emb", 2).await;
    assert_eq!(
        emb_row,
        json!({"key": "emb", "requests": 2, "prompt_tokens": 3, "completion_tokens": 0, "errors": 1,
               "cost": "0.000000000", "currency": "USD", "unpriced_requests": 1})
    );
    let admin_row = wait_usage(&env, "user", common::ADMIN_EMAIL, 3).await;
    assert_eq!(admin_row["errors"], 0);
    assert_eq!(admin_row["prompt_tokens"], 13);
    let user_row = wait_usage(&env, "user", "second@example.com", 3).await;
    assert_eq!(user_row["errors"], 2);
    assert_eq!(user_row["completion_tokens"], 2);

    // Default grouping is by model; a window in the future is empty; no agents here.
    let rows: Vec<Value> = env
        .app
        .get("/api/admin/usage", &env.admin)
        .await
        .json()
        .await
        .unwrap();
    let keys: Vec<&str> = rows.iter().filter_map(|r| r["key"].as_str()).collect();
    assert_eq!(keys, ["chat", "emb"]);
    let rows: Vec<Value> = env
        .app
        .get(
            "/api/admin/usage?from=2999-01-01T00:00:00Z&group_by=model",
            &env.admin,
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(rows.is_empty());
    let rows: Vec<Value> = env
        .app
        .get(
            "/api/admin/usage?from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z&group_by=agent",
            &env.admin,
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(rows.is_empty());
}

#[tokio::test]
async fn usage_totals_refuse_bad_parameters_and_non_admins() {
    let env = env().await;
    for q in [
        "group_by=day",
        "from=yesterday",
        "to=2026-02-30T00:00:00Z",
        "from=2026-02-02T00:00:00Z&to=2026-02-01T00:00:00Z",
    ] {
        let r = env
            .app
            .get(&format!("/api/admin/usage?{q}"), &env.admin)
            .await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{q}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["detail"]["code"], "validation_error", "{q}");
    }
    let (_, token) = env.app.user("plain@example.com").await;
    let r = env.app.get("/api/admin/usage", &token).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["detail"]["code"], "forbidden");
}
