//! PII protection for chat text that Gatehouse sends to model upstreams.
//!
//! * [`Scanner`] finds personal data and secrets in one pass over the text
//!   (one multi-pattern automaton, candidates validated in plain Rust).
//! * [`redact`] replaces every finding with a placeholder such as `[EMAIL]`.
//! * [`Vault::tokenize`] replaces every finding with a numbered token such as
//!   `[EMAIL_1]` and remembers the value, so that [`Vault::restore`],
//!   [`Vault::restore_json`] and [`StreamRestorer`] can put the original
//!   values back into the model's answer.
//!
//! Values are never logged: [`Vault`]'s `Debug` shows only the number of
//! entries and [`Counts`] holds numbers only.

use std::fmt;
use std::str::FromStr;

use serde::ser::SerializeMap;

mod scanner;
mod vault;

pub use scanner::{Scanner, MAX_TERMS, MAX_TERM_LEN};
pub use vault::{StreamRestorer, Vault};

/// The kind of a finding.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Email,
    Phone,
    Card,
    Iban,
    Ip,
    Ssn,
    Secret,
    Term,
}

impl Kind {
    /// Every kind, in a fixed order.
    pub const ALL: [Kind; 8] = [
        Kind::Email,
        Kind::Phone,
        Kind::Card,
        Kind::Iban,
        Kind::Ip,
        Kind::Ssn,
        Kind::Secret,
        Kind::Term,
    ];

    /// Upper-case label used in placeholders and tokens: `EMAIL`, `PHONE`, ...
    pub fn label(self) -> &'static str {
        match self {
            Kind::Email => "EMAIL",
            Kind::Phone => "PHONE",
            Kind::Card => "CARD",
            Kind::Iban => "IBAN",
            Kind::Ip => "IP",
            Kind::Ssn => "SSN",
            Kind::Secret => "SECRET",
            Kind::Term => "TERM",
        }
    }

    /// Lower-case name used in reports and JSON: `email`, `phone`, ...
    pub fn name(self) -> &'static str {
        match self {
            Kind::Email => "email",
            Kind::Phone => "phone",
            Kind::Card => "card",
            Kind::Iban => "iban",
            Kind::Ip => "ip",
            Kind::Ssn => "ssn",
            Kind::Secret => "secret",
            Kind::Term => "term",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One piece of PII found in a text: byte offsets into the scanned `&str`,
/// always on char boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

/// Counts of findings per kind (for reporting; never values).
///
/// Serializes as a JSON object with only the non-zero kinds, e.g.
/// `{"email": 2, "phone": 1}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    n: [u32; 8],
}

impl Counts {
    pub fn new() -> Self {
        Self::default()
    }

    /// Count one finding of `kind`.
    pub fn add(&mut self, kind: Kind) {
        let slot = &mut self.n[kind.index()];
        *slot = slot.saturating_add(1);
    }

    pub fn get(&self, kind: Kind) -> u32 {
        self.n[kind.index()]
    }

    pub fn total(&self) -> u32 {
        self.n.iter().fold(0u32, |a, b| a.saturating_add(*b))
    }

    /// Add all counts of `other` to `self`.
    pub fn merge(&mut self, other: &Counts) {
        for (a, b) in self.n.iter_mut().zip(other.n.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.n.iter().all(|c| *c == 0)
    }

    /// The non-zero counts, in [`Kind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Kind, u32)> + '_ {
        Kind::ALL
            .iter()
            .map(move |k| (*k, self.n[k.index()]))
            .filter(|(_, c)| *c > 0)
    }
}

impl serde::Serialize for Counts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.iter().count()))?;
        for (kind, count) in self.iter() {
            map.serialize_entry(kind.name(), &count)?;
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for Counts {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = <std::collections::BTreeMap<Kind, u32>>::deserialize(deserializer)?;
        let mut counts = Counts::default();
        for (kind, count) in map {
            counts.n[kind.index()] = count;
        }
        Ok(counts)
    }
}

/// PII handling mode of an agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Off,
    Redact,
    TokenizeReversible,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Redact => "redact",
            Mode::TokenizeReversible => "tokenize_reversible",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = PiiError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(Mode::Off),
            "redact" => Ok(Mode::Redact),
            "tokenize_reversible" => Ok(Mode::TokenizeReversible),
            other => Err(PiiError::UnknownMode(other.to_string())),
        }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum PiiError {
    /// The detector set (built-in patterns plus the admin's terms) could not
    /// be compiled, e.g. because the term list is too large.
    #[error("cannot build the PII scanner: {0}")]
    Build(String),
    /// The term list is too large for one scanner (see [`MAX_TERMS`] and
    /// [`MAX_TERM_LEN`]).
    #[error("invalid PII term list: {0}")]
    Terms(String),
    /// A mode string other than `off`, `redact`, `tokenize_reversible`.
    #[error("unknown PII mode {0:?} (expected off, redact or tokenize_reversible)")]
    UnknownMode(String),
}

/// The short system note that tells the model to copy tokens verbatim.
pub const TOKEN_NOTE: &str =
    "Some values in this conversation were replaced by placeholder tokens \
such as [EMAIL_1], [PHONE_2] or [TERM_1]. Treat each token as the value it stands for. When you \
need that value in your answer or in tool-call arguments, write the token exactly as it appears, \
including the square brackets and the number; do not change, translate, split or invent tokens.";

/// Redact mode: returns `text` with each finding replaced by its placeholder
/// (`[EMAIL]`, `[PHONE]`, ...); `counts` is updated. Nothing can be restored.
pub fn redact(scanner: &Scanner, text: &str, counts: &mut Counts) -> String {
    let findings = scanner.scan(text);
    if findings.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for f in &findings {
        out.push_str(&text[last..f.start]);
        out.push('[');
        out.push_str(f.kind.label());
        out.push(']');
        counts.add(f.kind);
        last = f.end;
    }
    out.push_str(&text[last..]);
    out
}
