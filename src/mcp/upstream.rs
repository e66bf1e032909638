//! The gateway as an MCP client of the upstream servers (Streamable HTTP).
//!
//! Taken from rmcp (the official Rust SDK): every message we send is built
//! from its model types (`JsonRpcRequest`, `InitializeRequestParams`,
//! `PaginatedRequestParams`, `CallToolRequestParams`, the initialized and
//! cancelled notifications), and answers are read into its types
//! (`InitializeResult`, `ErrorData`, `ToolAnnotations`, `ProtocolVersion`).
//! Written here: the HTTP exchange over our own pooled reqwest client, with
//! the server's headers, the upstream's `Mcp-Session-Id` and
//! `MCP-Protocol-Version`; reading a JSON or an SSE answer (our
//! `wire::sse` parser) up to the response to our request; the timeout, the
//! size cap and the failure causes. rmcp's client transport holds the
//! upstream session inside its own worker; the gateway must carry each
//! upstream's session id inside its sealed client session so that any
//! server of the cluster can continue it, so the session is a plain value
//! ([`UpstreamSession`]) passed into every call instead.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientCapabilities, ErrorData, Implementation, InitializeRequest, InitializeRequestParams,
    InitializeResult, InitializedNotification, JsonRpcNotification, JsonRpcRequest,
    ListToolsRequest, NumberOrString, PaginatedRequestParams, ProtocolVersion,
    RequestOptionalParam,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::mcp::tools::UpstreamTool;
use crate::wire::sse::SseParser;

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// The protocol version the gateway asks upstreams for (the newest with an
/// `initialize` handshake; the upstream answers its own).
pub const ASKED_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Pages of `tools/list` followed at most (a cursor loop ends here).
const MAX_PAGES: usize = 100;

/// One upstream server as the client needs it: header values already
/// opened (they never leave this struct but for the upstream request).
#[derive(Clone)]
pub struct UpstreamServer {
    pub name: String,
    pub url: String,
    pub timeout: Duration,
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for UpstreamServer {
    // Header values are secrets: only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamServer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One upstream session: its `Mcp-Session-Id` (none when the upstream is
/// stateless) and the protocol version it negotiated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamSession {
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "v")]
    pub version: String,
}

/// Why an upstream exchange failed: the metric's `cause`, plus the session
/// the upstream no longer knows (answered 404; initialize again and retry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Unavailable,
    Timeout,
    Protocol,
    TooLarge,
    SessionGone,
}

impl Failure {
    /// The `cause` label of `gatehouse_mcp_upstream_failures_total`.
    pub fn cause(self) -> &'static str {
        match self {
            Failure::Unavailable | Failure::SessionGone => "unavailable",
            Failure::Timeout => "timeout",
            Failure::Protocol => "protocol",
            Failure::TooLarge => "too_large",
        }
    }
}

/// A failed exchange; `detail` is for the `warn` line (never header values,
/// arguments or results).
#[derive(Clone, Debug)]
pub struct UpstreamError {
    pub failure: Failure,
    pub detail: String,
}

impl UpstreamError {
    fn new(failure: Failure, detail: impl Into<String>) -> Self {
        UpstreamError {
            failure,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.failure.cause())
    }
}

/// A `tools/call` answer: the `result` as received (passed on unparsed), or
/// the upstream's own JSON-RPC error (passed to the client unchanged).
#[derive(Debug)]
pub enum CallAnswer {
    Result(Box<serde_json::value::RawValue>),
    Error(ErrorData),
}

/// The MCP client: one per process, over a pooled HTTP client.
pub struct McpClient {
    http: reqwest::Client,
    next_id: AtomicI64,
    /// `GATEHOUSE_MCP_MAX_RESULT_BYTES`.
    pub max_result_bytes: usize,
    version: String,
}

impl McpClient {
    pub fn new(http: reqwest::Client, max_result_bytes: usize) -> McpClient {
        McpClient {
            http,
            next_id: AtomicI64::new(1),
            max_result_bytes,
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// A fresh upstream request id (ids are the gateway's, not the client's).
    pub fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The answer bytes read at most: the result cap plus room for the
    /// envelope and SSE framing; past that the answer is too large anyway.
    fn read_cap(&self) -> usize {
        self.max_result_bytes
            .saturating_mul(2)
            .saturating_add(1024 * 1024)
    }

    /// `initialize`, then `notifications/initialized`: a new upstream session.
    pub async fn initialize(&self, s: &UpstreamServer) -> Result<UpstreamSession, UpstreamError> {
        let params = InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("gatehouse", self.version.clone()),
        )
        .with_protocol_version(ASKED_VERSION);
        let id = self.next_id();
        let msg = JsonRpcRequest::new(NumberOrString::Number(id), InitializeRequest::new(params));
        let body = to_body(&msg)?;
        let (answer, session_id) = self
            .exchange(s, None, ASKED_VERSION.as_str(), body, id, self.read_cap())
            .await?;
        let result = match answer {
            RawAnswer::Result(r) => r,
            RawAnswer::Error(e) => {
                return Err(UpstreamError::new(
                    Failure::Protocol,
                    format!("initialize refused: {} {}", e.code.0, e.message),
                ))
            }
        };
        let init: InitializeResult = serde_json::from_str(result.get()).map_err(|e| {
            UpstreamError::new(Failure::Protocol, format!("initialize result: {e}"))
        })?;
        let session = UpstreamSession {
            id: session_id,
            version: init.protocol_version.to_string(),
        };
        let note = JsonRpcNotification {
            jsonrpc: Default::default(),
            notification: InitializedNotification {
                method: Default::default(),
                extensions: Default::default(),
            },
        };
        self.notify(s, &session, to_body(&note)?).await?;
        Ok(session)
    }

    /// Every tool of the upstream, following `nextCursor` (at most
    /// [`MAX_PAGES`] pages).
    pub async fn list_tools(
        &self,
        s: &UpstreamServer,
        session: &UpstreamSession,
    ) -> Result<Vec<UpstreamTool>, UpstreamError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Page {
            #[serde(default)]
            tools: Vec<Value>,
            #[serde(default)]
            next_cursor: Option<String>,
        }
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let request: ListToolsRequest = RequestOptionalParam {
                method: Default::default(),
                params,
                extensions: Default::default(),
            };
            let id = self.next_id();
            let body = to_body(&JsonRpcRequest::new(NumberOrString::Number(id), request))?;
            let (answer, _) = self
                .exchange(
                    s,
                    Some(session),
                    &session.version,
                    body,
                    id,
                    self.read_cap(),
                )
                .await?;
            let result = match answer {
                RawAnswer::Result(r) => r,
                RawAnswer::Error(e) => {
                    return Err(UpstreamError::new(
                        Failure::Protocol,
                        format!("tools/list refused: {} {}", e.code.0, e.message),
                    ))
                }
            };
            let page: Page = serde_json::from_str(result.get()).map_err(|e| {
                UpstreamError::new(Failure::Protocol, format!("tools/list result: {e}"))
            })?;
            out.extend(page.tools.into_iter().filter_map(UpstreamTool::from_value));
            match page.next_cursor {
                Some(c) if !c.is_empty() => cursor = Some(c),
                _ => return Ok(out),
            }
        }
        Ok(out)
    }

    /// `tools/call` of the upstream tool `name` under request id `id` (from
    /// [`McpClient::next_id`], so the caller can cancel it). On a timeout,
    /// `notifications/cancelled` goes upstream before the error returns.
    pub async fn call_tool(
        &self,
        s: &UpstreamServer,
        session: &UpstreamSession,
        id: i64,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<CallAnswer, UpstreamError> {
        let mut params = CallToolRequestParams::new(name.to_string());
        params.arguments = arguments;
        let request = CallToolRequest::new(params);
        let body = to_body(&JsonRpcRequest::new(NumberOrString::Number(id), request))?;
        let answer = self
            .exchange(
                s,
                Some(session),
                &session.version,
                body,
                id,
                self.read_cap(),
            )
            .await;
        match answer {
            Ok((RawAnswer::Result(r), _)) => {
                if !result_fits(&r, self.max_result_bytes) {
                    return Err(UpstreamError::new(Failure::TooLarge, "result too large"));
                }
                Ok(CallAnswer::Result(r))
            }
            Ok((RawAnswer::Error(e), _)) => Ok(CallAnswer::Error(e)),
            Err(e) => {
                if e.failure == Failure::Timeout {
                    self.cancel(s, session, id, "timed out at the gateway")
                        .await;
                }
                Err(e)
            }
        }
    }

    /// `notifications/cancelled` for upstream request `id`, best effort.
    pub async fn cancel(&self, s: &UpstreamServer, session: &UpstreamSession, id: i64, why: &str) {
        let note: JsonRpcNotification<CancelledNotification> = JsonRpcNotification {
            jsonrpc: Default::default(),
            notification: CancelledNotification::new(CancelledNotificationParam::new(
                Some(NumberOrString::Number(id)),
                Some(why.to_string()),
            )),
        };
        if let Ok(body) = to_body(&note) {
            if let Err(e) = self.notify(s, session, body).await {
                tracing::debug!(server = %s.name, error = %e, "cancelling upstream request failed");
            }
        }
    }

    /// Ends an upstream session (`DELETE` with its id), best effort.
    pub async fn end_session(&self, s: &UpstreamServer, session: &UpstreamSession) {
        let Some(id) = &session.id else { return };
        let mut req = self
            .http
            .delete(&s.url)
            .timeout(s.timeout)
            .header(SESSION_HEADER, id)
            .header(VERSION_HEADER, &session.version);
        for (k, v) in &s.headers {
            req = req.header(k, v);
        }
        if let Err(e) = req.send().await {
            tracing::debug!(server = %s.name, error = %e, "ending an upstream session failed");
        }
    }

    /// Sends a notification (or a response): the upstream answers 202.
    async fn notify(
        &self,
        s: &UpstreamServer,
        session: &UpstreamSession,
        body: Vec<u8>,
    ) -> Result<(), UpstreamError> {
        let resp = tokio::time::timeout(
            s.timeout,
            self.post(s, Some(session), &session.version, body).send(),
        )
        .await
        .map_err(|_| UpstreamError::new(Failure::Timeout, "notification timed out"))?
        .map_err(send_error)?;
        match resp.status().as_u16() {
            200..=299 => Ok(()),
            404 if session.id.is_some() => Err(UpstreamError::new(
                Failure::SessionGone,
                "upstream session gone",
            )),
            st => Err(UpstreamError::new(
                Failure::Unavailable,
                format!("notification answered {st}"),
            )),
        }
    }

    fn post(
        &self,
        s: &UpstreamServer,
        session: Option<&UpstreamSession>,
        version: &str,
        body: Vec<u8>,
    ) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&s.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            );
        // The server's own headers first: ours below win over a same-named one.
        for (k, v) in &s.headers {
            req = req.header(k, v);
        }
        if let Some(id) = session.and_then(|s| s.id.as_deref()) {
            req = req.header(SESSION_HEADER, id);
        }
        req.header(VERSION_HEADER, version).body(body)
    }

    /// One request and its answer, within the server's timeout: the answer
    /// to `id` (from a JSON body or an SSE stream), and the upstream's
    /// `Mcp-Session-Id` header.
    async fn exchange(
        &self,
        s: &UpstreamServer,
        session: Option<&UpstreamSession>,
        version: &str,
        body: Vec<u8>,
        id: i64,
        cap: usize,
    ) -> Result<(RawAnswer, Option<String>), UpstreamError> {
        let work = async {
            let resp = self
                .post(s, session, version, body)
                .send()
                .await
                .map_err(send_error)?;
            let status = resp.status().as_u16();
            if status == 404 && session.and_then(|x| x.id.as_ref()).is_some() {
                return Err(UpstreamError::new(
                    Failure::SessionGone,
                    "upstream session gone",
                ));
            }
            if !(200..=299).contains(&status) {
                let failure = if status >= 500 || status == 429 {
                    Failure::Unavailable
                } else {
                    Failure::Protocol
                };
                return Err(UpstreamError::new(
                    failure,
                    format!("answered HTTP {status}"),
                ));
            }
            let session_id = resp
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let sse = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"));
            let answer = if sse {
                self.read_sse(s, session, version, resp, id, cap).await?
            } else {
                let bytes = read_capped(resp, cap).await?;
                answer_for(&bytes, id)?.ok_or_else(|| {
                    UpstreamError::new(Failure::Protocol, "the answer is not our response")
                })?
            };
            Ok((answer, session_id))
        };
        tokio::time::timeout(s.timeout, work)
            .await
            .map_err(|_| UpstreamError::new(Failure::Timeout, "upstream timed out"))?
    }

    /// Reads an SSE answer up to the response to `id`: notifications are
    /// dropped (phase 1), requests from the upstream (sampling,
    /// elicitation) are answered `-32601` upstream.
    async fn read_sse(
        &self,
        s: &UpstreamServer,
        session: Option<&UpstreamSession>,
        version: &str,
        mut resp: reqwest::Response,
        id: i64,
        cap: usize,
    ) -> Result<RawAnswer, UpstreamError> {
        let mut parser = SseParser::new();
        let mut read = 0usize;
        loop {
            while let Some(ev) = parser.next_event() {
                if let Some(a) = self.sse_event(s, session, version, &ev.data, id) {
                    return a;
                }
            }
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    read += chunk.len();
                    if read > cap {
                        return Err(UpstreamError::new(Failure::TooLarge, "answer too large"));
                    }
                    parser.push(&chunk);
                }
                Ok(None) => {
                    if let Some(ev) = parser.finish() {
                        if let Some(a) = self.sse_event(s, session, version, &ev.data, id) {
                            return a;
                        }
                    }
                    return Err(UpstreamError::new(
                        Failure::Protocol,
                        "the event stream ended without our response",
                    ));
                }
                Err(e) => return Err(send_error(e)),
            }
        }
    }

    /// One SSE event's data: our answer, or `None` to read on.
    fn sse_event(
        &self,
        s: &UpstreamServer,
        session: Option<&UpstreamSession>,
        version: &str,
        data: &str,
        id: i64,
    ) -> Option<Result<RawAnswer, UpstreamError>> {
        if data.trim().is_empty() {
            return None;
        }
        match classify_message(data.as_bytes(), id) {
            Ok(Message::Ours(a)) => Some(Ok(a)),
            Ok(Message::ServerRequest(rid)) => {
                // Sampling and elicitation are phase 2: refuse them upstream,
                // off this request's path.
                let refusal = serde_json::json!({"jsonrpc": "2.0", "id": rid,
                    "error": {"code": -32601, "message": "Method not found"}});
                let req = self.post(s, session, version, refusal.to_string().into_bytes());
                tokio::spawn(async move {
                    let _ = req.send().await;
                });
                None
            }
            Ok(Message::Other) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// An answer still as text: `result` unparsed (it is passed on as received).
#[derive(Debug)]
enum RawAnswer {
    Result(Box<serde_json::value::RawValue>),
    Error(ErrorData),
}

enum Message {
    Ours(RawAnswer),
    ServerRequest(Value),
    Other,
}

/// What one JSON-RPC message from the upstream is to a request `id`.
fn classify_message(bytes: &[u8], id: i64) -> Result<Message, UpstreamError> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(default)]
        id: Option<Value>,
        #[serde(default, borrow)]
        method: Option<&'a serde_json::value::RawValue>,
        #[serde(default)]
        result: Option<Box<serde_json::value::RawValue>>,
        #[serde(default)]
        error: Option<ErrorData>,
    }
    let env: Envelope = serde_json::from_slice(bytes).map_err(|e| {
        UpstreamError::new(Failure::Protocol, format!("not a JSON-RPC message: {e}"))
    })?;
    if env.method.is_some() {
        return Ok(match env.id {
            Some(rid) if !rid.is_null() => Message::ServerRequest(rid),
            _ => Message::Other,
        });
    }
    let ours = matches!(&env.id, Some(Value::Number(n)) if n.as_i64() == Some(id))
        || matches!(&env.id, Some(Value::String(s)) if s == &id.to_string());
    if !ours {
        return Ok(Message::Other);
    }
    match (env.result, env.error) {
        (Some(r), _) => Ok(Message::Ours(RawAnswer::Result(r))),
        (None, Some(e)) => Ok(Message::Ours(RawAnswer::Error(e))),
        (None, None) => Err(UpstreamError::new(
            Failure::Protocol,
            "a response with neither result nor error",
        )),
    }
}

/// The answer to `id` in a JSON body: `None` when the body is another message.
fn answer_for(bytes: &[u8], id: i64) -> Result<Option<RawAnswer>, UpstreamError> {
    match classify_message(bytes, id)? {
        Message::Ours(a) => Ok(Some(a)),
        _ => Ok(None),
    }
}

/// Length of `r` as compact JSON (the upstream may have sent white space).
fn compact_len(r: &serde_json::value::RawValue) -> Result<usize, UpstreamError> {
    let v: Value = serde_json::from_str(r.get())
        .map_err(|e| UpstreamError::new(Failure::Protocol, format!("result: {e}")))?;
    serde_json::to_vec(&v)
        .map(|b| b.len())
        .map_err(|e| UpstreamError::new(Failure::Protocol, format!("result: {e}")))
}

/// Whether a result fits the cap (compact JSON length, at the cap passes).
pub fn result_fits(result: &serde_json::value::RawValue, max: usize) -> bool {
    result.get().len() <= max || compact_len(result).is_ok_and(|n| n <= max)
}

async fn read_capped(mut resp: reqwest::Response, cap: usize) -> Result<Vec<u8>, UpstreamError> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(send_error)? {
        if out.len() + chunk.len() > cap {
            return Err(UpstreamError::new(Failure::TooLarge, "answer too large"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn send_error(e: reqwest::Error) -> UpstreamError {
    if e.is_timeout() {
        UpstreamError::new(Failure::Timeout, "upstream timed out")
    } else {
        // Without the URL: it may carry credentials in its query.
        UpstreamError::new(Failure::Unavailable, format!("{}", e.without_url()))
    }
}

fn to_body<T: Serialize>(msg: &T) -> Result<Vec<u8>, UpstreamError> {
    serde_json::to_vec(msg)
        .map_err(|e| UpstreamError::new(Failure::Protocol, format!("encoding a request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_text(a: RawAnswer) -> String {
        match a {
            RawAnswer::Result(r) => r.get().to_string(),
            RawAnswer::Error(e) => format!("error {}", e.code.0),
        }
    }

    #[test]
    fn a_json_answer_to_our_id_is_read_and_others_are_not_ours() {
        let a = answer_for(br#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#, 7)
            .expect("readable")
            .expect("ours");
        assert_eq!(result_text(a), r#"{"tools":[]}"#);
        assert!(answer_for(br#"{"jsonrpc":"2.0","id":8,"result":{}}"#, 7)
            .expect("readable")
            .is_none());
        let e = answer_for(
            br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad","data":{"x":1}}}"#,
            7,
        )
        .expect("readable")
        .expect("ours");
        match e {
            RawAnswer::Error(e) => {
                assert_eq!(e.code.0, -32602);
                assert_eq!(e.message, "bad");
                assert_eq!(e.data, Some(serde_json::json!({"x": 1})));
            }
            RawAnswer::Result(_) => panic!("an error was read as a result"),
        }
    }

    #[test]
    fn requests_and_notifications_from_the_upstream_are_told_apart() {
        assert!(matches!(
            classify_message(
                br#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#,
                1
            ),
            Ok(Message::ServerRequest(_))
        ));
        assert!(matches!(
            classify_message(
                br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
                1
            ),
            Ok(Message::Other)
        ));
        assert!(matches!(
            classify_message(b"not json", 1),
            Err(UpstreamError {
                failure: Failure::Protocol,
                ..
            })
        ));
    }

    #[test]
    fn the_result_cap_passes_at_the_limit_and_refuses_one_past() {
        let r = serde_json::value::RawValue::from_string(r#"{ "a" : "xy" }"#.into()).expect("raw");
        // Compact: {"a":"xy"} = 10 bytes.
        assert!(result_fits(&r, 10));
        assert!(!result_fits(&r, 9));
    }

    #[test]
    fn messages_we_send_are_rmcp_shapes() {
        let params = InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("gatehouse", "0.7.0"),
        )
        .with_protocol_version(ASKED_VERSION);
        let msg = JsonRpcRequest::new(NumberOrString::Number(3), InitializeRequest::new(params));
        let v: Value = serde_json::from_slice(&to_body(&msg).expect("body")).expect("json");
        assert_eq!(v["method"], "initialize");
        assert_eq!(v["id"], 3);
        assert_eq!(v["params"]["protocolVersion"], "2025-11-25");
        assert_eq!(v["params"]["clientInfo"]["name"], "gatehouse");
        let mut p = CallToolRequestParams::new("add");
        p.arguments = Some(
            serde_json::json!({"a": 1})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let call = JsonRpcRequest::new(NumberOrString::Number(4), CallToolRequest::new(p));
        let v: Value = serde_json::from_slice(&to_body(&call).expect("body")).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"jsonrpc":"2.0","id":4,"method":"tools/call",
                               "params":{"name":"add","arguments":{"a":1}}})
        );
    }
}
