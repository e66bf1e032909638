//! Shared state of one server process.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::auth::cache::TtlCache;
use crate::auth::throttle::Throttle;
use crate::auth::tokens::TokenKeys;
use crate::config::Settings;
use crate::http::metrics::Metrics;
use crate::models::CatalogSnapshot;
use crate::store::keys::ApiKeyRow;
use crate::store::Store;
use crate::usage::UsageSink;

/// What the hot path needs to know about a user.
#[derive(Clone, Debug)]
pub struct UserInfo {
    pub id: String,
    pub email: String,
    pub is_admin: bool,
    pub is_active: bool,
    pub created_at: i64,
}

impl From<&crate::store::users::UserRow> for UserInfo {
    fn from(u: &crate::store::users::UserRow) -> Self {
        UserInfo {
            id: u.id.clone(),
            email: u.email.clone(),
            is_admin: u.admin(),
            is_active: u.active(),
            created_at: u.created_at,
        }
    }
}

pub struct Caches {
    pub users: TtlCache<String, Arc<UserInfo>>,
    /// key hash -> key; a miss is not cached, so a new key works at once.
    pub api_keys: TtlCache<String, Arc<KeyInfo>>,
    /// access-token id hash -> its sign-in; ended ones too (ending is final).
    pub sign_ins: TtlCache<String, Arc<crate::auth::signins::SignInInfo>>,
    /// address -> agent, read on every agent request; a miss is not cached.
    pub agents: TtlCache<String, Arc<crate::agents::Agent>>,
    /// agent|device -> tool classes of the device's latest manifest.
    pub manifests:
        TtlCache<String, Arc<std::collections::HashMap<String, crate::agents::tools::ToolClass>>>,
    /// address -> administrator decisions on the agent's tools.
    pub tools:
        TtlCache<String, Arc<std::collections::HashMap<String, crate::agents::tools::ToolStatus>>>,
    /// PII terms (joined) -> compiled scanner.
    pub scanners: TtlCache<String, Arc<gatehouse_pii::Scanner>>,
}

pub struct App {
    pub settings: Settings,
    pub store: Store,
    pub tokens: TokenKeys,
    pub caches: Caches,
    pub throttle: Throttle,
    pub catalog: RwLock<Arc<CatalogSnapshot>>,
    pub metrics: Metrics,
    pub usage: UsageSink,
    pub http: reqwest::Client,
    pub last_used: crate::usage::LastUsed,
    pub vaults: crate::pii::VaultStore,
}

pub type AppState = Arc<App>;

/// What a write changed, so every cache that may hold it drops it.
#[derive(Clone, Debug)]
pub enum Invalidation {
    User(String),
    ApiKey(String),
    /// A sign-in (by device id) ended.
    SignIn(String),
    /// An agent (by address) changed.
    Agent(String),
    /// A device's latest manifest changed (key: agent|device id).
    Manifest(String),
    /// An agent's tool decisions changed (by address).
    Tools(String),
    Catalog,
}

impl App {
    pub fn new(settings: Settings, store: Store, secret: &[u8], usage: UsageSink) -> App {
        let ttl = Duration::from_secs(settings.cache_ttl_s.max(1));
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        App {
            throttle: Throttle::new(Duration::from_secs(settings.login_lockout_s.max(1))),
            settings,
            store,
            tokens: TokenKeys::new(secret),
            caches: Caches {
                users: TtlCache::new(ttl, 100_000),
                api_keys: TtlCache::new(ttl, 100_000),
                sign_ins: TtlCache::new(ttl, 100_000),
                agents: TtlCache::new(ttl, 10_000),
                manifests: TtlCache::new(ttl, 100_000),
                tools: TtlCache::new(ttl, 10_000),
                // Scanners depend only on their terms: no revocation to wait for.
                scanners: TtlCache::new(Duration::from_secs(3600), 1_000),
            },
            catalog: RwLock::new(Arc::new(CatalogSnapshot::default())),
            metrics: Metrics::default(),
            usage,
            http,
            last_used: crate::usage::LastUsed::default(),
            vaults: crate::pii::VaultStore::new(secret),
        }
    }

    pub fn catalog(&self) -> Arc<CatalogSnapshot> {
        Arc::clone(&self.catalog.read())
    }

    pub async fn reload_catalog(&self) -> Result<(), sqlx::Error> {
        let providers = self.store.list_providers().await?;
        let models = self.store.list_models().await?;
        *self.catalog.write() = Arc::new(CatalogSnapshot::build(providers, models));
        Ok(())
    }

    /// Applies an invalidation in this process.
    pub async fn invalidate_local(&self, inv: &Invalidation) {
        match inv {
            Invalidation::User(id) => {
                self.caches.users.remove(id);
                // A user's keys and sign-ins hold a copy of the user's state.
                self.caches.api_keys.remove_where(|_, k| &k.user_id == id);
                self.caches.sign_ins.remove_where(|_, s| &s.user_id == id);
            }
            Invalidation::ApiKey(hash) => self.caches.api_keys.remove(hash),
            Invalidation::SignIn(device) => self
                .caches
                .sign_ins
                .remove_where(|_, s| &s.device_id == device),
            Invalidation::Agent(address) => self.caches.agents.remove(address),
            Invalidation::Manifest(key) => self.caches.manifests.remove(key),
            Invalidation::Tools(address) => self.caches.tools.remove(address),
            Invalidation::Catalog => {
                if let Err(e) = self.reload_catalog().await {
                    tracing::warn!(error = %e, "catalog reload failed");
                }
            }
        }
    }

    /// Applies an invalidation here and tells the other servers.
    pub async fn invalidate(&self, inv: Invalidation) {
        self.invalidate_local(&inv).await;
        crate::store::notify::publish(&self.store, &inv).await;
    }

    pub async fn user(&self, id: &str) -> Result<Option<Arc<UserInfo>>, sqlx::Error> {
        self.caches
            .users
            .get_or_load(id.to_string(), || async {
                Ok(self
                    .store
                    .user_by_id(id)
                    .await?
                    .map(|row| Arc::new(UserInfo::from(&row))))
            })
            .await
    }

    /// An agent by address, from the cache or the database (then cached).
    pub async fn agent(
        &self,
        address: &str,
    ) -> Result<Option<Arc<crate::agents::Agent>>, sqlx::Error> {
        self.caches
            .agents
            .get_or_load(address.to_string(), || async {
                let Some(row) = self.store.agent(address).await? else {
                    return Ok(None);
                };
                crate::agents::Agent::from_row(row)
                    .map(|a| Some(Arc::new(a)))
                    .map_err(|e| sqlx::Error::Decode(e.into()))
            })
            .await
    }
}

/// A validated API key as the hot path needs it.
#[derive(Clone, Debug)]
pub struct KeyInfo {
    pub id: String,
    pub user_id: String,
    pub models: Option<Vec<String>>,
    pub expires_at: Option<i64>,
}

impl KeyInfo {
    pub fn from_row(row: &ApiKeyRow) -> KeyInfo {
        KeyInfo {
            id: row.id.clone(),
            user_id: row.user_id.clone(),
            models: row
                .models
                .as_deref()
                .and_then(|m| serde_json::from_str(m).ok()),
            expires_at: row.expires_at,
        }
    }

    pub fn allows(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| x == model))
    }
}
