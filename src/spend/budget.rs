//! Budgets in money (contract, "Budgets"): the `budget_per_day` and
//! `budget_per_month` values, the periods they renew on, the reservation a
//! request makes at admission, the admission rule, and the refusal's words.
//! Plain functions of amounts and the clock; the limiter
//! (`crate::limits::engine`) holds the counts and calls them.

use std::collections::HashSet;
use std::sync::OnceLock;

use super::amount::{Amount, AmountError};
use super::price::PriceSpec;

/// The two fields of the `limits` object, in the order views show them.
pub const FIELDS: [&str; 2] = ["budget_per_day", "budget_per_month"];

/// The largest budget: 1,000,000,000 units.
pub const MAX_BUDGET: Amount = Amount::units(1_000_000_000);

/// `completion` of a reservation when the body names no maximum.
pub const DEFAULT_RESERVE_OUTPUT_TOKENS: u64 = 4096;

const DAY_MS: i64 = 86_400_000;

/// Reads one budget value (not null): an amount from one nano-unit to
/// [`MAX_BUDGET`]. The error is the end of a sentence naming the field.
pub fn parse(v: &serde_json::Value) -> Result<Amount, String> {
    let range = "must be an amount from \"0.000000001\" to \"1000000000\", or null for no budget.";
    let a = Amount::from_json(v).map_err(|e| match e {
        AmountError::TooLarge => range.to_string(),
        e => format!(
            "{} (from \"0.000000001\" to \"1000000000\"), or null.",
            e.says()
        ),
    })?;
    if a == Amount::ZERO || a > MAX_BUDGET {
        return Err(range.to_string());
    }
    Ok(a)
}

/// The period a budget renews on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Period {
    Day,
    Month,
}

impl Period {
    /// The period of a budget field (None: not a budget).
    pub fn of_field(field: &str) -> Option<Period> {
        match field {
            "budget_per_day" => Some(Period::Day),
            "budget_per_month" => Some(Period::Month),
            _ => None,
        }
    }

    pub fn field(self) -> &'static str {
        match self {
            Period::Day => "budget_per_day",
            Period::Month => "budget_per_month",
        }
    }

    /// The `period` label of `gatehouse_budget_refusals_total`.
    pub fn label(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// The bucket of `now_ms`: days or months since 1970-01 (UTC).
    pub fn index(self, now_ms: i64) -> i64 {
        match self {
            Period::Day => now_ms.div_euclid(DAY_MS),
            Period::Month => month_of(now_ms),
        }
    }

    /// Milliseconds until the period renews: the next 00:00 UTC, or the
    /// 1st of next month at 00:00 UTC.
    pub fn until_end_ms(self, now_ms: i64) -> i64 {
        match self {
            Period::Day => (now_ms.div_euclid(DAY_MS) + 1) * DAY_MS - now_ms,
            Period::Month => month_facts(now_ms.div_euclid(DAY_MS)).1 - now_ms,
        }
    }
}

/// Months since January 1970 (UTC). Integer civil-calendar arithmetic
/// (Howard Hinnant's `civil_from_days`): every admission under a budget asks,
/// and a calendar library's conversion cost a thousand times more.
pub fn month_of(now_ms: i64) -> i64 {
    month_facts(now_ms.div_euclid(DAY_MS)).0
}

/// The month of `day` (days since 1970-01-01) and the instant it ends.
/// A request under a budget asks four or five times and the answer
/// changes once a day, so each thread keeps the last day's.
fn month_facts(day: i64) -> (i64, i64) {
    thread_local! {
        static LAST: std::cell::Cell<(i64, i64, i64)> =
            const { std::cell::Cell::new((i64::MIN, 0, 0)) };
    }
    LAST.with(|last| {
        let (d, month, end) = last.get();
        if d == day {
            return (month, end);
        }
        let (y, m) = year_month_of_day(day);
        let month = (y - 1970) * 12 + (m - 1);
        let end = month_start_ms(month + 1);
        last.set((day, month, end));
        (month, end)
    })
}

/// 00:00 UTC of the first day of month `m` (months since January 1970).
pub fn month_start_ms(m: i64) -> i64 {
    let (y, month) = (1970 + m.div_euclid(12), m.rem_euclid(12) + 1);
    days_from_civil(y, month, 1).saturating_mul(DAY_MS)
}

/// The (year, month 1-12) of a day counted from 1970-01-01.
fn year_month_of_day(z: i64) -> (i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m)
}

/// Days from 1970-01-01 to `y-m-d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `C` of a reservation: `max_completion_tokens`, else `max_tokens` (each
/// only when a whole number ≥ 1), else the configured default.
pub fn completion_reserve(
    max_completion_tokens: Option<u64>,
    max_tokens: Option<u64>,
    default: u64,
) -> u64 {
    max_completion_tokens
        .filter(|n| *n >= 1)
        .or(max_tokens.filter(|n| *n >= 1))
        .unwrap_or(default)
}

/// A whole number ≥ 1 from a JSON value (`max_tokens` and the like).
pub fn whole(v: Option<&serde_json::Value>) -> Option<u64> {
    v.and_then(serde_json::Value::as_u64).filter(|n| *n >= 1)
}

/// A whole number ≥ 1 from JSON text (a member kept as text).
pub fn whole_text(v: Option<&str>) -> Option<u64> {
    v.and_then(|t| t.trim().parse::<u64>().ok())
        .filter(|n| *n >= 1)
}

/// The members whose strings are not text of the prompt: they name, mark
/// or carry media.
const NOT_TEXT: [&str; 14] = [
    "type",
    "role",
    "id",
    "call_id",
    "tool_use_id",
    "tool_call_id",
    "name",
    "status",
    "cache_control",
    "source",
    "image_url",
    "url",
    "data",
    "signature",
];

/// Characters of text in a Messages or Responses body's part (`messages`,
/// `system`, `input`, `instructions`): every string but those that name,
/// mark or carry media, for the prompt's estimate.
pub fn text_chars(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(items) => items.iter().map(text_chars).sum(),
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| !NOT_TEXT.contains(&k.as_str()))
            .map(|(_, v)| text_chars(v))
            .sum(),
        _ => 0,
    }
}

/// [`text_chars`] of JSON text, read without a tree (None when it is not
/// JSON, or has an object a tree would read differently: a key written
/// twice, more than 16 keys, a key with escapes).
pub fn text_chars_of_json(text: &str) -> Option<usize> {
    serde_json::from_str::<TextChars>(text).ok().map(|t| t.0)
}

/// [`text_chars`] as a reader: strings counted as they are read.
struct TextChars(usize);

impl<'de> serde::Deserialize<'de> for TextChars {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TextChars;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_str<E>(self, v: &str) -> Result<TextChars, E> {
                Ok(TextChars(v.chars().count()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<TextChars, E> {
                Ok(TextChars(0))
            }
            fn visit_i64<E>(self, _: i64) -> Result<TextChars, E> {
                Ok(TextChars(0))
            }
            fn visit_u64<E>(self, _: u64) -> Result<TextChars, E> {
                Ok(TextChars(0))
            }
            fn visit_f64<E>(self, _: f64) -> Result<TextChars, E> {
                Ok(TextChars(0))
            }
            fn visit_unit<E>(self) -> Result<TextChars, E> {
                Ok(TextChars(0))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextChars, A::Error> {
                let mut n = 0;
                while let Some(TextChars(c)) = seq.next_element()? {
                    n += c;
                }
                Ok(TextChars(n))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextChars, A::Error> {
                // A tree keeps the last of a key written twice, and would
                // count only its value: such an object (or one of more keys
                // than are kept here, or a key with escapes) is refused.
                let mut keys: [&str; 16] = [""; 16];
                let mut n = 0;
                let mut i = 0;
                while let Some(key) = map.next_key::<&'de str>()? {
                    if i == keys.len() || keys[..i].contains(&key) {
                        return Err(serde::de::Error::custom("not counted without a tree"));
                    }
                    keys[i] = key;
                    i += 1;
                    if NOT_TEXT.contains(&key) {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        n += map.next_value::<TextChars>()?.0;
                    }
                }
                Ok(TextChars(n))
            }
        }
        d.deserialize_any(V)
    }
}

/// Tokens of `chars` characters of text, as usage estimates them (a token
/// per 4 characters, rounded up).
pub fn tokens_of_chars(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

/// What a request reserves: the most expensive of the prices it may reach
/// (`None`: an unpriced target, which reserves 0), at `prompt` tokens in
/// and `completion` out, no cache or reasoning tokens, request fee included.
/// Also says whether some target was unpriced.
pub fn reservation<'a>(
    specs: impl IntoIterator<Item = Option<&'a PriceSpec>>,
    prompt: u64,
    completion: u64,
) -> (i64, bool) {
    let usage = super::cost::Usage {
        prompt,
        completion,
        ..Default::default()
    };
    let mut most = 0;
    let mut unpriced = false;
    for spec in specs {
        match spec {
            Some(s) => most = most.max(super::cost::cost_nanos(s, usage)),
            None => unpriced = true,
        }
    }
    (most, unpriced)
}

/// The admission rule: `spend + open reservations + reservation <= budget`
/// (a reservation of 0 is admitted while `spend + reserved <= budget`).
pub fn fits(budget: Amount, spent: i64, reserved: i64, reservation: i64) -> bool {
    i128::from(spent) + i128::from(reserved) + i128::from(reservation) <= i128::from(budget.nanos())
}

/// What is left of a budget, never below 0.
pub fn remaining(budget: Amount, spent: i64, reserved: i64) -> i64 {
    let left = i128::from(budget.nanos()) - i128::from(spent) - i128::from(reserved);
    i64::try_from(left.max(0)).unwrap_or(i64::MAX)
}

/// The refusal's message: the field, whose budget, the budget with the
/// currency, and when it renews.
pub fn refusal_message(
    period: Period,
    whose: &str,
    name: &str,
    budget: Amount,
    currency: &str,
) -> String {
    let renews = match period {
        Period::Day => "it renews at 00:00 UTC",
        Period::Month => "it renews on the 1st of next month at 00:00 UTC",
    };
    let who = if name.is_empty() {
        whose.to_string()
    } else {
        format!("{whose} '{name}'")
    };
    format!(
        "Budget {} of {who} ({budget} {currency}) is used up; {renews}.",
        period.field()
    )
}

/// `GATEHOUSE_UNPRICED_POLICY`: what happens to a request under a budget
/// that may reach a target without a price.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnpricedPolicy {
    /// Reserve and cost 0; one warning per pair and process.
    #[default]
    Admit,
    /// 403 `model_unpriced`.
    Refuse,
}

impl UnpricedPolicy {
    pub fn parse(v: Option<&str>) -> Result<UnpricedPolicy, String> {
        match v.map(str::trim) {
            None | Some("") | Some("admit") => Ok(UnpricedPolicy::Admit),
            Some("refuse") => Ok(UnpricedPolicy::Refuse),
            Some(other) => Err(format!(
                "GATEHOUSE_UNPRICED_POLICY must be admit or refuse, not {other:?}"
            )),
        }
    }
}

/// Logs the one `warn` line of a pair admitted unpriced under a budget
/// (once per process).
pub fn warn_unpriced_once(provider: &str, upstream_model: &str) {
    static SEEN: OnceLock<parking_lot::Mutex<HashSet<(String, String)>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    let key = (provider.to_string(), upstream_model.to_string());
    if seen.lock().insert(key) {
        tracing::warn!(provider, upstream_model, "unpriced model under a budget");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    /// The counter without a tree keeps 16 keys of an object: at 16 it
    /// counts as a tree does, one past it (or a key written twice) it gives
    /// the count up to a tree.
    #[test]
    fn text_is_counted_without_a_tree_up_to_16_keys_an_object() {
        let object = |n: usize| {
            let members: serde_json::Map<String, serde_json::Value> =
                (0..n).map(|i| (format!("k{i}"), json!("ab"))).collect();
            serde_json::Value::Object(members)
        };
        let at = object(16);
        assert_eq!(text_chars_of_json(&at.to_string()), Some(text_chars(&at)));
        assert_eq!(text_chars(&at), 32);
        assert_eq!(text_chars_of_json(&object(17).to_string()), None);
        assert_eq!(text_chars_of_json(r#"{"a":"x","a":"yy"}"#), None);
        let nested = json!([{"type": "message", "text": "héllo", "id": "x"}, "ab"]);
        assert_eq!(text_chars_of_json(&nested.to_string()), Some(7));
    }

    fn ms(y: i32, m: u32, d: u32, h: u32) -> i64 {
        Utc.with_ymd_and_hms(y, m, d, h, 0, 0)
            .single()
            .expect("a valid date")
            .timestamp_millis()
    }

    #[test]
    fn a_budget_is_one_nano_to_a_billion() {
        assert_eq!(parse(&json!("0.000000001")), Ok(Amount(1)));
        assert_eq!(parse(&json!("1000000000")), Ok(MAX_BUDGET));
        for bad in [
            json!("0"),
            json!("-1"),
            json!(1),
            json!("1.0000000001"),
            json!("1000000000.000000001"),
            json!("184467440737.09551616"),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_day_renews_at_midnight_utc() {
        let t = ms(2026, 11, 27, 18);
        assert_eq!(Period::Day.until_end_ms(t), 6 * 3_600_000);
        assert_eq!(Period::Day.until_end_ms(ms(2026, 11, 28, 0)), DAY_MS);
        assert_eq!(
            Period::Day.index(t) + 1,
            Period::Day.index(ms(2026, 11, 28, 0))
        );
    }

    #[test]
    fn a_month_renews_on_the_first_of_the_next_at_midnight_utc() {
        // November has 30 days: from the 27th 18:00, 3 days and 6 hours.
        let t = ms(2026, 11, 27, 18);
        assert_eq!(Period::Month.until_end_ms(t), 3 * DAY_MS + 6 * 3_600_000);
        // December renews on January 1st of the next year.
        let dec = ms(2026, 12, 31, 23);
        assert_eq!(Period::Month.until_end_ms(dec), 3_600_000);
        assert_eq!(
            Period::Month.index(dec) + 1,
            Period::Month.index(ms(2027, 1, 1, 0))
        );
        // A leap February has 29 days; a common one 28.
        assert_eq!(Period::Month.until_end_ms(ms(2028, 2, 28, 0)), 2 * DAY_MS);
        assert_eq!(Period::Month.until_end_ms(ms(2027, 2, 28, 0)), DAY_MS);
        // The first instant of a month is in it, with a whole month to go.
        let jan = ms(2027, 1, 1, 0);
        assert_eq!(Period::Month.until_end_ms(jan), 31 * DAY_MS);
        assert_eq!(month_start_ms(month_of(jan)), jan);
        assert_eq!(month_of(0), 0);
    }

    #[test]
    fn month_arithmetic_agrees_with_the_calendar_for_every_day_of_four_centuries() {
        use chrono::Datelike;
        // 1900 to 2300: leap years, the 100- and 400-year rules, before 1970.
        let first = ms(1900, 1, 1, 0) / DAY_MS;
        let last = ms(2300, 1, 1, 0) / DAY_MS;
        for day in first..last {
            for at in [day * DAY_MS, day * DAY_MS + DAY_MS - 1] {
                let t = Utc.timestamp_millis_opt(at).single().expect("a time");
                let m = i64::from(t.year() - 1970) * 12 + i64::from(t.month0());
                assert_eq!(month_of(at), m, "{t}");
                let start = Utc
                    .with_ymd_and_hms(t.year(), t.month(), 1, 0, 0, 0)
                    .single()
                    .expect("a time")
                    .timestamp_millis();
                assert_eq!(month_start_ms(m), start, "{t}");
                assert_eq!(
                    Period::Month.until_end_ms(at),
                    month_start_ms(m + 1) - at,
                    "{t}"
                );
            }
        }
    }

    #[test]
    fn the_month_a_thread_keeps_is_only_its_own_days() {
        // Back and forth over a month's edge: each call answers for its own
        // day, not the one asked before.
        let (nov, dec) = (ms(2026, 11, 30, 23), ms(2026, 12, 1, 0));
        for _ in 0..3 {
            assert_eq!(month_of(dec), month_of(nov) + 1);
            assert_eq!(Period::Month.until_end_ms(nov), 3_600_000);
            assert_eq!(Period::Month.until_end_ms(dec), 31 * DAY_MS);
        }
    }

    #[test]
    fn the_completion_reserved_is_the_bodys_maximum_else_the_default() {
        assert_eq!(completion_reserve(Some(10), Some(20), 4096), 10);
        assert_eq!(completion_reserve(None, Some(20), 4096), 20);
        assert_eq!(completion_reserve(Some(0), Some(0), 4096), 4096);
        assert_eq!(completion_reserve(None, None, 7), 7);
        assert_eq!(whole(Some(&json!(1.5))), None);
        assert_eq!(whole(Some(&json!(-3))), None);
        assert_eq!(whole(Some(&json!("5"))), None);
        assert_eq!(whole(Some(&json!(5))), Some(5));
    }

    #[test]
    fn the_prompt_estimate_counts_text_not_names_or_media() {
        let v = json!([{"role": "user", "content": [{"type": "text", "text": "abcd"},
            {"type": "image", "source": {"data": "xxxxxxxxxxxxxxxx"}}]},
            {"role": "assistant", "content": "efgh"}]);
        assert_eq!(text_chars(&v), 8);
        assert_eq!(tokens_of_chars(0), 0);
        assert_eq!(tokens_of_chars(1), 1);
        assert_eq!(tokens_of_chars(8), 2);
        assert_eq!(tokens_of_chars(9), 3);
        assert_eq!(whole_text(Some(" 12 ")), Some(12));
        assert_eq!(whole_text(Some("0")), None);
        assert_eq!(whole_text(Some("1.5")), None);
    }

    #[test]
    fn the_reservation_is_the_most_expensive_reachable_price() {
        let cheap = PriceSpec::from_json(&json!({"input": "1", "output": "2"})).expect("price");
        let dear = PriceSpec::from_json(&json!({"input": "3", "output": "4", "request": "0.01"}))
            .expect("price");
        // 1000 in at 3/M, 500 out at 4/M, plus the fee: 0.003 + 0.002 + 0.01.
        let (n, unpriced) = reservation([Some(&cheap), None, Some(&dear)], 1000, 500);
        assert_eq!(n, 15_000_000);
        assert!(unpriced);
        assert_eq!(reservation([Some(&cheap)], 1000, 500), (2_000_000, false));
        // Only unpriced targets: nothing reserved.
        assert_eq!(reservation([None], 1000, 500), (0, true));
        // The cost rule's rounding: 1 token at 0.0005/M is half a nano, up to 1.
        let tiny = PriceSpec::from_json(&json!({"input": "0.0005", "output": "0"})).expect("price");
        assert_eq!(reservation([Some(&tiny)], 1, 0).0, 1);
        assert_eq!(reservation([Some(&tiny)], 0, 0).0, 0);
    }

    #[test]
    fn admission_fits_at_the_budget_and_not_one_nano_past() {
        let b = Amount(1000);
        assert!(fits(b, 600, 300, 100));
        assert!(!fits(b, 600, 300, 101));
        // A reservation of 0 fits while spend and reservations are within.
        assert!(fits(b, 1000, 0, 0));
        assert!(!fits(b, 1000, 1, 0));
        assert_eq!(remaining(b, 600, 300), 100);
        assert_eq!(remaining(b, 900, 300), 0);
    }

    #[test]
    fn the_refusal_names_the_field_the_caller_the_budget_and_the_renewal() {
        assert_eq!(
            refusal_message(Period::Day, "API key", "ci", Amount(4_000_000), "USD"),
            "Budget budget_per_day of API key 'ci' (0.004000000 USD) is used up; it renews at 00:00 UTC."
        );
        let m = refusal_message(Period::Month, "agent", "bot", Amount::units(2), "EUR");
        assert!(m.starts_with("Budget budget_per_month of agent 'bot' (2.000000000 EUR)"));
    }

    #[test]
    fn the_unpriced_policy_is_admit_or_refuse() {
        assert_eq!(UnpricedPolicy::parse(None), Ok(UnpricedPolicy::Admit));
        assert_eq!(
            UnpricedPolicy::parse(Some("refuse")),
            Ok(UnpricedPolicy::Refuse)
        );
        let e = UnpricedPolicy::parse(Some("maybe")).expect_err("refused");
        assert!(e.contains("GATEHOUSE_UNPRICED_POLICY"));
    }
}
