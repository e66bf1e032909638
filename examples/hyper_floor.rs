//! The floor of a proxy hop built the way Gatehouse is built, for
//! `bench/run.sh` (target `hyper`): hyper's HTTP/1 server on one
//! single-threaded tokio runtime per serving thread, each with its own
//! `SO_REUSEPORT` socket (`http::serve::bind`), and the upstream called with
//! Gatehouse's own client (`models::direct`), driven in the request's task.
//! Nothing else: no axum, auth, routing, limits, usage records, JSON or
//! access log. It sends the body to the same path on the upstream and relays
//! the answer as it arrives.
//!
//! Measured beside nginx and the gateway, it splits the gateway's cost per
//! request into what the HTTP machinery costs (this) and what the features
//! cost (the rest).
//!
//! ```sh
//! cargo run --release --example hyper_floor -- 127.0.0.1:0 http://127.0.0.1:9100 [threads]
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use gatehouse::models::direct::{DirectClient, DirectTarget};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

type Body = BoxBody<Bytes, hyper::Error>;

struct Relay {
    client: Arc<DirectClient>,
    upstream: reqwest::Url,
    /// Where each benchmarked path goes, worked out once (as the gateway does).
    urls: Vec<(&'static str, DirectTarget)>,
}

const PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/embeddings", "/v1/rerank"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: hyper_floor LISTEN UPSTREAM_BASE_URL [THREADS]";
    let listen: SocketAddr = args.next().ok_or(usage)?.parse()?;
    let upstream = reqwest::Url::parse(&args.next().ok_or(usage)?)?;
    let threads = match args.next() {
        Some(n) => n.parse()?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let urls = PATHS
        .iter()
        .map(|p| Ok((*p, DirectTarget::of(&upstream.join(p)?)?)))
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let relay = Arc::new(Relay {
        client: Arc::new(DirectClient::new(Duration::from_secs(10))),
        upstream,
        urls,
    });
    let listeners = {
        // Binding registers the sockets with a runtime before handing them out.
        let setup = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let _in = setup.enter();
        gatehouse::http::serve::bind(listen, threads)?
    };
    println!("listening on http://{}", listeners[0].local_addr()?);
    let mut handles = Vec::new();
    for listener in listeners {
        let relay = Arc::clone(&relay);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        handles.push(std::thread::spawn(move || {
            runtime.block_on(accept(listener, relay));
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

async fn accept(listener: std::net::TcpListener, relay: Arc<Relay>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let relay = Arc::clone(&relay);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let relay = Arc::clone(&relay);
                async move { Ok::<_, Infallible>(relay.call(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

impl Relay {
    async fn call(&self, req: Request<Incoming>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
            return status(StatusCode::BAD_REQUEST);
        };
        let stream = memchr::memmem::find(&body, b"\"stream\":true").is_some();
        let content_type = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let path = parts.uri.path();
        let other;
        let to = match self.urls.iter().find(|(p, _)| *p == path) {
            Some((_, t)) => t,
            None => match self.upstream.join(path).ok().map(|u| DirectTarget::of(&u)) {
                Some(Ok(t)) => {
                    other = t;
                    &other
                }
                _ => return status(StatusCode::NOT_FOUND),
            },
        };
        let headers = || {
            let mut headers = HeaderMap::with_capacity(4);
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(ACCEPT, HeaderValue::from_static(content_type));
            headers
        };
        let answer = match self.client.post(to, headers, body).await {
            Ok(a) => a,
            Err(_) => return status(StatusCode::BAD_GATEWAY),
        };
        let body = StreamBody::new(answer.body.map_ok(Frame::data));
        let mut resp = Response::new(BodyExt::boxed(body));
        *resp.status_mut() = answer.status;
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        resp
    }
}

fn status(s: StatusCode) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::new())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *resp.status_mut() = s;
    resp
}
