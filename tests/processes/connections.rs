//! Connections (contract, "Hardening" → "Connections", "Small values work"),
//! through the real binary: header, body and idle timeouts, the connection
//! cap, slow connections that delay no one, settings refused at start, and
//! bodies over the limit that get their 413 however they arrive.

use crate::common;

use std::time::{Duration, Instant};

use common::procs::{free_port, login, post, spawn_server, Proc};
use gatehouse_stub_upstream::Stub;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn server(extra: &[(&str, &str)]) -> (Proc, Option<tempfile::TempDir>) {
    let (db, dir) = common::fresh_database().await;
    (spawn_server(&db, extra).await, dir)
}

fn host(p: &Proc) -> String {
    p.url.trim_start_matches("http://").to_string()
}

/// Reads until the peer closes the connection; how long that took, and what came.
async fn read_until_closed(s: &mut TcpStream, within: Duration) -> Option<(Duration, String)> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(start.elapsed())?;
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Some((start.elapsed(), String::from_utf8_lossy(&got).into()))
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one whole response of a keep-alive connection (head and a
/// `Content-Length` body).
async fn read_response(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("an answer within 5 s")
            .expect("read");
        assert!(n > 0, "closed before the answer was complete: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn a_connection_dribbling_its_request_head_is_closed_at_the_header_timeout() {
    let (p, _dir) = server(&[("GATEHOUSE_HEADER_TIMEOUT_S", "2")]).await;
    let mut s = TcpStream::connect(host(&p)).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (mut reader, mut writer) = s.into_split();
    // A byte every 300 ms: each arrives in time, the head never completes.
    let dribble = tokio::spawn(async move {
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if writer.write_all(b"X").await.is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(6), async {
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    let took = start.elapsed();
    dribble.abort();
    assert!(
        closed.is_ok(),
        "the slow connection was not closed within 6 s"
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(3500),
        "closed after {took:?}, not at the 2 s header timeout"
    );

    // A connection that sends nothing at all is closed too.
    let mut silent = TcpStream::connect(host(&p)).await.unwrap();
    let (took, _) = read_until_closed(&mut silent, Duration::from_secs(6))
        .await
        .expect("a silent connection is closed");
    assert!(took < Duration::from_millis(3500), "closed after {took:?}");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408_request_timeout() {
    let (p, _dir) = server(&[("GATEHOUSE_BODY_TIMEOUT_S", "2")]).await;
    let c = common::client();
    let admin = login(&c, &p.url, common::ADMIN_EMAIL, common::ADMIN_PASSWORD).await;
    let r = post(&c, &p.url, &admin, "/api/api-keys", &json!({"name": "k"})).await;
    assert_eq!(r.status(), 201);
    let key = r.json::<Value>().await.unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();

    // /api: the /api error shape.
    let mut s = TcpStream::connect(host(&p)).await.unwrap();
    s.write_all(
        b"POST /api/auth/jwt/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nusername=a",
    )
    .await
    .unwrap();
    let start = Instant::now();
    let answer = read_response(&mut s).await;
    let took = start.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["detail"]["code"], "request_timeout", "{body}");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(4000),
        "answered after {took:?}, not at the 2 s body timeout"
    );

    // /v1: the OpenAI error shape.
    let mut s = TcpStream::connect(host(&p)).await.unwrap();
    s.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{{\"model\":"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_response(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");

    // A body that comes in time, in pieces, is served.
    let mut s = TcpStream::connect(host(&p)).await.unwrap();
    let form = "username=nobody%40example.com&password=wrong-password";
    s.write_all(
        format!(
            "POST /api/auth/jwt/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
            form.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    for piece in form.as_bytes().chunks(20) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.write_all(piece).await.unwrap();
    }
    let answer = read_response(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("login_bad_credentials"), "{answer}");
}

#[tokio::test]
async fn idle_keep_alive_connections_close_after_the_idle_timeout_not_the_header_timeout() {
    let (p, _dir) = server(&[
        ("GATEHOUSE_HEADER_TIMEOUT_S", "2"),
        ("GATEHOUSE_IDLE_TIMEOUT_S", "5"),
    ])
    .await;
    let mut s = TcpStream::connect(host(&p)).await.unwrap();
    let req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(req).await.unwrap();
    assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
    // Idle for longer than the header timeout: still open.
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.write_all(req).await.unwrap();
    assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
    // Then idle: closed at the idle timeout.
    let (took, rest) = read_until_closed(&mut s, Duration::from_secs(9))
        .await
        .expect("the idle connection is closed");
    assert!(rest.is_empty(), "{rest}");
    assert!(
        took >= Duration::from_millis(4000) && took < Duration::from_millis(6500),
        "closed after {took:?}, not at the 5 s idle timeout"
    );
}

#[tokio::test]
async fn idle_connections_close_at_an_idle_timeout_shorter_than_the_header_timeout_on_every_serving_thread(
) {
    // Three serving threads, each with its own listener: thirty connections
    // leave none of them without some (the kernel spreads them by a hash of
    // the client's port; a thread gets none of thirty once in ~10^5 runs).
    // The header timeout stays at its 30 s: an idle timeout below it is what
    // the watchdog once missed, closing at the header timeout instead.
    let (p, _dir) = server(&[
        ("GATEHOUSE_SERVE_THREADS", "3"),
        ("GATEHOUSE_IDLE_TIMEOUT_S", "2"),
    ])
    .await;
    // Load on every thread while the idle connections wait.
    let url = format!("{}/healthz", p.url);
    let load: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                loop {
                    let c = reqwest::Client::builder()
                        .pool_max_idle_per_host(0)
                        .build()
                        .unwrap();
                    let _ = c.get(&url).send().await;
                }
            })
        })
        .collect();
    let mut idle = Vec::new();
    for _ in 0..30 {
        let mut s = TcpStream::connect(host(&p)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
        idle.push(tokio::spawn(async move {
            read_until_closed(&mut s, Duration::from_secs(8)).await
        }));
    }
    let mut closed_after = Vec::new();
    for c in idle {
        closed_after.push(c.await.unwrap());
    }
    for l in load {
        l.abort();
    }
    for (i, c) in closed_after.iter().enumerate() {
        let (took, rest) = c
            .as_ref()
            .unwrap_or_else(|| panic!("idle connection {i} still open 8 s after its answer"));
        assert!(rest.is_empty(), "{rest}");
        assert!(
            *took >= Duration::from_millis(1500) && *took < Duration::from_millis(4500),
            "idle connection {i} closed {took:?} after its answer, not at the 2 s idle timeout"
        );
    }
}

#[tokio::test]
async fn connections_past_the_cap_wait_until_one_ends() {
    let (p, _dir) = server(&[("GATEHOUSE_MAX_CONNECTIONS", "4")]).await;
    // The start-up health check's connection may still be open: let it go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(host(&p)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let url = format!("{}/healthz", p.url);
    let waiting = tokio::spawn(async move {
        let c = reqwest::Client::new();
        let r = c.get(url).send().await.expect("answered");
        (Instant::now(), r.status())
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiting.is_finished(), "a fifth connection was served");
    let freed = Instant::now();
    drop(held.pop());
    let (answered, status) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once a connection ended")
        .unwrap();
    assert_eq!(status, 200);
    assert!(answered.duration_since(freed) < Duration::from_secs(1));
}

/// `gatehouse serve` with one variable set; exit status and standard error.
fn serve_with(var: &str, value: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("serve")
        .env("GATEHOUSE_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env(
            "GATEHOUSE_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("g.db").display()),
        )
        .env(var, value)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn zero_negative_and_non_numbers_are_refused_at_start_naming_the_variable() {
    for var in [
        "GATEHOUSE_HEADER_TIMEOUT_S",
        "GATEHOUSE_BODY_TIMEOUT_S",
        "GATEHOUSE_MAX_CONNECTIONS",
        "GATEHOUSE_IDLE_TIMEOUT_S",
        "GATEHOUSE_SHUTDOWN_GRACE_S",
        "GATEHOUSE_LOGIN_MAX_FAILURES",
        "GATEHOUSE_LOGIN_MAX_FAILURES_PER_ADDR",
        "GATEHOUSE_LOGIN_LOCKOUT_S",
        "GATEHOUSE_SIGN_IN_MAX_AGE",
        "GATEHOUSE_PASSWORD_HASH_CONCURRENCY",
        "GATEHOUSE_SERVE_THREADS",
    ] {
        for bad in ["0", "-1", "ten", "1.5"] {
            let (code, err) = serve_with(var, bad);
            assert_eq!(code, Some(2), "{var}={bad}: {err}");
            assert!(err.contains(var), "{var}={bad}: {err}");
        }
    }
    let (code, err) = serve_with("GATEHOUSE_TRUSTED_PROXIES", "10.0.0.0/8, proxy.example");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("GATEHOUSE_TRUSTED_PROXIES"), "{err}");
}

#[tokio::test]
async fn every_connection_setting_takes_one() {
    let (p, _dir) = server(&[
        ("GATEHOUSE_HEADER_TIMEOUT_S", "1"),
        ("GATEHOUSE_BODY_TIMEOUT_S", "1"),
        ("GATEHOUSE_MAX_CONNECTIONS", "1"),
        ("GATEHOUSE_IDLE_TIMEOUT_S", "1"),
        ("GATEHOUSE_SHUTDOWN_GRACE_S", "1"),
        ("GATEHOUSE_SERVE_THREADS", "1"),
    ])
    .await;
    // One connection at a time, each served.
    for _ in 0..3 {
        let r = reqwest::Client::new()
            .get(format!("{}/healthz", p.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

/// CPU ticks (user + system) used by each serving thread of `pid`: the
/// main thread (its id is the process id; a thread just spawned still
/// carries the process's name, so names alone would not do) and `serve-*`.
fn serving_ticks(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let main = dir.file_name().and_then(|n| n.to_str()) == Some(&pid.to_string());
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let name = name.trim().to_string();
        if !main && !name.starts_with("serve-") {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces): utime is
        // the 12th, stime the 13th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.push((name, ticks));
    }
    out
}

#[tokio::test]
async fn connections_are_spread_over_every_serving_thread() {
    let (p, _dir) = server(&[("GATEHOUSE_SERVE_THREADS", "3")]).await;
    let pid = p.child.id();
    // Many short connections: the kernel spreads them over the three sockets.
    let url = format!("{}/healthz", p.url);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..300 {
                let c = reqwest::Client::builder()
                    .pool_max_idle_per_host(0)
                    .build()
                    .unwrap();
                let r = c.get(&url).send().await.unwrap();
                assert_eq!(r.status(), 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let serving = serving_ticks(pid);
    assert_eq!(
        serving.len(),
        3,
        "the main thread and two more: {serving:?}"
    );
    assert!(
        serving.iter().all(|(_, t)| *t > 0),
        "every serving thread served some: {serving:?}"
    );
}

/// A server whose chat, embeddings and rerank routes take bodies of at most
/// `limit` bytes, each route with a model on the stub; and an API key.
async fn model_server(limit: usize) -> (Proc, Option<tempfile::TempDir>, String, Stub) {
    let stub = Stub::start().await;
    let (p, dir) = server(&[("GATEHOUSE_MAX_BODY_BYTES", &limit.to_string())]).await;
    let c = common::client();
    let admin = login(&c, &p.url, common::ADMIN_EMAIL, common::ADMIN_PASSWORD).await;
    let provider = json!({"name": "stub", "type": "openai", "base_url": stub.openai_base_url()});
    assert_eq!(
        post(&c, &p.url, &admin, "/api/admin/providers", &provider)
            .await
            .status(),
        201
    );
    for (id, kind) in [("chat", "chat"), ("emb", "embeddings"), ("rr", "scoring")] {
        let model = json!({"id": id, "kind": kind, "provider": "stub", "upstream_model": "up"});
        let r = post(&c, &p.url, &admin, "/api/admin/models", &model).await;
        assert_eq!(r.status(), 201);
    }
    let r = post(&c, &p.url, &admin, "/api/api-keys", &json!({"name": "k"})).await;
    let key = r.json::<Value>().await.unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    (p, dir, key, stub)
}

const MODEL_ROUTES: [&str; 3] = ["/v1/chat/completions", "/v1/embeddings", "/v1/rerank"];

/// A valid body for `route` of exactly `len` bytes (padded in its text).
fn model_body(route: &str, len: usize) -> Vec<u8> {
    let with = |pad: &str| match route {
        "/v1/chat/completions" => {
            json!({"model": "chat", "messages": [{"role": "user", "content": pad}]})
        }
        "/v1/embeddings" => json!({"model": "emb", "input": pad}),
        _ => json!({"model": "rr", "query": pad, "documents": ["a", "b"]}),
    };
    let base = serde_json::to_vec(&with("")).unwrap().len();
    let bytes = serde_json::to_vec(&with(&"p".repeat(len - base))).unwrap();
    assert_eq!(bytes.len(), len);
    bytes
}

/// How a client sends its body.
#[derive(Clone, Copy, Debug)]
enum Sending {
    /// With `Content-Length`.
    Length,
    /// With `Transfer-Encoding: chunked`.
    Chunked,
}

/// Sends a request the way simple clients do: the whole body first, then
/// the answer is read. The body goes out in 8 KiB pieces, with a pause after
/// the first `pause_after` bytes;
/// `Err` says what failed: a write or a read cut short by the server.
async fn send_whole_then_read(
    s: &mut TcpStream,
    route: &str,
    key: &str,
    body: &[u8],
    sending: Sending,
    pause_after: Option<usize>,
) -> Result<String, String> {
    let framing = match sending {
        Sending::Length => format!("Content-Length: {}", body.len()),
        Sending::Chunked => "Transfer-Encoding: chunked".to_string(),
    };
    let head = format!(
        "POST {route} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    );
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| format!("writing the head: {e}"))?;
    let mut sent = 0;
    while sent < body.len() {
        let end = match pause_after {
            Some(at) if sent < at => at.min(sent + 8192),
            _ => sent + 8192,
        };
        let piece = &body[sent..end.min(body.len())];
        let framed = match sending {
            Sending::Length => piece.to_vec(),
            Sending::Chunked => [
                format!("{:x}\r\n", piece.len()).into_bytes(),
                piece.to_vec(),
                b"\r\n".to_vec(),
            ]
            .concat(),
        };
        s.write_all(&framed)
            .await
            .map_err(|e| format!("writing the body at byte {sent}: {e}"))?;
        sent += piece.len();
        // A pause where asked (by then an early answer has been written),
        // else a client a little slower than the server.
        let pause = if pause_after == Some(sent) { 50 } else { 1 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    if let Sending::Chunked = sending {
        s.write_all(b"0\r\n\r\n")
            .await
            .map_err(|e| format!("writing the last chunk: {e}"))?;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return Ok(text);
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Err(_) => return Err(format!("no whole answer within 10 s: {text:?}")),
            Ok(Err(e)) => return Err(format!("reading the answer: {e} (after {text:?})")),
            Ok(Ok(0)) => return Err(format!("closed before a whole answer: {text:?}")),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn assert_413(answer: &str, limit: usize, what: &str) {
    assert!(answer.starts_with("HTTP/1.1 413"), "{what}: {answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or(""))
        .unwrap_or_else(|e| panic!("{what}: {e}: {answer}"));
    assert_eq!(body["error"]["code"], "payload_too_large", "{what}: {body}");
    assert_eq!(
        body["error"]["type"], "invalid_request_error",
        "{what}: {body}"
    );
    assert_eq!(
        body["error"]["message"],
        format!("The request body is larger than the limit of {limit} bytes."),
        "{what}: {body}"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_gets_its_413_even_while_the_client_is_still_sending_and_the_server_is_busy(
) {
    const LIMIT: usize = 64 * 1024;
    let (p, _dir, key, _stub) = model_server(LIMIT).await;

    // The server kept busy all along: chat requests and new connections.
    let mut load = Vec::new();
    for i in 0..4 {
        let (url, key) = (p.url.clone(), key.clone());
        load.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            let chat = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
            loop {
                let _ = if i % 2 == 0 {
                    c.post(format!("{url}/v1/chat/completions"))
                        .bearer_auth(&key)
                        .json(&chat)
                        .send()
                        .await
                } else {
                    reqwest::Client::new()
                        .get(format!("{url}/healthz"))
                        .send()
                        .await
                };
            }
        }));
    }

    // At the limit: served; one byte past: 413.
    for route in MODEL_ROUTES {
        let mut s = TcpStream::connect(host(&p)).await.unwrap();
        let body = model_body(route, LIMIT);
        let answer = send_whole_then_read(&mut s, route, &key, &body, Sending::Length, None)
            .await
            .unwrap_or_else(|e| panic!("{route} at the limit: {e}"));
        assert!(answer.starts_with("HTTP/1.1 200"), "{route}: {answer}");
        let body = model_body(route, LIMIT + 1);
        let answer = send_whole_then_read(&mut s, route, &key, &body, Sending::Length, None)
            .await
            .unwrap_or_else(|e| panic!("{route} one byte past the limit: {e}"));
        assert_413(&answer, LIMIT, route);
    }

    // Just over the limit, many times, the client still sending when the
    // server has its answer: every time the 413, never a reset. Bodies up to
    // 4x the limit are read to their end, so the connection serves on.
    let mut sends = 0;
    for round in 0..8 {
        for route in MODEL_ROUTES {
            let (len, sending) = match round % 3 {
                0 => (LIMIT + 1, Sending::Length),
                1 => (LIMIT + 1024, Sending::Length),
                _ => (LIMIT + 1024, Sending::Chunked),
            };
            let what = format!("{route}, {len} bytes {sending:?}, round {round}");
            let body = model_body(route, len);
            // Length: the server knows from the head; chunked: once it has
            // more than the limit.
            let pause_after = match sending {
                Sending::Length => Some(4096),
                Sending::Chunked => Some(LIMIT + 1),
            };
            let mut s = TcpStream::connect(host(&p)).await.unwrap();
            let answer = send_whole_then_read(&mut s, route, &key, &body, sending, pause_after)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_413(&answer, LIMIT, &what);
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap_or_else(|e| panic!("{what}: the connection ended: {e}"));
            let next = read_response(&mut s).await;
            assert!(next.starts_with("HTTP/1.1 200"), "{what}: {next}");
            sends += 1;
        }
    }
    assert_eq!(sends, 24);

    // Far past 4x the limit: the answer comes at once and the connection
    // closes, but only after the client had its answer.
    for route in MODEL_ROUTES {
        let body = model_body(route, 16 * LIMIT);
        let mut s = TcpStream::connect(host(&p)).await.unwrap();
        let answer = send_whole_then_read(&mut s, route, &key, &body, Sending::Length, Some(4096))
            .await
            .unwrap_or_else(|e| panic!("{route}, 16x the limit: {e}"));
        assert_413(&answer, LIMIT, route);
        assert!(
            read_until_closed(&mut s, Duration::from_secs(5))
                .await
                .is_some(),
            "{route}: the connection stayed open after a refused body"
        );
    }
    for l in load {
        l.abort();
    }
}
