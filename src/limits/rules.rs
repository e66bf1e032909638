//! The rules, as pure functions of counts and the clock.
//!
//! A minute is a sliding window of one-second buckets: the current second
//! and the 60 before it. Counting 61 buckets rather than 60 makes the window
//! 60 to 61 seconds long, so every real span of 60 seconds lies inside some
//! window that was checked: admissions never exceed the limit in any minute
//! (on one server; docs/limits.md gives the cluster bound). A day is the UTC
//! calendar day.

use std::collections::VecDeque;

use super::{Budgets, Limits};
use crate::spend::budget::{self, Period};

pub const BUCKET_MS: i64 = 1000;
/// Buckets in a minute's window (see the module comment).
pub const MINUTE_BUCKETS: i64 = 61;
pub const DAY_MS: i64 = 86_400_000;
/// The longest reset `x-ratelimit-reset-*` gives for a per-minute limit.
pub const MINUTE_MS: i64 = 60_000;

pub const RATE_LIMITED: &str = "rate_limited";
pub const BUDGET_EXHAUSTED: &str = "budget_exhausted";

pub fn second_of(now_ms: i64) -> i64 {
    now_ms.div_euclid(BUCKET_MS)
}

pub fn day_of(now_ms: i64) -> i64 {
    now_ms.div_euclid(DAY_MS)
}

/// The oldest bucket (second) inside the minute's window at `now_ms`.
pub fn minute_start(now_ms: i64) -> i64 {
    second_of(now_ms) - (MINUTE_BUCKETS - 1)
}

/// Milliseconds until the next UTC midnight, when a day's budget renews.
pub fn until_midnight_ms(now_ms: i64) -> i64 {
    (day_of(now_ms) + 1) * DAY_MS - now_ms
}

/// One bucket: what the database holds for it (every server's share, as of
/// the last sync), what this server counted and has not written yet, and
/// what it is writing right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub at: i64,
    pub db: i64,
    pub pending: i64,
    pub transit: i64,
}

impl Bucket {
    pub fn count(&self) -> i64 {
        self.db
            .saturating_add(self.pending)
            .saturating_add(self.transit)
    }
}

/// Buckets in ascending order of `at` (a second, or a day).
#[derive(Clone, Debug, Default)]
pub struct Buckets {
    v: VecDeque<Bucket>,
}

impl Buckets {
    fn slot(&mut self, at: i64) -> &mut Bucket {
        // Nearly always the newest bucket: it is looked at first, alone.
        let last = self.v.len().wrapping_sub(1);
        if self.v.get(last).is_some_and(|b| b.at == at) {
            return &mut self.v[last];
        }
        let pos = self.v.iter().rposition(|b| b.at <= at);
        match pos {
            Some(i) if self.v[i].at == at => &mut self.v[i],
            Some(i) => {
                self.v.insert(
                    i + 1,
                    Bucket {
                        at,
                        ..Bucket::default()
                    },
                );
                &mut self.v[i + 1]
            }
            None => {
                self.v.push_front(Bucket {
                    at,
                    ..Bucket::default()
                });
                &mut self.v[0]
            }
        }
    }

    pub fn add_pending(&mut self, at: i64, n: i64) {
        let b = self.slot(at);
        b.pending = b.pending.saturating_add(n);
    }

    /// Moves every pending count into transit and returns what to write.
    /// (A second writer then finds nothing to write twice.)
    pub fn take_pending(&mut self) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        for b in self.v.iter_mut().filter(|b| b.pending != 0) {
            out.push((b.at, b.pending));
            b.transit += b.pending;
            b.pending = 0;
        }
        out
    }

    /// `n` of a bucket was written: the database now holds `db_total` for it.
    pub fn pushed(&mut self, at: i64, n: i64, db_total: i64) {
        let b = self.slot(at);
        b.transit -= n;
        b.db = db_total;
    }

    /// Writing `n` failed: it is pending again.
    pub fn push_failed(&mut self, at: i64, n: i64) {
        let b = self.slot(at);
        b.transit -= n;
        b.pending += n;
    }

    /// `n` more were written by this server for `at` (a reservation).
    pub fn add_db(&mut self, at: i64, n: i64) {
        let b = self.slot(at);
        b.db = b.db.saturating_add(n);
    }

    pub fn set_db(&mut self, at: i64, db_total: i64) {
        self.slot(at).db = db_total;
    }

    /// Forgets the database's view of every bucket from `from` on (before a
    /// fresh read replaces it); pending counts stay.
    pub fn clear_db_from(&mut self, from: i64) {
        for b in self.v.iter_mut().filter(|b| b.at >= from) {
            b.db = 0;
        }
    }

    /// Drops buckets older than `from` that have nothing left to write.
    pub fn prune_before(&mut self, from: i64) {
        // In order: when the oldest is recent enough, so are the others (a
        // request prunes five series of each caller; most have nothing old).
        if self.v.front().is_none_or(|b| b.at >= from) {
            return;
        }
        self.v
            .retain(|b| b.at >= from || b.pending != 0 || b.transit != 0);
    }

    /// What this server counted from `from` on and the database does not
    /// hold yet (pending and in transit).
    pub fn unwritten_from(&self, from: i64) -> i64 {
        self.v
            .iter()
            .filter(|b| b.at >= from)
            .map(|b| b.pending.saturating_add(b.transit))
            .sum()
    }

    pub fn total_from(&self, from: i64) -> i64 {
        self.v
            .iter()
            .rev()
            .take_while(|b| b.at >= from)
            .map(Bucket::count)
            .sum()
    }

    /// Nothing waits to be written.
    pub fn is_idle(&self) -> bool {
        self.v.iter().all(|b| b.pending == 0 && b.transit == 0)
    }

    /// The minute's count at `now_ms`.
    pub fn minute_count(&self, now_ms: i64) -> i64 {
        self.total_from(minute_start(now_ms))
    }

    /// Milliseconds until the minute's count falls below `limit` (nothing
    /// more being added), or `None` when it is below already.
    pub fn minute_wait_ms(&self, limit: i64, now_ms: i64) -> Option<i64> {
        let start = minute_start(now_ms);
        let mut left = self.total_from(start);
        if left < limit {
            return None;
        }
        for b in self.v.iter().filter(|b| b.at >= start) {
            left -= b.count();
            if left < limit {
                // Bucket `at` is in the window until second at + MINUTE_BUCKETS.
                return Some((b.at + MINUTE_BUCKETS) * BUCKET_MS - now_ms);
            }
        }
        // Only a limit of 0 (closed) gets here: it never opens; say a minute.
        Some(MINUTE_BUCKETS * BUCKET_MS)
    }

    /// Milliseconds until the minute's count is back to zero, for the reset
    /// headers: at most [`MINUTE_MS`]. The window's 61st bucket is a margin
    /// of the limit's own check (`Retry-After` keeps it), not part of the
    /// minute a client is told about.
    pub fn minute_reset_ms(&self, now_ms: i64) -> i64 {
        let start = minute_start(now_ms);
        self.v
            .iter()
            .rev()
            .take_while(|b| b.at >= start)
            .find(|b| b.count() > 0)
            .map_or(0, |b| (b.at + MINUTE_BUCKETS) * BUCKET_MS - now_ms)
            .min(MINUTE_MS)
    }
}

/// Whole seconds for `Retry-After`: rounded up, at least 1.
pub fn retry_after_secs(wait_ms: i64) -> u64 {
    u64::try_from((wait_ms.max(0) + 999) / 1000)
        .unwrap_or(1)
        .max(1)
}

/// A duration as OpenAI writes it in `x-ratelimit-reset-*`: `1s`, `6m0s`,
/// `1h2m3s` (whole seconds, rounded up).
pub fn format_reset(ms: i64) -> String {
    reset_text(ms).as_str().to_owned()
}

/// The whole seconds a reset header shows for `ms` (rounded up): its text
/// changes only when these do.
pub fn reset_seconds(ms: i64) -> i64 {
    (ms.max(0) / 1000) + i64::from(ms.max(0) % 1000 != 0)
}

/// [`format_reset`] on the stack (the hours of an `i64` of ms take 13
/// digits), for the headers of every limited answer.
pub fn reset_text(ms: i64) -> crate::text::StackText<24> {
    let s = reset_seconds(ms);
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    // Without `format!`: written on every limited answer, and it was most of it.
    let mut out = crate::text::StackText::default();
    if h > 0 {
        out.push_int(h);
        out.push(b"h");
    }
    if h > 0 || m > 0 {
        out.push_int(m);
        out.push(b"m");
    }
    out.push_int(s);
    out.push(b"s");
    out
}

/// What one caller has used, as this server knows it.
pub struct Usage<'a> {
    pub requests: &'a Buckets,
    pub tokens: &'a Buckets,
    pub days: &'a Buckets,
    /// Requests in flight for this caller on every server.
    pub in_flight: i64,
}

/// Why a request does not fit one limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denial {
    pub code: &'static str,
    /// The limit that refused (a field of `limits`).
    pub field: &'static str,
    pub limit: u64,
    pub wait_ms: i64,
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Checks one caller's limits; `requests_checked_elsewhere` skips the
/// requests-per-minute rule (a cluster reservation already decided it).
/// Of several limits exceeded, the one with the longest wait is reported.
pub fn check(
    limits: &Limits,
    usage: &Usage,
    now_ms: i64,
    requests_checked_elsewhere: bool,
) -> Option<Denial> {
    let mut worst: Option<Denial> = None;
    let mut consider = |d: Denial| {
        let longer = worst.is_none_or(|w| {
            d.wait_ms > w.wait_ms || (d.wait_ms == w.wait_ms && d.code == BUDGET_EXHAUSTED)
        });
        if longer {
            worst = Some(d);
        }
    };
    if let (Some(l), false) = (limits.requests_per_minute, requests_checked_elsewhere) {
        if let Some(wait_ms) = usage.requests.minute_wait_ms(as_i64(l), now_ms) {
            consider(Denial {
                code: RATE_LIMITED,
                field: "requests_per_minute",
                limit: l,
                wait_ms,
            });
        }
    }
    if let Some(l) = limits.tokens_per_minute {
        if let Some(wait_ms) = usage.tokens.minute_wait_ms(as_i64(l), now_ms) {
            consider(Denial {
                code: RATE_LIMITED,
                field: "tokens_per_minute",
                limit: l,
                wait_ms,
            });
        }
    }
    if let Some(l) = limits.tokens_per_day {
        if usage.days.total_from(day_of(now_ms)) >= as_i64(l) {
            consider(Denial {
                code: BUDGET_EXHAUSTED,
                field: "tokens_per_day",
                limit: l,
                wait_ms: until_midnight_ms(now_ms),
            });
        }
    }
    if let Some(l) = limits.max_parallel {
        if usage.in_flight >= as_i64(l) {
            // Nobody knows when a running request ends: ask for a second.
            consider(Denial {
                code: RATE_LIMITED,
                field: "max_parallel",
                limit: l,
                wait_ms: BUCKET_MS,
            });
        }
    }
    worst
}

/// A caller's money as this server knows it: the spend of the current day
/// and month (every server's, as of the last sync, plus this one's) and the
/// open reservations (every live server's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spend {
    pub day: i64,
    pub month: i64,
    pub reserved: i64,
}

/// The budget a request with `reservation` does not fit, if any (of the day
/// and the month, the one with the longer wait).
pub fn check_budget(
    limits: &Limits,
    spend: Spend,
    reservation: i64,
    now_ms: i64,
) -> Option<Denial> {
    let mut worst: Option<Denial> = None;
    for (period, budget, spent) in [
        (Period::Day, limits.budget_per_day, spend.day),
        (Period::Month, limits.budget_per_month, spend.month),
    ] {
        let Some(b) = budget else { continue };
        if !budget::fits(b, spent, spend.reserved, reservation) {
            let d = Denial {
                code: BUDGET_EXHAUSTED,
                field: period.field(),
                limit: b.nanos(),
                wait_ms: period.until_end_ms(now_ms),
            };
            if worst.is_none_or(|w| d.wait_ms > w.wait_ms) {
                worst = Some(d);
            }
        }
    }
    worst
}

/// `x-gatehouse-budget-remaining` and `-reset`: of every budget that
/// applies, the one with the least left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetQuota {
    pub remaining: i64,
    pub reset_ms: i64,
}

/// The budget headers' names: what is left, and when it renews.
pub const BUDGET_HEADERS: [&str; 2] = ["x-gatehouse-budget-remaining", "x-gatehouse-budget-reset"];

impl BudgetQuota {
    /// Adds one caller's budgets to `acc` (the tightest wins).
    pub fn add(acc: &mut Option<BudgetQuota>, budgets: &Budgets, spend: Spend, now_ms: i64) {
        for (period, budget, spent) in [
            (Period::Day, budgets.day, spend.day),
            (Period::Month, budgets.month, spend.month),
        ] {
            let Some(b) = budget else { continue };
            let remaining = budget::remaining(b, spent, spend.reserved);
            // A looser budget cannot win: its renewal (a calendar
            // computation for the month's) is not needed.
            if acc.is_some_and(|a| remaining > a.remaining) {
                continue;
            }
            let q = BudgetQuota {
                remaining,
                reset_ms: period.until_end_ms(now_ms),
            };
            if acc.is_none_or(|a| (q.remaining, -q.reset_ms) < (a.remaining, -a.reset_ms)) {
                *acc = Some(q);
            }
        }
    }
}

/// One `x-ratelimit-*` family: the limit, what is left, when it is whole again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub limit: u64,
    pub remaining: u64,
    pub reset_ms: i64,
}

impl Quota {
    fn tighter(self, other: Option<Quota>) -> Quota {
        match other {
            Some(o) if (o.remaining, -o.reset_ms) < (self.remaining, -self.reset_ms) => o,
            _ => self,
        }
    }
}

/// The `x-ratelimit-*` values for a limited caller: of several callers'
/// limits (key, user, agent) each family shows the tightest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateHeaders {
    pub requests: Option<Quota>,
    pub tokens: Option<Quota>,
}

impl RateHeaders {
    /// Adds one caller's quotas at `now_ms` (after this request was counted).
    pub fn add(&mut self, limits: &Limits, usage: &Usage, now_ms: i64) {
        if let Some(l) = limits.requests_per_minute {
            let used = usage.requests.minute_count(now_ms).max(0);
            let q = Quota {
                limit: l,
                remaining: l.saturating_sub(used as u64),
                reset_ms: usage.requests.minute_reset_ms(now_ms),
            };
            self.requests = Some(q.tighter(self.requests));
        }
        let tokens = if let Some(l) = limits.tokens_per_minute {
            let used = usage.tokens.minute_count(now_ms).max(0);
            Some(Quota {
                limit: l,
                remaining: l.saturating_sub(used as u64),
                reset_ms: usage.tokens.minute_reset_ms(now_ms),
            })
        } else if let Some(l) = limits.tokens_per_day {
            // No per-minute token limit: the day's budget is what binds.
            let used = usage.days.total_from(day_of(now_ms)).max(0);
            Some(Quota {
                limit: l,
                remaining: l.saturating_sub(used as u64),
                reset_ms: if used > 0 {
                    until_midnight_ms(now_ms)
                } else {
                    0
                },
            })
        } else {
            None
        };
        if let Some(q) = tokens {
            self.tokens = Some(q.tighter(self.tokens));
        }
    }

    /// The header names and values to send.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(6);
        if let Some(q) = self.requests {
            out.push(("x-ratelimit-limit-requests", q.limit.to_string()));
            out.push(("x-ratelimit-remaining-requests", q.remaining.to_string()));
            out.push(("x-ratelimit-reset-requests", format_reset(q.reset_ms)));
        }
        if let Some(q) = self.tokens {
            out.push(("x-ratelimit-limit-tokens", q.limit.to_string()));
            out.push(("x-ratelimit-remaining-tokens", q.remaining.to_string()));
            out.push(("x-ratelimit-reset-tokens", format_reset(q.reset_ms)));
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }
}

/// A refused request: 429 with `code`, `Retry-After: retry_after` and the
/// caller's `x-ratelimit-*` headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub retry_after: u64,
    pub message: String,
    /// The limit that refused (a field of `limits`), for the error's `param`.
    pub field: &'static str,
    pub headers: RateHeaders,
    /// The budget headers, when a budget applies.
    pub budget: Option<BudgetQuota>,
}

impl Refusal {
    pub fn new(d: &Denial, whose: &str, headers: RateHeaders) -> Refusal {
        let retry_after = retry_after_secs(d.wait_ms);
        let message = if d.code == BUDGET_EXHAUSTED {
            format!(
                "The daily token budget of this {whose} ({} tokens) is used up; it renews at midnight UTC, in {retry_after} seconds.",
                d.limit
            )
        } else if d.field == "max_parallel" {
            format!(
                "This {whose} already has {} requests running (its max_parallel); try again when one has finished.",
                d.limit
            )
        } else {
            format!(
                "Rate limit reached: this {whose} may use {} {} per minute; try again in {retry_after} seconds.",
                d.limit,
                if d.field == "requests_per_minute" { "requests" } else { "tokens" },
            )
        };
        Refusal {
            code: d.code,
            retry_after,
            message,
            field: d.field,
            headers,
            budget: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000; // a whole second, mid-day UTC

    fn series(entries: &[(i64, i64)]) -> Buckets {
        let mut b = Buckets::default();
        for &(at, n) in entries {
            b.add_pending(at, n);
        }
        b
    }

    fn usage<'a>(r: &'a Buckets, t: &'a Buckets, d: &'a Buckets, in_flight: i64) -> Usage<'a> {
        Usage {
            requests: r,
            tokens: t,
            days: d,
            in_flight,
        }
    }

    #[test]
    fn reset_is_written_as_openai_does() {
        assert_eq!(format_reset(0), "0s");
        assert_eq!(format_reset(1), "1s");
        assert_eq!(format_reset(1000), "1s");
        assert_eq!(format_reset(59_001), "1m0s");
        assert_eq!(format_reset(360_000), "6m0s");
        assert_eq!(format_reset(3_723_000), "1h2m3s");
        // The longest: every hour an i64 of ms holds, rounded up.
        assert_eq!(format_reset(i64::MAX), "2562047788015h12m56s");
        assert_eq!(format_reset(-5), "0s");
    }

    #[test]
    fn retry_after_is_whole_seconds_and_at_least_one() {
        assert_eq!(retry_after_secs(-5), 1);
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(1000), 1);
        assert_eq!(retry_after_secs(1001), 2);
    }

    #[test]
    fn requests_per_minute_admits_under_and_at_limit_minus_one_and_refuses_at_the_limit() {
        let s = second_of(T0);
        let limits = Limits {
            requests_per_minute: Some(3),
            ..Limits::default()
        };
        let empty = Buckets::default();
        for (used, refused) in [(0, false), (2, false), (3, true), (4, true)] {
            let r = series(&[(s, used)]);
            let d = check(&limits, &usage(&r, &empty, &empty, 0), T0, false);
            assert_eq!(d.is_some(), refused, "{used} used of 3");
            if let Some(d) = d {
                assert_eq!(d.code, RATE_LIMITED);
                assert_eq!(d.field, "requests_per_minute");
                // Counted this second: it leaves the window 61 s from now.
                assert_eq!(retry_after_secs(d.wait_ms), 61);
            }
        }
    }

    #[test]
    fn the_minute_slides_one_second_at_a_time() {
        let s = second_of(T0);
        let limits = Limits {
            requests_per_minute: Some(2),
            ..Limits::default()
        };
        let empty = Buckets::default();
        let r = series(&[(s - 60, 1), (s - 10, 1)]);
        // The request 60 s ago is still in the window (61 buckets).
        let d = check(&limits, &usage(&r, &empty, &empty, 0), T0, false).expect("refused");
        assert_eq!(d.wait_ms, 1000);
        // A second later it has left; one request fits again.
        assert!(check(&limits, &usage(&r, &empty, &empty, 0), T0 + 1000, false).is_none());
        // Mid-second the wait rounds up to the next whole second.
        let d = check(&limits, &usage(&r, &empty, &empty, 0), T0 + 400, false).expect("refused");
        assert_eq!(d.wait_ms, 600);
        assert_eq!(retry_after_secs(d.wait_ms), 1);
    }

    #[test]
    fn the_wait_is_until_enough_old_requests_have_left() {
        let s = second_of(T0);
        let r = series(&[(s - 50, 2), (s - 20, 3), (s, 1)]);
        // Limit 5, 6 used: the two at s-50 must leave (at s+11).
        assert_eq!(r.minute_wait_ms(5, T0), Some(11_000));
        // Limit 4 (admitted while below): the three at s-20 too (at s+41).
        assert_eq!(r.minute_wait_ms(4, T0), Some(41_000));
        // Limit 1: everything, the newest at s+61.
        assert_eq!(r.minute_wait_ms(1, T0), Some(61_000));
        assert_eq!(r.minute_wait_ms(7, T0), None);
        // Back to zero when the newest has left (61 s), said as at most a minute.
        assert_eq!(r.minute_reset_ms(T0), MINUTE_MS);
        assert_eq!(r.minute_reset_ms(T0 + 1_500), 59_500);
    }

    #[test]
    fn tokens_per_minute_admits_while_below_and_refuses_at_or_over() {
        let s = second_of(T0);
        let limits = Limits {
            tokens_per_minute: Some(100),
            ..Limits::default()
        };
        let empty = Buckets::default();
        for (used, refused) in [(0, false), (99, false), (100, true), (150, true)] {
            let t = series(&[(s - 5, used)]);
            let d = check(&limits, &usage(&empty, &t, &empty, 0), T0, false);
            assert_eq!(d.is_some(), refused, "{used} tokens of 100");
            if let Some(d) = d {
                assert_eq!((d.code, d.field), (RATE_LIMITED, "tokens_per_minute"));
                assert_eq!(d.wait_ms, 56_000);
            }
        }
    }

    #[test]
    fn tokens_per_day_is_a_budget_that_renews_at_midnight_utc() {
        let day = day_of(T0);
        let limits = Limits {
            tokens_per_day: Some(1000),
            ..Limits::default()
        };
        let empty = Buckets::default();
        for (used, refused) in [(999, false), (1000, true), (1001, true)] {
            let d_ = series(&[(day, used)]);
            let d = check(&limits, &usage(&empty, &empty, &d_, 0), T0, false);
            assert_eq!(d.is_some(), refused, "{used} of 1000");
            if let Some(d) = d {
                assert_eq!(d.code, BUDGET_EXHAUSTED);
                assert_eq!(d.wait_ms, until_midnight_ms(T0));
            }
        }
        // Yesterday's use does not count today.
        let d_ = series(&[(day - 1, 5000)]);
        assert!(check(&limits, &usage(&empty, &empty, &d_, 0), T0, false).is_none());
        assert_eq!(until_midnight_ms(day * DAY_MS), DAY_MS);
        assert_eq!(until_midnight_ms((day + 1) * DAY_MS - 1), 1);
    }

    #[test]
    fn a_budget_admits_a_reservation_that_fits_exactly_and_refuses_one_nano_more() {
        let limits = Limits {
            budget_per_day: Some(crate::spend::Amount(1000)),
            budget_per_month: Some(crate::spend::Amount(5000)),
            ..Limits::default()
        };
        let spend = Spend {
            day: 600,
            month: 600,
            reserved: 300,
        };
        assert!(check_budget(&limits, spend, 100, T0).is_none());
        let d = check_budget(&limits, spend, 101, T0).expect("refused");
        assert_eq!(
            (d.code, d.field, d.limit),
            (BUDGET_EXHAUSTED, "budget_per_day", 1000)
        );
        assert_eq!(d.wait_ms, until_midnight_ms(T0));
        // Both used up: the month's wait is the longer one.
        let d = check_budget(
            &limits,
            Spend {
                month: 5000,
                ..spend
            },
            101,
            T0,
        )
        .expect("refused");
        assert_eq!(d.field, "budget_per_month");
        let mut q = None;
        BudgetQuota::add(&mut q, &limits.budgets().expect("budgets"), spend, T0);
        let q = q.expect("a budget applies");
        assert_eq!(q.remaining, 100);
        assert_eq!(
            crate::spend::amount::nanos_text(q.remaining).as_str(),
            "0.000000100"
        );
        let mut none = None;
        BudgetQuota::add(&mut none, &Budgets::default(), spend, T0);
        assert!(none.is_none());
        assert_eq!(Limits::default().budgets(), None);
    }

    #[test]
    fn max_parallel_admits_below_and_refuses_at_the_limit() {
        let limits = Limits {
            max_parallel: Some(2),
            ..Limits::default()
        };
        let empty = Buckets::default();
        for (running, refused) in [(0, false), (1, false), (2, true), (3, true)] {
            let d = check(&limits, &usage(&empty, &empty, &empty, running), T0, false);
            assert_eq!(d.is_some(), refused, "{running} running of 2");
            if let Some(d) = d {
                assert_eq!(
                    (d.code, d.field, d.wait_ms),
                    (RATE_LIMITED, "max_parallel", 1000)
                );
            }
        }
    }

    #[test]
    fn of_several_limits_exceeded_the_longest_wait_is_reported() {
        let s = second_of(T0);
        let limits = Limits {
            requests_per_minute: Some(1),
            tokens_per_day: Some(10),
            max_parallel: Some(1),
            ..Limits::default()
        };
        let r = series(&[(s, 1)]);
        let d_ = series(&[(day_of(T0), 10)]);
        let empty = Buckets::default();
        let d = check(&limits, &usage(&r, &empty, &d_, 1), T0, false).expect("refused");
        assert_eq!(d.code, BUDGET_EXHAUSTED);
        // Skipping the requests rule (decided by a reservation) leaves the others.
        let no_day = Limits {
            tokens_per_day: None,
            ..limits
        };
        let d = check(&no_day, &usage(&r, &empty, &empty, 1), T0, true).expect("refused");
        assert_eq!(d.field, "max_parallel");
    }

    #[test]
    fn a_closed_limit_admits_nothing() {
        let empty = Buckets::default();
        let d = check(
            &Limits::closed(),
            &usage(&empty, &empty, &empty, 0),
            T0,
            false,
        );
        assert!(d.is_some());
    }

    #[test]
    fn headers_show_the_tightest_of_several_callers() {
        let s = second_of(T0);
        let key = Limits {
            requests_per_minute: Some(10),
            tokens_per_minute: Some(1000),
            ..Limits::default()
        };
        let user = Limits {
            requests_per_minute: Some(5),
            tokens_per_day: Some(100_000),
            ..Limits::default()
        };
        let r = series(&[(s - 30, 3)]);
        let t = series(&[(s - 30, 400)]);
        let d_ = series(&[(day_of(T0), 400)]);
        let mut h = RateHeaders::default();
        h.add(&key, &usage(&r, &t, &d_, 0), T0);
        h.add(&user, &usage(&r, &t, &d_, 0), T0);
        let pairs = h.pairs();
        let get = |n: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.clone())
                .expect(n)
        };
        assert_eq!(get("x-ratelimit-limit-requests"), "5");
        assert_eq!(get("x-ratelimit-remaining-requests"), "2");
        assert_eq!(get("x-ratelimit-reset-requests"), "31s");
        assert_eq!(get("x-ratelimit-limit-tokens"), "1000");
        assert_eq!(get("x-ratelimit-remaining-tokens"), "600");
        assert_eq!(get("x-ratelimit-reset-tokens"), "31s");
    }

    #[test]
    fn buckets_keep_unwritten_counts_until_written() {
        let mut b = Buckets::default();
        b.add_pending(10, 2);
        b.add_pending(12, 1);
        b.add_pending(11, 4);
        assert_eq!(b.total_from(0), 7);
        assert_eq!(b.take_pending(), vec![(10, 2), (11, 4), (12, 1)]);
        // In transit: still counted, not written twice.
        assert_eq!(b.total_from(0), 7);
        assert!(b.take_pending().is_empty());
        b.pushed(10, 2, 5); // another server had written 3 for second 10
        b.push_failed(11, 4);
        b.pushed(12, 1, 1);
        assert_eq!(b.total_from(0), 10);
        b.prune_before(12);
        // Second 10 is written and old: gone; 11 still has to be written.
        assert_eq!(b.total_from(0), 5);
        b.clear_db_from(0);
        assert_eq!(b.total_from(0), 4);
        b.add_pending(12, 1);
        b.set_db(12, 3);
        assert_eq!(b.total_from(0), 4 + 1 + 3);
        assert!(!b.is_idle());
        // Nothing older than the oldest: nothing goes; the newest is added to.
        b.prune_before(11);
        b.add_pending(12, 2);
        assert_eq!(b.total_from(0), 4 + 3 + 3);
        assert_eq!(b.total_from(12), 3 + 3);
        b.add_pending(13, 1);
        assert_eq!(b.take_pending(), vec![(11, 4), (12, 3), (13, 1)]);
    }
}
