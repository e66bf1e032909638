//! MCP sessions that any server of a cluster accepts (contract: "MCP
//! gateway" → "Sessions"). Nothing is stored at `initialize`: the
//! `Mcp-Session-Id` itself holds the caller, the route, the protocol version,
//! each upstream's session and when it was issued, sealed with AES-256-GCM
//! under a key derived from `GATEHOUSE_SECRET` (HKDF label `mcp-session`).
//! A session ended by `DELETE` is named in the ended-sessions table (by the
//! SHA-256 of its random id), which every server mirrors in memory
//! ([`EndedSessions`]) so no request pays a database round trip.

use std::collections::BTreeMap;

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::mcp::upstream::UpstreamSession;
use crate::secrets::{Keyring, Use};

/// The longest `Mcp-Session-Id` issued or accepted.
pub const MAX_SESSION_ID: usize = 1024;

/// Marks the format, so a later one can be told apart.
const PREFIX: &str = "m1.";

/// What a session id holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// 128 random bits: the session's identity (hashed in the ended table).
    #[serde(rename = "j")]
    pub jti: String,
    /// `k:<API key id>` or `s:<sign-in device id>`.
    #[serde(rename = "c")]
    pub caller: String,
    /// `""` for `/mcp`, else the server of `/mcp/{server}`.
    #[serde(rename = "r")]
    pub route: String,
    /// The protocol version answered at `initialize`.
    #[serde(rename = "v")]
    pub version: String,
    /// Each upstream's session, by server name.
    #[serde(rename = "u", default)]
    pub upstreams: BTreeMap<String, UpstreamSession>,
    /// Unix ms.
    #[serde(rename = "i")]
    pub issued_ms: i64,
}

impl Session {
    pub fn new(caller: String, route: String, version: String, issued_ms: i64) -> Session {
        use rand::RngCore;
        let mut j = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut j);
        Session {
            jti: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(j),
            caller,
            route,
            version,
            upstreams: BTreeMap::new(),
            issued_ms,
        }
    }

    /// The name of the session in the ended-sessions table.
    pub fn id_hash(&self) -> String {
        crate::secrets::sha256_hex(&self.jti)
    }

    pub fn expires_at(&self, ttl_s: u64) -> i64 {
        self.issued_ms
            .saturating_add(i64::try_from(ttl_s.saturating_mul(1000)).unwrap_or(i64::MAX))
    }
}

/// The API key's or the sign-in's caller string.
pub fn caller_of_key(key_id: &str) -> String {
    format!("k:{key_id}")
}
pub fn caller_of_sign_in(device_id: &str) -> String {
    format!("s:{device_id}")
}

/// Seals and opens session ids.
#[derive(Clone)]
pub struct Sealer {
    cipher: Aes256Gcm,
}

impl Sealer {
    pub fn new(keyring: &Keyring) -> Sealer {
        Sealer {
            cipher: Aes256Gcm::new(&keyring.key(Use::McpSession).into()),
        }
    }

    fn seal_exact(&self, s: &Session) -> Option<String> {
        use rand::RngCore;
        let plain = serde_json::to_vec(s).ok()?;
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut raw = nonce.to_vec();
        raw.extend(
            self.cipher
                .encrypt(Nonce::from_slice(&nonce), plain.as_slice())
                .ok()?,
        );
        Some(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        ))
    }

    /// The session id for `s`, at most [`MAX_SESSION_ID`] characters. When
    /// the upstream sessions do not fit, they are left out of the id and
    /// returned: the caller keeps them in this process (another server then
    /// opens its own upstream sessions).
    pub fn seal(&self, s: &Session) -> Option<(String, BTreeMap<String, UpstreamSession>)> {
        let id = self.seal_exact(s)?;
        if id.len() <= MAX_SESSION_ID {
            return Some((id, BTreeMap::new()));
        }
        let mut bare = s.clone();
        let kept = std::mem::take(&mut bare.upstreams);
        let id = self.seal_exact(&bare)?;
        (id.len() <= MAX_SESSION_ID).then_some((id, kept))
    }

    /// The session an id holds; `None` when it is too long, not visible
    /// ASCII, not ours or tampered with.
    pub fn open(&self, id: &str) -> Option<Session> {
        if id.len() > MAX_SESSION_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        let b64 = id.strip_prefix(PREFIX)?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(b64)
            .ok()?;
        if raw.len() < 12 {
            return None;
        }
        let (nonce, ct) = raw.split_at(12);
        let plain = self.cipher.decrypt(Nonce::from_slice(nonce), ct).ok()?;
        serde_json::from_slice(&plain).ok()
    }
}

/// Why a session id is refused (all answered alike: 404 `session_not_found`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    Unreadable,
    OtherCaller,
    OtherRoute,
    Expired,
    Ended,
}

/// Whether `s` may continue on `route` for `caller` at `now` (Unix ms).
pub fn check(
    s: &Session,
    caller: &str,
    route: &str,
    now: i64,
    ttl_s: u64,
    ended: &EndedSessions,
) -> Result<(), Refused> {
    if s.caller != caller {
        return Err(Refused::OtherCaller);
    }
    if s.route != route {
        return Err(Refused::OtherRoute);
    }
    if now >= s.expires_at(ttl_s) {
        return Err(Refused::Expired);
    }
    if ended.contains(&s.id_hash()) {
        return Err(Refused::Ended);
    }
    Ok(())
}

/// The ended sessions of the cluster, mirrored in memory: by id hash, the
/// Unix ms when the session's lifetime runs out (then it is forgotten).
#[derive(Default)]
pub struct EndedSessions {
    ended: DashMap<String, i64>,
}

impl EndedSessions {
    pub fn insert(&self, id_hash: String, expires_at: i64) {
        self.ended.insert(id_hash, expires_at);
    }
    pub fn contains(&self, id_hash: &str) -> bool {
        self.ended.contains_key(id_hash)
    }
    /// Forgets sessions whose lifetime has run out.
    pub fn purge(&self, now: i64) {
        self.ended.retain(|_, exp| *exp > now);
    }
}

/// Upstream sessions opened after `initialize` (a retry, or one that did
/// not fit the id), by session and server: this process's own; another
/// server opens its own when it needs one.
#[derive(Default)]
pub struct LaterUpstreams {
    map: DashMap<(String, String), (UpstreamSession, i64)>,
}

impl LaterUpstreams {
    pub fn get(&self, jti: &str, server: &str) -> Option<UpstreamSession> {
        self.map
            .get(&(jti.to_string(), server.to_string()))
            .map(|e| e.0.clone())
    }
    pub fn put(&self, jti: &str, server: &str, s: UpstreamSession, expires_at: i64) {
        self.map
            .insert((jti.to_string(), server.to_string()), (s, expires_at));
    }
    /// Every later upstream session of `jti` (for `DELETE`), removed.
    pub fn take_all(&self, jti: &str) -> Vec<(String, UpstreamSession)> {
        let keys: Vec<(String, String)> = self
            .map
            .iter()
            .filter(|e| e.key().0 == jti)
            .map(|e| e.key().clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.map.remove(&k).map(|(k, v)| (k.1, v.0)))
            .collect()
    }
    pub fn purge(&self, now: i64) {
        self.map.retain(|_, v| v.1 > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(secret: &str) -> Sealer {
        Sealer::new(&Keyring::new(secret))
    }

    fn session() -> Session {
        let mut s = Session::new("k:key1".into(), "".into(), "2025-06-18".into(), 1_000);
        s.upstreams.insert(
            "alpha".into(),
            UpstreamSession {
                id: Some("up-1".into()),
                version: "2025-11-25".into(),
            },
        );
        s
    }

    #[test]
    fn a_sealed_session_opens_to_what_was_sealed() {
        let k = sealer("a-secret-of-at-least-thirty-two-chars!!");
        let s = session();
        let (id, kept) = k.seal(&s).expect("sealed");
        assert!(kept.is_empty());
        assert!(id.len() <= MAX_SESSION_ID);
        assert!(id.bytes().all(|b| b.is_ascii_graphic()));
        assert_eq!(k.open(&id), Some(s));
    }

    #[test]
    fn a_tampered_foreign_or_overlong_id_does_not_open() {
        let k = sealer("a-secret-of-at-least-thirty-two-chars!!");
        let (id, _) = k.seal(&session()).expect("sealed");
        // One character changed.
        let mut t = id.clone().into_bytes();
        let i = t.len() - 5;
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        assert!(k.open(&String::from_utf8(t).expect("ascii")).is_none());
        // Sealed under another secret.
        let other = sealer("another-secret-of-at-least-thirty-two!!");
        assert!(other.open(&id).is_none());
        assert!(k.open("").is_none());
        assert!(k.open("m1.").is_none());
        assert!(k.open(&"m".repeat(MAX_SESSION_ID + 1)).is_none());
        assert!(k.open("m1.abc def").is_none());
    }

    #[test]
    fn upstream_sessions_that_do_not_fit_1024_are_kept_out_of_the_id() {
        let k = sealer("a-secret-of-at-least-thirty-two-chars!!");
        let mut s = session();
        for i in 0..20 {
            s.upstreams.insert(
                format!("server{i}"),
                UpstreamSession {
                    id: Some("u".repeat(64)),
                    version: "2025-11-25".into(),
                },
            );
        }
        let (id, kept) = k.seal(&s).expect("sealed");
        assert!(id.len() <= MAX_SESSION_ID);
        assert_eq!(kept.len(), 21);
        let opened = k.open(&id).expect("opens");
        assert!(opened.upstreams.is_empty());
        assert_eq!(opened.jti, s.jti);
    }

    #[test]
    fn a_session_serves_its_caller_and_route_within_its_lifetime_until_ended() {
        let s = session();
        let ended = EndedSessions::default();
        assert_eq!(check(&s, "k:key1", "", 2_000, 10, &ended), Ok(()));
        assert_eq!(
            check(&s, "k:key2", "", 2_000, 10, &ended),
            Err(Refused::OtherCaller)
        );
        assert_eq!(
            check(&s, "k:key1", "alpha", 2_000, 10, &ended),
            Err(Refused::OtherRoute)
        );
        // Issued at 1 000 ms with a 10 s lifetime: 10 999 serves, 11 000 does not.
        assert_eq!(check(&s, "k:key1", "", 10_999, 10, &ended), Ok(()));
        assert_eq!(
            check(&s, "k:key1", "", 11_000, 10, &ended),
            Err(Refused::Expired)
        );
        ended.insert(s.id_hash(), s.expires_at(10));
        assert_eq!(
            check(&s, "k:key1", "", 2_000, 10, &ended),
            Err(Refused::Ended)
        );
        ended.purge(11_000);
        assert!(!ended.contains(&s.id_hash()));
    }
}
