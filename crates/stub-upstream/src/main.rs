//! `stub-upstream --listen 127.0.0.1:9100 [--no-record]`: run the stub
//! upstream model server until killed.

use std::io::Write as _;
use std::net::SocketAddr;

use clap::Parser;
use gatehouse_stub_upstream::{Stub, StubOptions};

/// Stub OpenAI / TEI / Cohere upstream for Gatehouse tests and benchmarks.
#[derive(Parser, Debug)]
#[command(name = "stub-upstream", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:9100")]
    listen: SocketAddr,
    /// Do not record requests (for benchmarks).
    #[arg(long)]
    no_record: bool,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let stub = match Stub::try_start_with(StubOptions {
        record: !args.no_record,
        listen: Some(args.listen),
    })
    .await
    {
        Ok(stub) => stub,
        Err(e) => {
            eprintln!("stub-upstream: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {}", stub.url());
    let _ = out.flush();
    drop(out);
    std::future::pending::<()>().await;
    drop(stub);
}
