//! Login throttling: failures are counted per account and per client address
//! in a sliding window; past the limit the login answers 429 with Retry-After.

use std::time::{Duration, Instant};

use dashmap::DashMap;

pub struct Throttle {
    failures: DashMap<String, Vec<Instant>>,
    window: Duration,
}

impl Throttle {
    pub fn new(window: Duration) -> Self {
        Throttle {
            failures: DashMap::new(),
            window,
        }
    }

    /// Seconds to wait when `key` already has `max` failures in the window.
    pub fn blocked_for(&self, key: &str, max: u32) -> Option<u64> {
        let entry = self.failures.get(key)?;
        let now = Instant::now();
        let recent: Vec<&Instant> = entry
            .iter()
            .filter(|t| now.duration_since(**t) < self.window)
            .collect();
        if recent.len() >= max as usize {
            let oldest = recent.iter().min()?;
            let wait = self.window.saturating_sub(now.duration_since(**oldest));
            return Some(wait.as_secs().max(1));
        }
        None
    }

    pub fn record_failure(&self, key: &str) {
        let now = Instant::now();
        {
            let mut e = self.failures.entry(key.to_string()).or_default();
            e.retain(|t| now.duration_since(*t) < self.window);
            e.push(now);
        }
        // The entry guard is released above: len() locks every shard.
        if self.failures.len() > 100_000 {
            let window = self.window;
            self.failures
                .retain(|_, v| v.iter().any(|t| now.duration_since(*t) < window));
        }
    }

    pub fn reset(&self, key: &str) {
        self.failures.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_at_the_limit_not_before() {
        let t = Throttle::new(Duration::from_secs(60));
        for _ in 0..4 {
            t.record_failure("a");
        }
        assert!(t.blocked_for("a", 5).is_none());
        t.record_failure("a");
        let wait = t.blocked_for("a", 5).expect("blocked at 5 failures");
        assert!((1..=60).contains(&wait));
        assert!(t.blocked_for("b", 5).is_none());
        t.reset("a");
        assert!(t.blocked_for("a", 5).is_none());
    }
}
