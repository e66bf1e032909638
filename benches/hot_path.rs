//! The pure parts of the request path, without sockets: so a regression in
//! one of them shows without a full load run (`bench/run.sh`). Agent chat
//! runs the agent turn's own pure step (`agents::turn::check` and `plan`).
//! `spend` is a request's admission and end for one API key, without and
//! with a price and budgets (issue 34's 2 µs goal; see [`spend`]).
//!
//! Run: cargo bench --bench hot_path (one group: `-- spend`)
//! (CI runs it once with `-- --warm-up-time 0.2 --measurement-time 0.5`, no thresholds.)

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::FutureExt;
use gatehouse::agents::tools::{ToolClass, ToolMode, ToolStatus};
use gatehouse::agents::turn::{self, AgentRules, Known};
use gatehouse::http::admission::{add_budget_headers, add_headers, end_hook};
use gatehouse::http::answers::cost_headers;
use gatehouse::limits::{Limiter, Limits, Subject};
use gatehouse::spend::budget::{self, tokens_of_chars, DEFAULT_RESERVE_OUTPUT_TOKENS};
use gatehouse::spend::price::Price;
use gatehouse::spend::{cost, Currency, PriceBook, PriceSpec, Prices};
use gatehouse::usage::Tokens;
use gatehouse::wire::chat::answer::splice_chunk_into;
use gatehouse::wire::chat::body::{ChatBody, RawChat};
use gatehouse::wire::chat::request::{ChatRequest, Upstream};
use gatehouse::wire::chat::{check_body, rewrite_model, strip_usage};
use gatehouse::wire::sse::SseParser;
use gatehouse_pii::{Counts, Mode, Scanner, Vault};
use serde_json::{json, Map, Value};

/// A plain chat request like the load runs' (system + user message).
fn chat_body() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": "chat-model",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": "Explain in two sentences why the sky is blue, please, for a child."}
        ],
        "temperature": 0.2,
        "max_tokens": 64
    }))
    .expect("json")
}

/// 38 stream events as an OpenAI-compatible server sends them, usage last.
fn stream_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
               "model": "upstream/model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for i in 0..35 {
        events.push(chunk(json!({"content": format!("w{i:02} ")}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    events.push(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "upstream/model", "choices": [],
        "usage": {"prompt_tokens": 30, "completion_tokens": 35, "total_tokens": 65}}),
    );
    for e in events {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(e.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn tools_body(n: usize) -> Map<String, Value> {
    let tools: Vec<Value> = (0..n)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i}"),
                "description": "Does one thing to a file in the workspace.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})
        })
        .collect();
    match json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}) {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

fn benches(c: &mut Criterion) {
    let body = chat_body();
    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("chat_request_rewrite", |b| {
        b.iter(|| {
            let m: Map<String, Value> = serde_json::from_slice(black_box(&body)).expect("json");
            check_body(&m).expect("valid");
            let mut t = ChatBody::new(&m, None).expect("body");
            black_box(t.for_model("upstream/model"));
        })
    });
    g.finish();

    let stream = stream_bytes();
    let mut g = c.benchmark_group("stream");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("sse_parse_and_rewrite_38_events", |b| {
        b.iter(|| {
            let mut p = SseParser::new();
            p.push(black_box(&stream));
            let mut out = Vec::with_capacity(stream.len());
            while let Some(ev) = p.next_event() {
                if ev.data == "[DONE]" {
                    break;
                }
                let mut v: Value = serde_json::from_str(&ev.data).expect("json");
                let obj = v.as_object_mut().expect("object");
                if !strip_usage(obj) {
                    continue;
                }
                rewrite_model(obj, "chat-model");
                out.extend_from_slice(b"data: ");
                serde_json::to_writer(&mut out, &v).expect("write");
                out.extend_from_slice(b"\n\n");
            }
            black_box(out);
        })
    });
    // What `/v1/chat/completions` does per event: splice into the event's
    // frame, no JSON tree.
    g.bench_function("sse_parse_and_splice_38_events", |b| {
        let alias = serde_json::to_vec("chat-model").expect("json");
        b.iter(|| {
            let mut p = SseParser::new();
            p.push(black_box(&stream));
            let mut frames = Vec::with_capacity(40);
            while let Some(ev) = p.next_event() {
                if ev.data == "[DONE]" {
                    break;
                }
                let mut out = Vec::with_capacity(ev.data.len() + alias.len() + 24);
                out.extend_from_slice(b"data: ");
                let c = splice_chunk_into(&ev.data, &alias, false, &mut out).expect("fast path");
                if c.sent {
                    out.extend_from_slice(b"\n\n");
                    frames.push(out);
                }
            }
            black_box(frames);
        })
    });
    g.finish();

    let body20 = tools_body(20);
    let classes: HashMap<String, ToolClass> = (0..20)
        .map(|i| {
            let class = if i % 2 == 0 {
                ToolClass::Read
            } else {
                ToolClass::Execute
            };
            (format!("tool_{i}"), class)
        })
        .collect();
    let contract: Vec<String> = (0..15).map(|i| format!("tool_{i}")).collect();
    let decisions: HashMap<String, ToolStatus> =
        [("tool_16".to_string(), ToolStatus::Accepted)].into();
    let (classes, decisions) = (Arc::new(classes), Arc::new(decisions));
    let rules = AgentRules {
        instructions: None,
        tool_contract: &contract,
        allow_local_mcp: false,
    };
    // The agent chat body from bytes to the upstream's bytes: parse (the
    // tools list kept as text), tool checks, filtering, serialisation. As
    // the handler parses it without PII protection (the list found
    // remembered from the first round on, as an app sends the same list
    // every turn; the other fields kept as text), with it (a tree of the
    // other fields), and read whole.
    let bytes20 = bytes::Bytes::from(serde_json::to_vec(&body20).expect("json"));
    let to_upstream = |mut req: ChatRequest| {
        let offered = turn::check(&req).expect("tools");
        let known = Known {
            mode: ToolMode::Ask,
            classes: Arc::clone(&classes),
            decisions: Arc::clone(&decisions),
            states: HashMap::new(),
            pii: None,
        };
        let plan = turn::plan(&mut req, &offered, rules, known);
        let mut t = match req.into_upstream() {
            Upstream::Tree(fields, tools) => {
                let texts = tools.as_ref().map(|t| t.texts());
                ChatBody::new(&fields, texts.as_deref()).expect("body")
            }
            Upstream::Text {
                after_model,
                stream,
                prompt_chars,
            } => ChatBody::spliced(&RawChat::assembled(after_model, stream, prompt_chars)),
        };
        black_box((t.for_model("upstream/model"), plan.held));
    };
    c.bench_function("agent_request_20_tools", |b| {
        b.iter(|| to_upstream(ChatRequest::parse(black_box(&bytes20), true).expect("json")))
    });
    c.bench_function("agent_request_20_tools_tree", |b| {
        b.iter(|| to_upstream(ChatRequest::parse(black_box(&bytes20), false).expect("json")))
    });
    c.bench_function("agent_request_20_tools_read_whole", |b| {
        b.iter(|| to_upstream(serde_json::from_slice(black_box(&bytes20)).expect("json")))
    });
    // Later in a conversation: an app sends the whole of it every turn.
    let mut long = body20.clone();
    let said =
        "Here is what I found in the workspace, file by file, with a line on each. ".repeat(4);
    long["messages"] = (0..40)
        .map(|i| match i % 4 {
            0 => json!({"role": "user", "content": format!("Step {i}: {said}")}),
            1 => json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{i}"),
                 "type": "function", "function": {"name": "tool_0", "arguments": "{\"path\":\"src/main.rs\"}"}}]}),
            2 => json!({"role": "tool", "tool_call_id": format!("call_{}", i - 1), "content": said}),
            _ => json!({"role": "assistant", "content": said}),
        })
        .collect();
    let long = bytes::Bytes::from(serde_json::to_vec(&long).expect("json"));
    c.bench_function("agent_request_20_tools_40_messages", |b| {
        b.iter(|| to_upstream(ChatRequest::parse(black_box(&long), true).expect("json")))
    });
    c.bench_function("agent_request_20_tools_40_messages_tree", |b| {
        b.iter(|| to_upstream(ChatRequest::parse(black_box(&long), false).expect("json")))
    });

    let scanner = Scanner::new(&[]).expect("scanner");
    let text = "Hi, I'm Ana (ana.souza@example.com, +1 415 555 0134). ".repeat(4)
        + &"Please summarise the attached quarterly report in three bullet points. ".repeat(12);
    let mut g = c.benchmark_group("pii");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("protect_chat_body_redact", |b| {
        let msg = json!({"model": "m", "messages": [{"role": "user", "content": text}]});
        let Value::Object(base) = msg else {
            unreachable!()
        };
        b.iter(|| {
            let mut body = base.clone();
            let (mut vault, mut counts) = (Vault::new(), Counts::new());
            gatehouse::wire::chat::for_each_text(&mut body, &mut |s| {
                gatehouse::pii::protect_text(s, &scanner, Mode::Redact, &mut vault, &mut counts)
            });
            black_box(body);
        })
    });
    g.finish();
}

/// The provider and the upstream models of the spend group (as bench/run.sh
/// names them): `bench-chat` has no price, `bench-paid` has one.
const PROVIDER: &str = "stub";
const UNPRICED: &str = "bench-chat";
const PRICED: &str = "bench-paid";

/// The price book of bench/run.sh (cache, reasoning, a request fee and a
/// tier), on `PRICED` only.
fn spend_prices() -> Prices {
    let spec = PriceSpec::from_json(&json!({
        "input": "0.15", "output": "0.60", "cache_read": "0.075", "reasoning": "0.60",
        "request": "0.0001",
        "tiers": [{"above_prompt_tokens": 128000, "input": "0.30", "output": "1.20"}]
    }))
    .expect("price");
    let prices = Prices::new(Currency::USD);
    let price = Price {
        version: "01JBENCHPRICEVERSION000000".into(),
        provider: PROVIDER.into(),
        upstream_model: PRICED.into(),
        spec,
        effective_from: 0,
        effective_to: None,
    };
    prices.replace_if_newer(1, PriceBook::new(vec![price]));
    prices
}

/// What `http::admission::admitted` and the end of a plain (not streamed)
/// chat request do for its callers, in the server's order, with the
/// functions it calls; the upstream call itself is left out. `model` is
/// the upstream model of the request's one target; `prompt` and `max` its
/// body's reservation figures; `tokens` the usage the upstream reports.
fn one_request(
    limiter: &Limiter,
    prices: &Prices,
    subjects: &[Subject],
    model: &str,
    (prompt, max): (u64, Option<u64>),
    tokens: Tokens,
) -> Response {
    // The ticket's snapshot of the book (`UsageTicket::new`), every request.
    let book = prices.book();
    // `Charge::reservation`, under a budget only.
    let reservation = if subjects.iter().any(|s| s.limits.has_budget()) {
        let book = prices.book();
        let spec = book.get(PROVIDER, model).map(|p| &p.spec);
        let completion = max.unwrap_or(DEFAULT_RESERVE_OUTPUT_TOKENS);
        budget::reservation([spec], prompt, completion).0
    } else {
        0
    };
    // No store: the admission never waits (nothing to sync with).
    let admission = limiter
        .admit_reserving(subjects, reservation)
        .now_or_never()
        .expect("a limiter without a store does not wait")
        .expect("admitted");
    let headers = admission.headers;
    let probe = admission.budget_probe();
    let hook = end_hook(admission);
    // The end: `UsageTicket::finish_priced` (its `cost_of`), which fires the
    // hook that settles the admission.
    let cost = cost::price(
        &book,
        Some((PROVIDER, model)),
        tokens.normalised(),
        tokens.estimated,
    );
    hook.fire(tokens, cost.nanos.unwrap_or(0));
    // The answer's headers (`relayed_response` sizes the map for them all).
    let mut resp = Response::new(Body::empty());
    resp.headers_mut().reserve(24);
    cost_headers(resp.headers_mut(), &cost, Currency::USD);
    add_headers(&mut resp, &headers);
    // A plain answer's budget headers count its cost, read once after it
    // settled (the chat route says the body asks for no stream).
    add_budget_headers(&mut resp, probe.quota());
    resp
}

/// Pricing and budgets per request (issue 34: at most 2 µs of CPU): one API
/// key with no limits on an unpriced model, then with a day's and a month's
/// budget on a priced one (bench/run.sh's chat and chat-budget), through
/// the same steps; their difference is the work of pricing and budgets.
/// The limiter is in memory (no store), so nothing waits on a database.
fn spend(c: &mut Criterion) {
    let prices = spend_prices();
    let m = match serde_json::from_slice(&chat_body()).expect("json") {
        Value::Object(m) => m,
        _ => unreachable!(),
    };
    // What the chat route reads from the body for every request.
    let figures = (
        tokens_of_chars(gatehouse::wire::chat::prompt_chars(&m)),
        gatehouse::wire::chat::body::max_completion(&m),
    );
    let tokens = Tokens {
        prompt: 30,
        completion: 35,
        ..Tokens::default()
    };
    let budgets = Limits::from_json(&json!({
        "budget_per_day": "1000000", "budget_per_month": "1000000"
    }))
    .expect("limits");
    assert!(budgets.has_budget());

    let mut g = c.benchmark_group("spend");
    let limiter = Limiter::new(None);
    let plain = [Subject::api_key("bench", Limits::default())];
    // Each variant does what it says, or the difference means nothing.
    let header = |r: &Response, name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().expect("text").to_string())
    };
    let r = one_request(&limiter, &prices, &plain, UNPRICED, figures, tokens);
    assert_eq!(
        header(&r, "x-gatehouse-cost-status").as_deref(),
        Some("unpriced")
    );
    assert_eq!(header(&r, "x-gatehouse-budget-remaining"), None);
    g.bench_function("admission_no_budget", |b| {
        b.iter(|| {
            one_request(
                &limiter,
                &prices,
                black_box(&plain),
                black_box(UNPRICED),
                figures,
                tokens,
            )
        })
    });
    let limiter = Limiter::new(None);
    let budgeted = [Subject::api_key("bench-budget", budgets)];
    let r = one_request(&limiter, &prices, &budgeted, PRICED, figures, tokens);
    assert_eq!(
        header(&r, "x-gatehouse-cost-status").as_deref(),
        Some("exact")
    );
    // 30 in at 0.15, 35 out at 0.60 per million, and the request's 0.0001.
    assert_eq!(
        header(&r, "x-gatehouse-cost").as_deref(),
        Some("0.000125500")
    );
    assert_eq!(
        header(&r, "x-gatehouse-budget-remaining").as_deref(),
        Some("999999.999874500")
    );
    g.bench_function("admission_priced_with_budget", |b| {
        b.iter(|| {
            one_request(
                &limiter,
                &prices,
                black_box(&budgeted),
                black_box(PRICED),
                figures,
                tokens,
            )
        })
    });
    // Pricing alone: the book's lookup and the cost of one usage, as the
    // ticket prices a request's end.
    g.bench_function("pricing_only", |b| {
        b.iter(|| {
            let book = prices.book();
            cost::price(
                &book,
                Some((PROVIDER, black_box(PRICED))),
                black_box(tokens).normalised(),
                false,
            )
        })
    });
    g.finish();
}

criterion_group!(hot_path, benches, spend);
criterion_main!(hot_path);
