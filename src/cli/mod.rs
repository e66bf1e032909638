//! The command line besides `serve`: `gatehouse users ...`, `keys ...`,
//! `config check`, `healthcheck`. Same settings and database as `serve` (a
//! fresh database is created and migrated as `serve` would). Answers go to
//! standard output as JSON; a failure is one plain line on standard error.
//! Exit status: 0 done, 1 the request failed (a taken e-mail, an unknown
//! user, a database that cannot be opened), 2 bad usage or bad input.

pub mod config_check;
pub mod healthcheck;
pub mod keys;
pub mod logs;
pub mod users;

use std::io::BufRead;
use std::time::Duration;

use crate::auth::{Auth, Lifetimes};
use crate::config::Settings;
use crate::error::{Error, ErrorKind};
use crate::store::Store;

pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// Opening and migrating the database gives up after this: an unreachable
/// server must not hang a script (the contract allows 20 s in all).
const OPEN_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a command failed, and its exit status.
#[derive(Debug)]
pub struct CliError {
    pub exit: i32,
    pub message: String,
}

impl CliError {
    /// Bad usage or bad input: exit 2.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            exit: EXIT_USAGE,
            message: message.into(),
        }
    }

    /// The request failed: exit 1.
    pub fn failed(message: impl Into<String>) -> CliError {
        CliError {
            exit: EXIT_FAILED,
            message: message.into(),
        }
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        match e.kind {
            ErrorKind::Invalid => CliError::usage(e.message),
            _ => CliError::failed(e.message),
        }
    }
}

impl From<sqlx::Error> for CliError {
    fn from(e: sqlx::Error) -> CliError {
        CliError::from(Error::from(e))
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;

/// `url` with its password (if any) replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(_) => url.to_string(),
        Err(_) => "(an unreadable URL)".to_string(),
    }
}

/// The password of `url` as written and decoded, to scrub from driver messages.
fn url_passwords(url: &str) -> Vec<String> {
    let Some(raw) = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_string))
    else {
        return Vec::new();
    };
    let decoded = percent_decode(&raw);
    let mut out = vec![raw];
    if decoded != out[0] {
        out.push(decoded);
    }
    out.retain(|p| !p.is_empty());
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Connects to the settings' database and migrates it, as `serve` does.
pub async fn open_store(settings: &Settings) -> CliResult<Store> {
    let url = &settings.database_url;
    let shown = redact_url(url);
    let scrub = |msg: String| {
        url_passwords(url)
            .iter()
            .fold(msg, |m, p| m.replace(p.as_str(), "***"))
    };
    let opened = tokio::time::timeout(OPEN_TIMEOUT, async {
        let store = Store::connect(&settings.db_options())
            .await
            .map_err(|e| e.to_string())?;
        store.migrate().await.map_err(|e| e.to_string())?;
        Ok::<Store, String>(store)
    })
    .await;
    match opened {
        Ok(Ok(store)) => Ok(store),
        Ok(Err(e)) => Err(CliError::failed(scrub(format!(
            "cannot open the database {shown}: {e}"
        )))),
        Err(_) => Err(CliError::failed(format!(
            "cannot open the database {shown}: no answer within {} seconds",
            OPEN_TIMEOUT.as_secs()
        ))),
    }
}

/// The password from standard input: its first line, without the line ending.
pub fn read_password_stdin() -> CliResult<String> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| {
        CliError::usage(format!("cannot read the password from standard input: {e}"))
    })?;
    if line.ends_with('\n') {
        line.pop();
        if line.ends_with('\r') {
            line.pop();
        }
    }
    Ok(line)
}

/// The credential state `auth::accounts` changes users through. The command
/// line issues and checks no tokens, so its signing key is a throwaway; what
/// it changes reaches running servers through the database and, on
/// PostgreSQL, NOTIFY (on SQLite a running server notices within
/// `GATEHOUSE_CACHE_TTL_S`).
pub fn auth_for(store: &Store, settings: &Settings) -> Auth {
    let throwaway = crate::auth::new_secret("");
    Auth::new(
        store.clone(),
        throwaway.as_bytes(),
        Lifetimes {
            login_token: settings.login_token_ttl,
            access_token: settings.access_token_ttl,
            refresh_token: settings.refresh_token_ttl,
            sign_in_max_age: settings.sign_in_max_age,
        },
        Duration::from_secs(settings.cache_ttl_s.max(1)),
    )
}

/// Prints `value` as JSON on standard output.
pub fn print_json(value: &serde_json::Value) -> CliResult {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::failed(format!("cannot write the answer: {e}")))?;
    println!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_keep_everything_but_the_password() {
        assert_eq!(
            redact_url("postgres://gh:s3cr%40t@db.internal:5432/gatehouse"),
            "postgres://gh:***@db.internal:5432/gatehouse"
        );
        assert_eq!(
            redact_url("sqlite:///data/gatehouse.db"),
            "sqlite:///data/gatehouse.db"
        );
        assert_eq!(
            url_passwords("postgres://gh:s3cr%40t@db/x"),
            ["s3cr%40t", "s3cr@t"]
        );
        assert!(url_passwords("postgres://gh@db/x").is_empty());
    }
}
