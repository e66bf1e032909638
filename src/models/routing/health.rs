//! Passive health of one target in this process, kept in atomics so that the
//! request path never takes a lock: requests in flight, failures in a row,
//! and a rest after [`FAILURES_TO_REST`] of them.
//!
//! A resting target gets no requests until its rest is over; then exactly
//! one request (the trial) may go to it. The trial's success makes the
//! target healthy again; its failure starts a new rest. A trial that ends
//! without an outcome (the client went away) frees the slot for another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Failures in a row that put a target to rest.
pub const FAILURES_TO_REST: u32 = 3;

/// The default rest (`GATEHOUSE_TARGET_COOLDOWN_S`).
pub const DEFAULT_COOLDOWN_S: u64 = 30;

/// Milliseconds on a monotonic clock, from 1 at the first call in this
/// process (0 means "not resting" below).
pub fn mono_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let ms = START.get_or_init(Instant::now).elapsed().as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1
}

#[derive(Debug)]
pub struct TargetHealth {
    cooldown_ms: u64,
    in_flight: AtomicU32,
    failures: AtomicU32,
    /// When the current rest ends ([`mono_ms`]); 0 when the target is not resting.
    resting_until: AtomicU64,
    /// The `resting_until` whose trial request has been handed out.
    trial_of: AtomicU64,
}

/// What a planner may do with a target now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Open,
    /// The rest is over and its trial is still free.
    Trial,
    /// Resting (or its trial is taken).
    Closed,
}

/// A target's state for the admin API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetState {
    /// Fewer than [`FAILURES_TO_REST`] failures in a row and not resting.
    pub healthy: bool,
    pub in_flight: u32,
    /// Failures in a row.
    pub failures: u32,
    /// While not healthy: when the rest ends (or ended, awaiting its trial),
    /// in milliseconds from now (negative: in the past).
    pub rest_ends_in_ms: Option<i64>,
}

impl TargetHealth {
    pub fn new(cooldown: Duration) -> Self {
        TargetHealth {
            cooldown_ms: u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX / 2),
            in_flight: AtomicU32::new(0),
            failures: AtomicU32::new(0),
            resting_until: AtomicU64::new(0),
            trial_of: AtomicU64::new(0),
        }
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn access(&self, now: u64) -> Access {
        let until = self.resting_until.load(Ordering::Acquire);
        if until == 0 {
            Access::Open
        } else if now < until || self.trial_of.load(Ordering::Acquire) == until {
            Access::Closed
        } else {
            Access::Trial
        }
    }

    /// Starts a request on this target. Without `force`, only when it is
    /// open or its trial is free (taking the trial); with `force` always (a
    /// last resort when every target rests; not a trial).
    pub fn enter(self: &Arc<Self>, now: u64, force: bool) -> Option<InFlight> {
        let until = self.resting_until.load(Ordering::Acquire);
        let trial = if until == 0 {
            None
        } else if now >= until && self.claim_trial(until) {
            Some(until)
        } else if force {
            None
        } else {
            return None;
        };
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(InFlight {
            health: Arc::clone(self),
            trial,
            settled: false,
        })
    }

    fn claim_trial(&self, until: u64) -> bool {
        let taken = self.trial_of.load(Ordering::Acquire);
        taken != until
            && self
                .trial_of
                .compare_exchange(taken, until, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    fn ok(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.resting_until.store(0, Ordering::Release);
    }

    fn failed(&self, now: u64) {
        let failures = self
            .failures
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                Some(f.saturating_add(1))
            })
            .map_or(u32::MAX, |f| f.saturating_add(1));
        if failures < FAILURES_TO_REST {
            return;
        }
        // Each rest gets its own end time, never one whose trial was already
        // handed out, so every rest has exactly one trial.
        let taken = self.trial_of.load(Ordering::Acquire);
        let _ = self
            .resting_until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                Some(
                    now.saturating_add(self.cooldown_ms)
                        .max(old.saturating_add(1))
                        .max(taken.saturating_add(1)),
                )
            });
    }

    pub fn state(&self, now: u64) -> TargetState {
        let failures = self.failures.load(Ordering::Relaxed);
        let until = self.resting_until.load(Ordering::Acquire);
        let resting = until != 0;
        let delta = |u: u64| {
            let (u, n) = (
                i64::try_from(u).unwrap_or(i64::MAX),
                i64::try_from(now).unwrap_or(0),
            );
            u.saturating_sub(n)
        };
        TargetState {
            healthy: !resting && failures < FAILURES_TO_REST,
            in_flight: self.in_flight(),
            failures,
            rest_ends_in_ms: resting.then(|| delta(until)),
        }
    }
}

/// One request on a target: counted in flight until dropped. Report what
/// happened with [`InFlight::ok`] or [`InFlight::failed`] (more than once is
/// fine: a stream that began well may still break).
#[derive(Debug)]
pub struct InFlight {
    health: Arc<TargetHealth>,
    /// The rest whose trial this request is.
    trial: Option<u64>,
    settled: bool,
}

impl InFlight {
    /// The target answered (a success, or a refusal that shows it is alive).
    pub fn ok(&mut self) {
        self.settled = true;
        self.health.ok();
    }

    /// The attempt failed in a way that counts against the target.
    pub fn failed(&mut self, now: u64) {
        self.settled = true;
        self.health.failed(now);
    }

    pub fn is_trial(&self) -> bool {
        self.trial.is_some()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.health.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let (Some(until), false) = (self.trial, self.settled) {
            // No verdict: let another request make the trial.
            let _ = self.health.trial_of.compare_exchange(
                until,
                0,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
}

/// The health of every target in this process, by provider and upstream
/// model. Looked up only when the catalog is rebuilt; requests hold the
/// `Arc`s directly.
#[derive(Debug)]
pub struct HealthRegistry {
    cooldown: Duration,
    targets: Mutex<HashMap<(String, String), Arc<TargetHealth>>>,
}

impl HealthRegistry {
    pub fn new(cooldown: Duration) -> Self {
        HealthRegistry {
            cooldown,
            targets: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, provider: &str, upstream_model: &str) -> Arc<TargetHealth> {
        let mut map = self.targets.lock();
        let key = (provider.to_string(), upstream_model.to_string());
        Arc::clone(
            map.entry(key)
                .or_insert_with(|| Arc::new(TargetHealth::new(self.cooldown))),
        )
    }

    /// Forgets targets no model names any more.
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.targets.lock().retain(|(p, m), _| keep(p, m));
    }

    pub fn len(&self) -> usize {
        self.targets.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOL: u64 = 30_000;

    fn target() -> Arc<TargetHealth> {
        Arc::new(TargetHealth::new(Duration::from_millis(COOL)))
    }

    fn fail_n(h: &Arc<TargetHealth>, n: u32, now: u64) {
        for _ in 0..n {
            h.enter(now, true).expect("forced entry").failed(now);
        }
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let h = target();
        let a = h.enter(1, false).expect("open");
        let b = h.enter(1, false).expect("open");
        assert_eq!(h.in_flight(), 2);
        drop(a);
        assert_eq!(h.in_flight(), 1);
        drop(b);
        assert_eq!(h.in_flight(), 0);
    }

    #[test]
    fn three_failures_in_a_row_rest_the_target_for_the_cooldown() {
        let h = target();
        fail_n(&h, 2, 100);
        assert_eq!(h.access(100), Access::Open);
        let s = h.state(100);
        assert_eq!((s.healthy, s.failures), (true, 2));
        fail_n(&h, 1, 100);
        assert_eq!(h.access(101), Access::Closed);
        assert!(h.enter(101, false).is_none());
        assert!(h.enter(100 + COOL - 1, false).is_none());
        let s = h.state(100);
        assert_eq!((s.healthy, s.failures), (false, 3));
        assert_eq!(s.rest_ends_in_ms, Some(COOL as i64));
    }

    #[test]
    fn a_success_between_failures_starts_the_count_again() {
        let h = target();
        fail_n(&h, 2, 1);
        h.enter(1, false).expect("open").ok();
        fail_n(&h, 2, 1);
        assert_eq!(h.access(2), Access::Open);
        assert_eq!(h.state(2).failures, 2);
    }

    #[test]
    fn after_the_rest_exactly_one_trial_goes_through() {
        let h = target();
        fail_n(&h, 3, 0);
        let end = COOL;
        assert_eq!(h.access(end), Access::Trial);
        let trial = h.enter(end, false).expect("the trial");
        assert!(trial.is_trial());
        assert_eq!(h.access(end + 1), Access::Closed);
        assert!(h.enter(end + 1, false).is_none(), "one trial at a time");
        // Forced entries (every target resting) still go, and are no trial.
        let forced = h.enter(end + 1, true).expect("forced");
        assert!(!forced.is_trial());
        drop(forced);
        drop(trial);
    }

    #[test]
    fn a_successful_trial_makes_the_target_healthy() {
        let h = target();
        fail_n(&h, 3, 0);
        h.enter(COOL, false).expect("trial").ok();
        assert_eq!(h.access(COOL), Access::Open);
        let s = h.state(COOL);
        assert_eq!((s.healthy, s.failures, s.rest_ends_in_ms), (true, 0, None));
    }

    #[test]
    fn a_failed_trial_rests_the_target_again_with_a_new_trial_after() {
        let h = target();
        fail_n(&h, 3, 0);
        h.enter(COOL, false).expect("trial").failed(COOL);
        assert_eq!(h.access(COOL + 1), Access::Closed);
        assert!(h.enter(2 * COOL - 1, false).is_none());
        let second = h.enter(2 * COOL, false).expect("the next rest's trial");
        assert!(second.is_trial());
    }

    #[test]
    fn a_trial_dropped_without_a_verdict_frees_the_slot() {
        let h = target();
        fail_n(&h, 3, 0);
        let trial = h.enter(COOL, false).expect("trial");
        drop(trial);
        assert_eq!(h.access(COOL), Access::Trial);
        assert!(h.enter(COOL, false).expect("again").is_trial());
    }

    #[test]
    fn failures_while_resting_extend_the_rest() {
        let h = target();
        fail_n(&h, 3, 0);
        fail_n(&h, 1, 10_000);
        assert_eq!(h.access(COOL), Access::Closed);
        assert_eq!(h.access(10_000 + COOL), Access::Trial);
    }

    #[test]
    fn a_zero_cooldown_still_allows_one_trial_per_rest() {
        let h = Arc::new(TargetHealth::new(Duration::ZERO));
        fail_n(&h, 3, 5);
        let t = h.enter(6, false).expect("trial at once");
        assert!(t.is_trial());
        assert!(h.enter(6, false).is_none());
    }

    #[test]
    fn the_registry_shares_one_health_per_provider_and_upstream_model() {
        let r = HealthRegistry::new(Duration::from_secs(30));
        let a = r.get("vllm-1", "llama");
        let b = r.get("vllm-1", "llama");
        let c = r.get("vllm-2", "llama");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        r.retain(|p, _| p == "vllm-2");
        assert_eq!(r.len(), 1);
        assert!(!Arc::ptr_eq(&a, &r.get("vllm-1", "llama")));
    }

    #[test]
    fn the_monotonic_clock_never_reads_zero() {
        assert!(mono_ms() >= 1);
    }
}
