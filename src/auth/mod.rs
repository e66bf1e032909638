//! Credentials: passwords, login and access tokens, API keys, agent sign-ins,
//! and the cache that keeps their checks off the database on the hot path.

pub mod cache;
pub mod passwords;
pub mod signins;
pub mod throttle;
pub mod tokens;

use sha2::{Digest, Sha256};

/// Hex SHA-256. Keys and refresh tokens carry 256 random bits, so a fast hash
/// is enough to make the stored value useless to a reader of the database.
pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

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
