//! The cost of one request: the upstream's usage normalised to one
//! convention, the rates of its tier, one rounding at the end (contract,
//! "Cost of a request"). Integer arithmetic only: rates are nano-units per
//! 1,000,000 tokens, products are 128-bit.

use super::amount::Amount;
use super::price::{PriceBook, PriceSpec};

/// Normalised usage, OpenAI's inclusive meaning: `prompt` includes the
/// cached and cache-write tokens, `completion` includes the reasoning ones.
/// The usage records convert their tokens into it (`usage::Tokens::normalised`),
/// so spend depends on nothing above it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
}

const PER_TOKENS: u128 = 1_000_000;

/// The cost in nano-units, `request` fee included; saturates at `i64::MAX`
/// (a figure no real request reaches, kept storable).
pub fn cost_nanos(spec: &PriceSpec, u: Usage) -> i64 {
    let rates = spec.rates_for(u.prompt);
    let cr = u.cache_read.min(u.prompt);
    let cw = u.cache_write.min(u.prompt - cr);
    let uncached = u.prompt - cr - cw;
    let r = u.reasoning.min(u.completion);
    let rate = |a: Amount| u128::from(a.nanos());
    let n = u128::from(uncached) * rate(rates.input)
        + u128::from(cr) * rate(rates.cache_read.unwrap_or(rates.input))
        + u128::from(cw) * rate(rates.cache_write.unwrap_or(rates.input))
        + u128::from(u.completion - r) * rate(rates.output)
        + u128::from(r) * rate(rates.reasoning.unwrap_or(rates.output));
    // Half up, once, at the end.
    let rounded = (n + PER_TOKENS / 2) / PER_TOKENS;
    let total = rounded + u128::from(spec.request.map_or(0, Amount::nanos));
    i64::try_from(total).unwrap_or(i64::MAX)
}

/// How a request's cost was found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CostStatus {
    /// Priced from the upstream's usage.
    Exact,
    /// Priced, with some figures the gateway's estimate.
    Estimated,
    /// The answering pair had no current price: no cost.
    Unpriced,
    /// No upstream answer was relayed: costs 0, no request fee.
    #[default]
    None,
}

impl CostStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CostStatus::Exact => "exact",
            CostStatus::Estimated => "estimated",
            CostStatus::Unpriced => "unpriced",
            CostStatus::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<CostStatus> {
        Some(match s {
            "exact" => CostStatus::Exact,
            "estimated" => CostStatus::Estimated,
            "unpriced" => CostStatus::Unpriced,
            "none" => CostStatus::None,
            _ => return None,
        })
    }
}

/// A request's cost, fixed when it is recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub status: CostStatus,
    /// Nano-units; None when unpriced.
    pub nanos: Option<i64>,
    /// The price version that priced it.
    pub version: Option<std::sync::Arc<str>>,
}

impl Cost {
    /// The cost as an amount, when priced.
    pub fn amount(&self) -> Option<Amount> {
        self.nanos.map(|n| Amount(u64::try_from(n).unwrap_or(0)))
    }

    /// [`Self::write_into`] as JSON text: the members `"cost":"…",` (when
    /// priced) and `"cost_status":"…"`, for a usage object spliced as bytes.
    pub fn write_members(&self, out: &mut Vec<u8>) {
        // As `amount()`: a negative sum (never made) shows as zero.
        if let Some(n) = self.nanos.map(|n| n.max(0)) {
            out.extend_from_slice(b"\"cost\":\"");
            out.extend_from_slice(super::amount::nanos_text(n).as_bytes());
            out.extend_from_slice(b"\",");
        }
        out.extend_from_slice(b"\"cost_status\":\"");
        out.extend_from_slice(self.status.as_str().as_bytes());
        out.push(b'"');
    }

    /// Puts the cost in a stream's last `usage` object, as every dialect
    /// carries it: `cost` (an amount, left out when unpriced) and
    /// `cost_status`.
    pub fn write_into(&self, usage: &mut serde_json::Map<String, serde_json::Value>) {
        if let Some(a) = self.amount() {
            usage.insert("cost".into(), serde_json::Value::String(a.to_string()));
        }
        usage.insert(
            "cost_status".into(),
            serde_json::Value::String(self.status.as_str().to_string()),
        );
    }
}

/// The OpenAPI schema of a usage record (`GET /api/admin/usage/records`).
pub fn record_schema() -> serde_json::Value {
    let s = || serde_json::json!({"type": ["string", "null"]});
    let i = || serde_json::json!({"type": "integer"});
    serde_json::json!({"type": "object",
        "required": ["id", "at", "request_id", "user", "api_key_id", "agent", "device_id", "model",
            "provider", "upstream_model", "kind", "status", "prompt_tokens", "completion_tokens",
            "cached_tokens", "cache_write_tokens", "reasoning_tokens", "cost", "cost_status",
            "price_version", "currency"],
        "properties": {"id": {"type": "string"}, "at": {"type": "string", "format": "date-time"},
            "request_id": s(), "user": s(), "api_key_id": s(), "agent": s(), "device_id": s(),
            "model": {"type": "string"}, "provider": s(), "upstream_model": s(),
            "kind": {"type": "string"}, "api": s(), "status": i(), "prompt_tokens": i(),
            "completion_tokens": i(), "cached_tokens": i(), "cache_write_tokens": i(),
            "reasoning_tokens": i(),
            "cost": {"anyOf": [super::amount::schema(), {"type": "null"}]},
            "cost_status": {"type": "string", "enum": ["exact", "estimated", "unpriced", "none"]},
            "price_version": s(), "currency": {"type": "string"}}})
}

/// Prices a request that `provider` answered with `upstream_model` (None:
/// no upstream answer was relayed), with the book of its admission;
/// `estimated`: some figures are the gateway's estimate.
pub fn price(
    book: &PriceBook,
    answered: Option<(&str, &str)>,
    usage: Usage,
    estimated: bool,
) -> Cost {
    let Some((provider, upstream_model)) = answered else {
        return Cost {
            status: CostStatus::None,
            nanos: Some(0),
            version: None,
        };
    };
    match book.get(provider, upstream_model) {
        None => Cost {
            status: CostStatus::Unpriced,
            nanos: None,
            version: None,
        },
        Some(p) => Cost {
            status: if estimated {
                CostStatus::Estimated
            } else {
                CostStatus::Exact
            },
            nanos: Some(cost_nanos(&p.spec, usage)),
            version: Some(p.version.clone()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spend::price::Price;
    use serde_json::json;

    fn spec(body: serde_json::Value) -> PriceSpec {
        PriceSpec::from_json(&body).expect("a valid price")
    }

    fn usage(
        prompt: u64,
        completion: u64,
        cache_read: u64,
        cache_write: u64,
        reasoning: u64,
    ) -> Usage {
        Usage {
            prompt,
            completion,
            cache_read,
            cache_write,
            reasoning,
        }
    }

    #[test]
    fn the_contracts_worked_example_costs_0_001820000() {
        let s = spec(json!({"input": "1.00", "output": "2.00", "cache_read": "0.10"}));
        let n = cost_nanos(&s, usage(1000, 500, 200, 0, 0));
        assert_eq!(Amount(n as u64).to_string(), "0.001820000");
    }

    #[test]
    fn unset_rates_fall_back_to_input_and_output() {
        let s = spec(json!({"input": "1", "output": "3"}));
        // 1000 prompt tokens at 1/M whatever their kind, 100 completion at 3/M.
        assert_eq!(
            cost_nanos(&s, usage(1000, 100, 400, 300, 50)),
            1_000_000 + 300_000
        );
        let s = spec(json!({"input": "1", "output": "3", "cache_read": "0.5",
                            "cache_write": "2", "reasoning": "10"}));
        // 300 plain, 400 cached at 0.5, 300 written at 2; 50 plain out at 3, 50 reasoning at 10.
        assert_eq!(
            cost_nanos(&s, usage(1000, 100, 400, 300, 50)),
            300_000 + 200_000 + 600_000 + 150_000 + 500_000
        );
    }

    #[test]
    fn cache_and_reasoning_figures_are_clamped_to_what_they_are_part_of() {
        let s = spec(
            json!({"input": "1", "output": "1", "cache_read": "0", "cache_write": "0", "reasoning": "0"}),
        );
        // More cached than prompt: every prompt token is cached, none written.
        assert_eq!(cost_nanos(&s, usage(100, 10, 500, 500, 0)), 10_000);
        // Cached + written over the prompt: written is what is left.
        let s = spec(json!({"input": "1", "output": "1", "cache_read": "0", "cache_write": "10"}));
        assert_eq!(cost_nanos(&s, usage(100, 0, 60, 60, 0)), 40 * 10_000);
        // More reasoning than completion: all completion tokens are reasoning.
        let s = spec(json!({"input": "0", "output": "1", "reasoning": "5"}));
        assert_eq!(cost_nanos(&s, usage(0, 10, 0, 0, 50)), 10 * 5_000);
    }

    #[test]
    fn a_tier_applies_above_its_threshold_not_at_it() {
        let s = spec(json!({"input": "1", "output": "2", "tiers": [
            {"above_prompt_tokens": 200000, "input": "2", "output": "4", "cache_read": "0.2"}]}));
        // At the threshold: base rates.
        assert_eq!(cost_nanos(&s, usage(200_000, 0, 0, 0, 0)), 200_000_000);
        // One past it: the tier's rates for every token, the prompt's first ones too.
        assert_eq!(
            cost_nanos(&s, usage(200_001, 1, 0, 0, 0)),
            400_002_000 + 4_000
        );
        // The tier's own cache rate, and the tier's input where it has none.
        assert_eq!(
            cost_nanos(&s, usage(200_001, 0, 1, 1, 0)),
            199_999 * 2_000 + 200 + 2_000
        );
    }

    #[test]
    fn a_tiers_unset_rate_falls_back_within_the_tier() {
        let s = spec(
            json!({"input": "1", "output": "1", "cache_read": "0.1", "reasoning": "9",
            "tiers": [{"above_prompt_tokens": 10, "input": "3", "output": "5"}]}),
        );
        // Not the base's cache_read or reasoning: the tier's input and output.
        assert_eq!(
            cost_nanos(&s, usage(11, 2, 11, 0, 2)),
            11 * 3_000 + 2 * 5_000
        );
    }

    #[test]
    fn rounding_is_half_up_once_at_the_end() {
        // 1 token at 0.0000005/M... rates are per million: 0.5 nano per token at 0.0005.
        let s = spec(json!({"input": "0.0005", "output": "0"}));
        assert_eq!(cost_nanos(&s, usage(1, 0, 0, 0, 0)), 1, ".5 nano rounds up");
        let s = spec(json!({"input": "0.000499999", "output": "0"}));
        assert_eq!(
            cost_nanos(&s, usage(1, 0, 0, 0, 0)),
            0,
            "just below .5 rounds down"
        );
        // Rounded once: two halves make one, not two.
        let s = spec(json!({"input": "0.00025", "output": "0.00025"}));
        assert_eq!(cost_nanos(&s, usage(1, 1, 0, 0, 0)), 1);
        assert_eq!(cost_nanos(&s, usage(1, 0, 0, 0, 0)), 0);
    }

    #[test]
    fn the_request_fee_is_added_after_rounding() {
        let s = spec(json!({"input": "0.0005", "output": "0", "request": "0.000000001"}));
        assert_eq!(cost_nanos(&s, usage(1, 0, 0, 0, 0)), 2);
        assert_eq!(cost_nanos(&s, usage(0, 0, 0, 0, 0)), 1);
    }

    #[test]
    fn the_largest_rates_and_figures_do_not_overflow() {
        let s = spec(json!({"input": "1000000", "output": "1000000", "request": "1000000"}));
        let big = i64::MAX as u64;
        assert_eq!(cost_nanos(&s, usage(big, big, 0, 0, 0)), i64::MAX);
        assert_eq!(
            cost_nanos(&s, usage(1_000_000, 0, 0, 0, 0)),
            2_000_000_000_000_000
        );
    }

    fn book() -> PriceBook {
        PriceBook::new(vec![Price {
            version: "v1".into(),
            provider: "p".into(),
            upstream_model: "org/m".into(),
            spec: spec(json!({"input": "1", "output": "2", "request": "0.01"})),
            effective_from: 0,
            effective_to: None,
        }])
    }

    #[test]
    fn the_status_says_how_the_cost_was_found() {
        let usage = Usage {
            prompt: 1000,
            completion: 500,
            ..Usage::default()
        };
        let c = price(&book(), Some(("p", "org/m")), usage, false);
        assert_eq!(c.status, CostStatus::Exact);
        assert_eq!(c.nanos, Some(1_000_000 + 1_000_000 + 10_000_000));
        assert_eq!(c.version.as_deref(), Some("v1"));
        assert_eq!(
            price(&book(), Some(("p", "org/m")), usage, true).status,
            CostStatus::Estimated
        );
        let un = price(&book(), Some(("p", "other")), usage, false);
        assert_eq!((un.status, un.nanos), (CostStatus::Unpriced, None));
        // No answer: 0 and no request fee.
        let none = price(&book(), None, usage, false);
        assert_eq!((none.status, none.nanos), (CostStatus::None, Some(0)));
    }
}
