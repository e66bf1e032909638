//! `gatehouse_cost_nanos_total{model,provider}` and
//! `gatehouse_unpriced_requests_total{model,provider}`: counted by the usage
//! writer as records reach it, so the request path pays nothing for them.

use std::collections::BTreeMap;
use std::fmt::Write;

use parking_lot::Mutex;

use super::{Cost, CostStatus};

#[derive(Debug, Default)]
pub struct SpendCounters {
    /// model → provider → (cost in nanos, unpriced requests).
    by_pair: Mutex<ByPair>,
    /// `gatehouse_budget_refusals_total{period}`: day, month.
    refusals: [std::sync::atomic::AtomicU64; 2],
}

impl SpendCounters {
    /// One request refused by a budget of this period.
    pub fn budget_refused(&self, period: super::budget::Period) {
        let i = usize::from(period == super::budget::Period::Month);
        self.refusals[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts the cost of requests, each as `(model, provider, cost)`; those
    /// no upstream answered have no provider and are not counted. The names
    /// are copied only the first time a pair is seen, and a run of records
    /// of one pair (a batch is mostly one model's) is added to the map once.
    pub fn count<'a>(&self, batch: impl IntoIterator<Item = (&'a str, Option<&'a str>, &'a Cost)>) {
        let mut map = self.by_pair.lock();
        let mut run: Option<(Pair, Sums)> = None;
        for (model, provider, cost) in batch {
            let Some(provider) = provider else {
                continue;
            };
            let (nanos, unpriced) = match cost.status {
                CostStatus::Unpriced => (0, 1),
                CostStatus::Exact | CostStatus::Estimated => {
                    (cost.nanos.map_or(0, |n| u64::try_from(n).unwrap_or(0)), 0)
                }
                CostStatus::None => continue,
            };
            match &mut run {
                Some((pair, sums)) if *pair == (model, provider) => {
                    sums.0 = sums.0.saturating_add(nanos);
                    sums.1 += unpriced;
                }
                _ => {
                    if let Some((pair, sums)) = run.replace(((model, provider), (nanos, unpriced)))
                    {
                        add_to(&mut map, pair, sums);
                    }
                }
            }
        }
        if let Some((pair, sums)) = run {
            add_to(&mut map, pair, sums);
        }
    }

    pub fn render(&self, out: &mut String) {
        out.push_str("# HELP gatehouse_budget_refusals_total Requests refused because a budget was used up, by period.\n");
        out.push_str("# TYPE gatehouse_budget_refusals_total counter\n");
        for (period, n) in ["day", "month"].iter().zip(&self.refusals) {
            let n = n.load(std::sync::atomic::Ordering::Relaxed);
            let _ = writeln!(
                out,
                "gatehouse_budget_refusals_total{{period=\"{period}\"}} {n}"
            );
        }
        let map = self.by_pair.lock();
        let label = |s: &str| {
            s.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        };
        out.push_str("# HELP gatehouse_cost_nanos_total Settled cost in nano-units of the currency, by model and provider.\n");
        out.push_str("# TYPE gatehouse_cost_nanos_total counter\n");
        for (model, provider, cost, _) in flat(&map) {
            let _ = writeln!(
                out,
                "gatehouse_cost_nanos_total{{model=\"{}\",provider=\"{}\"}} {cost}",
                label(model),
                label(provider)
            );
        }
        out.push_str("# HELP gatehouse_unpriced_requests_total Requests answered by a pair without a price, by model and provider.\n");
        out.push_str("# TYPE gatehouse_unpriced_requests_total counter\n");
        for (model, provider, _, unpriced) in flat(&map) {
            let _ = writeln!(
                out,
                "gatehouse_unpriced_requests_total{{model=\"{}\",provider=\"{}\"}} {unpriced}",
                label(model),
                label(provider)
            );
        }
    }
}

type ByPair = BTreeMap<String, BTreeMap<String, Sums>>;
/// (model, provider).
type Pair<'a> = (&'a str, &'a str);
/// (cost in nanos, unpriced requests).
type Sums = (u64, u64);

fn flat(map: &ByPair) -> impl Iterator<Item = (&str, &str, u64, u64)> {
    map.iter().flat_map(|(model, providers)| {
        providers
            .iter()
            .map(move |(p, (cost, unpriced))| (model.as_str(), p.as_str(), *cost, *unpriced))
    })
}

/// Adds a pair's sums (cost in nanos, unpriced requests) to the map.
fn add_to(map: &mut ByPair, (model, provider): Pair, (nanos, unpriced): Sums) {
    if !map.contains_key(model) {
        map.insert(model.to_string(), BTreeMap::new());
    }
    let Some(providers) = map.get_mut(model) else {
        return;
    };
    if !providers.contains_key(provider) {
        providers.insert(provider.to_string(), (0, 0));
    }
    if let Some(e) = providers.get_mut(provider) {
        e.0 = e.0.saturating_add(nanos);
        e.1 += unpriced;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(status: CostStatus, nanos: Option<i64>) -> Cost {
        Cost {
            status,
            nanos,
            version: None,
        }
    }

    #[test]
    fn settled_cost_and_unpriced_requests_are_counted_per_model_and_provider() {
        let c = SpendCounters::default();
        let costs = [
            ("m", Some("p"), cost(CostStatus::Exact, Some(5))),
            ("m", Some("p"), cost(CostStatus::Estimated, Some(7))),
            ("m", Some("q"), cost(CostStatus::Unpriced, None)),
            ("m", None, cost(CostStatus::None, Some(0))),
            // A pair's run taken up again after another pair's.
            ("m", Some("p"), cost(CostStatus::Exact, Some(3))),
            ("m", Some("p"), cost(CostStatus::Exact, Some(1))),
        ];
        c.count(costs.iter().map(|(m, p, c)| (*m, *p, c)));
        let mut out = String::new();
        c.render(&mut out);
        assert!(
            out.contains("gatehouse_cost_nanos_total{model=\"m\",provider=\"p\"} 16"),
            "{out}"
        );
        assert!(
            out.contains("gatehouse_unpriced_requests_total{model=\"m\",provider=\"q\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("gatehouse_unpriced_requests_total{model=\"m\",provider=\"p\"} 0"),
            "{out}"
        );
        assert_eq!(
            out.matches("provider=").count(),
            4,
            "no line for requests nobody answered: {out}"
        );
    }
}
