//! Traces (contract "Operations", "Traces"): a real `gatehouse serve`
//! process exporting over OTLP/HTTP to a real receiver in this test, which
//! decodes the protobuf (`opentelemetry-proto`); the stub upstream records
//! the `traceparent` each attempt carried.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Request, State};
use common::captured::{serve, stop, Api};
use common::procs::free_port;
use common::{ADMIN_EMAIL, ADMIN_PASSWORD};
use gatehouse_stub_upstream::{Script, Stub};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use parking_lot::Mutex;
use prost::Message as _;
use serde_json::{json, Value};

/// A span as received, flattened.
#[derive(Clone, Debug)]
struct Got {
    path: String,
    service: Option<String>,
    name: String,
    kind: i32,
    trace_id: String,
    span_id: String,
    parent: String,
    attrs: HashMap<String, Any>,
    status_code: i32,
    event_texts: Vec<String>,
}

const INTERNAL: i32 = 1;
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

impl Got {
    fn str(&self, k: &str) -> Option<&str> {
        match self.attrs.get(k) {
            Some(Any::StringValue(s)) => Some(s),
            _ => None,
        }
    }
    fn int(&self, k: &str) -> Option<i64> {
        match self.attrs.get(k) {
            Some(Any::IntValue(i)) => Some(*i),
            _ => None,
        }
    }
    fn request_id(&self) -> Option<Vec<String>> {
        match self.attrs.get("http.request.header.x-request-id") {
            Some(Any::ArrayValue(a)) => Some(
                a.values
                    .iter()
                    .map(|v| match &v.value {
                        Some(Any::StringValue(s)) => s.clone(),
                        other => panic!("not a string: {other:?}"),
                    })
                    .collect(),
            ),
            _ => None,
        }
    }
    /// Every text the span holds: name, string attributes, events.
    fn texts(&self) -> Vec<String> {
        let mut out = vec![self.name.clone()];
        for v in self.attrs.values() {
            out.push(format!("{v:?}"));
        }
        out.extend(self.event_texts.iter().cloned());
        out
    }
}

/// An OTLP/HTTP receiver: decodes every POST as an ExportTraceServiceRequest.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(Arc::clone(&spans));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, spans }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().clone()
    }

    /// Waits until `check` holds for the spans received (10 s at most).
    async fn wait_for(&self, what: &str, check: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let start = Instant::now();
        loop {
            let spans = self.spans();
            if check(&spans) {
                return spans;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{what}: spans received: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn receive(State(spans): State<Arc<Mutex<Vec<Got>>>>, req: Request) -> &'static str {
    let path = req.uri().path().to_string();
    let json = req
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let body: Bytes = axum::body::to_bytes(req.into_body(), 64 << 20)
        .await
        .unwrap();
    if json {
        // OTLP/JSON: only span names are read (enough to see it arrived whole).
        let v: Value = serde_json::from_slice(&body).expect("OTLP JSON");
        let mut got = spans.lock();
        for rs in v["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for sp in ss["spans"].as_array().into_iter().flatten() {
                    got.push(Got {
                        path: path.clone(),
                        service: None,
                        name: sp["name"].as_str().unwrap_or("").to_string(),
                        kind: 0,
                        trace_id: String::new(),
                        span_id: String::new(),
                        parent: String::new(),
                        attrs: HashMap::new(),
                        status_code: 0,
                        event_texts: vec!["json".into()],
                    });
                }
            }
        }
        return "";
    }
    let export = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
    let mut got = spans.lock();
    for rs in export.resource_spans {
        let service = rs.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    Any::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
        });
        for ss in rs.scope_spans {
            for s in ss.spans {
                got.push(Got {
                    path: path.clone(),
                    service: service.clone(),
                    name: s.name.clone(),
                    kind: s.kind,
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent: hex::encode(&s.parent_span_id),
                    attrs: s
                        .attributes
                        .iter()
                        .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?.value?)))
                        .collect(),
                    status_code: s.status.map_or(0, |st| st.code),
                    event_texts: s.events.iter().map(|e| format!("{e:?}")).collect(),
                });
            }
        }
    }
    ""
}

/// Provider `stub`, models on it, an API key: returns the key.
async fn setup(api: &Api, stub: &Stub, models: &[(&str, &str, &str)]) -> String {
    let admin = api.token(ADMIN_EMAIL, ADMIN_PASSWORD).await;
    api.post(
        &admin,
        "/api/admin/providers",
        json!({"name": "stub", "type": "openai", "base_url": stub.openai_base_url()}),
    )
    .await;
    for (id, kind, upstream) in models {
        api.post(
            &admin,
            "/api/admin/models",
            json!({"id": id, "kind": kind, "provider": "stub", "upstream_model": upstream}),
        )
        .await;
    }
    api.post(&admin, "/api/api-keys", json!({"name": "traces"}))
        .await["key"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn call(
    api: &Api,
    key: &str,
    path: &str,
    id: &str,
    body: Value,
    traceparent: Option<&str>,
) -> reqwest::Response {
    let mut r = api
        .c
        .post(format!("{}{path}", api.url))
        .bearer_auth(key)
        .header("x-request-id", id)
        .json(&body);
    if let Some(tp) = traceparent {
        r = r.header("traceparent", tp);
    }
    r.send().await.unwrap()
}

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_has_a_server_span_with_one_genai_client_span_per_attempt_as_its_child() {
    let stub = Stub::start().await;
    stub.script(
        "up-chat",
        Script {
            usage: Some((7, 3)),
            ..Script::content("the confidential answer")
        },
    );
    stub.script("up-broken", Script::status(503));
    let rx = Receiver::start().await;
    let s = serve(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &rx.base()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_SERVICE_NAME", "gw-trace-test"),
        ("GATEHOUSE_LOG", "info"),
    ])
    .await;
    let api = Api::new(&s.url);
    let key = setup(
        &api,
        &stub,
        &[
            ("chat-m", "chat", "up-chat"),
            ("embed-m", "embeddings", "up-embed"),
            ("rerank-m", "scoring", "up-rerank"),
            ("broken-m", "chat", "up-broken"),
        ],
    )
    .await;
    let prompt = json!([{"role": "user", "content": "my private prompt words"}]);
    // Tried on up-broken first, then on its fallback.
    let admin = api.token(ADMIN_EMAIL, ADMIN_PASSWORD).await;
    api.post(
        &admin,
        "/api/admin/models",
        json!({"id": "failover-m", "kind": "chat", "provider": "stub",
               "upstream_model": "up-broken", "fallbacks": ["chat-m"]}),
    )
    .await;

    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let r = call(
        &api,
        &key,
        "/v1/chat/completions",
        "tr-chat",
        json!({"model": "chat-m", "messages": prompt}),
        Some(&caller),
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = call(
        &api,
        &key,
        "/v1/chat/completions",
        "tr-stream",
        json!({"model": "chat-m", "messages": prompt, "stream": true}),
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("[DONE]"));
    let r = call(
        &api,
        &key,
        "/v1/embeddings",
        "tr-embed",
        json!({"model": "embed-m", "input": "embedded private words"}),
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = call(
        &api,
        &key,
        "/v1/rerank",
        "tr-rerank",
        json!({"model": "rerank-m", "query": "private query words", "documents": ["a", "b"]}),
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = call(
        &api,
        &key,
        "/v1/chat/completions",
        "tr-broken",
        json!({"model": "broken-m", "messages": prompt}),
        None,
    )
    .await;
    assert_eq!(r.status(), 503);

    let r = call(
        &api,
        &key,
        "/v1/chat/completions",
        "tr-failover",
        json!({"model": "failover-m", "messages": prompt}),
        None,
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-gatehouse-attempts"], "2");

    let ids = [
        "tr-chat",
        "tr-stream",
        "tr-embed",
        "tr-rerank",
        "tr-broken",
        "tr-failover",
    ];
    let spans = rx
        .wait_for("a server span and a client span per request", |spans| {
            ids.iter().all(|id| {
                spans
                    .iter()
                    .find(|s| s.request_id() == Some(vec![id.to_string()]))
                    .is_some_and(|srv| {
                        let children = spans.iter().filter(|c| c.parent == srv.span_id).count();
                        children >= if *id == "tr-failover" { 2 } else { 1 }
                    })
            })
        })
        .await;
    let server_of = |id: &str| -> Got {
        let found: Vec<&Got> = spans
            .iter()
            .filter(|s| s.request_id() == Some(vec![id.to_string()]))
            .collect();
        assert_eq!(found.len(), 1, "one server span for {id}: {found:#?}");
        found[0].clone()
    };
    let client_of = |srv: &Got| -> Got {
        let found: Vec<&Got> = spans.iter().filter(|s| s.parent == srv.span_id).collect();
        assert_eq!(found.len(), 1, "one child of {}: {found:#?}", srv.name);
        found[0].clone()
    };
    let stub_port = i64::from(stub.addr().port());

    // The plain chat: a child of the caller's span; its attempt a child of it.
    let srv = server_of("tr-chat");
    assert_eq!(srv.name, "POST /v1/chat/completions");
    assert_eq!(srv.kind, SERVER);
    assert_eq!(srv.path, "/v1/traces");
    assert_eq!(srv.service.as_deref(), Some("gw-trace-test"));
    assert_eq!(
        (srv.trace_id.as_str(), srv.parent.as_str()),
        (CALLER_TRACE, CALLER_SPAN)
    );
    assert_eq!(srv.str("http.request.method"), Some("POST"));
    assert_eq!(srv.str("http.route"), Some("/v1/chat/completions"));
    assert_eq!(srv.str("url.path"), Some("/v1/chat/completions"));
    assert_eq!(srv.int("http.response.status_code"), Some(200));
    let cl = client_of(&srv);
    assert_eq!(cl.name, "chat up-chat");
    assert_eq!(cl.kind, CLIENT);
    assert_eq!(cl.trace_id, CALLER_TRACE);
    assert_eq!(cl.str("gen_ai.operation.name"), Some("chat"));
    assert_eq!(cl.str("gen_ai.provider.name"), Some("openai"));
    assert_eq!(cl.str("gen_ai.request.model"), Some("up-chat"));
    assert_eq!(cl.str("gen_ai.response.model"), Some("up-chat"));
    assert_eq!(cl.int("gen_ai.usage.input_tokens"), Some(7));
    assert_eq!(cl.int("gen_ai.usage.output_tokens"), Some(3));
    assert_eq!(cl.str("server.address"), Some("127.0.0.1"));
    assert_eq!(cl.int("server.port"), Some(stub_port));
    assert!(cl.str("error.type").is_none());
    // The upstream request carried the CLIENT span's traceparent.
    let sent: Vec<String> = stub
        .requests_for_model("up-chat")
        .iter()
        .filter(|r| r.header("x-request-id") == Some("tr-chat"))
        .filter_map(|r| r.header("traceparent").map(str::to_string))
        .collect();
    assert_eq!(
        sent,
        [format!("00-{CALLER_TRACE}-{}-01", cl.span_id)],
        "traceparent sent upstream"
    );

    // The stream: a new trace; the attempt's span has the usage of the stream's end.
    let srv = server_of("tr-stream");
    assert_eq!(srv.name, "POST /v1/chat/completions");
    assert!(srv.parent.is_empty(), "a root span: {srv:?}");
    let cl = client_of(&srv);
    assert_eq!(cl.name, "chat up-chat");
    assert_eq!(cl.str("gen_ai.response.model"), Some("up-chat"));
    assert_eq!(cl.int("gen_ai.usage.input_tokens"), Some(7));
    assert_eq!(cl.int("gen_ai.usage.output_tokens"), Some(3));

    let srv = server_of("tr-embed");
    assert_eq!(srv.name, "POST /v1/embeddings");
    let cl = client_of(&srv);
    assert_eq!(cl.name, "embeddings up-embed");
    assert_eq!(cl.str("gen_ai.operation.name"), Some("embeddings"));
    assert_eq!(cl.str("gen_ai.response.model"), Some("up-embed"));
    assert!(cl.int("gen_ai.usage.input_tokens").is_some(), "{cl:?}");
    assert!(cl.int("gen_ai.usage.output_tokens").is_none(), "{cl:?}");
    assert_eq!(cl.int("server.port"), Some(stub_port));

    let srv = server_of("tr-rerank");
    assert_eq!(srv.str("http.route"), Some("/v1/rerank"));
    let cl = client_of(&srv);
    assert_eq!(cl.name, "rerank up-rerank");
    assert_eq!(cl.str("gen_ai.operation.name"), Some("rerank"));

    // A failed attempt says how; the request's span has the status answered.
    let srv = server_of("tr-broken");
    assert_eq!(srv.int("http.response.status_code"), Some(503));
    assert_eq!(srv.status_code, 2, "a 5xx marks the server span failed");
    let cl = client_of(&srv);
    assert_eq!(cl.str("error.type"), Some("503"));
    assert_eq!(cl.status_code, 2);

    // Each attempt of a retried request: its own CLIENT span, a direct
    // child of the request's, whose traceparent that attempt carried.
    let srv = server_of("tr-failover");
    let mut attempts: Vec<&Got> = spans.iter().filter(|s| s.parent == srv.span_id).collect();
    attempts.sort_by_key(|s| s.name.clone());
    let names: Vec<&str> = attempts.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["chat up-broken", "chat up-chat"]);
    assert!(attempts.iter().all(|s| s.kind == CLIENT));
    assert_eq!(attempts[0].str("error.type"), Some("503"));
    assert_eq!(attempts[1].str("error.type"), None);
    for (upstream, span) in [("up-broken", attempts[0]), ("up-chat", attempts[1])] {
        let sent: Vec<String> = stub
            .requests_for_model(upstream)
            .iter()
            .filter(|r| r.header("x-request-id") == Some("tr-failover"))
            .filter_map(|r| r.header("traceparent").map(str::to_string))
            .collect();
        assert_eq!(sent, [format!("00-{}-{}-01", srv.trace_id, span.span_id)]);
    }

    // A login's slow step has its own span beside the request's.
    let login = spans
        .iter()
        .find(|s| s.name == "POST /api/auth/jwt/login")
        .expect("the login's span");
    assert!(
        spans.iter().any(|s| s.name == "password verify"
            && s.parent == login.span_id
            && s.kind == INTERNAL),
        "{spans:#?}"
    );

    // No prompt, answer, input or query text in any span.
    for span in &spans {
        for text in span.texts() {
            for secret in ["private", "confidential"] {
                assert!(!text.contains(secret), "{secret} in span {span:?}");
            }
        }
    }
    let _ = stop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_variable_nothing_is_exported_connected_or_warned_about() {
    // Collectors where the defaults would send, when those ports are free here.
    let mut defaults = Vec::new();
    for port in [4318u16, 4317] {
        if let Ok(l) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            let n = Arc::new(AtomicUsize::new(0));
            let counted = Arc::clone(&n);
            tokio::spawn(async move {
                while l.accept().await.is_ok() {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            });
            defaults.push((port, n));
        }
    }
    let stub = Stub::start().await;
    let s = serve(&[
        ("OTEL_SERVICE_NAME", "not-exported"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_TRACES_SAMPLER", "always_on"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("GATEHOUSE_LOG", "debug"),
    ])
    .await;
    let api = Api::new(&s.url);
    let key = setup(&api, &stub, &[("chat-m", "chat", "up-off")]).await;
    let r = call(
        &api,
        &key,
        "/v1/chat/completions",
        "off-1",
        json!({"model": "chat-m", "messages": [{"role": "user", "content": "hi"}]}),
        Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")),
    )
    .await;
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (out, err, _) = stop(s);
    for (port, n) in &defaults {
        assert_eq!(n.load(Ordering::Relaxed), 0, "a connection to :{port}");
    }
    // No traceparent of our own goes upstream (the caller's is not relayed either).
    for r in stub.requests_for_model("up-off") {
        assert_eq!(r.header("traceparent"), None);
    }
    for line in out.lines().chain(err.lines()) {
        let l = line.to_lowercase();
        assert!(
            !l.contains("otlp") && !l.contains("opentelemetry") && !l.contains("traces"),
            "a line about traces: {line}"
        );
    }
}

/// Lines of the output about the collector on `port` or about traces.
fn lines_about(out: &str, port: u16) -> Vec<String> {
    out.lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains(&format!(":{port}")) || l.contains("trace") || l.contains("otlp")
        })
        .map(str::to_string)
        .collect()
}

async fn requests_stay_fast(api: &Api, key: &str, n: usize) {
    for i in 0..n {
        let started = Instant::now();
        let r = call(
            api,
            key,
            "/v1/chat/completions",
            &format!("fast-{i}"),
            json!({"model": "chat-m", "messages": [{"role": "user", "content": "hi"}]}),
            None,
        )
        .await;
        assert_eq!(r.status(), 200);
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(500),
            "request {i} took {took:?}"
        );
        if i % 5 == 0 {
            // Lets the exporter try (and fail) several times.
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_neither_fails_nor_slows_requests_and_is_reported_at_most_twice() {
    let stub = Stub::start().await;
    let closed = free_port();
    let s = serve(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://127.0.0.1:{closed}"),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("GATEHOUSE_LOG", "info"),
    ])
    .await;
    let api = Api::new(&s.url);
    let key = setup(&api, &stub, &[("chat-m", "chat", "up-fast")]).await;
    requests_stay_fast(&api, &key, 30).await;
    let (out, err, took) = stop(s);
    let about = lines_about(&format!("{out}{err}"), closed);
    assert!(about.len() <= 2, "{about:#?}");
    assert!(
        about.iter().any(|l| l.contains("WARN")),
        "one warning about it: {about:#?}"
    );
    assert!(took < Duration::from_secs(8), "exit took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_holds_up_neither_requests_nor_the_exit() {
    let stub = Stub::start().await;
    // Accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = silent.accept().await {
            held.push(sock);
        }
    });
    let s = serve(&[
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("http://127.0.0.1:{port}/v1/traces"),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("GATEHOUSE_LOG", "info"),
    ])
    .await;
    let api = Api::new(&s.url);
    let key = setup(&api, &stub, &[("chat-m", "chat", "up-fast")]).await;
    requests_stay_fast(&api, &key, 20).await;
    let (out, err, took) = stop(s);
    assert!(took < Duration::from_secs(8), "exit took {took:?}");
    let about = lines_about(&format!("{out}{err}"), port);
    assert!(about.len() <= 2, "{about:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_traces_endpoint_is_used_as_given_and_wins_over_the_generic_one() {
    let rx = Receiver::start().await;
    let closed = free_port();
    let s = serve(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://127.0.0.1:{closed}"),
        ),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("{}/custom/traces", rx.base()),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ])
    .await;
    let r = Api::new(&s.url)
        .c
        .get(format!("{}/healthz", s.url))
        .header("x-request-id", "ep-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let spans = rx
        .wait_for("the /healthz span", |spans| {
            spans
                .iter()
                .any(|s| s.request_id() == Some(vec!["ep-1".into()]))
        })
        .await;
    assert!(
        spans.iter().all(|s| s.path == "/custom/traces"),
        "{spans:#?}"
    );
    let srv = spans
        .iter()
        .find(|s| s.request_id() == Some(vec!["ep-1".into()]))
        .unwrap();
    assert_eq!(srv.name, "GET /healthz");
    assert_eq!(srv.service.as_deref(), Some("gatehouse"));
    let _ = stop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_variable_is_honoured() {
    let rx = Receiver::start().await;
    let s = serve(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &rx.base()),
        ("OTEL_TRACES_SAMPLER", "always_off"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ])
    .await;
    for _ in 0..5 {
        let r = Api::new(&s.url)
            .c
            .get(format!("{}/healthz", s.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop(s);
    assert!(rx.spans().is_empty(), "{:#?}", rx.spans());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_json_protocol_exports_otlp_json() {
    let rx = Receiver::start().await;
    let s = serve(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &rx.base()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ])
    .await;
    let r = Api::new(&s.url)
        .c
        .get(format!("{}/healthz", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let spans = rx
        .wait_for("the /healthz span, as JSON", |spans| {
            spans.iter().any(|s| s.name == "GET /healthz")
        })
        .await;
    assert!(
        spans.iter().all(|s| s.event_texts == ["json"]),
        "{spans:#?}"
    );
    let _ = stop(s);
}
