//! The gateway's decisions on `/mcp` and `/mcp/{server}` (contract: "MCP
//! gateway"): which upstreams a session opens, what `tools/list` shows and
//! how a `tools/call` is decided, called, audited and counted. The HTTP
//! layer (`http/routes/mcp.rs`) parses and authenticates, then calls
//! [`Gateway::initialize`], [`Gateway::list`] or [`Gateway::call`].
//!
//! # The seam for agents (`src/mcp/agent.rs`)
//!
//! API keys have no tool mode: they see and call every granted tool. For an
//! agent access token, the agent's rules (tool mode, holding under the tool
//! contract, approvals) apply through one trait, [`AgentRules`], a value
//! the route makes per request and hands to [`Gateway::list`] and
//! [`Gateway::call`] (`None` for API keys):
//! - [`AgentRules::list`] gets the granted tools of a `tools/list`
//!   ([`Candidate`]s, in list order) and says for each whether it is shown,
//!   hidden (tool mode) or held (named in `X-Service-Held-Tools`);
//! - [`AgentRules::admit`] gets one granted tool of a `tools/call` with its
//!   canonical arguments and answers [`Admit`]: go upstream (with the
//!   approval it used, if any: the decision becomes `approved`), answer a
//!   result without going upstream (an approval pending or denied:
//!   `held`/`denied`), or treat the name as unknown (hidden by the mode,
//!   held: `denied` with that reason). Marking an approval used happens
//!   inside `admit`, which runs only when the call goes on.
//!
//! [`GrantsOnly`] shows and admits every granted tool;
//! `crate::mcp::agent::AgentSide` (the agent module's per-request side)
//! implements the trait below for the real rules, and the route hands it in
//! for agent access tokens.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use crate::agents::agent::ToolMode;
use crate::agents::Agent;
use crate::auth::signins::SignInInfo;
use crate::auth::KeyInfo;
use crate::error::Result;
use crate::limits::Subject;
use crate::mcp::agent::{CallStep, DenyReason, ResolvedTool, Verdict};
use crate::mcp::audit::{Decision, McpCallRecord, Outcome, Reason};
use crate::mcp::grants::Grants;
use crate::mcp::servers::McpServer;
use crate::mcp::session::{EndedSessions, LaterUpstreams, Sealer, Session};
use crate::mcp::tools::{self, ToolClass, UpstreamTool};
use crate::mcp::upstream::{
    CallAnswer, Failure, McpClient, UpstreamError, UpstreamServer, UpstreamSession,
};
use crate::mcp::ServerSnapshot;
use crate::users::UserInfo;

/// How long an upstream's tool list serves `tools/call` lookups.
const TOOLS_FRESH: Duration = Duration::from_secs(60);

/// Who calls.
pub enum Caller {
    ApiKey {
        key: Arc<KeyInfo>,
        user: Arc<UserInfo>,
    },
    Agent(AgentContext),
}

/// An agent app on one device, with the tool mode of this request.
pub struct AgentContext {
    pub user: Arc<UserInfo>,
    pub sign_in: Arc<SignInInfo>,
    pub agent: Arc<Agent>,
    /// `X-Service-Tool-Mode`, else the agent's `default_tool_mode`.
    pub mode: ToolMode,
}

impl Caller {
    pub fn user(&self) -> &UserInfo {
        match self {
            Caller::ApiKey { user, .. } => user,
            Caller::Agent(a) => &a.user,
        }
    }

    /// The user's grant and the key's or the agent's.
    pub fn grants(&self) -> Grants<'_> {
        match self {
            Caller::ApiKey { key, user } => Grants {
                user: user.mcp.as_ref(),
                credential: key.mcp.as_ref(),
            },
            Caller::Agent(a) => Grants {
                user: a.user.mcp.as_ref(),
                credential: a.agent.mcp.as_ref(),
            },
        }
    }

    /// Who a session belongs to.
    pub fn session_caller(&self) -> String {
        match self {
            Caller::ApiKey { key, .. } => crate::mcp::session::caller_of_key(&key.id),
            Caller::Agent(a) => crate::mcp::session::caller_of_sign_in(&a.sign_in.device_id),
        }
    }

    /// The `mcp_calls_per_minute` counters a call must fit.
    pub fn call_subjects(&self) -> Vec<Subject> {
        let all = match self {
            Caller::ApiKey { key, user } => vec![
                Subject::api_key(&key.id, key.limits),
                Subject::user(&user.id, user.limits),
            ],
            Caller::Agent(a) => vec![
                Subject::user(&a.user.id, a.user.limits),
                Subject::agent(a.agent.address.as_str(), a.agent.limits),
            ],
        };
        all.iter()
            .filter(|s| s.limits.mcp_calls_per_minute.is_some())
            .map(Subject::mcp_calls)
            .collect()
    }

    fn mode(&self) -> Option<&'static str> {
        match self {
            Caller::ApiKey { .. } => None,
            Caller::Agent(a) => Some(a.mode.as_str()),
        }
    }

    /// The audit record's caller fields.
    fn stamp(&self, r: &mut McpCallRecord) {
        let user = self.user();
        r.user_id = Some(user.id.clone());
        r.user_email = Some(user.email.to_string());
        r.mode = self.mode().map(str::to_string);
        match self {
            Caller::ApiKey { key, .. } => r.api_key_id = Some(key.id.clone()),
            Caller::Agent(a) => {
                r.agent = Some(a.agent.address.as_str().to_string());
                r.device_id = Some(a.sign_in.device_id.clone());
            }
        }
    }
}

/// A granted tool as the agent rules see it.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub server: String,
    /// The name the client sees on this route.
    pub exposed: String,
    /// The upstream's name.
    pub tool: String,
    pub class: ToolClass,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
}

/// What the agent rules make of one listed tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    Shown,
    /// Left out (the tool mode).
    Hidden,
    /// Left out and named in `X-Service-Held-Tools`.
    Held,
}

/// What the agent rules make of one call of a granted tool.
#[derive(Clone, Debug)]
pub enum Admit {
    /// The call goes upstream; `approval_id` names the approval it used.
    Upstream { approval_id: Option<String> },
    /// Answered with `result` (an MCP `CallToolResult`) without going upstream.
    Answer {
        result: Value,
        decision: Decision,
        reason: Option<Reason>,
        approval_id: Option<String>,
    },
    /// Answered as an unknown tool (`denied` with `reason`).
    Unknown { reason: Reason },
}

/// The agent's rules over MCP tools for one request (see the module
/// documentation). One value per request: it may load what it needs once.
pub trait AgentRules: Send {
    /// One [`Listed`] per candidate, in the same order.
    fn list<'a>(&'a mut self, tools: &'a [Candidate]) -> BoxFuture<'a, Result<Vec<Listed>>>;
    /// The fate of one call of a granted tool; `canonical_arguments` is the
    /// RFC 8785 form of its `arguments` (`{}` when absent).
    fn admit<'a>(
        &'a mut self,
        tool: &'a Candidate,
        canonical_arguments: &'a str,
    ) -> BoxFuture<'a, Result<Admit>>;
}

/// Grants only: every granted tool is shown and called.
pub struct GrantsOnly;

impl AgentRules for GrantsOnly {
    fn list<'a>(&'a mut self, tools: &'a [Candidate]) -> BoxFuture<'a, Result<Vec<Listed>>> {
        Box::pin(async move { Ok(vec![Listed::Shown; tools.len()]) })
    }
    fn admit<'a>(&'a mut self, _: &'a Candidate, _: &'a str) -> BoxFuture<'a, Result<Admit>> {
        Box::pin(async { Ok(Admit::Upstream { approval_id: None }) })
    }
}

/// The agent module's rules for one request (tool mode, holding, approvals)
/// behind the gateway's seam.
impl AgentRules for crate::mcp::agent::AgentSide<'_> {
    fn list<'a>(&'a mut self, tools: &'a [Candidate]) -> BoxFuture<'a, Result<Vec<Listed>>> {
        Box::pin(async move {
            let full: Vec<String> = tools
                .iter()
                .map(|c| tools::exposed_name(Some(&c.server), &c.tool))
                .collect();
            let resolved: Vec<ResolvedTool> = tools
                .iter()
                .zip(&full)
                .map(|(c, f)| resolved(c, f))
                .collect();
            let listing = crate::mcp::agent::AgentSide::list(self, &resolved).await?;
            let mut out = vec![Listed::Hidden; tools.len()];
            for (indexes, verdict) in [(listing.keep, Listed::Shown), (listing.held, Listed::Held)]
            {
                for i in indexes {
                    if let Some(o) = out.get_mut(i) {
                        *o = verdict;
                    }
                }
            }
            Ok(out)
        })
    }

    fn admit<'a>(
        &'a mut self,
        tool: &'a Candidate,
        canonical_arguments: &'a str,
    ) -> BoxFuture<'a, Result<Admit>> {
        Box::pin(async move {
            let full = tools::exposed_name(Some(&tool.server), &tool.tool);
            let step = self
                .call(&resolved(tool, &full), canonical_arguments)
                .await?;
            Ok(match step {
                CallStep::Upstream(v) => Admit::Upstream {
                    approval_id: v.approval_id().map(str::to_string),
                },
                CallStep::Answer(result, v) => Admit::Answer {
                    result,
                    decision: match &v {
                        Verdict::Allowed => Decision::Allowed,
                        Verdict::Approved(_) => Decision::Approved,
                        Verdict::Held(_) => Decision::Held,
                        Verdict::Denied(..) => Decision::Denied,
                    },
                    reason: deny_reason(&v),
                    approval_id: v.approval_id().map(str::to_string),
                },
                CallStep::Unknown(v) => Admit::Unknown {
                    reason: deny_reason(&v).unwrap_or(Reason::ToolMode),
                },
            })
        })
    }
}

fn resolved<'a>(c: &'a Candidate, full_name: &'a str) -> ResolvedTool<'a> {
    ResolvedTool {
        server: &c.server,
        full_name,
        exposed: &c.exposed,
        class: c.class,
        description: c.description.as_deref(),
        input_schema: c.input_schema.as_ref(),
    }
}

fn deny_reason(v: &Verdict) -> Option<Reason> {
    match v {
        Verdict::Denied(DenyReason::ToolMode, _) => Some(Reason::ToolMode),
        Verdict::Denied(DenyReason::ToolHeld, _) => Some(Reason::ToolHeld),
        Verdict::Denied(DenyReason::ApprovalDenied, _) => Some(Reason::ApprovalDenied),
        _ => None,
    }
}

/// The client's view of an upstream server.
pub fn upstream_of(s: &McpServer) -> UpstreamServer {
    UpstreamServer {
        name: s.name.clone(),
        url: s.url.clone(),
        timeout: Duration::from_secs(s.timeout_s),
        headers: s
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// A JSON-RPC error answered inside HTTP 200.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
    /// `Retry-After` seconds (rate limited).
    pub retry_after: Option<u64>,
}

impl RpcError {
    pub fn unknown_tool(name: &str) -> RpcError {
        RpcError {
            code: -32602,
            message: format!("Unknown tool: {name}"),
            data: None,
            retry_after: None,
        }
    }
    pub fn internal() -> RpcError {
        RpcError {
            code: -32603,
            message: "internal error".into(),
            data: Some(json!({"code": "internal_error"})),
            retry_after: None,
        }
    }
    pub fn invalid_params(message: &str) -> RpcError {
        RpcError {
            code: -32602,
            message: message.to_string(),
            data: None,
            retry_after: None,
        }
    }
    fn gateway(code: &str, message: String) -> RpcError {
        RpcError {
            code: -32603,
            message,
            data: Some(json!({"code": code})),
            retry_after: None,
        }
    }
    fn from_upstream(f: Failure, server: &str) -> RpcError {
        match f {
            Failure::Timeout => Self::gateway(
                "mcp_upstream_timeout",
                format!("upstream timed out: {server}"),
            ),
            Failure::TooLarge => Self::gateway("mcp_result_too_large", "result too large".into()),
            _ => Self::gateway(
                "mcp_upstream_unavailable",
                format!("upstream unavailable: {server}"),
            ),
        }
    }
    pub fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        e
    }
}

/// The answer of `tools/call`: a result as received, or an error.
pub enum CallResult {
    Result(Box<serde_json::value::RawValue>),
    Local(Value),
    Error(RpcError),
    /// The upstream's own JSON-RPC error, unchanged.
    Upstream(rmcp::model::ErrorData),
}

/// What `tools/call` did, for the access line.
pub struct CallNote {
    pub server: Option<String>,
    pub exposed: String,
    pub decision: Decision,
}

/// Counters of `gatehouse_mcp_calls_total` and
/// `gatehouse_mcp_upstream_failures_total`.
#[derive(Default)]
pub struct McpMetrics {
    calls: DashMap<(String, &'static str), AtomicU64>,
    failures: DashMap<(String, &'static str), AtomicU64>,
}

impl McpMetrics {
    pub fn call(&self, server: &str, decision: Decision) {
        bump(&self.calls, server, decision.as_str());
    }
    pub fn failure(&self, server: &str, cause: &'static str) {
        bump(&self.failures, server, cause);
    }
    /// The Prometheus text of both counters.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, map, label) in [
            (
                "gatehouse_mcp_calls_total",
                "MCP tools/call requests by server and decision.",
                &self.calls,
                "decision",
            ),
            (
                "gatehouse_mcp_upstream_failures_total",
                "Failed MCP upstream requests by server and cause.",
                &self.failures,
                "cause",
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let mut rows: Vec<(String, &str, u64)> = map
                .iter()
                .map(|e| {
                    (
                        e.key().0.clone(),
                        e.key().1,
                        e.value().load(Ordering::Relaxed),
                    )
                })
                .collect();
            rows.sort();
            for (server, l, n) in rows {
                let _ = writeln!(out, "{name}{{server=\"{server}\",{label}=\"{l}\"}} {n}");
            }
        }
    }
}

fn bump(map: &DashMap<(String, &'static str), AtomicU64>, server: &str, label: &'static str) {
    if let Some(n) = map.get(&(server.to_string(), label)) {
        n.fetch_add(1, Ordering::Relaxed);
        return;
    }
    map.entry((server.to_string(), label))
        .or_default()
        .fetch_add(1, Ordering::Relaxed);
}

/// The audit records, written off the request path in batches by the
/// store's batch writer (as usage records are): listed within ~250 ms, and
/// what is queued at shutdown is written before the process ends.
pub struct AuditSink {
    tx: tokio::sync::mpsc::Sender<McpCallRecord>,
    writer: parking_lot::Mutex<Option<crate::store::batch::BatchWriter>>,
    /// Records refused because the queue was full.
    pub dropped: AtomicU64,
}

/// How long the audit writer gathers records for one transaction. A commit
/// of audit rows rewrites a dozen pages (the table and its indexes) and ends
/// in an fsync: at 10 ms (the usage records' linger) that was a fifth of the
/// gateway's CPU under sequential calls. A record must be listed within 2 s.
const AUDIT_LINGER: Duration = Duration::from_millis(250);

/// The audit records' side of the batch writer.
struct AuditTarget(crate::store::Store);

impl crate::store::batch::BatchTarget for AuditTarget {
    type Record = McpCallRecord;
    const WHAT: &'static str = "MCP audit";
    const BATCH: usize = 500;
    fn write<'a>(
        &'a self,
        batch: &'a [McpCallRecord],
    ) -> BoxFuture<'a, std::result::Result<(), sqlx::Error>> {
        Box::pin(self.0.insert_mcp_calls(batch))
    }
}

impl AuditSink {
    /// Starts the writer on `store`.
    pub fn start(store: crate::store::Store) -> AuditSink {
        let (tx, writer) = crate::store::batch::start(AuditTarget(store), 10_000, AUDIT_LINGER);
        AuditSink {
            tx,
            writer: parking_lot::Mutex::new(Some(writer)),
            dropped: AtomicU64::new(0),
        }
    }

    pub fn write(&self, r: McpCallRecord) {
        if self.tx.try_send(r).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Shutdown: takes no more records and writes the queued ones, waiting
    /// at most `within`.
    pub async fn finish(&self, within: Duration) {
        let writer = self.writer.lock().take();
        if let Some(w) = writer {
            w.finish(within).await;
        }
    }
}

/// An upstream's tool list and when it was read.
type ToolList = (Instant, Arc<Vec<UpstreamTool>>);

/// The gateway's per-process state.
pub struct Gateway {
    pub client: McpClient,
    pub sealer: Sealer,
    pub ended: EndedSessions,
    pub later: LaterUpstreams,
    pub ttl_s: u64,
    pub metrics: McpMetrics,
    pub audit: AuditSink,
    /// Each server's tool list (by name and URL), when it was read.
    tools: DashMap<(String, String), ToolList>,
    /// Upstream calls in flight in this process, by (session, client
    /// request id): the server running it (for `notifications/cancelled`).
    inflight: DashMap<(String, String), String>,
}

impl Gateway {
    pub fn new(
        http: reqwest::Client,
        keyring: &crate::secrets::Keyring,
        ttl_s: u64,
        max_result_bytes: usize,
        store: crate::store::Store,
    ) -> Gateway {
        Gateway {
            client: McpClient::new(http, max_result_bytes),
            sealer: Sealer::new(keyring),
            ended: EndedSessions::default(),
            later: LaterUpstreams::default(),
            ttl_s,
            metrics: McpMetrics::default(),
            audit: AuditSink::start(store),
            tools: DashMap::new(),
            inflight: DashMap::new(),
        }
    }

    /// Mirrors the sessions ended since `since` (Unix ms) and forgets those
    /// past their lifetime; returns where the next poll starts. A second of
    /// overlap keeps a session ended on a server with a slower clock.
    pub async fn sync_ended(&self, store: &crate::store::Store, since: i64) -> i64 {
        let now = crate::store::now_ms();
        match store.mcp_sessions_ended_since(since).await {
            Ok(rows) => {
                let mut next = since;
                for (hash, ended_at, expires_at) in rows {
                    next = next.max(ended_at - 1000);
                    self.ended.insert(hash, expires_at);
                }
                self.ended.purge(now);
                self.later.purge(now);
                next
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading ended MCP sessions failed");
                since
            }
        }
    }

    fn failed(&self, server: &str, e: &UpstreamError) {
        tracing::warn!(server = %server, error = %e, "MCP upstream failed");
        self.metrics.failure(server, e.failure.cause());
    }

    /// `initialize`: every upstream of the route, in parallel; one that
    /// fails is left out of the session (and opened when a request needs it).
    pub async fn initialize(
        &self,
        servers: &[Arc<McpServer>],
        caller: &Caller,
        route: &str,
        version: &str,
        now: i64,
    ) -> Option<String> {
        let opened = futures_util::future::join_all(servers.iter().map(|s| async move {
            let up = upstream_of(s);
            match self.client.initialize(&up).await {
                Ok(sess) => Some((s.name.clone(), sess)),
                Err(e) => {
                    self.failed(&s.name, &e);
                    None
                }
            }
        }))
        .await;
        let mut session = Session::new(
            caller.session_caller(),
            route.to_string(),
            version.to_string(),
            now,
        );
        session.upstreams = opened.into_iter().flatten().collect();
        let (id, kept) = self.sealer.seal(&session)?;
        let expires = session.expires_at(self.ttl_s);
        for (server, up) in kept {
            self.later.put(&session.jti, &server, up, expires);
        }
        Some(id)
    }

    /// The upstream session of `server` in `session`: the sealed one, a
    /// later one of this process, or a new one.
    async fn upstream_session(
        &self,
        session: &Session,
        up: &UpstreamServer,
        fresh: bool,
    ) -> Result<UpstreamSession, UpstreamError> {
        if !fresh {
            if let Some(s) = self.later.get(&session.jti, &up.name) {
                return Ok(s);
            }
            if let Some(s) = session.upstreams.get(&up.name) {
                return Ok(s.clone());
            }
        }
        let s = self.client.initialize(up).await?;
        self.later.put(
            &session.jti,
            &up.name,
            s.clone(),
            session.expires_at(self.ttl_s),
        );
        Ok(s)
    }

    /// Runs `f` with the upstream session; on a 404 for it, initializes
    /// again once and retries once.
    async fn with_session<T, F, Fut>(
        &self,
        session: &Session,
        up: &UpstreamServer,
        f: F,
    ) -> Result<T, UpstreamError>
    where
        F: Fn(UpstreamSession) -> Fut,
        Fut: std::future::Future<Output = Result<T, UpstreamError>>,
    {
        let s = self.upstream_session(session, up, false).await?;
        match f(s).await {
            Err(e) if e.failure == Failure::SessionGone => {
                let s = self.upstream_session(session, up, true).await?;
                f(s).await
            }
            r => r,
        }
    }

    /// The upstream's tools, read now (and kept for calls).
    async fn fetch_tools(
        &self,
        session: &Session,
        server: &McpServer,
    ) -> Result<Arc<Vec<UpstreamTool>>, UpstreamError> {
        let up = upstream_of(server);
        let list = self
            .with_session(session, &up, |s| {
                let up = &up;
                async move { self.client.list_tools(up, &s).await }
            })
            .await?;
        let list = Arc::new(list);
        self.tools.insert(
            (server.name.clone(), server.url.clone()),
            (Instant::now(), Arc::clone(&list)),
        );
        Ok(list)
    }

    fn cached_tools(&self, server: &McpServer) -> Option<Arc<Vec<UpstreamTool>>> {
        let e = self.tools.get(&(server.name.clone(), server.url.clone()))?;
        (e.0.elapsed() < TOOLS_FRESH).then(|| Arc::clone(&e.1))
    }

    /// `tools/list`: the tools the caller may use, and the held names.
    pub async fn list(
        &self,
        servers: &[Arc<McpServer>],
        caller: &Caller,
        rules: Option<&mut (dyn AgentRules + '_)>,
        route_server: Option<&str>,
        session: &Session,
    ) -> Result<(Vec<Value>, Vec<String>)> {
        let lists = futures_util::future::join_all(servers.iter().map(|s| async move {
            match self.fetch_tools(session, s).await {
                Ok(l) => Some(l),
                Err(e) => {
                    self.failed(&s.name, &e);
                    None
                }
            }
        }))
        .await;
        let grants = caller.grants();
        let mut candidates = Vec::new();
        let mut raws = Vec::new();
        for (server, list) in servers.iter().zip(lists) {
            let Some(list) = list else { continue };
            for t in list.iter() {
                if !grants.tool_allowed(server, &t.name) {
                    continue;
                }
                let prefix = route_server.is_none().then_some(server.name.as_str());
                candidates.push(candidate(server, prefix, t));
                raws.push(t.clone());
            }
        }
        let verdicts = match rules {
            None => vec![Listed::Shown; candidates.len()],
            Some(r) => r.list(&candidates).await?,
        };
        let mut shown = Vec::new();
        let mut held = Vec::new();
        for ((c, t), v) in candidates.iter().zip(&raws).zip(verdicts) {
            match v {
                Listed::Shown => shown.push(tools::listed_tool(&c.server, &c.exposed, c.class, t)),
                Listed::Held => held.push(c.exposed.clone()),
                Listed::Hidden => {}
            }
        }
        Ok((shown, held))
    }

    /// `tools/call`, decided at call time from current grants and rules.
    /// `params` is the request's `params`; `client_id` its JSON-RPC id (for
    /// `notifications/cancelled`).
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        limiter: &crate::limits::Limiter,
        snapshot: &ServerSnapshot,
        caller: &Caller,
        rules: Option<&mut (dyn AgentRules + '_)>,
        route_server: Option<&str>,
        session: &Session,
        params: Option<&Value>,
        client_id: &Value,
        request_id: Option<String>,
    ) -> (CallResult, Option<CallNote>) {
        let started = Instant::now();
        let name = match params.and_then(|p| p.get("name")).and_then(Value::as_str) {
            Some(n) => n.to_string(),
            None => {
                return (
                    CallResult::Error(RpcError::invalid_params(
                        "params.name is required: the tool's name",
                    )),
                    None,
                )
            }
        };
        let arguments = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(o.clone()),
            Some(_) => {
                return (
                    CallResult::Error(RpcError::invalid_params(
                        "params.arguments must be an object",
                    )),
                    None,
                )
            }
        };
        let args_value = Value::Object(arguments.clone().unwrap_or_default());
        let mut record = McpCallRecord::new(
            &name,
            &name,
            Decision::Allowed,
            tools::arguments_sha256(&args_value),
        );
        record.request_id = request_id;
        caller.stamp(&mut record);

        let finish = |mut record: McpCallRecord,
                      decision: Decision,
                      reason: Option<Reason>,
                      outcome: Option<Outcome>| {
            record.decision = decision.as_str().to_string();
            record.reason = reason.map(|r| r.as_str().to_string());
            record.outcome = outcome.map(|o| o.as_str().to_string());
            record.latency_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
            let server = record.server.clone().unwrap_or_default();
            self.metrics.call(&server, decision);
            let note = CallNote {
                server: record.server.clone(),
                exposed: record.exposed_name.clone(),
                decision,
            };
            self.audit.write(record);
            Some(note)
        };

        // Counted whatever the decision.
        let subjects = caller.call_subjects();
        if !subjects.is_empty() {
            if let Err(r) = limiter.admit(&subjects).await {
                if let Some((s, _)) = resolve_server(route_server, &name) {
                    record.server = snapshot.get(s).map(|x| x.name.clone());
                }
                let err = RpcError {
                    code: -32000,
                    message: r.message.clone(),
                    data: Some(json!({"code": "rate_limited", "retry_after_s": r.retry_after})),
                    retry_after: Some(r.retry_after),
                };
                let note = finish(record, Decision::RateLimited, None, None);
                return (CallResult::Error(err), note);
            }
        }

        let unknown = |record: McpCallRecord, reason: Reason| {
            let note = finish(record, Decision::Denied, Some(reason), None);
            (CallResult::Error(RpcError::unknown_tool(&name)), note)
        };
        let Some((server_name, _)) = resolve_server(route_server, &name) else {
            return unknown(record, Reason::UnknownTool);
        };
        let Some(server) = snapshot.get(server_name).cloned() else {
            return unknown(record, Reason::UnknownTool);
        };
        record.server = Some(server.name.clone());
        let grants = caller.grants();
        if !grants.server_granted(&server.name) {
            return unknown(record, Reason::NotGranted);
        }
        let prefix = route_server.is_none().then_some(server.name.as_str());
        // The cached list first; an unknown name reads the list anew.
        let mut found = self
            .cached_tools(&server)
            .and_then(|l| tools::find_exposed(prefix, &name, &l).cloned());
        if found.is_none() {
            match self.fetch_tools(session, &server).await {
                Ok(l) => found = tools::find_exposed(prefix, &name, &l).cloned(),
                Err(e) => {
                    self.failed(&server.name, &e);
                    let outcome = outcome_of(e.failure);
                    let note = finish(record, Decision::Allowed, None, Some(outcome));
                    return (
                        CallResult::Error(RpcError::from_upstream(e.failure, &server.name)),
                        note,
                    );
                }
            }
        }
        let Some(tool) = found else {
            return unknown(record, Reason::UnknownTool);
        };
        record.tool = tool.name.clone();
        let c = candidate(&server, prefix, &tool);
        record.class = Some(c.class.as_str().to_string());
        if !grants.tool_allowed(&server, &tool.name) {
            return unknown(record, Reason::NotGranted);
        }
        let mut decision = Decision::Allowed;
        if let Some(rules) = rules {
            let canonical = tools::canonical_json(&args_value);
            let admitted = match rules.admit(&c, &canonical).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e.message, "the agent's MCP rules failed");
                    let note = finish(record, Decision::Denied, None, None);
                    return (CallResult::Error(RpcError::internal()), note);
                }
            };
            match admitted {
                Admit::Upstream { approval_id } => {
                    if approval_id.is_some() {
                        decision = Decision::Approved;
                    }
                    record.approval_id = approval_id;
                }
                Admit::Answer {
                    result,
                    decision,
                    reason,
                    approval_id,
                } => {
                    record.approval_id = approval_id;
                    let note = finish(record, decision, reason, None);
                    return (CallResult::Local(result), note);
                }
                Admit::Unknown { reason } => return unknown(record, reason),
            }
        }

        let up = upstream_of(&server);
        let key = (session.jti.clone(), client_id.to_string());
        let answer = self
            .with_session(session, &up, |s| {
                let up = &up;
                let arguments = arguments.clone();
                let tool_name = tool.name.clone();
                let key = key.clone();
                async move {
                    let id = call_request_id(&session.jti, client_id);
                    self.inflight.insert(key.clone(), up.name.clone());
                    let r = self
                        .client
                        .call_tool(up, &s, id, &tool_name, arguments)
                        .await;
                    self.inflight.remove(&key);
                    r
                }
            })
            .await;
        match answer {
            Ok(CallAnswer::Result(r)) => {
                let outcome = if is_error_result(&r) {
                    Outcome::ToolError
                } else {
                    Outcome::Ok
                };
                let note = finish(record, decision, None, Some(outcome));
                (CallResult::Result(r), note)
            }
            Ok(CallAnswer::Error(e)) => {
                let note = finish(record, decision, None, Some(Outcome::UpstreamError));
                (CallResult::Upstream(e), note)
            }
            Err(e) => {
                self.failed(&server.name, &e);
                let note = finish(record, decision, None, Some(outcome_of(e.failure)));
                (
                    CallResult::Error(RpcError::from_upstream(e.failure, &server.name)),
                    note,
                )
            }
        }
    }

    /// `notifications/cancelled` from the client, best effort: to the
    /// upstream running that request when it runs in this process; else it
    /// may run on another server of the cluster, so to every upstream of
    /// `servers` (the route's) the session has a session with (an upstream
    /// ignores a cancel of a request it does not know). Either way under
    /// the request id [`call_request_id`] gave the call upstream.
    pub async fn cancel(
        &self,
        snapshot: &ServerSnapshot,
        servers: &[Arc<McpServer>],
        session: &Session,
        params: Option<&Value>,
    ) {
        let Some(rid) = params.and_then(|p| p.get("requestId")) else {
            return;
        };
        let id = call_request_id(&session.jti, rid);
        let here = self
            .inflight
            .get(&(session.jti.clone(), rid.to_string()))
            .map(|e| e.value().clone());
        let targets: Vec<&McpServer> = match &here {
            Some(name) => snapshot.get(name).map(|s| &**s).into_iter().collect(),
            None => servers.iter().map(|s| &**s).collect(),
        };
        let sends = targets.into_iter().filter_map(|s| {
            // Only a session the call could be running in: none is opened.
            let us = self
                .later
                .get(&session.jti, &s.name)
                .or_else(|| session.upstreams.get(&s.name).cloned())?;
            let up = upstream_of(s);
            Some(async move {
                self.client
                    .cancel(&up, &us, id, "cancelled by the client")
                    .await
            })
        });
        futures_util::future::join_all(sends).await;
    }

    /// Ends the upstream sessions `session` named, best effort.
    pub async fn end_upstreams(&self, snapshot: &ServerSnapshot, session: &Session) {
        let mut all: BTreeMap<String, UpstreamSession> = session.upstreams.clone();
        all.extend(self.later.take_all(&session.jti));
        let ends = all.into_iter().filter_map(|(name, us)| {
            let s = snapshot.get(&name)?;
            let up = upstream_of(s);
            Some(async move { self.client.end_session(&up, &us).await })
        });
        futures_util::future::join_all(ends).await;
    }

    /// `GET /api/admin/mcp-servers/{name}/tools`: the upstream's tools now,
    /// in a session of their own (ended after).
    pub async fn admin_tools(&self, server: &McpServer) -> Result<Vec<Value>, Failure> {
        let up = upstream_of(server);
        let sess = self.client.initialize(&up).await.map_err(|e| {
            self.failed(&server.name, &e);
            e.failure
        })?;
        let list = self.client.list_tools(&up, &sess).await;
        self.client.end_session(&up, &sess).await;
        let list = list.map_err(|e| {
            self.failed(&server.name, &e);
            e.failure
        })?;
        Ok(list
            .iter()
            .map(|t| {
                let (class, source) =
                    tools::classify(&server.tool_classes, &t.name, t.annotations.as_ref());
                json!({
                    "name": t.name,
                    "exposed_name": tools::exposed_name(Some(&server.name), &t.name),
                    "description": t.description(),
                    "annotations": t.raw.get("annotations").cloned().unwrap_or(Value::Null),
                    "class": class.as_str(),
                    "class_source": source.as_str(),
                    "allowed": server.allows_tool(&t.name),
                })
            })
            .collect())
    }
}

/// The upstream request id of a client's `tools/call`: derived from the
/// client's session and its request id (unique within the session), so any
/// server of the cluster that gets the client's `notifications/cancelled`
/// names the same request upstream. From 2^52 up to below 2^53 (exact in
/// every JSON reader), above the ids the gateway's own requests count up
/// from 1.
pub fn call_request_id(jti: &str, client_id: &Value) -> i64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(jti.as_bytes());
    h.update([0]);
    h.update(client_id.to_string().as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    const LOW: u64 = 1 << 52;
    i64::try_from(LOW | (u64::from_be_bytes(first) & (LOW - 1))).unwrap_or(i64::MAX)
}

/// The server an incoming tool name is for: the route's, or the part
/// before the first `__` on `/mcp`.
fn resolve_server<'a>(route_server: Option<&'a str>, name: &'a str) -> Option<(&'a str, &'a str)> {
    match route_server {
        Some(s) => Some((s, name)),
        None => tools::split_name(name),
    }
}

fn candidate(server: &McpServer, prefix: Option<&str>, t: &UpstreamTool) -> Candidate {
    let (class, _) = tools::classify(&server.tool_classes, &t.name, t.annotations.as_ref());
    Candidate {
        server: server.name.clone(),
        exposed: tools::exposed_name(prefix, &t.name),
        tool: t.name.clone(),
        class,
        description: t.description().map(str::to_string),
        input_schema: t.raw.get("inputSchema").cloned(),
    }
}

fn outcome_of(f: Failure) -> Outcome {
    match f {
        Failure::Timeout => Outcome::Timeout,
        Failure::TooLarge => Outcome::TooLarge,
        _ => Outcome::Unavailable,
    }
}

/// Whether a `CallToolResult` says `isError: true` (a result, not an error).
fn is_error_result(r: &serde_json::value::RawValue) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        #[serde(default, rename = "isError")]
        is_error: bool,
    }
    serde_json::from_str::<Flag>(r.get()).is_ok_and(|f| f.is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_upstream_id_is_the_same_on_every_server_and_apart_from_ours() {
        let id = call_request_id("jti-1", &json!(7));
        assert_eq!(id, call_request_id("jti-1", &json!(7)));
        assert_ne!(id, call_request_id("jti-1", &json!(8)));
        assert_ne!(id, call_request_id("jti-2", &json!(7)));
        // The number 7 and the string "7" are different JSON-RPC ids.
        assert_ne!(id, call_request_id("jti-1", &json!("7")));
        for id in [
            id,
            call_request_id("j", &json!("x")),
            call_request_id("", &Value::Null),
        ] {
            assert!((1_i64 << 52..1_i64 << 53).contains(&id), "{id}");
        }
    }

    #[test]
    fn a_name_resolves_to_the_route_server_or_its_prefix() {
        assert_eq!(resolve_server(Some("alpha"), "add"), Some(("alpha", "add")));
        assert_eq!(resolve_server(None, "alpha__add"), Some(("alpha", "add")));
        assert_eq!(resolve_server(None, "add"), None);
    }

    #[test]
    fn a_tool_error_result_is_told_from_a_plain_one() {
        let r = |s: &str| serde_json::value::RawValue::from_string(s.into()).expect("raw");
        assert!(is_error_result(&r(r#"{"content":[],"isError":true}"#)));
        assert!(!is_error_result(&r(r#"{"content":[]}"#)));
        assert!(!is_error_result(&r(r#"{"content":[],"isError":false}"#)));
    }

    #[test]
    fn upstream_failures_map_to_the_contract_codes() {
        assert_eq!(
            RpcError::from_upstream(Failure::Timeout, "alpha").to_json(),
            json!({"code": -32603, "message": "upstream timed out: alpha",
                   "data": {"code": "mcp_upstream_timeout"}})
        );
        assert_eq!(
            RpcError::from_upstream(Failure::Unavailable, "alpha").to_json(),
            json!({"code": -32603, "message": "upstream unavailable: alpha",
                   "data": {"code": "mcp_upstream_unavailable"}})
        );
        assert_eq!(
            RpcError::from_upstream(Failure::TooLarge, "alpha").to_json()["data"]["code"],
            "mcp_result_too_large"
        );
        assert_eq!(
            RpcError::unknown_tool("alpha__nope").to_json(),
            json!({"code": -32602, "message": "Unknown tool: alpha__nope"})
        );
    }

    #[test]
    fn metrics_render_by_server_and_label() {
        let m = McpMetrics::default();
        m.call("alpha", Decision::Allowed);
        m.call("alpha", Decision::Allowed);
        m.call("", Decision::Denied);
        m.failure("beta", "timeout");
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("gatehouse_mcp_calls_total{server=\"alpha\",decision=\"allowed\"} 2"));
        assert!(out.contains("gatehouse_mcp_calls_total{server=\"\",decision=\"denied\"} 1"));
        assert!(out.contains(
            "gatehouse_mcp_upstream_failures_total{server=\"beta\",cause=\"timeout\"} 1"
        ));
    }
}
