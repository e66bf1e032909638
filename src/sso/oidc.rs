//! The relying party, done by the `openidconnect` library: discovery, the
//! authorization URL (state, nonce, PKCE S256), the code exchange, the ID
//! token checks (signature with the provider's asymmetric keys, `iss`, `aud`,
//! `exp`, `nonce`) and userinfo. We only choose the policy: which algorithms,
//! when to fetch keys again, what each failure tells the user.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreClientAuthMethod,
    CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey, CoreJsonWebKeySet,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata,
    CoreResponseType, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthType, AuthorizationCode, ClaimsVerificationError, Client, ClientId,
    ClientSecret, CsrfToken, EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet,
    IdTokenFields, IdTokenVerifier, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RequestTokenError, ResponseTypes, Scope,
    SignatureVerificationError, StandardErrorResponse, StandardTokenResponse, UserInfoClaims,
};
use serde::{Deserialize, Serialize};

use super::decision::groups_from_claim;
use super::{Identity, SsoError, SsoProvider};

/// Every claim the provider sent beyond the standard ones; the groups claim
/// has an admin-chosen name, so it is looked up here by name.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ExtraClaims {
    #[serde(flatten)]
    pub claims: HashMap<String, serde_json::Value>,
}
impl AdditionalClaims for ExtraClaims {}

type IdFields = IdTokenFields<
    ExtraClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type TokenResponse = StandardTokenResponse<IdFields, CoreTokenType>;
type OidcClient = Client<
    ExtraClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    TokenResponse,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// Public-key algorithms only: an HMAC-signed ID token would be checked
/// with the client secret, which the provider's admins also know.
pub const ASYMMETRIC_ALGS: [CoreJwsSigningAlgorithm; 10] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha384,
    CoreJwsSigningAlgorithm::RsaSsaPssSha512,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
    CoreJwsSigningAlgorithm::EcdsaP384Sha384,
    CoreJwsSigningAlgorithm::EcdsaP521Sha512,
    CoreJwsSigningAlgorithm::EdDsa,
];

/// What the gateway keeps between `authorize` and the callback.
#[derive(Clone, Serialize, Deserialize)]
pub struct Pending {
    pub nonce: String,
    pub pkce_verifier: String,
}

/// A provider's discovery document (with its keys), per issuer.
struct Discovered {
    issuer: String,
    metadata: CoreProviderMetadata,
    fetched_at: std::time::Instant,
}

/// Documents are read again after this, so a provider's changed endpoints
/// reach every server without a restart. (Unknown keys are fetched at once.)
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);

pub struct Oidc {
    http: reqwest::Client,
    by_issuer: DashMap<String, Arc<Discovered>>,
}

impl Oidc {
    pub fn new(timeout: Duration) -> Result<Oidc, SsoError> {
        // No redirects: a provider's endpoints answer directly, and following
        // redirects would let a document point the gateway anywhere (SSRF).
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(|e| SsoError::Internal(format!("HTTP client: {e}")))?;
        Ok(Oidc {
            http,
            by_issuer: DashMap::new(),
        })
    }

    /// Reads and checks the issuer's discovery document and keys (at add and
    /// on first use). The library checks that the document names the same issuer.
    pub async fn discover(&self, issuer: &str) -> Result<(), SsoError> {
        self.fetch(issuer).await.map(|_| ())
    }

    async fn fetch(&self, issuer: &str) -> Result<Arc<Discovered>, SsoError> {
        let url = IssuerUrl::new(issuer.to_string())
            .map_err(|e| SsoError::Discovery(format!("The issuer URL is not valid: {e}")))?;
        let metadata = CoreProviderMetadata::discover_async(url, &self.http)
            .await
            .map_err(|e| {
                SsoError::Discovery(format!(
                    "Reading {}/.well-known/openid-configuration failed: {}",
                    issuer.trim_end_matches('/'),
                    describe_chain(&e)
                ))
            })?;
        check_metadata(&metadata)?;
        let d = Arc::new(Discovered {
            issuer: issuer.to_string(),
            metadata,
            fetched_at: std::time::Instant::now(),
        });
        self.by_issuer.insert(issuer.to_string(), Arc::clone(&d));
        Ok(d)
    }

    async fn discovered(&self, issuer: &str) -> Result<Arc<Discovered>, SsoError> {
        if let Some(d) = self.by_issuer.get(issuer) {
            if d.fetched_at.elapsed() < DISCOVERY_TTL {
                return Ok(Arc::clone(&d));
            }
        }
        self.fetch(issuer).await.map_err(|e| {
            SsoError::Denied(format!(
                "The identity provider cannot be reached or is misconfigured: {e}"
            ))
        })
    }

    /// Drops the cached document of `issuer` (after an admin changed a provider).
    pub fn forget(&self, issuer: &str) {
        self.by_issuer.remove(issuer);
    }

    fn client(p: &SsoProvider, d: &Discovered, callback: &str) -> Result<OidcClient, SsoError> {
        let redirect = RedirectUrl::new(callback.to_string())
            .map_err(|e| SsoError::Internal(format!("callback URL {callback}: {e}")))?;
        let client: OidcClient = Client::from_provider_metadata(
            d.metadata.clone(),
            ClientId::new(p.client_id.clone()),
            Some(ClientSecret::new(p.client_secret.clone())),
        )
        .set_redirect_uri(redirect);
        // HTTP Basic is the default; use the form body when that is all the provider takes.
        let methods = d.metadata.token_endpoint_auth_methods_supported();
        let post_only = methods.is_some_and(|m| {
            m.contains(&CoreClientAuthMethod::ClientSecretPost)
                && !m.contains(&CoreClientAuthMethod::ClientSecretBasic)
        });
        Ok(if post_only {
            client.set_auth_type(AuthType::RequestBody)
        } else {
            client
        })
    }

    /// The provider's authorization URL and what to keep until the callback.
    /// `state` is the gateway's own (random, kept hashed by the caller).
    pub async fn authorize_url(
        &self,
        p: &SsoProvider,
        callback: &str,
        state: &str,
    ) -> Result<(String, Pending), SsoError> {
        let d = self.discovered(&p.issuer).await?;
        let client = Self::client(p, &d, callback)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let state = state.to_string();
        let (url, _, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                move || CsrfToken::new(state),
                Nonce::new_random,
            )
            // The library always asks for openid itself.
            .add_scopes(
                p.scopes
                    .iter()
                    .filter(|s| s.as_str() != "openid")
                    .map(|s| Scope::new(s.clone())),
            )
            .set_pkce_challenge(challenge)
            .url();
        Ok((
            url.to_string(),
            Pending {
                nonce: nonce.secret().clone(),
                pkce_verifier: verifier.secret().clone(),
            },
        ))
    }

    /// Exchanges the provider's code, verifies the ID token, and reads
    /// userinfo when the token lacks the e-mail or (with `admin_group`) the groups.
    pub async fn finish(
        &self,
        p: &SsoProvider,
        callback: &str,
        pending: &Pending,
        code: &str,
    ) -> Result<Identity, SsoError> {
        let d = self.discovered(&p.issuer).await?;
        let client = Self::client(p, &d, callback)?;
        let token: TokenResponse = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| SsoError::Denied(format!("The provider has no token endpoint: {e}")))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.pkce_verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r) => SsoError::Denied(format!(
                    "The identity provider refused the sign-in code: {}{}",
                    r.error(),
                    r.error_description()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                )),
                other => SsoError::Denied(format!(
                    "The identity provider's token endpoint failed: {}",
                    describe_chain(&other)
                )),
            })?;
        let Some(id_token) = token.extra_fields().id_token() else {
            return Err(SsoError::Denied(
                "The identity provider sent no ID token.".into(),
            ));
        };
        let nonce = Nonce::new(pending.nonce.clone());
        let issuer = d.metadata.issuer().clone();
        let verify = |keys: &CoreJsonWebKeySet| {
            let verifier: IdTokenVerifier<'_, CoreJsonWebKey> = IdTokenVerifier::new_public_client(
                ClientId::new(p.client_id.clone()),
                issuer.clone(),
                keys.clone(),
            )
            .set_allowed_algs(ASYMMETRIC_ALGS);
            id_token.claims(&verifier, &nonce).cloned()
        };
        let mut verified = verify(d.metadata.jwks());
        if matches!(
            verified,
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey
            ))
        ) {
            // A key we do not know: the provider may have rotated its keys.
            let fresh = self.refetch_keys(&d).await?;
            verified = verify(fresh.metadata.jwks());
        }
        let claims = verified.map_err(|e| SsoError::Denied(explain_claims_error(&e)))?;

        let mut identity = Identity {
            subject: claims.subject().to_string(),
            email: claims.email().map(|e| e.to_string()),
            email_verified: claims.email_verified(),
            groups: claims
                .additional_claims()
                .claims
                .get(&p.groups_claim)
                .and_then(groups_from_claim),
        };
        let needs_groups = p.admin_group.is_some() && identity.groups.is_none();
        if identity.email.is_none() || identity.email_verified.is_none() || needs_groups {
            if let Ok(req) =
                client.user_info(token.access_token().clone(), Some(claims.subject().clone()))
            {
                let info: UserInfoClaims<ExtraClaims, CoreGenderClaim> =
                    req.request_async(&self.http).await.map_err(|e| {
                        SsoError::Denied(format!(
                            "Reading the user's details from the identity provider failed: {}",
                            describe_chain(&e)
                        ))
                    })?;
                // The ID token's values win; userinfo fills what it lacks.
                if identity.email.is_none() {
                    identity.email = info.email().map(|e| e.to_string());
                    identity.email_verified = info.email_verified();
                } else if identity.email_verified.is_none()
                    && info.email().map(|e| e.as_str()) == identity.email.as_deref()
                {
                    identity.email_verified = info.email_verified();
                }
                if identity.groups.is_none() {
                    identity.groups = info
                        .additional_claims()
                        .claims
                        .get(&p.groups_claim)
                        .and_then(groups_from_claim);
                }
            }
        }
        Ok(identity)
    }

    async fn refetch_keys(&self, d: &Discovered) -> Result<Arc<Discovered>, SsoError> {
        let keys = CoreJsonWebKeySet::fetch_async(d.metadata.jwks_uri(), &self.http)
            .await
            .map_err(|e| {
                SsoError::Denied(format!(
                    "The ID token is signed with a key the gateway does not know, and the provider's keys could not be read again: {}",
                    describe_chain(&e)
                ))
            })?;
        let fresh = Arc::new(Discovered {
            issuer: d.issuer.clone(),
            metadata: d.metadata.clone().set_jwks(keys),
            fetched_at: d.fetched_at,
        });
        self.by_issuer.insert(d.issuer.clone(), Arc::clone(&fresh));
        Ok(fresh)
    }
}

/// A discovery document the gateway can work with: the code flow, a token
/// endpoint, at least one public-key ID token algorithm, and some keys.
fn check_metadata(m: &CoreProviderMetadata) -> Result<(), SsoError> {
    let bad = |why: &str| SsoError::Discovery(format!("The discovery document {why}"));
    if m.token_endpoint().is_none() {
        return Err(bad("names no token_endpoint."));
    }
    let code = ResponseTypes::new(vec![CoreResponseType::Code]);
    if !m.response_types_supported().contains(&code) {
        return Err(bad(
            "does not offer the authorization-code flow (response type code).",
        ));
    }
    if !m
        .id_token_signing_alg_values_supported()
        .iter()
        .any(|a| ASYMMETRIC_ALGS.contains(a))
    {
        return Err(bad(
            "offers no public-key algorithm for ID tokens (RS256, ES256, PS256, EdDSA...).",
        ));
    }
    if m.jwks().keys().is_empty() {
        return Err(bad("points to a key set (jwks_uri) with no keys."));
    }
    Ok(())
}

fn explain_claims_error(e: &ClaimsVerificationError) -> String {
    let what = match e {
        ClaimsVerificationError::Expired(_) => "the ID token has expired",
        ClaimsVerificationError::InvalidAudience(_) => {
            "the ID token was issued for another client (audience)"
        }
        ClaimsVerificationError::InvalidIssuer(_) => "the ID token names another issuer",
        ClaimsVerificationError::InvalidNonce(_) => {
            "the ID token's nonce does not belong to this sign-in"
        }
        ClaimsVerificationError::SignatureVerification(_) => {
            "the ID token's signature does not verify with the provider's public keys"
        }
        _ => "the ID token failed a check",
    };
    format!(
        "The sign-in could not be verified: {what} ({}).",
        describe_chain(e)
    )
}

/// An error with its causes, for messages that say what went wrong.
fn describe_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}
