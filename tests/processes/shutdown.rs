//! Graceful shutdown (contract, "Operations" → "Graceful shutdown"), through
//! the real binary and real signals: streams in flight finish, a stream past
//! the grace period is cut, new connections are refused, every answered
//! request has its usage record after a restart, and the process exits 0.

use crate::common;

use std::time::{Duration, Instant};

use common::procs::{get_json, login, post, spawn_server, Proc};
use futures_util::StreamExt;
use gatehouse_stub_upstream::{Script, Stub};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Setup {
    proc: Proc,
    db: String,
    _dir: Option<tempfile::TempDir>,
    stub: Stub,
    key: String,
}

/// A server with model `m` on the stub (upstream `up`) and an API key.
async fn setup(extra: &[(&str, &str)]) -> Setup {
    let stub = Stub::start().await;
    let (db, dir) = common::fresh_database().await;
    let proc = spawn_server(&db, extra).await;
    let c = common::client();
    let admin = login(&c, &proc.url, common::ADMIN_EMAIL, common::ADMIN_PASSWORD).await;
    for (path, body) in [
        (
            "/api/admin/providers",
            json!({"name": "stub", "type": "openai", "base_url": stub.openai_base_url(), "timeout_s": 120}),
        ),
        (
            "/api/admin/models",
            json!({"id": "m", "kind": "chat", "provider": "stub", "upstream_model": "up"}),
        ),
    ] {
        assert_eq!(post(&c, &proc.url, &admin, path, &body).await.status(), 201);
    }
    let r = post(
        &c,
        &proc.url,
        &admin,
        "/api/api-keys",
        &json!({"name": "k"}),
    )
    .await;
    let key = r.json::<Value>().await.unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    Setup {
        proc,
        db,
        _dir: dir,
        stub,
        key,
    }
}

/// A stream of `words` words, one chunk every `interval_ms`.
fn slow_stream(words: usize, interval_ms: u64) -> Script {
    Script {
        content: Some(vec!["word"; words].join(" ")),
        chunk_size: 5,
        chunk_interval_ms: interval_ms,
        ..Script::default()
    }
}

fn signal(p: &Proc, sig: &str) -> Instant {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(p.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    Instant::now()
}

/// Waits for the process to end; its exit status and when it ended.
async fn exited(p: &mut Proc, within: Duration) -> (std::process::ExitStatus, Instant) {
    let start = Instant::now();
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            return (status, Instant::now());
        }
        assert!(
            start.elapsed() < within,
            "the server did not exit within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long after `since` a new connection to `addr` was refused.
async fn refused_after(addr: &str, since: Instant) -> Duration {
    loop {
        match TcpStream::connect(addr).await {
            Err(_) => return since.elapsed(),
            Ok(_) => {
                assert!(since.elapsed() < Duration::from_secs(3), "still accepting");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The usage row of model `m` after a restart on the same database.
async fn usage_after_restart(db: &str) -> Value {
    let again = spawn_server(db, &[]).await;
    let c = common::client();
    let admin = login(&c, &again.url, common::ADMIN_EMAIL, common::ADMIN_PASSWORD).await;
    let rows = get_json(&c, &again.url, &admin, "/api/admin/usage?group_by=model").await;
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "m")
        .cloned()
        .unwrap_or(Value::Null)
}

async fn start_stream(s: &Setup) -> reqwest::Response {
    let r = common::client()
        .post(format!("{}/v1/chat/completions", s.proc.url))
        .bearer_auth(&s.key)
        .json(
            &json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r
}

#[tokio::test]
async fn sigterm_during_a_slow_stream_lets_it_finish_then_exits_0_with_its_usage_written() {
    let mut s = setup(&[("GATEHOUSE_SHUTDOWN_GRACE_S", "20")]).await;
    // About 3 s of stream: 15 chunks, 200 ms apart.
    s.stub.script("up", slow_stream(15, 200));
    let r = start_stream(&s).await;
    let mut body = r.bytes_stream();
    let first = body.next().await.expect("a first chunk").unwrap();
    assert!(!first.is_empty());

    let sent = signal(&s.proc, "TERM");
    let addr = s.proc.url.trim_start_matches("http://").to_string();
    let refused = refused_after(&addr, sent).await;
    assert!(
        refused < Duration::from_millis(500),
        "refused after {refused:?}"
    );

    let mut text = String::from_utf8_lossy(&first).to_string();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream is not cut"),
        ));
    }
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "the stream did not finish: {text}"
    );
    assert_eq!(text.matches("word").count(), 15, "{text}");

    let (status, at) = exited(&mut s.proc, Duration::from_secs(25)).await;
    assert!(status.success(), "exit status {status:?}");
    assert!(at.duration_since(sent) < Duration::from_secs(25));

    let row = usage_after_restart(&s.db).await;
    assert_eq!(row["requests"], 1, "{row}");
    assert_eq!(row["errors"], 0, "{row}");
    assert!(row["completion_tokens"].as_i64().unwrap_or(0) > 0, "{row}");
}

#[tokio::test]
async fn a_stream_longer_than_the_grace_is_cut_at_the_deadline_and_still_recorded() {
    let mut s = setup(&[("GATEHOUSE_SHUTDOWN_GRACE_S", "2")]).await;
    // About 30 s of stream.
    s.stub.script("up", slow_stream(100, 300));
    let r = start_stream(&s).await;
    let mut body = r.bytes_stream();
    body.next().await.expect("a first chunk").unwrap();

    let sent = signal(&s.proc, "TERM");
    let mut text = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(6), async {
        while let Some(Ok(chunk)) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the client did not see the stream end");
    let cut = sent.elapsed();
    assert!(
        cut >= Duration::from_millis(1500) && cut < Duration::from_millis(3500),
        "cut {cut:?} after the signal, not at the 2 s grace"
    );
    assert!(!text.contains("[DONE]"), "{text}");

    let (status, at) = exited(&mut s.proc, Duration::from_secs(8)).await;
    assert!(status.success(), "exit status {status:?}");
    assert!(
        at.duration_since(sent) < Duration::from_secs(7),
        "grace + 5 s"
    );

    let row = usage_after_restart(&s.db).await;
    assert_eq!(
        row["requests"], 1,
        "the cut stream has its usage record: {row}"
    );
}

#[tokio::test]
async fn sigint_ends_idle_connections_and_exits_at_once() {
    let mut s = setup(&[("GATEHOUSE_SHUTDOWN_GRACE_S", "30")]).await;
    // An idle keep-alive connection does not hold the shutdown.
    let mut idle = TcpStream::connect(s.proc.url.trim_start_matches("http://"))
        .await
        .unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(idle.read(&mut buf).await.unwrap() > 0);
    let sent = signal(&s.proc, "INT");
    let (status, at) = exited(&mut s.proc, Duration::from_secs(10)).await;
    assert!(status.success(), "exit status {status:?}");
    assert!(
        at.duration_since(sent) < Duration::from_secs(3),
        "took {:?}",
        at.duration_since(sent)
    );
}

#[tokio::test]
async fn a_connection_waiting_in_the_backlog_at_shutdown_is_answered_503() {
    let mut s = setup(&[
        ("GATEHOUSE_MAX_CONNECTIONS", "1"),
        ("GATEHOUSE_SHUTDOWN_GRACE_S", "2"),
    ])
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let addr = s.proc.url.trim_start_matches("http://").to_string();
    // The one connection served: a stream in flight.
    s.stub.script("up", slow_stream(100, 300));
    let r = start_stream(&s).await;
    let mut body = r.bytes_stream();
    body.next().await.expect("a first chunk").unwrap();
    // This one waits in the backlog, its request sent.
    let mut waiting = TcpStream::connect(&addr).await.unwrap();
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&s.proc, "TERM");
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), waiting.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("shutting_down"), "{text}");
    let (status, _) = exited(&mut s.proc, Duration::from_secs(8)).await;
    assert!(status.success(), "exit status {status:?}");
}
