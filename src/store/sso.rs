//! Single sign-on rows: providers (secret sealed by the caller), sign-ins on
//! their way through a provider, and the one-time app codes. States and codes
//! are taken with one `DELETE ... RETURNING`, so each is used once even when
//! several servers race for it.

use sqlx::FromRow;

use super::{b, now_ms, users::is_unique_violation, Store};

#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct SsoProviderRow {
    pub name: String,
    pub display_name: String,
    pub issuer: String,
    pub client_id: String,
    pub client_secret_sealed: String,
    /// JSON arrays of strings.
    pub scopes: String,
    pub allowed_domains: String,
    pub admin_group: Option<String>,
    pub groups_claim: String,
    pub create_users: i64,
    pub app_redirect_uris: String,
    pub from_config: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

const PROVIDER_COLS: &str = "name, display_name, issuer, client_id, client_secret_sealed, scopes, \
     allowed_domains, admin_group, groups_claim, create_users, app_redirect_uris, from_config, \
     created_at, updated_at";

#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct SsoStateRow {
    pub state_hash: String,
    pub provider: String,
    /// Sealed nonce and PKCE verifier.
    pub sealed: String,
    pub app_redirect_uri: Option<String>,
    pub app_state: Option<String>,
    pub app_code_challenge: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

const STATE_COLS: &str = "state_hash, provider, sealed, app_redirect_uri, app_state, \
     app_code_challenge, created_at, expires_at";

#[derive(Clone, Debug, FromRow, PartialEq, Eq)]
pub struct SsoCodeRow {
    pub code_hash: String,
    pub user_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub created_at: i64,
    pub expires_at: i64,
}

const CODE_COLS: &str = "code_hash, user_id, redirect_uri, code_challenge, created_at, expires_at";

impl Store {
    /// Inserts a provider; `Ok(false)` when the name is taken.
    pub async fn insert_sso_provider(&self, r: &SsoProviderRow) -> Result<bool, sqlx::Error> {
        let res = sqlx::query(&format!(
            "INSERT INTO sso_providers ({PROVIDER_COLS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(&r.name)
        .bind(&r.display_name)
        .bind(&r.issuer)
        .bind(&r.client_id)
        .bind(&r.client_secret_sealed)
        .bind(&r.scopes)
        .bind(&r.allowed_domains)
        .bind(&r.admin_group)
        .bind(&r.groups_claim)
        .bind(r.create_users)
        .bind(&r.app_redirect_uris)
        .bind(r.from_config)
        .bind(r.created_at)
        .bind(r.updated_at)
        .execute(&self.pool)
        .await;
        match res {
            Ok(_) => Ok(true),
            Err(e) if is_unique_violation(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Replaces every field but `created_at`; `Ok(false)` when unknown.
    pub async fn update_sso_provider(&self, r: &SsoProviderRow) -> Result<bool, sqlx::Error> {
        let n = sqlx::query(
            "UPDATE sso_providers SET display_name = $2, issuer = $3, client_id = $4,
                client_secret_sealed = $5, scopes = $6, allowed_domains = $7, admin_group = $8,
                groups_claim = $9, create_users = $10, app_redirect_uris = $11,
                from_config = $12, updated_at = $13
             WHERE name = $1",
        )
        .bind(&r.name)
        .bind(&r.display_name)
        .bind(&r.issuer)
        .bind(&r.client_id)
        .bind(&r.client_secret_sealed)
        .bind(&r.scopes)
        .bind(&r.allowed_domains)
        .bind(&r.admin_group)
        .bind(&r.groups_claim)
        .bind(r.create_users)
        .bind(&r.app_redirect_uris)
        .bind(r.from_config)
        .bind(r.updated_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    /// The TOML config's providers: written at every start, whatever was there.
    pub async fn put_sso_provider(&self, r: &SsoProviderRow) -> Result<(), sqlx::Error> {
        if !self.update_sso_provider(r).await? && !self.insert_sso_provider(r).await? {
            // Another server inserted it between our two statements.
            self.update_sso_provider(r).await?;
        }
        Ok(())
    }

    pub async fn sso_provider(&self, name: &str) -> Result<Option<SsoProviderRow>, sqlx::Error> {
        sqlx::query_as::<_, SsoProviderRow>(&format!(
            "SELECT {PROVIDER_COLS} FROM sso_providers WHERE name = $1"
        ))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
    }

    pub async fn list_sso_providers(&self) -> Result<Vec<SsoProviderRow>, sqlx::Error> {
        sqlx::query_as::<_, SsoProviderRow>(&format!(
            "SELECT {PROVIDER_COLS} FROM sso_providers ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await
    }

    /// Deletes a provider and the sign-ins pending at it.
    pub async fn delete_sso_provider(&self, name: &str) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM sso_states WHERE provider = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let n = sqlx::query("DELETE FROM sso_providers WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }

    pub async fn insert_sso_state(&self, r: &SsoStateRow) -> Result<(), sqlx::Error> {
        sqlx::query(&format!(
            "INSERT INTO sso_states ({STATE_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(&r.state_hash)
        .bind(&r.provider)
        .bind(&r.sealed)
        .bind(&r.app_redirect_uri)
        .bind(&r.app_state)
        .bind(&r.app_code_challenge)
        .bind(r.created_at)
        .bind(r.expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes and returns a pending sign-in (expired or not: the caller says which).
    pub async fn take_sso_state(
        &self,
        state_hash: &str,
    ) -> Result<Option<SsoStateRow>, sqlx::Error> {
        sqlx::query_as::<_, SsoStateRow>(&format!(
            "DELETE FROM sso_states WHERE state_hash = $1 RETURNING {STATE_COLS}"
        ))
        .bind(state_hash)
        .fetch_optional(&self.pool)
        .await
    }

    pub async fn insert_sso_code(&self, r: &SsoCodeRow) -> Result<(), sqlx::Error> {
        sqlx::query(&format!(
            "INSERT INTO sso_codes ({CODE_COLS}) VALUES ($1, $2, $3, $4, $5, $6)"
        ))
        .bind(&r.code_hash)
        .bind(&r.user_id)
        .bind(&r.redirect_uri)
        .bind(&r.code_challenge)
        .bind(r.created_at)
        .bind(r.expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes and returns a code: any attempt uses it up, right or wrong, so a
    /// stolen code cannot be tried twice.
    pub async fn take_sso_code(&self, code_hash: &str) -> Result<Option<SsoCodeRow>, sqlx::Error> {
        sqlx::query_as::<_, SsoCodeRow>(&format!(
            "DELETE FROM sso_codes WHERE code_hash = $1 RETURNING {CODE_COLS}"
        ))
        .bind(code_hash)
        .fetch_optional(&self.pool)
        .await
    }

    /// Deletes expired states and codes; returns how many.
    pub async fn purge_expired_sso(&self) -> Result<u64, sqlx::Error> {
        let now = now_ms();
        let a = sqlx::query("DELETE FROM sso_states WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.pool)
            .await?
            .rows_affected();
        let c = sqlx::query("DELETE FROM sso_codes WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(a + c)
    }
}

/// A JSON array of strings for a TEXT column.
pub fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_string())
}

/// Reads a TEXT column written by [`json_list`]; anything else reads as empty.
pub fn parse_list(s: &str) -> Vec<String> {
    serde_json::from_str(s).unwrap_or_default()
}

pub fn flag(v: bool) -> i64 {
    b(v)
}
