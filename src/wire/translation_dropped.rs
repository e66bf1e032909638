//! `gatehouse_translation_dropped_total{field}`: request members a
//! translation between dialects had no place for. `field` is one of a fixed
//! set of names (else `other`), so a client cannot grow the label set.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The names counted under their own label; the last slot is `other`.
const FIELDS: &[&str] = &[
    "audio",
    "cache_control",
    "container",
    "context_management",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "mcp_servers",
    "metadata",
    "modalities",
    "output_config",
    "prediction",
    "presence_penalty",
    "reasoning_effort",
    "response_format",
    "seed",
    "service_tier",
    "store",
    "thinking",
    "top_logprobs",
    "web_search_options",
];

static COUNTS: [AtomicU64; FIELDS.len() + 1] = [const { AtomicU64::new(0) }; FIELDS.len() + 1];

/// Counts each dropped member once.
pub fn count<S: AsRef<str>>(fields: &[S]) {
    for f in fields {
        let slot = FIELDS
            .iter()
            .position(|k| *k == f.as_ref())
            .unwrap_or(FIELDS.len());
        COUNTS[slot].fetch_add(1, Ordering::Relaxed);
    }
}

/// The counter in Prometheus' text format (labels with a count only).
pub fn render(out: &mut String) {
    out.push_str("# HELP gatehouse_translation_dropped_total Request members a dialect translation did not send upstream.\n");
    out.push_str("# TYPE gatehouse_translation_dropped_total counter\n");
    for (i, c) in COUNTS.iter().enumerate() {
        let n = c.load(Ordering::Relaxed);
        if n > 0 {
            let field = FIELDS.get(i).copied().unwrap_or("other");
            let _ = writeln!(
                out,
                "gatehouse_translation_dropped_total{{field=\"{field}\"}} {n}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_count_under_their_own_label_and_others_under_other() {
        count(&["seed", "x-made-up", "seed"]);
        let mut out = String::new();
        render(&mut out);
        let n = |label: &str| {
            out.lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "gatehouse_translation_dropped_total{{field=\"{label}\"}}"
                    ))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        assert!(n("seed") >= 2 && n("other") >= 1, "{out}");
        assert!(!out.contains("x-made-up"));
    }
}
