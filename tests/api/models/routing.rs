//! Upstream routing end to end: a real gateway with models spread over
//! several stub upstreams; retries, fallbacks, rests and trials, the admin
//! API and TOML form, headers, usage records and metrics.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::models::{payloads, poll, sse_events, v1_error};
use gatehouse_stub_upstream::{Script, Stub, StubOptions, TEI_SCRIPT_KEY};
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use common::{api_code, spawn_app_with, TestApp};

/// A gateway and `n` stub upstreams, each registered as an openai provider
/// `s0`, `s1`, ... (and `tei0`, ... for TEI) with `timeout_s`.
struct Fleet {
    app: TestApp,
    stubs: Vec<Option<Stub>>,
    addrs: Vec<std::net::SocketAddr>,
    admin: String,
    key: String,
}

async fn fleet(n: usize, timeout_s: u64) -> Fleet {
    fleet_with(n, timeout_s, |_| {}).await
}

async fn fleet_with(
    n: usize,
    timeout_s: u64,
    f: impl FnOnce(&mut gatehouse::config::Settings),
) -> Fleet {
    let app = spawn_app_with(f).await;
    let admin = app.admin_token().await;
    let key = app.api_key(&admin, json!({"name": "backend"})).await;
    let mut stubs = vec![];
    let mut addrs = vec![];
    for i in 0..n {
        let stub = Stub::start().await;
        for (name, kind, url) in [
            (format!("s{i}"), "openai", stub.openai_base_url()),
            (format!("tei{i}"), "tei", stub.url()),
        ] {
            let r = app
                .post(
                    "/api/admin/providers",
                    &admin,
                    &json!({"name": name, "type": kind, "base_url": url, "timeout_s": timeout_s}),
                )
                .await;
            assert_eq!(r.status(), StatusCode::CREATED, "provider {name}");
        }
        addrs.push(stub.addr());
        stubs.push(Some(stub));
    }
    Fleet {
        app,
        stubs,
        addrs,
        admin,
        key,
    }
}

fn targets(list: &[(&str, &str, i64)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(p, m, w)| json!({"provider": p, "upstream_model": m, "weight": w}))
            .collect(),
    )
}

fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hello"}]})
}

fn header(r: &Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("<none>")
        .to_string()
}

impl Fleet {
    fn stub(&self, i: usize) -> &Stub {
        self.stubs[i].as_ref().expect("stub running")
    }

    /// Requests stub `i` received for `upstream`.
    fn seen(&self, i: usize, upstream: &str) -> usize {
        self.stub(i).requests_for_model(upstream).len()
    }

    async fn create(&self, body: Value) -> Response {
        self.app.post("/api/admin/models", &self.admin, &body).await
    }

    async fn create_ok(&self, body: Value) {
        let r = self.create(body.clone()).await;
        assert_eq!(r.status(), StatusCode::CREATED, "{body}");
    }

    async fn chat(&self, model: &str, stream: bool) -> Response {
        self.app
            .post("/v1/chat/completions", &self.key, &chat_body(model, stream))
            .await
    }

    async fn model_view(&self, id: &str) -> Value {
        let r = self
            .app
            .get(&format!("/api/admin/models/{id}"), &self.admin)
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.expect("json")
    }

    /// The state of the target on `provider` in `GET /api/admin/models/{id}`.
    async fn target_state(&self, id: &str, provider: &str) -> Value {
        let v = self.model_view(id).await;
        v["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .find(|t| t["provider"] == provider)
            .cloned()
            .expect("the target")
    }

    /// An agent on `model` and the access token of a device signed in to it.
    async fn agent_token(&self, address: &str, model: &str) -> String {
        let r = self
            .app
            .post(
                "/api/admin/agents",
                &self.admin,
                &json!({"address": address, "name": address, "model": model}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED);
        let (_, login) = self.app.user(&format!("{address}@example.com")).await;
        let r = self
            .app
            .post(
                "/api/agent-tokens",
                &login,
                &json!({"agent": address, "device_label": "laptop"}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED);
        let v: Value = r.json().await.expect("json");
        v["access_token"].as_str().expect("token").to_string()
    }

    async fn agent_chat(&self, address: &str, token: &str, stream: bool) -> Response {
        self.app
            .post(
                &format!("/v1/agents/{address}/chat/completions"),
                token,
                &json!({"stream": stream, "messages": [{"role": "user", "content": "hello"}]}),
            )
            .await
    }

    async fn embed(&self, model: &str) -> Response {
        self.app
            .post(
                "/v1/embeddings",
                &self.key,
                &json!({"model": model, "input": ["a", "b"]}),
            )
            .await
    }

    async fn rerank(&self, model: &str) -> Response {
        self.app
            .post(
                "/v1/rerank",
                &self.key,
                &json!({"model": model, "query": "q", "documents": ["x", "y"]}),
            )
            .await
    }

    async fn metrics(&self) -> String {
        let r = self.app.client.get(self.app.u("/metrics")).send().await;
        r.expect("metrics").text().await.expect("text")
    }

    /// (model, provider, status) of every usage record, oldest first.
    async fn usage(&self, expect: usize) -> Vec<(String, Option<String>, i64)> {
        let pool = self.app.app().store.pool.clone();
        poll(10, || {
            let pool = pool.clone();
            async move {
                let rows: Vec<(String, Option<String>, i64)> = sqlx::query_as(
                    "SELECT model, provider, status FROM usage_records ORDER BY at, id",
                )
                .fetch_all(&pool)
                .await
                .ok()?;
                (rows.len() >= expect).then_some(rows)
            }
        })
        .await
    }
}

fn hang() -> Script {
    Script {
        hang: true,
        ..Script::default()
    }
}

// ---------------------------------------------------------------- admin form

#[tokio::test]
async fn a_model_with_several_targets_is_shown_with_each_targets_state() {
    let f = fleet(3, 5).await;
    f.create_ok(json!({"id": "llama", "kind": "chat",
        "targets": targets(&[("s0", "l", 2), ("s1", "l", 1), ("s2", "l2", 1)]),
        "routing": "least_busy", "max_attempts": 4}))
        .await;
    let v = f.model_view("llama").await;
    assert_eq!(v["routing"], "least_busy");
    assert_eq!(v["max_attempts"], 4);
    assert_eq!(v["fallbacks"], json!([]));
    let ts = v["targets"].as_array().expect("targets");
    assert_eq!(ts.len(), 3);
    assert_eq!(
        ts[0],
        json!({"provider": "s0", "upstream_model": "l", "weight": 2, "healthy": true,
               "in_flight": 0, "failures": 0, "resting_until": null})
    );
    assert_eq!(ts[2]["upstream_model"], "l2");
}

#[tokio::test]
async fn the_one_target_form_still_works_and_means_one_target() {
    let f = fleet(1, 5).await;
    f.create_ok(json!({"id": "one", "kind": "chat", "provider": "s0", "upstream_model": "u1"}))
        .await;
    let v = f.model_view("one").await;
    assert_eq!(v["provider"], "s0");
    assert_eq!(v["upstream_model"], "u1");
    assert_eq!(v["routing"], "weighted");
    assert_eq!(v["max_attempts"], 3);
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(1));
    let r = f.chat("one", false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "s0");
    assert_eq!(header(&r, "x-gatehouse-attempts"), "1");
}

#[tokio::test]
async fn a_target_on_an_unknown_provider_is_a_validation_error() {
    let f = fleet(1, 5).await;
    let r = f
        .create(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "l", 1), ("ghost", "l", 1)])}))
        .await;
    let s = r.status();
    let v: Value = r.json().await.expect("json");
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["detail"]["code"], "validation_error");
    assert!(v["detail"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("ghost"));
    assert_eq!(
        f.app.get("/api/admin/models/m", &f.admin).await.status(),
        404
    );
}

#[tokio::test]
async fn weights_of_zero_or_below_are_refused() {
    let f = fleet(1, 5).await;
    for w in [0, -1, -50] {
        let r = f
            .create(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "l", w)])}))
            .await;
        assert_eq!(
            api_code(r).await,
            (StatusCode::BAD_REQUEST, "validation_error".into()),
            "weight {w}"
        );
    }
    // Not a whole number either.
    let r = f
        .create(json!({"id": "m", "kind": "chat", "targets": [{"provider": "s0", "upstream_model": "l", "weight": 1.5}]}))
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_fallback_of_another_kind_is_a_kind_mismatch() {
    let f = fleet(1, 5).await;
    f.create_ok(
        json!({"id": "emb", "kind": "embeddings", "provider": "s0", "upstream_model": "e"}),
    )
    .await;
    let r = f
        .create(json!({"id": "chat", "kind": "chat", "provider": "s0", "upstream_model": "c", "fallbacks": ["emb"]}))
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "model_kind_mismatch".into())
    );
    let r = f
        .create(json!({"id": "chat", "kind": "chat", "provider": "s0", "upstream_model": "c", "fallbacks": ["nothing"]}))
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::BAD_REQUEST, "validation_error".into())
    );
}

#[tokio::test]
async fn max_attempts_and_routing_are_checked() {
    let f = fleet(1, 5).await;
    for bad in [
        json!({"max_attempts": 0}),
        json!({"max_attempts": 11}),
        json!({"routing": "round_robin"}),
        json!({"targets": []}),
    ] {
        let mut body = json!({"id": "m", "kind": "chat", "provider": "s0", "upstream_model": "l"});
        for (k, v) in bad.as_object().expect("object") {
            body[k] = v.clone();
        }
        if bad.get("targets").is_some() {
            body.as_object_mut().map(|o| {
                o.remove("provider");
                o.remove("upstream_model")
            });
        }
        assert_eq!(
            api_code(f.create(body).await).await,
            (StatusCode::BAD_REQUEST, "validation_error".into()),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn patch_changes_targets_routing_and_fallbacks_and_validates_them() {
    let f = fleet(2, 5).await;
    f.create_ok(json!({"id": "fb", "kind": "chat", "provider": "s1", "upstream_model": "f"}))
        .await;
    f.create_ok(
        json!({"id": "emb", "kind": "embeddings", "provider": "s1", "upstream_model": "e"}),
    )
    .await;
    f.create_ok(json!({"id": "m", "kind": "chat", "provider": "s0", "upstream_model": "a"}))
        .await;
    let r = f
        .app
        .patch(
            "/api/admin/models/m",
            &f.admin,
            &json!({"targets": targets(&[("s0", "a", 1), ("s1", "a", 3)]), "routing": "least_busy", "fallbacks": ["fb"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["routing"], "least_busy");
    assert_eq!(v["fallbacks"], json!(["fb"]));
    // The catalog follows at once.
    let _ = poll(5, || async {
        let r = f.chat("m", false).await;
        (r.status() == 200).then_some(())
    })
    .await;
    for (bad, code) in [
        (json!({"fallbacks": ["emb"]}), "model_kind_mismatch"),
        (
            json!({"targets": targets(&[("s0", "a", 0)])}),
            "validation_error",
        ),
        (json!({"kind": "embeddings"}), "validation_error"),
        (json!({"provider": "s1"}), "validation_error"),
    ] {
        let r = f.app.patch("/api/admin/models/m", &f.admin, &bad).await;
        assert_eq!(
            api_code(r).await,
            (StatusCode::BAD_REQUEST, code.into()),
            "{bad}"
        );
    }
    let r = f
        .app
        .patch(
            "/api/admin/models/nothing",
            &f.admin,
            &json!({"max_attempts": 2}),
        )
        .await;
    assert_eq!(
        api_code(r).await,
        (StatusCode::NOT_FOUND, "model_not_found".into())
    );
    // The refused patches changed nothing.
    let v = f.model_view("m").await;
    assert_eq!(v["fallbacks"], json!(["fb"]));
    assert_eq!(v["targets"][1]["weight"], 3);
}

#[tokio::test]
async fn providers_and_fallbacks_in_use_cannot_be_deleted() {
    let f = fleet(2, 5).await;
    f.create_ok(json!({"id": "fb", "kind": "chat", "provider": "s1", "upstream_model": "f"}))
        .await;
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "a", 1), ("tei1", "a", 1)]), "fallbacks": ["fb"]}))
        .await;
    // tei1 is only the second target of m.
    assert_eq!(
        api_code(f.app.delete("/api/admin/providers/tei1", &f.admin).await).await,
        (StatusCode::CONFLICT, "provider_in_use".into())
    );
    assert_eq!(
        api_code(f.app.delete("/api/admin/models/fb", &f.admin).await).await,
        (StatusCode::CONFLICT, "model_in_use".into())
    );
    assert_eq!(
        f.app.delete("/api/admin/models/m", &f.admin).await.status(),
        204
    );
    assert_eq!(
        f.app
            .delete("/api/admin/providers/tei1", &f.admin)
            .await
            .status(),
        204
    );
    assert_eq!(
        f.app
            .delete("/api/admin/models/fb", &f.admin)
            .await
            .status(),
        204
    );
}

#[tokio::test]
async fn targets_routing_and_fallbacks_come_from_the_config_file() {
    let s0 = Stub::start().await;
    let s1 = Stub::start().await;
    s0.script("llama", Script::status(503));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[providers]]
name = "vllm-a"
type = "openai"
base_url = "{a}"

[[providers]]
name = "hosted"
type = "openai"
base_url = "{b}"

[[models]]
id = "chat-main"
kind = "chat"
routing = "least_busy"
max_attempts = 2
fallbacks = ["chat-hosted"]
targets = [{{ provider = "vllm-a", upstream_model = "llama", weight = 3 }}]

[[models]]
id = "chat-hosted"
kind = "chat"
provider = "hosted"
upstream_model = "gpt-mini"
"#,
            a = s0.openai_base_url(),
            b = s1.openai_base_url()
        ),
    )
    .expect("write config");
    let p = path.clone();
    let app = spawn_app_with(move |s| s.config_file = Some(p)).await;
    let admin = app.admin_token().await;
    let key = app.api_key(&admin, json!({"name": "k"})).await;
    let r = app
        .post("/v1/chat/completions", &key, &chat_body("chat-main", false))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "hosted");
    assert_eq!(header(&r, "x-gatehouse-attempts"), "2");
    let v: Value = r.json().await.expect("json");
    assert_eq!(
        v["model"], "chat-hosted",
        "a fallback's answer names the fallback"
    );
    let v: Value = app
        .get("/api/admin/models/chat-main", &admin)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["routing"], "least_busy");
    assert_eq!(v["targets"][0]["weight"], 3);
}

#[tokio::test]
async fn a_config_file_with_a_wrong_kind_fallback_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
[[providers]]
name = "p"
type = "openai"
base_url = "http://127.0.0.1:9/v1"

[[models]]
id = "emb"
kind = "embeddings"
provider = "p"
upstream_model = "e"

[[models]]
id = "chat"
kind = "chat"
fallbacks = ["emb"]
targets = [{ provider = "p", upstream_model = "c" }]
"#,
    )
    .expect("write");
    let (db, _d) = common::fresh_database().await;
    let mut s = gatehouse::config::Settings::for_database(&db);
    s.config_file = Some(path);
    let err = gatehouse::start(s).await.err().expect("start must fail");
    assert!(err.to_string().contains("fallbacks"), "{err}");
}

// ---------------------------------------------------------------- retries

#[tokio::test]
async fn weighted_routing_spreads_requests_by_weight() {
    let f = fleet(2, 5).await;
    f.create_ok(
        json!({"id": "w", "kind": "chat", "targets": targets(&[("s0", "u", 1), ("s1", "u", 3)])}),
    )
    .await;
    for _ in 0..120 {
        assert_eq!(f.chat("w", false).await.status(), 200);
    }
    let (a, b) = (f.seen(0, "u"), f.seen(1, "u"));
    assert_eq!(a + b, 120, "one attempt each");
    assert!((60..=110).contains(&b), "s0 {a}, s1 {b}");
}

#[tokio::test]
async fn a_500_is_retried_on_another_target() {
    let f = fleet(2, 5).await;
    f.stub(0).script("u", Script::status(500));
    // The failing target nearly always goes first.
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1000), ("s1", "u", 1)])}))
        .await;
    let mut retried = 0;
    for _ in 0..3 {
        let r = f.chat("m", false).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-gatehouse-provider"), "s1");
        if header(&r, "x-gatehouse-attempts") == "2" {
            retried += 1;
        }
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["model"], "m");
    }
    assert!(retried >= 1);
    assert_eq!(f.seen(0, "u"), retried);
    assert_eq!(f.seen(1, "u"), 3);
}

#[tokio::test]
async fn a_429_is_retried_on_another_target() {
    let f = fleet(2, 5).await;
    f.stub(0).script("u", Script::status(429));
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1000), ("s1", "u", 1)])}))
        .await;
    let r = f.chat("m", true).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "s1");
    let chunks = payloads(&sse_events(r).await);
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    assert!(chunks.iter().all(|c| c.get("error").is_none()));
}

#[tokio::test]
async fn when_every_attempt_fails_the_client_gets_the_last_error() {
    let f = fleet(3, 5).await;
    for i in 0..3 {
        f.stub(i).script("u", Script::status(503));
    }
    f.create_ok(json!({"id": "m", "kind": "chat", "max_attempts": 2,
        "targets": targets(&[("s0", "u", 1), ("s1", "u", 1), ("s2", "u", 1)])}))
        .await;
    let (s, e) = v1_error(f.chat("m", false).await).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(e["code"], "upstream_error");
    assert_eq!(e["message"], "stub error");
    let total: usize = (0..3).map(|i| f.seen(i, "u")).sum();
    assert_eq!(total, 2, "max_attempts caps the attempts");
    // No attempt succeeded: the record names the model asked for, no provider.
    let rows = f.usage(1).await;
    assert_eq!(rows[0], ("m".to_string(), None, 503));
}

#[tokio::test]
async fn a_400_is_never_retried() {
    let f = fleet(2, 5).await;
    for i in 0..2 {
        f.stub(i).script(
            "u",
            Script {
                status: Some(400),
                error_message: Some("bad prompt".into()),
                ..Script::default()
            },
        );
    }
    f.create_ok(
        json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1), ("s1", "u", 1)])}),
    )
    .await;
    for stream in [false, true] {
        let (s, e) = v1_error(f.chat("m", stream).await).await;
        assert_eq!(
            (s, e["message"].as_str()),
            (StatusCode::BAD_REQUEST, Some("bad prompt"))
        );
    }
    assert_eq!(
        f.seen(0, "u") + f.seen(1, "u"),
        2,
        "one attempt per request"
    );
    // A 400 shows the target is alive: it does not count against it.
    let s0 = f.target_state("m", "s0").await;
    assert_eq!(
        (s0["healthy"].as_bool(), s0["failures"].as_i64()),
        (Some(true), Some(0))
    );
}

#[tokio::test]
async fn an_upstream_hanging_before_its_head_times_out_then_the_next_target_answers() {
    let f = fleet(2, 1).await;
    f.stub(0).script("u", hang());
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1000), ("s1", "u", 1)])}))
        .await;
    for stream in [false, true] {
        let started = Instant::now();
        let r = f.chat("m", stream).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-gatehouse-provider"), "s1");
        let took = started.elapsed();
        if header(&r, "x-gatehouse-attempts") == "2" {
            assert!(took >= Duration::from_millis(950), "{took:?}");
        }
        assert!(took < Duration::from_secs(4), "{took:?}");
    }
}

#[tokio::test]
async fn a_stream_that_dies_mid_way_is_not_retried() {
    let f = fleet(2, 5).await;
    for i in 0..2 {
        f.stub(i).script(
            "u",
            Script {
                content: Some("a long answer that will not finish".into()),
                close_after_chunks: Some(2),
                ..Script::default()
            },
        );
    }
    f.create_ok(
        json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1), ("s1", "u", 1)])}),
    )
    .await;
    let r = f.chat("m", true).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-attempts"), "1");
    let chunks = payloads(&sse_events(r).await);
    let n = chunks.len();
    assert_eq!(n, 5, "role + 2 chunks + error + [DONE]: {chunks:?}");
    assert_eq!(chunks[3]["error"]["code"], "upstream_error");
    assert_eq!(chunks[4], json!("[DONE]"));
    assert_eq!(f.seen(0, "u") + f.seen(1, "u"), 1, "never retried");
    let rows = f.usage(1).await;
    assert_eq!((rows[0].0.as_str(), rows[0].2), ("m", 502));
    assert!(rows[0].1.is_some(), "the provider whose stream broke");
}

#[tokio::test]
async fn fallbacks_answer_when_every_target_failed_and_are_named_in_the_answer_and_usage() {
    let f = fleet(3, 5).await;
    f.stub(0).script("u", Script::status(502));
    f.stub(1).script("u", Script::status(500));
    f.create_ok(json!({"id": "backup", "kind": "chat", "provider": "s2", "upstream_model": "b"}))
        .await;
    f.create_ok(
        json!({"id": "main", "kind": "chat", "fallbacks": ["backup"],
        "targets": targets(&[("s0", "u", 1), ("s1", "u", 1)])}),
    )
    .await;
    let r = f.chat("main", false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "s2");
    assert_eq!(header(&r, "x-gatehouse-attempts"), "3");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["model"], "backup");

    let r = f.chat("main", true).await;
    assert_eq!(r.status(), 200);
    let chunks = payloads(&sse_events(r).await);
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["model"] == "backup"));

    let rows = f.usage(2).await;
    assert_eq!(
        rows[..2],
        [
            ("backup".to_string(), Some("s2".to_string()), 200),
            ("backup".to_string(), Some("s2".to_string()), 200)
        ]
    );
}

#[tokio::test]
async fn usage_records_name_the_provider_that_answered() {
    let f = fleet(2, 5).await;
    f.stub(0).script("u", Script::status(503));
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1000), ("s1", "u", 1)])}))
        .await;
    assert_eq!(f.chat("m", false).await.status(), 200);
    let rows = f.usage(1).await;
    assert_eq!(rows[0], ("m".to_string(), Some("s1".to_string()), 200));
}

// ---------------------------------------------------------------- health

#[tokio::test]
async fn three_failures_rest_a_target_then_one_trial_brings_it_back() {
    // Two seconds of rest: the five requests below fit in it on a busy machine.
    let f = fleet_with(2, 5, |s| s.target_cooldown_s = 2).await;
    f.stub(0).script("u", Script::status(503));
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1000), ("s1", "u", 1)])}))
        .await;
    // Until s0 has failed 3 times in a row.
    let _ = poll(10, || async {
        assert_eq!(f.chat("m", false).await.status(), 200);
        (f.seen(0, "u") >= 3).then_some(())
    })
    .await;
    let s0 = f.target_state("m", "s0").await;
    assert_eq!(s0["healthy"], false);
    assert_eq!(s0["failures"], 3);
    assert!(s0["resting_until"].is_string(), "{s0}");
    // Resting: no request goes there.
    for _ in 0..5 {
        let r = f.chat("m", false).await;
        assert_eq!(header(&r, "x-gatehouse-attempts"), "1");
    }
    assert_eq!(f.seen(0, "u"), 3);
    // After the rest, one trial; it succeeds and s0 is healthy again. The
    // weighted draw picks s1 first once in 1001 requests: s1 failing now
    // makes s0 answer either way (first, or as the second attempt).
    f.stub(0).unscript("u");
    f.stub(1).script("u", Script::status(503));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = f.chat("m", false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "s0");
    let s0 = f.target_state("m", "s0").await;
    assert_eq!(
        (
            s0["healthy"].as_bool(),
            s0["failures"].as_i64(),
            s0["resting_until"].is_null()
        ),
        (Some(true), Some(0), true)
    );
}

#[tokio::test]
async fn when_every_target_rests_requests_still_try_them() {
    let f = fleet_with(2, 5, |s| s.target_cooldown_s = 60).await;
    for i in 0..2 {
        f.stub(i).script("u", Script::status(503));
    }
    f.create_ok(
        json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1), ("s1", "u", 1)])}),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(f.chat("m", false).await.status(), 503);
    }
    assert_eq!(f.target_state("m", "s0").await["healthy"], false);
    assert_eq!(f.target_state("m", "s1").await["healthy"], false);
    // Both rest; the upstreams recover; requests still go and succeed.
    f.stub(0).unscript("u");
    f.stub(1).unscript("u");
    let r = f.chat("m", false).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn an_upstream_killed_mid_load_costs_no_client_errors() {
    let mut f = fleet_with(3, 5, |s| s.target_cooldown_s = 1).await;
    f.create_ok(json!({"id": "m", "kind": "chat",
        "targets": targets(&[("s0", "u", 1), ("s1", "u", 1), ("s2", "u", 1)])}))
        .await;
    let ok = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = Instant::now() + Duration::from_secs(4);
    let mut workers = vec![];
    for w in 0..16 {
        let (client, url, key) = (
            f.app.client.clone(),
            f.app.u("/v1/chat/completions"),
            f.key.clone(),
        );
        let (ok, bad) = (Arc::clone(&ok), Arc::clone(&bad));
        workers.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let stream = w % 4 == 0;
                let r = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&chat_body("m", stream))
                    .send()
                    .await;
                let good = match r {
                    Ok(r) if r.status() == 200 => {
                        let text = r.text().await.unwrap_or_default();
                        (!stream && text.contains("echo: hello"))
                            || (stream
                                && text.ends_with("data: [DONE]\n\n")
                                && !text.contains("\"error\""))
                    }
                    _ => false,
                };
                if good {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    bad.lock().expect("lock").push(format!("worker {w}"));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = f.stubs[0].take().expect("stub 0");
    killed.shutdown().await;
    // Back on the same address halfway through the rest of the run.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let back = Stub::start_with(StubOptions {
        listen: Some(f.addrs[0]),
        ..StubOptions::default()
    })
    .await;
    for w in workers {
        w.await.expect("worker");
    }
    let bad = bad.lock().expect("lock").clone();
    assert!(bad.is_empty(), "client errors: {}", bad.len());
    assert!(ok.load(Ordering::Relaxed) > 50, "too few requests ran");
    // The restarted upstream is in use again after its rest and trial.
    let _ = poll(10, || async {
        let _ = f.chat("m", false).await;
        (!back.requests_for_model("u").is_empty()).then_some(())
    })
    .await;
    f.stubs[0] = Some(back);
}

// ---------------------------------------------------------------- other routes

#[tokio::test]
async fn embeddings_and_rerank_move_on_from_a_failing_target() {
    let f = fleet(2, 5).await;
    f.stub(0).script(TEI_SCRIPT_KEY, Script::status(503));
    f.stub(0).script("e", Script::status(503));
    f.stub(0).script("r", Script::status(503));
    // A TEI target first, then an OpenAI-compatible one.
    f.create_ok(json!({"id": "emb", "kind": "embeddings", "targets": targets(&[("tei0", "bge", 1000), ("s1", "e", 1)])}))
        .await;
    f.create_ok(json!({"id": "rr", "kind": "scoring", "targets": targets(&[("s0", "r", 1000), ("tei1", "bge", 1)])}))
        .await;
    let r = f.embed("emb").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "s1");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["model"], "emb");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(2));

    let r = f.rerank("rr").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "tei1");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["results"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn metrics_count_attempts_and_failures_by_provider_and_cause() {
    let f = fleet(2, 5).await;
    f.stub(0).script("u", Script::status(503));
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1000), ("s1", "u", 1)])}))
        .await;
    assert_eq!(f.chat("m", false).await.status(), 200);
    let text = f.metrics().await;
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.starts_with(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    let s0 = f.seen(0, "u") as u64;
    assert_eq!(
        line("gatehouse_upstream_attempts_total{provider=\"s1\"}"),
        Some(1)
    );
    if s0 > 0 {
        assert_eq!(
            line("gatehouse_upstream_failures_total{provider=\"s0\",cause=\"status_5xx\"}"),
            Some(s0)
        );
    }
}

// ---------------------------------------------------------------- migration

/// The migration that brought targets leaves existing models working: a
/// database migrated by the version before it, with a model, is opened by
/// this version.
#[tokio::test]
async fn models_from_before_targets_keep_working_after_the_migration() {
    let stub = Stub::start().await;
    let (db, _dir) = common::fresh_database().await;
    let settings = {
        let mut s = gatehouse::config::Settings::for_database(&db);
        s.admin_email = Some(common::ADMIN_EMAIL.into());
        s.admin_password = Some(common::ADMIN_PASSWORD.into());
        s
    };
    {
        // The migrations of the previous version only.
        let store = common::migrate_before(&db, "20261124000100").await;
        sqlx::query(
            "INSERT INTO providers (name, type, base_url, api_key, timeout_s, created_at)
             VALUES ('old-p', 'openai', $1, NULL, 5, 1)",
        )
        .bind(stub.openai_base_url())
        .execute(&store.pool)
        .await
        .expect("provider");
        sqlx::query(
            "INSERT INTO models (id, kind, provider, upstream_model, created_at)
             VALUES ('old-chat', 'chat', 'old-p', 'old-up', 1)",
        )
        .execute(&store.pool)
        .await
        .expect("model");
        store.pool.close().await;
    }
    let server = gatehouse::start(settings)
        .await
        .expect("starts and migrates");
    let client = common::client();
    let url = server.url();
    let login: Value = client
        .post(format!("{url}/api/auth/jwt/login"))
        .form(&[
            ("username", common::ADMIN_EMAIL),
            ("password", common::ADMIN_PASSWORD),
        ])
        .send()
        .await
        .expect("login")
        .json()
        .await
        .expect("json");
    let admin = login["access_token"].as_str().expect("token").to_string();
    let v: Value = client
        .get(format!("{url}/api/admin/models/old-chat"))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(v["routing"], "weighted");
    assert_eq!(v["max_attempts"], 3);
    assert_eq!(v["fallbacks"], json!([]));
    assert_eq!(
        v["targets"],
        json!([{"provider": "old-p", "upstream_model": "old-up", "weight": 1, "healthy": true,
                "in_flight": 0, "failures": 0, "resting_until": null}])
    );
    let key: Value = client
        .post(format!("{url}/api/api-keys"))
        .bearer_auth(&admin)
        .json(&json!({"name": "k"}))
        .send()
        .await
        .expect("key")
        .json()
        .await
        .expect("json");
    let r = client
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key["key"].as_str().expect("key"))
        .json(&chat_body("old-chat", false))
        .send()
        .await
        .expect("chat");
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gatehouse-provider"), "old-p");
    assert_eq!(stub.requests_for_model("old-up").len(), 1);
    // The provider is in use through the migrated target.
    let r = client
        .delete(format!("{url}/api/admin/providers/old-p"))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), StatusCode::CONFLICT);
    server.shutdown().await;
}

/// id, at, model, prompt and completion tokens, latency, status, turn, provider.
type CopiedRecord = (
    String,
    i64,
    String,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    Option<String>,
);

/// The migration that took the primary key off usage records keeps every
/// record, and records are written on the rebuilt table.
#[tokio::test]
async fn usage_records_survive_the_migration_that_drops_their_key() {
    let stub = Stub::start().await;
    let (db, dir) = common::fresh_database().await;
    {
        let store = common::migrate_before(&db, "20261126000001").await;
        for (id, model, provider) in [("a1", "old-m", Some("p")), ("a2", "old-m", None)] {
            sqlx::query(
                "INSERT INTO usage_records (id, at, model, kind, prompt_tokens, completion_tokens,
                    latency_ms, status, turn_id, provider)
                 VALUES ($1, 1000, $2, 'chat', 3, 4, 5, 200, 't1', $3)",
            )
            .bind(id)
            .bind(model)
            .bind(provider)
            .execute(&store.pool)
            .await
            .expect("record");
        }
        store.pool.close().await;
    }
    let app = common::app_on(&db, dir, |_| {}).await;
    let store = &app.app().store;
    // Every column came over.
    let rows: Vec<CopiedRecord> = sqlx::query_as(
        "SELECT id, at, model, prompt_tokens, completion_tokens, latency_ms, status, turn_id,
                    provider FROM usage_records ORDER BY id",
    )
    .fetch_all(&store.pool)
    .await
    .expect("rows");
    assert_eq!(
        rows,
        [
            (
                "a1".into(),
                1000,
                "old-m".into(),
                3,
                4,
                5,
                200,
                Some("t1".into()),
                Some("p".into())
            ),
            (
                "a2".into(),
                1000,
                "old-m".into(),
                3,
                4,
                5,
                200,
                Some("t1".into()),
                None
            ),
        ]
    );
    // The key is gone: an id may repeat (the gateway never makes one twice).
    sqlx::query(
        "INSERT INTO usage_records (id, at, model, kind, latency_ms, status)
         VALUES ('a1', 1001, 'old-m', 'chat', 0, 200)",
    )
    .execute(&store.pool)
    .await
    .expect("no unique key on id");
    sqlx::query("DELETE FROM usage_records WHERE at = 1001")
        .execute(&store.pool)
        .await
        .expect("delete");
    let admin = app.admin_token().await;
    app.add_model("openai", &stub.openai_base_url(), "new-m", "chat", "up")
        .await;
    let key = app.api_key(&admin, json!({"name": "k"})).await;
    let r = app
        .post("/v1/chat/completions", &key, &chat_body("new-m", false))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let totals = || async {
        let r = app
            .get(
                "/api/admin/usage?from=1970-01-01T00:00:00Z&to=2999-01-01T00:00:00Z&group_by=model",
                &admin,
            )
            .await;
        r.json::<Vec<Value>>().await.expect("json")
    };
    let rows = poll(10, || async {
        let rows = totals().await;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    let by: Vec<(&str, i64, i64)> = rows
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_i64().expect("number");
            (
                r["key"].as_str().expect("key"),
                n("requests"),
                n("prompt_tokens"),
            )
        })
        .collect();
    assert!(by.contains(&("old-m", 2, 6)), "{by:?}");
    assert!(
        by.iter().any(|(k, n, _)| *k == "new-m" && *n == 1),
        "{by:?}"
    );
}

#[tokio::test]
async fn agent_chat_moves_on_from_a_failing_target() {
    let f = fleet(2, 5).await;
    f.stub(0).script("u", Script::status(503));
    f.create_ok(json!({"id": "m", "kind": "chat", "targets": targets(&[("s0", "u", 1000), ("s1", "u", 1)])}))
        .await;
    let token = f.agent_token("helper", "m").await;
    for stream in [false, true] {
        let r = f.agent_chat("helper", &token, stream).await;
        assert_eq!(r.status(), 200, "stream {stream}");
        assert_eq!(header(&r, "x-gatehouse-provider"), "s1");
        if stream {
            let chunks = payloads(&sse_events(r).await);
            assert_eq!(chunks.last(), Some(&json!("[DONE]")));
            assert!(
                chunks.iter().all(|c| c.get("error").is_none()),
                "{chunks:?}"
            );
        } else {
            let v: Value = r.json().await.expect("json");
            assert_eq!(v["choices"][0]["message"]["content"], "echo: hello");
        }
    }
    assert_eq!(f.seen(1, "u"), 2);
}

// ---------------------------------------------------------------- routing headers on errors

/// `x-gatehouse-provider` and `x-gatehouse-attempts` of an answer.
fn routed(r: &Response) -> (String, String) {
    (
        header(r, "x-gatehouse-provider"),
        header(r, "x-gatehouse-attempts"),
    )
}

#[tokio::test]
async fn an_upstream_4xx_passed_on_names_the_provider_and_the_attempts_on_every_route() {
    let f = fleet(1, 5).await;
    for (id, kind) in [("c", "chat"), ("e", "embeddings"), ("r", "scoring")] {
        f.create_ok(
            json!({"id": id, "kind": kind, "provider": "s0", "upstream_model": format!("up-{id}")}),
        )
        .await;
    }
    let token = f.agent_token("helper", "c").await;
    for status in [400u16, 404, 422] {
        for id in ["c", "e", "r"] {
            f.stub(0).script(
                &format!("up-{id}"),
                Script {
                    status: Some(status),
                    error_message: Some("refused upstream".into()),
                    ..Script::default()
                },
            );
        }
        let answers = [
            ("chat", f.chat("c", false).await),
            ("chat stream", f.chat("c", true).await),
            ("embeddings", f.embed("e").await),
            ("rerank", f.rerank("r").await),
            ("agent chat", f.agent_chat("helper", &token, false).await),
            ("agent stream", f.agent_chat("helper", &token, true).await),
        ];
        for (what, r) in answers {
            let got = routed(&r);
            let (s, e) = v1_error(r).await;
            assert_eq!(s.as_u16(), status, "{what}");
            assert_eq!(e["message"], "refused upstream", "{what}");
            assert_eq!(got, ("s0".into(), "1".into()), "{what}, status {status}");
        }
    }
}

#[tokio::test]
async fn when_every_attempt_fails_the_error_names_the_last_provider_and_the_attempts() {
    let f = fleet(3, 5).await;
    for max in 1..=3 {
        // One target a model, the next ones as fallbacks: attempts go s0, s1,
        // s2 in order. Upstream names of their own each round, so no target
        // fails often enough to rest (a resting one would be tried last).
        for (tag, kind) in [
            ("c", "chat"),
            ("a", "chat"),
            ("e", "embeddings"),
            ("r", "scoring"),
        ] {
            let up = format!("{tag}-{max}");
            for i in 0..3 {
                f.stub(i).script(&up, Script::status(503));
            }
            for i in [1, 2] {
                f.create_ok(json!({"id": format!("{up}-s{i}"), "kind": kind,
                    "provider": format!("s{i}"), "upstream_model": up}))
                    .await;
            }
            f.create_ok(json!({"id": up, "kind": kind, "max_attempts": max,
                "targets": targets(&[("s0", &up, 1)]),
                "fallbacks": [format!("{up}-s1"), format!("{up}-s2")]}))
                .await;
        }
        let agent = format!("helper-{max}");
        let token = f.agent_token(&agent, &format!("a-{max}")).await;
        let answers = [
            ("chat", f.chat(&format!("c-{max}"), false).await),
            ("chat stream", f.chat(&format!("c-{max}"), true).await),
            ("embeddings", f.embed(&format!("e-{max}")).await),
            ("rerank", f.rerank(&format!("r-{max}")).await),
            ("agent chat", f.agent_chat(&agent, &token, false).await),
            ("agent stream", f.agent_chat(&agent, &token, true).await),
        ];
        for (what, r) in answers {
            let got = routed(&r);
            let (s, e) = v1_error(r).await;
            assert_eq!(
                (s, e["code"].as_str()),
                (StatusCode::SERVICE_UNAVAILABLE, Some("upstream_error")),
                "{what}"
            );
            assert_eq!(
                got,
                (format!("s{}", max - 1), max.to_string()),
                "{what}, max_attempts {max}"
            );
        }
    }
}
