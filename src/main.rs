use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gatehouse::cli::{self, logs, CliError, CliResult};
use gatehouse::config::{self, Settings};

/// A request makes some eighty small allocations. glibc's allocator spent
/// about a tenth of the gateway's instructions on them (its bins merged
/// again on each larger allocation); mimalloc keeps them per thread.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Manage users on the gateway's database.
    #[command(subcommand)]
    Users(cli::users::UsersCommand),
    /// Manage API keys on the gateway's database.
    #[command(subcommand)]
    Keys(cli::keys::KeysCommand),
    /// Work with the config file (GATEHOUSE_CONFIG).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Exit 0 when the gateway answers 200 on /healthz, else 1.
    Healthcheck {
        /// Default: http://<GATEHOUSE_LISTEN>/healthz.
        #[arg(long)]
        url: Option<String>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a config file without starting: exit 0, or 1 listing every problem.
    Check {
        /// Default: GATEHOUSE_CONFIG.
        file: Option<PathBuf>,
    },
}

// Single-threaded: serving threads each run a runtime of their own
// (`http::serve::spawn`), this one runs the first and the background tasks.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Usage errors exit 2 with clap's message and usage text.
    let cli = Cli::parse();
    let serving = matches!(cli.command, Command::Serve);
    let format = match logs::format_from_env() {
        Ok(f) => f,
        Err(e) => fail(logs::Format::Text, &CliError::usage(e)),
    };
    match logs::filter_from_env() {
        Ok(filter) => logs::init(format, filter, !serving),
        Err(e) => fail(format, &CliError::usage(e)),
    }
    // Outside `serve` messages are plain text, whatever the log format.
    let says = if serving { format } else { logs::Format::Text };
    // Every command, not only those that read the settings (contract, "Currency").
    if let Err(e) = gatehouse::spend::Currency::from_env() {
        fail(says, &CliError::usage(e));
    }
    let settings = || Settings::from_env().map_err(|e| CliError::usage(e.to_string()));
    let done = match cli.command {
        Command::Serve => match settings() {
            Ok(s) => serve(s, format).await,
            Err(e) => Err(e),
        },
        Command::Users(cmd) => match settings() {
            Ok(s) => cli::users::run(cmd, &s).await,
            Err(e) => Err(e),
        },
        Command::Keys(cmd) => match settings() {
            Ok(s) => cli::keys::run(cmd, &s).await,
            Err(e) => Err(e),
        },
        Command::Config(ConfigCommand::Check { file }) => {
            cli::config_check::run(file.as_deref(), config::config_file_from_env().as_deref())
        }
        Command::Healthcheck { url } => match url {
            Some(url) => cli::healthcheck::run(&url).await,
            None => match config::listen_from_env() {
                Ok(listen) => cli::healthcheck::run(&cli::healthcheck::default_url(listen)).await,
                Err(e) => Err(CliError::usage(e.to_string())),
            },
        },
    };
    if let Err(e) = done {
        fail(says, &e);
    }
}

/// Writes the one-line message on standard error and exits with its status.
fn fail(format: logs::Format, e: &CliError) -> ! {
    eprintln!("{}", logs::line(format, "ERROR", &e.message));
    std::process::exit(e.exit);
}

async fn serve(settings: Settings, format: logs::Format) -> CliResult {
    gatehouse::telemetry::init();
    // Handlers first: a SIGTERM that comes while the server starts (it
    // answers before the banner is out) must stop it gracefully, not kill it.
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::terminate()).and_then(|t| Ok((t, signal(SignalKind::interrupt())?)))
    };
    let server = gatehouse::start(settings)
        .await
        .map_err(|e| CliError::failed(e.to_string()))?;
    let banner = format!("gatehouse listening on {}", server.url());
    match format {
        // Scripts wait for this line (bench/run.sh, the Python client tests).
        logs::Format::Text => println!("{banner}"),
        logs::Format::Json => println!("{}", logs::line(format, "INFO", &banner)),
    }
    let shutdown = async {
        #[cfg(unix)]
        {
            match signals {
                Ok((mut term, mut int)) => {
                    tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no SIGTERM handler; stopping on Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    };
    shutdown.await;
    server.shutdown().await;
    gatehouse::telemetry::shutdown().await;
    Ok(())
}
