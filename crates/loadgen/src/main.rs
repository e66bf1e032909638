//! `loadgen`: a lean closed-loop HTTP/1.1 load generator for Gatehouse
//! benchmarks.
//!
//! Each of `--concurrency` workers owns one keep-alive connection
//! (TCP_NODELAY) and sends requests back to back for `--warmup` + `--duration`
//! seconds; only requests started after the warm-up are measured. Prints one
//! JSON line:
//!
//! ```text
//! {"requests":N,"errors":N,"rps":F,"p50_ms":F,"p99_ms":F,"ttfb_p50_ms":F,"ttfb_p99_ms":F,...}
//! ```
//!
//! With `--rate R` the workers send R requests a second in all, on a fixed
//! schedule, instead of back to back.
//!
//! Latency is the full response time (request sent to last body byte read);
//! TTFB is the time to the first body frame (reported with `--stream`,
//! `null` otherwise). A non-2xx status, a transport error, a time-out or a
//! body not ending with `--expect-suffix` counts as an error, not a sample.

mod stats;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST};
use hyper::{HeaderMap, Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Closed-loop HTTP/1.1 load generator (one keep-alive connection per worker).
#[derive(Parser, Debug)]
#[command(name = "loadgen", version)]
struct Args {
    /// Target URL (http only), e.g. http://127.0.0.1:8080/v1/chat/completions.
    #[arg(long)]
    url: String,
    /// HTTP method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Read the request body from this file.
    #[arg(long)]
    body_file: Option<std::path::PathBuf>,
    /// Extra header `Name: value` (repeatable). A body without a
    /// Content-Type header is sent as application/json.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Number of concurrent workers, each with its own connection.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Unmeasured seconds before the measurement.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Report time to first body byte (for streamed responses).
    #[arg(long)]
    stream: bool,
    /// The body (trailing whitespace ignored) must end with this text.
    #[arg(long)]
    expect_suffix: Option<String>,
    /// Per-request time-out in seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Runtime threads (1: a single-threaded runtime, the cheapest).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Requests per second in all (0: closed loop, each worker sending its
    /// next request when the last ends). Paced, the workers send on a fixed
    /// schedule (a late one catches up), so two runs offer the target the
    /// same load: closed, a slower route also gets fewer requests per
    /// wake-up, which raises every process's CPU per request.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
}

struct Target {
    host: String,
    port: u16,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    expect_suffix: Option<Vec<u8>>,
    timeout: Duration,
}

#[derive(Default)]
struct WorkerStats {
    latencies: Vec<u64>,
    ttfbs: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    last_done: Option<Instant>,
}

impl WorkerStats {
    fn error(&mut self, measured: bool, what: impl FnOnce() -> String) {
        if measured {
            self.errors += 1;
        }
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }
}

/// What one exchange produced.
struct Outcome {
    status: u16,
    ttfb: Option<u64>,
    latency: u64,
    suffix_ok: bool,
}

fn parse_target(args: &Args) -> Result<Target, String> {
    let uri: Uri = args.url.parse().map_err(|e| format!("bad --url: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err("--url must be http://".into());
    }
    let authority = uri.authority().ok_or("--url has no host")?.clone();
    let host = authority.host().trim_matches(['[', ']']).to_string();
    let port = authority.port_u16().unwrap_or(80);
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let method: Method = args
        .method
        .to_ascii_uppercase()
        .parse()
        .map_err(|e| format!("bad --method: {e}"))?;
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => Bytes::from(b.clone()),
        (None, Some(f)) => {
            Bytes::from(std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?)
        }
        (None, None) => Bytes::new(),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        HOST,
        HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?,
    );
    for h in &args.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| format!("bad --header {h:?}: expected `Name: value`"))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|e| format!("bad header name in {h:?}: {e}"))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|e| format!("bad header value in {h:?}: {e}"))?;
        headers.append(name, value);
    }
    if !body.is_empty() && !headers.contains_key(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    Ok(Target {
        host,
        port,
        method,
        uri: path.parse().map_err(|e| format!("bad path: {e}"))?,
        headers,
        body,
        expect_suffix: args.expect_suffix.as_ref().map(|s| s.as_bytes().to_vec()),
        timeout: Duration::from_secs_f64(args.timeout),
    })
}

async fn connect(t: &Target) -> Result<SendRequest<Full<Bytes>>, String> {
    let stream = TcpStream::connect((t.host.as_str(), t.port))
        .await
        .map_err(|e| format!("connect {}:{}: {e}", t.host, t.port))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("TCP_NODELAY: {e}"))?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn exchange(
    t: &Target,
    sender: &mut SendRequest<Full<Bytes>>,
    start: Instant,
) -> Result<Outcome, String> {
    let mut req = Request::new(Full::new(t.body.clone()));
    *req.method_mut() = t.method.clone();
    *req.uri_mut() = t.uri.clone();
    *req.headers_mut() = t.headers.clone();
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut ttfb = None;
    // The last few body bytes, for --expect-suffix.
    let keep = t.expect_suffix.as_ref().map_or(0, |s| s.len() + 16);
    let mut tail: Vec<u8> = Vec::with_capacity(keep * 2);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if data.is_empty() {
                continue;
            }
            if ttfb.is_none() {
                ttfb = Some(start.elapsed().as_nanos() as u64);
            }
            if keep > 0 {
                let take = data.len().min(keep);
                tail.extend_from_slice(&data[data.len() - take..]);
                if tail.len() > keep {
                    tail.drain(..tail.len() - keep);
                }
            }
        }
    }
    let latency = start.elapsed().as_nanos() as u64;
    let suffix_ok = match &t.expect_suffix {
        None => true,
        Some(s) => tail.trim_ascii_end().ends_with(s),
    };
    Ok(Outcome {
        status,
        ttfb,
        latency,
        suffix_ok,
    })
}

/// When a paced worker sends: its first request at `next`, then one every
/// `every` (None: closed loop).
struct Pace {
    next: Instant,
    every: Duration,
}

async fn worker(
    t: Arc<Target>,
    warm_end: Instant,
    end: Instant,
    mut pace: Option<Pace>,
) -> WorkerStats {
    let mut st = WorkerStats::default();
    let mut sender: Option<SendRequest<Full<Bytes>>> = None;
    loop {
        if let Some(p) = pace.as_mut() {
            // A fixed schedule: a worker behind it sends at once.
            tokio::time::sleep_until(p.next.into()).await;
            p.next += p.every;
        }
        let now = Instant::now();
        if now >= end {
            break;
        }
        let measured = now >= warm_end;
        let s = match sender.as_mut() {
            Some(s) => s,
            None => match connect(&t).await {
                Ok(s) => sender.insert(s),
                Err(e) => {
                    st.error(measured, || e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        if s.ready().await.is_err() {
            sender = None;
            continue;
        }
        let start = Instant::now();
        let measured = start >= warm_end;
        match tokio::time::timeout(t.timeout, exchange(&t, s, start)).await {
            Ok(Ok(o)) => {
                if !(200..300).contains(&o.status) {
                    st.error(measured, || format!("HTTP status {}", o.status));
                } else if !o.suffix_ok {
                    st.error(measured, || "body lacks the expected suffix".into());
                } else if measured {
                    st.latencies.push(o.latency);
                    if let Some(f) = o.ttfb {
                        st.ttfbs.push(f);
                    }
                }
            }
            Ok(Err(e)) => {
                st.error(measured, || e);
                sender = None;
            }
            Err(_) => {
                st.error(measured, || "time-out".into());
                sender = None;
            }
        }
        if measured {
            st.last_done = Some(Instant::now());
        }
    }
    st
}

async fn run(args: Args, t: Target) -> String {
    let t = Arc::new(t);
    let begin = Instant::now();
    let warm_end = begin + Duration::from_secs_f64(args.warmup);
    let end = warm_end + Duration::from_secs_f64(args.duration);
    let workers = args.concurrency.max(1);
    // Paced: worker w starts w/R after the first, then sends every workers/R.
    let pace = |w: usize| {
        (args.rate > 0.0).then(|| Pace {
            next: begin + Duration::from_secs_f64(w as f64 / args.rate),
            every: Duration::from_secs_f64(workers as f64 / args.rate),
        })
    };
    let handles: Vec<_> = (0..workers)
        .map(|w| tokio::spawn(worker(t.clone(), warm_end, end, pace(w))))
        .collect();
    tokio::time::sleep_until(warm_end.into()).await;
    let cpu_start = cpu_seconds();
    let mut latencies = Vec::new();
    let mut ttfbs = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    let mut last_done = end;
    for h in handles {
        let st = h.await.expect("worker panicked");
        latencies.extend(st.latencies);
        ttfbs.extend(st.ttfbs);
        errors += st.errors;
        first_error = first_error.or(st.first_error);
        if let Some(d) = st.last_done {
            last_done = last_done.max(d);
        }
    }
    let cpu = cpu_start.zip(cpu_seconds()).map(|(a, b)| b - a);
    if let Some(e) = first_error {
        eprintln!("loadgen: first error: {e}");
    }
    latencies.sort_unstable();
    ttfbs.sort_unstable();
    let elapsed = last_done.saturating_duration_since(warm_end).as_secs_f64();
    let rps = if elapsed > 0.0 {
        latencies.len() as f64 / elapsed
    } else {
        0.0
    };
    let ttfb = |p| {
        if args.stream {
            stats::percentile(&ttfbs, p)
        } else {
            None
        }
    };
    format!(
        concat!(
            r#"{{"requests":{},"errors":{},"rps":{:.1},"p50_ms":{},"p99_ms":{},"#,
            r#""ttfb_p50_ms":{},"ttfb_p99_ms":{},"concurrency":{},"duration_s":{:.3},"#,
            r#""loadgen_cpu_s":{},"rate":{}}}"#
        ),
        latencies.len(),
        errors,
        rps,
        stats::json_ms(stats::percentile(&latencies, 50.0)),
        stats::json_ms(stats::percentile(&latencies, 99.0)),
        stats::json_ms(ttfb(50.0)),
        stats::json_ms(ttfb(99.0)),
        args.concurrency,
        elapsed,
        cpu.map_or("null".into(), |c| format!("{c:.2}")),
        if args.rate > 0.0 {
            format!("{:.1}", args.rate)
        } else {
            "null".into()
        },
    )
}

/// CPU time (user + system) this process has used so far, from
/// /proc/self/stat (Linux; clock ticks of 1/100 s). None elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    stats::cpu_ticks(&stat).map(|t| t as f64 / 100.0)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let target = match parse_target(&args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("loadgen: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let line = rt.block_on(run(args, target));
    println!("{line}");
    ExitCode::SUCCESS
}
