//! The single-pass detector.
//!
//! All detectors (plus the admin's terms) are compiled into ONE
//! `regex_automata::meta::Regex` with one pattern per detector. A scan walks
//! the text once with `search` (leftmost-first); each candidate is validated
//! in plain Rust (boundaries, Luhn, mod-97, SSN rules, IP parsing, ...).
//! When a candidate fails validation, the lower-priority detectors that can
//! start at the same byte are tried with an anchored search at that position
//! and the scan then resumes one character later, so a failed candidate never
//! hides a valid finding that overlaps it.

use std::net::{Ipv4Addr, Ipv6Addr};

use regex_automata::{meta, util::syntax, Anchored, Input, MatchKind, PatternID};

use crate::{Finding, Kind, PiiError};

/// One built-in detector (one pattern of the automaton) or the term list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Det {
    PrivateKey,
    Jwt,
    Bearer,
    AwsKeyId,
    AwsSecret,
    GitHub,
    GitLab,
    Slack,
    GoogleKey,
    OpenAi,
    Stripe,
    Email,
    Iban,
    Card,
    Ssn,
    Ipv4,
    Ipv6,
    PhoneIntl,
    PhoneNanp,
    PhoneTrunk,
    Terms,
}

/// Built-in detectors in priority order (leftmost-first: at the same start
/// position, the earlier pattern wins). All are ASCII-only (`(?-u)`), which
/// keeps the automaton small and fast.
const BUILTIN: &[(Det, &str)] = &[
    (
        Det::PrivateKey,
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    ),
    (
        Det::Jwt,
        r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
    ),
    (Det::Bearer, r"(?i:bearer)[ \t]+[A-Za-z0-9._~+/-]{16,}=*"),
    (Det::AwsKeyId, r"(?:AKIA|ASIA)[A-Z0-9]{16}"),
    (
        Det::AwsSecret,
        r#"(?i:aws)[_.-]?(?i:secret)[_.-]?(?:(?i:access)[_.-]?)?(?i:key)(?:\\?["'])?[ \t]*(?::=|=>|:|=)[ \t]*(?:\\?["'])?[A-Za-z0-9/+=]{40}"#,
    ),
    (
        Det::GitHub,
        r"gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}",
    ),
    (Det::GitLab, r"glpat-[A-Za-z0-9_-]{20,}"),
    (Det::Slack, r"xox[abprs]-[A-Za-z0-9-]{10,}"),
    (Det::GoogleKey, r"AIza[0-9A-Za-z_-]{35}"),
    (Det::OpenAi, r"sk-[A-Za-z0-9_-]{20,}"),
    (Det::Stripe, r"[sr]k_live_[A-Za-z0-9]{16,}"),
    (
        Det::Email,
        r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}",
    ),
    (
        Det::Iban,
        r"[A-Za-z]{2}[0-9]{2}(?:[A-Za-z0-9]{11,30}|(?: [A-Za-z0-9]{4}){2,7}(?: [A-Za-z0-9]{1,4})?)",
    ),
    (
        Det::Card,
        r"[0-9]{13,19}|[0-9]{4}(?: [0-9]{3,6}){2,4}|[0-9]{4}(?:-[0-9]{3,6}){2,4}",
    ),
    (Det::Ssn, r"[0-9]{3}[ -][0-9]{2}[ -][0-9]{4}"),
    (Det::Ipv4, r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}"),
    (
        Det::Ipv6,
        r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})?",
    ),
    (
        Det::PhoneIntl,
        r"\+[1-9][0-9]{0,3}(?:[ .-]?(?:\([0-9]{1,4}\)|[0-9]{1,6})){1,7}",
    ),
    (
        Det::PhoneNanp,
        r"(?:1[ .-])?(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .-])[0-9]{3}[ .-][0-9]{4}",
    ),
    (
        Det::PhoneTrunk,
        r"\(0[0-9]{1,4}\) ?[0-9]{2,8}(?:[ .-][0-9]{2,8}){0,3}|0[0-9]{1,4}[ ./-][0-9]{2,8}(?:[ .-][0-9]{2,8}){0,3}",
    ),
];

// One bit per pattern in `Scanner::starts` (built-ins plus the term list).
const _: () = assert!(BUILTIN.len() < 32);

impl Det {
    fn kind(self) -> Kind {
        match self {
            Det::PrivateKey
            | Det::Jwt
            | Det::Bearer
            | Det::AwsKeyId
            | Det::AwsSecret
            | Det::GitHub
            | Det::GitLab
            | Det::Slack
            | Det::GoogleKey
            | Det::OpenAi
            | Det::Stripe => Kind::Secret,
            Det::Email => Kind::Email,
            Det::Iban => Kind::Iban,
            Det::Card => Kind::Card,
            Det::Ssn => Kind::Ssn,
            Det::Ipv4 | Det::Ipv6 => Kind::Ip,
            Det::PhoneIntl | Det::PhoneNanp | Det::PhoneTrunk => Kind::Phone,
            Det::Terms => Kind::Term,
        }
    }

    /// Can a match of this detector start with byte `b`? Used to skip
    /// pointless anchored retries after a failed candidate.
    fn may_start_with(self, b: u8) -> bool {
        match self {
            Det::PrivateKey => b == b'-',
            Det::Jwt => b == b'e',
            Det::Bearer => b == b'b' || b == b'B',
            Det::AwsKeyId | Det::GoogleKey => b == b'A',
            Det::AwsSecret => b == b'a' || b == b'A',
            Det::GitHub | Det::GitLab => b == b'g',
            Det::Slack => b == b'x',
            Det::OpenAi => b == b's',
            Det::Stripe => b == b's' || b == b'r',
            Det::Email => b.is_ascii_alphanumeric() || b"._%+-".contains(&b),
            Det::Iban => b.is_ascii_alphabetic(),
            Det::Card | Det::Ssn | Det::Ipv4 => b.is_ascii_digit(),
            Det::Ipv6 => b.is_ascii_hexdigit() || b == b':',
            Det::PhoneIntl => b == b'+',
            Det::PhoneNanp | Det::PhoneTrunk => b.is_ascii_digit() || b == b'(',
            // Decided per term list (see `Scanner::term_first`).
            Det::Terms => false,
        }
    }

    /// Detectors whose matches must not start inside a word or a longer
    /// number get a left-boundary prefix in the automaton: the match starts
    /// at the text start, after a JSON escape (`\n`, `\r`, `\t`), after a
    /// non-ASCII char, or consumes one preceding ASCII byte accepted by this
    /// predicate (never `\\`). This keeps `std::io`, `2024-01-15`, `ab12ab12`
    /// etc. from producing candidates at all, and (because no predicate
    /// accepts a byte of its detector's body) a long failed candidate never
    /// contains another start of the same detector, which keeps the scan
    /// linear. The predicate never accepts a byte the body can start with,
    /// except `(` for the phone forms (see `body_start`).
    fn left_boundary(self) -> Option<fn(u8) -> bool> {
        fn not_word(b: u8) -> bool {
            !b.is_ascii_alphanumeric() && b != b'_'
        }
        match self {
            Det::PrivateKey | Det::Email | Det::PhoneIntl | Det::Terms => None,
            Det::AwsSecret => Some(|b| !b.is_ascii_alphanumeric()),
            Det::Bearer
            | Det::AwsKeyId
            | Det::GitHub
            | Det::Stripe
            | Det::Iban
            | Det::Card
            | Det::Ssn => Some(not_word),
            Det::GitLab | Det::Slack | Det::GoogleKey | Det::OpenAi => {
                Some(|b| not_word(b) && b != b'-')
            }
            Det::Jwt => Some(|b| not_word(b) && b != b'-' && b != b'.'),
            Det::Ipv4 => Some(|b| not_word(b) && b != b'.'),
            Det::Ipv6 => Some(|b| not_word(b) && b != b'.' && b != b':'),
            Det::PhoneNanp | Det::PhoneTrunk => Some(|b| not_word(b) && b != b'+'),
        }
    }

    /// Where the detector's own text starts in a match that starts at `ms`
    /// (skips the consumed left-boundary byte/escape/char, if any).
    fn body_start(self, hay: &[u8], ms: usize) -> usize {
        if self.left_boundary().is_none() {
            return ms;
        }
        let b0 = hay[ms];
        if b0 == b'(' && matches!(self, Det::PhoneNanp | Det::PhoneTrunk) {
            // "(555) 123-4567" starts at '('; "(555-123-4567)" after it.
            let digits = hay[ms + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            let closes = hay.get(ms + 1 + digits) == Some(&b')');
            return if closes && (2..=5).contains(&digits) {
                ms
            } else {
                ms + 1
            };
        }
        if self.may_start_with(b0) {
            ms
        } else if b0 == b'\\' {
            ms + 2
        } else {
            ms + utf8_len(b0)
        }
    }
}

/// The PII scanner: built once (per term list), shared behind an `Arc`.
pub struct Scanner {
    re: meta::Regex,
    dets: Vec<Det>,
    /// `starts[b]` has bit `i` set when pattern `i` may start with byte `b`.
    starts: Box<[u32; 256]>,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("patterns", &self.dets.len())
            .finish_non_exhaustive()
    }
}

impl Scanner {
    /// Build a scanner with the built-in detectors plus the admin-listed
    /// `terms` (matched case-insensitively as whole words or phrases).
    /// Terms are trimmed; empty and whitespace-only terms are ignored.
    pub fn new(terms: &[String]) -> Result<Scanner, PiiError> {
        let mut patterns: Vec<String> = Vec::with_capacity(BUILTIN.len() + 1);
        let mut dets: Vec<Det> = Vec::with_capacity(BUILTIN.len() + 1);
        for (det, pat) in BUILTIN {
            patterns.push(match det.left_boundary() {
                None => format!("(?-u:{pat})"),
                Some(lb) => {
                    let class: String = (0u8..0x80)
                        .filter(|b| lb(*b) && *b != b'\\')
                        .map(|b| format!("\\x{b:02X}"))
                        .collect();
                    format!(r"(?-u:(?:^|[{class}]|\\[nrt]|(?u:[^\x00-\x7F]))(?:{pat}))")
                }
            });
            dets.push(*det);
        }

        let terms = normalize_terms(terms)?;
        let mut term_first = [false; 256];
        if !terms.is_empty() {
            let mut alts = Vec::with_capacity(terms.len());
            for words in &terms {
                let ascii = words.iter().all(|w| w.is_ascii());
                let body = words
                    .iter()
                    .map(|w| regex_syntax::escape(w))
                    .collect::<Vec<_>>()
                    .join(r"(?:[ \t\r\n]|\\[nrt])+");
                alts.push(if ascii {
                    format!("(?i-u:{body})")
                } else {
                    format!("(?i:{body})")
                });
                if let Some(c) = words.first().and_then(|w| w.chars().next()) {
                    if c.is_ascii() {
                        term_first[c.to_ascii_lowercase() as usize] = true;
                        term_first[c.to_ascii_uppercase() as usize] = true;
                    } else {
                        // Case folding may map to other non-ASCII (or even
                        // ASCII, e.g. the Kelvin sign) characters: allow all.
                        for slot in term_first.iter_mut().skip(0x80) {
                            *slot = true;
                        }
                        for b in b'A'..=b'Z' {
                            term_first[b as usize] = true;
                            term_first[b.to_ascii_lowercase() as usize] = true;
                        }
                    }
                }
            }
            patterns.push(alts.join("|"));
            dets.push(Det::Terms);
        }

        let re = meta::Builder::new()
            .configure(
                meta::Config::new()
                    .match_kind(MatchKind::LeftmostFirst)
                    .hybrid_cache_capacity(4 * 1024 * 1024),
            )
            .syntax(syntax::Config::new().utf8(true))
            .build_many(&patterns)
            .map_err(|e| PiiError::Build(e.to_string()))?;

        let mut starts = Box::new([0u32; 256]);
        for (i, det) in dets.iter().enumerate() {
            for b in 0..=255u8 {
                let ok = match det {
                    Det::Terms => term_first[b as usize],
                    d => {
                        d.may_start_with(b)
                            || d.left_boundary()
                                .is_some_and(|lb| b >= 0x80 || b == b'\\' || lb(b))
                    }
                };
                if ok {
                    starts[b as usize] |= 1 << i;
                }
            }
        }

        Ok(Scanner { re, dets, starts })
    }

    /// All findings in `text`, sorted by position and non-overlapping.
    pub fn scan(&self, text: &str) -> Vec<Finding> {
        let hay = text.as_bytes();
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < hay.len() {
            let input = Input::new(hay).span(pos..hay.len());
            let Some(m) = self.re.search(&input) else {
                break;
            };
            // Match start; a left-boundary byte may come first (`body_start`).
            let s = m.start();
            let first = m.pattern().as_usize();
            let mut hit = self.validate(first, text, s, m.end());
            if hit.is_none() {
                // Lower-priority detectors that could also match at `s`.
                let mut rest = self.starts[hay[s] as usize] & !((2u32 << first) - 1);
                while rest != 0 && hit.is_none() {
                    let q = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    let input = Input::new(hay)
                        .span(s..hay.len())
                        .anchored(Anchored::Pattern(PatternID::new_unchecked(q)));
                    if let Some(m2) = self.re.search(&input) {
                        hit = self.validate(q, text, s, m2.end());
                    }
                }
            }
            match hit {
                Some(f) => {
                    pos = f.end;
                    out.push(f);
                }
                None => pos = s + utf8_len(hay[s]),
            }
        }
        out
    }

    fn validate(&self, pid: usize, text: &str, ms: usize, e: usize) -> Option<Finding> {
        let det = *self.dets.get(pid)?;
        let s = det.body_start(text.as_bytes(), ms);
        if s >= e {
            return None;
        }
        let (start, end) = match det {
            Det::PrivateKey => private_key(text, s, e),
            Det::Jwt => jwt(text, s, e),
            Det::Bearer => bearer(text, s, e),
            Det::AwsKeyId => (!word_before(text, s) && !word_after(text, e)).then_some((s, e)),
            Det::AwsSecret => aws_secret(text, s, e),
            Det::GitHub | Det::GitLab | Det::Stripe => (!alnum_before(text, s)).then_some((s, e)),
            Det::Slack => (!alnum_before(text, s)
                && text.as_bytes()[s..e].iter().any(u8::is_ascii_digit))
            .then_some((s, e)),
            Det::GoogleKey => google_key(text, s, e),
            Det::OpenAi => openai_key(text, s, e),
            Det::Email => email(text, s, e),
            Det::Iban => iban(text, s, e),
            Det::Card => card(text, s, e),
            Det::Ssn => ssn(text, s, e),
            Det::Ipv4 => ipv4(text, s, e),
            Det::Ipv6 => ipv6(text, s, e),
            Det::PhoneIntl => phone_intl(text, s, e),
            Det::PhoneNanp => phone_nanp(text, s, e),
            Det::PhoneTrunk => phone_trunk(text, s, e),
            Det::Terms => term(text, s, e),
        }?;
        Some(Finding {
            kind: det.kind(),
            start,
            end,
        })
    }
}

/// Most terms one scanner accepts. The terms share the one automaton with
/// the detectors; far beyond this the lazy DFA's cache thrashes on text that
/// partially matches many terms and the scan falls back to a slow engine.
pub const MAX_TERMS: usize = 5000;
/// Longest term accepted, in bytes.
pub const MAX_TERM_LEN: usize = 256;

/// Trim, drop empty, split into words, dedupe case-insensitively, longest
/// first (so that with leftmost-first "Acme Corp" wins over "Acme").
fn normalize_terms(terms: &[String]) -> Result<Vec<Vec<String>>, PiiError> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in terms {
        let words: Vec<String> = t.split_whitespace().map(str::to_string).collect();
        if words.is_empty() {
            continue;
        }
        let joined = words.join(" ");
        if joined.len() > MAX_TERM_LEN {
            return Err(PiiError::Terms(format!(
                "a term is {} bytes long (at most {MAX_TERM_LEN})",
                joined.len()
            )));
        }
        if seen.insert(joined.to_lowercase()) {
            out.push(words);
        }
    }
    if out.len() > MAX_TERMS {
        return Err(PiiError::Terms(format!(
            "{} terms (at most {MAX_TERMS})",
            out.len()
        )));
    }
    out.sort_by_key(|w| std::cmp::Reverse(w.iter().map(|x| x.len() + 1).sum::<usize>()));
    Ok(out)
}

// ---------------------------------------------------------------------------
// Boundary helpers
// ---------------------------------------------------------------------------

fn utf8_len(b: u8) -> usize {
    match b {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xFF => 4,
        // Continuation byte: never a char start in a &str; step one byte.
        _ => 1,
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Is `c` at byte `at` the letter of a JSON/C escape like `\n`? Then it is
/// not a word character for boundary purposes (tool-call arguments are JSON).
fn is_escape_letter(text: &str, at: usize, c: char) -> bool {
    matches!(c, 'n' | 'r' | 't' | 'b' | 'f')
        && at >= 1
        && text.as_bytes()[at - 1] == b'\\'
        && !(at >= 2 && text.as_bytes()[at - 2] == b'\\')
}

fn char_before(text: &str, s: usize) -> Option<char> {
    text.get(..s)?.chars().next_back()
}

fn char_after(text: &str, e: usize) -> Option<char> {
    text.get(e..)?.chars().next()
}

/// Is there a word character (letter, digit, `_`) right before `s`?
fn word_before(text: &str, s: usize) -> bool {
    match char_before(text, s) {
        Some(c) if is_word_char(c) => !is_escape_letter(text, s - c.len_utf8(), c),
        _ => false,
    }
}

/// Is there a word character right at `e`?
fn word_after(text: &str, e: usize) -> bool {
    char_after(text, e).is_some_and(is_word_char)
}

/// Like `word_before` but `_` does not count (`MY_AWS_...`, `key_sk-...`).
fn alnum_before(text: &str, s: usize) -> bool {
    match char_before(text, s) {
        Some(c) if c.is_alphanumeric() => !is_escape_letter(text, s - c.len_utf8(), c),
        _ => false,
    }
}

fn byte_at(text: &str, i: usize) -> Option<u8> {
    text.as_bytes().get(i).copied()
}

/// A number-like candidate must not continue a longer number on the left:
/// no word char, no `+`, and no `digit` + `.`/`-`/`/` right before it.
fn number_start_ok(text: &str, s: usize) -> bool {
    if word_before(text, s) {
        return false;
    }
    match s.checked_sub(1).and_then(|i| byte_at(text, i)) {
        Some(b'+') => false,
        Some(b'.' | b'-' | b'/' | b':' | b',') => !s
            .checked_sub(2)
            .and_then(|i| byte_at(text, i))
            .is_some_and(|b| b.is_ascii_digit()),
        _ => true,
    }
}

/// A number-like candidate must not continue on the right: no word char and
/// no `.`/`-`/`/` followed by a digit.
fn number_end_ok(text: &str, e: usize) -> bool {
    if word_after(text, e) {
        return false;
    }
    match byte_at(text, e) {
        Some(b'.' | b'-' | b'/' | b',') => {
            !byte_at(text, e + 1).is_some_and(|b| b.is_ascii_digit())
        }
        _ => true,
    }
}

// ---------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------

/// Longest private-key block searched for its END line (an RSA-8192 PEM is
/// about 6.5 kB; JSON escaping adds a little).
const MAX_KEY_BLOCK: usize = 16 * 1024;

fn private_key(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    const BEGIN: usize = "-----BEGIN ".len();
    const DASHES: usize = "-----".len();
    let label = text.get(s + BEGIN..e - DASHES)?;
    let end_marker = format!("-----END {label}-----");
    // Keys are a few kB; a bounded window keeps many BEGIN lines linear.
    let window = &text.as_bytes()[e..text.len().min(e + MAX_KEY_BLOCK)];
    if let Some(i) = memchr::memmem::find(window, end_marker.as_bytes()) {
        return Some((s, e + i + end_marker.len()));
    }
    // No END line (truncated): take the base64 lines that follow. PEM body
    // lines are full length (64 or 70 chars) except the last one, so a short
    // line ends the body.
    Some((s, truncated_key_body_end(text.as_bytes(), e)))
}

fn truncated_key_body_end(b: &[u8], e: usize) -> usize {
    let newline_len = |i: usize| -> usize {
        match (b.get(i), b.get(i + 1), b.get(i + 2), b.get(i + 3)) {
            (Some(b'\\'), Some(b'r'), Some(b'\\'), Some(b'n')) => 4,
            (Some(b'\\'), Some(b'n' | b'r'), _, _) => 2,
            (Some(b'\r'), Some(b'\n'), _, _) => 2,
            (Some(b'\n' | b'\r'), _, _, _) => 1,
            _ => 0,
        }
    };
    let mut end = e;
    let mut i = e;
    loop {
        // Expect a line break, then one base64 line.
        let nl = newline_len(i);
        if nl == 0 {
            return end;
        }
        let line_start = i + nl;
        let mut j = line_start;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || matches!(b[j], b'+' | b'/' | b'=')) {
            j += 1;
        }
        let line_len = j - line_start;
        if line_len == 0 || (j < b.len() && newline_len(j) == 0) {
            return end;
        }
        end = j;
        i = j;
        if line_len < 60 {
            return end;
        }
    }
}

fn jwt(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let prev_ok = !alnum_before(text, s) && !matches!(char_before(text, s), Some('-' | '_'));
    (prev_ok && e - s >= 20).then_some((s, e))
}

fn bearer(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if alnum_before(text, s) {
        return None;
    }
    let b = text.as_bytes();
    let mut t = s + "bearer".len();
    while t < e && (b[t] == b' ' || b[t] == b'\t') {
        t += 1;
    }
    let token = &b[t..e];
    // "Bearer authentication-header-explained": prose, not a token.
    let prose = token.iter().all(|c| c.is_ascii_lowercase() || *c == b'-');
    (!prose && token.len() >= 16).then_some((t, e))
}

fn aws_secret(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if alnum_before(text, s) {
        return None;
    }
    let after = byte_at(text, e);
    if after.is_some_and(|b| b.is_ascii_alphanumeric() || b"/+=".contains(&b)) {
        return None;
    }
    Some((e - 40, e))
}

fn google_key(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let after = byte_at(text, e);
    let after_ok = !after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (!alnum_before(text, s) && after_ok).then_some((s, e))
}

fn openai_key(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if alnum_before(text, s) || matches!(char_before(text, s), Some('-' | '_')) {
        return None;
    }
    let body = &text.as_bytes()[s + 3..e];
    let upper = body.iter().any(u8::is_ascii_uppercase);
    let lower = body.iter().any(u8::is_ascii_lowercase);
    let digit = body.iter().any(u8::is_ascii_digit);
    (upper && lower && digit).then_some((s, e))
}

// ---------------------------------------------------------------------------
// E-mail
// ---------------------------------------------------------------------------

fn email(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut start = s;
    // `\njohn@example.com` inside JSON text: the `n` belongs to the escape.
    if start >= 1 && b[start - 1] == b'\\' && matches!(b[start], b'n' | b'r' | b't') {
        start += 1;
    }
    while start < e && !b[start].is_ascii_alphanumeric() {
        start += 1;
    }
    let at = start + memchr::memchr(b'@', &b[start..e])?;
    if at == start || b[at - 1] == b'.' {
        return None;
    }
    let domain = &text[at + 1..e];
    if domain
        .split('.')
        .any(|l| l.is_empty() || l.starts_with('-') || l.ends_with('-'))
    {
        return None;
    }
    if word_before(text, start) {
        return None;
    }
    // `git@github.com:org/repo.git` is an SSH remote, not an address.
    if byte_at(text, e) == Some(b':') && byte_at(text, e + 1).is_some_and(|b| b.is_ascii_graphic())
    {
        return None;
    }
    Some((start, e))
}

// ---------------------------------------------------------------------------
// IBAN
// ---------------------------------------------------------------------------

fn iban(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if word_before(text, s) {
        return None;
    }
    let b = text.as_bytes();
    let mut end = e;
    loop {
        if !word_after(text, end) && iban_checksum_ok(&b[s..end]) {
            return Some((s, end));
        }
        // Grouped form: the last "group" may have been a word of the
        // following prose ("... 7034 from"); drop it and retry.
        let cut = memchr::memrchr(b' ', &b[s..end])?;
        if cut < 4 + 8 {
            return None;
        }
        end = s + cut;
    }
}

fn iban_checksum_ok(cand: &[u8]) -> bool {
    let compact: Vec<u8> = cand
        .iter()
        .filter(|c| **c != b' ')
        .map(u8::to_ascii_uppercase)
        .collect();
    if !(15..=34).contains(&compact.len())
        || !compact[..2].iter().all(u8::is_ascii_alphabetic)
        || !compact[2..4].iter().all(u8::is_ascii_digit)
    {
        return false;
    }
    let check = (compact[2] - b'0') * 10 + (compact[3] - b'0');
    if !(2..=98).contains(&check) {
        return false;
    }
    let mut rem: u32 = 0;
    for c in compact[4..].iter().chain(compact[..4].iter()) {
        rem = match c {
            b'0'..=b'9' => (rem * 10 + u32::from(c - b'0')) % 97,
            b'A'..=b'Z' => (rem * 100 + u32::from(c - b'A') + 10) % 97,
            _ => return false,
        };
    }
    rem == 1
}

// ---------------------------------------------------------------------------
// Payment cards
// ---------------------------------------------------------------------------

fn card(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if !number_start_ok(text, s) {
        return None;
    }
    let b = text.as_bytes();
    let mut end = e;
    loop {
        if card_ok(&b[s..end])
            && !word_after(text, end)
            && !matches!(byte_at(text, end), Some(b'.' | b',') if byte_at(text, end + 1).is_some_and(|c| c.is_ascii_digit()))
        {
            return Some((s, end));
        }
        // Grouped number followed by more digits (a CVV, a year, ...):
        // try ending at an earlier separator.
        let cut = b[s..end].iter().rposition(|c| *c == b' ' || *c == b'-')?;
        end = s + cut;
    }
}

fn card_ok(cand: &[u8]) -> bool {
    let mut digits: Vec<u8> = Vec::with_capacity(19);
    let mut sep: Option<u8> = None;
    let mut groups: Vec<usize> = Vec::with_capacity(6);
    let mut group = 0usize;
    for &c in cand {
        if c.is_ascii_digit() {
            digits.push(c - b'0');
            group += 1;
        } else {
            if sep.is_some_and(|x| x != c) {
                return false;
            }
            sep = Some(c);
            groups.push(group);
            group = 0;
        }
    }
    groups.push(group);
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    if sep.is_some() && (groups[0] != 4 || groups.iter().any(|g| *g < 3)) {
        return false;
    }
    // Issuer prefixes: 2 (Mastercard), 3 (Amex, Diners, JCB), 4 (Visa),
    // 5 (Mastercard, Maestro), 6 (Discover, UnionPay, Maestro). Rejects
    // epoch-millisecond timestamps and most order numbers.
    if !(2..=6).contains(&digits[0]) || digits.iter().all(|d| *d == digits[0]) {
        return false;
    }
    luhn(&digits)
}

fn luhn(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (i, d) in digits.iter().rev().enumerate() {
        let mut v = u32::from(*d);
        if i % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum.is_multiple_of(10)
}

// ---------------------------------------------------------------------------
// SSN
// ---------------------------------------------------------------------------

fn ssn(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let b = &text.as_bytes()[s..e];
    if b[3] != b[6] || !number_start_ok(text, s) || !number_end_ok(text, e) {
        return None;
    }
    let num = |r: &[u8]| r.iter().fold(0u32, |a, d| a * 10 + u32::from(d - b'0'));
    let area = num(&b[0..3]);
    let group = num(&b[4..6]);
    let serial = num(&b[7..11]);
    let ok = area != 0 && area != 666 && area < 900 && group != 0 && serial != 0;
    ok.then_some((s, e))
}

// ---------------------------------------------------------------------------
// IP addresses
// ---------------------------------------------------------------------------

fn ipv4(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if word_before(text, s) || matches!(char_before(text, s), Some('.')) {
        return None;
    }
    if word_after(text, e)
        || (byte_at(text, e) == Some(b'.')
            && byte_at(text, e + 1).is_some_and(|b| b.is_ascii_digit()))
    {
        return None;
    }
    // "version 1.2.3.4" is a version, not an address.
    let before = text[..s].trim_end();
    if before.len() < s && ends_with_ignore_case(before, "version") {
        return None;
    }
    let ip = text[s..e].parse::<Ipv4Addr>().ok()?;
    // Loopback, "any" and broadcast addresses identify nothing.
    if ip.is_loopback() || ip.is_unspecified() || ip.is_broadcast() {
        return None;
    }
    Some((s, e))
}

fn ends_with_ignore_case(hay: &str, suffix: &str) -> bool {
    hay.len() >= suffix.len()
        && hay.as_bytes()[hay.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

fn ipv6(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if word_before(text, s) || matches!(char_before(text, s), Some(':' | '.')) {
        return None;
    }
    let mut end = e;
    // "fe80::1:" at the end of a clause: the trailing colon is punctuation.
    if text.as_bytes()[end - 1] == b':' && !text[s..end].ends_with("::") {
        end -= 1;
    }
    if word_after(text, end)
        || (byte_at(text, end) == Some(b':')
            && byte_at(text, end + 1).is_some_and(|b| b.is_ascii_hexdigit() || b == b':'))
    {
        return None;
    }
    let cand = &text[s..end];
    // Code paths like `std::io`, `foo::bar`, `A::B` are not addresses: ask
    // for a digit and at least two hex groups (or a leading `::` and one).
    if !cand.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let groups = cand.split(':').filter(|g| !g.is_empty()).count();
    if groups < 2 && !(cand.starts_with("::") && groups >= 1) {
        return None;
    }
    let ip = cand.parse::<Ipv6Addr>().ok()?;
    if ip.is_loopback() || ip.is_unspecified() {
        return None;
    }
    Some((s, end))
}

// ---------------------------------------------------------------------------
// Phones
// ---------------------------------------------------------------------------

/// Digit groups and separators of a phone candidate.
struct PhoneShape {
    digits: usize,
    groups: Vec<usize>,
    /// Separators between groups (`' '`, `'.'`, `'-'`, `'/'`), not counting
    /// parentheses.
    seps: Vec<u8>,
    parens: bool,
}

fn phone_shape(b: &[u8]) -> PhoneShape {
    let mut shape = PhoneShape {
        digits: 0,
        groups: Vec::with_capacity(8),
        seps: Vec::with_capacity(8),
        parens: false,
    };
    let mut group = 0usize;
    let mut prev = 0u8;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'0'..=b'9' => {
                shape.digits += 1;
                group += 1;
            }
            _ => {
                if group > 0 {
                    shape.groups.push(group);
                    group = 0;
                }
                if c == b'(' || c == b')' {
                    shape.parens = true;
                } else if c != b'+' && prev != b')' && b.get(i + 1) != Some(&b'(') {
                    // Separators next to parentheses ("(555) 123", "+1 (555)")
                    // are not counted.
                    shape.seps.push(c);
                }
            }
        }
        prev = c;
    }
    if group > 0 {
        shape.groups.push(group);
    }
    shape
}

fn phone_boundaries_ok(text: &str, s: usize, e: usize) -> bool {
    number_start_ok(text, s) && number_end_ok(text, e)
}

/// Greedy phone candidates may have swallowed a following number
/// ("+44 20 7946 0958 2024"): on failure, retry ending at earlier spaces.
fn shrinking_at_spaces(
    text: &str,
    s: usize,
    e: usize,
    check: fn(&str, usize, usize) -> Option<(usize, usize)>,
) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut end = e;
    for _ in 0..8 {
        if let Some(hit) = check(text, s, end) {
            return Some(hit);
        }
        let cut = memchr::memrchr(b' ', &b[s..end])?;
        if cut == 0 || !(b[s + cut - 1].is_ascii_digit() || b[s + cut - 1] == b')') {
            return None;
        }
        end = s + cut;
    }
    None
}

fn phone_intl(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    shrinking_at_spaces(text, s, e, phone_intl_exact)
}

fn phone_trunk(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    shrinking_at_spaces(text, s, e, phone_trunk_exact)
}

fn phone_intl_exact(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if !phone_boundaries_ok(text, s, e) {
        return None;
    }
    let shape = phone_shape(&text.as_bytes()[s..e]);
    if !(7..=15).contains(&shape.digits) {
        return None;
    }
    if shape.seps.is_empty() && !shape.parens && shape.digits < 10 {
        return None;
    }
    // Decimal numbers ("+12.5 34.2 56.1") mix '.' with spaces and have
    // several one-digit groups.
    if shape.seps.contains(&b'.') && shape.seps.iter().any(|c| *c != b'.') {
        return None;
    }
    let single = shape.groups.iter().skip(1).filter(|g| **g == 1).count();
    if single > 1 && !(shape.parens && single == 2) {
        return None;
    }
    Some((s, e))
}

fn phone_nanp(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if !phone_boundaries_ok(text, s, e) {
        return None;
    }
    let shape = phone_shape(&text.as_bytes()[s..e]);
    if !shape.parens {
        // 555-123-4567, 555.123.4567, 555 123 4567: one separator style.
        if let Some(last) = shape.seps.last() {
            if shape.seps.iter().any(|c| c != last) {
                return None;
            }
        }
    }
    Some((s, e))
}

fn phone_trunk_exact(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    if !phone_boundaries_ok(text, s, e) {
        return None;
    }
    let shape = phone_shape(&text.as_bytes()[s..e]);
    if !(9..=12).contains(&shape.digits) {
        return None;
    }
    // Separators after the area code must agree ("030/123 45 67" is fine,
    // "01.02.2024 12" is a date and a number).
    let rest = match shape.seps.first() {
        Some(b'/') => &shape.seps[1..],
        _ => &shape.seps[..],
    };
    if let Some(first) = rest.first() {
        if rest.iter().any(|c| c != first || *c == b'/') {
            return None;
        }
    }
    // 078-05-1120 is an SSN shape, not a phone.
    if shape.groups == [3, 2, 4] {
        return None;
    }
    Some((s, e))
}

// ---------------------------------------------------------------------------
// Terms
// ---------------------------------------------------------------------------

fn term(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let m = &text[s..e];
    let first_word = m.chars().next().is_some_and(is_word_char);
    let last_word = m.chars().next_back().is_some_and(is_word_char);
    if (first_word && word_before(text, s)) || (last_word && word_after(text, e)) {
        return None;
    }
    Some((s, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_accepts_valid_and_rejects_off_by_one_numbers() {
        let digits = |s: &str| s.bytes().map(|b| b - b'0').collect::<Vec<_>>();
        assert!(luhn(&digits("4111111111111111")));
        assert!(luhn(&digits("378282246310005")));
        assert!(!luhn(&digits("4111111111111112")));
    }

    #[test]
    fn iban_checksum_follows_iso_13616() {
        assert!(iban_checksum_ok(b"GB82 WEST 1234 5698 7654 32"));
        assert!(iban_checksum_ok(b"DE89370400440532013000"));
        assert!(iban_checksum_ok(b"de89370400440532013000"));
        assert!(!iban_checksum_ok(b"GB82 WEST 1234 5698 7654 31"));
        assert!(!iban_checksum_ok(b"GB00 WEST 1234 5698 7654 32"));
        assert!(!iban_checksum_ok(b"GB82WEST123"));
    }

    #[test]
    fn left_boundary_bytes_never_start_the_detector_body_except_phone_parenthesis() {
        for (det, _) in BUILTIN {
            let Some(lb) = det.left_boundary() else {
                continue;
            };
            for b in 0u8..0x80 {
                if lb(b) && det.may_start_with(b) {
                    assert!(
                        b == b'(' && matches!(det, Det::PhoneNanp | Det::PhoneTrunk),
                        "{det:?} accepts {:?} both as boundary and as first byte",
                        b as char
                    );
                }
            }
        }
    }

    #[test]
    fn every_builtin_pattern_compiles_on_its_own() {
        for (det, pat) in BUILTIN {
            assert!(meta::Regex::new(&format!("(?-u:{pat})")).is_ok(), "{det:?}");
        }
    }
}
