//! A lean HTTP/1.1 client for `http://` upstreams (model servers on the
//! company's own network: vLLM, Ollama, TEI, llama.cpp). `https://`
//! upstreams go through reqwest (TLS, certificates).
//!
//! Why not reqwest for these too: a pooled client drives each connection in
//! a task of its own and hands the answer over through a channel, one body
//! chunk at a time. That costs two cross-task wake-ups per request, and for
//! streams one hand-over per event, so the gateway wrote one event per
//! `writev` to its client while the upstream had sent the whole burst in one
//! segment. Here the request's own task drives its connection: it writes the
//! request, reads the answer, and takes every chunk already decoded from one
//! socket read in one go ([`Exchange`] yields them together).
//!
//! Connections are kept per `host:port` (at most [`MAX_IDLE`] idle each, for
//! at most [`IDLE_FOR`]); an idle connection is checked before reuse, and a
//! request that fails on a reused connection before any answer (the server
//! closed it while idle) is sent once more on a new one. Dropping an
//! [`Exchange`] before its end closes the connection, so an upstream sees a
//! client that went away.

use std::collections::HashMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type Conn = Connection<TokioIo<TcpStream>, Full<Bytes>>;
type Sender = SendRequest<Full<Bytes>>;

/// Idle connections kept per upstream address.
const MAX_IDLE: usize = 256;
/// How long an idle connection is kept.
const IDLE_FOR: Duration = Duration::from_secs(90);
/// The most bytes one poll of an [`Exchange`] gathers before handing them on.
const MAX_GATHER: usize = 256 * 1024;

struct Idle {
    send: Sender,
    conn: Conn,
    since: Instant,
    home: Option<std::thread::ThreadId>,
}

/// The thread whose runtime drives connections made here, when that runtime
/// has only one thread (the serving threads, `http::serve::spawn`): a
/// connection is reused only on its own thread, since polling it from
/// another would wake its runtime's thread for every read.
fn home() -> Option<std::thread::ThreadId> {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread => {
            Some(std::thread::current().id())
        }
        _ => None,
    }
}

impl Idle {
    /// Still open and ready for a request (the server may have closed it).
    fn usable(&mut self) -> bool {
        if self.since.elapsed() > IDLE_FOR {
            return false;
        }
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        if Pin::new(&mut self.conn).poll(&mut cx).is_ready() {
            return false;
        }
        matches!(self.send.poll_ready(&mut cx), Poll::Ready(Ok(())))
    }
}

/// Why a direct call failed.
#[derive(Debug)]
pub enum DirectError {
    /// No connection could be made (refused, unreachable).
    Connect(std::io::Error),
    /// The connection did not open within the connect timeout.
    ConnectTimeout,
    /// The exchange failed after the connection was made.
    Http(hyper::Error),
    /// The request could not be built (a bad header value).
    Request(String),
}

impl std::fmt::Display for DirectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectError::Connect(e) => write!(f, "connect: {e}"),
            DirectError::ConnectTimeout => f.write_str("connect: timed out"),
            DirectError::Http(e) => write!(f, "{e}"),
            DirectError::Request(e) => write!(f, "request: {e}"),
        }
    }
}

impl std::error::Error for DirectError {}

/// Where direct requests to one URL go, worked out once (by
/// `Provider::url`): the address to connect to, the `Host` header and the
/// request target. Cloning its parts shares them, so a request builds none.
#[derive(Clone, Debug)]
pub struct DirectTarget {
    authority: std::sync::Arc<str>,
    host: hyper::header::HeaderValue,
    target: hyper::Uri,
}

impl DirectTarget {
    /// The target of `url` (an `http://` URL).
    pub fn of(url: &reqwest::Url) -> Result<DirectTarget, DirectError> {
        let authority = format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or(80)
        );
        let target = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        let bad = |e: &dyn std::fmt::Display| DirectError::Request(e.to_string());
        Ok(DirectTarget {
            host: hyper::header::HeaderValue::from_str(&authority).map_err(|e| bad(&e))?,
            target: hyper::Uri::from_maybe_shared(Bytes::from(target)).map_err(|e| bad(&e))?,
            authority: authority.into(),
        })
    }
}

/// The pools of idle connections.
pub struct DirectClient {
    idle: parking_lot::Mutex<HashMap<String, Vec<Idle>>>,
    connect_timeout: Duration,
}

impl DirectClient {
    pub fn new(connect_timeout: Duration) -> DirectClient {
        DirectClient {
            idle: parking_lot::Mutex::new(HashMap::new()),
            connect_timeout,
        }
    }

    fn checkout(&self, authority: &str) -> Option<Idle> {
        let here = home();
        let mut pools = self.idle.lock();
        let list = pools.get_mut(authority)?;
        while let Some(i) = list.iter().rposition(|c| c.home == here) {
            let mut c = list.swap_remove(i);
            if c.usable() {
                return Some(c);
            }
        }
        None
    }

    fn checkin(&self, authority: &str, c: Idle) {
        let mut pools = self.idle.lock();
        match pools.get_mut(authority) {
            Some(list) if list.len() < MAX_IDLE => list.push(c),
            Some(_) => {}
            None => {
                pools.insert(authority.to_string(), vec![c]);
            }
        }
    }

    async fn connect(&self, authority: &str) -> Result<Idle, DirectError> {
        let tcp =
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(authority)).await {
                Err(_) => return Err(DirectError::ConnectTimeout),
                Ok(Err(e)) => return Err(DirectError::Connect(e)),
                Ok(Ok(s)) => s,
            };
        let _ = tcp.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(DirectError::Http)?;
        Ok(Idle {
            send,
            conn,
            since: Instant::now(),
            home: home(),
        })
    }

    /// POSTs `body` to `to` with the headers `headers` makes (called again
    /// for the second try on a new connection); returns once the answer's
    /// head is in.
    pub async fn post(
        self: &std::sync::Arc<Self>,
        to: &DirectTarget,
        headers: impl Fn() -> HeaderMap,
        body: Bytes,
    ) -> Result<DirectResponse, DirectError> {
        let request = || {
            let mut req = Request::new(Full::new(body.clone()));
            *req.method_mut() = hyper::Method::POST;
            *req.uri_mut() = to.target.clone();
            let h = req.headers_mut();
            *h = headers();
            h.insert(hyper::header::HOST, to.host.clone());
            req
        };
        let authority = &to.authority;
        if let Some(mut c) = self.checkout(authority) {
            match exchange(&mut c, request()).await {
                Ok(resp) => return Ok(self.response(authority, c, resp)),
                // Closed while idle, before it took the request: once more on a new one.
                Err(e) if e.is_canceled() || e.is_incomplete_message() => {}
                Err(e) => return Err(DirectError::Http(e)),
            }
        }
        let mut c = self.connect(authority).await?;
        let resp = exchange(&mut c, request())
            .await
            .map_err(DirectError::Http)?;
        Ok(self.response(authority, c, resp))
    }

    fn response(
        self: &std::sync::Arc<Self>,
        authority: &std::sync::Arc<str>,
        c: Idle,
        resp: hyper::Response<Incoming>,
    ) -> DirectResponse {
        let (parts, body) = resp.into_parts();
        DirectResponse {
            status: parts.status,
            headers: parts.headers,
            body: Exchange {
                status: parts.status.as_u16(),
                conn: Some(c),
                body,
                conn_done: false,
                eof: false,
                failed: None,
                pool: std::sync::Arc::clone(self),
                authority: std::sync::Arc::clone(authority),
            },
        }
    }
}

/// Sends `req` on `c`, driving the connection until the answer's head is in.
async fn exchange(
    c: &mut Idle,
    req: Request<Full<Bytes>>,
) -> Result<hyper::Response<Incoming>, hyper::Error> {
    let mut answer = pin!(c.send.send_request(req));
    let conn = &mut c.conn;
    let mut conn_done = false;
    std::future::poll_fn(|cx| loop {
        if let Poll::Ready(r) = answer.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        if conn_done {
            return Poll::Pending;
        }
        match Pin::new(&mut *conn).poll(cx) {
            Poll::Pending => {
                return match answer.as_mut().poll(cx) {
                    Poll::Ready(r) => Poll::Ready(r),
                    Poll::Pending => Poll::Pending,
                }
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            // Closed: the answer future now resolves (with an error).
            Poll::Ready(Ok(())) => conn_done = true,
        }
    })
    .await
}

/// An answer's head and its body.
pub struct DirectResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Exchange,
}

/// An answer's body, read by driving its connection in the reader's task.
/// Each item is every byte available without waiting (one upstream read's
/// worth), so a burst of stream events moves on as one piece; a failure
/// (the connection cut mid-body) is the item after the bytes that came with
/// it. At its end the connection goes back to the pool; dropped before, it
/// is closed.
pub struct Exchange {
    /// The answer's status.
    pub status: u16,
    conn: Option<Idle>,
    body: Incoming,
    conn_done: bool,
    eof: bool,
    /// A failure met after bytes were gathered: those go out first, and
    /// this is the next poll's answer (a read that brings the last events
    /// and the connection's end must not lose the events).
    failed: Option<hyper::Error>,
    pool: std::sync::Arc<DirectClient>,
    authority: std::sync::Arc<str>,
}

impl Exchange {
    /// Reads the whole body.
    pub async fn collect(mut self) -> Result<Bytes, hyper::Error> {
        use futures_util::StreamExt;
        let mut out = BytesMut::new();
        while let Some(piece) = self.next().await {
            let piece = piece?;
            if out.is_empty() && self.eof {
                // The whole body came in one piece: no copy.
                return Ok(piece);
            }
            out.extend_from_slice(&piece);
        }
        Ok(out.freeze())
    }

    /// One frame of the body, if one is ready.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, hyper::Error>>> {
        loop {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        return Poll::Ready(Some(Ok(data)));
                    }
                    // Trailers: nothing for the relay.
                }
            }
        }
    }

    /// Drives the connection once; true when that may have made a frame ready.
    fn poll_conn(&mut self, cx: &mut Context<'_>) -> Result<bool, hyper::Error> {
        if self.conn_done {
            return Ok(false);
        }
        let Some(c) = self.conn.as_mut() else {
            return Ok(false);
        };
        match Pin::new(&mut c.conn).poll(cx) {
            Poll::Pending => Ok(true),
            Poll::Ready(Ok(())) => {
                self.conn_done = true;
                Ok(true)
            }
            Poll::Ready(Err(e)) => {
                self.conn_done = true;
                Err(e)
            }
        }
    }
}

impl Stream for Exchange {
    type Item = Result<Bytes, hyper::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        if this.eof {
            return Poll::Ready(None);
        }
        let mut gathered: Option<BytesMut> = None;
        let mut first: Option<Bytes> = None;
        // The first failure of the connection or the body: it ends the
        // gathering, but the bytes before it go out first.
        let mut failure: Option<hyper::Error> = None;
        loop {
            let frame = match this.poll_body(cx) {
                Poll::Ready(f) => Some(f),
                // The connection failed: nothing more will come.
                Poll::Pending if failure.is_some() => None,
                Poll::Pending => {
                    if let Err(e) = this.poll_conn(cx) {
                        // Frames the body still holds come before it.
                        failure = Some(e);
                    }
                    match this.poll_body(cx) {
                        Poll::Ready(f) => Some(f),
                        Poll::Pending => None,
                    }
                }
            };
            match frame {
                // Nothing more without waiting.
                None => break,
                Some(None) => {
                    this.eof = true;
                    // The whole body came: the answer stands.
                    failure = None;
                    break;
                }
                Some(Some(Err(e))) => {
                    failure.get_or_insert(e);
                    break;
                }
                Some(Some(Ok(data))) => {
                    match (&mut first, &mut gathered) {
                        (None, None) => first = Some(data),
                        (Some(f), None) => {
                            let mut b = BytesMut::with_capacity(f.len() + data.len() + 512);
                            b.extend_from_slice(f);
                            b.extend_from_slice(&data);
                            first = None;
                            gathered = Some(b);
                        }
                        (_, Some(b)) => b.extend_from_slice(&data),
                    }
                    let size = first.as_ref().map_or(0, Bytes::len)
                        + gathered.as_ref().map_or(0, BytesMut::len);
                    // After a failure the body holds at most what the
                    // connection decoded before it: take all of it.
                    if size >= MAX_GATHER && failure.is_none() {
                        break;
                    }
                }
            }
        }
        let out = match (first, gathered) {
            (Some(f), _) => Some(f),
            (None, Some(b)) => Some(b.freeze()),
            (None, None) => None,
        };
        match (out, failure) {
            (Some(b), failure) => {
                // A read that brought the last bytes and the failure: the
                // bytes now, the failure at the next poll.
                this.failed = failure;
                Poll::Ready(Some(Ok(b)))
            }
            (None, Some(e)) => Poll::Ready(Some(Err(e))),
            (None, None) if this.eof => Poll::Ready(None),
            (None, None) => Poll::Pending,
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if !self.eof || self.conn_done {
            return;
        }
        if let Some(mut c) = self.conn.take() {
            c.since = Instant::now();
            let pool = std::sync::Arc::clone(&self.pool);
            pool.checkin(&self.authority, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A raw HTTP/1.1 server: answers every request on a connection with
    /// `answer`, then (if `close_after`) closes it. Counts connections.
    async fn server(answer: &'static [u8], close_after: bool) -> (String, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let conns = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&conns);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    let mut have = Vec::new();
                    loop {
                        let n = match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        have.extend_from_slice(&buf[..n]);
                        // Requests here have a Content-Length body; wait for the head + body.
                        let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&have[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if have.len() < end + 4 + len {
                            continue;
                        }
                        have.drain(..end + 4 + len);
                        if s.write_all(answer).await.is_err() {
                            return;
                        }
                        if close_after {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}/v1/x"), conns)
    }

    fn target(s: &str) -> DirectTarget {
        DirectTarget::of(&reqwest::Url::parse(s).expect("url")).expect("target")
    }

    const PLAIN: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    #[tokio::test]
    async fn sequential_requests_share_one_connection() {
        let (u, conns) = server(PLAIN, false).await;
        let client = Arc::new(DirectClient::new(Duration::from_secs(1)));
        for _ in 0..5 {
            let r = client
                .post(&target(&u), HeaderMap::new, Bytes::from_static(b"{}"))
                .await
                .expect("post");
            assert_eq!(r.status, StatusCode::OK);
            assert_eq!(r.body.collect().await.expect("body"), "ok");
        }
        assert_eq!(conns.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_closed_while_idle_is_replaced_without_failing_the_request() {
        let (u, conns) = server(PLAIN, true).await;
        let client = Arc::new(DirectClient::new(Duration::from_secs(1)));
        for _ in 0..3 {
            let r = client
                .post(&target(&u), HeaderMap::new, Bytes::from_static(b"{}"))
                .await
                .expect("post");
            assert_eq!(r.body.collect().await.expect("body"), "ok");
            // Let the server's close arrive.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(conns.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn chunks_sent_together_arrive_as_one_piece() {
        const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
            5\r\ndata1\r\n5\r\ndata2\r\n5\r\ndata3\r\n0\r\n\r\n";
        let (u, _) = server(CHUNKED, false).await;
        let client = Arc::new(DirectClient::new(Duration::from_secs(1)));
        let r = client
            .post(&target(&u), HeaderMap::new, Bytes::new())
            .await
            .expect("post");
        let pieces: Vec<Bytes> = r.body.map(|p| p.expect("piece")).collect().await;
        assert_eq!(pieces.concat(), b"data1data2data3");
        assert!(pieces.len() <= 2, "{} pieces", pieces.len());
    }

    #[tokio::test]
    async fn chunks_that_arrive_with_the_connections_end_come_before_the_failure() {
        // No last chunk: the server closes mid-body, in the same write.
        const CUT: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
            5\r\ndata1\r\n5\r\ndata2\r\n";
        let (u, _) = server(CUT, true).await;
        let client = Arc::new(DirectClient::new(Duration::from_secs(1)));
        let r = client
            .post(&target(&u), HeaderMap::new, Bytes::new())
            .await
            .expect("post");
        let mut body = r.body;
        let mut got = Vec::new();
        let failed = loop {
            match body.next().await {
                Some(Ok(piece)) => got.extend_from_slice(&piece),
                Some(Err(_)) => break true,
                None => break false,
            }
        };
        assert!(failed, "the cut is reported");
        assert_eq!(got, b"data1data2", "after what came before it");
    }

    #[tokio::test]
    async fn an_answer_dropped_before_its_end_closes_its_connection() {
        // Announces more than it sends: the body never ends.
        const ENDLESS: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabc";
        let (u, conns) = server(ENDLESS, false).await;
        let client = Arc::new(DirectClient::new(Duration::from_secs(1)));
        let r = client
            .post(&target(&u), HeaderMap::new, Bytes::new())
            .await
            .expect("post");
        drop(r);
        let r = client
            .post(&target(&u), HeaderMap::new, Bytes::new())
            .await
            .expect("post");
        drop(r);
        assert_eq!(
            conns.load(Ordering::SeqCst),
            2,
            "the cut answer's connection was reused"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        drop(l);
        let client = Arc::new(DirectClient::new(Duration::from_secs(1)));
        let e = client
            .post(
                &target(&format!("http://{addr}/")),
                HeaderMap::new,
                Bytes::new(),
            )
            .await
            .err()
            .expect("refused");
        assert!(matches!(e, DirectError::Connect(_)), "{e}");
    }
}
