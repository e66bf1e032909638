//! Entry points for the `cargo fuzz` targets in `fuzz/` and for
//! `tests/api/fuzzing.rs`, which replays their corpora on stable Rust.
//!
//! Each function takes arbitrary bytes, runs the code that reads hostile
//! input (the same public functions the server calls, in the same order),
//! and panics only when an invariant breaks: a panic is a finding. Nothing
//! here touches the network or a database.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use gatehouse_pii::{Counts, Mode, Scanner, StreamRestorer, Vault};
use serde_json::{Map, Value};

use crate::agents::agent::{AgentAddress, ToolName};
use crate::agents::approvals::ApprovalState;
use crate::agents::chat::parse_headers;
use crate::agents::manifest;
use crate::agents::tools::{ToolClass, ToolMode, ToolPolicy, ToolStatus};
use crate::agents::turn;
use crate::wire::agui::AgUi;
use crate::wire::chat::body::{ChatBody, RawChat};
use crate::wire::chat::request::{ChatRequest, Upstream};
use crate::wire::chat::tool_calls_of_response;
use crate::wire::chat::{
    ask_for_usage, check_body, completion_chars, is_stream, prompt_chars, rewrite_model,
    strip_usage, usage_tokens,
};
use crate::wire::ids::is_conversation_id;
use crate::wire::is_tool_name;
use crate::wire::sse::{SseEvent, SseFrame, SseParser};

/// One scanner for every input (building one per input would dominate).
fn scanner() -> &'static Arc<Scanner> {
    static SCANNER: OnceLock<Arc<Scanner>> = OnceLock::new();
    SCANNER.get_or_init(|| {
        let terms = ["Acme Corp".to_string(), "Project Falcon".to_string()];
        Arc::new(Scanner::new(&terms).expect("the fixed terms build a scanner"))
    })
}

/// The first byte picks options; the rest is the input.
fn split(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((b, rest)) => (*b, rest),
        None => (0, data),
    }
}

/// Cuts `s` into pieces at char boundaries, sizes taken from `sizes`.
fn pieces<'a>(s: &'a str, sizes: &[u8]) -> Vec<&'a str> {
    let mut out = vec![];
    let mut at = 0;
    let mut i = 0;
    while at < s.len() {
        let want = sizes.get(i % sizes.len().max(1)).copied().unwrap_or(7) as usize % 17 + 1;
        let mut end = (at + want).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(&s[at..end]);
        at = end;
        i += 1;
    }
    out
}

/// What the handler reads of an agent chat body.
type ReadAs<'a> = (
    Option<&'a Map<String, Value>>,
    Option<Vec<&'a str>>,
    Option<Vec<String>>,
);

fn read_as(req: &ChatRequest) -> ReadAs<'_> {
    (req.fields(), req.raw_tools(), offered_names(req).ok())
}

/// The names a request offers, or why it is refused.
fn offered_names(req: &ChatRequest) -> Result<Vec<String>, crate::error::Error> {
    req.offered_tools()
        .map(|o| o.names().into_iter().map(String::from).collect())
}

/// The agent chat body rewrite, in the order the handler runs it: legacy
/// refusal, tool checks, body checks, tool rules, approval enforcement, PII
/// protection, and the upstream body. Also the model chat route's part.
pub fn chat_body(data: &[u8]) {
    let (opts, json) = split(data);
    // Agent chat's parse: read whole (which remembers the list), then again
    // with the list found remembered; the same either way.
    match (
        serde_json::from_slice::<ChatRequest>(json),
        ChatRequest::parse(&bytes::Bytes::copy_from_slice(json), false),
    ) {
        (Ok(whole), Ok(again)) => assert_eq!(read_as(&whole), read_as(&again)),
        (Err(_), Err(_)) => {}
        (whole, again) => panic!(
            "read whole: {}, with the list remembered: {}",
            whole.is_ok(),
            again.is_ok()
        ),
    }
    let raw = crate::wire::chat::body::RawChat::read(bytes::Bytes::copy_from_slice(json));
    let Ok(body) = serde_json::from_slice::<Map<String, Value>>(json) else {
        assert!(raw.is_none(), "read without a tree, refused by a tree");
        return;
    };
    // /v1/chat/completions: checks, then the upstream body.
    let checked = check_body(&body);
    upstream_body(&body, None, "upstream-model");
    // Read without a tree: only a body the checks pass, and the same upstream body.
    if let Some(raw) = raw {
        assert!(
            checked.is_ok(),
            "read without a tree, refused by the checks"
        );
        assert_eq!(Some(raw.model()), body.get("model").and_then(Value::as_str));
        assert_eq!(raw.prompt_chars, prompt_chars(&body));
        let mut tree = body.clone();
        let stream = is_stream(&tree);
        assert_eq!(raw.stream, stream);
        let _ = ask_for_usage(&mut tree, stream);
        let mut want = ChatBody::new(&tree, None).expect("a JSON map serialises");
        let sent: Value = serde_json::from_slice(&ChatBody::spliced(&raw).for_model("u"))
            .expect("the upstream body is JSON");
        let want: Value =
            serde_json::from_slice(&want.for_model("u")).expect("the upstream body is JSON");
        assert_eq!(sent, want);
    }

    // Agent chat keeps a `tools` list as text: the same body all the same.
    let req: ChatRequest =
        serde_json::from_slice(json).expect("a JSON object parses as an agent chat body");
    {
        let mut whole = req.fields().expect("read whole: a tree").clone();
        if let Some(ts) = req.raw_tools() {
            let v = ts
                .iter()
                .map(|t| serde_json::from_str(t).expect("kept tools are JSON"))
                .collect();
            whole.insert("tools".into(), Value::Array(v));
        }
        // A list of too many tools is refused unread: its tools are not kept.
        let too_many = offered_names(&req).is_err_and(|e| e.code == "too_many_tools");
        if !too_many {
            assert_eq!(whole, body);
        }
        for t in req.raw_tools().into_iter().flatten() {
            assert!(
                crate::wire::chat::tools::scan_agrees_with_serde(t),
                "the one-pass scan and serde read a tool differently: {t}"
            );
        }
    }
    // Its fields kept as the client's text when they can be: the rules end
    // the same way, and the upstream gets the same body.
    let text = ChatRequest::parse(&bytes::Bytes::copy_from_slice(json), true)
        .expect("what parses whole parses with its fields kept as text");
    let instructions = (opts & 0x40 != 0).then_some("Be \"brief\".");
    let tree_end = agent_rules(req, opts, instructions);
    let text_end = agent_rules(text, opts, instructions);
    assert_eq!(tree_end, text_end);
}

/// How [`agent_rules`] ended: with a refusal (its code and message), or with
/// what the rules saw and did (the names offered, the tools held, the calls
/// answered) and the upstream body, whether it streams and its prompt's
/// characters.
type RulesEnd = Result<(Seen, Value, bool, usize), String>;

type Seen = (Vec<String>, Vec<String>, Vec<String>);

fn refused(e: crate::error::Error) -> String {
    format!("{}: {}", e.code, e.message)
}

/// Agent chat's rules, as the handler runs them: [`turn::check`] and
/// [`turn::plan`], with what is known made up from `opts`; the tool rule's
/// own decision is the oracle for what goes upstream.
fn agent_rules(mut req: ChatRequest, opts: u8, instructions: Option<&str>) -> RulesEnd {
    let offered_tools = turn::check(&req).map_err(refused)?;
    let offered: Vec<String> = offered_tools
        .names()
        .into_iter()
        .map(String::from)
        .collect();
    assert!(offered.len() <= crate::wire::chat::request::MAX_REQUEST_TOOLS);
    assert!(offered.iter().all(|n| is_tool_name(n)));
    let mode = [
        ToolMode::Off,
        ToolMode::ReadOnly,
        ToolMode::Ask,
        ToolMode::Auto,
    ][usize::from(opts & 3)];
    // Some tools known to the manifest, a contract naming every other one.
    let classes: HashMap<String, ToolClass> = offered
        .iter()
        .step_by(2)
        .map(|n| (n.to_string(), ToolClass::Read))
        .collect();
    let contract: Vec<String> = offered
        .iter()
        .skip(1)
        .step_by(2)
        .map(|n| n.to_string())
        .collect();
    let decisions: HashMap<String, ToolStatus> = offered
        .iter()
        .skip(2)
        .step_by(3)
        .map(|n| (n.to_string(), ToolStatus::Accepted))
        .collect();
    let allow_local_mcp = opts & 4 != 0;
    let expected = ToolPolicy {
        mode,
        classes: &classes,
        contract: &contract,
        decisions: &decisions,
        allow_local_mcp,
    }
    .decide(&offered);
    assert!(expected.held.iter().all(|n| !expected.keep.contains(n)));

    let answered = req.answered_calls();
    let states: HashMap<String, ApprovalState> = answered
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let s = [
                ApprovalState::Approved,
                ApprovalState::Denied,
                ApprovalState::Expired,
                ApprovalState::Pending,
            ][(i + usize::from(opts >> 4)) % 4];
            (id.clone(), s)
        })
        .collect();
    let pii = if opts & 0x80 != 0 {
        Mode::Off
    } else {
        [Mode::Redact, Mode::TokenizeReversible][usize::from(opts >> 3 & 1)]
    };
    let known = turn::Known {
        mode,
        classes: Arc::new(classes),
        decisions: Arc::new(decisions),
        states,
        pii: (pii != Mode::Off).then(|| turn::PiiKnown {
            mode: pii,
            scanner: Arc::clone(scanner()),
            vault: Vault::new(),
        }),
    };
    let rules = turn::AgentRules {
        instructions,
        tool_contract: &contract,
        allow_local_mcp,
    };
    let plan = turn::plan(&mut req, &offered_tools, rules, known);
    assert_eq!(plan.held, expected.held);
    if let Some(e) = plan.refused {
        return Err(refused(e));
    }
    // What goes upstream offers only kept tools (tool names are not scanned
    // for PII: the decision still holds).
    if let Ok(after) = offered_names(&req) {
        assert!(after.iter().all(|n| expected.keep.contains(n)), "{after:?}");
    }
    let stream = req.is_stream();
    let (sent, chars) = match req.into_upstream() {
        Upstream::Tree(fields, tools) => {
            assert_eq!(is_stream(&fields), stream);
            let texts = tools.as_ref().map(|t| t.texts());
            (
                upstream_body(&fields, texts.as_deref(), "agent-model"),
                prompt_chars(&fields),
            )
        }
        Upstream::Text {
            after_model,
            stream: text_stream,
            prompt_chars,
        } => {
            assert_eq!(text_stream, stream);
            let raw = RawChat::assembled(after_model, stream, prompt_chars);
            let sent = ChatBody::spliced(&raw).for_model("agent-model");
            let sent: Value = serde_json::from_slice(&sent).expect("the upstream body is JSON");
            // Through the write and read the tree's body went through, so
            // floats compare exactly.
            let sent = serde_json::to_vec(&sent).expect("a Value serialises");
            (
                serde_json::from_slice(&sent).expect("serialised JSON parses"),
                prompt_chars,
            )
        }
    };
    Ok(((offered, plan.held, answered), sent, stream, chars))
}

/// The bytes sent upstream parse back as the body with the upstream model.
fn upstream_body(body: &Map<String, Value>, tools: Option<&[&str]>, upstream_model: &str) -> Value {
    let mut body = body.clone();
    let stream = is_stream(&body);
    let _ = ask_for_usage(&mut body, stream);
    let mut template = ChatBody::new(&body, tools).expect("a JSON map serialises");
    let bytes = template.for_model(upstream_model);
    let again = template.for_model(upstream_model);
    assert_eq!(bytes, again);
    let sent: Map<String, Value> =
        serde_json::from_slice(&bytes).expect("the upstream body is JSON");
    body.insert("model".into(), Value::String(upstream_model.into()));
    if let Some(ts) = tools {
        let v = ts
            .iter()
            .map(|t| serde_json::from_str(t).expect("kept tools are JSON"))
            .collect();
        body.insert("tools".into(), Value::Array(v));
    }
    // Compared through the same write and read (floats read back exactly then).
    let expected: Map<String, Value> =
        serde_json::from_slice(&serde_json::to_vec(&body).expect("a JSON map serialises"))
            .expect("serialised JSON parses");
    assert_eq!(sent, expected);
    Value::Object(sent)
}

/// The manifest parser and its canonical hash.
pub fn manifest(data: &[u8]) {
    let Ok(m) = manifest::parse(data) else {
        return;
    };
    assert!(m.tools.len() <= manifest::MAX_TOOLS);
    assert!(m.context.len() <= manifest::MAX_CONTEXT);
    let mut names = std::collections::HashSet::new();
    for t in &m.tools {
        assert!(is_tool_name(&t.name));
        assert!(names.insert(t.name.as_str()), "duplicate {}", t.name);
        assert!(t.description.chars().count() <= manifest::MAX_DESCRIPTION_CHARS);
        let _ = t.parameters_hash();
    }
    let hash = m.hash();
    assert!(hash.starts_with("sha256:") && hash.len() == 7 + 64);
    // White space does not count: the compact and the pretty form of the
    // same document (same number spellings) hash the same.
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        let compact = serde_json::to_vec(&v).expect("a Value serialises");
        let pretty = serde_json::to_vec_pretty(&v).expect("a Value serialises");
        let a = manifest::parse(&compact).expect("the compact form parses too");
        let b = manifest::parse(&pretty).expect("the pretty form parses too");
        assert_eq!(a.hash(), b.hash());
    }
}

fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut p = SseParser::new();
    let mut out = vec![];
    for c in chunks {
        p.push(c);
        while let Some(ev) = p.next_event() {
            out.push(ev);
        }
    }
    out.extend(p.finish());
    out
}

/// The SSE parser (bytes split anywhere give the same events) and the
/// relay's work on each event: usage handling, the `model` rewrite, AG-UI
/// events, PII restore across chunks, and the frames written back.
pub fn sse(data: &[u8]) {
    let (opts, bytes) = split(data);
    let whole = parse_all(&[bytes]);
    // Split at positions taken from the input itself.
    let step = usize::from(opts % 13) + 1;
    let chunks: Vec<&[u8]> = bytes.chunks(step).collect();
    assert_eq!(parse_all(&chunks), whole, "split every {step} bytes");

    let mut vault = Vault::new();
    let mut counts = Counts::new();
    let _ = vault.tokenize(
        scanner(),
        "mail ann@example.com or call +1 415 555 0100",
        &mut counts,
    );
    let vault = Arc::new(vault);
    let mut content = StreamRestorer::new(Arc::clone(&vault), false);
    let mut args = StreamRestorer::new(Arc::clone(&vault), true);
    let mut agui = AgUi::new("conv".into(), "turn".into());
    let _ = agui.run_started();
    let mut completion = 0usize;
    for ev in &whole {
        // A frame written from an event reads back as that event.
        let frame = match &ev.event {
            Some(name) if !name.is_empty() => SseFrame::Event {
                event: name.clone(),
                data: ev.data.clone(),
            },
            _ => SseFrame::Data(ev.data.clone()),
        };
        let back = parse_all(&[&frame.to_bytes()]);
        assert_eq!(back.len(), 1, "{frame:?}");
        assert_eq!(back[0].data, ev.data);

        let Ok(mut chunk) = serde_json::from_str::<Value>(&ev.data) else {
            continue;
        };
        let Some(obj) = chunk.as_object_mut() else {
            continue;
        };
        let _ = usage_tokens(obj.get("usage"));
        completion = completion.saturating_add(completion_chars(obj, "delta"));
        if opts & 0x80 == 0 && !strip_usage(obj) {
            continue;
        }
        rewrite_model(obj, "alias");
        if let Some(choices) = obj.get_mut("choices").and_then(Value::as_array_mut) {
            for c in choices {
                if let Some(Value::String(s)) = c.pointer_mut("/delta/content") {
                    *s = content.push(s);
                }
                if let Some(Value::String(s)) =
                    c.pointer_mut("/delta/tool_calls/0/function/arguments")
                {
                    *s = args.push(s);
                }
            }
        }
        let _ = tool_calls_of_response(&chunk);
        let _ = agui.on_chunk(&chunk);
        let out = SseFrame::json(&chunk).to_bytes();
        let back = parse_all(&[&out]);
        assert_eq!(back.len(), 1);
        let reread: Value = serde_json::from_str(&back[0].data).expect("a written chunk is JSON");
        let expected: Value = serde_json::from_str(&chunk.to_string()).expect("JSON parses");
        assert_eq!(reread, expected);
    }
    let _ = content.finish();
    let _ = args.finish();
    let _ = agui.finish(None, "alias", vec![]);
    let _ = agui.error("cut off", "upstream_error");
}

/// The PII scanner, redaction, tokens and their restore (whole and streamed).
pub fn pii(data: &[u8]) {
    let (opts, bytes) = split(data);
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let s = scanner();
    let findings = s.scan(text);
    let mut last = 0;
    for f in &findings {
        assert!(
            f.start >= last && f.start < f.end && f.end <= text.len(),
            "{f:?}"
        );
        assert!(text.is_char_boundary(f.start) && text.is_char_boundary(f.end));
        last = f.end;
    }
    let mut counts = Counts::new();
    let redacted = gatehouse_pii::redact(s, text, &mut counts);
    assert_eq!(counts.total() as usize, findings.len());
    if findings.is_empty() {
        assert_eq!(redacted, text);
    }
    let mut vault = Vault::new();
    let mut counts = Counts::new();
    let tokenized = vault.tokenize(s, text, &mut counts);
    // A second pass gives every value its first token again.
    let mut counts2 = Counts::new();
    let twice = vault.tokenize(s, text, &mut counts2);
    assert_eq!(tokenized, twice);
    let restored = vault.restore(&tokenized);
    if !text.contains('[') {
        assert_eq!(restored, text);
    }
    let vault = Arc::new(vault);
    for json in [false, true] {
        let mut r = StreamRestorer::new(Arc::clone(&vault), json);
        let mut streamed = String::new();
        for p in pieces(&tokenized, &[opts, opts.rotate_left(3), 1]) {
            streamed.push_str(&r.push(p));
            assert!(vault.is_empty() || r.held_len() < vault.max_token_len().max(1));
        }
        streamed.push_str(&r.finish());
        let whole = if json {
            vault.restore_json(&tokenized)
        } else {
            vault.restore(&tokenized)
        };
        assert_eq!(streamed, whole);
    }
}

/// Conversation, turn and event ids, tool names, agent addresses, and the
/// agent chat headers that carry them.
pub fn ids(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let conv = text.chars().count() <= 128
        && !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".:_-".contains(c));
    assert_eq!(is_conversation_id(&text), conv, "{text:?}");
    let tool = text.len() <= 64
        && !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c));
    assert_eq!(is_tool_name(&text), tool);
    assert_eq!(ToolName::parse(&text).is_some(), tool);
    let address = text.len() <= 64
        && !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-@".contains(c));
    assert_eq!(AgentAddress::parse(&text).is_some(), address);
    assert_eq!(AgentAddress::parse_field("address", &text).is_ok(), address);
    if let Some(m) = ToolMode::parse(&text) {
        assert_eq!(m.as_str(), text);
    }
    if let Some(c) = ToolClass::parse(&text) {
        assert_eq!(c.as_str(), text);
    }
    if let Some(a) = ApprovalState::parse(&text) {
        assert_eq!(a.as_str(), text);
    }
    let _ = crate::pii::choose_mode(
        Mode::Redact,
        data.first().is_some_and(|b| b & 1 == 1),
        Some(&text),
    );

    // Header values: the raw bytes, split into the five headers at `\n`.
    let names = [
        "X-Service-Tool-Mode",
        "X-Service-Conversation-Id",
        "X-Service-Turn-Id",
        "X-Service-PII-Mode",
        "X-Service-Events",
    ];
    let values: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let lookup = |name: &str| {
        let i = names.iter().position(|n| n.eq_ignore_ascii_case(name))?;
        values.get(i).copied().filter(|v| !v.is_empty())
    };
    if let Ok(h) = parse_headers(lookup) {
        for id in [&h.conversation_id, &h.turn_id].into_iter().flatten() {
            assert!(is_conversation_id(id));
        }
    }
}

/// A Responses body read without a tree is one the tree path accepts, and
/// gives what it gives: the model, the chat body (compared as trees), the
/// prompt's characters, the reservation's figures, the dropped and custom
/// tools, and the echo. Returns whether the body was read without a tree.
pub fn responses_read_without_a_tree(data: &[u8]) -> bool {
    use crate::models::requested_model;
    use crate::wire::responses::{Echo, RawResponses, ResponsesRequest};
    let Some(raw) = RawResponses::read(&bytes::Bytes::copy_from_slice(data)) else {
        return false;
    };
    let body: Map<String, Value> =
        serde_json::from_slice(data).expect("a body read without a tree reads as one");
    assert_eq!(requested_model(&body).ok(), Some(raw.model.as_str()));
    assert_eq!(
        &data[raw.model_at.clone()],
        serde_json::to_vec(&raw.model).expect("a string").as_slice()
    );
    let r = ResponsesRequest::parse(body).expect("a body read without a tree passes the checks");
    // What goes upstream either way, read back as trees.
    let chat = r.to_chat();
    let tree_sent = ChatBody::new(&chat, None)
        .expect("a tree serialises")
        .for_model("m");
    let assembled = RawChat::assembled(raw.chat_tail.clone(), raw.stream, raw.prompt_chars);
    let sent = ChatBody::spliced(&assembled).for_model("m");
    let sent: Value = serde_json::from_slice(&sent).expect("the chat body is JSON");
    let tree_sent: Value = serde_json::from_slice(&tree_sent).expect("JSON");
    assert_eq!(sent, tree_sent, "the same chat body");
    assert_eq!(raw.stream, r.is_stream());
    assert_eq!(raw.prompt_chars, prompt_chars(&chat));
    assert_eq!(raw.text.chars(), r.text_chars());
    let max = crate::spend::budget::whole(r.body.get("max_output_tokens"));
    assert_eq!(raw.max_output, max);
    assert_eq!(raw.dropped, r.dropped_tools());
    let echo = Echo::of(&r.body, r.custom_tools(), prompt_chars(&chat));
    assert_eq!(raw.echo.fields(), echo.fields());
    assert_eq!(raw.echo.custom, echo.custom);
    assert_eq!(raw.echo.prompt_estimate, echo.prompt_estimate);
    true
}

/// `/v1/responses` (and the agent route): a body's checks, its bridge and
/// native translations, and a chat answer and stream (the same bytes read
/// as chunks, one JSON value a line) made into the Responses shapes.
/// Invariants: a body the checks pass translates to a chat body with
/// `messages`; every stream event is numbered one after the other, and
/// exactly one terminal event ends the stream, with nothing after it.
pub fn responses(data: &[u8]) {
    use crate::wire::responses::answer::from_chat;
    use crate::wire::responses::{Echo, ResponseMeta, ResponsesRequest, ResponsesStream};
    if let Ok(body) = serde_json::from_slice::<Map<String, Value>>(data) {
        let agent = ResponsesRequest::parse_for_agent(body.clone());
        if let Ok(r) = ResponsesRequest::parse(body) {
            let chat = r.to_chat();
            assert!(chat.get("messages").is_some_and(Value::is_array));
            let _ = serde_json::to_vec(&r.to_native()).expect("a tree serialises");
            assert!(
                agent.is_ok(),
                "the agent route refuses less than the key route"
            );
            let echo = Echo::of(&r.body, r.custom_tools(), prompt_chars(&chat));
            let _ = from_chat(&Value::Object(chat), &ResponseMeta::new("m"), &echo);
        }
    }
    responses_read_without_a_tree(data);
    let body = serde_json::json!({"tools": [{"type": "custom", "name": "p"}]});
    let echo = Echo::of(body.as_object().expect("an object"), vec!["p".into()], 4);
    let mut stream = ResponsesStream::new(ResponseMeta::new("m"), echo);
    let mut frames = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        if let Ok(chunk) = serde_json::from_slice::<Value>(line) {
            frames.extend(stream.on_chunk(&chunk));
            let _ = from_chat(&chunk, &ResponseMeta::new("m"), &Echo::default());
        }
    }
    let end = if data.first() == Some(&b'!') {
        stream.fail("upstream_error", "cut")
    } else {
        stream.finish(None, Vec::new())
    };
    frames.extend(end);
    assert!(
        stream.finish(None, Vec::new()).is_empty(),
        "nothing after the end"
    );
    let terminal = [
        "response.completed",
        "response.incomplete",
        "response.failed",
    ];
    for (i, f) in frames.iter().enumerate() {
        let SseFrame::Event { event, data } = f else {
            panic!("an unnamed Responses event");
        };
        let v: Value = serde_json::from_str(data).expect("events are JSON");
        assert_eq!(v["sequence_number"], Value::from(i));
        assert_eq!(v["type"].as_str(), Some(event.as_str()));
        assert_eq!(terminal.contains(&event.as_str()), i + 1 == frames.len());
    }
}

/// The AG-UI endpoint's body: a `RunAgentInput` read, checked and mapped to
/// the chat body agent chat then takes.
pub fn agui_input(data: &[u8]) {
    let run = match crate::wire::agui::input::read(data) {
        Ok(run) => run,
        Err(e) => {
            // Every refusal is a 400 that names the field.
            assert_eq!(e.code, "validation_error");
            assert!(e.param.as_deref().is_some_and(|p| !p.is_empty()));
            return;
        }
    };
    assert!(is_conversation_id(&run.thread_id) && is_conversation_id(&run.run_id));
    // Only chat's own fields, always a stream, each message in a chat role.
    assert!(run
        .chat
        .keys()
        .all(|k| ["messages", "tools", "stream"].contains(&k.as_str())));
    assert!(is_stream(&run.chat));
    let messages = run.chat["messages"].as_array().expect("messages");
    for m in messages {
        let role = m["role"].as_str().expect("a role");
        assert!(["system", "user", "assistant", "tool"].contains(&role));
        assert!(m.as_object().is_some_and(|o| o.keys().all(|k| [
            "role",
            "content",
            "tool_calls",
            "tool_call_id"
        ]
        .contains(&k.as_str()))));
    }
    // Agent chat reads it as it reads a client's body: the same tools, by name.
    let bytes = bytes::Bytes::from(serde_json::to_vec(&run.chat).expect("a map serialises"));
    let req = ChatRequest::parse(&bytes, true).expect("agent chat reads the mapped body");
    let tools = run.chat.get("tools").and_then(Value::as_array);
    if let Ok(offered) = turn::check(&req) {
        let names: Vec<&str> = tools
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        assert_eq!(offered.names(), names);
    } else {
        // Refused only for the list (duplicates, too many) or no messages.
        assert!(tools.is_some() || messages.is_empty());
    }
}
