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
    /// (model, provider) → (cost in nanos, unpriced requests).
    by_pair: Mutex<BTreeMap<(String, String), (u64, u64)>>,
}

impl SpendCounters {
    /// Counts a batch of records (those an upstream answered).
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
            let e = map
                .entry((r.model.clone(), provider.to_string()))
                .or_default();
            e.0 = e.0.saturating_add(cost);
            e.1 += unpriced;
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
        for ((model, provider), (cost, _)) in map.iter() {
            let _ = writeln!(
                out,
                "gatehouse_cost_nanos_total{{model=\"{}\",provider=\"{}\"}} {cost}",
                label(model),
                label(provider)
            );
        }
        out.push_str("# HELP gatehouse_unpriced_requests_total Requests answered by a pair without a price, by model and provider.\n");
        out.push_str("# TYPE gatehouse_unpriced_requests_total counter\n");
        for ((model, provider), (_, unpriced)) in map.iter() {
            let _ = writeln!(
                out,
                "gatehouse_unpriced_requests_total{{model=\"{}\",provider=\"{}\"}} {unpriced}",
                label(model),
                label(provider)
            );
        }
    }
}
