//! Where and how logs are written. `GATEHOUSE_LOG_FORMAT`: `text` (default,
//! for people) or `json` (one object per line, the event's fields at the top
//! level). Level: `GATEHOUSE_LOG`, else `RUST_LOG`, else `info`. `serve` logs
//! to standard output; the other commands to standard error, which keeps
//! their standard output for answers.

use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// The format `GATEHOUSE_LOG_FORMAT` names; any other value is an error
/// naming the variable.
pub fn format_from_env() -> Result<Format, String> {
    match std::env::var("GATEHOUSE_LOG_FORMAT") {
        Err(_) => Ok(Format::Text),
        Ok(v) => match v.trim() {
            "" | "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            other => Err(format!(
                "GATEHOUSE_LOG_FORMAT must be text or json, not {other:?}"
            )),
        },
    }
}

/// The level filter; a filter that does not parse is an error naming its variable.
pub fn filter_from_env() -> Result<EnvFilter, String> {
    for name in ["GATEHOUSE_LOG", "RUST_LOG"] {
        if let Some(v) = std::env::var(name).ok().filter(|v| !v.trim().is_empty()) {
            return EnvFilter::try_new(v.trim())
                .map_err(|e| format!("{name} is not a log filter ({e}): {v:?}"));
        }
    }
    // sqlx reports every slow statement at info: a warning is enough.
    Ok(EnvFilter::new("info,sqlx=warn"))
}

/// Installs the process's log writer.
pub fn init(format: Format, filter: EnvFilter, to_stderr: bool) {
    use std::io::IsTerminal as _;
    // Colours only for a person at a terminal, never into files and pipes.
    let ansi = if to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match (format, to_stderr) {
        (Format::Text, false) => builder.init(),
        (Format::Text, true) => builder.with_writer(std::io::stderr).init(),
        (Format::Json, false) => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
        (Format::Json, true) => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .init(),
    }
}

/// A line `serve` writes itself (the banner, a fatal error), in the log format:
/// in JSON mode every line of `serve` is one object.
pub fn line(format: Format, level: &str, message: &str) -> String {
    match format {
        Format::Text => format!("gatehouse: {message}"),
        Format::Json => serde_json::json!({
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "level": level,
            "target": "gatehouse",
            "message": message,
        })
        .to_string(),
    }
}
