//! Calling an upstream model server: one POST with the provider's key and
//! deadline, and the mapping of everything that can go wrong to the
//! contract's errors.
//!
//! | what happened | status | code |
//! |---|---|---|
//! | connection refused, reset, DNS failure, closed before the head | 502 | `upstream_unavailable` |
//! | no head (or, where a whole body is read, no body) before `timeout_s` | 504 | `upstream_timeout` |
//! | the upstream answered 4xx/5xx | that status | `upstream_error`, the upstream's message |
//! | the upstream answered 2xx with something unusable | 502 | `upstream_error` |

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;

use super::direct::{DirectClient, DirectError, Exchange};

use crate::error::{Error, ErrorKind};
use crate::models::routing::Failure;
use crate::models::Provider;
use crate::runtime::request::{REQUEST_ID, X_REQUEST_ID};

/// A failed attempt: what the client would be told, and what kind of
/// failure it was (which decides whether another target is tried).
#[derive(Debug)]
pub struct AttemptError {
    pub failure: Failure,
    pub error: Error,
}

impl AttemptError {
    pub fn new(failure: Failure, error: Error) -> Self {
        AttemptError { failure, error }
    }
}

impl From<AttemptError> for Error {
    fn from(e: AttemptError) -> Error {
        e.error
    }
}

tokio::task_local! {
    /// The client's `anthropic-version`, if it sent one: an `anthropic`
    /// provider is sent it instead of the provider's own.
    pub static CLIENT_ANTHROPIC_VERSION: Option<header::HeaderValue>;
}

pub const ANTHROPIC_VERSION_HEADER: header::HeaderName =
    header::HeaderName::from_static("anthropic-version");
pub const X_API_KEY: header::HeaderName = header::HeaderName::from_static("x-api-key");

/// The longest upstream error message passed on to the client.
const MAX_MESSAGE_CHARS: usize = 2000;

/// When a call to this provider must have its answer.
pub fn deadline(provider: &Provider) -> Instant {
    Instant::now() + std::time::Duration::from_secs(provider.timeout_s)
}

pub fn timeout_error(provider: &Provider) -> Error {
    Error::new(
        ErrorKind::GatewayTimeout,
        "upstream_timeout",
        format!(
            "The model server did not answer within {} seconds; try again later.",
            provider.timeout_s
        ),
    )
}

pub fn unavailable_error() -> Error {
    Error::new(
        ErrorKind::BadGateway,
        "upstream_unavailable",
        "The model server cannot be reached; try again later.",
    )
}

/// A 2xx answer the gateway cannot use (not JSON, wrong shape, ...).
pub fn bad_answer(what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::BadGateway,
        "upstream_error",
        format!("The model server sent an answer the gateway cannot use: {what}."),
    )
}

/// The clients for upstream calls: the direct one for `http://` upstreams,
/// reqwest for `https://` (see [`super::direct`]).
#[derive(Clone)]
pub struct UpstreamClient {
    reqwest: reqwest::Client,
    direct: Arc<DirectClient>,
}

impl UpstreamClient {
    pub fn new() -> UpstreamClient {
        const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
        let reqwest = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .connect_timeout(CONNECT_TIMEOUT)
            // A model server has no business redirecting a POST.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        UpstreamClient {
            reqwest,
            direct: Arc::new(DirectClient::new(CONNECT_TIMEOUT)),
        }
    }
}

impl UpstreamClient {
    /// The pooled HTTP client (the MCP gateway's upstream requests use it too).
    pub fn reqwest(&self) -> &reqwest::Client {
        &self.reqwest
    }
}

impl Default for UpstreamClient {
    fn default() -> Self {
        UpstreamClient::new()
    }
}

/// An upstream's 2xx answer whose body is still to be read.
pub enum Answer {
    Reqwest(reqwest::Response),
    Direct(Box<Exchange>),
}

/// Why reading an answer's body failed.
#[derive(Debug)]
pub struct BodyError {
    pub timeout: bool,
    pub message: String,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<reqwest::Error> for BodyError {
    fn from(e: reqwest::Error) -> Self {
        BodyError {
            timeout: e.is_timeout(),
            message: e.to_string(),
        }
    }
}

impl From<hyper::Error> for BodyError {
    fn from(e: hyper::Error) -> Self {
        BodyError {
            timeout: e.is_timeout(),
            message: e.to_string(),
        }
    }
}

/// An answer's body as it arrives.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, BodyError>> + Send>>;

impl Answer {
    pub fn status(&self) -> u16 {
        match self {
            Answer::Reqwest(r) => r.status().as_u16(),
            Answer::Direct(x) => x.status,
        }
    }

    /// The whole body.
    pub async fn bytes(self) -> Result<Bytes, BodyError> {
        match self {
            Answer::Reqwest(r) => Ok(r.bytes().await?),
            Answer::Direct(x) => Ok((*x).collect().await?),
        }
    }

    /// The body as it arrives.
    pub fn into_stream(self) -> ByteStream {
        match self {
            Answer::Reqwest(r) => Box::pin(r.bytes_stream().map(|r| r.map_err(BodyError::from))),
            Answer::Direct(x) => Box::pin((*x).map(|r| r.map_err(BodyError::from))),
        }
    }
}

/// POSTs `body` (JSON bytes) to the provider's `path` with its key. Returns
/// the answer once its head is in and its status is 2xx.
pub async fn post(
    client: &UpstreamClient,
    provider: &Provider,
    path: &'static str,
    body: Bytes,
    stream: bool,
    deadline: Instant,
) -> Result<Answer, AttemptError> {
    post_with(
        client,
        provider,
        path,
        body,
        stream,
        deadline,
        &Extras::default(),
    )
    .await
}

/// What a pass-through call adds to [`post`]: the client's query string,
/// the `anthropic-beta` to send, and error answers kept byte for byte.
#[derive(Debug, Default)]
pub struct Extras {
    pub query: Option<String>,
    pub anthropic_beta: Option<HeaderValue>,
    /// An error answer (4xx/5xx) is kept as it came ([`Error::raw`]).
    pub raw_errors: bool,
}

pub const ANTHROPIC_BETA_HEADER: header::HeaderName =
    header::HeaderName::from_static("anthropic-beta");

/// [`post`] with [`Extras`].
pub async fn post_with(
    client: &UpstreamClient,
    provider: &Provider,
    path: &'static str,
    body: Bytes,
    stream: bool,
    deadline: Instant,
    extras: &Extras,
) -> Result<Answer, AttemptError> {
    // The base URL was checked when the provider was saved.
    let endpoint = match &extras.query {
        Some(q) => provider.endpoint_with_query(path, q),
        None => provider.endpoint(path),
    };
    let endpoint = endpoint.map_err(|e| {
        tracing::warn!(provider = %provider.name, error = %e, "provider base_url does not parse");
        AttemptError::new(Failure::Connect, unavailable_error())
    })?;
    // The request id and trace context are the task's, read where it runs.
    let request_id = REQUEST_ID.try_with(HeaderValue::clone).ok();
    let anthropic_version = (provider.kind == crate::models::ProviderType::Anthropic).then(|| {
        CLIENT_ANTHROPIC_VERSION
            .try_with(Clone::clone)
            .ok()
            .flatten()
            .unwrap_or_else(|| provider.anthropic_version.clone())
    });
    let headers = || {
        let mut headers = HeaderMap::with_capacity(8);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(if stream {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        if let Some(version) = &anthropic_version {
            // Anthropic's own credential header; the client's never goes.
            if let Some(key) = provider.x_api_key() {
                headers.insert(X_API_KEY, key.clone());
            }
            headers.insert(ANTHROPIC_VERSION_HEADER, version.clone());
        } else if let Some(auth) = provider.authorization() {
            headers.insert(header::AUTHORIZATION, auth.clone());
        }
        if let Some(id) = &request_id {
            headers.insert(X_REQUEST_ID, id.clone());
        }
        if let Some(beta) = &extras.anthropic_beta {
            headers.insert(ANTHROPIC_BETA_HEADER, beta.clone());
        }
        crate::telemetry::inject(&mut headers);
        headers
    };
    let timeout = || AttemptError::new(Failure::TimeoutBeforeHead, timeout_error(provider));
    let unreachable = |e: &dyn std::fmt::Display| {
        tracing::warn!(provider = %provider.name, error = %e, "upstream unreachable");
        AttemptError::new(Failure::Connect, unavailable_error())
    };
    // The head's headers an error relayed as it came keeps.
    let kept = |h: &HeaderMap| {
        let get = |n: header::HeaderName| h.get(n)?.to_str().ok().map(str::to_string);
        (get(header::CONTENT_TYPE), get(header::RETRY_AFTER))
    };
    let (status, answer, head) = if let Some(to) = &endpoint.direct {
        let sent = client.direct.post(to, headers, body);
        match tokio::time::timeout_at(deadline, sent).await {
            Err(_) | Ok(Err(DirectError::ConnectTimeout)) => return Err(timeout()),
            Ok(Err(e)) => return Err(unreachable(&e)),
            Ok(Ok(r)) => (r.status, Answer::Direct(Box::new(r.body)), kept(&r.headers)),
        }
    } else {
        let sent = client
            .reqwest
            .post(endpoint.url.clone())
            .headers(headers())
            .body(body)
            .send();
        match tokio::time::timeout_at(deadline, sent).await {
            Err(_) => return Err(timeout()),
            Ok(Err(e)) if e.is_timeout() => return Err(timeout()),
            Ok(Err(e)) => return Err(unreachable(&e)),
            Ok(Ok(r)) => {
                let head = kept(r.headers());
                (r.status(), Answer::Reqwest(r), head)
            }
        }
    };
    if status.is_success() {
        return Ok(answer);
    }
    // The error body, if it comes in time; the status alone is enough otherwise.
    let body = tokio::time::timeout_at(deadline, answer.bytes())
        .await
        .ok()
        .and_then(Result::ok);
    let mut err = status_error(status.as_u16(), body.as_deref());
    if extras.raw_errors && (400..=599).contains(&status.as_u16()) {
        let (content_type, retry_after) = head;
        err.raw = Some(Box::new(crate::error::RawAnswer {
            body: body.unwrap_or_default(),
            content_type,
            retry_after,
        }));
    }
    tracing::info!(provider = %provider.name, status = status.as_u16(), message = %err.message, "upstream error status");
    Err(AttemptError::new(Failure::Status(status.as_u16()), err))
}

/// POSTs and reads the whole answer, all before the deadline.
pub async fn post_for_bytes(
    client: &UpstreamClient,
    provider: &Provider,
    path: &'static str,
    body: Bytes,
) -> Result<Bytes, AttemptError> {
    let deadline = deadline(provider);
    let resp = post(client, provider, path, body, false, deadline).await?;
    read_body(provider, resp, deadline).await
}

/// Reads a whole answer body before the deadline.
pub async fn read_body(
    provider: &Provider,
    resp: Answer,
    deadline: Instant,
) -> Result<Bytes, AttemptError> {
    let timeout = || AttemptError::new(Failure::TimeoutAfterHead, timeout_error(provider));
    match tokio::time::timeout_at(deadline, resp.bytes()).await {
        Err(_) => Err(timeout()),
        Ok(Err(e)) if e.timeout => Err(timeout()),
        Ok(Err(e)) => {
            tracing::warn!(provider = %provider.name, error = %e, "upstream answer cut off");
            Err(AttemptError::new(
                Failure::CutOff,
                Error::new(
                    ErrorKind::BadGateway,
                    "upstream_error",
                    "The model server closed the connection before its answer was complete.",
                ),
            ))
        }
        Ok(Ok(b)) => Ok(b),
    }
}

/// The error for an upstream's non-2xx status: 4xx and 5xx pass through with
/// the upstream's message; anything else (a 3xx that was not followed, a
/// 1xx) is a bad answer.
pub fn status_error(status: u16, body: Option<&[u8]>) -> Error {
    if !(400..=599).contains(&status) {
        return bad_answer(format_args!("unexpected status {status}"));
    }
    let message = body.and_then(error_message).unwrap_or_else(|| {
        format!("The model server answered with status {status} and no message.")
    });
    Error::new(ErrorKind::Upstream(status), "upstream_error", message)
}

/// The message in an upstream's error body, whatever its dialect:
/// OpenAI `{"error":{"message"}}`, TEI `{"error":"..."}`, Cohere and vLLM
/// `{"message":"..."}`, FastAPI `{"detail":"..."}` or `{"detail":[{"msg"}]}`,
/// or short plain text. HTML pages and empty bodies give None.
pub fn error_message(body: &[u8]) -> Option<String> {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(v) => json_error_message(&v)?,
        Err(_) => {
            let t = std::str::from_utf8(body).ok()?.trim();
            if t.is_empty() || t.starts_with('<') {
                return None;
            }
            t.to_string()
        }
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(text.chars().take(MAX_MESSAGE_CHARS).collect())
}

fn json_error_message(v: &Value) -> Option<String> {
    let str_of = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    if let Some(e) = v.get("error") {
        if let Some(m) = str_of(e.get("message")).or_else(|| str_of(Some(e))) {
            return Some(m);
        }
    }
    if let Some(m) = str_of(v.get("message")) {
        return Some(m);
    }
    match v.get("detail") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(items)) => {
            let msgs: Vec<&str> = items
                .iter()
                .filter_map(|i| i.get("msg").and_then(Value::as_str))
                .collect();
            (!msgs.is_empty()).then(|| msgs.join("; "))
        }
        Some(d) => str_of(d.get("message")),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_read_in_every_dialect() {
        let m = |s: &str| error_message(s.as_bytes());
        assert_eq!(
            m(r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#).as_deref(),
            Some("slow down")
        );
        assert_eq!(
            m(r#"{"error":"Input validation error","error_type":"validation"}"#).as_deref(),
            Some("Input validation error")
        );
        assert_eq!(
            m(r#"{"id":"x","message":"invalid request: texts"}"#).as_deref(),
            Some("invalid request: texts")
        );
        assert_eq!(
            m(r#"{"object":"error","message":"vllm says no","code":400}"#).as_deref(),
            Some("vllm says no")
        );
        assert_eq!(m(r#"{"detail":"Not Found"}"#).as_deref(), Some("Not Found"));
        assert_eq!(
            m(r#"{"detail":[{"msg":"field required"},{"msg":"bad"}]}"#).as_deref(),
            Some("field required; bad")
        );
        assert_eq!(
            m("upstream overloaded\n").as_deref(),
            Some("upstream overloaded")
        );
        assert_eq!(m("<html><body>502</body></html>"), None);
        assert_eq!(m(""), None);
        assert_eq!(m(r#"{"unrelated":1}"#), None);
        assert_eq!(
            m(&"x".repeat(5000)).map(|s| s.len()),
            Some(MAX_MESSAGE_CHARS)
        );
    }

    #[test]
    fn error_statuses_pass_through_and_others_are_bad_answers() {
        let e = status_error(429, Some(br#"{"error":{"message":"too many"}}"#));
        assert_eq!(
            (e.status(), e.code.as_ref(), e.message.as_str()),
            (429, "upstream_error", "too many")
        );
        let e = status_error(503, None);
        assert_eq!(e.status(), 503);
        assert!(e.message.contains("503"), "{}", e.message);
        let e = status_error(302, None);
        assert_eq!((e.status(), e.code.as_ref()), (502, "upstream_error"));
    }
}
