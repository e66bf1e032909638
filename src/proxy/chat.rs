//! The chat relay: one OpenAI-compatible chat completion, plain or streamed,
//! from the client to the model's upstream and back. `/v1/chat/completions`
//! uses it with [`NoHooks`]; the agent chat route uses it with hooks that add
//! its own behaviour (PII restore, approvals, AG-UI events).
//!
//! What the relay does:
//!
//! * It speaks OpenAI chat. Each attempt's target is reached through the
//!   chat adapter of its provider type ([`crate::models::adapters::ChatAdapter`]),
//!   which translates the request into the upstream's dialect and the answer
//!   (whole, or event by event) back into chat; OpenAI-compatible upstreams
//!   need no translation. A provider type without a chat adapter is refused.
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
//! * `openai_frames`: false when the hooks' frames are the whole answer
//!   (no `[DONE]`, no error message, no foreign named events).
//!
//! The inbound-dialect seam (also `ChatHooks`, defaults for chat): hooks of
//! another client dialect (Responses: `crate::proxy::responses`; Messages:
//! `crate::proxy::messages`) translate chat answers in the hooks above, end
//! streams themselves (`openai_frames` false, or frames of their own), and
//! may send a target its own dialect (`native_request`: another path and
//! body, and extras such as the client's query string or error answers
//! relayed byte for byte; the answer then goes through `on_native_answer` /
//! `on_native_event`, events relayed as they come, retries and usage as for
//! chat). The relay knows no dialect: a native stream ends, or fails,
//! through the same `on_stream_end` / `on_stream_error` as any other.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use crate::error::{Error, ErrorKind};
use crate::models::adapters::{chat_adapter, ChatAdapter, ChatEvents};
use crate::models::observed::Attempt;
use crate::models::routing::{
    judge, mono_ms, next_pick, Answered, Failure, InFlight, Pick, ProviderStats,
};
use crate::models::upstream::{self, AttemptError};
use crate::models::{Model, Provider};
use crate::usage::{estimate_tokens, Tokens, UsageContext, UsageSink, UsageTicket, CLIENT_CLOSED};
use crate::wire::chat::answer::{splice_answer, splice_chunk_into};
use crate::wire::chat::body::{ChatBody, ChatInput};
use crate::wire::chat::chunk::ChunkText;
use crate::wire::chat::{
    ask_for_usage, completion_chars, is_stream, prompt_chars, rewrite_model, strip_usage,
    usage_tokens,
};
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
    pub tools: Option<crate::wire::chat::tools::KeptTools>,
    pub usage: UsageContext,
    /// The name the client sent when it is one of the model's aliases: the
    /// answer names it (a fallback's answer names the fallback).
    pub requested: Option<String>,
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

    /// Whether `on_response` needs this plain answer (the upstream's bytes;
    /// for a native attempt, what `on_native_answer` made) as a JSON tree;
    /// without it the answer takes the splice path (native: goes as it is).
    fn edits_answer(&self, answer: &[u8]) -> bool {
        let _ = answer;
        Self::EDITS_ANSWERS
    }

    /// Whether the hooks do nothing at all (every method the default): a
    /// dialect's hooks around them may then translate chunks and answers
    /// from their text (`reads_chunk_text`, `answer_text`).
    const DOES_NOTHING: bool = false;

    /// A plain chat answer (the upstream's bytes, checked by nothing yet)
    /// made into the hooks' own answer without a tree: its bytes and its
    /// tokens (the upstream's usage, else estimated with `prompt_estimate`
    /// as chat's are). None: the tree path (`on_response`), which also
    /// words what is wrong with an answer. Asked when `edits_answer` says
    /// the answer needs editing; `alias` is the name the answer shows.
    fn answer_text(
        &mut self,
        answer: &[u8],
        alias: &str,
        prompt_estimate: i64,
    ) -> Option<(Bytes, Tokens)> {
        let _ = (answer, alias, prompt_estimate);
        None
    }

    /// Whether stream chunks may come to `on_chunk_text`, read from their
    /// text, instead of to `on_chunk` as trees (chunks of unusual shapes
    /// still come as trees).
    fn reads_chunk_text(&self) -> bool {
        false
    }

    /// A stream chunk read from its text (see `reads_chunk_text`; its
    /// `usage` only when the client asked for usage, as `on_chunk` sees
    /// it): what goes out for it written into `out` (nothing: no output).
    /// `alias` is the name the chunk shows.
    fn on_chunk_text(&mut self, chunk: &ChunkText<'_>, alias: &str, out: &mut Vec<u8>) {
        let _ = (chunk, alias, out);
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

    /// Whether the dialect's stream carries the request's cost in its last
    /// usage object: the relay then gives it (`on_stream_cost`, and the
    /// `price` of `on_native_event`).
    const CARRIES_COST: bool = false;

    /// The request's cost as a stream that went well ends, just before
    /// `on_stream_end`, priced on the tokens its usage record keeps (only
    /// when `CARRIES_COST`).
    fn on_stream_cost(&mut self, cost: crate::spend::Cost) {
        let _ = cost;
    }

    /// The stream ended normally: what to send before `data: [DONE]`,
    /// written into `out` (events in their wire form).
    fn on_stream_end(
        &mut self,
        usage: Option<&Value>,
        out: &mut Vec<u8>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (usage, out);
        async {}
    }

    /// The stream failed after it began: frames to send before the error.
    fn on_stream_error(&mut self, error: &Error) -> Vec<SseFrame> {
        let _ = error;
        Vec::new()
    }

    /// Whether the stream ends with its dialect's frames (`stream_done`,
    /// `error_frame`) and passes the upstream's named events on. False when
    /// the hooks' frames are the whole answer (the AG-UI endpoint's events).
    fn openai_frames(&self) -> bool {
        true
    }

    // The inbound dialect: what ends the client's stream. Chat's are the
    // defaults; another dialect's hooks (`crate::proxy::messages`) give its own.

    /// What ends a stream that went well, after `on_stream_end`'s frames.
    fn stream_done(&self) -> &'static [u8] {
        DONE
    }

    /// The message that ends a stream that failed after it began.
    fn error_frame(&self, error: &Error) -> SseFrame {
        SseFrame::json(&error.openai_body())
    }

    // The inbound-dialect seam: hooks that answer the client in another
    // dialect than chat (`crate::proxy::responses`) end streams themselves,
    // and may send some targets the client's own dialect (native mode).

    /// This attempt's request in the client's own dialect, when its target
    /// speaks it (a path under `base_url`, the body for `upstream_model`,
    /// what else goes with it; `alias` names the answering model), else
    /// None: the attempt sends chat. The answer then goes through
    /// `on_native_answer` or `on_native_event` instead of the chat hooks;
    /// a stream still ends through `on_stream_end` / `on_stream_error`.
    fn native_request(
        &mut self,
        provider: &Provider,
        upstream_model: &str,
        alias: &str,
    ) -> Option<Result<NativeRequest, Error>> {
        let _ = (provider, upstream_model, alias);
        None
    }

    /// A plain native answer: what goes to the client and its tokens (None:
    /// estimated); `Err` says what was wrong with it. When `edits_answer`
    /// says so, `on_response` then gets it as a tree.
    fn on_native_answer(&mut self, answer: &[u8]) -> Result<(Bytes, Option<Tokens>), String> {
        let _ = answer;
        Err("no native dialect".into())
    }

    /// One native stream event: what goes to the client (None: nothing):
    /// what the hooks write into `out` (events relayed as they came, with
    /// no frame in between), then the [`NativeEvent`]'s frames; `Err` says
    /// what was wrong with it. `price` gives the request's cost for the
    /// tokens of the event that reports its final usage.
    fn on_native_event(
        &mut self,
        event: &SseEvent,
        price: &dyn Fn(&Tokens) -> crate::spend::Cost,
        out: &mut Vec<u8>,
    ) -> Result<Option<NativeEvent>, String> {
        let _ = (event, price, out);
        Err("no native dialect".into())
    }
}

/// A native attempt's request (see [`ChatHooks::native_request`]).
pub struct NativeRequest {
    /// The path under the provider's `base_url`.
    pub path: &'static str,
    pub body: Bytes,
    /// The client's query string, `anthropic-beta`, error answers relayed
    /// as they came (default: none of these).
    pub extras: upstream::Extras,
}

/// One relayed event of a native stream (see [`ChatHooks::on_native_event`]).
pub struct NativeEvent {
    /// What goes to the client for it, in order (none: the hooks hold it,
    /// e.g. for `on_stream_end`).
    pub frames: Vec<SseFrame>,
    /// The event ends the answer: the stream ends there (`on_stream_end`'s
    /// frames follow `frames` in the same write).
    pub terminal: bool,
    /// Tokens the event reports (all of them so far: they replace earlier
    /// ones).
    pub tokens: Option<Tokens>,
    /// The event is the upstream's error: `frames` are the last output, and
    /// the stream fails with this error (no `on_stream_error` frames).
    pub error: Option<Error>,
}

/// No extra behaviour (`/v1/chat/completions`).
pub struct NoHooks;

impl ChatHooks for NoHooks {
    const EDITS_ANSWERS: bool = false;
    const DOES_NOTHING: bool = true;
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
    /// A plain answer's cost (None for streams: theirs is known at the end).
    pub cost: Option<(crate::spend::Cost, crate::spend::Currency)>,
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
        requested,
    } = call;
    let mut ticket = UsageTicket::new(usage_sink, usage, "chat");
    ticket.set_model(&model.id);
    let (stream, client_usage, prompt_estimate, mut template) = match body {
        ChatInput::Raw(raw) => (
            raw.stream,
            false,
            estimate_tokens(raw.prompt_chars),
            Some(ChatBody::spliced(&raw)),
        ),
        ChatInput::NativeOnly {
            stream,
            prompt_chars,
            ..
        } => (stream, false, estimate_tokens(prompt_chars), None),
        ChatInput::Tree(mut body) => {
            let stream = is_stream(&body);
            let client_usage = ask_for_usage(&mut body, stream);
            let prompt_estimate = estimate_tokens(prompt_chars(&body));
            let tool_texts = tools.as_ref().map(|t| t.texts());
            match ChatBody::new(&body, tool_texts.as_deref()) {
                Ok(t) => (stream, client_usage, prompt_estimate, Some(t)),
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
        // The name the answer shows: the client's for the model it named.
        let shown = match (&requested, stage) {
            (Some(name), 0) => name.as_str(),
            _ => answering.id.as_str(),
        };
        let Some(adapter) = chat_adapter(target.provider.kind) else {
            return failed(ticket, unsupported_provider(answering, &target.provider));
        };
        target.stats.attempt();
        let answered = Answered {
            model: answering.id.clone(),
            provider: target.provider.name.clone(),
            upstream_model: target.upstream_model.clone(),
            attempts: attempts.made(),
        };
        let deadline = upstream::deadline(&target.provider);
        let native = hooks.native_request(&target.provider, &target.upstream_model, shown);
        let is_native = native.is_some();
        let sent = match (native, template.as_mut()) {
            (Some(n), _) => n,
            (None, Some(template)) => adapter
                .chat_request(template.for_model(&target.upstream_model), answering)
                .map(|body| NativeRequest {
                    path: adapter.chat_path(),
                    body,
                    extras: upstream::Extras::default(),
                }),
            // The caller said every target takes the client's dialect.
            (None, None) => Err(Error::internal(
                "a request with no chat body reached a target that needs one",
            )),
        };
        let NativeRequest { path, body, extras } = match sent {
            Ok(s) => s,
            Err(e) => return failed(ticket, answered.mark(e)),
        };
        let mut attempt = Attempt::start("chat", &target.provider, &target.upstream_model);
        let sent = upstream::post_with(
            client,
            &target.provider,
            path,
            body,
            stream,
            deadline,
            &extras,
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
            let read = upstream::read_body(&target.provider, resp, deadline).await;
            // A native answer is in the client's dialect already.
            let read = if is_native {
                read
            } else {
                read.and_then(|b| in_chat(adapter, b))
            };
            let answer = match read {
                Err(e) => Err(e),
                Ok(bytes) if is_native => native_answer(&mut hooks, &bytes, prompt_estimate),
                Ok(bytes) if hooks.edits_answer(&bytes) => {
                    // A span records the answer's model and usage: the tree path reads them.
                    let text = (!attempt.wants_answer())
                        .then(|| hooks.answer_text(&bytes, shown, prompt_estimate))
                        .flatten();
                    match text {
                        Some((b, tokens)) => Ok((RelayedBody::Raw(b), tokens)),
                        None => answer_tree(&bytes, shown, prompt_estimate, &mut attempt)
                            .map(|(v, tokens)| (RelayedBody::Answer(v), tokens)),
                    }
                }
                Ok(bytes) => raw_answer(&bytes, shown, prompt_estimate, &mut attempt)
                    .map(|(b, tokens)| (RelayedBody::Raw(b), tokens)),
            };
            match answer {
                Ok((mut body, tokens)) => {
                    guard.ok();
                    attempt.finish();
                    ticket.set_model(&answering.id);
                    ticket.set_provider(&target.provider.name);
                    ticket.set_upstream_model(&target.upstream_model);
                    if let RelayedBody::Answer(v) = &mut body {
                        if let Err(e) = hooks.on_response(v).await {
                            return failed(ticket, answered.mark(e));
                        }
                    }
                    let cost = Some((ticket.finish_priced(200, tokens), ticket.currency()));
                    return Ok(Relayed {
                        body,
                        answered,
                        cost,
                    });
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
            // A native stream is in the client's dialect already.
            translate: if is_native {
                None
            } else {
                adapter.chat_events()
            },
            translated: std::collections::VecDeque::new(),
            hooks: Some(hooks),
            alias: shown.to_string(),
            alias_json: serde_json::to_vec(shown).unwrap_or_default(),
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
            native: is_native,
            native_tokens: None,
        };
        // Named before the first step, which may already end the stream.
        if let Some(t) = relay.ticket.as_mut() {
            t.set_model(&answering.id);
            t.set_provider(&target.provider.name);
            t.set_upstream_model(&target.upstream_model);
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
            cost: None,
        });
    }
    failed(
        ticket,
        last.unwrap_or_else(|| Error::internal("the model has no target")),
    )
}

/// A plain native answer through the hooks; tokens estimated when it has
/// none. A tree (for `on_response`) when the hooks edit it (`edits_answer`).
fn native_answer<H: ChatHooks>(
    hooks: &mut H,
    bytes: &[u8],
    prompt_estimate: i64,
) -> Result<(RelayedBody, Tokens), AttemptError> {
    let bad = |what: String| AttemptError::new(Failure::BadAnswer, upstream::bad_answer(what));
    let (b, tokens) = hooks.on_native_answer(bytes).map_err(bad)?;
    let tokens = tokens.unwrap_or(Tokens::estimate(prompt_estimate, 0));
    if !hooks.edits_answer(&b) {
        return Ok((RelayedBody::Raw(b), tokens));
    }
    let v = serde_json::from_slice(&b).map_err(|_| bad("it is not JSON".into()))?;
    Ok((RelayedBody::Answer(v), tokens))
}

/// A plain answer of the upstream in chat terms (its adapter's translation).
fn in_chat(adapter: &dyn ChatAdapter, answer: Bytes) -> Result<Bytes, AttemptError> {
    adapter
        .chat_answer(answer)
        .map_err(|what| AttemptError::new(Failure::BadAnswer, upstream::bad_answer(what)))
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
    let tokens = usage_tokens(obj.get("usage")).unwrap_or_else(|| {
        Tokens::estimate(
            prompt_estimate,
            estimate_tokens(completion_chars(obj, "message")),
        )
    });
    Ok((v, tokens))
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

/// An `{"error": ...}` the upstream sent with a 2xx status or inside a stream.
pub(crate) fn error_in_answer(error: &Value) -> Error {
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
    /// The adapter's translation of the upstream's events into chat events
    /// (None: they are chat events already).
    translate: Option<Box<dyn ChatEvents>>,
    /// Chat events translated and not yet relayed.
    translated: std::collections::VecDeque<SseEvent>,
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
    /// The upstream speaks the client's dialect: events go through
    /// [`ChatHooks::on_native_event`].
    native: bool,
    /// The tokens a native stream's events reported last (cache included).
    native_tokens: Option<Tokens>,
}

impl<H> StreamRelay<H> {
    fn tokens(&self) -> Tokens {
        if let Some(t) = self.native_tokens {
            return t;
        }
        usage_tokens(self.usage.as_ref()).unwrap_or(Tokens::estimate(
            self.prompt_estimate,
            estimate_tokens(self.completion_chars),
        ))
    }

    /// The request's cost in the `usage` object of the chunk that carries
    /// the client's usage: `cost` (when priced) and `cost_status`.
    fn add_cost(&self, obj: &mut serde_json::Map<String, Value>) {
        let (Some(ticket), Some(tokens)) = (self.ticket.as_ref(), usage_tokens(obj.get("usage")))
        else {
            return;
        };
        let cost = ticket.cost_of(&tokens);
        if let Some(Value::Object(u)) = obj.get_mut("usage") {
            if let Some(a) = cost.amount() {
                u.insert("cost".into(), Value::String(a.to_string()));
            }
            u.insert(
                "cost_status".into(),
                Value::String(cost.status.as_str().to_string()),
            );
        }
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
            if let Some(ev) = self.translated.pop_front() {
                return Ok(Next::Event(ev));
            }
            let read = match self.parser.next_event() {
                Some(ev) => Some(ev),
                None if self.eof => self.parser.finish(),
                None => None,
            };
            if let Some(ev) = read {
                let Some(t) = self.translate.as_mut() else {
                    return Ok(Next::Event(ev));
                };
                match t.translate(ev) {
                    Ok(events) => self.translated.extend(events),
                    Err(what) => {
                        let e = upstream::bad_answer(what);
                        return Err(self.fault(Failure::BadAnswer, e));
                    }
                }
                continue;
            }
            if self.eof {
                return Ok(Next::End);
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
        let mut out = Vec::new();
        match self.hooks.as_mut() {
            Some(h) => {
                for f in h.on_stream_error(e) {
                    f.write_to(&mut out);
                }
                if h.openai_frames() {
                    h.error_frame(e).write_to(&mut out);
                    out.extend_from_slice(h.stream_done());
                }
            }
            None => {
                SseFrame::json(&e.openai_body()).write_to(&mut out);
                out.extend_from_slice(DONE);
            }
        }
        self.close_failed(e);
        Bytes::from(out)
    }

    /// Counts a failed stream against its target, records it, and stops
    /// reading the upstream.
    fn close_failed(&mut self, e: &Error) {
        if let Some(f) = self.failure.take() {
            self.attempt.failed(f);
            let verdict = judge(f, true);
            self.stats.failure(f.cause());
            if verdict.against_target {
                self.guard.failed(mono_ms());
            }
        }
        self.finish(e.status());
        self.phase = Phase::Done;
        self.upstream = Box::pin(futures_util::stream::empty());
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
        // What is still buffered is about what the rest of the write holds:
        // room for it at once, not a growth every few events.
        let room = first.len() + self.parser.pending_bytes() + 256;
        let start = |first: &Bytes| {
            let mut v = Vec::with_capacity(room);
            v.extend_from_slice(first);
            v
        };
        loop {
            match self.step_with(false).await {
                Ok(Step::Out(b)) => out
                    .get_or_insert_with(|| start(&first))
                    .extend_from_slice(&b),
                Ok(Step::Over | Step::Wait) => break,
                Err(e) => {
                    let tail = self.fail(&e);
                    out.get_or_insert_with(|| start(&first))
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
            if self.native {
                self.read_event = true;
                let ticket = self.ticket.as_ref();
                let price = |t: &Tokens| ticket.map(|k| k.cost_of(t)).unwrap_or_default();
                let mut out = Vec::with_capacity(ev.data.len() + 64);
                let relayed = match self.hooks.as_mut() {
                    Some(h) => h.on_native_event(&ev, &price, &mut out),
                    None => Ok(None),
                };
                match relayed {
                    Err(what) => {
                        let e = upstream::bad_answer(what);
                        return Err(self.fault(Failure::BadAnswer, e));
                    }
                    Ok(None) => continue,
                    Ok(Some(n)) => {
                        self.saw_finish |= n.terminal;
                        if let Some(t) = n.tokens {
                            // Chat's form for the span; the record keeps all.
                            self.usage = Some(serde_json::json!({
                                "prompt_tokens": t.prompt, "completion_tokens": t.completion,
                                "prompt_tokens_details": {"cached_tokens": t.cache_read}}));
                            self.native_tokens = Some(t);
                        }
                        for f in &n.frames {
                            f.write_to(&mut out);
                        }
                        if let Some(e) = n.error {
                            // Relayed as it came, and the stream ends there.
                            self.failure = Some(Failure::BadAnswer);
                            self.close_failed(&e);
                        } else if n.terminal {
                            // Ended here, not at the upstream's end of body:
                            // what the hooks add goes out with the last event.
                            out.extend_from_slice(&self.end().await);
                        } else if out.is_empty() {
                            continue;
                        }
                        return Ok(Step::Out(Bytes::from(out)));
                    }
                }
            }
            if let Some(name) = ev.event.as_deref() {
                if name == "error" {
                    let v: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
                    let e = error_in_answer(v.get("error").unwrap_or(&v));
                    return Err(self.fault(Failure::BadAnswer, e));
                }
                if !name.is_empty() && name != "message" {
                    if self.hooks.as_ref().is_some_and(|h| !h.openai_frames()) {
                        continue;
                    }
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
            let reads_text = self.hooks.as_ref().is_some_and(|h| h.reads_chunk_text());
            if reads_text && !self.attempt.wants_answer() {
                if let Some(mut c) = ChunkText::read(&ev.data) {
                    if c.usage.is_some() {
                        self.usage.clone_from(&c.usage);
                    }
                    self.completion_chars += c.chars;
                    self.saw_finish |= c.finish;
                    self.read_event = true;
                    if !self.client_usage {
                        // The usage-only chunk is dropped, and usage removed.
                        if c.choices == 0 && c.has_usage {
                            continue;
                        }
                        c.usage = None;
                    }
                    let mut out = Vec::with_capacity(ev.data.len() + 128);
                    if let Some(h) = self.hooks.as_mut() {
                        h.on_chunk_text(&c, &self.alias, &mut out);
                    }
                    if out.is_empty() {
                        continue;
                    }
                    return Ok(Step::Out(Bytes::from(out)));
                }
            }
            if !H::EDITS_ANSWERS && !self.attempt.wants_answer() {
                let alias_json = &self.alias_json;
                let client_usage = self.client_usage;
                let mut out = Vec::with_capacity(ev.data.len() + alias_json.len() + 24);
                out.extend_from_slice(b"data: ");
                // The usage chunk a client asked for takes the tree path,
                // where it gains the request's cost (once per stream).
                if let Some(c) = splice_chunk_into(&ev.data, alias_json, client_usage, &mut out)
                    .filter(|c| !(client_usage && c.usage.is_some()))
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
            if self.client_usage {
                self.add_cost(obj);
            }
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

    /// Ends a stream that went well: hook frames, then `[DONE]` (or what
    /// ends the inbound dialect's stream).
    async fn end(&mut self) -> Bytes {
        let mut out = Vec::new();
        let mut done: Option<&[u8]> = Some(DONE);
        if H::CARRIES_COST {
            let tokens = self.tokens();
            if let (Some(h), Some(t)) = (self.hooks.as_mut(), self.ticket.as_ref()) {
                h.on_stream_cost(t.cost_of(&tokens));
            }
        }
        if let Some(h) = self.hooks.as_mut() {
            h.on_stream_end(self.usage.as_ref(), &mut out).await;
            if h.openai_frames() {
                done = Some(h.stream_done());
            } else {
                done = None;
            }
        }
        if let Some(done) = done {
            out.extend_from_slice(done);
        }
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
