//! The composition root's state: one `App` per server process, holding the
//! settings (read once), the store, each domain's state and the caches the
//! HTTP layer reads. Only `http/` and `lib.rs` refer to it; domain modules get
//! the parts they need as arguments.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::agents::caches::AgentCaches;
use crate::agents::Agent;
use crate::auth::{Auth, Lifetimes};
use crate::config::Settings;
use crate::models::{CatalogSnapshot, RoutingState};
use crate::runtime::{Invalidation, Metrics};
use crate::secrets::{Keyring, Use};
use crate::store::Store;
use crate::usage::UsageSink;

pub use crate::auth::KeyInfo;
pub use crate::users::UserInfo;

pub struct App {
    pub settings: Settings,
    pub store: Store,
    /// Credentials: token keys and their caches.
    pub auth: Auth,
    /// Agents, manifests' tool classes and tool decisions, cached.
    pub agents: AgentCaches,
    /// PII scanners, compiled once per list of terms.
    pub scanners: crate::pii::Scanners,
    pub catalog: RwLock<Arc<CatalogSnapshot>>,
    /// Catalog reloads started, and the latest one applied (see `reload_catalog`).
    catalog_reloads: AtomicU64,
    catalog_applied: AtomicU64,
    /// Price reloads started (see `reload_prices`).
    price_reloads: AtomicU64,
    /// Every target's health and every provider's attempt counters here.
    pub routing: RoutingState,
    pub metrics: Metrics,
    pub usage: UsageSink,
    pub http: crate::models::upstream::UpstreamClient,
    pub vaults: crate::pii::VaultStore,
    /// Limits and budgets, counted across servers (docs/limits.md).
    pub limiter: crate::limits::Limiter,
    /// The login throttle, shared by every server through the database.
    pub login_throttle: crate::limits::login::LoginThrottle,
    /// Keys derived from the deployment's secret; seals provider keys.
    pub keyring: Keyring,
    /// Single sign-on (OpenID Connect providers and flows).
    pub sso: crate::sso::Sso,
    /// `GATEHOUSE_PUBLIC_URL`, or `http://` and the bound address.
    pub public_url: String,
    /// MCP servers, as every MCP request reads them (reloaded on a change).
    pub mcp_servers: crate::mcp::McpServers,
    /// The MCP gateway's per-process state (client, sessions, audit, metrics).
    pub mcp_gateway: crate::mcp::gateway::Gateway,
}

pub type AppState = Arc<App>;

impl App {
    pub fn new(
        settings: Settings,
        store: Store,
        keyring: Keyring,
        usage: UsageSink,
        sso: crate::sso::Sso,
        public_url: String,
    ) -> App {
        let ttl = Duration::from_secs(settings.cache_ttl_s.max(1));
        let cooldown = Duration::from_secs(settings.target_cooldown_s);
        let http = crate::models::upstream::UpstreamClient::new();
        let lifetimes = Lifetimes {
            login_token: settings.login_token_ttl,
            access_token: settings.access_token_ttl,
            refresh_token: settings.refresh_token_ttl,
            sign_in_max_age: settings.sign_in_max_age,
        };
        let limiter = crate::limits::Limiter::with_currency(Some(store.clone()), settings.currency);
        let login_throttle = crate::limits::login::LoginThrottle::new(
            store.clone(),
            settings.login_lockout_s,
            settings.login_max_failures,
            settings.login_max_failures_per_addr,
        );
        let mcp_gateway = crate::mcp::gateway::Gateway::new(
            http.reqwest().clone(),
            &keyring,
            settings.mcp_session_ttl_s,
            settings.mcp_max_result_bytes,
            store.clone(),
        );
        App {
            mcp_gateway,
            limiter,
            login_throttle,
            auth: Auth::new(
                store.clone(),
                &keyring.key(Use::TokenSigning),
                lifetimes,
                ttl,
            ),
            settings,
            agents: AgentCaches::new(store.clone(), ttl),
            store,
            scanners: crate::pii::Scanners::new(),
            catalog: RwLock::new(Arc::new(CatalogSnapshot::default())),
            catalog_reloads: AtomicU64::new(0),
            catalog_applied: AtomicU64::new(0),
            price_reloads: AtomicU64::new(0),
            routing: RoutingState::new(cooldown),
            metrics: Metrics::default(),
            usage,
            http,
            vaults: crate::pii::VaultStore::new(&keyring.key(Use::PiiVault)),
            keyring,
            sso,
            public_url,
            mcp_servers: crate::mcp::McpServers::default(),
        }
    }

    pub fn catalog(&self) -> Arc<CatalogSnapshot> {
        Arc::clone(&self.catalog.read())
    }

    /// Reads the catalog again. Reloads overlap (a change made here and the
    /// notifications of changes); the one that started last wins, so a read
    /// made before a change never replaces one made after it.
    pub async fn reload_catalog(&self) -> Result<(), sqlx::Error> {
        let started = self.catalog_reloads.fetch_add(1, Ordering::SeqCst) + 1;
        let mut providers = self.store.list_providers().await?;
        for p in &mut providers {
            if let Some(stored) = p.api_key.take() {
                match self.keyring.open(Use::ProviderKey, &stored) {
                    Ok(key) => p.api_key = Some(key),
                    // Sent without a key, the upstream refuses: said once per reload.
                    Err(e) => {
                        tracing::error!(provider = %p.name, error = %e.message, "provider api key unreadable")
                    }
                }
            }
        }
        let models = self.store.list_models().await?;
        let targets = self.store.list_model_targets().await?;
        let snapshot = CatalogSnapshot::build(providers, models, targets, &self.routing);
        let mut current = self.catalog.write();
        if started > self.catalog_applied.load(Ordering::SeqCst) {
            self.catalog_applied.store(started, Ordering::SeqCst);
            snapshot.forget_unused_health(&self.routing);
            *current = Arc::new(snapshot);
        }
        Ok(())
    }

    /// The prices requests are costed with, and the currency.
    pub fn prices(&self) -> &crate::spend::Prices {
        &self.usage.prices
    }

    /// Reads the current prices again (after a change here or on another
    /// server). Overlapping reloads: the one that started last wins.
    pub async fn reload_prices(&self) -> Result<(), sqlx::Error> {
        let started = self.price_reloads.fetch_add(1, Ordering::SeqCst) + 1;
        let current = self.store.current_prices().await?;
        self.usage
            .prices
            .replace_if_newer(started, crate::spend::PriceBook::new(current));
        Ok(())
    }

    /// Applies an invalidation in this process.
    pub async fn invalidate_local(&self, inv: &Invalidation) {
        self.auth.forget(inv);
        self.agents.forget(inv);
        if *inv == Invalidation::Catalog {
            if let Err(e) = self.reload_catalog().await {
                tracing::warn!(error = %e, "catalog reload failed");
            }
            // Prices belong to (provider, upstream model) pairs: a price
            // change is told as a catalog change (docs/spend.md).
            if let Err(e) = self.reload_prices().await {
                tracing::warn!(error = %e, "price reload failed");
            }
        }
        if *inv == Invalidation::McpServers {
            self.reload_mcp_servers().await;
        }
    }

    /// Reads the MCP servers again (a failure keeps the last snapshot).
    pub async fn reload_mcp_servers(&self) {
        if let Err(e) = self.mcp_servers.reload(&self.store, &self.keyring).await {
            tracing::warn!(error = %e, "MCP server reload failed");
        }
    }

    /// Drops every cache (notifications from other servers may have been lost).
    pub async fn invalidate_everything(&self) {
        self.auth.forget_all();
        self.agents.forget_all();
        self.invalidate_local(&Invalidation::Catalog).await;
        self.reload_mcp_servers().await;
    }

    /// Applies an invalidation here and tells the other servers.
    pub async fn invalidate(&self, inv: Invalidation) {
        self.invalidate_local(&inv).await;
        crate::store::notify::publish(&self.store, &inv).await;
    }

    pub async fn user(&self, id: &str) -> Result<Option<Arc<UserInfo>>, sqlx::Error> {
        self.auth.user(id).await
    }

    /// An agent by address, from the cache or the database (then cached).
    pub async fn agent(&self, address: &str) -> Result<Option<Arc<Agent>>, sqlx::Error> {
        self.agents.agent(address).await
    }
}
