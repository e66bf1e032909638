//! A stub upstream model server for Gatehouse tests and benchmarks.
//!
//! It speaks enough of three real wire formats to stand in for real model
//! servers:
//!
//! * OpenAI-compatible (vLLM / OpenAI), under `/v1`: `POST /v1/chat/completions`
//!   (plain and SSE streaming, tool calls), `POST /v1/embeddings`,
//!   `POST /v1/rerank` (Jina / vLLM shape), `GET /v1/models`.
//! * text-embeddings-inference (TEI), at the root: `POST /embed`, `POST /rerank`,
//!   `GET /health`.
//! * Cohere v2, at the root: `POST /v2/embed`, `POST /v2/rerank`.
//! * Anthropic Messages, at the root: `POST /v1/messages` (plain and SSE,
//!   text and tool use, cache usage, Anthropic error bodies) and
//!   `POST /v1/messages/count_tokens`.
//!
//! Behaviour is scripted per upstream `model` name (see [`Script`]), so tests
//! running in parallel with unique model names never step on each other. TEI
//! requests carry no model; they use the script registered under
//! [`TEI_SCRIPT_KEY`].
//!
//! The same control is exposed over HTTP for non-Rust clients:
//! `POST /_stub/script`, `DELETE /_stub/scripts`, `GET /_stub/requests`,
//! `DELETE /_stub/requests`, `GET /_stub/stats`.
//!
//! ```no_run
//! # async fn demo() {
//! use gatehouse_stub_upstream::{Script, Stub};
//! let stub = Stub::start().await;
//! stub.script("my-model", Script { status: Some(503), ..Script::default() });
//! let base = stub.openai_base_url(); // http://127.0.0.1:PORT/v1
//! # let _ = base;
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod chat;
mod conn;
mod det;
mod messages;
mod reply;
mod responses;
mod retrieval;
mod server;

pub use det::{embedding_for, score_for, words};

/// Script key used for TEI routes (`/embed`, `/rerank`), whose bodies carry no `model`.
pub const TEI_SCRIPT_KEY: &str = "tei";

/// Default embedding length when a request does not ask for one.
pub const DEFAULT_DIMS: usize = 8;

/// Default number of content characters per streamed chunk.
pub const DEFAULT_CHUNK_SIZE: usize = 4;

/// One request as the stub received it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// The query string, if any.
    #[serde(default)]
    pub query: Option<String>,
    /// Header names lower-case; repeated headers joined with ", ".
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON, `Null` if it was not JSON (or empty).
    pub body: serde_json::Value,
    /// The body as text (lossy UTF-8).
    pub raw_body: String,
}

impl Recorded {
    /// The `model` named in the body, if any.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(|m| m.as_str())
    }

    /// A header by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// A tool call the scripted assistant makes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScriptToolCall {
    pub id: String,
    pub name: String,
    /// JSON text of the arguments, as OpenAI sends it.
    pub arguments: String,
}

/// Behaviour for requests naming one upstream model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Script {
    /// Assistant text (chat). `None`: echo (`"echo: " + last user text`), or
    /// `null` content when `tool_calls` is non-empty.
    pub content: Option<String>,
    /// Assistant tool calls; finish_reason becomes `"tool_calls"`.
    pub tool_calls: Vec<ScriptToolCall>,
    /// Answer this HTTP status with an error body in the route's own format
    /// (OpenAI `{"error":{"message",..}}`, TEI `{"error","error_type"}`,
    /// Cohere `{"id","message"}`).
    pub status: Option<u16>,
    /// Message for `status` (default "stub error").
    pub error_message: Option<String>,
    /// Wait before answering (for streams: headers go out at once, the first
    /// chunk waits).
    pub delay_ms: u64,
    /// Never answer (until the stub shuts down).
    pub hang: bool,
    /// 200 with a body that is not JSON; for streams an SSE data line that is
    /// not JSON, then `[DONE]`.
    pub garbage: bool,
    /// 200 with exactly this body (JSON text as some server wrote it), for a
    /// plain (non-stream) request.
    pub body: Option<String>,
    /// Stream: characters per content / tool-argument chunk (0 means 4).
    pub chunk_size: usize,
    /// Stream: pause between events.
    pub chunk_interval_ms: u64,
    /// Stream: after the role chunk, send N more chunks, then drop the
    /// connection abruptly (no terminating chunk, no `[DONE]`).
    pub close_after_chunks: Option<usize>,
    /// Stream, with `close_after_chunks`: drop the connection right after
    /// the last chunk is written, the chunk held back until the drop
    /// (`TCP_CORK` on Linux), so the last chunks and the drop reach the
    /// reader in one read: all of the answer with `chunk_interval_ms` 0,
    /// the last chunk otherwise. Without it the drop comes 20 ms after the
    /// last chunk.
    pub close_with_last_chunk: bool,
    /// Stream: send these events (each the text of one `data:` line), in
    /// order and then `[DONE]`, instead of the answer made from `content`
    /// and `tool_calls`; the first stands where the role chunk would
    /// (`close_after_chunks`).
    pub stream_events: Option<Vec<String>>,
    /// (prompt_tokens, completion_tokens) reported for chat. Default
    /// `(10, words of content + number of tool calls, at least 1)`.
    pub usage: Option<(u64, u64)>,
    /// Messages: (cache_read_input_tokens, cache_creation_input_tokens)
    /// reported beside `usage` (default none).
    pub cache_tokens: Option<(u64, u64)>,
}

impl Script {
    /// A script answering with this assistant text.
    pub fn content(text: impl Into<String>) -> Script {
        Script {
            content: Some(text.into()),
            ..Script::default()
        }
    }

    /// A script answering with this HTTP error status.
    pub fn status(status: u16) -> Script {
        Script {
            status: Some(status),
            ..Script::default()
        }
    }

    pub(crate) fn chunk_size(&self) -> usize {
        if self.chunk_size == 0 {
            DEFAULT_CHUNK_SIZE
        } else {
            self.chunk_size
        }
    }
}

pub(crate) static DEFAULT_SCRIPT: Script = Script {
    content: None,
    tool_calls: Vec::new(),
    status: None,
    error_message: None,
    delay_ms: 0,
    hang: false,
    garbage: false,
    body: None,
    chunk_size: 0,
    chunk_interval_ms: 0,
    close_after_chunks: None,
    close_with_last_chunk: false,
    stream_events: None,
    usage: None,
    cache_tokens: None,
};

/// Options for [`Stub::start_with`].
#[derive(Clone, Debug)]
pub struct StubOptions {
    /// Record every request (default true). Benchmarks turn it off.
    pub record: bool,
    /// Address to listen on (default `127.0.0.1:0`).
    pub listen: Option<SocketAddr>,
}

impl Default for StubOptions {
    fn default() -> Self {
        StubOptions {
            record: true,
            listen: None,
        }
    }
}

/// Counters returned by `GET /_stub/stats` and [`Stub::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub cancelled_streams: u64,
    pub completed_streams: u64,
    /// Requests received since start (control routes excluded; counted even
    /// when recording is off; not reset by `clear`).
    pub requests: u64,
}

pub(crate) struct Shared {
    pub(crate) record: bool,
    pub(crate) scripts: RwLock<HashMap<String, Arc<Script>>>,
    pub(crate) recorded: Mutex<Vec<Recorded>>,
    pub(crate) requests: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) next_id: AtomicU64,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Shared {
    pub(crate) fn script_for(&self, key: Option<&str>) -> Option<Arc<Script>> {
        let key = key?;
        let scripts = self.scripts.read();
        if scripts.is_empty() {
            return None;
        }
        scripts.get(key).cloned()
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            cancelled_streams: self.cancelled.load(Ordering::SeqCst),
            completed_streams: self.completed.load(Ordering::SeqCst),
            requests: self.requests.load(Ordering::SeqCst),
        }
    }

    pub(crate) fn set_script(&self, model: &str, script: Option<Script>) {
        let mut scripts = self.scripts.write();
        match script {
            Some(s) => {
                scripts.insert(model.to_string(), Arc::new(s));
            }
            None => {
                scripts.remove(model);
            }
        }
    }

    pub(crate) fn requests_for_model(&self, model: &str) -> Vec<Recorded> {
        self.recorded
            .lock()
            .iter()
            .filter(|r| server::script_key(&r.path, &r.body) == Some(model))
            .cloned()
            .collect()
    }
}

/// A running stub server. Dropping it shuts the server down.
pub struct Stub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Stub {
    /// Start on `127.0.0.1:0` inside the current tokio runtime.
    ///
    /// Panics if the listener cannot be bound.
    pub async fn start() -> Stub {
        Stub::start_with(StubOptions::default()).await
    }

    /// Start with options. Panics if the listener cannot be bound.
    pub async fn start_with(opts: StubOptions) -> Stub {
        match Stub::try_start_with(opts).await {
            Ok(stub) => stub,
            Err(e) => panic!("stub upstream: cannot listen: {e}"),
        }
    }

    /// Start with options, reporting a bind failure.
    pub async fn try_start_with(opts: StubOptions) -> std::io::Result<Stub> {
        let listen = opts
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            record: opts.record,
            scripts: RwLock::new(HashMap::new()),
            recorded: Mutex::new(Vec::new()),
            requests: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            shutdown: rx.clone(),
        });
        let task = tokio::spawn(server::serve(listener, shared.clone(), rx));
        Ok(Stub {
            addr,
            shared,
            shutdown: tx,
            task: Some(task),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Server root, e.g. `http://127.0.0.1:PORT` (TEI / Cohere base URL).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1` (OpenAI provider base URL).
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Set the behaviour for requests whose body names this upstream `model`
    /// (use [`TEI_SCRIPT_KEY`] for TEI routes). Replaces any earlier script.
    pub fn script(&self, model: &str, script: Script) {
        self.shared.set_script(model, Some(script));
    }

    /// Forget the script for one model (back to default behaviour).
    pub fn unscript(&self, model: &str) {
        self.shared.set_script(model, None);
    }

    /// Forget all scripts.
    pub fn clear_scripts(&self) {
        self.shared.scripts.write().clear();
    }

    /// Everything received (control routes excluded), in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.recorded.lock().clone()
    }

    /// Recorded requests whose body names this model (or, for
    /// [`TEI_SCRIPT_KEY`], the TEI requests).
    pub fn requests_for_model(&self, model: &str) -> Vec<Recorded> {
        self.shared.requests_for_model(model)
    }

    /// Forget the recorded requests (counters are kept).
    pub fn clear(&self) {
        self.shared.recorded.lock().clear();
    }

    /// Streams whose client went away before the stream ended.
    pub fn cancelled_streams(&self) -> u64 {
        self.shared.cancelled.load(Ordering::SeqCst)
    }

    /// Streams that ran to their end (`[DONE]` and the terminating chunk).
    pub fn completed_streams(&self) -> u64 {
        self.shared.completed.load(Ordering::SeqCst)
    }

    /// All counters at once.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Stop accepting, end hanging requests and running streams, and wait
    /// (up to 5 s) for open connections to close.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl std::fmt::Debug for Stub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stub")
            .field("addr", &self.addr)
            .field("record", &self.shared.record)
            .finish_non_exhaustive()
    }
}

/// Sleep `ms`; false if the stub shut down meanwhile.
pub(crate) async fn sleep_or_shutdown(shared: &Shared, ms: u64) -> bool {
    let mut rx = shared.shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => true,
        _ = rx.wait_for(|stop| *stop) => false,
    }
}
