//! The limiter: counts per caller in memory, admits or refuses on the hot
//! path, and settles with the database in the background so that several
//! servers share one count (docs/limits.md).
//!
//! - Alone (one live server, or SQLite), a server's own count is the whole
//!   truth: it admits from memory and writes counts in the background only
//!   so they survive a restart.
//! - With `n` live servers, each may admit at most `q = floor(10% × limit / n)`
//!   requests of a caller between two syncs with the database, so the
//!   requests no server has seen yet stay within 10 % of the limit. Where
//!   `q` would be 0 (a limit below 10 × n per minute), each request instead
//!   reserves its place in the database first: exact, one round trip, and
//!   only for callers that may make few requests anyway.
//! - When the database does not answer, a server keeps enforcing what it
//!   knows, and writes its counts once the database is back.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use parking_lot::Mutex;
use serde::Serialize;

use crate::store::limits::CounterRow;
use crate::store::Store;

use super::rules::{
    self, day_of, minute_start, second_of, Buckets, BudgetQuota, Denial, RateHeaders, Refusal,
    Spend, Usage,
};
use super::{Budgets, Limits};
use crate::spend::amount::format_nanos;
use crate::spend::budget::{self, month_of, Period};
use crate::spend::{Amount, Currency};

/// How often counts are settled with the database.
const SYNC_MS: u64 = 200;
/// How often a server says it is alive; one silent for 3 beats is gone.
const HEARTBEAT_MS: i64 = 1000;
/// Rounds after the start in which every round is a heartbeat, so servers
/// started together learn of each other within one round, not one beat.
const EAGER_ROUNDS: u64 = 50;
const ALIVE_MS: i64 = 3 * HEARTBEAT_MS;
/// After a failed database call, the hot path stops waiting on the
/// database for this long (the background sync keeps trying).
const DEGRADED_MS: i64 = 2000;
/// The longest a request waits on the database for its count.
const HOT_PATH_DB: Duration = Duration::from_millis(1000);
/// The longest the background task waits on one write.
const BACKGROUND_DB: Duration = Duration::from_secs(5);
/// Share of a limit that servers may admit between syncs, in percent.
const SLACK_PERCENT: u64 = 10;
/// Idle callers are forgotten after this (their counts are in the database).
const IDLE_MS: i64 = 120_000;

/// One caller whose limits apply to a request.
#[derive(Clone, Debug)]
pub struct Subject {
    /// `k:<key id>`, `u:<user id>`, `a:<agent>` or `s:<device id>`.
    pub key: String,
    /// The caller in words, for messages: "API key", "user", "agent".
    pub whose: &'static str,
    pub limits: Limits,
    /// The caller's name in a budget refusal (a key's name, a user's
    /// e-mail, an agent's address); empty when not known.
    pub name: String,
}

impl Subject {
    pub fn api_key(id: &str, limits: Limits) -> Subject {
        Subject {
            key: format!("k:{id}"),
            whose: "API key",
            limits,
            name: String::new(),
        }
    }
    /// The `count_tokens` counters of `of`: the same sliding minute and
    /// shared counters as requests, under a key of their own.
    pub fn count_tokens(of: &Subject) -> Subject {
        Subject {
            key: format!("c{}", of.key),
            whose: of.whose,
            limits: of.limits.count_tokens(),
            name: String::new(),
        }
    }
    /// The MCP `tools/call` counters of `of`, under a key of their own.
    pub fn mcp_calls(of: &Subject) -> Subject {
        Subject {
            key: format!("m{}", of.key),
            whose: of.whose,
            limits: of.limits.mcp_calls(),
            name: String::new(),
        }
    }
    pub fn user(id: &str, limits: Limits) -> Subject {
        Subject {
            key: format!("u:{id}"),
            whose: "user",
            limits,
            name: String::new(),
        }
    }
    pub fn agent(address: &str, limits: Limits) -> Subject {
        Subject {
            key: format!("a:{address}"),
            whose: "agent",
            limits,
            name: address.to_string(),
        }
    }
    /// The same caller, named in budget refusals.
    pub fn named(mut self, name: &str) -> Subject {
        // Only a budget refusal says it: no copy for other callers.
        if self.limits.has_budget() {
            self.name = name.to_string();
        }
        self
    }
    pub fn sign_in(device_id: &str, limits: Limits) -> Subject {
        Subject {
            key: format!("s:{device_id}"),
            whose: "sign-in",
            limits,
            name: String::new(),
        }
    }
}

/// What a caller uses now (the `…/limits` views).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Used {
    pub requests_this_minute: i64,
    pub tokens_this_minute: i64,
    pub tokens_today: i64,
    pub in_flight: i64,
    /// Money (amounts): settled today and this month (UTC), and open
    /// reservations.
    #[serde(serialize_with = "amount")]
    pub spend_today: i64,
    #[serde(serialize_with = "amount")]
    pub spend_this_month: i64,
    #[serde(serialize_with = "amount")]
    pub reserved: i64,
}

fn amount<S: serde::Serializer>(n: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_nanos(*n))
}

/// The subject under which a caller's open reservations are kept per server
/// (rows of `limit_in_flight`, beside its requests in flight).
fn reserved_key(key: &str) -> String {
    format!("${key}")
}

#[derive(Default)]
struct State {
    requests: Buckets,
    tokens: Buckets,
    days: Buckets,
    /// Money settled, in nanos: by day and by month ('sd', 'sm').
    spend_day: Buckets,
    spend_month: Buckets,
    /// Open reservations (nanos) here; on the other servers as of the last
    /// sync; and what the database says is reserved here.
    reserved: i64,
    reserved_elsewhere: i64,
    reserved_written: i64,
    /// Nanos reserved here (not in the database) since the start, and how
    /// many of them the last sync wrote: the budgets' share rule.
    reserve_admitted: i64,
    reserve_synced_mark: i64,
    /// Requests running on this server.
    in_flight: i64,
    /// Requests running on the other servers, as of the last sync.
    in_flight_elsewhere: i64,
    /// What the database says runs here (written when it differs).
    in_flight_written: i64,
    /// Requests admitted here (not reserved) since the start, and how many
    /// of them the last completed sync wrote: the difference is what the
    /// other servers cannot know yet (the share rule).
    admitted: i64,
    synced_mark: i64,
    /// Counts were read from the database at least once.
    loaded: bool,
    /// Bumped whenever counts are written, so an older read does not
    /// overwrite a newer write.
    writes: u64,
    last_used_ms: i64,
}

impl State {
    fn unsynced(&self) -> i64 {
        self.admitted - self.synced_mark
    }

    fn synced_up_to(&mut self, mark: i64) {
        self.synced_mark = self.synced_mark.max(mark);
    }

    fn reserve_unsynced(&self) -> i64 {
        self.reserve_admitted - self.reserve_synced_mark
    }

    fn spend(&self, now_ms: i64) -> Spend {
        Spend {
            day: self.spend_day.total_from(day_of(now_ms)),
            month: self.spend_month.total_from(month_of(now_ms)),
            reserved: self.reserved.saturating_add(self.reserved_elsewhere),
        }
    }

    fn usage(&self) -> Usage<'_> {
        Usage {
            requests: &self.requests,
            tokens: &self.tokens,
            days: &self.days,
            in_flight: self.in_flight + self.in_flight_elsewhere,
        }
    }

    fn prune(&mut self, now_ms: i64) {
        let start = minute_start(now_ms);
        self.requests.prune_before(start);
        self.tokens.prune_before(start);
        self.days.prune_before(day_of(now_ms));
        self.spend_day.prune_before(day_of(now_ms));
        self.spend_month.prune_before(month_of(now_ms));
    }

    fn idle(&self) -> bool {
        self.in_flight == 0
            && self.requests.is_idle()
            && self.tokens.is_idle()
            && self.days.is_idle()
            && self.spend_day.is_idle()
            && self.spend_month.is_idle()
            && self.reserved == 0
            && self.reserved_written == 0
    }

    /// Replaces the database's view with rows just read (all of this
    /// subject's rows in the windows), unless a write happened meanwhile.
    fn apply_read(&mut self, rows: &[&CounterRow], writes_before: u64, now_ms: i64) {
        self.loaded = true;
        if self.writes != writes_before {
            return;
        }
        let (sec_from, day_from) = (minute_start(now_ms), day_of(now_ms));
        self.requests.clear_db_from(sec_from);
        self.tokens.clear_db_from(sec_from);
        self.days.clear_db_from(day_from);
        let month_from = month_of(now_ms);
        self.spend_day.clear_db_from(day_from);
        self.spend_month.clear_db_from(month_from);
        for r in rows {
            match r.metric.as_str() {
                "r" if r.win >= sec_from => self.requests.set_db(r.win, r.n),
                "t" if r.win >= sec_from => self.tokens.set_db(r.win, r.n),
                "d" if r.win >= day_from => self.days.set_db(r.win, r.n),
                "sd" if r.win >= day_from => self.spend_day.set_db(r.win, r.n),
                "sm" if r.win >= month_from => self.spend_month.set_db(r.win, r.n),
                _ => {}
            }
        }
    }
}

/// A caller's counts, and its turn at the database: one reservation or
/// sync per caller and server at a time, so a burst does not queue a
/// transaction per request behind the caller's lock row.
#[derive(Default)]
struct SlotInner {
    state: Mutex<State>,
    db_turn: tokio::sync::Mutex<()>,
}

impl SlotInner {
    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }
}

type Slot = Arc<SlotInner>;

struct Shared {
    store: Option<Store>,
    server_id: String,
    states: DashMap<String, Slot>,
    /// Live servers sharing the database (at least 1: this one).
    servers: AtomicI64,
    degraded_until: AtomicI64,
    outage_logged: AtomicBool,
    syncs: AtomicU64,
    /// What budgets are in (for refusal messages).
    currency: Currency,
}

/// Cheap to clone; every clone is the same limiter.
#[derive(Clone)]
pub struct Limiter(Arc<Shared>);

/// An admitted request: keeps its place in `max_parallel` until it ends
/// ([`Admission::end`]) or is dropped; [`Admission::finish`] counts its
/// tokens.
pub struct Admission {
    limiter: Option<Limiter>,
    held: Vec<Held>,
    /// `x-ratelimit-*` values, empty when no limit applies.
    pub headers: RateHeaders,
    /// Nanos reserved on every held caller, until settled.
    reservation: i64,
    settled: bool,
    /// The budget headers' figures, shared with the request's
    /// [`BudgetProbe`]; None when no budget applies.
    figures: Option<Arc<Figures>>,
}

/// A caller an admission holds a place with, and its budgets (None: none).
struct Held {
    slot: Slot,
    budgets: Option<Budgets>,
}

/// `x-gatehouse-budget-*` of one request: as admitted (its reservation
/// counted), and as settled (its cost counted). Made under the locks the
/// admission and the settlement take anyway, so the answer's headers cost
/// no lock of a caller's counts of their own.
struct Figures {
    admitted: Option<BudgetQuota>,
    settled: Mutex<Option<BudgetQuota>>,
}

/// Reads the budget headers of an admitted request (after the admission
/// itself went to the request's end hook).
pub struct BudgetProbe(Option<Arc<Figures>>);

impl BudgetProbe {
    /// The figure at admission: what a stream's headers show (a short
    /// stream may have settled before its headers go out). None when no
    /// budget applies.
    pub fn admitted(&self) -> Option<BudgetQuota> {
        self.0.as_ref()?.admitted
    }

    /// The figure once settled (the admission's until then): what a plain
    /// answer's headers show.
    pub fn quota(&self) -> Option<BudgetQuota> {
        let f = self.0.as_ref()?;
        let settled = *f.settled.lock();
        settled.or(f.admitted)
    }
}

impl Admission {
    /// Counts the request's tokens (prompt plus completion) now that it ended.
    pub fn finish(&mut self, tokens: u64) {
        self.settle(tokens, 0);
    }

    /// The request ended: counts its tokens, releases its reservation and
    /// adds its cost (nanos) to the day's and the month's spend.
    pub fn settle(&mut self, tokens: u64, cost_nanos: i64) {
        self.close(tokens, cost_nanos, crate::store::now_ms(), false);
    }

    /// [`Admission::settle`], and the request's `max_parallel` place freed
    /// in the same pass over its callers (the drop then has nothing to do).
    pub fn end(mut self, tokens: u64, cost_nanos: i64) {
        self.close(tokens, cost_nanos, crate::store::now_ms(), true);
    }

    fn close(&mut self, tokens: u64, cost_nanos: i64, now_ms: i64, free_place: bool) {
        let n = i64::try_from(tokens).unwrap_or(i64::MAX);
        let release = if self.settled { 0 } else { self.reservation };
        self.settled = true;
        let cost = cost_nanos.max(0);
        let free = free_place && self.limiter.take().is_some();
        if n == 0 && release == 0 && cost == 0 && !free && self.figures.is_none() {
            return;
        }
        let mut figure = None;
        for h in &self.held {
            let mut s = h.slot.lock();
            if n != 0 {
                s.tokens.add_pending(second_of(now_ms), n);
                s.days.add_pending(day_of(now_ms), n);
            }
            if cost != 0 {
                s.spend_day.add_pending(day_of(now_ms), cost);
                s.spend_month.add_pending(month_of(now_ms), cost);
            }
            s.reserved -= release;
            if free {
                s.in_flight -= 1;
            }
            s.last_used_ms = now_ms;
            if let Some(b) = &h.budgets {
                BudgetQuota::add(&mut figure, b, s.spend(now_ms), now_ms);
            }
        }
        if let Some(f) = &self.figures {
            *f.settled.lock() = figure;
        }
    }

    /// What reads the budget headers later (the admission goes to the
    /// request's end hook).
    pub fn budget_probe(&self) -> BudgetProbe {
        BudgetProbe(self.figures.clone())
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.limiter.is_some() {
            let release = if self.settled { 0 } else { self.reservation };
            for h in &self.held {
                let mut s = h.slot.lock();
                s.in_flight -= 1;
                s.reserved -= release;
            }
        }
    }
}

/// `q` for a caller's budgets: the smaller share of its day's and month's.
fn budget_share(limits: &Limits, servers: i64) -> i64 {
    [limits.budget_per_day, limits.budget_per_month]
        .into_iter()
        .flatten()
        .map(|b| share(b.nanos(), servers))
        .min()
        .unwrap_or(i64::MAX)
}

/// `q`: requests of a caller one server may admit between syncs.
pub fn share(limit: u64, servers: i64) -> i64 {
    let n = u64::try_from(servers.max(1)).unwrap_or(1);
    i64::try_from(limit.saturating_mul(SLACK_PERCENT) / 100 / n).unwrap_or(i64::MAX)
}

/// A refusal by a budget the database found full (the local view may lag):
/// the month's when set, else the day's.
fn budget_denial(limits: &Limits, now_ms: i64) -> Denial {
    let (period, b) = match (limits.budget_per_month, limits.budget_per_day) {
        (Some(b), _) => (Period::Month, b),
        (None, b) => (Period::Day, b.unwrap_or_default()),
    };
    Denial {
        code: rules::BUDGET_EXHAUSTED,
        field: period.field(),
        limit: b.nanos(),
        wait_ms: period.until_end_ms(now_ms),
    }
}

/// Cut off from the database with others alive: a server admits at most
/// its `1/n` share of the remaining budget it knows.
fn cut_off_budget(
    limits: &Limits,
    s: &State,
    reservation: i64,
    servers: i64,
    now_ms: i64,
) -> Option<Denial> {
    let spend = s.spend(now_ms);
    let unsynced = s.reserve_unsynced();
    for (period, budget, spent) in [
        (Period::Day, limits.budget_per_day, spend.day),
        (Period::Month, limits.budget_per_month, spend.month),
    ] {
        let Some(b) = budget else { continue };
        let base = spent + spend.reserved - unsynced;
        let left = i64::try_from(b.nanos()).unwrap_or(i64::MAX) - base;
        if unsynced + reservation > left.max(0) / servers.max(1) {
            return Some(Denial {
                code: rules::BUDGET_EXHAUSTED,
                field: period.field(),
                limit: b.nanos(),
                wait_ms: period.until_end_ms(now_ms),
            });
        }
    }
    None
}

/// A caller past its share since the last sync (requests or budget nanos):
/// it must sync before this request is decided.
fn past_share(subject: &Subject, s: &State, reservation: i64, servers: i64) -> bool {
    let requests = subject
        .limits
        .requests_per_minute
        .is_some_and(|l| s.unsynced() >= share(l, servers));
    let money = subject.limits.has_budget()
        && reservation > 0
        && s.reserve_unsynced() + reservation > budget_share(&subject.limits, servers);
    requests || money
}

fn db_op<T>(r: Result<Result<T, sqlx::Error>, tokio::time::error::Elapsed>) -> Result<T, String> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the database did not answer in time".into()),
    }
}

impl Limiter {
    /// A limiter that settles with `store` (None: memory only, for tests).
    pub fn new(store: Option<Store>) -> Limiter {
        Limiter::with_currency(store, Currency::USD)
    }

    /// A limiter whose budgets are in `currency`.
    pub fn with_currency(store: Option<Store>, currency: Currency) -> Limiter {
        Limiter(Arc::new(Shared {
            currency,
            store,
            server_id: crate::store::new_id(),
            states: DashMap::new(),
            servers: AtomicI64::new(1),
            degraded_until: AtomicI64::new(0),
            outage_logged: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
        }))
    }

    pub fn servers(&self) -> i64 {
        self.0.servers.load(Ordering::Relaxed).max(1)
    }

    fn degraded(&self, now_ms: i64) -> bool {
        now_ms < self.0.degraded_until.load(Ordering::Relaxed)
    }

    fn database_failed(&self, what: &str, e: &str) {
        let now = crate::store::now_ms();
        self.0
            .degraded_until
            .store(now + DEGRADED_MS, Ordering::Relaxed);
        if !self.0.outage_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, what, "limits: the database is unavailable; enforcing with what this server knows");
        }
    }

    fn database_ok(&self) {
        if self.0.outage_logged.swap(false, Ordering::Relaxed) {
            tracing::info!("limits: the database is back; counts are written again");
        }
    }

    fn slot(&self, key: &str) -> Slot {
        if let Some(s) = self.0.states.get(key) {
            return Arc::clone(&s);
        }
        Arc::clone(&self.0.states.entry(key.to_string()).or_default())
    }

    /// Admits a request that must fit every subject's limits, or refuses it.
    pub async fn admit(&self, subjects: &[Subject]) -> Result<Admission, Refusal> {
        self.admit_reserving(subjects, 0).await
    }

    /// [`Limiter::admit`] for a request that reserves `reservation` nanos
    /// against every subject's budgets until it is settled.
    pub async fn admit_reserving(
        &self,
        subjects: &[Subject],
        reservation: i64,
    ) -> Result<Admission, Refusal> {
        let reservation = reservation.max(0);
        let mut list: Vec<(&Subject, Slot)> =
            subjects.iter().map(|s| (s, self.slot(&s.key))).collect();
        if list.is_empty() {
            return Ok(Admission {
                limiter: None,
                held: Vec::new(),
                headers: RateHeaders::default(),
                reservation: 0,
                settled: true,
                figures: None,
            });
        }
        // One lock order for every request: no two requests wait on each other.
        list.sort_by(|a, b| a.0.key.cmp(&b.0.key));
        list.dedup_by(|a, b| a.0.key == b.0.key);

        if self.0.store.is_some() && !self.degraded(crate::store::now_ms()) {
            let cold: Vec<String> = list
                .iter()
                .filter(|(_, s)| !s.lock().loaded)
                .map(|(s, _)| s.key.clone())
                .collect();
            if !cold.is_empty() {
                // Once per caller and server: a restart must not forget the day.
                if let Err(e) = self.sync_keys(&cold, false).await {
                    self.database_failed("reading counts", &e);
                }
            }
        }

        let mut reserved = vec![false; list.len()];
        // Subjects whose reservation found the minute full: refused even if
        // a stale local view would let the request through.
        let mut full = vec![false; list.len()];
        // Subjects whose budget reservation the database decided (true: in).
        let mut in_db: Vec<Option<bool>> = vec![None; list.len()];
        let mut round = 0;
        loop {
            let now = crate::store::now_ms();
            let servers = self.servers();
            // The last round (3) decides on what is known, whatever happens.
            let cluster = round < 3 && servers > 1 && self.0.store.is_some() && !self.degraded(now);
            let cut_off = !cluster && servers > 1 && self.0.store.is_some();
            let mut need_sync: Vec<String> = Vec::new();
            let mut need_reserve: Vec<usize> = Vec::new();
            let mut need_budget_db: Vec<usize> = Vec::new();
            {
                let mut guards: Vec<_> = list.iter().map(|(_, s)| s.lock()).collect();
                let mut worst: Option<(Denial, &Subject)> = None;
                for (i, ((subject, _), g)) in list.iter().zip(guards.iter_mut()).enumerate() {
                    g.prune(now);
                    let limits = &subject.limits;
                    // A reservation larger than the share: the database
                    // decides, on every server's figures at once (the local
                    // view may count a settled request twice, or not yet).
                    let db_decides = cluster
                        && limits.has_budget()
                        && reservation > 0
                        && reservation > budget_share(limits, servers);
                    let budget_denial = match in_db[i] {
                        Some(true) => None,
                        None if db_decides => None,
                        Some(false) => {
                            // The database said no: refuse on its figures.
                            rules::check_budget(limits, g.spend(now), reservation, now)
                                .or(Some(budget_denial(limits, now)))
                        }
                        None => rules::check_budget(limits, g.spend(now), reservation, now)
                            .or_else(|| {
                                cut_off
                                    .then(|| cut_off_budget(limits, g, reservation, servers, now))
                                    .flatten()
                            }),
                    };
                    let denial = rules::check(limits, &g.usage(), now, reserved[i])
                        .or_else(|| {
                            let l = limits.requests_per_minute.filter(|_| full[i])?;
                            let wait_ms = g
                                .requests
                                .minute_wait_ms(i64::try_from(l).unwrap_or(i64::MAX), now)
                                .unwrap_or(rules::BUCKET_MS);
                            Some(Denial {
                                code: rules::RATE_LIMITED,
                                field: "requests_per_minute",
                                limit: l,
                                wait_ms,
                            })
                        })
                        .into_iter()
                        .chain(budget_denial)
                        .max_by_key(|d| (d.wait_ms, d.code == rules::BUDGET_EXHAUSTED));
                    if let Some(d) = denial {
                        let longer = worst.as_ref().is_none_or(|(w, _)| {
                            d.wait_ms > w.wait_ms
                                || (d.wait_ms == w.wait_ms && d.code == rules::BUDGET_EXHAUSTED)
                        });
                        if longer {
                            worst = Some((d, subject));
                        }
                        continue;
                    }
                    if db_decides && in_db[i].is_none() {
                        need_budget_db.push(i);
                    } else if cluster
                        && limits.has_budget()
                        && reservation > 0
                        && in_db[i].is_none()
                        && g.reserve_unsynced() + reservation > budget_share(limits, servers)
                    {
                        need_sync.push(subject.key.clone());
                    }
                    let Some(l) = limits.requests_per_minute.filter(|_| !reserved[i]) else {
                        continue;
                    };
                    if cluster {
                        let q = share(l, servers);
                        if q == 0 {
                            need_reserve.push(i);
                        } else if g.unsynced() >= q {
                            need_sync.push(subject.key.clone());
                        }
                    } else if cut_off {
                        // Cut off from the others: take only this server's
                        // part of what was left, as each of them does.
                        let l = i64::try_from(l).unwrap_or(i64::MAX);
                        let base = g.requests.minute_count(now) - g.unsynced();
                        if g.unsynced() >= (l - base).max(0) / servers {
                            let d = Denial {
                                code: rules::RATE_LIMITED,
                                field: "requests_per_minute",
                                limit: l.unsigned_abs(),
                                wait_ms: rules::BUCKET_MS,
                            };
                            if worst.as_ref().is_none_or(|(w, _)| d.wait_ms > w.wait_ms) {
                                worst = Some((d, subject));
                            }
                        }
                    }
                }
                if let Some((d, subject)) = worst {
                    let mut headers = RateHeaders::default();
                    let mut budget = None;
                    for ((s, _), g) in list.iter().zip(guards.iter()) {
                        headers.add(&s.limits, &g.usage(), now);
                        if let Some(b) = s.limits.budgets() {
                            BudgetQuota::add(&mut budget, &b, g.spend(now), now);
                        }
                    }
                    drop(guards);
                    self.give_back(&list, &reserved, &in_db, reservation, now);
                    let mut r = Refusal::new(&d, subject.whose, headers);
                    r.budget = budget;
                    if let Some(period) = Period::of_field(d.field) {
                        r.message = budget::refusal_message(
                            period,
                            subject.whose,
                            &subject.name,
                            Amount(d.limit),
                            self.0.currency.as_str(),
                        );
                    }
                    return Err(r);
                }
                need_sync.dedup();
                if need_sync.is_empty() && need_reserve.is_empty() && need_budget_db.is_empty() {
                    let mut headers = RateHeaders::default();
                    let mut figure = None;
                    for (i, ((s, _), g)) in list.iter().zip(guards.iter_mut()).enumerate() {
                        if !reserved[i] {
                            g.requests.add_pending(second_of(now), 1);
                            g.admitted += 1;
                        }
                        if in_db[i] != Some(true) {
                            g.reserved += reservation;
                            g.reserve_admitted += reservation;
                        }
                        g.in_flight += 1;
                        g.last_used_ms = now;
                        headers.add(&s.limits, &g.usage(), now);
                        if let Some(b) = s.limits.budgets() {
                            BudgetQuota::add(&mut figure, &b, g.spend(now), now);
                        }
                    }
                    drop(guards);
                    let figures = figure.map(|q| {
                        Arc::new(Figures {
                            admitted: Some(q),
                            settled: Mutex::new(None),
                        })
                    });
                    return Ok(Admission {
                        limiter: Some(self.clone()),
                        held: list
                            .into_iter()
                            .map(|(s, slot)| Held {
                                slot,
                                budgets: s.limits.budgets(),
                            })
                            .collect(),
                        headers,
                        reservation,
                        settled: false,
                        figures,
                    });
                }
            }
            for key in need_sync {
                let Some((subject, slot)) = list.iter().find(|(s, _)| s.key == key) else {
                    continue;
                };
                let _turn = slot.db_turn.lock().await;
                // Another request may have synced while this one waited.
                if !past_share(subject, &slot.lock(), reservation, servers) {
                    continue;
                }
                if let Err(e) = self.sync_keys(std::slice::from_ref(&key), true).await {
                    self.database_failed("settling counts", &e);
                }
            }
            for i in need_reserve {
                let (subject, slot) = &list[i];
                let limit = subject.limits.requests_per_minute.unwrap_or(0);
                match self.reserve_one(&subject.key, slot, limit).await {
                    Ok(ok) => {
                        reserved[i] = ok;
                        full[i] = !ok;
                    }
                    Err(e) => self.database_failed("reserving a request", &e),
                }
            }
            for i in need_budget_db {
                let (subject, slot) = &list[i];
                match self
                    .reserve_budget(&subject.key, slot, &subject.limits, reservation)
                    .await
                {
                    Ok(ok) => in_db[i] = Some(ok),
                    Err(e) => self.database_failed("reserving a budget", &e),
                }
            }
            round += 1;
        }
    }

    /// Undoes the database reservations of a request refused after all: a
    /// pending -1, written with the next sync (until then the others see one
    /// request too many, which can only refuse, never admit, too much); and
    /// budget reservations made in the database, released here (written
    /// with the next sync).
    fn give_back(
        &self,
        list: &[(&Subject, Slot)],
        reserved: &[bool],
        in_db: &[Option<bool>],
        reservation: i64,
        now_ms: i64,
    ) {
        for (((_, slot), r), b) in list.iter().zip(reserved).zip(in_db) {
            let mut s = slot.lock();
            if *r {
                s.requests.add_pending(second_of(now_ms), -1);
            }
            if *b == Some(true) {
                s.reserved -= reservation;
            }
        }
    }

    /// Reserves one request in the database (limits too small to share):
    /// true when it fits, false when the minute is full.
    async fn reserve_one(&self, key: &str, slot: &Slot, limit: u64) -> Result<bool, String> {
        let Some(store) = &self.0.store else {
            return Ok(true);
        };
        let _turn = slot.db_turn.lock().await;
        let now = crate::store::now_ms();
        let sec = second_of(now);
        // The reservation before ours may have found the minute full.
        if slot.lock().requests.minute_count(now) >= i64::try_from(limit).unwrap_or(i64::MAX) {
            return Ok(false);
        }
        let writes = slot.lock().writes;
        let (fits, rows) = db_op(
            tokio::time::timeout(
                HOT_PATH_DB,
                store.limit_reserve(
                    key,
                    sec,
                    (minute_start(now), day_of(now), month_of(now)),
                    i64::try_from(limit).unwrap_or(i64::MAX),
                ),
            )
            .await,
        )?;
        let mut s = slot.lock();
        let refs: Vec<&CounterRow> = rows.iter().collect();
        s.apply_read(&refs, writes, now);
        s.writes += 1;
        if fits {
            s.requests.add_db(sec, 1);
        }
        Ok(fits)
    }

    /// Reserves `reservation` nanos of a caller's budgets in the database
    /// (a reservation larger than the share): one transaction that locks
    /// the caller, adds every server's spend and open reservations, and
    /// writes this server's reservations with this one only if it fits.
    async fn reserve_budget(
        &self,
        key: &str,
        slot: &Slot,
        limits: &Limits,
        reservation: i64,
    ) -> Result<bool, String> {
        let Some(store) = &self.0.store else {
            return Ok(true);
        };
        let _turn = slot.db_turn.lock().await;
        // Settled spend goes in first: the reservations written below no
        // longer hold what it released.
        let one = [(key.to_string(), Arc::clone(slot))];
        self.write_pending(store, &one, true, HOT_PATH_DB).await?;
        let now = crate::store::now_ms();
        let (writes, unwritten_day, unwritten_month, mine) = {
            let s = slot.lock();
            (
                s.writes,
                s.spend_day.unwritten_from(day_of(now)),
                s.spend_month.unwritten_from(month_of(now)),
                s.reserved,
            )
        };
        // What the others see of this server: its reservations, this one,
        // and what it settled since its last write (a request that ended
        // meanwhile released its reservation, and its cost is not written
        // yet).
        let mine_after = mine + reservation + unwritten_day.max(unwritten_month);
        let limits = *limits;
        let decide = move |day: i64, month: i64, elsewhere: i64| {
            let spend = Spend {
                day: day + unwritten_day,
                month: month + unwritten_month,
                reserved: elsewhere + mine,
            };
            rules::check_budget(&limits, spend, reservation, now).is_none()
        };
        let (fits, rows, elsewhere) = db_op(
            tokio::time::timeout(
                HOT_PATH_DB,
                store.limit_reserve_budget(
                    crate::store::limits::BudgetReservation {
                        subject: key,
                        reserved_subject: &reserved_key(key),
                        server_id: &self.0.server_id,
                        windows: (minute_start(now), day_of(now), month_of(now)),
                        alive_since: now - ALIVE_MS,
                        now,
                        mine_after,
                    },
                    decide,
                ),
            )
            .await,
        )?;
        let mut s = slot.lock();
        let refs: Vec<&CounterRow> = rows.iter().collect();
        s.apply_read(&refs, writes, now);
        s.writes += 1;
        s.reserved_elsewhere = elsewhere;
        if fits {
            s.reserved += reservation;
            s.reserved_written = mine_after;
        }
        Ok(fits)
    }

    /// Writes the pending counts of `keys` and reads back every server's
    /// (with several servers, also this server's open reservations and the
    /// others').
    ///
    /// `turns_held`: the caller holds every key's turn, so this server's
    /// open reservations may be written too (else a reservation made in
    /// the database meanwhile could be overwritten by an older figure).
    async fn sync_keys(&self, keys: &[String], turns_held: bool) -> Result<(), String> {
        let Some(store) = &self.0.store else {
            return Ok(());
        };
        let slots: Vec<(String, Slot)> = keys.iter().map(|k| (k.clone(), self.slot(k))).collect();
        let now = crate::store::now_ms();
        let marks: Vec<(i64, i64)> = slots
            .iter()
            .map(|(_, s)| {
                let s = s.lock();
                (s.admitted, s.reserve_admitted)
            })
            .collect();
        let cluster = self.servers() > 1;
        self.write_pending(store, &slots, cluster && turns_held, HOT_PATH_DB)
            .await?;
        let reserved_keys: Vec<String> = keys.iter().map(|k| reserved_key(k)).collect();
        let writes: Vec<u64> = slots.iter().map(|(_, s)| s.lock().writes).collect();
        let rows = db_op(
            tokio::time::timeout(
                HOT_PATH_DB,
                store.limit_counters_of(keys, minute_start(now), day_of(now), month_of(now)),
            )
            .await,
        )?;
        let elsewhere = if cluster {
            db_op(
                tokio::time::timeout(
                    HOT_PATH_DB,
                    store.limit_in_flight_elsewhere(
                        &self.0.server_id,
                        &reserved_keys,
                        now - ALIVE_MS,
                    ),
                )
                .await,
            )?
        } else {
            Vec::new()
        };
        for ((((key, slot), w), mark), rkey) in
            slots.iter().zip(writes).zip(marks).zip(&reserved_keys)
        {
            let mine: Vec<&CounterRow> = rows.iter().filter(|r| &r.subject == key).collect();
            let mut s = slot.lock();
            s.apply_read(&mine, w, now);
            s.synced_up_to(mark.0);
            if cluster {
                s.reserved_elsewhere = elsewhere
                    .iter()
                    .find(|(k, _)| k == rkey)
                    .map_or(0, |(_, n)| *n);
            }
            s.reserve_synced_mark = s.reserve_synced_mark.max(mark.1);
        }
        Ok(())
    }

    /// Writes the pending counts of `slots` in one transaction.
    /// With `reservations`, also writes each of those slots' open
    /// reservations (read under the same lock as its pending spend, in the
    /// same transaction): the others never see a settled request's cost
    /// and its reservation at once, nor neither. The caller holds those
    /// slots' turns.
    async fn write_pending(
        &self,
        store: &Store,
        slots: &[(String, Slot)],
        reservations: bool,
        limit: Duration,
    ) -> Result<(), String> {
        let mut items: Vec<(usize, &'static str, i64, i64)> = Vec::new();
        let mut reserved_rows: Vec<(String, i64)> = Vec::new();
        // Spend for a month is written under the month's index ('sm').
        for (i, (key, slot)) in slots.iter().enumerate() {
            let mut s = slot.lock();
            if reservations {
                reserved_rows.push((reserved_key(key), s.reserved));
            }
            for (metric, taken) in [
                ("r", s.requests.take_pending()),
                ("t", s.tokens.take_pending()),
                ("d", s.days.take_pending()),
                ("sd", s.spend_day.take_pending()),
                ("sm", s.spend_month.take_pending()),
            ] {
                items.extend(taken.into_iter().map(|(win, n)| (i, metric, win, n)));
            }
        }
        if items.is_empty() && reserved_rows.is_empty() {
            return Ok(());
        }
        let rows: Vec<(&str, &str, i64, i64)> = items
            .iter()
            .map(|(i, m, w, n)| (slots[*i].0.as_str(), *m, *w, *n))
            .collect();
        let now = crate::store::now_ms();
        let result = db_op(
            tokio::time::timeout(
                limit,
                store.limit_add_many(&rows, &self.0.server_id, &reserved_rows, now),
            )
            .await,
        );
        let totals = result.as_ref().ok();
        if totals.is_some() {
            for ((_, slot), (_, n)) in slots.iter().zip(&reserved_rows) {
                slot.lock().reserved_written = *n;
            }
        }
        for (j, (i, metric, win, n)) in items.iter().enumerate() {
            let mut s = slots[*i].1.lock();
            let series = match *metric {
                "r" => &mut s.requests,
                "t" => &mut s.tokens,
                "sd" => &mut s.spend_day,
                "sm" => &mut s.spend_month,
                _ => &mut s.days,
            };
            match totals.and_then(|t| t.get(j)) {
                Some(total) => series.pushed(*win, *n, *total),
                None => series.push_failed(*win, *n),
            }
            if totals.is_some() {
                s.writes += 1;
            }
        }
        result.map(|_| ())
    }

    /// One background round: heartbeat, write counts, read the others'.
    pub async fn sync_once(&self) -> Result<(), String> {
        let Some(store) = self.0.store.clone() else {
            return Ok(());
        };
        let now = crate::store::now_ms();
        let round = self.0.syncs.fetch_add(1, Ordering::Relaxed);
        if round < EAGER_ROUNDS || round.is_multiple_of(HEARTBEAT_MS as u64 / SYNC_MS) {
            let n = db_op(
                tokio::time::timeout(
                    Duration::from_secs(2),
                    store.limit_heartbeat(&self.0.server_id, now, now - ALIVE_MS),
                )
                .await,
            )?;
            self.0.servers.store(n.max(1), Ordering::Relaxed);
        }
        let cluster = self.servers() > 1;
        let mut dirty = Vec::new();
        // (key, slot, writes, admitted) taken before anything is written, so
        // a sync never claims admissions it did not write.
        let mut active: Vec<(String, Slot, u64, i64, i64)> = Vec::new();
        let mut in_flight_rows = Vec::new();
        let mut reserve_rows: Vec<(String, Slot)> = Vec::new();
        let refresh_in_flight = round.is_multiple_of(HEARTBEAT_MS as u64 / SYNC_MS);
        let mut idle = Vec::new();
        for e in self.0.states.iter() {
            let mut s = e.value().lock();
            s.prune(now);
            if !s.idle() {
                dirty.push(e.key().clone());
            }
            if now - s.last_used_ms < 65_000 || s.in_flight > 0 {
                active.push((
                    e.key().clone(),
                    Arc::clone(e.value()),
                    s.writes,
                    s.admitted,
                    s.reserve_admitted,
                ));
            } else if s.idle() && now - s.last_used_ms > IDLE_MS {
                idle.push(e.key().clone());
            }
            if s.in_flight != s.in_flight_written || (s.in_flight > 0 && refresh_in_flight) {
                in_flight_rows.push((e.key().clone(), s.in_flight));
            }
            // Open reservations beside: kept fresh while any are open, so a
            // killed server's are dropped after ALIVE_MS.
            if s.reserved != s.reserved_written || (s.reserved > 0 && refresh_in_flight) {
                reserve_rows.push((e.key().clone(), Arc::clone(e.value())));
            }
        }
        for key in idle {
            // Forgotten callers are read again on their next request.
            self.0
                .states
                .remove_if(&key, |_, s| s.lock().idle() && Arc::strong_count(s) == 1);
        }
        let dirty: Vec<(String, Slot)> = dirty
            .into_iter()
            .map(|k| {
                let slot = self.slot(&k);
                (k, slot)
            })
            .collect();
        if cluster {
            // Counts and reservations are written together, each caller
            // with its turn held: a reservation made in the database is
            // never overwritten by an older figure, and nothing is in
            // transit while one is decided (a busy caller waits a round).
            let mut both: Vec<(String, Slot)> = dirty;
            for (k, slot) in reserve_rows {
                if !both.iter().any(|(d, _)| *d == k) {
                    both.push((k, slot));
                }
            }
            let turns: Vec<_> = both
                .iter()
                .filter_map(|(k, slot)| {
                    let turn = slot.db_turn.try_lock().ok()?;
                    Some(((k.clone(), Arc::clone(slot)), turn))
                })
                .collect();
            let (mine, held): (Vec<_>, Vec<_>) = turns.into_iter().unzip();
            self.write_pending(&store, &mine, true, BACKGROUND_DB)
                .await?;
            drop(held);
        } else {
            self.write_pending(&store, &dirty, false, BACKGROUND_DB)
                .await?;
        }
        let active_keys: Vec<String> = active.iter().map(|a| a.0.clone()).collect();
        if cluster && !active.is_empty() {
            let rows = store
                .limit_counters_of(&active_keys, minute_start(now), day_of(now), month_of(now))
                .await
                .map_err(|e| e.to_string())?;
            for (key, slot, w, mark, _) in &active {
                let mine: Vec<&CounterRow> = rows.iter().filter(|r| &r.subject == key).collect();
                let mut s = slot.lock();
                s.apply_read(&mine, *w, now);
                s.synced_up_to(*mark);
            }
        } else {
            // Alone: nothing to learn from the database; the share rule is moot.
            for (_, slot, _, mark, reserve_mark) in &active {
                let mut s = slot.lock();
                s.synced_up_to(*mark);
                s.reserve_synced_mark = s.reserve_synced_mark.max(*reserve_mark);
            }
        }
        // Alone, nobody reads what runs here: written once there are others.
        if cluster {
            if !in_flight_rows.is_empty() {
                store
                    .limit_put_in_flight(&self.0.server_id, &in_flight_rows, now)
                    .await
                    .map_err(|e| e.to_string())?;
                for (key, n) in &in_flight_rows {
                    self.slot(key).lock().in_flight_written = *n;
                }
            }
            // The others now see what this server reserved.
            for (_, slot, _, _, reserve_mark) in &active {
                let mut s = slot.lock();
                s.reserve_synced_mark = s.reserve_synced_mark.max(*reserve_mark);
            }
            if !active.is_empty() {
                let mut keys = active_keys.clone();
                keys.extend(active_keys.iter().map(|k| reserved_key(k)));
                let elsewhere = store
                    .limit_in_flight_elsewhere(&self.0.server_id, &keys, now - ALIVE_MS)
                    .await
                    .map_err(|e| e.to_string())?;
                for (key, slot, _, _, _) in &active {
                    let rkey = reserved_key(key);
                    let find = |want: &str| {
                        elsewhere
                            .iter()
                            .find(|(k, _)| k == want)
                            .map_or(0, |(_, n)| *n)
                    };
                    let mut s = slot.lock();
                    s.in_flight_elsewhere = find(key);
                    s.reserved_elsewhere = find(&rkey);
                }
            }
        } else {
            for (_, slot, _, _, _) in &active {
                let mut s = slot.lock();
                s.in_flight_elsewhere = 0;
                s.reserved_elsewhere = 0;
            }
        }
        if round.is_multiple_of(300) {
            let sec = second_of(now);
            store
                .limit_cleanup(
                    sec - 2 * rules::MINUTE_BUCKETS,
                    day_of(now) - 2,
                    month_of(now) - 2,
                    now - 60_000,
                )
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Says this server is alive before it serves, so the others share at once.
    pub async fn announce(&self) -> Result<(), sqlx::Error> {
        if let Some(store) = &self.0.store {
            let now = crate::store::now_ms();
            let n = store
                .limit_heartbeat(&self.0.server_id, now, now - ALIVE_MS)
                .await?;
            self.0.servers.store(n.max(1), Ordering::Relaxed);
        }
        Ok(())
    }

    /// The background task: settles counts every 200 ms until aborted.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(SYNC_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match this.sync_once().await {
                    Ok(()) => this.database_ok(),
                    Err(e) => this.database_failed("settling counts", &e),
                }
            }
        })
    }

    /// At a clean stop: writes what is pending and leaves the cluster.
    pub async fn flush(&self) {
        let Some(store) = self.0.store.clone() else {
            return;
        };
        let all: Vec<(String, Slot)> = self
            .0
            .states
            .iter()
            .map(|e| (e.key().clone(), Arc::clone(e.value())))
            .collect();
        if let Err(e) = self.write_pending(&store, &all, true, BACKGROUND_DB).await {
            tracing::warn!(error = %e, "limits: counts not written at stop");
        }
        if let Err(e) = store.limit_server_gone(&self.0.server_id).await {
            tracing::warn!(error = %e, "limits: could not leave the cluster cleanly");
        }
    }

    /// Closes the database pool (tests of a server cut off from it).
    pub async fn close_store_for_tests(&self) {
        if let Some(store) = &self.0.store {
            store.pool.close().await;
        }
    }

    /// What `key`'s caller uses now, as fresh as the database allows.
    pub async fn used(&self, key: &str) -> Used {
        let now = crate::store::now_ms();
        if self.0.store.is_some() && !self.degraded(now) {
            if let Err(e) = self.sync_keys(&[key.to_string()], false).await {
                self.database_failed("reading counts", &e);
            }
        }
        let slot = self.slot(key);
        let mut s = slot.lock();
        s.prune(now);
        let spend = s.spend(now);
        Used {
            requests_this_minute: s.requests.minute_count(now),
            tokens_this_minute: s.tokens.minute_count(now),
            tokens_today: s.days.total_from(day_of(now)),
            in_flight: s.in_flight + s.in_flight_elsewhere,
            spend_today: spend.day,
            spend_this_month: spend.month,
            reserved: spend.reserved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(l: Limits) -> Subject {
        Subject::api_key("k1", l)
    }

    /// Contract, "Budgets", "Database down": each server admits at most its
    /// `1/n` share of the remaining budget it knows.
    #[test]
    fn cut_off_from_the_database_a_server_admits_its_nth_of_the_budget_left() {
        let now = 1_800_000_000_000;
        let limits = Limits {
            budget_per_day: Some(crate::spend::Amount::units(9)),
            ..Limits::default()
        };
        let unit = 1_000_000_000;
        let mut s = State::default();
        // Nothing spent, three servers: three units each.
        assert!(cut_off_budget(&limits, &s, 3 * unit, 3, now).is_none());
        let d = cut_off_budget(&limits, &s, 3 * unit + 1, 3, now).expect("past the share");
        assert_eq!(
            (d.code, d.field),
            (rules::BUDGET_EXHAUSTED, "budget_per_day")
        );
        // Two units admitted here since the last sync: one more fits.
        s.reserved = 2 * unit;
        s.reserve_admitted = 2 * unit;
        assert!(cut_off_budget(&limits, &s, unit, 3, now).is_none());
        assert!(cut_off_budget(&limits, &s, unit + 1, 3, now).is_some());
        // Three units already spent (as of the last sync): a third of the six left.
        let mut s = State::default();
        s.spend_day.set_db(rules::day_of(now), 3 * unit);
        assert!(cut_off_budget(&limits, &s, 2 * unit, 3, now).is_none());
        assert!(cut_off_budget(&limits, &s, 2 * unit + 1, 3, now).is_some());
        // No budget: nothing to refuse.
        assert!(cut_off_budget(&Limits::default(), &State::default(), unit, 3, now).is_none());
    }

    #[test]
    fn the_share_is_a_tenth_of_the_limit_split_between_servers() {
        assert_eq!(share(100, 1), 10);
        assert_eq!(share(100, 3), 3);
        assert_eq!(share(29, 3), 0);
        assert_eq!(share(30, 3), 1);
        assert!(share(u64::MAX, 1) > 0);
    }

    #[tokio::test]
    async fn requests_per_minute_admits_up_to_the_limit_and_refuses_the_next() {
        let l = Limiter::new(None);
        let s = [key(Limits {
            requests_per_minute: Some(3),
            ..Limits::default()
        })];
        for i in 0..3 {
            let a = l.admit(&s).await.expect("under the limit");
            let q = a.headers.requests.expect("requests headers");
            assert_eq!((q.limit, q.remaining), (3, 2 - i));
        }
        let r = l.admit(&s).await.err().expect("over the limit");
        assert_eq!(r.code, "rate_limited");
        assert!((60..=61).contains(&r.retry_after), "{}", r.retry_after);
        assert_eq!(r.headers.requests.expect("headers").remaining, 0);
    }

    #[tokio::test]
    async fn refused_requests_are_not_counted() {
        let l = Limiter::new(None);
        let s = [key(Limits {
            requests_per_minute: Some(1),
            ..Limits::default()
        })];
        drop(l.admit(&s).await.expect("first"));
        for _ in 0..5 {
            assert!(l.admit(&s).await.is_err());
        }
        assert_eq!(l.used("k:k1").await.requests_this_minute, 1);
    }

    #[tokio::test]
    async fn tokens_are_counted_when_a_request_ends_and_refuse_the_next_at_the_limit() {
        let l = Limiter::new(None);
        let s = [key(Limits {
            tokens_per_minute: Some(100),
            ..Limits::default()
        })];
        let mut a = l.admit(&s).await.expect("nothing used");
        // Running requests are admitted: tokens count when they end.
        let mut b = l.admit(&s).await.expect("still nothing counted");
        a.finish(60);
        b.finish(39);
        drop((a, b));
        let mut c = l.admit(&s).await.expect("99 of 100: below the limit");
        assert_eq!(c.headers.tokens.expect("token headers").remaining, 1);
        c.finish(1);
        drop(c);
        let r = l.admit(&s).await.err().expect("at the limit");
        assert_eq!((r.code, r.field), ("rate_limited", "tokens_per_minute"));
        let used = l.used("k:k1").await;
        assert_eq!((used.tokens_this_minute, used.tokens_today), (100, 100));
    }

    #[tokio::test]
    async fn the_day_budget_refuses_with_budget_exhausted() {
        let l = Limiter::new(None);
        let s = [key(Limits {
            tokens_per_day: Some(50),
            ..Limits::default()
        })];
        let mut a = l.admit(&s).await.expect("fresh");
        a.finish(49);
        drop(a);
        let mut a = l.admit(&s).await.expect("49 of 50");
        a.finish(1);
        drop(a);
        let r = l.admit(&s).await.err().expect("budget used up");
        assert_eq!(r.code, "budget_exhausted");
        assert!(r.retry_after >= 1 && r.retry_after <= 86_400);
        assert_eq!(r.headers.tokens.expect("day quota").remaining, 0);
    }

    #[tokio::test]
    async fn max_parallel_holds_a_place_until_the_admission_is_dropped() {
        let l = Limiter::new(None);
        let s = [key(Limits {
            max_parallel: Some(2),
            ..Limits::default()
        })];
        let a = l.admit(&s).await.expect("one running");
        let b = l.admit(&s).await.expect("two running");
        let r = l.admit(&s).await.err().expect("a third is refused");
        assert_eq!(
            (r.code, r.field, r.retry_after),
            ("rate_limited", "max_parallel", 1)
        );
        assert_eq!(l.used("k:k1").await.in_flight, 2);
        drop(a);
        let c = l.admit(&s).await.expect("a place was freed");
        drop((b, c));
        assert_eq!(l.used("k:k1").await.in_flight, 0);
    }

    #[tokio::test]
    async fn an_ended_request_frees_its_place_and_its_probe_shows_the_cost_settled() {
        let l = Limiter::new(None);
        let unit = 1_000_000_000;
        let k = key(Limits {
            max_parallel: Some(1),
            budget_per_day: Some(crate::spend::Amount::units(10)),
            ..Limits::default()
        });
        // The user has no budget: the figures are the key's alone.
        let s = [k, Subject::user("u", Limits::default())];
        let a = l.admit_reserving(&s, 3 * unit).await.expect("fresh");
        let probe = a.budget_probe();
        // At admission, the reservation is counted; not settled yet, the
        // plain figure is the same.
        assert_eq!(probe.admitted().map(|q| q.remaining), Some(7 * unit));
        assert_eq!(probe.quota(), probe.admitted());
        assert!(l.admit(&s).await.is_err(), "its place is held");
        a.end(100, 2 * unit);
        // Settled: the cost counted, the reservation released, the place free.
        assert_eq!(probe.quota().map(|q| q.remaining), Some(8 * unit));
        assert_eq!(probe.admitted().map(|q| q.remaining), Some(7 * unit));
        let used = l.used("k:k1").await;
        assert_eq!(
            (
                used.in_flight,
                used.reserved,
                used.spend_today,
                used.tokens_today
            ),
            (0, 0, 2 * unit, 100)
        );
        drop(l.admit(&s).await.expect("the place was freed"));
        // No budget: no figures.
        let a = l.admit(&s[1..]).await.expect("no limits");
        assert_eq!(
            (a.budget_probe().admitted(), a.budget_probe().quota()),
            (None, None)
        );
    }

    #[tokio::test]
    async fn every_subject_must_fit_and_a_refusal_counts_against_none() {
        let l = Limiter::new(None);
        let k = Subject::api_key(
            "k",
            Limits {
                requests_per_minute: Some(10),
                ..Limits::default()
            },
        );
        let u = Subject::user(
            "u",
            Limits {
                requests_per_minute: Some(2),
                ..Limits::default()
            },
        );
        let a = Subject::agent(
            "bot",
            Limits {
                max_parallel: Some(5),
                ..Limits::default()
            },
        );
        let subjects = [k.clone(), u.clone(), a.clone()];
        for _ in 0..2 {
            let adm = l.admit(&subjects).await.expect("fits all");
            assert_eq!(adm.headers.requests.expect("headers").limit, 2);
        }
        let r = l.admit(&subjects).await.err().expect("the user is full");
        assert!(r.message.contains("user"), "{}", r.message);
        // The key's own count did not move for the refused request.
        assert_eq!(l.used("k:k").await.requests_this_minute, 2);
        // Another user on the same key still gets in.
        let other = Subject::user("u2", Limits::default());
        assert!(l.admit(&[k, other, a]).await.is_ok());
    }

    #[tokio::test]
    async fn callers_without_limits_are_counted_but_never_refused() {
        let l = Limiter::new(None);
        let s = [key(Limits::default())];
        for _ in 0..100 {
            let a = l.admit(&s).await.expect("no limit");
            assert!(a.headers.is_empty());
        }
        assert_eq!(l.used("k:k1").await.requests_this_minute, 100);
    }

    #[tokio::test]
    async fn a_closed_caller_is_refused() {
        let l = Limiter::new(None);
        assert!(l.admit(&[key(Limits::closed())]).await.is_err());
    }
}
