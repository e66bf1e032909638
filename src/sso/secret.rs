//! Client secrets and pending sign-in data sealed at rest with AES-256-GCM,
//! as the PII vaults are: a key derived from the gateway's secret, a random
//! 96-bit nonce per value, stored as base64(nonce || ciphertext || tag).

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use sha2::{Digest, Sha256};

pub struct SecretBox {
    cipher: Aes256Gcm,
}

impl SecretBox {
    /// `secret`: the gateway's signing secret. The label keeps this key apart
    /// from the other keys derived from the same secret.
    pub fn new(secret: &[u8]) -> SecretBox {
        let mut h = Sha256::new();
        h.update(b"gatehouse-sso-secret-v1");
        h.update(secret);
        SecretBox {
            cipher: Aes256Gcm::new(&h.finalize()),
        }
    }

    pub fn seal(&self, plain: &str) -> Option<String> {
        use rand::RngCore;
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut out = nonce.to_vec();
        out.extend(
            self.cipher
                .encrypt(Nonce::from_slice(&nonce), plain.as_bytes())
                .ok()?,
        );
        Some(base64::engine::general_purpose::STANDARD.encode(out))
    }

    /// None when the value was sealed with another secret or was altered.
    pub fn open(&self, sealed: &str) -> Option<String> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .ok()?;
        if raw.len() < 12 {
            return None;
        }
        let (nonce, ct) = raw.split_at(12);
        let plain = self.cipher.decrypt(Nonce::from_slice(nonce), ct).ok()?;
        String::from_utf8(plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secret_opens_only_with_the_same_gateway_secret() {
        let a = SecretBox::new(b"one");
        let sealed = a.seal("client-secret-value").unwrap();
        assert!(!sealed.contains("client-secret-value"));
        assert_eq!(a.open(&sealed).as_deref(), Some("client-secret-value"));
        assert_eq!(SecretBox::new(b"two").open(&sealed), None);
    }

    #[test]
    fn each_sealing_differs_and_tampering_is_detected() {
        let a = SecretBox::new(b"one");
        let s1 = a.seal("x").unwrap();
        assert_ne!(s1, a.seal("x").unwrap());
        let mut raw = base64::engine::general_purpose::STANDARD
            .decode(&s1)
            .unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        let tampered = base64::engine::general_purpose::STANDARD.encode(raw);
        assert_eq!(a.open(&tampered), None);
        assert_eq!(a.open("not base64!"), None);
    }
}
