//! Scripts common to every route, recording, the `/_stub` HTTP control API,
//! shutdown and the binary.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use gatehouse_stub_upstream::{Recorded, Script, Stub, StubOptions};
use serde_json::{json, Value};

#[tokio::test]
async fn status_script_answers_openai_error_body() {
    let stub = Stub::start().await;
    stub.script(
        "down",
        Script {
            status: Some(503),
            error_message: Some("overloaded".into()),
            ..Script::default()
        },
    );
    let (status, v) = post(
        &format!("{}/chat/completions", stub.openai_base_url()),
        json!({"model": "down", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(
        v,
        json!({"error": {"message": "overloaded", "type": "server_error", "param": null, "code": null}})
    );
    let (status, v) = post(
        &format!("{}/embeddings", stub.openai_base_url()),
        json!({"model": "down", "input": "x"}),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(v["error"]["message"], "overloaded");
    // other models are unaffected
    let (status, _) = post(
        &format!("{}/embeddings", stub.openai_base_url()),
        json!({"model": "up", "input": "x"}),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn hang_script_never_answers_so_client_times_out() {
    let stub = Stub::start().await;
    stub.script(
        "hang",
        Script {
            hang: true,
            ..Script::default()
        },
    );
    let c = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = c
        .post(format!("{}/chat/completions", stub.openai_base_url()))
        .json(&json!({"model": "hang", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(300));
    // the request was still received and recorded
    assert_eq!(stub.requests_for_model("hang").len(), 1);
}

#[tokio::test]
async fn delay_script_waits_before_answering() {
    let stub = Stub::start().await;
    stub.script(
        "slow",
        Script {
            delay_ms: 300,
            ..Script::default()
        },
    );
    let start = Instant::now();
    let (status, _) = post(
        &format!("{}/v2/embed", stub.url()),
        json!({"model": "slow", "texts": ["a"], "input_type": "search_query"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn garbage_script_answers_200_non_json() {
    let stub = Stub::start().await;
    stub.script(
        "junk",
        Script {
            garbage: true,
            ..Script::default()
        },
    );
    for (url, body) in [
        (
            format!("{}/chat/completions", stub.openai_base_url()),
            json!({"model": "junk", "messages": [{"role": "user", "content": "x"}]}),
        ),
        (
            format!("{}/rerank", stub.openai_base_url()),
            json!({"model": "junk", "query": "q", "documents": ["d"]}),
        ),
    ] {
        let resp = client().post(url).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        assert_eq!(text, "this is not json");
        assert!(serde_json::from_str::<Value>(&text).is_err());
    }
}

#[tokio::test]
async fn requests_are_recorded_in_order_with_headers_and_bodies() {
    let stub = Stub::start().await;
    client()
        .post(format!("{}/embeddings", stub.openai_base_url()))
        .header("Authorization", "Bearer sk-upstream")
        .header("X-Custom", "1")
        .header("content-type", "application/json")
        .body(r#"{"model": "rec-a", "input": "x"}"#)
        .send()
        .await
        .unwrap();
    client()
        .post(format!("{}/rerank", stub.url()))
        .body("not json at all")
        .send()
        .await
        .unwrap();
    client()
        .post(format!("{}/v2/rerank", stub.url()))
        .json(&json!({"model": "rec-b", "query": "q", "documents": ["d"]}))
        .send()
        .await
        .unwrap();
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 3);
    let r0: &Recorded = &reqs[0];
    assert_eq!(r0.method, "POST");
    assert_eq!(r0.path, "/v1/embeddings");
    assert_eq!(r0.headers["authorization"], "Bearer sk-upstream");
    assert_eq!(r0.header("X-Custom"), Some("1"));
    assert_eq!(r0.body, json!({"model": "rec-a", "input": "x"}));
    assert_eq!(r0.raw_body, r#"{"model": "rec-a", "input": "x"}"#);
    assert_eq!(r0.headers["content-type"], "application/json");
    assert_eq!(reqs[1].path, "/rerank");
    assert_eq!(reqs[1].body, Value::Null);
    assert_eq!(reqs[1].raw_body, "not json at all");
    assert_eq!(reqs[2].path, "/v2/rerank");

    assert_eq!(stub.requests_for_model("rec-b").len(), 1);
    assert_eq!(stub.requests_for_model("rec-b")[0].path, "/v2/rerank");
    assert!(stub.requests_for_model("nope").is_empty());

    stub.clear();
    assert!(stub.requests().is_empty());
    assert_eq!(stub.stats().requests, 3);
}

#[tokio::test]
async fn no_record_option_records_nothing_but_counts() {
    let stub = Stub::start_with(StubOptions {
        record: false,
        listen: None,
    })
    .await;
    let (status, _) = post(
        &format!("{}/embeddings", stub.openai_base_url()),
        json!({"model": "m", "input": "x"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(stub.requests().is_empty());
    assert_eq!(stub.stats().requests, 1);
}

#[tokio::test]
async fn http_control_api_scripts_lists_clears_and_reports_stats() {
    let stub = Stub::start().await;
    let c = client();
    let resp = c
        .post(format!("{}/_stub/script", stub.url()))
        .json(&json!({"model": "py-model", "script": {"content": "from python", "usage": [3, 4]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (_, v) = post(
        &format!("{}/chat/completions", stub.openai_base_url()),
        json!({"model": "py-model", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(v["choices"][0]["message"]["content"], "from python");
    assert_eq!(v["usage"]["total_tokens"], 7);
    post(
        &format!("{}/embeddings", stub.openai_base_url()),
        json!({"model": "other", "input": "x"}),
    )
    .await;

    let reqs: Vec<Recorded> = c
        .get(format!("{}/_stub/requests", stub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reqs.len(), 2, "control calls are not recorded");
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    let only: Vec<Recorded> = c
        .get(format!("{}/_stub/requests?model=other", stub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].path, "/v1/embeddings");

    let stats: Value = c
        .get(format!("{}/_stub/stats", stub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        stats,
        json!({"cancelled_streams": 0, "completed_streams": 0, "requests": 2})
    );

    let resp = c
        .delete(format!("{}/_stub/requests", stub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(stub.requests().is_empty());

    // a null script removes it; a malformed one is rejected
    c.post(format!("{}/_stub/script", stub.url()))
        .json(&json!({"model": "py-model", "script": null}))
        .send()
        .await
        .unwrap();
    let (_, v) = post(
        &format!("{}/chat/completions", stub.openai_base_url()),
        json!({"model": "py-model", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(v["choices"][0]["message"]["content"], "echo: x");
    let resp = c
        .post(format!("{}/_stub/script", stub.url()))
        .json(&json!({"model": "m", "script": {"delay_ms": "soon"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn unknown_route_is_404_and_wrong_method_is_405() {
    let stub = Stub::start().await;
    let resp = client()
        .post(format!("{}/v1/nope", stub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = client()
        .get(format!("{}/chat/completions", stub.openai_base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    let resp = client()
        .get(format!("{}/health", stub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn urls_point_at_the_listening_address() {
    let stub = Stub::start().await;
    let addr = stub.addr();
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0);
    assert_eq!(stub.url(), format!("http://127.0.0.1:{}", addr.port()));
    assert_eq!(
        stub.openai_base_url(),
        format!("http://127.0.0.1:{}/v1", addr.port())
    );
}

#[tokio::test]
async fn shutdown_releases_hanging_requests_and_stops_listening() {
    let stub = Stub::start().await;
    stub.script(
        "hang",
        Script {
            hang: true,
            ..Script::default()
        },
    );
    let url = format!("{}/chat/completions", stub.openai_base_url());
    let pending = tokio::spawn(async move {
        client()
            .post(url)
            .json(&json!({"model": "hang", "messages": [{"role": "user", "content": "x"}]}))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    assert!(wait_until(|| stub.requests().len() == 1).await);
    let base = stub.url();
    tokio::time::timeout(Duration::from_secs(5), stub.shutdown())
        .await
        .expect("shutdown finishes");
    let status = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("hanging request released")
        .unwrap();
    assert_eq!(status.ok(), Some(503));
    assert!(client().get(format!("{base}/health")).send().await.is_err());
}

#[test]
fn binary_prints_listen_address_and_serves() {
    /// Kills the child even when an assertion fails.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_stub-upstream"))
            .args(["--listen", "127.0.0.1:0", "--no-record"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let (status, v) = post(
            &format!("{url}/v1/chat/completions"),
            json!({"model": "m", "messages": [{"role": "user", "content": "ping"}]}),
        )
        .await;
        let stats: Value = client()
            .get(format!("{url}/_stub/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let reqs: Value = client()
            .get(format!("{url}/_stub/requests"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (status, v, stats, reqs)
    });
    drop(child);
    let (status, v, stats, reqs) = result;
    assert_eq!(status, 200);
    assert_eq!(v["choices"][0]["message"]["content"], "echo: ping");
    assert_eq!(stats["requests"], 1);
    assert_eq!(reqs, json!([]), "--no-record records nothing");
}
