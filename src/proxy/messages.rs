//! The Messages dialect inbound, on the one relay ([`crate::proxy::chat`]):
//! [`MessagesHooks`] wraps a route's chat hooks (none, or the agent turn's)
//! and turns what the relay hands them (chat answers and chunks) into
//! Messages answers and events. The relay keeps retries, fallbacks, limits,
//! usage and the routing headers; it never learns the dialect.
//!
//! The order around a chunk: tool call ids made acceptable to a Messages
//! client and long tool names mapped back first (so approvals and AG-UI
//! events name what the client sees), then the inner hooks (PII restore,
//! approvals, AG-UI events), then the translation. AG-UI frames go after
//! `message_start` (Anthropic clients require it first).
//!
//! Pass-through: a Messages request whose attempt goes to a provider that
//! speaks Messages itself (type `anthropic`, [`passes_through`]) sends the
//! client's body as it came, with only `model` replaced, when the hooks
//! were given it ([`Native`]); the relay asks before each attempt
//! ([`ChatHooks::native_request`], its one native seam) and hands that
//! attempt's answer or events back here (`on_native_answer`,
//! `on_native_event`), which relay them as they came (only `model` set), so
//! nothing chat cannot carry is lost (thinking, cache_control, server tools,
//! unknown members); usage is read from the Messages answer. Other attempts
//! of the same request (a fallback to an `openai` target) are translated.
//! On the agent route the inner hooks' rules apply to what passes through,
//! read in Messages terms ([`MessagesRules`]): a stream's `message_stop` is
//! held until the stream's end (`on_stream_end`: AG-UI's last events, the
//! approvals event, then `message_stop`).

use bytes::Bytes;
use reqwest::header::HeaderValue;
use serde_json::{json, Value};

use crate::error::Error;
use crate::models::upstream::Extras;
use crate::models::{Provider, ProviderType};
use crate::proxy::chat::{error_in_answer, ChatHooks, ChunkAction, NativeEvent, NativeRequest};
use crate::proxy::messages_rules::MessagesRules;
use crate::proxy::native_body::NativeBody;
use crate::usage::{estimate_tokens, Tokens};
use crate::wire::chat::chunk::ChunkText;
use crate::wire::messages::error::stream_error;
use crate::wire::messages::from_chat_answer::{
    block_id, messages_answer, messages_answer_text, new_message_id,
};
use crate::wire::messages::passed::{passed_answer, passed_event};
use crate::wire::messages::stream::{frame, ToMessages};
use crate::wire::messages::to_chat::ToolNames;
use crate::wire::messages::to_chat_answer::{MessagesUsage, UsageCounts};
use crate::wire::sse::{SseEvent, SseFrame};

/// Whether a Messages request goes to a provider of this type as it came
/// (pass-through) rather than translated to chat.
pub fn passes_through(kind: ProviderType) -> bool {
    match kind {
        ProviderType::Anthropic => true,
        ProviderType::Openai | ProviderType::Tei | ProviderType::Cohere => false,
    }
}

/// What a pass-through attempt sends: the client's body, query string and
/// `anthropic-beta`.
pub struct Native {
    pub body: NativeBody,
    pub query: Option<String>,
    pub beta: Option<String>,
}

impl Native {
    /// The request for `provider`: `model` replaced, `anthropic-beta`
    /// filtered by the provider's `beta_headers`.
    fn request(
        &mut self,
        provider: &Provider,
        upstream_model: &str,
    ) -> Result<NativeRequest, Error> {
        let body = self.body.for_model(upstream_model)?;
        let anthropic_beta = provider
            .beta_headers
            .filter(self.beta.as_deref())
            .and_then(|b| HeaderValue::from_str(&b).ok());
        Ok(NativeRequest {
            path: "/v1/messages",
            body,
            extras: Extras {
                query: self.query.clone(),
                anthropic_beta,
                raw_errors: true,
            },
        })
    }
}

/// A pass-through attempt's answer so far.
struct Passed {
    /// The name the answer shows.
    model: String,
    /// The Messages usage read so far (None: none yet).
    usage: Option<MessagesUsage>,
    /// Characters of text streamed (for an estimate without usage).
    text_chars: usize,
    /// The upstream's `message_stop`, held for the stream's end while the
    /// inner hooks' rules apply.
    held_stop: Option<SseFrame>,
}

impl Passed {
    /// The tokens the stream has reported once an event is read: its usage
    /// (`counts`) merged into what came before; at the end (`terminal`) of
    /// a stream that reported none, the estimate; else None (nothing new).
    fn tokens_after(
        &mut self,
        counts: Option<&UsageCounts>,
        terminal: bool,
        estimate: Tokens,
    ) -> Option<Tokens> {
        if let Some(c) = counts {
            let merged = self.usage.get_or_insert_with(MessagesUsage::default);
            merged.merge_counts(c);
            return Some(merged.tokens());
        }
        (terminal && self.usage.is_none()).then(|| Tokens {
            completion: estimate_tokens(self.text_chars),
            ..estimate
        })
    }
}

/// Characters of the text in Messages content blocks (for an estimate).
fn messages_text_chars(content: Option<&Value>) -> usize {
    let Some(Value::Array(blocks)) = content else {
        return 0;
    };
    blocks
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .map(|t| t.chars().count())
        .sum()
}

/// Chat hooks `H` answered in Messages' shape; see the module documentation.
pub struct MessagesHooks<H> {
    inner: H,
    names: ToolNames,
    /// The name the client sent.
    model: String,
    /// The id of the model it resolved to: an answer under another id came
    /// from a fallback, and names it (as on chat).
    model_id: String,
    input_estimate: i64,
    stream: ToMessages,
    native: Option<Native>,
    /// Some while the current attempt passes through.
    passed: Option<Passed>,
}

impl<H: ChatHooks + MessagesRules> MessagesHooks<H> {
    /// `model`: the name the answer carries; `input_estimate`: the
    /// gateway's estimate of the prompt (for `message_start`).
    pub fn new(
        inner: H,
        model: &str,
        model_id: &str,
        input_estimate: i64,
        names: ToolNames,
    ) -> Self {
        MessagesHooks {
            stream: ToMessages::new(
                new_message_id(),
                model.to_string(),
                input_estimate,
                names.clone(),
            ),
            inner,
            names,
            model: model.to_string(),
            model_id: model_id.to_string(),
            input_estimate,
            native: None,
            passed: None,
        }
    }

    /// Passes the request through to providers that speak Messages.
    pub fn with_native(mut self, native: Native) -> Self {
        self.native = Some(native);
        self
    }

    /// Tokens without usage from the upstream: the gateway's estimates.
    fn estimate(&self, text_chars: usize) -> Tokens {
        Tokens::estimate(self.input_estimate, estimate_tokens(text_chars))
    }

    /// The name an answer carries: the client's, or a fallback's id.
    fn answer_model(&self, relayed: Option<&Value>) -> String {
        match relayed.and_then(Value::as_str) {
            Some(m) if m != self.model_id => m.to_string(),
            _ => self.model.clone(),
        }
    }

    /// [`Self::answer_model`] for the name the relay gives.
    fn answer_model_named(&self, relayed: &str) -> String {
        if relayed != self.model_id {
            relayed.to_string()
        } else {
            self.model.clone()
        }
    }

    /// Tool call ids and names as the Messages client will see them.
    fn client_calls(&self, calls: Option<&mut Value>) {
        let Some(Value::Array(calls)) = calls else {
            return;
        };
        for (i, c) in calls.iter_mut().enumerate() {
            let at = c
                .get("index")
                .and_then(Value::as_u64)
                .map_or(i, |x| x as usize);
            if let Some(Value::String(id)) = c.get_mut("id") {
                *id = block_id(id, at);
            }
            if !self.names.is_empty() {
                if let Some(Value::String(n)) = c.pointer_mut("/function/name") {
                    *n = self.names.original(n).to_string();
                }
            }
        }
    }
}

impl<H: ChatHooks + MessagesRules> MessagesHooks<H> {
    /// The events that end a stream that went well (see `on_stream_end`).
    async fn end_frames(&mut self, usage: Option<&Value>) -> Vec<SseFrame> {
        let held = self.passed.as_mut().map(|p| p.held_stop.take());
        if held.as_ref().is_some_and(Option::is_none) {
            // The upstream's own `message_stop` ended it.
            return Vec::new();
        }
        let mut inner = Vec::new();
        self.inner.on_stream_end(usage, &mut inner).await;
        let inner = crate::wire::sse::frames_of(&inner);
        let mut out = Vec::new();
        let passed = held.is_some();
        if !passed {
            self.stream.start(&mut out);
        }
        let mut after_delta = Vec::new();
        let mut approvals = None;
        for f in inner {
            // The inner hooks speak chat: a closing chunk (restored text,
            // approvals) or an error.
            let SseFrame::Data(data) = &f else {
                after_delta.push(f);
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if let Some(e) = v.get("error") {
                let message = e.get("message").and_then(Value::as_str).unwrap_or("");
                out.extend(after_delta);
                out.push(frame(json!({"type": "error",
                    "error": {"type": "api_error", "message": message}})));
                return out;
            }
            if let Some(a) = v.get("approvals") {
                approvals = Some(a.clone());
            } else if !passed {
                // (Passed through, restorers gave their text at each block's end.)
                self.stream.chunk(&v, &mut out);
            }
        }
        if !passed {
            self.stream.finish(usage, &mut out);
        }
        out.extend(after_delta);
        if let Some(a) = approvals {
            out.push(frame(json!({"type": "service.approvals", "approvals": a})));
        }
        match held.flatten() {
            Some(stop) => out.push(stop),
            None => self.stream.stop(&mut out),
        }
        out
    }
}

impl<H: ChatHooks + MessagesRules> ChatHooks for MessagesHooks<H> {
    const EDITS_ANSWERS: bool = true;
    /// `message_delta`'s usage carries it.
    const CARRIES_COST: bool = true;

    fn on_stream_cost(&mut self, cost: crate::spend::Cost) {
        // Passed through, the upstream's `message_delta` carried it already.
        if self.passed.is_none() {
            self.stream.set_cost(cost);
        }
    }

    /// Translated answers are made anew; a passed-through one only when
    /// the inner hooks' rules apply to it.
    fn edits_answer(&self, _answer: &[u8]) -> bool {
        self.passed.is_none() || self.inner.rules_passed()
    }

    /// With inner hooks that do nothing, a translated answer is written
    /// from the chat answer's text (no tree either way).
    fn answer_text(
        &mut self,
        answer: &[u8],
        alias: &str,
        prompt_estimate: i64,
    ) -> Option<(Bytes, Tokens)> {
        if !H::DOES_NOTHING || self.passed.is_some() {
            return None;
        }
        let fallback = Tokens::estimate(self.input_estimate, 0);
        let model = self.answer_model_named(alias);
        messages_answer_text(
            answer,
            self.stream.id(),
            &model,
            &self.names,
            fallback,
            prompt_estimate,
        )
    }

    fn reads_chunk_text(&self) -> bool {
        H::DOES_NOTHING && self.passed.is_none()
    }

    /// The events of a chunk read from its text, written as they are made.
    fn on_chunk_text(&mut self, chunk: &ChunkText<'_>, alias: &str, out: &mut Vec<u8>) {
        if !self.stream.started() {
            let model = self.answer_model_named(alias);
            self.stream.set_model(model);
        }
        self.stream
            .chunk_into(&chunk.delta, chunk.usage.as_ref(), out);
    }

    async fn on_response(&mut self, response: &mut Value) -> Result<(), Error> {
        if self.passed.is_some() {
            return self.inner.on_passed_answer(response).await;
        }
        self.client_calls(response.pointer_mut("/choices/0/message/tool_calls"));
        self.inner.on_response(response).await?;
        let approvals = response.get("approvals").cloned();
        let fallback = Tokens::estimate(self.input_estimate, 0);
        let model = self.answer_model(response.get("model"));
        let mut answer = messages_answer(
            response,
            self.stream.id(),
            &model,
            &ToolNames::default(),
            fallback,
        );
        if let Some(a) = approvals {
            answer["approvals"] = a;
        }
        *response = answer;
        Ok(())
    }

    fn on_chunk(&mut self, chunk: &mut Value, before: &mut Vec<SseFrame>) -> ChunkAction {
        if let Some(Value::Array(choices)) = chunk.get_mut("choices") {
            for c in choices.iter_mut() {
                let calls = c.pointer_mut("/delta/tool_calls");
                self.client_calls(calls);
            }
        }
        // AG-UI's messageId is the message's id.
        chunk["id"] = json!(self.stream.id());
        if !self.stream.started() {
            let model = self.answer_model(chunk.get("model"));
            self.stream.set_model(model);
        }
        let mut inner = Vec::new();
        let action = self.inner.on_chunk(chunk, &mut inner);
        self.stream.start(before);
        before.extend(inner);
        if action == ChunkAction::Send {
            self.stream.chunk(chunk, before);
        }
        ChunkAction::Drop
    }

    async fn on_stream_end(&mut self, usage: Option<&Value>, out: &mut Vec<u8>) {
        for f in self.end_frames(usage).await {
            f.write_to(out);
        }
    }

    fn on_stream_error(&mut self, error: &Error) -> Vec<SseFrame> {
        if self.passed.is_some() {
            // The upstream's own events began the stream: only the error
            // event (`error_frame`) follows, after the rules' (RUN_ERROR).
            if self.inner.rules_passed() {
                return self.inner.on_stream_error(error);
            }
            return Vec::new();
        }
        let mut out = Vec::new();
        self.stream.start(&mut out);
        out.extend(self.inner.on_stream_error(error));
        out
    }

    fn stream_done(&self) -> &'static [u8] {
        // This dialect has no `[DONE]`.
        b""
    }

    fn error_frame(&self, error: &Error) -> SseFrame {
        frame(stream_error(error))
    }

    fn native_request(
        &mut self,
        provider: &Provider,
        upstream_model: &str,
        alias: &str,
    ) -> Option<Result<NativeRequest, Error>> {
        self.passed = None;
        if !passes_through(provider.kind) {
            return None;
        }
        let req = self.native.as_mut()?.request(provider, upstream_model);
        // The client's name for the model it named, else a fallback's id.
        let model = if alias == self.model_id {
            self.model.clone()
        } else {
            alias.to_string()
        };
        self.passed = Some(Passed {
            model,
            usage: None,
            text_chars: 0,
            held_stop: None,
        });
        Some(req)
    }

    /// A Messages answer passed through: checked, `model` set to the name
    /// shown, tokens from its usage under the one convention.
    fn on_native_answer(&mut self, answer: &[u8]) -> Result<(Bytes, Option<Tokens>), String> {
        let Some(passed) = self.passed.as_ref() else {
            return Err("no pass-through attempt".into());
        };
        if H::DOES_NOTHING {
            // The usual answer: read and `model` spliced in without a tree.
            if let Some((out, usage)) = passed_answer(answer, &passed.model) {
                let mut m = MessagesUsage::default();
                m.merge_counts(&usage);
                return Ok((out, Some(m.tokens())));
            }
        }
        let mut v: Value = serde_json::from_slice(answer).map_err(|_| "it is not JSON")?;
        let Some(obj) = v.as_object_mut() else {
            return Err("it is not a JSON object".into());
        };
        if obj.get("type").and_then(Value::as_str) != Some("message") {
            return Err("it is not a message".into());
        }
        let usage = obj.get("usage").filter(|u| u.is_object()).map(|u| {
            let mut m = MessagesUsage::default();
            m.merge(u);
            m.tokens()
        });
        let tokens =
            usage.unwrap_or_else(|| self.estimate(messages_text_chars(obj.get("content"))));
        obj.insert("model".into(), Value::String(passed.model.clone()));
        let out = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
        Ok((Bytes::from(out), Some(tokens)))
    }

    /// One event of a stream passed through, relayed as it came:
    /// `message_start` with `model` set to the name shown; usage read from
    /// `message_start` and `message_delta`, whose usage gains the request's
    /// cost (`price`); `message_stop` ends it; an `event: error` is
    /// relayed, and the stream fails there.
    fn on_native_event(
        &mut self,
        event: &SseEvent,
        price: &dyn Fn(&Tokens) -> crate::spend::Cost,
        out: &mut Vec<u8>,
    ) -> Result<Option<NativeEvent>, String> {
        let estimate = self.estimate(0);
        let Some(passed) = self.passed.as_mut() else {
            return Err("no pass-through attempt".into());
        };
        if H::DOES_NOTHING {
            // The usual events read without a tree and written as they
            // came (model and cost spliced in), with no frame between.
            if let Some(e) = passed_event(&event.data).filter(|e| e.kind != "error") {
                passed.text_chars += e.text_chars;
                let terminal = e.kind == "message_stop";
                let tokens = passed.tokens_after(e.usage.as_ref(), terminal, estimate);
                // The usage the stream ends with carries the cost.
                let cost = tokens
                    .as_ref()
                    .filter(|_| e.kind == "message_delta")
                    .map(price);
                let name = event.event.as_deref().unwrap_or(&e.kind);
                e.write(out, name, &event.data, &passed.model, cost.as_ref());
                return Ok(Some(NativeEvent {
                    frames: Vec::new(),
                    terminal,
                    tokens,
                    error: None,
                }));
            }
        }
        let mut v: Value =
            serde_json::from_str(&event.data).map_err(|_| "a stream event is not JSON")?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let name = event.event.clone().unwrap_or_else(|| kind.to_string());
        // The usage the stream ends with: it carries the cost.
        let last_usage = kind == "message_delta";
        // The inner hooks' rules read the event (the agent route's).
        let ruled = self.inner.rules_passed().then(|| kind.to_string());
        let mut relayed = NativeEvent {
            frames: vec![SseFrame::Event {
                event: name,
                data: event.data.clone(),
            }],
            terminal: false,
            tokens: None,
            error: None,
        };
        let mut usage = None;
        match kind {
            "message_start" => {
                if let Some(m) = v.get_mut("message").and_then(Value::as_object_mut) {
                    usage = m.get("usage").filter(|u| u.is_object()).cloned();
                    m.insert("model".into(), Value::String(passed.model.clone()));
                }
                if let Some(SseFrame::Event { data, .. }) = relayed.frames.first_mut() {
                    *data = v.to_string();
                }
            }
            "message_delta" => usage = v.get("usage").filter(|u| u.is_object()).cloned(),
            "content_block_delta" => {
                if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                    passed.text_chars += t.chars().count();
                }
            }
            "message_stop" => relayed.terminal = true,
            "error" => relayed.error = Some(error_in_answer(v.get("error").unwrap_or(&v))),
            _ => {}
        }
        let counts = usage.as_ref().map(UsageCounts::of);
        relayed.tokens = passed.tokens_after(counts.as_ref(), relayed.terminal, estimate);
        if let Some(tokens) = relayed.tokens.filter(|_| last_usage && usage.is_some()) {
            if let Some(Value::Object(u)) = v.get_mut("usage") {
                price(&tokens).write_into(u);
            }
            if let Some(SseFrame::Event { data, .. }) = relayed.frames.first_mut() {
                *data = v.to_string();
            }
        }
        if let Some(kind) = ruled {
            match kind.as_str() {
                // Held: the rules' last frames go before it (`on_stream_end`).
                "message_stop" => passed.held_stop = relayed.frames.pop(),
                "error" => {
                    let mut frames = match &relayed.error {
                        Some(e) => self.inner.on_stream_error(e),
                        None => Vec::new(),
                    };
                    frames.append(&mut relayed.frames);
                    relayed.frames = frames;
                }
                _ => {
                    relayed.frames.clear();
                    self.inner.on_passed_event(&kind, v, &mut relayed.frames);
                }
            }
        }
        Ok(Some(relayed))
    }
}
