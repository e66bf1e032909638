//! The accept loop (contract, "Hardening" → "Connections" and "Operations" →
//! "Graceful shutdown"): a connection cap, header and idle timeouts per
//! connection, and a shutdown that stops accepting at once, lets requests
//! and streams finish within a grace period, then ends the rest.
//!
//! The timeouts cost one timer per connection, not per request: a watchdog
//! beside each connection reads a few atomics the connection updates as
//! requests begin and end and as bytes arrive, waking only at deadlines.
//!
//! A connection that ends after an answer while the client may still be
//! sending (a refused body) closes lingering, so the client reads its answer
//! rather than a reset (contract, "Mends (round 3)").

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::http::Dispatch;

/// How connections are served (from the `GATEHOUSE_*` settings).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// A connection must send a complete request head within this.
    pub header_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub idle_timeout: Duration,
    /// Connections past this wait in the listen backlog.
    pub max_connections: usize,
    /// How long requests in flight may run on after the shutdown signal.
    pub shutdown_grace: Duration,
}

/// Serves `dispatch` on `listener` until `stop` fires, then shuts down
/// gracefully (see the module comment). Returns when every connection ended.
pub async fn serve(
    listener: TcpListener,
    dispatch: Dispatch,
    limits: ConnLimits,
    permits: Arc<Semaphore>,
    stop: impl Future<Output = ()>,
) {
    let (closing_tx, closing) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut stop => break,
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, don't spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Past the cap this connection waits here, and the ones after it in
        // the kernel's backlog: this loop accepts no more until a connection
        // of any serving thread ends. (Taking the permit before accepting
        // deadlocks with several listeners: one thread holds the last permit
        // waiting for a connection the kernel gave another.)
        let permit = tokio::select! {
            biased;
            () = &mut stop => {
                conns.spawn(refuse_conn(tcp, limits.header_timeout.min(limits.shutdown_grace)));
                break;
            }
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        while conns.try_join_next().is_some() {}
        conns.spawn(serve_conn(
            tcp,
            peer,
            dispatch.clone(),
            limits,
            closing.clone(),
            permit,
        ));
    }

    // Connections the kernel accepted before we stopped are answered 503;
    // then the listener closes and new connections are refused.
    let shutdown_started = Instant::now();
    while let Some(Ok((tcp, _))) = futures_util::FutureExt::now_or_never(listener.accept()) {
        conns.spawn(refuse_conn(
            tcp,
            limits.header_timeout.min(limits.shutdown_grace),
        ));
    }
    drop(listener);
    tracing::info!(
        connections = conns.len(),
        grace_s = limits.shutdown_grace.as_secs(),
        "shutting down: no new connections; requests in flight may finish"
    );
    let _ = closing_tx.send(true);
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = conns.len(),
            "shutdown grace period over: ending the requests still in flight"
        );
        // Dropping a connection closes its socket (the client sees its
        // stream end) and drops its handlers, whose usage tickets record.
        conns.shutdown().await;
    }
    tracing::info!(
        ms = shutdown_started.elapsed().as_millis() as u64,
        "all connections closed"
    );
}

/// Listening sockets for `addr`, one per serving thread. Several share the
/// port with `SO_REUSEPORT`: the kernel spreads new connections over them,
/// and each thread serves its own with a runtime of its own, so a request
/// never wakes another thread (a work-stealing runtime woke its idle worker
/// for every task it scheduled: a third more CPU per request at low load).
pub fn bind(addr: SocketAddr, threads: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let mut listeners = Vec::with_capacity(threads.max(1));
    let mut at = addr;
    for _ in 0..threads.max(1) {
        let socket = if at.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        if threads > 1 {
            socket.set_reuseport(true)?;
        }
        socket.bind(at)?;
        // Port 0 picks a port once; the other sockets take the same one.
        at = socket.local_addr()?;
        let listener = socket.listen(1024)?;
        listeners.push(listener.into_std()?);
    }
    Ok(listeners)
}

/// Serves on every listener: the first on the calling runtime, each other on
/// a thread of its own with a single-threaded runtime. All stop when `stop`
/// turns true; the returned task ends when every one of them has ended.
/// The connection cap counts the connections of all of them.
pub fn spawn(
    listeners: Vec<std::net::TcpListener>,
    dispatch: Dispatch,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut listeners = listeners.into_iter();
    let first = listeners
        .next()
        .ok_or_else(|| std::io::Error::other("no listening socket"))?;
    let mut ended = Vec::new();
    for (i, listener) in listeners.enumerate() {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (dispatch, permits, stop) = (dispatch.clone(), Arc::clone(&permits), stop.clone());
        std::thread::Builder::new()
            .name(format!("serve-{}", i + 1))
            .spawn(move || {
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => {
                            serve(listener, dispatch, limits, permits, stopped(stop)).await
                        }
                        Err(e) => tracing::error!(error = %e, "a serving thread could not listen"),
                    }
                });
                // Tasks the requests left behind end with the runtime.
                drop(runtime);
                let _ = done_tx.send(());
            })?;
        ended.push(done_rx);
    }
    let first = TcpListener::from_std(first)?;
    Ok(tokio::spawn(async move {
        serve(first, dispatch, limits, permits, stopped(stop)).await;
        for done in ended {
            let _ = done.await;
        }
    }))
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// What the watchdog of one connection reads. Times are milliseconds since
/// the connection was accepted.
///
/// The connection never wakes the watchdog: a wake-up (and a new timer) per
/// request cost more than the timeouts are worth. The watchdog wakes at
/// least once per the shorter of the header and idle timeouts and works out
/// the exact deadline from these times each time, so no deadline is missed
/// (see [`ConnState::next_look`]).
struct ConnState {
    born: Instant,
    /// Requests whose head arrived and whose answer is not yet fully written.
    active: AtomicUsize,
    /// When the connection last became idle.
    idle_since: AtomicU64,
    /// When the first byte of the next request head arrived; `NONE` while
    /// none did since the connection became idle.
    head_started: AtomicU64,
}

const NONE: u64 = u64::MAX;

impl ConnState {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn request_began(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    fn request_ended(&self) {
        if self.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.head_started.store(NONE, Ordering::Release);
            self.idle_since.store(self.now_ms(), Ordering::Release);
        }
    }

    fn bytes_arrived(&self) {
        if self.head_started.load(Ordering::Relaxed) == NONE
            && self.active.load(Ordering::Acquire) == 0
        {
            self.head_started.store(self.now_ms(), Ordering::Release);
        }
    }

    /// When the watchdog must look next (ms), or `Err(())` when the
    /// connection has been idle, or sending a request head, for longer than
    /// allowed.
    ///
    /// Whatever happens after `now` without telling the watchdog (a head
    /// begins, a request ends) sets a deadline no earlier than `now` plus the
    /// shorter timeout: looking again by then, or at the deadline known now
    /// if sooner, misses none. (Looking only at a head's deadline once left
    /// a connection whose head became a short request open for the header
    /// timeout, not its shorter idle timeout.)
    fn next_look(&self, now: u64, header_ms: u64, idle_ms: u64) -> Result<u64, ()> {
        let soon = now.saturating_add(header_ms.min(idle_ms));
        if self.active.load(Ordering::Acquire) > 0 {
            // A request runs: its body has its own timeout, an answer (a
            // stream) may take as long as it takes.
            return Ok(soon);
        }
        let started = self.head_started.load(Ordering::Acquire);
        let deadline = if started != NONE {
            started.saturating_add(header_ms)
        } else {
            self.idle_since
                .load(Ordering::Acquire)
                .saturating_add(idle_ms)
        };
        if now >= deadline {
            Err(())
        } else {
            Ok(deadline.min(soon))
        }
    }

    /// Resolves when the connection has been idle, or sending a request head,
    /// for longer than allowed.
    async fn expired(&self, limits: ConnLimits) {
        let header_ms = u64::try_from(limits.header_timeout.as_millis()).unwrap_or(NONE / 2);
        let idle_ms = u64::try_from(limits.idle_timeout.as_millis()).unwrap_or(NONE / 2);
        loop {
            let now = self.now_ms();
            match self.next_look(now, header_ms, idle_ms) {
                Err(()) => return,
                Ok(at) => {
                    tokio::time::sleep(Duration::from_millis(at.saturating_sub(now).max(1))).await
                }
            }
        }
    }
}

async fn serve_conn(
    tcp: TcpStream,
    peer: SocketAddr,
    dispatch: Dispatch,
    limits: ConnLimits,
    mut closing: watch::Receiver<bool>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    // Without TCP_NODELAY, streamed chunks stall on Nagle plus delayed ACK.
    let _ = tcp.set_nodelay(true);
    let state = Arc::new(ConnState {
        born: Instant::now(),
        active: AtomicUsize::new(0),
        idle_since: AtomicU64::new(0),
        // A new connection owes its first request head from the start.
        head_started: AtomicU64::new(0),
    });
    let io = TokioIo::new(Watched {
        tcp,
        state: Arc::clone(&state),
        saw_eof: false,
    });
    let service = ConnService {
        dispatch,
        peer,
        state: Arc::clone(&state),
    };
    // No upgrades (no route upgrades), so the socket can be taken back when
    // hyper is done with it, for a lingering close.
    let mut conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        // Our watchdog keeps the header timeout (hyper's would also end
        // idle keep-alive connections at the header timeout).
        .header_read_timeout(None)
        .serve_connection(io, service);
    let mut told = *closing.borrow();
    if told {
        Pin::new(&mut conn).graceful_shutdown();
    }
    let done = loop {
        tokio::select! {
            r = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => break r,
            r = closing.changed(), if !told => {
                told = true;
                if r.is_ok() {
                    // Finish the request in flight, then close; idle: close now.
                    Pin::new(&mut conn).graceful_shutdown();
                }
            }
            () = state.expired(limits) => return,
        }
    };
    // An error (a broken connection, a head hyper could not read) or a
    // server going away: close at once.
    if done.is_ok() && !told {
        linger(conn.into_parts().io.into_inner(), LINGER).await;
    }
}

/// How long a closing connection is read from, at most, after its last
/// answer (see [`linger`]).
const LINGER: Duration = Duration::from_secs(5);

/// The lingering close of a connection hyper is done with while the client
/// may still be sending (a request body refused unread, `Connection: close`):
/// the last answer is written; our side closes for writing, then what comes
/// is read and dropped until the client closes too, for at most `within`.
/// Closing with bytes unread, or receiving some after closing, makes the
/// kernel reset the connection, and the reset can beat the answer: the
/// client, still sending, reports no answer at all.
async fn linger(mut io: Watched, within: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = io.tcp.shutdown().await;
    if io.saw_eof {
        return;
    }
    let mut buf = vec![0u8; 8192];
    let _ = tokio::time::timeout(within, async {
        while let Ok(n) = io.tcp.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// A connection that arrived as the server stopped: one 503, then closed.
async fn refuse_conn(tcp: TcpStream, header_timeout: Duration) {
    let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
        let body = crate::error::Error::new(
            crate::error::ErrorKind::Unavailable,
            "shutting_down",
            "The server is shutting down; try again.",
        );
        let mut resp = Response::new(Body::from(
            serde_json::json!({"detail": {"code": body.code, "message": body.message}}).to_string(),
        ));
        *resp.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
        resp.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        Ok::<_, Infallible>(resp)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), service);
    let _ = tokio::time::timeout(header_timeout, conn).await;
}

/// The service of one connection: adds the peer address and keeps the
/// connection's count of requests in flight.
#[derive(Clone)]
struct ConnService {
    dispatch: Dispatch,
    peer: SocketAddr,
    state: Arc<ConnState>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.state.request_began();
        let guard = InFlight(Arc::clone(&self.state));
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let fut = self.dispatch.call(req);
        Box::pin(async move {
            let resp = fut.await;
            // The request counts until its answer is fully written (or dropped).
            Ok(resp.map(|body| {
                Body::new(Guarded {
                    body,
                    _guard: guard,
                })
            }))
        })
    }
}

struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

struct Guarded {
    body: Body,
    _guard: InFlight,
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling the watchdog when bytes of a request head arrive,
/// and remembering whether the client closed its side (no lingering then).
struct Watched {
    tcp: TcpStream,
    state: Arc<ConnState>,
    saw_eof: bool,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let r = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.state.bytes_arrived();
        } else if room && matches!(r, Poll::Ready(Ok(()))) {
            self.saw_eof = true;
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(active: usize, idle_since: u64, head_started: u64) -> ConnState {
        ConnState {
            born: Instant::now(),
            active: AtomicUsize::new(active),
            idle_since: AtomicU64::new(idle_since),
            head_started: AtomicU64::new(head_started),
        }
    }

    #[test]
    fn an_idle_connection_is_looked_at_within_one_header_timeout_and_ends_at_the_idle_timeout() {
        let s = state(0, 1_000, NONE);
        // Idle 75 s, header 30 s: the watchdog looks again within 30 s, since
        // a head could start at any moment without telling it.
        assert_eq!(s.next_look(1_000, 30_000, 75_000), Ok(31_000));
        assert_eq!(s.next_look(61_000, 30_000, 75_000), Ok(76_000));
        assert_eq!(s.next_look(76_000, 30_000, 75_000), Err(()));
    }

    #[test]
    fn a_head_started_while_the_watchdog_slept_ends_exactly_at_its_header_deadline() {
        let s = state(0, 1_000, 20_000);
        assert_eq!(s.next_look(31_000, 30_000, 75_000), Ok(50_000));
        assert_eq!(s.next_look(50_000, 30_000, 75_000), Err(()));
    }

    #[test]
    fn an_idle_timeout_shorter_than_the_header_timeout_is_kept_after_a_head_becomes_a_request() {
        // A new connection owes its first head from the start.
        let s = state(0, 0, 0);
        // The head may turn into a request that ends at once: look again by
        // the idle timeout, not at the head's 30 s deadline.
        assert_eq!(s.next_look(0, 30_000, 2_000), Ok(2_000));
        s.request_began();
        assert_eq!(s.next_look(5, 30_000, 2_000), Ok(2_005));
        s.request_ended();
        assert_eq!(s.head_started.load(Ordering::Acquire), NONE);
        // As if it ended 10 ms after the connection began.
        s.idle_since.store(10, Ordering::Release);
        assert_eq!(s.next_look(2_005, 30_000, 2_000), Ok(2_010));
        assert_eq!(s.next_look(2_010, 30_000, 2_000), Err(()));
    }

    #[test]
    fn a_connection_with_a_request_running_never_expires() {
        let s = state(1, 0, NONE);
        assert_eq!(s.next_look(1_000_000, 30_000, 75_000), Ok(1_030_000));
        s.request_ended();
        assert_eq!(s.head_started.load(Ordering::Acquire), NONE);
    }
}

#[cfg(test)]
mod bind_tests {
    #[tokio::test]
    async fn several_listeners_share_the_port_picked_for_the_first() {
        let ls = super::bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let ports: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
        assert_eq!(ports.len(), 3);
        assert!(
            ports[0] != 0 && ports.iter().all(|p| *p == ports[0]),
            "{ports:?}"
        );
        // One listener: a plain socket that another server cannot share.
        let one = super::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        assert!(std::net::TcpListener::bind(one[0].local_addr().unwrap()).is_err());
    }
}
