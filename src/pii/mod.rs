//! PII protection on agent chat, the gateway's side: which mode applies,
//! scanning every part of an outgoing chat body, and the per-conversation
//! token vault (sealed with AES-256-GCM at rest, with a lifetime).
//! The detection engine itself is the `gatehouse-pii` crate.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use gatehouse_pii::{Counts, Mode, Scanner, Vault};
use serde_json::Value;

use crate::error::Error;
use crate::store::{now_ms, Store};

pub use gatehouse_pii::{StreamRestorer, TOKEN_NOTE};

/// The mode for one chat: the agent's, or the header's where the agent lets the user choose.
pub fn choose_mode(
    agent_mode: Mode,
    user_choosable: bool,
    header: Option<&str>,
) -> Result<Mode, Error> {
    let Some(h) = header else {
        return Ok(agent_mode);
    };
    let wanted = match h {
        "redact" => Mode::Redact,
        "tokenize_reversible" => Mode::TokenizeReversible,
        _ => {
            return Err(Error::bad_request(
                "invalid_header",
                "X-Service-PII-Mode must be redact or tokenize_reversible.",
            )
            .with_param("X-Service-PII-Mode"))
        }
    };
    if !user_choosable {
        return Err(Error::bad_request(
            "pii_mode_not_allowed",
            "This agent does not let the user choose the PII mode; leave out X-Service-PII-Mode.",
        )
        .with_param("X-Service-PII-Mode"));
    }
    Ok(wanted)
}

/// Replaces every value `scanner` finds in `text`, as `mode` says: a
/// `[KIND]` mark (redact) or a conversation-wide token kept in `vault`
/// (tokenize_reversible). Which strings of a body are text is the wire's
/// business (e.g. [`crate::wire::chat::for_each_text`]).
pub fn protect_text(
    text: &mut String,
    scanner: &Scanner,
    mode: Mode,
    vault: &mut Vault,
    counts: &mut Counts,
) {
    match mode {
        Mode::Off => {}
        Mode::Redact => *text = gatehouse_pii::redact(scanner, text, counts),
        Mode::TokenizeReversible => *text = vault.tokenize(scanner, text, counts),
    }
}

/// Restores tokens in a non-stream answer: message content and tool-call arguments.
pub fn restore_response(resp: &mut Value, vault: &Vault) {
    for choice in resp
        .get_mut("choices")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(msg) = choice.get_mut("message") else {
            continue;
        };
        if let Some(Value::String(s)) = msg.get_mut("content") {
            *s = vault.restore(s);
        }
        for c in msg
            .get_mut("tool_calls")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(Value::String(args)) = c.pointer_mut("/function/arguments") {
                *args = vault.restore_json(args);
            }
        }
    }
}

/// Scanners compiled once per list of terms (an agent's `pii.terms`):
/// compiling takes milliseconds, so it runs off the serving thread, and a
/// scanner depends only on its terms (nothing to revoke).
pub struct Scanners(crate::runtime::TtlCache<String, std::sync::Arc<Scanner>>);

impl Default for Scanners {
    fn default() -> Self {
        Self::new()
    }
}

impl Scanners {
    pub fn new() -> Scanners {
        Scanners(crate::runtime::TtlCache::new(
            std::time::Duration::from_secs(3600),
            1_000,
        ))
    }

    /// The scanner for `terms`.
    pub async fn get(&self, terms: &[String]) -> Result<std::sync::Arc<Scanner>, Error> {
        let owned = terms.to_vec();
        let built = self
            .0
            .get_or_load(&terms.join("\u{1}"), || async move {
                let s = tokio::task::spawn_blocking(move || Scanner::new(&owned))
                    .await
                    .map_err(Error::internal)?
                    .map_err(Error::internal)?;
                Ok::<_, Error>(Some(std::sync::Arc::new(s)))
            })
            .await?;
        built.ok_or_else(|| Error::internal("scanner cache returned nothing"))
    }
}

/// The sealed, expiring store of vaults, one per (agent, user, conversation).
pub struct VaultStore {
    cipher: Aes256Gcm,
}

impl VaultStore {
    /// `key`: the vault key derived from the deployment's secret.
    pub fn new(key: &[u8; 32]) -> VaultStore {
        VaultStore {
            cipher: Aes256Gcm::new(key.into()),
        }
    }

    /// The row key: a hash, so conversation ids are not kept in the clear either.
    pub fn key(agent: &str, user_id: &str, conversation_id: &str) -> String {
        crate::secrets::sha256_hex(&format!("{agent}\u{0}{user_id}\u{0}{conversation_id}"))
    }

    fn seal(&self, vault: &Vault) -> Option<String> {
        use rand::RngCore;
        let plain = serde_json::to_vec(vault).ok()?;
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut out = nonce.to_vec();
        out.extend(
            self.cipher
                .encrypt(Nonce::from_slice(&nonce), plain.as_slice())
                .ok()?,
        );
        Some(base64::engine::general_purpose::STANDARD.encode(out))
    }

    fn open(&self, sealed: &str) -> Option<Vault> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .ok()?;
        if raw.len() < 12 {
            return None;
        }
        let (nonce, ct) = raw.split_at(12);
        let plain = self.cipher.decrypt(Nonce::from_slice(nonce), ct).ok()?;
        serde_json::from_slice(&plain).ok()
    }

    pub async fn load(&self, store: &Store, key: &str) -> Result<Vault, sqlx::Error> {
        let row: Option<(String, i64)> =
            sqlx::query_as("SELECT sealed, expires_at FROM pii_vaults WHERE conversation_key = $1")
                .bind(key)
                .fetch_optional(&store.pool)
                .await?;
        Ok(match row {
            Some((sealed, exp)) if exp > now_ms() => self.open(&sealed).unwrap_or_default(),
            _ => Vault::new(),
        })
    }

    /// Saves the vault and renews its lifetime; done before the upstream call,
    /// so the answer can always be restored.
    pub async fn save(
        &self,
        store: &Store,
        key: &str,
        vault: &Vault,
        ttl_s: i64,
    ) -> Result<(), Error> {
        let sealed = self
            .seal(vault)
            .ok_or_else(|| Error::internal("vault sealing failed"))?;
        let exp = now_ms() + ttl_s * 1000;
        sqlx::query(
            "INSERT INTO pii_vaults (conversation_key, sealed, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (conversation_key) DO UPDATE SET sealed = $2, expires_at = $3",
        )
        .bind(key)
        .bind(sealed)
        .bind(exp)
        .execute(&store.pool)
        .await?;
        Ok(())
    }

    pub async fn purge_expired(store: &Store) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query("DELETE FROM pii_vaults WHERE expires_at <= $1")
            .bind(now_ms())
            .execute(&store.pool)
            .await?
            .rows_affected())
    }
}

/// Counts as the `service.pii` event carries them: `{"email": 2, ...}`.
pub fn counts_json(counts: &Counts) -> Value {
    Value::Object(
        counts
            .iter()
            .map(|(k, n)| (k.name().to_string(), Value::from(n)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    /// A chat body protected as the agent turn protects it.
    fn protect_body(
        body: &mut Map<String, Value>,
        scanner: &Scanner,
        mode: Mode,
        vault: &mut Vault,
        counts: &mut Counts,
    ) {
        crate::wire::chat::for_each_text(body, &mut |s| {
            protect_text(s, scanner, mode, vault, counts)
        });
    }

    #[test]
    fn every_text_field_is_scanned_in_place_and_protocol_fields_are_not() {
        let scanner = Scanner::new(&[]).unwrap();
        let mut vault = Vault::default();
        let mut counts = Counts::default();
        let mail = "ann@example.com";
        let mut body = match serde_json::json!({
            "model": "m",
            "user": mail,
            "prediction": {"type": "content", "content": mail},
            "messages": [
                {"role": "user", "name": mail, "content": [{"type": "text", "text": mail}]},
                {"role": "assistant", "refusal": mail, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "send_mail", "arguments": format!("{{\"to\":\"{mail}\"}}")}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": mail}
            ],
            "tools": [{"type": "function", "function": {
                "name": "send_mail",
                "description": format!("Mails {mail}"),
                "parameters": {"type": "object", "properties": {"to": {"type": "string", "description": mail}}}
            }}]
        }) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        protect_body(&mut body, &scanner, Mode::Redact, &mut vault, &mut counts);
        let text = serde_json::to_string(&body).unwrap();
        assert!(!text.contains(mail), "{text}");
        assert_eq!(body["user"], "[EMAIL]");
        assert_eq!(body["messages"][0]["name"], "[EMAIL]");
        assert_eq!(body["messages"][1]["refusal"], "[EMAIL]");
        assert_eq!(body["prediction"]["content"], "[EMAIL]");
        assert_eq!(body["tools"][0]["function"]["description"], "Mails [EMAIL]");
        // Protocol fields and names stay.
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][1]["tool_calls"][0]["id"], "call_1");
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["name"],
            "send_mail"
        );
        assert_eq!(body["tools"][0]["function"]["name"], "send_mail");
        assert_eq!(body["messages"][2]["tool_call_id"], "call_1");
    }
    use serde_json::json;

    fn body() -> Map<String, Value> {
        json!({"messages": [
            {"role": "system", "content": "Customer is jane@example.com"},
            {"role": "user", "content": [{"type": "text", "text": "Call +44 20 7946 0958"}, {"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "mail", "arguments": "{\"to\":\"jane@example.com\"}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "sent to bob@example.org"}
        ]}).as_object().unwrap().clone()
    }

    #[test]
    fn redact_covers_every_role_part_and_tool_arguments() {
        let scanner = Scanner::new(&[]).unwrap();
        let mut b = body();
        let mut counts = Counts::new();
        protect_body(
            &mut b,
            &scanner,
            Mode::Redact,
            &mut Vault::new(),
            &mut counts,
        );
        let s = Value::Object(b.clone()).to_string();
        for v in ["jane@example.com", "7946", "bob@example.org"] {
            assert!(!s.contains(v), "{v} leaked: {s}");
        }
        assert_eq!(b["messages"][0]["content"], "Customer is [EMAIL]");
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"to\":\"[EMAIL]\"}"
        );
        assert_eq!(counts.total(), 4);
    }

    #[test]
    fn tokenize_keeps_one_token_per_value_and_restores_the_answer() {
        let scanner = Scanner::new(&[]).unwrap();
        let mut b = body();
        let mut vault = Vault::new();
        let mut counts = Counts::new();
        protect_body(
            &mut b,
            &scanner,
            Mode::TokenizeReversible,
            &mut vault,
            &mut counts,
        );
        assert_eq!(b["messages"][0]["content"], "Customer is [EMAIL_1]");
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"to\":\"[EMAIL_1]\"}"
        );
        assert_eq!(b["messages"][3]["content"], "sent to [EMAIL_2]");
        let mut resp = json!({"choices": [{"message": {"content": "Mail [EMAIL_1] now", "tool_calls": [{"function": {"arguments": "{\"to\":\"[EMAIL_2]\"}"}}]}}]});
        restore_response(&mut resp, &vault);
        assert_eq!(
            resp["choices"][0]["message"]["content"],
            "Mail jane@example.com now"
        );
        assert_eq!(
            resp["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"to\":\"bob@example.org\"}"
        );
    }

    #[test]
    fn header_is_refused_unless_the_agent_lets_the_user_choose() {
        assert_eq!(
            choose_mode(Mode::Off, false, Some("redact"))
                .unwrap_err()
                .code,
            "pii_mode_not_allowed"
        );
        assert_eq!(
            choose_mode(Mode::Off, true, Some("redact")).unwrap(),
            Mode::Redact
        );
        assert_eq!(choose_mode(Mode::Redact, true, None).unwrap(), Mode::Redact);
        assert_eq!(
            choose_mode(Mode::Off, true, Some("loud")).unwrap_err().code,
            "invalid_header"
        );
    }

    #[test]
    fn sealed_vault_opens_only_with_the_same_secret() {
        let scanner = Scanner::new(&[]).unwrap();
        let mut v = Vault::new();
        v.tokenize(&scanner, "a@b.example.com", &mut Counts::new());
        let a = VaultStore::new(&[1u8; 32]);
        let sealed = a.seal(&v).unwrap();
        assert!(!sealed.contains("b.example.com"));
        assert_eq!(a.open(&sealed).unwrap().len(), 1);
        assert!(VaultStore::new(&[2u8; 32]).open(&sealed).is_none());
    }
}
