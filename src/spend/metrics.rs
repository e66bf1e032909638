//! `gatehouse_cost_nanos_total{model,provider}` and
//! `gatehouse_unpriced_requests_total{model,provider}`: counted by the usage
//! writer as records reach it, so the request path pays nothing for them.

use std::collections::BTreeMap;
use std::fmt::Write;

use parking_lot::Mutex;

use super::CostStatus;
use crate::usage::UsageRecord;

#[derive(Debug, Default)]
pub struct SpendCounters {
    /// model → provider → (cost in nanos, unpriced requests).
    by_pair: Mutex<ByPair>,
}

impl SpendCounters {
    /// Counts a batch of records (those an upstream answered). The names
    /// are copied only the first time a pair is seen.
    pub fn count(&self, batch: &[UsageRecord]) {
        let mut map = self.by_pair.lock();
        for r in batch {
            let Some(provider) = r.provider.as_deref() else {
                continue;
            };
            let (cost, unpriced) = match r.cost.status {
                CostStatus::Unpriced => (0, 1),
                CostStatus::Exact | CostStatus::Estimated => {
                    (r.cost.nanos.map_or(0, |n| u64::try_from(n).unwrap_or(0)), 0)
                }
                CostStatus::None => continue,
            };
            if !map.contains_key(&r.model) {
                map.insert(r.model.clone(), BTreeMap::new());
            }
            let Some(providers) = map.get_mut(&r.model) else {
                continue;
            };
            if !providers.contains_key(provider) {
                providers.insert(provider.to_string(), (0, 0));
            }
            if let Some(e) = providers.get_mut(provider) {
                e.0 = e.0.saturating_add(cost);
                e.1 += unpriced;
            }
        }
    }

    pub fn render(&self, out: &mut String) {
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

type ByPair = BTreeMap<String, BTreeMap<String, (u64, u64)>>;

fn flat(map: &ByPair) -> impl Iterator<Item = (&str, &str, u64, u64)> {
    map.iter().flat_map(|(model, providers)| {
        providers
            .iter()
            .map(move |(p, (cost, unpriced))| (model.as_str(), p.as_str(), *cost, *unpriced))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spend::Cost;

    fn record(
        model: &str,
        provider: Option<&str>,
        status: CostStatus,
        nanos: Option<i64>,
    ) -> UsageRecord {
        UsageRecord {
            model: model.into(),
            provider: provider.map(str::to_string),
            cost: Cost {
                status,
                nanos,
                version: None,
            },
            ..UsageRecord::default()
        }
    }

    #[test]
    fn settled_cost_and_unpriced_requests_are_counted_per_model_and_provider() {
        let c = SpendCounters::default();
        c.count(&[
            record("m", Some("p"), CostStatus::Exact, Some(5)),
            record("m", Some("p"), CostStatus::Estimated, Some(7)),
            record("m", Some("q"), CostStatus::Unpriced, None),
            record("m", None, CostStatus::None, Some(0)),
        ]);
        let mut out = String::new();
        c.render(&mut out);
        assert!(
            out.contains("gatehouse_cost_nanos_total{model=\"m\",provider=\"p\"} 12"),
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
