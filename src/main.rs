use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "gatehouse", version, about = "A gateway for language models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (settings from GATEHOUSE_* environment variables).
    Serve,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve => {
            let settings = match gatehouse::config::Settings::from_env() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("gatehouse: {e}");
                    std::process::exit(2);
                }
            };
            let server = match gatehouse::start(settings).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("gatehouse: {e}");
                    std::process::exit(1);
                }
            };
            println!("gatehouse listening on {}", server.url());
            let shutdown = async {
                let ctrl_c = tokio::signal::ctrl_c();
                #[cfg(unix)]
                {
                    let mut term =
                        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                            .expect("install SIGTERM handler");
                    tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
                }
                #[cfg(not(unix))]
                let _ = ctrl_c.await;
            };
            shutdown.await;
            server.shutdown().await;
        }
    }
}
