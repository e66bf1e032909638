//! Limits and budgets (contract: "Limits and budgets"): the `limits` object
//! of API keys, users and agents, the rules that admit or refuse a request,
//! the cluster-wide counters behind them, and the login throttle shared by
//! every server. See docs/limits.md for the design and its accuracy bound.
//!
//! Domain code: nothing here knows about HTTP. Refusals carry the contract's
//! codes and header values; the HTTP layer renders them.

pub mod engine;
pub mod login;
pub mod rules;

use serde::Serialize;
use serde_json::Value;

use crate::spend::Amount;

pub use engine::{Admission, Limiter, Subject};
pub use rules::{Quota, RateHeaders, Refusal};

/// The four limits; `None` is "no limit". Values are positive (the API
/// refuses anything else); `Some(0)` appears only in [`Limits::closed`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub tokens_per_day: Option<u64>,
    pub max_parallel: Option<u64>,
    /// `POST .../messages/count_tokens` calls per minute (they count against
    /// nothing else). Not among [`FIELDS`]: the console's four limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_tokens_per_minute: Option<u64>,
    /// MCP `tools/call` requests per minute (they count against nothing
    /// else). Not among [`FIELDS`] either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_calls_per_minute: Option<u64>,
    /// Money per UTC day and per UTC month (contract, "Budgets"); views
    /// show an amount or null.
    pub budget_per_day: Option<Amount>,
    pub budget_per_month: Option<Amount>,
}

/// A caller's budgets in money: what its budget headers read (kept with
/// an admission instead of the whole [`Limits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    pub day: Option<Amount>,
    pub month: Option<Amount>,
}

pub const FIELDS: [&str; 4] = [
    "requests_per_minute",
    "tokens_per_minute",
    "tokens_per_day",
    "max_parallel",
];

/// A `limits` value that is not acceptable; `field` is the parameter to name
/// (`limits` or `limits.<name>`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidLimits {
    pub field: String,
    pub message: String,
}

impl From<InvalidLimits> for crate::error::Error {
    fn from(e: InvalidLimits) -> Self {
        crate::error::Error::validation(e.field, e.message)
    }
}

impl Limits {
    /// Limits that admit nothing: what a stored value that cannot be read
    /// turns into, so a damaged row never widens access.
    pub fn closed() -> Limits {
        Limits {
            requests_per_minute: Some(0),
            tokens_per_minute: Some(0),
            tokens_per_day: Some(0),
            max_parallel: Some(0),
            count_tokens_per_minute: Some(0),
            mcp_calls_per_minute: Some(0),
            budget_per_day: None,
            budget_per_month: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.requests_per_minute.is_none()
            && self.tokens_per_minute.is_none()
            && self.tokens_per_day.is_none()
            && self.max_parallel.is_none()
            && self.count_tokens_per_minute.is_none()
            && self.mcp_calls_per_minute.is_none()
            && !self.has_budget()
    }

    /// A budget in money applies.
    pub fn has_budget(&self) -> bool {
        self.budget_per_day.is_some() || self.budget_per_month.is_some()
    }

    /// The budgets, when one applies.
    pub fn budgets(&self) -> Option<Budgets> {
        self.has_budget().then_some(Budgets {
            day: self.budget_per_day,
            month: self.budget_per_month,
        })
    }

    /// The limits an MCP `tools/call` must fit: its own per-minute count, on
    /// counters of its own (see [`Subject::mcp_calls`]).
    pub fn mcp_calls(&self) -> Limits {
        Limits {
            requests_per_minute: self.mcp_calls_per_minute,
            ..Limits::default()
        }
    }

    /// The limits a `count_tokens` call must fit: its own per-minute count,
    /// kept as a request count on counters of its own (see
    /// [`Subject::count_tokens`]).
    pub fn count_tokens(&self) -> Limits {
        Limits {
            requests_per_minute: self.count_tokens_per_minute,
            ..Limits::default()
        }
    }

    /// Reads a request's `limits` value: an object (fields absent or null
    /// mean no limit; unknown fields are ignored, as in all our bodies) or
    /// null (no limits at all).
    pub fn from_json(v: &Value) -> Result<Limits, InvalidLimits> {
        let obj =
            match v {
                Value::Null => return Ok(Limits::default()),
                Value::Object(o) => o,
                _ => return Err(InvalidLimits {
                    field: "limits".into(),
                    message:
                        "'limits' must be an object such as {\"requests_per_minute\": 60}, or null."
                            .into(),
                }),
            };
        let mut out = Limits::default();
        for name in FIELDS {
            let value = match obj.get(name) {
                None | Some(Value::Null) => None,
                Some(x) => Some(positive(name, x)?),
            };
            *out.field_mut(name) = value;
        }
        let name = "count_tokens_per_minute";
        out.count_tokens_per_minute = match obj.get(name) {
            None | Some(Value::Null) => None,
            Some(x) => Some(positive(name, x)?),
        };
        let name = "mcp_calls_per_minute";
        out.mcp_calls_per_minute = match obj.get(name) {
            None | Some(Value::Null) => None,
            Some(x) => Some(positive(name, x)?),
        };
        for name in crate::spend::budget::FIELDS {
            let value = match obj.get(name) {
                None | Some(Value::Null) => None,
                Some(x) => Some(
                    crate::spend::budget::parse(x).map_err(|says| InvalidLimits {
                        field: format!("limits.{name}"),
                        message: format!("'limits.{name}' {says}"),
                    })?,
                ),
            };
            if name == "budget_per_day" {
                out.budget_per_day = value;
            } else {
                out.budget_per_month = value;
            }
        }
        Ok(out)
    }

    fn field_mut(&mut self, name: &str) -> &mut Option<u64> {
        match name {
            "requests_per_minute" => &mut self.requests_per_minute,
            "tokens_per_minute" => &mut self.tokens_per_minute,
            "tokens_per_day" => &mut self.tokens_per_day,
            _ => &mut self.max_parallel,
        }
    }

    /// The stored form: JSON text, or NULL when no limit is set.
    pub fn to_db(&self) -> Option<String> {
        if self.is_empty() {
            None
        } else {
            serde_json::to_string(self).ok()
        }
    }

    /// Reads the stored form. An unreadable value is an error; callers log it
    /// and use [`Limits::closed`] (fail closed).
    pub fn from_db(text: Option<&str>) -> Result<Limits, String> {
        let Some(t) = text else {
            return Ok(Limits::default());
        };
        let v: Value = serde_json::from_str(t).map_err(|e| format!("limits column: {e}"))?;
        Limits::from_json(&v).map_err(|e| format!("limits column: {}", e.message))
    }

    /// Like [`Limits::from_db`], failing closed with a log line.
    pub fn from_db_or_closed(text: Option<&str>, whose: &str) -> Limits {
        Limits::from_db(text).unwrap_or_else(|e| {
            tracing::error!(whose, error = %e, "stored limits cannot be read; admitting nothing");
            Limits::closed()
        })
    }
}

/// Positive whole numbers only: 0, negatives, fractions, strings and
/// booleans are refused, naming the field.
fn positive(name: &str, v: &Value) -> Result<u64, InvalidLimits> {
    let err = || InvalidLimits {
        field: format!("limits.{name}"),
        message: format!(
            "'limits.{name}' must be a positive whole number (at least 1), or null for no limit."
        ),
    };
    let n = v.as_u64().ok_or_else(err)?;
    if n == 0 || n > i64::MAX as u64 {
        return Err(err());
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_and_null_fields_mean_no_limit() {
        assert_eq!(Limits::from_json(&json!({})), Ok(Limits::default()));
        assert_eq!(Limits::from_json(&Value::Null), Ok(Limits::default()));
        let l = Limits::from_json(&json!({"requests_per_minute": 1, "tokens_per_day": null}))
            .expect("valid");
        assert_eq!(l.requests_per_minute, Some(1));
        assert_eq!(l.tokens_per_day, None);
    }

    #[test]
    fn every_field_takes_one_and_refuses_zero_negative_fraction_and_text() {
        for name in FIELDS {
            let ok = Limits::from_json(&json!({ name: 1 })).expect("1 is valid");
            assert!(!ok.is_empty());
            for bad in [
                json!(0),
                json!(-1),
                json!(1.5),
                json!("5"),
                json!(true),
                json!([1]),
            ] {
                let e = Limits::from_json(&json!({ name: bad })).expect_err("refused");
                assert_eq!(e.field, format!("limits.{name}"), "{bad}");
            }
        }
    }

    #[test]
    fn budgets_take_amounts_from_one_nano_to_a_billion_and_refuse_one_past() {
        for name in crate::spend::budget::FIELDS {
            for ok in ["0.000000001", "1000000000", "1000000000.000000000", "12.5"] {
                let l = Limits::from_json(&json!({ name: ok })).expect(ok);
                assert!(l.has_budget(), "{ok}");
            }
            for bad in [
                json!("0"),
                json!("0.000000000"),
                json!("-1"),
                json!(5),
                json!(0.5),
                json!("0.0000000001"),
                json!("1000000000.000000001"),
                json!("99999999999999999999999"),
                json!("1e3"),
                json!(""),
            ] {
                let e = Limits::from_json(&json!({ name: bad })).expect_err("refused");
                assert_eq!(e.field, format!("limits.{name}"), "{bad}");
            }
        }
        let l = Limits::from_json(&json!({"budget_per_day": "4", "budget_per_month": null}))
            .expect("valid");
        let v = serde_json::to_value(l).expect("serialises");
        assert_eq!(v["budget_per_day"], json!("4.000000000"));
        assert_eq!(v["budget_per_month"], Value::Null);
    }

    #[test]
    fn a_limits_value_that_is_not_an_object_is_refused() {
        for bad in [json!(5), json!("x"), json!([])] {
            assert_eq!(
                Limits::from_json(&bad).expect_err("refused").field,
                "limits"
            );
        }
    }

    #[test]
    fn unknown_fields_are_ignored() {
        assert_eq!(
            Limits::from_json(&json!({"max_parallel": 2, "colour": "red"}))
                .expect("valid")
                .max_parallel,
            Some(2)
        );
    }

    #[test]
    fn stored_form_round_trips_and_damaged_values_fail_closed() {
        let l = Limits {
            requests_per_minute: Some(60),
            tokens_per_minute: None,
            tokens_per_day: Some(100_000),
            max_parallel: Some(4),
            count_tokens_per_minute: Some(5),
            mcp_calls_per_minute: Some(7),
            budget_per_day: Some(Amount(1)),
            budget_per_month: Some(Amount::units(1_000_000_000)),
        };
        assert_eq!(Limits::from_db(l.to_db().as_deref()), Ok(l));
        assert_eq!(Limits::default().to_db(), None);
        assert_eq!(Limits::from_db(None), Ok(Limits::default()));
        assert!(Limits::from_db(Some("{not json")).is_err());
        assert_eq!(
            Limits::from_db_or_closed(Some("{\"max_parallel\": 0}"), "test"),
            Limits::closed()
        );
    }
}
