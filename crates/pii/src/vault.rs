//! Reversible tokenization: the per-conversation token <-> value map, and
//! restoring values in complete and streamed answers.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use crate::{Counts, Kind, Scanner};

/// One token and the value it stands for.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Entry {
    kind: Kind,
    token: String,
    value: String,
}

/// Persisted form of a [`Vault`]: the entries only; indexes are rebuilt.
#[derive(serde::Serialize, serde::Deserialize)]
struct VaultData {
    entries: Vec<Entry>,
}

/// The token <-> value map of one conversation (`tokenize_reversible`).
///
/// Serializable so the gateway can persist it (the gateway encrypts it; this
/// crate does not). `Debug` shows only the number of entries, never values.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(from = "VaultData", into = "VaultData")]
pub struct Vault {
    entries: Vec<Entry>,
    by_value: HashMap<String, usize>,
    /// Sorted, so that "is this a proper prefix of some token" is one range
    /// lookup (used by [`StreamRestorer`]).
    by_token: BTreeMap<String, usize>,
    /// Last number handed out per kind.
    next: [u32; 8],
    max_token_len: usize,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl From<VaultData> for Vault {
    fn from(data: VaultData) -> Self {
        let mut vault = Vault::default();
        for entry in data.entries {
            let well_formed = entry.token.len() >= 3
                && entry.token.starts_with('[')
                && entry.token.ends_with(']')
                && !entry.token[1..entry.token.len() - 1].contains(['[', ']']);
            if !well_formed
                || vault.by_value.contains_key(&entry.value)
                || vault.by_token.contains_key(&entry.token)
            {
                continue;
            }
            let number = entry
                .token
                .trim_end_matches(']')
                .rsplit('_')
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            let slot = &mut vault.next[entry.kind.index()];
            *slot = (*slot).max(number);
            vault.insert(entry);
        }
        vault
    }
}

impl From<Vault> for VaultData {
    fn from(vault: Vault) -> Self {
        VaultData {
            entries: vault.entries,
        }
    }
}

impl Vault {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of token <-> value pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Longest token length in bytes (bounds the stream hold-back).
    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }

    fn insert(&mut self, entry: Entry) -> usize {
        let idx = self.entries.len();
        self.max_token_len = self.max_token_len.max(entry.token.len());
        self.by_value.insert(entry.value.clone(), idx);
        self.by_token.insert(entry.token.clone(), idx);
        self.entries.push(entry);
        idx
    }

    /// The token of `value`, creating `[LABEL_n]` if the value is new.
    fn intern(&mut self, kind: Kind, value: &str) -> usize {
        if let Some(&idx) = self.by_value.get(value) {
            return idx;
        }
        let token = loop {
            let slot = &mut self.next[kind.index()];
            *slot = slot.saturating_add(1);
            let token = format!("[{}_{}]", kind.label(), *slot);
            if !self.by_token.contains_key(&token) {
                break token;
            }
        };
        self.insert(Entry {
            kind,
            token,
            value: value.to_string(),
        })
    }

    /// Replace each finding with its token. The same value (exact string)
    /// always maps to the same token; numbering per kind starts at 1 and
    /// continues across calls. `counts` counts every replaced occurrence.
    pub fn tokenize(&mut self, scanner: &Scanner, text: &str, counts: &mut Counts) -> String {
        let findings = scanner.scan(text);
        if findings.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len() + 8 * findings.len());
        let mut last = 0;
        for f in &findings {
            out.push_str(&text[last..f.start]);
            let idx = self.intern(f.kind, &text[f.start..f.end]);
            out.push_str(&self.entries[idx].token);
            counts.add(f.kind);
            last = f.end;
        }
        out.push_str(&text[last..]);
        out
    }

    /// Replace every known token in `text` with its value. Unknown bracketed
    /// things are left as they are.
    pub fn restore(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        self.restore_into(text, false, &mut out);
        out
    }

    /// Like [`Vault::restore`] for JSON text (e.g. tool-call arguments): the
    /// inserted values are JSON-string-escaped, without surrounding quotes.
    pub fn restore_json(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        self.restore_into(text, true, &mut out);
        out
    }

    fn restore_into(&self, text: &str, json: bool, out: &mut String) {
        if self.entries.is_empty() {
            out.push_str(text);
            return;
        }
        let b = text.as_bytes();
        let mut last = 0;
        let mut i = 0;
        while let Some(off) = memchr::memchr(b'[', &b[i..]) {
            let at = i + off;
            let window_end = b.len().min(at + self.max_token_len);
            let hit = memchr::memchr(b']', &b[at + 1..window_end])
                .and_then(|close| self.by_token.get(&text[at..at + close + 2]));
            match hit {
                Some(&idx) => {
                    let entry = &self.entries[idx];
                    out.push_str(&text[last..at]);
                    if json {
                        push_json_escaped(out, &entry.value);
                    } else {
                        out.push_str(&entry.value);
                    }
                    last = at + entry.token.len();
                    i = last;
                }
                None => i = at + 1,
            }
        }
        out.push_str(&text[last..]);
    }

    /// Is `s` a proper prefix of some token (so more input could complete it)?
    fn is_token_prefix(&self, s: &str) -> bool {
        if s.len() >= self.max_token_len {
            return false;
        }
        self.by_token
            .range::<str, _>((Bound::Included(s), Bound::Unbounded))
            .take(2)
            .any(|(k, _)| k.len() > s.len() && k.starts_with(s))
    }
}

/// Append `value` escaped for the inside of a JSON string.
fn push_json_escaped(out: &mut String, value: &str) {
    let mut last = 0;
    for (i, c) in value.char_indices() {
        let esc: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            c if (c as u32) < 0x20 => None,
            _ => continue,
        };
        out.push_str(&value[last..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let v = c as usize;
                out.push_str("\\u00");
                out.push(HEX[v >> 4] as char);
                out.push(HEX[v & 0xF] as char);
            }
        }
        last = i + c.len_utf8();
    }
    out.push_str(&value[last..]);
}

/// Streamed restore: feed chunks as they arrive, get restored text back at
/// once. Only a trailing part that could still become a known token (a
/// suffix starting with `[` that is a proper prefix of some token) is held
/// back; [`StreamRestorer::finish`] flushes it.
pub struct StreamRestorer {
    vault: Arc<Vault>,
    json: bool,
    held: String,
}

impl std::fmt::Debug for StreamRestorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRestorer")
            .field("vault", &self.vault)
            .field("json", &self.json)
            .field("held_len", &self.held.len())
            .finish()
    }
}

impl StreamRestorer {
    /// `json = true` uses [`Vault::restore_json`] semantics (for streamed
    /// tool-call arguments).
    pub fn new(vault: Arc<Vault>, json: bool) -> Self {
        StreamRestorer {
            vault,
            json,
            held: String::new(),
        }
    }

    /// Feed one chunk; returns the restored text that can be emitted now.
    pub fn push(&mut self, chunk: &str) -> String {
        let mut out = String::with_capacity(chunk.len() + self.held.len());
        if self.held.is_empty() {
            let keep = self.hold_start(chunk);
            self.vault.restore_into(&chunk[..keep], self.json, &mut out);
            self.held.push_str(&chunk[keep..]);
        } else {
            self.held.push_str(chunk);
            let buf = std::mem::take(&mut self.held);
            let keep = self.hold_start(&buf);
            self.vault.restore_into(&buf[..keep], self.json, &mut out);
            self.held.push_str(&buf[keep..]);
        }
        out
    }

    /// End of stream: returns whatever was held back (restored).
    pub fn finish(&mut self) -> String {
        let buf = std::mem::take(&mut self.held);
        let mut out = String::with_capacity(buf.len());
        self.vault.restore_into(&buf, self.json, &mut out);
        out
    }

    /// Bytes currently held back (always less than the longest token).
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Where the held-back suffix of `buf` starts (`buf.len()` if nothing
    /// needs to be held).
    fn hold_start(&self, buf: &str) -> usize {
        if self.vault.is_empty() {
            return buf.len();
        }
        // A token contains no '[' after its first byte, so only the last
        // '[' can start an incomplete token.
        match memchr::memrchr(b'[', buf.as_bytes()) {
            Some(p) if self.vault.is_token_prefix(&buf[p..]) => p,
            _ => buf.len(),
        }
    }
}
