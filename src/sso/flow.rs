//! The SSO use cases, from provider management to a signed-in user: what the
//! HTTP routes call. Tokens are issued by the caller (the same login token as
//! a password login), so this module needs no HTTP and no token keys.

use std::time::Duration;

use super::codes::{self, IssuedCode};
use super::decision::{self, KnownUser};
use super::oidc::{Oidc, Pending};
use super::redirect;
use super::{
    Decision, NewSsoProvider, SsoError, SsoProvider, SsoProviderPatch, CODE_TTL_MS, STATE_TTL_MS,
};
use crate::secrets::{Keyring, Use};
use crate::store::sso::{flag, json_list, parse_list, SsoCodeRow, SsoProviderRow, SsoStateRow};
use crate::store::users::UserRow;
use crate::store::{now_ms, Store};

/// What an agent app sent to `authorize` (RFC 8252), unchecked.
#[derive(Clone, Debug, Default)]
pub struct AppRequest {
    pub redirect_uri: String,
    pub state: Option<String>,
    pub code_challenge: Option<String>,
    pub code_challenge_method: Option<String>,
}

/// The provider's answer at the callback, unchecked.
#[derive(Clone, Debug, Default)]
pub struct CallbackParams {
    pub state: Option<String>,
    pub code: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// A finished provider sign-in.
#[derive(Debug)]
pub struct SignedIn {
    pub user: UserRow,
    /// For an app: where to send the browser (`R?code=gtc_...&state=S`).
    /// None: a console sign-in, the caller issues the session itself.
    pub app_redirect: Option<String>,
    /// Whether this sign-in created the user.
    pub created: bool,
    /// Whether `is_admin` changed (cached views of the user are stale).
    pub admin_changed: bool,
}

pub struct Sso {
    oidc: Oidc,
    keyring: Keyring,
}

impl Sso {
    /// `keyring`: seals client secrets and pending sign-ins at rest.
    pub fn new(keyring: Keyring, timeout: Duration) -> Result<Sso, SsoError> {
        Ok(Sso {
            oidc: Oidc::new(timeout)?,
            keyring,
        })
    }

    fn seal_row(&self, p: &SsoProvider, created_at: i64) -> Result<SsoProviderRow, SsoError> {
        let sealed = self
            .keyring
            .seal(Use::SsoClientSecret, &p.client_secret)
            .map_err(|e| SsoError::Internal(e.message))?;
        Ok(SsoProviderRow {
            name: p.name.clone(),
            display_name: p.display_name.clone(),
            issuer: p.issuer.clone(),
            client_id: p.client_id.clone(),
            client_secret_sealed: sealed,
            scopes: json_list(&p.scopes),
            allowed_domains: json_list(&p.allowed_domains),
            admin_group: p.admin_group.clone(),
            groups_claim: p.groups_claim.clone(),
            create_users: flag(p.create_users),
            app_redirect_uris: json_list(&p.app_redirect_uris),
            from_config: flag(p.from_config),
            created_at,
            updated_at: now_ms(),
        })
    }

    fn open_row(&self, r: &SsoProviderRow) -> Result<SsoProvider, SsoError> {
        let client_secret = self
            .keyring
            .open(Use::SsoClientSecret, &r.client_secret_sealed)
            .map_err(|_| {
            SsoError::Internal(format!(
                "the client secret of SSO provider '{}' cannot be decrypted (was GATEHOUSE_SECRET changed?); set it again with PATCH /api/admin/sso/{}",
                r.name, r.name
            ))
        })?;
        Ok(from_row_parts(r, client_secret))
    }

    /// `POST /api/admin/sso`: checks, reads discovery, stores.
    pub async fn add(&self, store: &Store, new: &NewSsoProvider) -> Result<SsoProvider, SsoError> {
        let p = new.validate(false)?;
        if store.sso_provider(&p.name).await?.is_some() {
            return Err(SsoError::Exists(p.name));
        }
        self.oidc.discover(&p.issuer).await?;
        if !store
            .insert_sso_provider(&self.seal_row(&p, now_ms())?)
            .await?
        {
            return Err(SsoError::Exists(p.name));
        }
        Ok(p)
    }

    /// A provider from the TOML config: written at every start. Discovery is
    /// not required here (a provider that is down must not stop the gateway);
    /// its sign-ins fail with a clear message until it answers.
    pub async fn put_config(
        &self,
        store: &Store,
        new: &NewSsoProvider,
    ) -> Result<SsoProvider, SsoError> {
        let p = new.validate(true)?;
        let created_at = store
            .sso_provider(&p.name)
            .await?
            .map(|r| r.created_at)
            .unwrap_or_else(now_ms);
        store
            .put_sso_provider(&self.seal_row(&p, created_at)?)
            .await?;
        self.oidc.forget(&p.issuer);
        Ok(p)
    }

    pub async fn get(&self, store: &Store, name: &str) -> Result<SsoProvider, SsoError> {
        let row = store
            .sso_provider(name)
            .await?
            .ok_or_else(|| SsoError::NotFound(name.to_string()))?;
        self.open_row(&row)
    }

    /// Every provider; one whose secret cannot be opened is still listed
    /// (listing needs no secret).
    pub async fn list(&self, store: &Store) -> Result<Vec<SsoProvider>, SsoError> {
        let rows = store.list_sso_providers().await?;
        Ok(rows
            .iter()
            .map(|r| {
                self.open_row(r)
                    .unwrap_or_else(|_| from_row_parts(r, String::new()))
            })
            .collect())
    }

    /// `PATCH /api/admin/sso/{name}`: a new issuer is discovered before it is stored.
    pub async fn patch(
        &self,
        store: &Store,
        name: &str,
        patch: &SsoProviderPatch,
    ) -> Result<SsoProvider, SsoError> {
        let row = store
            .sso_provider(name)
            .await?
            .ok_or_else(|| SsoError::NotFound(name.to_string()))?;
        // A secret that no longer opens may be replaced by the patch itself.
        let old = match (self.open_row(&row), &patch.client_secret) {
            (Ok(p), _) => p,
            (Err(_), Some(_)) => from_row_parts(&row, String::new()),
            (Err(e), None) => return Err(e),
        };
        let new = patch.apply(&old)?;
        if patch.changes_issuer(&old) {
            self.oidc.discover(&new.issuer).await?;
        }
        if !store
            .update_sso_provider(&self.seal_row(&new, row.created_at)?)
            .await?
        {
            return Err(SsoError::NotFound(name.to_string()));
        }
        self.oidc.forget(&old.issuer);
        Ok(new)
    }

    pub async fn delete(&self, store: &Store, name: &str) -> Result<(), SsoError> {
        let row = store.sso_provider(name).await?;
        if !store.delete_sso_provider(name).await? {
            return Err(SsoError::NotFound(name.to_string()));
        }
        if let Some(r) = row {
            self.oidc.forget(&r.issuer);
        }
        Ok(())
    }

    /// `GET /api/auth/sso/{name}/authorize`: the provider URL to redirect to.
    /// An app's redirect URI is checked first: when it is refused, nothing
    /// else happens (no state stored, no redirect).
    pub async fn start(
        &self,
        store: &Store,
        name: &str,
        callback_url: &str,
        app: Option<&AppRequest>,
    ) -> Result<String, SsoError> {
        let p = self.get(store, name).await?;
        let (app_redirect, app_challenge) = match app {
            Some(a) => {
                let r = redirect::check_app_redirect(&a.redirect_uri, &p.app_redirect_uris)?;
                let c = codes::check_challenge(
                    a.code_challenge.as_deref(),
                    a.code_challenge_method.as_deref(),
                )?;
                if a.state.as_ref().is_some_and(|s| s.len() > 1024) {
                    return Err(SsoError::bad_request(
                        "state",
                        "'state' must be at most 1024 characters.",
                    ));
                }
                (Some(r), Some(c))
            }
            None => (None, None),
        };
        let state = crate::auth::new_secret("");
        let (url, pending) = self.oidc.authorize_url(&p, callback_url, &state).await?;
        let sealed = serde_json::to_string(&pending)
            .map_err(|e| SsoError::Internal(e.to_string()))
            .and_then(|j| {
                self.keyring
                    .seal(Use::SsoPending, &j)
                    .map_err(|e| SsoError::Internal(e.message))
            })?;
        let now = now_ms();
        store
            .insert_sso_state(&SsoStateRow {
                state_hash: crate::auth::sha256_hex(&state),
                provider: p.name.clone(),
                sealed,
                app_redirect_uri: app_redirect,
                app_state: app.and_then(|a| a.state.clone()),
                app_code_challenge: app_challenge,
                created_at: now,
                expires_at: now + STATE_TTL_MS,
            })
            .await?;
        Ok(url)
    }

    /// `GET /api/auth/sso/{name}/callback`: checks everything, then finds,
    /// creates or updates the user. Every refusal is `SsoError::Denied`.
    pub async fn callback(
        &self,
        store: &Store,
        name: &str,
        callback_url: &str,
        params: &CallbackParams,
    ) -> Result<SignedIn, SsoError> {
        let Some(state) = params.state.as_deref().filter(|s| !s.is_empty()) else {
            return Err(SsoError::Denied(
                "The answer from the identity provider has no state: start the sign-in again."
                    .into(),
            ));
        };
        let unknown = || {
            SsoError::Denied(
                "This sign-in is unknown, was finished already, or was started elsewhere: start it again."
                    .into(),
            )
        };
        let pending_row = store
            .take_sso_state(&crate::auth::sha256_hex(state))
            .await?
            .ok_or_else(unknown)?;
        if pending_row.provider != name {
            return Err(unknown());
        }
        if now_ms() >= pending_row.expires_at {
            return Err(SsoError::Denied(
                "The sign-in took too long (over 10 minutes): start it again.".into(),
            ));
        }
        if let Some(err) = &params.error {
            return Err(SsoError::Denied(format!(
                "The identity provider refused the sign-in: {}{}",
                clip(err),
                params
                    .error_description
                    .as_deref()
                    .map(|d| format!(" ({})", clip(d)))
                    .unwrap_or_default()
            )));
        }
        let Some(code) = params.code.as_deref().filter(|c| !c.is_empty()) else {
            return Err(SsoError::Denied(
                "The identity provider sent no code.".into(),
            ));
        };
        let p = self.get(store, name).await?;
        let pending: Pending = self
            .keyring
            .open(Use::SsoPending, &pending_row.sealed)
            .ok()
            .and_then(|j| serde_json::from_str(&j).ok())
            .ok_or_else(unknown)?;
        let identity = self.oidc.finish(&p, callback_url, &pending, code).await?;
        let (user, created, admin_changed) = self.resolve_user(store, &p, &identity).await?;

        let app_redirect = match (
            &pending_row.app_redirect_uri,
            &pending_row.app_code_challenge,
        ) {
            (Some(r), Some(challenge)) => {
                let (code, hash) = codes::new_code();
                let now = now_ms();
                store
                    .insert_sso_code(&SsoCodeRow {
                        code_hash: hash,
                        user_id: user.id.clone(),
                        redirect_uri: r.clone(),
                        code_challenge: challenge.clone(),
                        created_at: now,
                        expires_at: now + CODE_TTL_MS,
                    })
                    .await?;
                Some(redirect::with_code(
                    r,
                    &code,
                    pending_row.app_state.as_deref(),
                )?)
            }
            _ => None,
        };
        Ok(SignedIn {
            user,
            app_redirect,
            created,
            admin_changed,
        })
    }

    /// Applies the decision rules and writes their outcome.
    async fn resolve_user(
        &self,
        store: &Store,
        p: &SsoProvider,
        identity: &super::Identity,
    ) -> Result<(UserRow, bool, bool), SsoError> {
        let email = decision::checked_email(p, identity)?;
        // Twice at most: a first sign-in racing another one for the same e-mail
        // finds the other's user on the second pass.
        for _ in 0..2 {
            let existing = store.user_by_email(&email).await?;
            let known = existing.as_ref().map(|u| KnownUser {
                id: u.id.clone(),
                is_active: u.active(),
                is_admin: u.admin(),
            });
            match decision::decide(p, identity, known.as_ref())? {
                Decision::Create { email, is_admin } => {
                    // No password: password login refuses this user until an admin sets one.
                    if let Some(u) = store.create_user(&email, "", is_admin).await? {
                        return Ok((u, true, false));
                    }
                }
                Decision::SignIn { user_id, set_admin } => {
                    let user = match set_admin {
                        Some(admin) => store.update_user(&user_id, None, Some(admin), None).await?,
                        None => existing,
                    };
                    return user
                        .map(|u| (u, false, set_admin.is_some()))
                        .ok_or_else(|| {
                            SsoError::Denied(format!("The account {email} was just removed."))
                        });
                }
            }
        }
        Err(SsoError::Internal(format!(
            "creating the user {email} raced with another sign-in twice"
        )))
    }

    /// `POST /api/auth/sso/token`: the user an app's code stands for.
    pub async fn exchange(
        &self,
        store: &Store,
        code: &str,
        code_verifier: &str,
        redirect_uri: &str,
    ) -> Result<UserRow, SsoError> {
        let taken = store
            .take_sso_code(&codes::hash(code))
            .await?
            .map(|r| IssuedCode {
                user_id: r.user_id,
                redirect_uri: r.redirect_uri,
                code_challenge: r.code_challenge,
                expires_at: r.expires_at,
            });
        let user_id = codes::check_exchange(taken, code_verifier, redirect_uri, now_ms())?;
        let user = store.user_by_id(&user_id).await?.ok_or_else(|| {
            SsoError::InvalidGrant("The user of this code no longer exists.".into())
        })?;
        if !user.active() {
            return Err(SsoError::InvalidGrant(
                "The user of this code is disabled.".into(),
            ));
        }
        Ok(user)
    }
}

fn from_row_parts(r: &SsoProviderRow, client_secret: String) -> SsoProvider {
    SsoProvider {
        name: r.name.clone(),
        display_name: r.display_name.clone(),
        issuer: r.issuer.clone(),
        client_id: r.client_id.clone(),
        client_secret,
        scopes: parse_list(&r.scopes),
        allowed_domains: parse_list(&r.allowed_domains),
        admin_group: r.admin_group.clone(),
        groups_claim: r.groups_claim.clone(),
        create_users: r.create_users != 0,
        app_redirect_uris: parse_list(&r.app_redirect_uris),
        from_config: r.from_config != 0,
    }
}

/// Provider-sent text in our messages: bounded, no control characters.
fn clip(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(300).collect()
}
