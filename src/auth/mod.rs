//! Credentials: passwords, login and access tokens, API keys, agent sign-ins,
//! and the cache that keeps their checks off the database on the hot path.

pub mod accounts;
pub mod console;
pub mod passwords;
pub mod signins;
pub mod tokens;

pub use crate::secrets::sha256_hex;

/// Constant-time comparison of two hashes.
pub fn ct_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A new secret with a readable prefix: `gtk_` (API key) or `gtr_` (refresh token).
pub fn new_secret(prefix: &str) -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

pub mod keys;

use std::sync::Arc;
use std::time::Duration;

use crate::runtime::{Invalidation, TtlCache};
use crate::store::Store;
use crate::users::UserInfo;

pub use keys::KeyInfo;

/// Lifetimes of what this module issues, in seconds.
#[derive(Clone, Copy, Debug)]
pub struct Lifetimes {
    pub login_token: i64,
    pub access_token: i64,
    pub refresh_token: i64,
    /// A sign-in ends this long after its creation, however often renewed.
    pub sign_in_max_age: i64,
}

/// The credential checks of one process: token keys, lifetimes, and the caches that keep validated credentials off the database
/// on the hot path. A revocation evicts here at once (and, through
/// `store::notify`, on the other servers).
pub struct Auth {
    pub store: Store,
    pub tokens: tokens::TokenKeys,
    pub lifetimes: Lifetimes,
    pub users: TtlCache<String, Arc<UserInfo>>,
    /// key hash -> key; a miss is not cached, so a new key works at once.
    pub api_keys: TtlCache<String, Arc<KeyInfo>>,
    /// access-token id hash -> its sign-in; ended ones too (ending is final).
    pub sign_ins: TtlCache<String, Arc<signins::SignInInfo>>,
    /// `last_used_at` stamps, written in batches off the request path.
    pub last_used: crate::usage::LastUsed,
}

impl Auth {
    pub fn new(store: Store, secret: &[u8], lifetimes: Lifetimes, cache_ttl: Duration) -> Auth {
        Auth {
            store,
            tokens: tokens::TokenKeys::new(secret),
            lifetimes,
            users: TtlCache::new(cache_ttl, 100_000),
            api_keys: TtlCache::new(cache_ttl, 100_000),
            sign_ins: TtlCache::new(cache_ttl, 100_000),
            last_used: crate::usage::LastUsed::default(),
        }
    }

    /// A user by id, from the cache or the database (then cached).
    pub async fn user(&self, id: &str) -> Result<Option<Arc<UserInfo>>, sqlx::Error> {
        self.users
            .get_or_load(id, || async {
                Ok(self
                    .store
                    .user_by_id(id)
                    .await?
                    .map(|row| Arc::new(UserInfo::from(&row))))
            })
            .await
    }

    /// Drops what `inv` makes stale from this module's caches.
    pub fn forget(&self, inv: &Invalidation) {
        match inv {
            Invalidation::User(id) => {
                self.users.remove(id);
                // A user's keys and sign-ins hold a copy of the user's state.
                self.api_keys.remove_where(|_, k| &k.user_id == id);
                self.sign_ins.remove_where(|_, s| &s.user_id == id);
            }
            Invalidation::ApiKey(hash) => self.api_keys.remove(hash),
            Invalidation::SignIn(device) => {
                self.sign_ins.remove_where(|_, s| &s.device_id == device)
            }
            _ => {}
        }
    }

    /// Forgets here and tells the other servers.
    pub async fn invalidate(&self, inv: Invalidation) {
        self.forget(&inv);
        crate::store::notify::publish(&self.store, &inv).await;
    }

    /// Drops every cached credential (the notification channel was lost).
    pub fn forget_all(&self) {
        self.users.clear();
        self.api_keys.clear();
        self.sign_ins.clear();
    }
}
