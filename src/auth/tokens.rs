//! Signed tokens (HS256 JWT). Login tokens are for `/api`, access tokens for
//! one agent's `/v1/agents/{agent}` routes; the `typ` claim keeps them apart.

use std::sync::Arc;

use dashmap::DashMap;
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub sub: String,
    pub typ: String,
    pub iat: i64,
    /// Issue time in Unix milliseconds (a password change ends older login tokens).
    #[serde(default)]
    pub iat_ms: i64,
    /// Expiry in Unix milliseconds: tokens expire exactly at their lifetime.
    pub exp_ms: i64,
    pub exp: i64,
    pub jti: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agt: Option<String>,
}

pub const LOGIN: &str = "login";
pub const ACCESS: &str = "access";

#[derive(Debug, PartialEq, Eq)]
pub enum TokenError {
    Invalid,
    Expired,
}

#[derive(Clone)]
pub struct TokenKeys {
    enc: EncodingKey,
    dec: DecodingKey,
    validation: Validation,
    /// Claims of tokens whose signature checked out, by the SHA-256 of the
    /// token: an agent app sends the same access token on every request, and
    /// decoding and checking it again was a twentieth of agent chat's CPU.
    /// A signature stays valid for the key's life (the cache dies with the
    /// keys); expiry is checked on every use, and revocation is not a matter
    /// of the signature (the sign-in and the user are checked by the caller).
    /// Only digests are kept, never a token.
    verified: Arc<DashMap<[u8; 32], Arc<Claims>>>,
}

/// At most this many verified tokens are remembered; past it the cache is
/// emptied (a flood of distinct valid tokens costs a re-check, not memory).
const VERIFIED_MAX: usize = 4096;

impl TokenKeys {
    pub fn new(secret: &[u8]) -> TokenKeys {
        let mut validation = Validation::new(Algorithm::HS256);
        // We check expiry ourselves, to the millisecond and with no leeway.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        validation.leeway = 0;
        TokenKeys {
            enc: EncodingKey::from_secret(secret),
            dec: DecodingKey::from_secret(secret),
            validation,
            verified: Arc::new(DashMap::new()),
        }
    }

    pub fn issue(
        &self,
        typ: &str,
        sub: &str,
        ttl_s: i64,
        sid: Option<&str>,
        agt: Option<&str>,
    ) -> (String, Claims) {
        self.issue_until(typ, sub, ttl_s, i64::MAX, sid, agt)
    }

    /// Like [`TokenKeys::issue`], expiring at `cap_ms` (Unix ms) at the latest.
    pub fn issue_until(
        &self,
        typ: &str,
        sub: &str,
        ttl_s: i64,
        cap_ms: i64,
        sid: Option<&str>,
        agt: Option<&str>,
    ) -> (String, Claims) {
        let now = crate::store::now_ms();
        let exp_ms = (now + ttl_s * 1000).min(cap_ms);
        let claims = Claims {
            sub: sub.to_string(),
            typ: typ.to_string(),
            iat: now / 1000,
            iat_ms: now,
            exp_ms,
            exp: exp_ms.div_euclid(1000),
            jti: uuid::Uuid::new_v4().simple().to_string(),
            sid: sid.map(str::to_string),
            agt: agt.map(str::to_string),
        };
        // Encoding HS256 with a valid key cannot fail.
        let token = encode(&Header::new(Algorithm::HS256), &claims, &self.enc).unwrap_or_default();
        (token, claims)
    }

    pub fn verify(&self, token: &str) -> Result<Arc<Claims>, TokenError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let claims = match self.verified.get(&digest) {
            Some(known) => Arc::clone(&known),
            None => {
                let data = decode::<Claims>(token, &self.dec, &self.validation)
                    .map_err(|_| TokenError::Invalid)?;
                let claims = Arc::new(data.claims);
                if self.verified.len() >= VERIFIED_MAX {
                    self.verified.clear();
                }
                self.verified.insert(digest, Arc::clone(&claims));
                claims
            }
        };
        if crate::store::now_ms() >= claims.exp_ms {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_signed_with_another_secret_is_invalid() {
        let a = TokenKeys::new(b"secret-a-secret-a-secret-a-32byt");
        let b = TokenKeys::new(b"secret-b-secret-b-secret-b-32byt");
        let (t, _) = a.issue(LOGIN, "u1", 60, None, None);
        assert_eq!(b.verify(&t), Err(TokenError::Invalid));
        assert_eq!(a.verify(&t).map(|c| c.sub.clone()), Ok("u1".to_string()));
    }

    #[test]
    fn token_is_expired_exactly_at_its_lifetime() {
        let k = TokenKeys::new(b"secret-a-secret-a-secret-a-32byt");
        let (t, _) = k.issue(LOGIN, "u1", 0, None, None);
        assert_eq!(k.verify(&t), Err(TokenError::Expired));
    }

    #[test]
    fn a_token_verified_before_still_expires_exactly_at_its_lifetime() {
        let k = TokenKeys::new(b"secret-a-secret-a-secret-a-32byt");
        let cap = crate::store::now_ms() + 80;
        let (t, _) = k.issue_until(ACCESS, "u1", 60, cap, None, None);
        assert_eq!(k.verify(&t).map(|c| c.exp_ms), Ok(cap));
        assert_eq!(k.verify(&t).map(|c| c.exp_ms), Ok(cap));
        std::thread::sleep(std::time::Duration::from_millis(
            (cap - crate::store::now_ms()).max(0) as u64 + 5,
        ));
        assert_eq!(k.verify(&t), Err(TokenError::Expired));
    }

    #[test]
    fn a_remembered_token_does_not_vouch_for_another_key_or_a_tampered_copy() {
        let a = TokenKeys::new(b"secret-a-secret-a-secret-a-32byt");
        let b = TokenKeys::new(b"secret-b-secret-b-secret-b-32byt");
        let (t, _) = a.issue(ACCESS, "u1", 60, None, None);
        assert!(a.verify(&t).is_ok());
        assert_eq!(b.verify(&t), Err(TokenError::Invalid));
        let mut tampered = t.clone();
        tampered.push('A');
        assert_eq!(a.verify(&tampered), Err(TokenError::Invalid));
        assert!(a.verify(&t).is_ok());
    }

    #[test]
    fn the_cache_of_verified_tokens_stays_bounded() {
        let k = TokenKeys::new(b"secret-a-secret-a-secret-a-32byt");
        for i in 0..VERIFIED_MAX + 10 {
            let (t, _) = k.issue(ACCESS, &format!("u{i}"), 60, None, None);
            assert_eq!(k.verify(&t).map(|c| c.sub.clone()), Ok(format!("u{i}")));
        }
        assert!(k.verified.len() <= VERIFIED_MAX);
    }

    #[test]
    fn tampered_payload_is_invalid() {
        let k = TokenKeys::new(b"secret-a-secret-a-secret-a-32byt");
        let (t, _) = k.issue(LOGIN, "u1", 60, None, None);
        let mut parts: Vec<String> = t.split('.').map(str::to_string).collect();
        parts[1].push('A');
        assert_eq!(k.verify(&parts.join(".")), Err(TokenError::Invalid));
    }
}
