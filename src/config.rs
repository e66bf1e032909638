//! Settings, read once at start from the environment (and an optional TOML
//! file for providers, models, agents and SSO providers). Handlers never see a half-valid value.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub database_url: String,
    pub config_file: Option<PathBuf>,
    pub secret: Option<String>,
    pub admin_email: Option<String>,
    pub admin_password: Option<String>,
    pub login_token_ttl: i64,
    pub access_token_ttl: i64,
    pub refresh_token_ttl: i64,
    pub approval_ttl: i64,
    /// A sign-in's absolute lifetime, seconds, however often renewed.
    pub sign_in_max_age: i64,
    pub max_body_bytes: usize,
    /// Failed logins for one account before it is locked for `login_lockout_s`.
    pub login_max_failures: u32,
    /// Failed logins from one client address before it is locked.
    pub login_max_failures_per_addr: u32,
    pub login_lockout_s: u64,
    /// Safety-net lifetime of cached credential checks; revocations evict at once.
    pub cache_ttl_s: u64,
    pub db_max_connections: u32,
    pub db_acquire_timeout_s: u64,
    pub usage_queue: usize,
    pub pii_vault_ttl_s: i64,
    /// `GATEHOUSE_PUBLIC_URL`: where people and identity providers reach the
    /// gateway (no trailing slash). None: `http://` and the bound address.
    pub public_url: Option<String>,
    /// How many password hashes may run at once.
    pub password_hash_concurrency: usize,
    /// When set, `/metrics` asks for `Authorization: Bearer <token>`.
    pub metrics_token: Option<String>,
    /// How long a target rests after 3 failures in a row.
    pub target_cooldown_s: u64,
    /// Seconds a connection has to send a complete request head.
    pub header_timeout_s: u64,
    /// Seconds a request body has to arrive in full (else 408).
    pub body_timeout_s: u64,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Seconds an idle keep-alive connection stays open.
    pub idle_timeout_s: u64,
    /// Seconds requests in flight may run on after SIGTERM/SIGINT.
    pub shutdown_grace_s: u64,
    /// Peers whose `X-Forwarded-For` names the client (`GATEHOUSE_TRUSTED_PROXIES`).
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Threads that accept and serve connections, each with a single-threaded
    /// runtime and its own listening socket (`SO_REUSEPORT`): one per CPU.
    pub serve_threads: usize,
    /// `GATEHOUSE_MCP_SESSION_TTL_S`: an MCP session's lifetime from `initialize`.
    pub mcp_session_ttl_s: u64,
    /// `GATEHOUSE_MCP_MAX_RESULT_BYTES`: the largest `tools/call` result (compact JSON).
    pub mcp_max_result_bytes: usize,
    /// `GATEHOUSE_CURRENCY`: what every price and budget is in.
    pub currency: crate::spend::Currency,
    /// `GATEHOUSE_RESERVE_OUTPUT_TOKENS`: completion tokens a reservation
    /// counts when the body names no maximum.
    pub reserve_output_tokens: u64,
    /// `GATEHOUSE_UNPRICED_POLICY`: `admit` or `refuse`.
    pub unpriced_policy: crate::spend::budget::UnpricedPolicy,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn parse_var<T: std::str::FromStr>(name: &str, default: T) -> Result<T, ConfigError> {
    match var(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| ConfigError(format!("{name} has an invalid value: {v:?}"))),
    }
}

/// A setting that takes any positive whole number (contract, "Small values work").
fn positive_var<T>(name: &str, default: T) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + Default,
{
    let bad = |v: &str| ConfigError(format!("{name} must be a positive whole number, not {v:?}"));
    match var(name) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<T>() {
            Ok(n) if n > T::default() => Ok(n),
            _ => Err(bad(&v)),
        },
    }
}

/// `GATEHOUSE_TRUSTED_PROXIES`: comma-separated addresses or CIDR ranges.
pub fn parse_trusted_proxies(raw: &str) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    raw.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<ipnet::IpNet>()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    ConfigError(format!(
                        "GATEHOUSE_TRUSTED_PROXIES: {p:?} is neither an IP address nor a CIDR range"
                    ))
                })
        })
        .collect()
}

fn positive(name: &str, v: i64) -> Result<i64, ConfigError> {
    if v <= 0 {
        return Err(ConfigError(format!(
            "{name} must be a positive number of seconds"
        )));
    }
    Ok(v)
}

/// `GATEHOUSE_LISTEN` alone (the health check needs nothing else).
pub fn listen_from_env() -> Result<SocketAddr, ConfigError> {
    parse_var("GATEHOUSE_LISTEN", SocketAddr::from(([127, 0, 0, 1], 8080)))
}

/// `GATEHOUSE_CONFIG` alone (`config check` needs nothing else).
pub fn config_file_from_env() -> Option<PathBuf> {
    var("GATEHOUSE_CONFIG").map(PathBuf::from)
}

/// The database URL names a backend we have; the message shows only its
/// scheme, never the rest (it may hold a password).
pub fn check_database_url(url: String) -> Result<String, ConfigError> {
    let u = url.trim();
    if u.starts_with("sqlite:") || u.starts_with("postgres://") || u.starts_with("postgresql://") {
        return Ok(u.to_string());
    }
    let scheme = u.split_once("://").map_or("", |(s, _)| s);
    let shown = if !scheme.is_empty()
        && scheme.len() <= 20
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        format!("it starts with {scheme}://")
    } else {
        "it has no scheme".to_string()
    };
    Err(ConfigError(format!(
        "GATEHOUSE_DATABASE_URL must start with sqlite://, postgres:// or postgresql:// ({shown})"
    )))
}

impl Settings {
    /// How the store reaches the database.
    pub fn db_options(&self) -> crate::store::DbOptions {
        crate::store::DbOptions {
            url: self.database_url.clone(),
            max_connections: self.db_max_connections,
            acquire_timeout_s: self.db_acquire_timeout_s,
        }
    }

    pub fn from_env() -> Result<Settings, ConfigError> {
        Ok(Settings {
            listen: listen_from_env()?,
            database_url: check_database_url(
                var("GATEHOUSE_DATABASE_URL").unwrap_or_else(|| "sqlite://gatehouse.db".into()),
            )?,
            config_file: config_file_from_env(),
            secret: match var("GATEHOUSE_SECRET") {
                Some(s) if s.chars().count() < crate::secrets::MIN_SECRET_CHARS => {
                    return Err(ConfigError(format!(
                        "GATEHOUSE_SECRET must be at least {} characters (it has {}); generate one with: openssl rand -base64 48",
                        crate::secrets::MIN_SECRET_CHARS,
                        s.chars().count()
                    )))
                }
                other => other,
            },
            admin_email: var("GATEHOUSE_ADMIN_EMAIL"),
            admin_password: var("GATEHOUSE_ADMIN_PASSWORD"),
            login_token_ttl: positive(
                "GATEHOUSE_LOGIN_TOKEN_TTL",
                parse_var("GATEHOUSE_LOGIN_TOKEN_TTL", 3600)?,
            )?,
            access_token_ttl: positive(
                "GATEHOUSE_ACCESS_TOKEN_TTL",
                parse_var("GATEHOUSE_ACCESS_TOKEN_TTL", 900)?,
            )?,
            refresh_token_ttl: positive(
                "GATEHOUSE_REFRESH_TOKEN_TTL",
                parse_var("GATEHOUSE_REFRESH_TOKEN_TTL", 2_592_000)?,
            )?,
            approval_ttl: positive(
                "GATEHOUSE_APPROVAL_TTL",
                parse_var("GATEHOUSE_APPROVAL_TTL", 600)?,
            )?,
            sign_in_max_age: positive(
                "GATEHOUSE_SIGN_IN_MAX_AGE",
                parse_var("GATEHOUSE_SIGN_IN_MAX_AGE", 7_776_000)?,
            )?,
            max_body_bytes: parse_var("GATEHOUSE_MAX_BODY_BYTES", 16 * 1024 * 1024)?,
            login_max_failures: positive_var("GATEHOUSE_LOGIN_MAX_FAILURES", 5)?,
            login_max_failures_per_addr: positive_var(
                "GATEHOUSE_LOGIN_MAX_FAILURES_PER_ADDR",
                50,
            )?,
            login_lockout_s: positive_var("GATEHOUSE_LOGIN_LOCKOUT_S", 300)?,
            cache_ttl_s: parse_var("GATEHOUSE_CACHE_TTL_S", 30)?,
            db_max_connections: parse_var("GATEHOUSE_DB_MAX_CONNECTIONS", 16)?,
            db_acquire_timeout_s: parse_var("GATEHOUSE_DB_ACQUIRE_TIMEOUT_S", 2)?,
            usage_queue: parse_var("GATEHOUSE_USAGE_QUEUE", 10_000)?,
            pii_vault_ttl_s: parse_var("GATEHOUSE_PII_VAULT_TTL_S", 86_400)?,
            public_url: var("GATEHOUSE_PUBLIC_URL")
                .map(|v| parse_public_url(&v))
                .transpose()?,
            metrics_token: var("GATEHOUSE_METRICS_TOKEN"),
            password_hash_concurrency: {
                let n: usize = parse_var(
                    "GATEHOUSE_PASSWORD_HASH_CONCURRENCY",
                    std::thread::available_parallelism().map_or(2, |n| n.get()),
                )?;
                if n == 0 {
                    return Err(ConfigError(
                        "GATEHOUSE_PASSWORD_HASH_CONCURRENCY must be a positive number".into(),
                    ));
                }
                n
            },
            target_cooldown_s: parse_var(
                "GATEHOUSE_TARGET_COOLDOWN_S",
                crate::models::routing::DEFAULT_COOLDOWN_S,
            )?,
            header_timeout_s: positive_var("GATEHOUSE_HEADER_TIMEOUT_S", 30)?,
            body_timeout_s: positive_var("GATEHOUSE_BODY_TIMEOUT_S", 60)?,
            mcp_session_ttl_s: positive_var("GATEHOUSE_MCP_SESSION_TTL_S", 86_400)?,
            mcp_max_result_bytes: positive_var("GATEHOUSE_MCP_MAX_RESULT_BYTES", 8_388_608)?,
            max_connections: positive_var("GATEHOUSE_MAX_CONNECTIONS", 10_000)?,
            idle_timeout_s: positive_var("GATEHOUSE_IDLE_TIMEOUT_S", 75)?,
            shutdown_grace_s: positive_var("GATEHOUSE_SHUTDOWN_GRACE_S", 30)?,
            trusted_proxies: var("GATEHOUSE_TRUSTED_PROXIES")
                .map(|v| parse_trusted_proxies(&v))
                .transpose()?
                .unwrap_or_default(),
            serve_threads: positive_var(
                "GATEHOUSE_SERVE_THREADS",
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            )?,
            currency: crate::spend::Currency::from_env().map_err(ConfigError)?,
            reserve_output_tokens: positive_var(
                "GATEHOUSE_RESERVE_OUTPUT_TOKENS",
                crate::spend::budget::DEFAULT_RESERVE_OUTPUT_TOKENS,
            )?,
            unpriced_policy: crate::spend::budget::UnpricedPolicy::parse(
                std::env::var("GATEHOUSE_UNPRICED_POLICY").ok().as_deref(),
            )
            .map_err(ConfigError)?,
        })
    }

    /// Settings for tests and embedding: everything default, a given database.
    pub fn for_database(database_url: &str) -> Settings {
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            database_url: database_url.to_string(),
            config_file: None,
            secret: None,
            admin_email: None,
            admin_password: None,
            login_token_ttl: 3600,
            access_token_ttl: 900,
            refresh_token_ttl: 2_592_000,
            approval_ttl: 600,
            sign_in_max_age: 7_776_000,
            max_body_bytes: 16 * 1024 * 1024,
            login_max_failures: 5,
            login_max_failures_per_addr: 50,
            login_lockout_s: 300,
            cache_ttl_s: 30,
            db_max_connections: 16,
            db_acquire_timeout_s: 2,
            usage_queue: 10_000,
            pii_vault_ttl_s: 86_400,
            public_url: None,
            metrics_token: None,
            password_hash_concurrency: 2,
            target_cooldown_s: crate::models::routing::DEFAULT_COOLDOWN_S,
            header_timeout_s: 30,
            body_timeout_s: 60,
            mcp_session_ttl_s: 86_400,
            mcp_max_result_bytes: 8_388_608,
            max_connections: 10_000,
            idle_timeout_s: 75,
            shutdown_grace_s: 30,
            trusted_proxies: Vec::new(),
            serve_threads: 1,
            currency: crate::spend::Currency::USD,
            reserve_output_tokens: crate::spend::budget::DEFAULT_RESERVE_OUTPUT_TOKENS,
            unpriced_policy: crate::spend::budget::UnpricedPolicy::Admit,
        }
    }
}

/// `GATEHOUSE_PUBLIC_URL`: an absolute http(s) URL without query or fragment;
/// a path is kept (a gateway behind a path prefix), the trailing slash is not.
pub fn parse_public_url(raw: &str) -> Result<String, ConfigError> {
    let bad = || {
        ConfigError(format!(
            "GATEHOUSE_PUBLIC_URL must be an http(s) URL like https://gatehouse.example.com, not {raw:?}"
        ))
    };
    let v = raw.trim();
    let url = url::Url::parse(v).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https")
        || url.host().is_none()
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
    {
        return Err(bad());
    }
    Ok(v.trim_end_matches('/').to_string())
}

/// Providers, models and agents as code (`GATEHOUSE_CONFIG`). Applied at start
/// as upserts, so the file is the source of truth for what it names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub providers: Vec<crate::models::NewProvider>,
    #[serde(default)]
    pub models: Vec<crate::models::ModelForm>,
    #[serde(default)]
    pub agents: Vec<serde_json::Value>,
    /// `[[sso]]`: single sign-on providers, the fields of `POST /api/admin/sso`.
    #[serde(default)]
    pub sso: Vec<crate::sso::NewSsoProvider>,
    /// `[[prices]]`: `provider`, `upstream_model` and the fields of
    /// `PUT /api/admin/prices/...` (amounts as strings).
    #[serde(default)]
    pub prices: Vec<serde_json::Value>,
    /// `[[mcp_servers]]`: the fields of `POST /api/admin/mcp-servers`.
    #[serde(default)]
    pub mcp_servers: Vec<serde_json::Value>,
}

impl FileConfig {
    pub fn load(path: &std::path::Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError(format!(
                "cannot read GATEHOUSE_CONFIG {}: {e}",
                path.display()
            ))
        })?;
        toml::from_str(&text)
            .map_err(|e| ConfigError(format!("GATEHOUSE_CONFIG {}: {e}", path.display())))
    }
}
