//! Counters of upstream attempts and failures by provider and cause, for
//! `/metrics`. Each target holds its provider's counters directly, so
//! counting is one atomic add; the registry is only walked to render.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::Cause;

#[derive(Debug, Default)]
pub struct ProviderStats {
    attempts: AtomicU64,
    failures: [AtomicU64; Cause::ALL.len()],
}

impl ProviderStats {
    pub fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn failure(&self, cause: Cause) {
        self.failures[cause as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    pub fn failures(&self, cause: Cause) -> u64 {
        self.failures[cause as usize].load(Ordering::Relaxed)
    }
}

/// Counters of every provider seen since the start (kept when a provider
/// is removed, as Prometheus counters should be).
#[derive(Debug, Default)]
pub struct StatsRegistry {
    providers: Mutex<BTreeMap<String, Arc<ProviderStats>>>,
}

impl StatsRegistry {
    pub fn get(&self, provider: &str) -> Arc<ProviderStats> {
        let mut map = self.providers.lock();
        if let Some(s) = map.get(provider) {
            return Arc::clone(s);
        }
        let s = Arc::new(ProviderStats::default());
        map.insert(provider.to_string(), Arc::clone(&s));
        s
    }

    /// Prometheus text: `gatehouse_upstream_attempts_total{provider}` and
    /// `gatehouse_upstream_failures_total{provider,cause}` (causes that
    /// happened only). Provider names are admin-chosen, from a safe set of
    /// characters, so they need no escaping.
    pub fn render(&self, out: &mut String) {
        let rows: Vec<(String, Arc<ProviderStats>)> = self
            .providers
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        out.push_str("# HELP gatehouse_upstream_attempts_total Upstream attempts by provider (retries and fallbacks included).\n");
        out.push_str("# TYPE gatehouse_upstream_attempts_total counter\n");
        for (p, s) in &rows {
            let _ = writeln!(
                out,
                "gatehouse_upstream_attempts_total{{provider=\"{p}\"}} {}",
                s.attempts()
            );
        }
        out.push_str("# HELP gatehouse_upstream_failures_total Failed upstream attempts by provider and cause.\n");
        out.push_str("# TYPE gatehouse_upstream_failures_total counter\n");
        for (p, s) in &rows {
            for c in Cause::ALL {
                let n = s.failures(c);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "gatehouse_upstream_failures_total{{provider=\"{p}\",cause=\"{}\"}} {n}",
                        c.as_str()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_by_provider_and_cause() {
        let r = StatsRegistry::default();
        let a = r.get("vllm-1");
        a.attempt();
        a.attempt();
        a.failure(Cause::Status5xx);
        r.get("hosted").attempt();
        assert!(Arc::ptr_eq(&a, &r.get("vllm-1")));
        let mut out = String::new();
        r.render(&mut out);
        assert!(
            out.contains("gatehouse_upstream_attempts_total{provider=\"vllm-1\"} 2\n"),
            "{out}"
        );
        assert!(out.contains("gatehouse_upstream_attempts_total{provider=\"hosted\"} 1\n"));
        assert!(out.contains(
            "gatehouse_upstream_failures_total{provider=\"vllm-1\",cause=\"status_5xx\"} 1\n"
        ));
        assert!(
            !out.contains("cause=\"connect\""),
            "causes that never happened are left out"
        );
    }
}
