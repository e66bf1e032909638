//! The Responses dialect on the relay's inbound seam: hooks that wrap a
//! route's chat hooks ([`crate::proxy::NoHooks`] for the key route, the
//! agent's for the agent route) and answer the client in the Responses
//! shape. On a bridged attempt the wrapped hooks see chat (PII restore,
//! approvals), and the result is translated; on a native attempt (a target
//! whose provider says `responses = "native"`) the client's body goes to the
//! upstream's `/responses` and its answer is relayed with `model` rewritten.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::error::Error;
use crate::models::{Provider, ProviderType, ResponsesMode};
use crate::proxy::chat::{ChatHooks, ChunkAction, NativeEvent, NativeRequest};
use crate::proxy::native_body::NativeBody;
use crate::usage::Tokens;
use crate::wire::chat::body::{ChatInput, RawChat};
use crate::wire::chat::chunk::ChunkText;
use crate::wire::chat::prompt_chars;
use crate::wire::responses::answer::{from_chat, from_chat_text};
use crate::wire::responses::native::{self, NativeStream};
use crate::wire::responses::{Echo, RawResponses, ResponseMeta, ResponsesRequest, ResponsesStream};
use crate::wire::sse::{frames_of, SseEvent, SseFrame};

/// Whether a Responses request goes to this provider natively.
pub fn is_native(provider: &Provider) -> bool {
    provider.kind == ProviderType::Openai && provider.responses == ResponsesMode::Native
}

/// What the relay of a Responses request takes: the bridge's chat body, the
/// answer's echo, and what a native attempt sends.
pub struct ResponsesInput {
    pub chat: ChatInput,
    pub echo: Echo,
    pub native: NativeSource,
}

/// What a native attempt sends.
pub enum NativeSource {
    /// The client's bytes, `model` replaced (the key route's usual body).
    Client(NativeBody),
    /// The request, written out on the first native attempt.
    Request(ResponsesRequest),
}

impl ResponsesInput {
    /// A request read as a tree (and maybe edited by the agent turn).
    pub fn of_request(request: ResponsesRequest) -> ResponsesInput {
        let chat = request.to_chat();
        let echo = Echo::of(&request.body, request.custom_tools(), prompt_chars(&chat));
        ResponsesInput {
            chat: ChatInput::Tree(chat),
            echo,
            native: NativeSource::Request(request),
        }
    }

    /// A body read without a tree, from the client's `bytes`.
    pub fn of_raw(raw: RawResponses, bytes: Bytes) -> ResponsesInput {
        ResponsesInput {
            chat: ChatInput::Raw(RawChat::assembled(
                raw.chat_tail,
                raw.stream,
                raw.prompt_chars,
            )),
            echo: raw.echo,
            native: NativeSource::Client(NativeBody::Client {
                bytes,
                model_at: raw.model_at,
            }),
        }
    }
}

/// See the module documentation.
pub struct ResponsesHooks<H> {
    inner: H,
    echo: Echo,
    /// What a native attempt sends; from a tree, made on the first one.
    native_body: Option<NativeBody>,
    request: Option<Box<ResponsesRequest>>,
    /// The current attempt is native (then `native_stream` relays).
    native: Option<NativeStream>,
    stream: Option<ResponsesStream>,
    /// Approvals the wrapped hooks put on the stream's end.
    approvals: Vec<Value>,
    /// Whether the latest attempt was bridged (read by the route once the
    /// relay answers: built-in tools are named as dropped only then).
    bridged: Arc<AtomicBool>,
    /// Whether native targets get the Responses body (off: every attempt is
    /// bridged, so the wrapped hooks see every answer).
    allow_native: bool,
    /// The model the current attempt answers for.
    alias: String,
    /// The request's cost as a bridged stream ends (`on_stream_cost`).
    cost: Option<crate::spend::Cost>,
}

impl<H: ChatHooks> ResponsesHooks<H> {
    pub fn new(inner: H, native: NativeSource, echo: Echo) -> ResponsesHooks<H> {
        let (native_body, request) = match native {
            NativeSource::Client(b) => (Some(b), None),
            NativeSource::Request(r) => (None, Some(Box::new(r))),
        };
        ResponsesHooks {
            inner,
            echo,
            native_body,
            request,
            native: None,
            stream: None,
            approvals: Vec::new(),
            bridged: Arc::new(AtomicBool::new(true)),
            allow_native: true,
            alias: String::new(),
            cost: None,
        }
    }

    /// Bridges every attempt, native providers included: for wrapped hooks
    /// that must see the answer (the agent route's approvals and PII
    /// restore work on chat answers).
    pub fn bridge_only(mut self) -> ResponsesHooks<H> {
        self.allow_native = false;
        self
    }

    /// Reads, after the relay answered, whether the answering attempt was
    /// bridged (true) or native.
    pub fn bridged(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.bridged)
    }

    fn stream_for(&mut self, chunk: &Value) -> &mut ResponsesStream {
        let (echo, alias) = (&self.echo, &self.alias);
        self.stream.get_or_insert_with(|| {
            // The model that answers: the chunk names it (the relay rewrote
            // it), else the attempt's.
            let model = chunk.get("model").and_then(Value::as_str).unwrap_or(alias);
            ResponsesStream::new(ResponseMeta::new(model), echo.clone())
        })
    }

    /// Frames the wrapped hooks made (chat chunks: text a PII restorer still
    /// held, approvals; an error), in the Responses grammar.
    fn translate_frames(&mut self, frames: Vec<SseFrame>) -> Vec<SseFrame> {
        let mut out = Vec::new();
        for f in frames {
            let SseFrame::Data(data) = f else { continue };
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if let Some(Value::Array(a)) = v.get("approvals") {
                self.approvals.extend(a.iter().cloned());
            } else if let Some(e) = v.get("error") {
                let code = e
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or("internal_error");
                let message = e.get("message").and_then(Value::as_str).unwrap_or("");
                out.extend(self.stream_for(&v).fail(code, message));
            } else {
                out.extend(self.stream_for(&v).on_chunk(&v));
            }
        }
        out
    }
}

impl<H: ChatHooks> ChatHooks for ResponsesHooks<H> {
    const EDITS_ANSWERS: bool = true;
    /// The terminal response's usage carries it.
    const CARRIES_COST: bool = true;

    fn on_stream_cost(&mut self, cost: crate::spend::Cost) {
        // A native stream's terminal event carried it already.
        if self.native.is_none() {
            self.cost = Some(cost);
        }
    }

    /// With inner hooks that do nothing, a bridged answer is written from
    /// the chat answer's text (no tree either way).
    fn answer_text(
        &mut self,
        answer: &[u8],
        alias: &str,
        prompt_estimate: i64,
    ) -> Option<(Bytes, Tokens)> {
        if !H::DOES_NOTHING || self.native.is_some() {
            return None;
        }
        from_chat_text(
            answer,
            &ResponseMeta::new(alias),
            &self.echo,
            prompt_estimate,
        )
    }

    fn reads_chunk_text(&self) -> bool {
        H::DOES_NOTHING && self.native.is_none()
    }

    /// The events of a chunk read from its text, written as they are made.
    fn on_chunk_text(&mut self, chunk: &ChunkText<'_>, alias: &str, out: &mut Vec<u8>) {
        let echo = &self.echo;
        self.stream
            .get_or_insert_with(|| ResponsesStream::new(ResponseMeta::new(alias), echo.clone()))
            .on_chunk_into(&chunk.delta, out);
    }

    /// The Responses grammar ends the stream (`on_stream_end`, `on_stream_error`).
    fn openai_frames(&self) -> bool {
        false
    }

    /// Bridged answers are translated; native ones pass as they came.
    fn edits_answer(&self, _answer: &[u8]) -> bool {
        self.native.is_none()
    }

    async fn on_response(&mut self, response: &mut Value) -> Result<(), Error> {
        self.inner.on_response(response).await?;
        let model = response.get("model").and_then(Value::as_str).unwrap_or("");
        let mut r = from_chat(response, &ResponseMeta::new(model), &self.echo);
        if let Some(a) = response.get("approvals").filter(|a| a.is_array()) {
            r["approvals"] = a.clone();
        }
        *response = r;
        Ok(())
    }

    fn on_chunk(&mut self, chunk: &mut Value, before: &mut Vec<SseFrame>) -> ChunkAction {
        let mut inner_before = Vec::new();
        let action = self.inner.on_chunk(chunk, &mut inner_before);
        before.extend(self.translate_frames(inner_before));
        if action == ChunkAction::Send {
            before.extend(self.stream_for(chunk).on_chunk(chunk));
        }
        ChunkAction::Drop
    }

    async fn on_stream_end(&mut self, usage: Option<&Value>, out: &mut Vec<u8>) {
        if self.native.is_some() {
            return;
        }
        let mut inner = Vec::new();
        self.inner.on_stream_end(usage, &mut inner).await;
        if !inner.is_empty() {
            for f in self.translate_frames(frames_of(&inner)) {
                f.write_to(out);
            }
        }
        let approvals = std::mem::take(&mut self.approvals);
        let cost = self.cost.take();
        let stream = self.stream_for(&Value::Null);
        if let Some(c) = cost {
            stream.set_cost(c);
        }
        // Written straight into the answer: no frames made and read back.
        stream.finish_into(usage, &approvals, out);
    }

    fn on_stream_error(&mut self, error: &Error) -> Vec<SseFrame> {
        if let Some(n) = self.native.as_mut() {
            return n.fail(&error.code, &error.message);
        }
        let frames = self.inner.on_stream_error(error);
        let mut out = self.translate_frames(frames);
        out.extend(
            self.stream_for(&Value::Null)
                .fail(&error.code, &error.message),
        );
        out
    }

    fn native_request(
        &mut self,
        provider: &Provider,
        upstream_model: &str,
        alias: &str,
    ) -> Option<Result<NativeRequest, Error>> {
        alias.clone_into(&mut self.alias);
        let native = self.allow_native && is_native(provider);
        self.bridged.store(!native, Ordering::Relaxed);
        if !native {
            self.native = None;
            return None;
        }
        self.native = Some(NativeStream::new(alias));
        if self.native_body.is_none() {
            self.native_body = (self.request.as_ref()).map(|r| NativeBody::Tree(r.to_native()));
        }
        let body = match self.native_body.as_mut()?.for_model(upstream_model) {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(NativeRequest {
            path: "/responses",
            body,
            extras: Default::default(),
        }))
    }

    fn on_native_answer(&mut self, answer: &[u8]) -> Result<(Bytes, Option<Tokens>), String> {
        let alias = self
            .native
            .as_ref()
            .map(|n| n.alias().to_string())
            .unwrap_or_default();
        let (v, tokens) = native::answer(answer, &alias)?;
        let bytes = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
        Ok((Bytes::from(bytes), tokens))
    }

    fn on_native_event(
        &mut self,
        event: &SseEvent,
        price: &dyn Fn(&Tokens) -> crate::spend::Cost,
        _out: &mut Vec<u8>,
    ) -> Result<Option<NativeEvent>, String> {
        let Some(n) = self.native.as_mut() else {
            return Err("no native attempt".into());
        };
        Ok(n.on_event(event, price)?.map(|r| NativeEvent {
            frames: vec![r.frame],
            terminal: r.terminal,
            tokens: r.tokens,
            error: None,
        }))
    }
}
