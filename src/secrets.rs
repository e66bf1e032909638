//! Keys derived from the one secret (`GATEHOUSE_SECRET`, or the generated one
//! of the quick start) with HKDF-SHA256, one label per use, and sealing of
//! secrets kept at rest (provider API keys, SSO client secrets) with
//! AES-256-GCM. With `GATEHOUSE_SECRET` set, a copy of the database alone
//! reveals no sealed value and forges no token.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use hkdf::Hkdf;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Hex SHA-256. Keys and refresh tokens carry 256 random bits, so a fast hash
/// is enough to make the stored value useless to a reader of the database.
pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// The shortest `GATEHOUSE_SECRET` accepted.
pub const MIN_SECRET_CHARS: usize = 32;

/// What each derived key is for; a key never serves two uses.
#[derive(Clone, Copy, Debug)]
pub enum Use {
    /// HS256 key of login and access tokens.
    TokenSigning,
    /// Sealing PII vaults.
    PiiVault,
    /// Sealing provider API keys.
    ProviderKey,
    /// Sealing SSO client secrets.
    SsoClientSecret,
    /// Sealing a pending SSO sign-in's nonce and PKCE verifier.
    SsoPending,
    /// Sealing the headers an MCP server is sent (its credentials).
    McpServerHeaders,
    /// Sealing MCP session ids (`Mcp-Session-Id`).
    McpSession,
}

impl Use {
    fn label(self) -> &'static [u8] {
        match self {
            Use::TokenSigning => b"gatehouse/v1/token-signing",
            Use::PiiVault => b"gatehouse/v1/pii-vault",
            Use::ProviderKey => b"gatehouse/v1/provider-api-key",
            Use::SsoClientSecret => b"gatehouse/v1/sso-client-secret",
            Use::SsoPending => b"gatehouse/v1/sso-pending",
            Use::McpServerHeaders => b"gatehouse/v1/mcp-server-headers",
            Use::McpSession => b"gatehouse/v1/mcp-session",
        }
    }
}

/// The prefix of a sealed value as stored.
const SEALED: &str = "sealed:v1:";

#[derive(Clone)]
pub struct Keyring {
    hkdf: Hkdf<Sha256>,
}

impl Keyring {
    pub fn new(secret: &str) -> Keyring {
        Keyring {
            hkdf: Hkdf::<Sha256>::new(Some(b"gatehouse"), secret.as_bytes()),
        }
    }

    /// The 32-byte key for one use.
    pub fn key(&self, purpose: Use) -> [u8; 32] {
        let mut out = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's limit of 255 * 32.
        let _ = self.hkdf.expand(purpose.label(), &mut out);
        out
    }

    fn cipher(&self, purpose: Use) -> Aes256Gcm {
        Aes256Gcm::new(&self.key(purpose).into())
    }

    /// Seals `plain` for `purpose`: `sealed:v1:` + base64(nonce ‖ ciphertext).
    pub fn seal(&self, purpose: Use, plain: &str) -> Result<String> {
        use rand::RngCore;
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut out = nonce.to_vec();
        out.extend(
            self.cipher(purpose)
                .encrypt(Nonce::from_slice(&nonce), plain.as_bytes())
                .map_err(|_| Error::internal("sealing a secret failed"))?,
        );
        Ok(format!(
            "{SEALED}{}",
            base64::engine::general_purpose::STANDARD.encode(out)
        ))
    }

    /// Opens a value sealed by [`Keyring::seal`]. A value without the prefix
    /// was stored before sealing existed and is returned as it is.
    pub fn open(&self, purpose: Use, stored: &str) -> Result<String> {
        let Some(b64) = stored.strip_prefix(SEALED) else {
            return Ok(stored.to_string());
        };
        let unreadable = || {
            Error::internal(
                "a sealed secret cannot be opened: was GATEHOUSE_SECRET changed? Set the secret again on the affected provider",
            )
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| unreadable())?;
        if raw.len() < 12 {
            return Err(unreadable());
        }
        let (nonce, ct) = raw.split_at(12);
        let plain = self
            .cipher(purpose)
            .decrypt(Nonce::from_slice(nonce), ct)
            .map_err(|_| unreadable())?;
        String::from_utf8(plain).map_err(|_| unreadable())
    }

    /// Whether a stored value is sealed.
    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(SEALED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_use_has_its_own_key() {
        let k = Keyring::new("0123456789abcdef0123456789abcdef");
        assert_ne!(k.key(Use::TokenSigning), k.key(Use::PiiVault));
        assert_ne!(k.key(Use::ProviderKey), k.key(Use::SsoClientSecret));
        assert_eq!(
            k.key(Use::TokenSigning),
            Keyring::new("0123456789abcdef0123456789abcdef").key(Use::TokenSigning)
        );
    }

    #[test]
    fn sealed_values_open_only_with_the_same_secret_and_use() {
        let k = Keyring::new("0123456789abcdef0123456789abcdef");
        let sealed = k.seal(Use::ProviderKey, "sk-live-123").unwrap();
        assert!(Keyring::is_sealed(&sealed));
        assert!(!sealed.contains("sk-live"));
        assert_eq!(k.open(Use::ProviderKey, &sealed).unwrap(), "sk-live-123");
        assert!(k.open(Use::SsoClientSecret, &sealed).is_err());
        let other = Keyring::new("another secret of thirty-two chars!!");
        assert!(other.open(Use::ProviderKey, &sealed).is_err());
        // Two seals of one value differ (fresh nonce).
        assert_ne!(sealed, k.seal(Use::ProviderKey, "sk-live-123").unwrap());
        // Values stored before sealing read as they are.
        assert_eq!(k.open(Use::ProviderKey, "plain").unwrap(), "plain");
    }
}
