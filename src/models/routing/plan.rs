//! The order in which one request tries targets.
//!
//! Stage 0 is the requested model, then its fallbacks in order. Each call to
//! [`Attempts::next`] picks one target not yet tried by this request:
//!
//! 1. from the first stage that has a target open to requests (not resting,
//!    or at the end of its rest with its one trial still free), chosen by
//!    that stage's [`Routing`] among those open targets;
//! 2. when no stage has one (every untried target rests), from the first
//!    stage with any untried target, resting or not: a request still tries
//!    rather than failing untried.
//!
//! No target is tried twice, and no more than `max_attempts` in all. The
//! choice is made at each step, not up front, so `least_busy` sees the load
//! of the moment and a trial slot is only taken by the attempt that uses it.

use rand::Rng;

use super::{InFlight, Routing, Target};

/// Targets a stage can hold: one bit each in a `u64`. (Validation allows
/// far fewer; extra targets are never tried.)
const MAX_PLANNED: usize = 64;

/// One model in the chain: its targets and its routing.
#[derive(Clone, Copy, Debug)]
pub struct Stage<'a> {
    pub targets: &'a [Target],
    pub routing: Routing,
}

/// The next target to try, counted in flight while `guard` lives.
#[derive(Debug)]
pub struct Pick<'a> {
    /// Which stage (0: the requested model; 1..: its fallbacks in order).
    pub stage: usize,
    pub target: &'a Target,
    pub guard: InFlight,
}

/// The attempts of one request.
#[derive(Debug)]
pub struct Attempts<'a> {
    stages: Vec<Stage<'a>>,
    /// Per stage, a bit per target already tried.
    tried: Vec<u64>,
    made: u32,
    max: u32,
}

fn all_bits(n: usize) -> u64 {
    if n >= MAX_PLANNED {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The indexes of the set bits, lowest first.
fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let i = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        Some(i)
    })
}

/// One target among `mask` by the routing policy. `mask` is not empty.
fn choose(targets: &[Target], mask: u64, routing: Routing, rng: &mut impl Rng) -> usize {
    let mut pool = mask;
    if routing == Routing::LeastBusy {
        let mut least = u32::MAX;
        for i in bits(mask) {
            let load = targets[i].health.in_flight();
            if load < least {
                least = load;
                pool = 1 << i;
            } else if load == least {
                pool |= 1 << i;
            }
        }
    }
    // Weighted draw among the pool (least_busy: ties go by weight too).
    let weight = |i: usize| u64::from(targets[i].weight.max(1));
    let total: u64 = bits(pool).map(weight).sum();
    let mut r = rng.gen_range(0..total.max(1));
    let mut last = 0;
    for i in bits(pool) {
        let w = weight(i);
        if r < w {
            return i;
        }
        r -= w;
        last = i;
    }
    last
}

impl<'a> Attempts<'a> {
    pub fn new(stages: Vec<Stage<'a>>, max_attempts: u32) -> Self {
        let tried = vec![0; stages.len()];
        Attempts {
            stages,
            tried,
            made: 0,
            max: max_attempts.max(1),
        }
    }

    /// Attempts handed out so far.
    pub fn made(&self) -> u32 {
        self.made
    }

    /// The next target to try at time `now` ([`super::mono_ms`]); None when
    /// every target was tried or `max_attempts` were made.
    pub fn next(&mut self, now: u64, rng: &mut impl Rng) -> Option<Pick<'a>> {
        if self.made >= self.max {
            return None;
        }
        for s in 0..self.stages.len() {
            let stage = self.stages[s];
            let mut skip = self.tried[s];
            loop {
                let open = bits(all_bits(stage.targets.len()) & !skip)
                    .filter(|&i| {
                        stage.targets[i].health.access(now) != super::health::Access::Closed
                    })
                    .fold(0u64, |m, i| m | 1 << i);
                if open == 0 {
                    break;
                }
                let i = choose(stage.targets, open, stage.routing, rng);
                match stage.targets[i].health.enter(now, false) {
                    Some(guard) => return Some(self.take(s, i, guard)),
                    // Another request took the trial meanwhile.
                    None => skip |= 1 << i,
                }
            }
        }
        for s in 0..self.stages.len() {
            let stage = self.stages[s];
            let left = all_bits(stage.targets.len()) & !self.tried[s];
            if left != 0 {
                let i = choose(stage.targets, left, stage.routing, rng);
                let guard = stage.targets[i].health.enter(now, true)?;
                return Some(self.take(s, i, guard));
            }
        }
        None
    }

    fn take(&mut self, stage: usize, i: usize, guard: InFlight) -> Pick<'a> {
        self.tried[stage] |= 1 << i;
        self.made += 1;
        Pick {
            stage,
            target: &self.stages[stage].targets[i],
            guard,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::models::routing::TargetHealth;
    use crate::models::{Provider, ProviderType};

    const COOL: Duration = Duration::from_secs(30);

    fn target(name: &str, weight: u32) -> Target {
        Target {
            provider: Arc::new(Provider {
                name: name.to_string(),
                kind: ProviderType::Openai,
                base_url: format!("http://{name}"),
                api_key: None,
                timeout_s: 5,
                anthropic_version: reqwest::header::HeaderValue::from_static("2023-06-01"),
                beta_headers: Default::default(),
                wire: Default::default(),
            }),
            upstream_model: "m".into(),
            weight,
            health: Arc::new(TargetHealth::new(COOL)),
            stats: Default::default(),
        }
    }

    fn rest(t: &Target, now: u64) {
        for _ in 0..3 {
            t.health.enter(now, true).expect("forced").failed(now);
        }
    }

    fn stage(targets: &[Target], routing: Routing) -> Stage<'_> {
        Stage { targets, routing }
    }

    /// Provider names of every pick until None (guards dropped at once).
    fn order(mut a: Attempts<'_>, now: u64, rng: &mut StdRng) -> Vec<(usize, String)> {
        let mut out = vec![];
        while let Some(p) = a.next(now, rng) {
            out.push((p.stage, p.target.provider.name.clone()));
        }
        out
    }

    #[test]
    fn weighted_routing_follows_the_weights() {
        let ts = [target("a", 1), target("b", 3)];
        let mut rng = StdRng::seed_from_u64(7);
        let mut counts: HashMap<String, u32> = HashMap::new();
        for _ in 0..8000 {
            let mut a = Attempts::new(vec![stage(&ts, Routing::Weighted)], 3);
            let p = a.next(1, &mut rng).expect("a pick");
            *counts.entry(p.target.provider.name.clone()).or_default() += 1;
        }
        let b = f64::from(counts["b"]) / 8000.0;
        assert!((0.72..0.78).contains(&b), "share of b: {b}");
    }

    #[test]
    fn no_target_is_tried_twice_and_attempts_stop_at_max() {
        let ts = [target("a", 1), target("b", 1), target("c", 1)];
        let mut rng = StdRng::seed_from_u64(1);
        let picks = order(
            Attempts::new(vec![stage(&ts, Routing::Weighted)], 10),
            1,
            &mut rng,
        );
        let mut names: Vec<_> = picks.iter().map(|p| p.1.clone()).collect();
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
        let picks = order(
            Attempts::new(vec![stage(&ts, Routing::Weighted)], 2),
            1,
            &mut rng,
        );
        assert_eq!(picks.len(), 2);
        assert_ne!(picks[0].1, picks[1].1);
    }

    #[test]
    fn fallbacks_come_after_every_target_of_the_model_and_count_toward_max() {
        let main = [target("a", 1), target("b", 1)];
        let fb1 = [target("f1", 1)];
        let fb2 = [target("f2", 1)];
        let mut rng = StdRng::seed_from_u64(3);
        let stages = || {
            vec![
                stage(&main, Routing::Weighted),
                stage(&fb1, Routing::Weighted),
                stage(&fb2, Routing::Weighted),
            ]
        };
        let picks = order(Attempts::new(stages(), 10), 1, &mut rng);
        let stages_seen: Vec<usize> = picks.iter().map(|p| p.0).collect();
        assert_eq!(stages_seen, [0, 0, 1, 2]);
        assert_eq!(picks[2].1, "f1");
        assert_eq!(picks[3].1, "f2");
        let picks = order(Attempts::new(stages(), 3), 1, &mut rng);
        assert_eq!(picks.iter().map(|p| p.0).collect::<Vec<_>>(), [0, 0, 1]);
    }

    #[test]
    fn max_attempts_of_zero_still_makes_one_attempt() {
        let ts = [target("a", 1), target("b", 1)];
        let mut rng = StdRng::seed_from_u64(3);
        let picks = order(
            Attempts::new(vec![stage(&ts, Routing::Weighted)], 0),
            1,
            &mut rng,
        );
        assert_eq!(picks.len(), 1);
    }

    #[test]
    fn resting_targets_get_no_requests_while_another_is_open() {
        let ts = [target("a", 1), target("b", 100)];
        rest(&ts[1], 0);
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..50 {
            let mut a = Attempts::new(vec![stage(&ts, Routing::Weighted)], 1);
            assert_eq!(
                a.next(10, &mut rng).expect("pick").target.provider.name,
                "a"
            );
        }
    }

    #[test]
    fn a_healthy_fallback_goes_before_the_models_resting_targets() {
        let main = [target("a", 1), target("b", 1)];
        let fb = [target("f", 1)];
        rest(&main[0], 0);
        rest(&main[1], 0);
        let mut rng = StdRng::seed_from_u64(9);
        let picks = order(
            Attempts::new(
                vec![
                    stage(&main, Routing::Weighted),
                    stage(&fb, Routing::Weighted),
                ],
                3,
            ),
            10,
            &mut rng,
        );
        // The fallback first; then the resting ones rather than failing.
        assert_eq!(picks[0], (1, "f".to_string()));
        assert_eq!(picks.len(), 3);
        assert!(picks[1..].iter().all(|p| p.0 == 0));
    }

    #[test]
    fn when_every_target_rests_requests_still_try_them() {
        let ts = [target("a", 1), target("b", 1)];
        rest(&ts[0], 0);
        rest(&ts[1], 0);
        let mut rng = StdRng::seed_from_u64(2);
        let picks = order(
            Attempts::new(vec![stage(&ts, Routing::Weighted)], 5),
            10,
            &mut rng,
        );
        assert_eq!(picks.len(), 2);
    }

    #[test]
    fn after_a_rest_one_request_makes_the_trial_and_others_go_elsewhere() {
        let ts = [target("a", 1), target("b", 1_000)];
        rest(&ts[1], 0);
        let now = COOL.as_millis() as u64;
        let mut rng = StdRng::seed_from_u64(4);
        let mut first = Attempts::new(vec![stage(&ts, Routing::Weighted)], 1);
        // b's weight makes it the near-certain choice once open again.
        let trial = first.next(now, &mut rng).expect("pick");
        assert_eq!(trial.target.provider.name, "b");
        assert!(trial.guard.is_trial());
        for _ in 0..20 {
            let mut other = Attempts::new(vec![stage(&ts, Routing::Weighted)], 1);
            assert_eq!(
                other
                    .next(now, &mut rng)
                    .expect("pick")
                    .target
                    .provider
                    .name,
                "a"
            );
        }
        drop(trial);
    }

    #[test]
    fn least_busy_picks_the_target_with_fewest_in_flight() {
        let ts = [target("a", 1), target("b", 1), target("c", 1)];
        let _a1 = ts[0].health.enter(1, false);
        let _a2 = ts[0].health.enter(1, false);
        let _c1 = ts[2].health.enter(1, false);
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..20 {
            let mut a = Attempts::new(vec![stage(&ts, Routing::LeastBusy)], 3);
            let first = a.next(1, &mut rng).expect("pick");
            assert_eq!(first.target.provider.name, "b");
            // b now has one in flight like c; c wins the tie break only by chance,
            // but a (two in flight) never comes before both.
            let second = a.next(1, &mut rng).expect("pick");
            assert_ne!(second.target.provider.name, "a");
        }
    }

    #[test]
    fn least_busy_spreads_concurrent_requests_evenly() {
        let ts = [target("a", 1), target("b", 1), target("c", 1)];
        let mut rng = StdRng::seed_from_u64(12);
        let mut held = vec![];
        for _ in 0..30 {
            let mut a = Attempts::new(vec![stage(&ts, Routing::LeastBusy)], 1);
            held.push(a.next(1, &mut rng).expect("pick").guard);
        }
        let loads: Vec<u32> = ts.iter().map(|t| t.health.in_flight()).collect();
        assert_eq!(loads, [10, 10, 10]);
        drop(held);
        assert!(ts.iter().all(|t| t.health.in_flight() == 0));
    }

    #[test]
    fn least_busy_breaks_ties_by_weight() {
        let ts = [target("a", 1), target("b", 9)];
        let mut rng = StdRng::seed_from_u64(13);
        let mut b = 0;
        for _ in 0..2000 {
            let mut a = Attempts::new(vec![stage(&ts, Routing::LeastBusy)], 1);
            if a.next(1, &mut rng).expect("pick").target.provider.name == "b" {
                b += 1;
            }
        }
        assert!((1700..1900).contains(&b), "b chosen {b} times of 2000");
    }

    #[test]
    fn an_empty_model_has_no_attempts() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut a = Attempts::new(vec![stage(&[], Routing::Weighted)], 3);
        assert!(a.next(1, &mut rng).is_none());
        assert_eq!(a.made(), 0);
    }
}
