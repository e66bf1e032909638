//! Gatehouse: a gateway for language models.

pub mod agents;
pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
pub mod error;
/// Entry points for the fuzz targets and their corpus replay: not in the
/// server that ships (feature `fuzzing`, on for the fuzz crate and the tests).
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod limits;
pub mod mcp;
pub mod models;
pub mod pii;
pub mod proxy;
pub mod runtime;
pub mod secrets;
pub mod spend;
pub mod sso;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod time;
pub mod usage;
pub mod users;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use app::{App, AppState};
use config::Settings;
use store::Store;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("configuration: {0}")]
    Config(#[from] config::ConfigError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
}

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    pub app: AppState,
    shutdown: tokio::sync::watch::Sender<bool>,
    handle: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
    usage_writer: usage::UsageWriter,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets requests in flight finish (up to
    /// `GATEHOUSE_SHUTDOWN_GRACE_S`, then ends them), writes every pending
    /// usage record, MCP audit record and last-used stamp.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        let _ = (&mut self.handle).await;
        for h in &self.background {
            h.abort();
        }
        // Bounded so the process ends within the grace period plus 5 s even
        // when the database is away.
        let within = Duration::from_secs(1);
        let _ = tokio::time::timeout(within, flush_last_used(&self.app)).await;
        let _ = tokio::time::timeout(within, self.app.limiter.flush()).await;
        futures_util::join!(
            self.usage_writer.finish(Duration::from_secs(2)),
            self.app.mcp_gateway.audit.finish(Duration::from_secs(2)),
        );
    }

    pub async fn wait(self) {
        let _ = self.handle.await;
    }
}

/// The keys of this deployment, from `GATEHOUSE_SECRET`; without it (the quick
/// start) from a secret generated once and kept in the database, so restarts
/// and other servers on the same database accept tokens already issued.
async fn keyring(settings: &Settings, store: &Store) -> Result<secrets::Keyring, StartError> {
    let material = match &settings.secret {
        Some(s) => s.clone(),
        None => {
            tracing::warn!(
                "GATEHOUSE_SECRET is not set: a generated secret kept in the database signs tokens and seals provider keys; production should set GATEHOUSE_SECRET (at least 32 characters)"
            );
            let fresh = crate::auth::new_secret("");
            store.setting_insert_or_get("token_secret", &fresh).await?
        }
    };
    Ok(secrets::Keyring::new(&material))
}

/// Provider keys stored in plain text (before 0.6) are sealed at start.
async fn seal_plain_provider_keys(
    store: &Store,
    keyring: &secrets::Keyring,
) -> Result<(), StartError> {
    for mut row in store.list_providers().await? {
        let Some(key) = row.api_key.as_deref() else {
            continue;
        };
        if secrets::Keyring::is_sealed(key) {
            continue;
        }
        row.api_key = Some(
            keyring
                .seal(secrets::Use::ProviderKey, key)
                .map_err(|e| StartError::Other(e.message))?,
        );
        store.put_provider(&row, true).await?;
    }
    Ok(())
}

async fn bootstrap_admin(settings: &Settings, store: &Store) -> Result<(), StartError> {
    let (Some(email), Some(password)) = (&settings.admin_email, &settings.admin_password) else {
        return Ok(());
    };
    let email = users::Email::parse(email)
        .map_err(|e| StartError::Other(format!("GATEHOUSE_ADMIN_EMAIL: {}", e.message)))?
        .into_string();
    // Only when no user has this e-mail: an existing account (disabled, or
    // with a changed password) is left as it is.
    if store.user_by_email(&email).await?.is_some() {
        return Ok(());
    }
    let hash = auth::passwords::hash(password.clone())
        .await
        .map_err(StartError::Other)?;
    if store.create_user(&email, &hash, true).await?.is_some() {
        tracing::info!("created the admin user from GATEHOUSE_ADMIN_EMAIL");
    }
    Ok(())
}

async fn apply_file_config(
    settings: &Settings,
    store: &Store,
    keyring: &secrets::Keyring,
    sso: &sso::Sso,
) -> Result<(), StartError> {
    let Some(path) = &settings.config_file else {
        return Ok(());
    };
    let file = config::FileConfig::load(path)?;
    for p in &file.providers {
        let mut row = p.validate().map_err(|e| {
            StartError::Other(format!(
                "GATEHOUSE_CONFIG provider {}: {}",
                p.name, e.message
            ))
        })?;
        row.api_key = row
            .api_key
            .map(|k| keyring.seal(secrets::Use::ProviderKey, &k))
            .transpose()
            .map_err(|e| StartError::Other(e.message))?;
        store.put_provider(&row, true).await?;
    }
    // Fallbacks may name models of the file or of the database, in any order.
    let providers: std::collections::HashMap<String, Option<models::ProviderType>> = store
        .list_providers()
        .await?
        .into_iter()
        .map(|p| (p.name, models::ProviderType::parse(&p.kind)))
        .collect();
    let stored = store.list_models().await?;
    let mut kinds: std::collections::HashMap<String, models::ModelKind> = stored
        .iter()
        .filter_map(|m| Some((m.id.clone(), models::ModelKind::parse(&m.kind)?)))
        .collect();
    kinds.extend(
        file.models
            .iter()
            .filter_map(|m| Some((m.id.clone(), models::ModelKind::parse(&m.kind)?))),
    );
    let mut specs = Vec::with_capacity(file.models.len());
    for m in &file.models {
        let spec = m
            .validate(|p| providers.contains_key(p), |id| kinds.get(id).copied())
            .map_err(|e| StartError::Other(format!("GATEHOUSE_CONFIG model {}: {e}", m.id)))?;
        specs.push(spec);
    }
    // Aliases against the file's other models and the database's models it does not replace.
    let stored_specs: Vec<models::ModelSpec> = stored
        .iter()
        .filter(|m| !specs.iter().any(|s| s.id == m.id))
        .filter_map(|m| models::spec_of(m, Vec::new()))
        .collect();
    for spec in &specs {
        let others = specs
            .iter()
            .chain(stored_specs.iter())
            .filter(|o| o.id != spec.id)
            .map(|o| (o.id.as_str(), o.aliases.as_slice()));
        spec.check_catalog(others, |p| providers.get(p).copied().flatten())
            .map_err(|e| StartError::Other(format!("GATEHOUSE_CONFIG model {}: {e}", spec.id)))?;
    }
    for spec in &specs {
        let (row, targets) = models::rows_of(spec);
        store.put_model(&row, &targets, true).await?;
    }
    // As PUT would: an unchanged price makes no new version on restart.
    for (i, entry) in file.prices.iter().enumerate() {
        let who = spend::price::file_price_label(entry, i);
        let (provider, upstream_model, spec) = spend::price::file_price(entry)
            .map_err(|e| StartError::Other(format!("GATEHOUSE_CONFIG {who}: {}", e.message)))?;
        if !providers.contains_key(&provider) {
            return Err(StartError::Other(format!(
                "GATEHOUSE_CONFIG {who}: there is no provider named '{provider}' in the file or the database"
            )));
        }
        store.put_price(&provider, &upstream_model, &spec).await?;
    }
    for p in &file.sso {
        sso.put_config(store, p)
            .await
            .map_err(|e| StartError::Other(format!("GATEHOUSE_CONFIG sso {}: {e}", p.name)))?;
    }
    mcp::apply_file_servers(store, keyring, &file.mcp_servers)
        .await
        .map_err(StartError::Other)?;
    let written = agents::apply_file_agents(store, &file.agents)
        .await
        .map_err(StartError::Other)?;
    for agent in &written {
        // A narrowed allowed_users list also applies to who is signed in now.
        let ended = auth::signins::end_unallowed(store, agent).await?;
        for device in ended {
            store::notify::publish(store, &runtime::Invalidation::SignIn(device)).await;
        }
    }
    Ok(())
}

async fn flush_last_used(app: &App) {
    let keys = usage::LastUsed::drain(&app.auth.last_used.api_keys);
    if !keys.is_empty() {
        if let Err(e) = app.store.touch_api_keys(&keys).await {
            tracing::warn!(error = %e, "could not write api key last_used_at");
        }
    }
    let signins = usage::LastUsed::drain(&app.auth.last_used.sign_ins);
    if !signins.is_empty() {
        if let Err(e) = app.store.touch_sign_ins(&signins).await {
            tracing::warn!(error = %e, "could not write sign-in last_used_at");
        }
    }
}

/// Connects, migrates, bootstraps and starts serving on `settings.listen`.
pub async fn start(settings: Settings) -> Result<Server, StartError> {
    auth::passwords::set_concurrency(settings.password_hash_concurrency);
    let store = Store::connect(&settings.db_options()).await?;
    store.migrate().await?;
    let keyring = keyring(&settings, &store).await?;
    seal_plain_provider_keys(&store, &keyring).await?;
    bootstrap_admin(&settings, &store).await?;
    let sso = sso::Sso::new(keyring.clone(), Duration::from_secs(10))
        .map_err(|e| StartError::Other(format!("single sign-on: {e}")))?;
    apply_file_config(&settings, &store, &keyring, &sso).await?;
    tokio::task::spawn_blocking(auth::passwords::warm_up);

    // Bound before the app is built: the default public URL names the real port.
    let listeners = http::serve::bind(settings.listen, settings.serve_threads)?;
    let addr = listeners
        .first()
        .ok_or_else(|| StartError::Other("no listening socket".to_string()))?
        .local_addr()?;
    let public_url = settings
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{addr}"));

    let prices = Arc::new(spend::Prices::new(settings.currency));
    let (usage_sink, usage_writer) = usage::start(store.clone(), settings.usage_queue, prices);
    let app: AppState = Arc::new(App::new(
        settings.clone(),
        store.clone(),
        keyring,
        usage_sink,
        sso,
        public_url,
    ));
    app.reload_catalog().await?;
    app.reload_prices().await?;
    app.mcp_servers.reload(&app.store, &app.keyring).await?;

    let mut background = Vec::new();
    // Counted by the other servers before the first request is served.
    app.limiter.announce().await?;
    background.push(app.limiter.spawn());
    let a = Arc::clone(&app);
    background.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        for n in 0u64.. {
            tick.tick().await;
            flush_last_used(&a).await;
            if n % 12 == 0 {
                if let Err(e) = a.login_throttle.cleanup().await {
                    tracing::warn!(error = %e, "forgetting old login failures failed");
                }
                // Expired PII vaults: unreadable already, now gone.
                if let Err(e) = pii::VaultStore::purge_expired(&a.store).await {
                    tracing::warn!(error = %e, "purging expired PII vaults failed");
                }
                // Abandoned SSO sign-ins and unused app codes.
                if let Err(e) = a.store.purge_expired_sso().await {
                    tracing::warn!(error = %e, "purging expired SSO states failed");
                }
                // Ended MCP sessions past their lifetime are refused anyway.
                if let Err(e) = a.store.purge_mcp_ended_sessions(store::now_ms()).await {
                    tracing::warn!(error = %e, "purging ended MCP sessions failed");
                }
            }
        }
    }));
    // Sessions ended on any server (DELETE /mcp), mirrored here within a second.
    let a = Arc::clone(&app);
    background.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut since = 0;
        loop {
            tick.tick().await;
            since = a.mcp_gateway.sync_ended(&a.store, since).await;
        }
    }));
    let heard_by = Arc::clone(&app);
    background.extend(store::listener::spawn(
        &store,
        settings.database_url.clone(),
        move |heard| {
            let app = Arc::clone(&heard_by);
            async move {
                match heard {
                    store::listener::Heard::One(inv) => app.invalidate_local(&inv).await,
                    store::listener::Heard::Everything => app.invalidate_everything().await,
                }
            }
        },
    ));

    let dispatch = http::Dispatch::new(Arc::clone(&app));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let limits = http::serve::ConnLimits {
        header_timeout: Duration::from_secs(settings.header_timeout_s),
        idle_timeout: Duration::from_secs(settings.idle_timeout_s),
        max_connections: settings.max_connections,
        shutdown_grace: Duration::from_secs(settings.shutdown_grace_s),
    };
    let handle = http::serve::spawn(listeners, dispatch, limits, rx)?;
    tracing::info!(%addr, threads = settings.serve_threads, "gatehouse listening");
    Ok(Server {
        addr,
        app,
        shutdown: tx,
        handle,
        background,
        usage_writer,
    })
}
