//! The chat relay: one OpenAI-compatible chat completion, plain or streamed,
//! from the client to the model's upstream and back. `/v1/chat/completions`
//! uses it with [`NoHooks`]; the agent chat route uses it with hooks that add
//! its own behaviour (PII restore, approvals, AG-UI events).
//!
//! What the relay does:
//!
//! * The body goes upstream as the caller gives it (a JSON object kept as a
//!   map, so fields the gateway does not know pass unchanged), with `model`
//!   set to the upstream's model name. A caller that needs to change the body
//!   (tool rules, PII, instructions) edits [`ChatCall::body`] before calling.
//! * Streams (`"stream": true`) always ask the upstream for usage
//!   (`stream_options.include_usage: true`) so usage can be recorded, but the
//!   client gets exactly what it asked for: unless it asked for usage itself,
//!   the upstream's usage-only chunk (empty `choices` + `usage`) and every
//!   `usage` field in other chunks are removed.
//! * The answer's `model` (the whole answer, or every stream chunk) names the
//!   alias the client used.
//! * Streams are relayed event by event, never collected: the response head
//!   and the first chunk go out as soon as the upstream's first event is in;
//!   the events of one upstream read go out in one write. Failures before
//!   that first event are ordinary HTTP errors (502/504) and may be retried
//!   on another target; after it, every event read before the failure goes
//!   out (also those read together with it), then `data: {"error":{...}}`
//!   (OpenAI error shape) and `data: [DONE]`. The upstream going quiet for
//!   longer than the provider's `timeout_s` counts as a failure
//!   (`upstream_timeout`).
//! * When the client goes away, the response body is dropped, and with it the
//!   upstream request: the upstream sees its connection close.
//! * One usage record per call: user, key or agent context, alias, tokens
//!   (the upstream's `usage`, else an estimate of about four characters a
//!   token), latency to the end of the answer, and status (the error's status
//!   for failures; 499 when the client went away).
//!
//! Hooks ([`ChatHooks`], static dispatch, every method has a default):
//!
//! * `on_response`: a plain answer after the `model` rewrite; may edit it;
//!   async (it may write to the database); an error fails the request.
//! * `on_chunk`: each stream chunk (parsed JSON, after usage stripping and
//!   the `model` rewrite) before it goes out; may edit it, may push frames
//!   to send before it, and may drop it ([`ChunkAction::Drop`]).
//! * `on_stream_end`: the stream ended normally; frames to send before
//!   `data: [DONE]`; async; gets the upstream's usage object if it sent one.
//! * `on_stream_error`: the stream failed after it began; frames to send
//!   before the error message.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind};
use crate::models::observed::Attempt;
use crate::models::routing::{
    judge, mono_ms, next_pick, Answered, Failure, InFlight, Pick, ProviderStats,
};
use crate::models::upstream::{self, AttemptError};
use crate::models::{Model, Provider, ProviderType};
use crate::usage::{estimate_tokens, Tokens, UsageContext, UsageSink, UsageTicket, CLIENT_CLOSED};
use crate::wire::chat::body::{ChatBody, ChatInput};
use crate::wire::json::MapOnly;
use crate::wire::sse::{SseEvent, SseFrame, SseParser, DONE};

/// The largest single stream event accepted from an upstream.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How long to wait, after `[DONE]`, for the upstream to end its body (so
/// its connection can be reused).
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// One chat completion to relay.
pub struct ChatCall {
    pub model: Arc<Model>,
    /// The request body as the client sent it (plus the caller's edits).
    pub body: ChatInput,
    /// The tools of the `tools` list, each as JSON text, when the caller
    /// kept them so (agent chat, with a tree body).
    pub tools: Option<crate::wire::chat::request::KeptTools>,
    pub usage: UsageContext,
}

/// What happens to a stream chunk after `on_chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkAction {
    Send,
    /// Do not send the chunk (frames pushed before it still go out).
    Drop,
}

/// Extra behaviour around the relay; see the module documentation.
pub trait ChatHooks: Send + 'static {
    /// Whether `on_response` needs the answer as a JSON tree. Without it a
    /// plain answer goes back as the upstream's bytes with only `model`
    /// spliced in (no parse into a tree and no serialisation).
    const EDITS_ANSWERS: bool = true;

    /// Whether `on_response` needs this plain answer (the upstream's bytes)
    /// as a JSON tree; without it the answer takes the splice path.
    fn edits_answer(&self, answer: &[u8]) -> bool {
        let _ = answer;
        Self::EDITS_ANSWERS
    }

    /// A plain (non-stream) answer, after the `model` rewrite.
    fn on_response(
        &mut self,
        response: &mut Value,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = response;
        async { Ok(()) }
    }

    /// A stream chunk about to go out; `before` takes frames to send first.
    fn on_chunk(&mut self, chunk: &mut Value, before: &mut Vec<SseFrame>) -> ChunkAction {
        let _ = (chunk, before);
        ChunkAction::Send
    }

    /// The stream ended normally: frames to send before `data: [DONE]`.
    fn on_stream_end(
        &mut self,
        usage: Option<&Value>,
    ) -> impl Future<Output = Vec<SseFrame>> + Send {
        let _ = usage;
        async { Vec::new() }
    }

    /// The stream failed after it began: frames to send before the error.
    fn on_stream_error(&mut self, error: &Error) -> Vec<SseFrame> {
        let _ = error;
        Vec::new()
    }
}

/// No extra behaviour (`/v1/chat/completions`).
pub struct NoHooks;

impl ChatHooks for NoHooks {
    const EDITS_ANSWERS: bool = false;
}

/// Checks the fields the relay itself reads; everything else is the
/// upstream's business. (`model` is checked by the caller, who resolves it.)
pub fn check_body(body: &Map<String, Value>) -> Result<(), Error> {
    match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => {}
        Some(Value::Array(_)) => {
            return Err(Error::validation(
                "messages",
                "'messages' must not be empty.",
            ))
        }
        _ => {
            return Err(Error::validation(
                "messages",
                "'messages' must be an array of messages.",
            ))
        }
    }
    if !matches!(
        body.get("stream"),
        None | Some(Value::Null | Value::Bool(_))
    ) {
        return Err(Error::validation(
            "stream",
            "'stream' must be true or false.",
        ));
    }
    match body.get("stream_options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            if !matches!(
                o.get("include_usage"),
                None | Some(Value::Null | Value::Bool(_))
            ) {
                return Err(Error::validation(
                    "stream_options.include_usage",
                    "'stream_options.include_usage' must be true or false.",
                ));
            }
        }
        Some(_) => {
            return Err(Error::validation(
                "stream_options",
                "'stream_options' must be an object.",
            ))
        }
    }
    Ok(())
}

pub fn is_stream(body: &Map<String, Value>) -> bool {
    body.get("stream") == Some(&Value::Bool(true))
}

/// Makes the body the upstream's: its model name, and for streams usage
/// asked for. Returns whether the client itself asked for usage.
pub fn prepare_body(body: &mut Map<String, Value>, upstream_model: &str, stream: bool) -> bool {
    body.insert("model".into(), Value::String(upstream_model.to_string()));
    ask_for_usage(body, stream)
}

/// For streams, asks the upstream for usage. Returns whether the client
/// itself asked for it.
pub fn ask_for_usage(body: &mut Map<String, Value>, stream: bool) -> bool {
    if !stream {
        return false;
    }
    let opts = body
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Map::new()));
    if !opts.is_object() {
        *opts = Value::Object(Map::new());
    }
    let Some(o) = opts.as_object_mut() else {
        return false;
    };
    let client_asked = o.get("include_usage") == Some(&Value::Bool(true));
    o.insert("include_usage".into(), Value::Bool(true));
    client_asked
}

/// For a client that did not ask for usage: false for the upstream's
/// usage-only chunk (drop it); otherwise removes any `usage` field.
pub fn strip_usage(chunk: &mut Map<String, Value>) -> bool {
    let usage_only = chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
        && chunk.get("usage").is_some_and(|u| !u.is_null());
    if usage_only {
        return false;
    }
    chunk.remove("usage");
    true
}

/// Names the alias in an answer or chunk.
pub fn rewrite_model(obj: &mut Map<String, Value>, alias: &str) {
    obj.insert("model".into(), Value::String(alias.to_string()));
}

/// Tokens from an OpenAI `usage` object, when it has them.
pub fn usage_tokens(usage: Option<&Value>) -> Option<Tokens> {
    let u = usage?.as_object()?;
    let get = |k: &str| u.get(k).and_then(Value::as_i64);
    let (p, c) = (get("prompt_tokens"), get("completion_tokens"));
    if p.is_none() && c.is_none() {
        return None;
    }
    Some(Tokens {
        prompt: p.unwrap_or(0),
        completion: c.unwrap_or(0),
    })
}

fn text_chars(content: Option<&Value>) -> usize {
    match content {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| t.chars().count())
            .sum(),
        _ => 0,
    }
}

fn tool_call_chars(calls: Option<&Value>) -> usize {
    calls
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| c.get("function")?.get("arguments")?.as_str())
                .map(|a| a.chars().count())
                .sum()
        })
        .unwrap_or(0)
}

/// Characters of text in the messages (content, text parts, tool-call
/// arguments), for the prompt estimate.
pub fn prompt_chars(body: &Map<String, Value>) -> usize {
    body.get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .map(|m| text_chars(m.get("content")) + tool_call_chars(m.get("tool_calls")))
                .sum()
        })
        .unwrap_or(0)
}

/// Characters of generated text in a plain answer or (with `delta`) a chunk.
pub fn completion_chars(obj: &Map<String, Value>, field: &str) -> usize {
    obj.get("choices")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get(field))
                .map(|m| text_chars(m.get("content")) + tool_call_chars(m.get("tool_calls")))
                .sum()
        })
        .unwrap_or(0)
}

fn unsupported_provider(model: &Model, provider: &Provider) -> Error {
    Error::new(
        ErrorKind::Internal,
        "provider_unsupported",
        format!(
            "The model '{}' runs on a {} provider ('{}'), which does not serve chat completions; an administrator must put it on an openai provider.",
            model.id,
            provider.kind.as_str(),
            provider.name
        ),
    )
}

/// The bytes of a relayed stream, SSE-framed, ready for the client.
pub type RelayStream =
    Pin<Box<dyn Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static>>;

/// A relayed answer: a whole JSON answer, or a stream of SSE bytes.
pub enum RelayedBody {
    Answer(Value),
    /// A plain answer as JSON bytes.
    Raw(Bytes),
    Stream(RelayStream),
}

/// A relayed answer and who gave it (for `x-gatehouse-provider` and
/// `x-gatehouse-attempts`).
pub struct Relayed {
    pub body: RelayedBody,
    pub answered: Answered,
}

fn failed(mut ticket: UsageTicket, e: Error) -> Result<Relayed, Error> {
    ticket.finish(e.status(), Tokens::default());
    Err(e)
}

/// Relays one chat completion; see the module documentation.
pub async fn relay<H: ChatHooks>(
    client: &crate::models::upstream::UpstreamClient,
    usage_sink: &UsageSink,
    call: ChatCall,
    hooks: H,
) -> Result<Relayed, Error> {
    let ChatCall {
        model,
        body,
        tools,
        usage,
    } = call;
    let mut ticket = UsageTicket::new(usage_sink, usage, "chat");
    ticket.set_model(&model.id);
    let (stream, client_usage, prompt_estimate, mut template) = match body {
        ChatInput::Raw(raw) => (
            raw.stream,
            false,
            estimate_tokens(raw.prompt_chars),
            ChatBody::spliced(&raw),
        ),
        ChatInput::Tree(mut body) => {
            let stream = is_stream(&body);
            let client_usage = ask_for_usage(&mut body, stream);
            let prompt_estimate = estimate_tokens(prompt_chars(&body));
            let tool_texts = tools.as_ref().map(|t| t.texts());
            match ChatBody::new(&body, tool_texts.as_deref()) {
                Ok(t) => (stream, client_usage, prompt_estimate, t),
                Err(e) => return failed(ticket, Error::internal(e)),
            }
        }
    };
    let chain = model.chain();
    let mut attempts = model.attempts(&chain);
    let mut hooks = hooks;
    let mut last: Option<Error> = None;
    while let Some(Pick {
        stage,
        target,
        mut guard,
    }) = next_pick(&mut attempts)
    {
        let answering = chain[stage];
        if target.provider.kind != ProviderType::Openai {
            return failed(ticket, unsupported_provider(answering, &target.provider));
        }
        target.stats.attempt();
        let answered = Answered {
            model: answering.id.clone(),
            provider: target.provider.name.clone(),
            attempts: attempts.made(),
        };
        let deadline = upstream::deadline(&target.provider);
        let bytes = template.for_model(&target.upstream_model);
        let mut attempt = Attempt::start("chat", &target.provider, &target.upstream_model);
        let sent = upstream::post(
            client,
            &target.provider,
            "/chat/completions",
            bytes,
            stream,
            deadline,
        );
        let resp = match attempt.scope(sent).await {
            Ok(r) => {
                attempt.status(r.status());
                r
            }
            Err(e) => {
                attempt.failed(e.failure);
                let error = answered.mark(e.error);
                if !target.failed(&mut guard, e.failure, false).retry {
                    return failed(ticket, error);
                }
                last = Some(error);
                continue;
            }
        };
        if !stream {
            // Hooks that edit answers get a JSON tree; otherwise the bytes pass
            // with `model` spliced in.
            let answer = match upstream::read_body(&target.provider, resp, deadline).await {
                Err(e) => Err(e),
                Ok(bytes) if hooks.edits_answer(&bytes) => {
                    answer_tree(&bytes, &answering.id, prompt_estimate, &mut attempt)
                        .map(|(v, tokens)| (RelayedBody::Answer(v), tokens))
                }
                Ok(bytes) => raw_answer(&bytes, &answering.id, prompt_estimate, &mut attempt)
                    .map(|(b, tokens)| (RelayedBody::Raw(b), tokens)),
            };
            match answer {
                Ok((mut body, tokens)) => {
                    guard.ok();
                    attempt.finish();
                    ticket.set_model(&answering.id);
                    ticket.set_provider(&target.provider.name);
                    if let RelayedBody::Answer(v) = &mut body {
                        if let Err(e) = hooks.on_response(v).await {
                            return failed(ticket, answered.mark(e));
                        }
                    }
                    ticket.finish(200, tokens);
                    return Ok(Relayed { body, answered });
                }
                Err(e) => {
                    attempt.failed(e.failure);
                    let error = answered.mark(e.error);
                    if !target.failed(&mut guard, e.failure, false).retry {
                        return failed(ticket, error);
                    }
                    last = Some(error);
                    continue;
                }
            }
        }

        let mut relay = StreamRelay {
            upstream: resp.into_stream(),
            parser: SseParser::new(),
            hooks: Some(hooks),
            alias: answering.id.clone(),
            alias_json: serde_json::to_vec(&answering.id).unwrap_or_default(),
            provider: Arc::clone(&target.provider),
            stats: Arc::clone(&target.stats),
            guard,
            client_usage,
            usage: None,
            prompt_estimate,
            completion_chars: 0,
            saw_finish: false,
            eof: false,
            started: false,
            read_event: false,
            failure: None,
            phase: Phase::Streaming,
            ticket: Some(ticket),
            attempt,
        };
        // Named before the first step, which may already end the stream.
        if let Some(t) = relay.ticket.as_mut() {
            t.set_model(&answering.id);
            t.set_provider(&target.provider.name);
        }
        // Wait for the first output. A failure before the first event is a
        // plain HTTP error and may go to the next target; once an event was
        // read the stream begins, even if that event made no output.
        let first = match relay.step().await {
            Ok(first) => {
                relay.started = true;
                relay.guard.ok();
                relay.gather(first.unwrap_or_default()).await
            }
            Err(e) if relay.read_event => {
                relay.started = true;
                relay.fail(&e)
            }
            Err(e) => {
                let e = answered.mark(e);
                let retry = match relay.failure.take() {
                    Some(f) => {
                        relay.attempt.failed(f);
                        target.failed(&mut relay.guard, f, false).retry
                    }
                    None => false,
                };
                let (Some(h), Some(t)) = (relay.hooks.take(), relay.ticket.take()) else {
                    return Err(e);
                };
                hooks = h;
                ticket = t;
                // No answer came from this attempt.
                ticket.set_model(&model.id);
                ticket.clear_provider();
                if !retry {
                    return failed(ticket, e);
                }
                last = Some(e);
                continue;
            }
        };
        let rest = futures_util::stream::unfold(relay, |mut r| async move {
            match r.step().await {
                Ok(Some(b)) => {
                    let b = r.gather(b).await;
                    Some((Ok::<Bytes, std::convert::Infallible>(b), r))
                }
                Ok(None) => None,
                Err(e) => {
                    let b = r.fail(&e);
                    Some((Ok(b), r))
                }
            }
        });
        let body = futures_util::stream::once(async move { Ok(first) }).chain(rest);
        return Ok(Relayed {
            body: RelayedBody::Stream(Box::pin(body)),
            answered,
        });
    }
    failed(
        ticket,
        last.unwrap_or_else(|| Error::internal("the model has no target")),
    )
}

/// A plain answer: read whole (before the deadline), checked, `model` rewritten.
/// A plain answer parsed, checked, `model` rewritten, tokens counted.
fn answer_tree(
    bytes: &[u8],
    alias: &str,
    prompt_estimate: i64,
    attempt: &mut Attempt,
) -> Result<(Value, Tokens), AttemptError> {
    let bad = |e: Error| AttemptError::new(Failure::BadAnswer, e);
    let mut v: Value =
        serde_json::from_slice(bytes).map_err(|_| bad(upstream::bad_answer("it is not JSON")))?;
    let Some(obj) = v.as_object_mut() else {
        return Err(bad(upstream::bad_answer("it is not a JSON object")));
    };
    if !obj.get("choices").is_some_and(Value::is_array) {
        if let Some(e) = obj.get("error") {
            return Err(bad(error_in_answer(e)));
        }
        return Err(bad(upstream::bad_answer("it has no 'choices'")));
    }
    attempt.answer(obj.get("model"), obj.get("usage"));
    rewrite_model(obj, alias);
    let tokens = usage_tokens(obj.get("usage")).unwrap_or_else(|| Tokens {
        prompt: prompt_estimate,
        completion: estimate_tokens(completion_chars(obj, "message")),
    });
    Ok((v, tokens))
}

/// The fields of a plain answer the relay reads, borrowed from its bytes.
#[derive(serde::Deserialize)]
struct AnswerView<'a> {
    #[serde(borrow)]
    model: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    choices: Option<&'a serde_json::value::RawValue>,
    usage: Option<UsageView>,
}

#[derive(serde::Deserialize)]
struct UsageView {
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
}

/// A plain answer passed on as the upstream's bytes with `model` naming the
/// alias. Anything unusual (not an object, no usage, duplicate keys) takes
/// the tree path of [`whole_answer`], which also words the errors.
fn raw_answer(
    bytes: &[u8],
    alias: &str,
    prompt_estimate: i64,
    attempt: &mut Attempt,
) -> Result<(Bytes, Tokens), AttemptError> {
    // A span records the answer's model and usage: the tree path reads them.
    if !attempt.wants_answer() {
        if let Some(done) = splice_answer(bytes, alias) {
            return Ok(done);
        }
    }
    let (v, tokens) = answer_tree(bytes, alias, prompt_estimate, attempt)?;
    let out = serde_json::to_vec(&v)
        .map_err(|e| AttemptError::new(Failure::BadAnswer, Error::internal(e)))?;
    Ok((Bytes::from(out), tokens))
}

/// The fast path of [`raw_answer`]: None when the answer needs the tree path.
pub fn splice_answer(bytes: &[u8], alias: &str) -> Option<(Bytes, Tokens)> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    let view: AnswerView<'_> = serde_json::from_slice(bytes).ok()?;
    if !view.choices?.get().starts_with('[') {
        return None;
    }
    let usage = view.usage?;
    let tokens = Tokens {
        prompt: usage.prompt_tokens?,
        completion: usage.completion_tokens.unwrap_or(0),
    };
    let mut out = Vec::with_capacity(bytes.len() + alias.len() + 16);
    match view.model {
        Some(m) => {
            let start = (m.get().as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
            let end = start + m.get().len();
            out.extend_from_slice(bytes.get(..start)?);
            serde_json::to_writer(&mut out, alias).ok()?;
            out.extend_from_slice(bytes.get(end..)?);
        }
        None => {
            let open = bytes.iter().position(|b| *b == b'{')?;
            out.extend_from_slice(&bytes[..=open]);
            out.extend_from_slice(b"\"model\":");
            serde_json::to_writer(&mut out, alias).ok()?;
            out.push(b',');
            out.extend_from_slice(&bytes[open + 1..]);
        }
    }
    Some((Bytes::from(out), tokens))
}

/// The fields of a stream chunk the relay reads, borrowed from its text.
#[derive(serde::Deserialize)]
struct ChunkView<'a> {
    #[serde(borrow)]
    model: Option<&'a serde_json::value::RawValue>,
    choices: Option<ChoicesView>,
    /// Present even when null (a null `usage` is removed too).
    #[serde(borrow, default, deserialize_with = "crate::wire::json::present")]
    usage: Option<&'a serde_json::value::RawValue>,
}

/// What the relay reads of a chunk's `choices`, gathered as they are
/// parsed (no list of them is built).
#[derive(Default)]
struct ChoicesView {
    count: usize,
    /// Characters of generated text.
    chars: usize,
    /// A choice finished.
    finish: bool,
}

impl<'de> serde::Deserialize<'de> for ChoicesView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ChoicesView;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ChoicesView, A::Error> {
                let mut view = ChoicesView::default();
                while let Some(MapOnly(c)) = seq.next_element::<MapOnly<ChoiceView<'de>>>()? {
                    view.count += 1;
                    view.finish |= c.finish_reason.is_some();
                    if let Some(MapOnly(d)) = &c.delta {
                        view.chars += d.content.as_deref().map_or(0, |t| t.chars().count());
                        if let Some(calls) = d.tool_calls {
                            let v: Value = serde_json::from_str(calls.get())
                                .map_err(serde::de::Error::custom)?;
                            view.chars += tool_call_chars(Some(&v));
                        }
                    }
                }
                Ok(view)
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(serde::Deserialize)]
struct ChoiceView<'a> {
    #[serde(borrow)]
    delta: Option<MapOnly<DeltaView<'a>>>,
    #[serde(borrow)]
    finish_reason: Option<&'a serde_json::value::RawValue>,
}

#[derive(serde::Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    tool_calls: Option<&'a serde_json::value::RawValue>,
}

/// What [`splice_chunk_into`] learnt of a chunk.
pub struct ChunkFacts {
    /// The chunk was written out (false: drop it).
    pub sent: bool,
    pub usage: Option<Value>,
    pub chars: usize,
    pub finish: bool,
}

/// The relay's work on one stream chunk without a JSON tree: `model` names
/// the alias (given as JSON), and unless the client asked for usage, `usage`
/// is removed (the usage-only chunk dropped), all by splicing the upstream's
/// text, appended to `out` (the event's frame being built: no copy of its
/// own). None when the chunk needs the tree path (an error, content parts,
/// odd layout); `out` may then hold part of the chunk, to be discarded.
pub fn splice_chunk_into(
    data: &str,
    alias_json: &[u8],
    client_usage: bool,
    out: &mut Vec<u8>,
) -> Option<ChunkFacts> {
    if !data.trim_start().starts_with('{') {
        return None;
    }
    let view: ChunkView<'_> = serde_json::from_str(data).ok()?;
    let choices = view.choices?;
    let usage_raw = view.usage.filter(|u| u.get() != "null");
    let usage = match usage_raw {
        Some(u) => Some(serde_json::from_str::<Value>(u.get()).ok()?).filter(Value::is_object),
        None => None,
    };
    let mut facts = ChunkFacts {
        sent: false,
        usage,
        chars: choices.chars,
        finish: choices.finish,
    };
    if !client_usage && choices.count == 0 && usage_raw.is_some() {
        return Some(facts);
    }
    let offset = |raw: &serde_json::value::RawValue| -> Option<(usize, usize)> {
        let start = (raw.get().as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        Some((start, start + raw.get().len()))
    };
    // At most two edits, (start, end, what goes in between), applied in order.
    let model_member: Vec<u8>;
    let mut edits: [Option<(usize, usize, &[u8])>; 2] = [None, None];
    match view.model {
        Some(m) => {
            let (a, b) = offset(m)?;
            edits[0] = Some((a, b, alias_json));
        }
        None => {
            let open = data.find('{')?;
            let mut ins = b"\"model\":".to_vec();
            ins.extend_from_slice(alias_json);
            if !data[open + 1..].trim_start().starts_with('}') {
                ins.push(b',');
            }
            model_member = ins;
            edits[0] = Some((open + 1, open + 1, &model_member));
        }
    }
    if !client_usage {
        if let Some(u) = view.usage {
            let (a, b) = member_span(data, offset(u)?)?;
            edits[1] = Some((a, b, b""));
        }
    }
    if let [Some(x), Some(y)] = edits {
        if y.0 < x.0 {
            edits = [Some(y), Some(x)];
        }
    }
    let bytes = data.as_bytes();
    out.reserve(data.len() + alias_json.len() + 16);
    let mut at = 0;
    for (a, b, rep) in edits.into_iter().flatten() {
        if a < at {
            return None;
        }
        out.extend_from_slice(bytes.get(at..a)?);
        out.extend_from_slice(rep);
        at = b;
    }
    out.extend_from_slice(bytes.get(at..)?);
    facts.sent = true;
    Some(facts)
}

/// The bytes to cut to remove the member `"usage": <value>` whose value
/// spans `value`, with one neighbouring comma. None unless the key is
/// written plainly as `"usage"`.
fn member_span(data: &str, value: (usize, usize)) -> Option<(usize, usize)> {
    let b = data.as_bytes();
    let mut i = value.0;
    while i > 0 && b[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    if i == 0 || b[i - 1] != b':' {
        return None;
    }
    i -= 1;
    while i > 0 && b[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    let key_start = i.checked_sub(7)?;
    if &b[key_start..i] != b"\"usage\"" {
        return None;
    }
    let mut j = key_start;
    while j > 0 && b[j - 1].is_ascii_whitespace() {
        j -= 1;
    }
    match b.get(j.checked_sub(1)?)? {
        // `, "usage": v`: cut from the comma before it.
        b',' => Some((j - 1, value.1)),
        // `{"usage": v, ...` or `{"usage": v}`: cut the comma after it, if any.
        b'{' => {
            let mut k = value.1;
            while k < b.len() && b[k].is_ascii_whitespace() {
                k += 1;
            }
            if b.get(k) == Some(&b',') {
                k += 1;
            }
            Some((key_start, k))
        }
        _ => None,
    }
}

/// An `{"error": ...}` the upstream sent with a 2xx status or inside a stream.
fn error_in_answer(error: &Value) -> Error {
    let wrapped = serde_json::json!({ "error": error });
    let message = upstream::error_message(wrapped.to_string().as_bytes())
        .unwrap_or_else(|| "The model server reported an error.".to_string());
    Error::new(ErrorKind::BadGateway, "upstream_error", message)
}

fn cut_off() -> Error {
    Error::new(
        ErrorKind::BadGateway,
        "upstream_error",
        "The model server closed the stream before it ended.",
    )
}

fn idle_timeout(provider: &Provider) -> Error {
    Error::new(
        ErrorKind::GatewayTimeout,
        "upstream_timeout",
        format!(
            "The model server sent nothing for {} seconds; the stream was ended.",
            provider.timeout_s
        ),
    )
}

/// What the upstream has for the relay.
enum Next {
    Event(SseEvent),
    /// The body ended.
    End,
    /// Nothing complete without reading more.
    Wait,
}

/// What one step of the relay made.
enum Step {
    Out(Bytes),
    /// The stream is over.
    Over,
    /// Nothing more without reading from the upstream.
    Wait,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Streaming,
    /// `[DONE]` went out; waiting for the upstream body to end.
    Draining,
    Done,
}

use crate::models::upstream::ByteStream;

struct StreamRelay<H> {
    upstream: ByteStream,
    parser: SseParser,
    /// Always Some while the relay runs; taken back for the next attempt
    /// when this one fails before its first output.
    hooks: Option<H>,
    alias: String,
    /// `alias` as a JSON string, spliced into each chunk.
    alias_json: Vec<u8>,
    provider: Arc<Provider>,
    stats: Arc<ProviderStats>,
    /// Counts the request in flight on its target until the stream ends.
    guard: InFlight,
    client_usage: bool,
    /// The last usage object the upstream sent.
    usage: Option<Value>,
    prompt_estimate: i64,
    completion_chars: usize,
    saw_finish: bool,
    eof: bool,
    /// The first output went to the client.
    started: bool,
    /// A chunk of the answer was read (even one that made no output): the
    /// stream has begun, and the answer cannot be retried.
    read_event: bool,
    /// What kind of failure the last error was (None: not the upstream's).
    failure: Option<Failure>,
    phase: Phase,
    /// Always Some while the relay runs (see `hooks`).
    ticket: Option<UsageTicket>,
    attempt: Attempt,
}

impl<H> StreamRelay<H> {
    fn tokens(&self) -> Tokens {
        usage_tokens(self.usage.as_ref()).unwrap_or(Tokens {
            prompt: self.prompt_estimate,
            completion: estimate_tokens(self.completion_chars),
        })
    }

    fn fault(&mut self, failure: Failure, e: Error) -> Error {
        self.failure = Some(failure);
        e
    }

    fn finish(&mut self, status: u16) {
        self.attempt.answer(None, self.usage.as_ref());
        self.attempt.finish();
        let tokens = self.tokens();
        if let Some(t) = self.ticket.as_mut() {
            t.finish(status, tokens);
        }
    }

    /// The next upstream event; None at a clean end of the body. Without
    /// `may_read`, only what is already buffered: [`Next::Wait`] when that
    /// holds no complete event.
    async fn next_event(&mut self, may_read: bool) -> Result<Next, Error> {
        loop {
            if let Some(ev) = self.parser.next_event() {
                return Ok(Next::Event(ev));
            }
            if self.eof {
                return Ok(match self.parser.finish() {
                    Some(ev) => Next::Event(ev),
                    None => Next::End,
                });
            }
            if !may_read {
                return Ok(Next::Wait);
            }
            let idle = Duration::from_secs(self.provider.timeout_s);
            match tokio::time::timeout(idle, self.upstream.next()).await {
                Err(_) => {
                    // Before the first output nothing reached the client:
                    // as good as no answer at all.
                    let f = if self.started {
                        Failure::TimeoutAfterHead
                    } else {
                        Failure::TimeoutBeforeHead
                    };
                    let e = idle_timeout(&self.provider);
                    return Err(self.fault(f, e));
                }
                Ok(None) => self.eof = true,
                Ok(Some(Err(e))) => {
                    tracing::info!(provider = %self.provider.name, error = %e, "upstream stream cut off");
                    return Err(self.fault(Failure::CutOff, cut_off()));
                }
                Ok(Some(Ok(bytes))) => {
                    self.parser.push(&bytes);
                    if self.parser.pending_bytes() > MAX_EVENT_BYTES {
                        let e = upstream::bad_answer("a stream event is too large");
                        return Err(self.fault(Failure::BadAnswer, e));
                    }
                }
            }
        }
    }

    /// Ends a failed stream: hook frames, the error message, `[DONE]`.
    fn fail(&mut self, e: &Error) -> Bytes
    where
        H: ChatHooks,
    {
        if let Some(f) = self.failure.take() {
            self.attempt.failed(f);
            let verdict = judge(f, true);
            self.stats.failure(f.cause());
            if verdict.against_target {
                self.guard.failed(mono_ms());
            }
        }
        let mut out = Vec::new();
        if let Some(h) = self.hooks.as_mut() {
            for f in h.on_stream_error(e) {
                f.write_to(&mut out);
            }
        }
        SseFrame::json(&e.openai_body()).write_to(&mut out);
        out.extend_from_slice(DONE);
        self.finish(e.status());
        self.phase = Phase::Done;
        self.upstream = Box::pin(futures_util::stream::empty());
        Bytes::from(out)
    }
}

impl<H: ChatHooks> StreamRelay<H> {
    /// The next piece of output: the frames for one upstream event (or
    /// several, when some produce nothing). None when the stream is over.
    async fn step(&mut self) -> Result<Option<Bytes>, Error> {
        match self.step_with(true).await? {
            Step::Out(b) => Ok(Some(b)),
            Step::Over | Step::Wait => Ok(None),
        }
    }

    /// The output for every event already received, after `first`: events
    /// that came in one upstream read go to the client in one write.
    async fn gather(&mut self, first: Bytes) -> Bytes {
        let mut out: Option<Vec<u8>> = None;
        loop {
            match self.step_with(false).await {
                Ok(Step::Out(b)) => out
                    .get_or_insert_with(|| first.to_vec())
                    .extend_from_slice(&b),
                Ok(Step::Over | Step::Wait) => break,
                Err(e) => {
                    let tail = self.fail(&e);
                    out.get_or_insert_with(|| first.to_vec())
                        .extend_from_slice(&tail);
                    break;
                }
            }
        }
        match out {
            Some(v) => Bytes::from(v),
            None => first,
        }
    }

    async fn step_with(&mut self, may_read: bool) -> Result<Step, Error> {
        loop {
            match self.phase {
                Phase::Done => return Ok(Step::Over),
                Phase::Draining if !may_read => return Ok(Step::Wait),
                Phase::Draining => {
                    let upstream = &mut self.upstream;
                    let _ = tokio::time::timeout(DRAIN_WAIT, async {
                        while let Some(Ok(_)) = upstream.next().await {}
                    })
                    .await;
                    self.phase = Phase::Done;
                    return Ok(Step::Over);
                }
                Phase::Streaming => {}
            }
            let ev = match self.next_event(may_read).await? {
                Next::Event(ev) => ev,
                Next::Wait => return Ok(Step::Wait),
                // Some servers end without [DONE]; after a finish_reason that is fine.
                Next::End if self.saw_finish => return Ok(Step::Out(self.end().await)),
                Next::End => return Err(self.fault(Failure::CutOff, cut_off())),
            };
            if let Some(name) = ev.event.as_deref() {
                if name == "error" {
                    let v: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
                    let e = error_in_answer(v.get("error").unwrap_or(&v));
                    return Err(self.fault(Failure::BadAnswer, e));
                }
                if !name.is_empty() && name != "message" {
                    // Not an OpenAI event: passed on as it came.
                    return Ok(Step::Out(
                        SseFrame::Event {
                            event: name.to_string(),
                            data: ev.data,
                        }
                        .to_bytes(),
                    ));
                }
            }
            if ev.data.trim() == "[DONE]" {
                return Ok(Step::Out(self.end().await));
            }
            if !H::EDITS_ANSWERS && !self.attempt.wants_answer() {
                let alias_json = &self.alias_json;
                let mut out = Vec::with_capacity(ev.data.len() + alias_json.len() + 24);
                out.extend_from_slice(b"data: ");
                if let Some(c) =
                    splice_chunk_into(&ev.data, alias_json, self.client_usage, &mut out)
                {
                    if c.usage.is_some() {
                        self.usage = c.usage;
                    }
                    self.completion_chars += c.chars;
                    self.saw_finish |= c.finish;
                    self.read_event = true;
                    if !c.sent {
                        continue;
                    }
                    out.extend_from_slice(b"\n\n");
                    return Ok(Step::Out(Bytes::from(out)));
                }
            }
            let Ok(mut chunk) = serde_json::from_str::<Value>(&ev.data) else {
                let e = upstream::bad_answer("a stream event is not JSON");
                return Err(self.fault(Failure::BadAnswer, e));
            };
            let Some(obj) = chunk.as_object_mut() else {
                let e = upstream::bad_answer("a stream event is not a JSON object");
                return Err(self.fault(Failure::BadAnswer, e));
            };
            if !obj.contains_key("choices") {
                if let Some(e) = obj.get("error") {
                    let e = error_in_answer(e);
                    return Err(self.fault(Failure::BadAnswer, e));
                }
            }
            if let Some(u) = obj.get("usage").filter(|u| u.is_object()) {
                self.usage = Some(u.clone());
            }
            self.completion_chars += completion_chars(obj, "delta");
            if let Some(cs) = obj.get("choices").and_then(Value::as_array) {
                if cs
                    .iter()
                    .any(|c| c.get("finish_reason").is_some_and(|f| !f.is_null()))
                {
                    self.saw_finish = true;
                }
            }
            self.read_event = true;
            if !self.client_usage && !strip_usage(obj) {
                continue;
            }
            self.attempt.answer(obj.get("model"), None);
            rewrite_model(obj, &self.alias);
            let mut before = Vec::new();
            let action = match self.hooks.as_mut() {
                Some(h) => h.on_chunk(&mut chunk, &mut before),
                None => ChunkAction::Send,
            };
            if action == ChunkAction::Drop && before.is_empty() {
                continue;
            }
            let mut out = Vec::with_capacity(ev.data.len() + 64);
            for f in &before {
                f.write_to(&mut out);
            }
            if action == ChunkAction::Send {
                out.extend_from_slice(b"data: ");
                if let Err(e) = serde_json::to_writer(&mut out, &chunk) {
                    return Err(Error::internal(e));
                }
                out.extend_from_slice(b"\n\n");
            }
            return Ok(Step::Out(Bytes::from(out)));
        }
    }

    /// Ends a stream that went well: hook frames, then `[DONE]`.
    async fn end(&mut self) -> Bytes {
        let mut out = Vec::new();
        if let Some(h) = self.hooks.as_mut() {
            for f in h.on_stream_end(self.usage.as_ref()).await {
                f.write_to(&mut out);
            }
        }
        out.extend_from_slice(DONE);
        self.finish(200);
        self.phase = Phase::Draining;
        Bytes::from(out)
    }
}

impl<H> Drop for StreamRelay<H> {
    fn drop(&mut self) {
        if self.ticket.as_ref().is_some_and(|t| !t.is_finished()) {
            self.finish(CLIENT_CLOSED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stream chunk after [`splice_chunk`].
    #[derive(Debug, PartialEq)]
    struct SplicedChunk {
        /// The chunk to send (None: drop it).
        out: Option<Vec<u8>>,
        /// The upstream's usage object, if the chunk has one.
        usage: Option<Value>,
        /// Characters of generated text (for the estimate without usage).
        chars: usize,
        /// A choice finished.
        finish: bool,
    }

    /// [`splice_chunk_into`] on its own buffer, with the alias as text.
    fn splice_chunk(data: &str, alias: &str, client_usage: bool) -> Option<SplicedChunk> {
        let alias_json = serde_json::to_vec(alias).ok()?;
        let mut out = Vec::new();
        let facts = splice_chunk_into(data, &alias_json, client_usage, &mut out)?;
        Some(SplicedChunk {
            out: facts.sent.then_some(out),
            usage: facts.usage,
            chars: facts.chars,
            finish: facts.finish,
        })
    }

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn prepare_body_sets_the_upstream_model_and_asks_for_usage_on_streams() {
        let mut b = map(json!({"model": "alias", "messages": [], "x_unknown": {"a": 1}}));
        assert!(!prepare_body(&mut b, "up/model", true));
        assert_eq!(
            Value::Object(b),
            json!({"model": "up/model", "messages": [], "x_unknown": {"a": 1},
                   "stream_options": {"include_usage": true}})
        );

        let mut b = map(json!({"model": "a", "stream_options": {"include_usage": true, "k": 1}}));
        assert!(prepare_body(&mut b, "u", true));
        assert_eq!(b["stream_options"], json!({"include_usage": true, "k": 1}));

        let mut b = map(json!({"model": "a", "stream_options": {"include_usage": false}}));
        assert!(!prepare_body(&mut b, "u", true));
        assert_eq!(b["stream_options"], json!({"include_usage": true}));

        let mut b = map(json!({"model": "a"}));
        assert!(!prepare_body(&mut b, "u", false));
        assert_eq!(Value::Object(b), json!({"model": "u"}));
    }

    #[test]
    fn strip_usage_drops_the_usage_only_chunk_and_usage_fields() {
        let mut c = map(json!({"choices": [], "usage": {"prompt_tokens": 1}}));
        assert!(!strip_usage(&mut c));
        let mut c = map(json!({"choices": [{"delta": {}}], "usage": null}));
        assert!(strip_usage(&mut c));
        assert_eq!(Value::Object(c), json!({"choices": [{"delta": {}}]}));
        let mut c = map(json!({"choices": [{"delta": {}}], "usage": {"prompt_tokens": 1}}));
        assert!(strip_usage(&mut c));
        assert!(!c.contains_key("usage"));
        // An empty-choices chunk without usage is not ours to drop.
        let mut c = map(json!({"choices": []}));
        assert!(strip_usage(&mut c));
    }

    #[test]
    fn check_body_names_the_bad_field() {
        let param = |v: Value| check_body(&map(v)).err().and_then(|e| e.param);
        let msgs = json!([{"role": "user", "content": "hi"}]);
        assert_eq!(param(json!({"messages": msgs})), None);
        assert_eq!(param(json!({})), Some("messages".into()));
        assert_eq!(param(json!({"messages": []})), Some("messages".into()));
        assert_eq!(param(json!({"messages": "hi"})), Some("messages".into()));
        assert_eq!(
            param(json!({"messages": msgs, "stream": "yes"})),
            Some("stream".into())
        );
        assert_eq!(param(json!({"messages": msgs, "stream": null})), None);
        assert_eq!(
            param(json!({"messages": msgs, "stream_options": 3})),
            Some("stream_options".into())
        );
        assert_eq!(
            param(json!({"messages": msgs, "stream_options": {"include_usage": 1}})),
            Some("stream_options.include_usage".into())
        );
    }

    #[test]
    fn splice_answer_names_the_alias_and_keeps_every_other_byte() {
        let up = br#"{"id":"x","object":"chat.completion","model":"up/m","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":4},"x_extra":{"k":[1,2]}}"#;
        let (out, tokens) = splice_answer(up, "alias").expect("fast path");
        assert_eq!(
            std::str::from_utf8(&out).expect("utf8"),
            r#"{"id":"x","object":"chat.completion","model":"alias","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":4},"x_extra":{"k":[1,2]}}"#
        );
        assert_eq!(
            tokens,
            Tokens {
                prompt: 3,
                completion: 4
            }
        );
        // The alias is JSON-escaped.
        let (out, _) = splice_answer(up, "a\"b").expect("fast path");
        let v: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["model"], "a\"b");
    }

    #[test]
    fn splice_answer_adds_a_missing_model() {
        let up = br#" {"choices":[],"usage":{"prompt_tokens":1}}"#;
        let (out, tokens) = splice_answer(up, "alias").expect("fast path");
        let v: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["model"], "alias");
        assert_eq!(v["choices"], json!([]));
        assert_eq!(
            tokens,
            Tokens {
                prompt: 1,
                completion: 0
            }
        );
    }

    #[test]
    fn splice_answer_leaves_unusual_answers_to_the_tree_path() {
        for up in [
            &br#"{"model":"m","choices":[{}]}"#[..],
            br#"{"model":"m","choices":[{}],"usage":null}"#,
            br#"{"model":"m","choices":{},"usage":{"prompt_tokens":1}}"#,
            br#"{"model":"m","model":"n","choices":[],"usage":{"prompt_tokens":1}}"#,
            br#"{"error":{"message":"no"}}"#,
            br#"["model","choices"]"#,
            b"not json",
        ] {
            assert!(
                splice_answer(up, "a").is_none(),
                "{}",
                String::from_utf8_lossy(up)
            );
        }
    }

    /// What the tree path makes of a chunk, for comparison.
    fn tree(data: &str, alias: &str, client_usage: bool) -> Option<Value> {
        let mut v: Value = serde_json::from_str(data).expect("json");
        let o = v.as_object_mut().expect("object");
        if !client_usage && !strip_usage(o) {
            return None;
        }
        rewrite_model(o, alias);
        Some(v)
    }

    #[test]
    fn splice_chunk_matches_the_tree_path() {
        let chunks = [
            r#"{"id":"c","object":"chat.completion.chunk","model":"up","choices":[{"index":0,"delta":{"content":"héllo"},"finish_reason":null}]}"#,
            r#"{"id":"c","model":"up","choices":[{"delta":{"content":"x"},"finish_reason":null}],"usage":null}"#,
            r#"{"usage":null,"id":"c","model":"up","choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            r#"{ "usage" : null }"#,
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            r#"{"id":"c","model":"up","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}], "usage": {"prompt_tokens":1}, "model":"up"}"#,
        ];
        for data in chunks {
            for client_usage in [false, true] {
                let Some(c) = splice_chunk(data, "alias\"x", client_usage) else {
                    // `{ "usage" : null }` has no choices: the tree path's job.
                    assert!(!data.contains("choices"), "{data}");
                    continue;
                };
                let got = c
                    .out
                    .map(|o| serde_json::from_slice::<Value>(&o).expect("spliced is JSON"));
                assert_eq!(
                    got,
                    tree(data, "alias\"x", client_usage),
                    "{data} {client_usage}"
                );
            }
        }
        let c = splice_chunk(chunks[0], "a", false).expect("fast");
        assert_eq!((c.chars, c.finish, c.usage), (5, false, None));
        let c = splice_chunk(chunks[2], "a", false).expect("fast");
        assert!(c.finish);
        let c = splice_chunk(chunks[4], "a", false).expect("fast");
        assert_eq!(c.out, None);
        assert_eq!(
            c.usage,
            Some(json!({"prompt_tokens": 3, "completion_tokens": 4}))
        );
        assert_eq!(splice_chunk(chunks[5], "a", false).expect("fast").chars, 3);
    }

    #[test]
    fn splice_chunk_leaves_odd_chunks_to_the_tree_path() {
        for data in [
            r#"{"error":{"message":"overloaded"}}"#,
            r#"{"model":"a","model":"b","choices":[]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"x"}]}}]}"#,
            r#"{"choices":[],"\u0075sage":null}"#,
            r#"[{"choices":[]}]"#,
        ] {
            assert!(splice_chunk(data, "a", false).is_none(), "{data}");
        }
    }

    #[test]
    fn usage_tokens_read_openai_usage() {
        assert_eq!(
            usage_tokens(Some(
                &json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
            )),
            Some(Tokens {
                prompt: 3,
                completion: 4
            })
        );
        assert_eq!(usage_tokens(Some(&json!({"total_tokens": 7}))), None);
        assert_eq!(usage_tokens(Some(&Value::Null)), None);
        assert_eq!(usage_tokens(None), None);
    }

    #[test]
    fn character_counts_cover_text_parts_and_tool_arguments() {
        let body = map(json!({"messages": [
            {"role": "user", "content": "abcd"},
            {"role": "user", "content": [{"type": "text", "text": "ef"}, {"type": "image_url"}]},
            {"role": "assistant", "content": null,
             "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}
        ]}));
        assert_eq!(prompt_chars(&body), 8);
        let chunk = map(json!({"choices": [
            {"delta": {"content": "héllo"}},
            {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a"}}]}}
        ]}));
        assert_eq!(completion_chars(&chunk, "delta"), 8);
    }
}
