//! Usage accounting off the request path: a bounded queue to one writer that
//! batches inserts. A full queue or a failed write is counted (and shown in
//! /metrics), never silently lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;
use tokio::sync::mpsc;

use crate::store::Store;

#[derive(Clone, Debug, Default)]
pub struct UsageRecord {
    pub at: i64,
    pub user_id: Option<String>,
    pub api_key_id: Option<String>,
    pub agent: Option<String>,
    pub device_id: Option<String>,
    pub model: String,
    /// The provider that answered (None when none did).
    pub provider: Option<String>,
    pub kind: &'static str,
    /// The inbound dialect of a chat request (`chat` or `messages`).
    pub api: Option<&'static str>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub latency_ms: i64,
    pub status: u16,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
    /// The answer's `x-request-id`.
    pub request_id: Option<String>,
    /// The model name the answering provider was sent.
    pub upstream_model: Option<String>,
    /// The cost, fixed now and never recomputed (docs/spend.md).
    pub cost: crate::spend::Cost,
}

#[derive(Default)]
pub struct UsageCounters {
    pub written: AtomicU64,
    /// Records refused because the queue was full.
    pub dropped: AtomicU64,
    /// Records lost because the database refused the batch.
    pub failed: AtomicU64,
    /// Cost and unpriced requests by model and provider, counted by the
    /// writer (off the request path).
    pub spend: crate::spend::metrics::SpendCounters,
}

#[derive(Clone)]
pub struct UsageSink {
    tx: mpsc::Sender<UsageRecord>,
    pub counters: Arc<UsageCounters>,
    /// The prices each request is costed with (a snapshot at its start).
    pub prices: Arc<crate::spend::Prices>,
}

impl UsageSink {
    pub fn record(&self, r: UsageRecord) {
        if self.tx.try_send(r).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Who made a request, for its usage record.
#[derive(Clone, Debug, Default)]
pub struct UsageContext {
    pub user_id: Option<String>,
    pub api_key_id: Option<String>,
    pub agent: Option<String>,
    pub device_id: Option<String>,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
    /// The inbound dialect (`messages`); chat requests default to `chat`.
    pub api: Option<&'static str>,
    /// Told the request's tokens when it ends (the limits count them).
    pub on_end: EndHook,
}

type EndFn = Box<dyn FnOnce(Tokens, i64) + Send>;

/// Runs once, with the request's tokens and cost (nanos; 0 when unpriced), when the ticket that carries it
/// finishes (or is dropped: then with none). Clones share the one call, so
/// a ticket handed over to the relay still calls it exactly once.
#[derive(Clone, Default)]
pub struct EndHook(Option<Arc<parking_lot::Mutex<Option<EndFn>>>>);

impl EndHook {
    pub fn new(f: impl FnOnce(Tokens, i64) + Send + 'static) -> EndHook {
        EndHook(Some(Arc::new(parking_lot::Mutex::new(Some(Box::new(f))))))
    }

    /// Calls the hook (the first call only). A ticket calls it when it
    /// finishes; public for the `spend` benchmark, which has no ticket.
    pub fn fire(&self, tokens: Tokens, cost_nanos: i64) {
        let f = self.0.as_ref().and_then(|m| m.lock().take());
        if let Some(f) = f {
            f(tokens, cost_nanos);
        }
    }
}

impl std::fmt::Debug for EndHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "EndHook(set)"
        } else {
            "EndHook(none)"
        })
    }
}

/// Token counts of one request. `prompt` includes the cached tokens
/// (contract, "Usage, one convention"); the cache figures are kept apart too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    pub prompt: i64,
    pub completion: i64,
    /// Prompt tokens read from the upstream's cache.
    pub cache_read: i64,
    /// Prompt tokens written to the upstream's cache.
    pub cache_write: i64,
    /// Completion tokens spent reasoning (included in `completion`).
    pub reasoning: i64,
    /// Some figures are the gateway's estimate, not the upstream's usage.
    pub estimated: bool,
}

impl Tokens {
    /// The gateway's estimate for an answer without usage.
    pub fn estimate(prompt: i64, completion: i64) -> Tokens {
        Tokens {
            prompt,
            completion,
            estimated: true,
            ..Tokens::default()
        }
    }

    /// The figures as spend prices them; a negative figure counts as 0.
    pub fn normalised(&self) -> crate::spend::cost::Usage {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        crate::spend::cost::Usage {
            prompt: n(self.prompt),
            completion: n(self.completion),
            cache_read: n(self.cache_read),
            cache_write: n(self.cache_write),
            reasoning: n(self.reasoning),
        }
    }
}

/// Token estimate for text whose upstream reports no usage: one token per
/// four characters, rounded up (the usual rule of thumb for BPE tokenizers
/// on English text).
pub fn estimate_tokens(chars: usize) -> i64 {
    i64::try_from(chars.div_ceil(4)).unwrap_or(i64::MAX)
}

/// Status recorded for a request whose client went away before the answer
/// was complete (nginx's convention).
pub const CLIENT_CLOSED: u16 = 499;

/// The longest model name kept in a usage record (clients may send anything).
const MAX_MODEL_CHARS: usize = 256;

/// One request's usage record in the making. `finish` queues it; dropped
/// unfinished (the client went away and the handler or stream was dropped)
/// it is queued with status [`CLIENT_CLOSED`], so every request is counted
/// exactly once. `hand_over` gives the request to another ticket.
pub struct UsageTicket {
    sink: UsageSink,
    record: Option<UsageRecord>,
    started: Instant,
    on_end: EndHook,
    /// The prices current when the request was admitted.
    prices: Arc<crate::spend::PriceBook>,
}

impl UsageTicket {
    pub fn new(sink: &UsageSink, ctx: UsageContext, kind: &'static str) -> UsageTicket {
        UsageTicket {
            sink: sink.clone(),
            record: Some(UsageRecord {
                user_id: ctx.user_id,
                api_key_id: ctx.api_key_id,
                agent: ctx.agent,
                device_id: ctx.device_id,
                conversation_id: ctx.conversation_id,
                turn_id: ctx.turn_id,
                kind,
                api: ctx.api.or((kind == "chat").then_some("chat")),
                request_id: crate::runtime::request::REQUEST_ID
                    .try_with(|id| id.to_str().ok().map(str::to_string))
                    .ok()
                    .flatten(),
                ..UsageRecord::default()
            }),
            started: Instant::now(),
            on_end: ctx.on_end,
            prices: sink.prices.book(),
        }
    }

    /// The upstream model the answering provider was sent (with
    /// [`UsageTicket::set_provider`]: the pair that prices the request).
    pub fn set_upstream_model(&mut self, upstream_model: &str) {
        if let Some(r) = self.record.as_mut() {
            let m = r.upstream_model.get_or_insert_with(String::new);
            m.clear();
            m.push_str(upstream_model);
        }
    }

    /// What the request costs with these tokens (the answering pair's price
    /// of its admission), without finishing it: a stream's usage chunk
    /// carries it before the stream ends.
    pub fn cost_of(&self, tokens: &Tokens) -> crate::spend::Cost {
        let answered = self.record.as_ref().and_then(|r| {
            Some((
                r.provider.as_deref()?,
                r.upstream_model.as_deref().unwrap_or(""),
            ))
        });
        crate::spend::cost::price(
            &self.prices,
            answered,
            tokens.normalised(),
            tokens.estimated,
        )
    }

    /// The prices current when the request was admitted (what prices it).
    pub fn prices(&self) -> &crate::spend::PriceBook {
        &self.prices
    }

    /// The currency costs are in.
    pub fn currency(&self) -> crate::spend::Currency {
        self.sink.prices.currency
    }

    /// Sets what to tell the request's tokens when it ends.
    pub fn set_on_end(&mut self, hook: EndHook) {
        self.on_end = hook;
    }

    /// The model the request named (the alias as the client sent it).
    pub fn set_model(&mut self, model: &str) {
        if let Some(r) = self.record.as_mut() {
            // Cut at a character boundary; one allocation, not one per growth.
            let end = model
                .char_indices()
                .nth(MAX_MODEL_CHARS)
                .map_or(model.len(), |(i, _)| i);
            // Set again by each attempt: the buffer is reused.
            r.model.clear();
            r.model.push_str(&model[..end]);
        }
    }

    /// The conversation and turn, when the route learns them from the body
    /// (the AG-UI endpoint's `threadId` and `runId`).
    pub fn set_turn(&mut self, conversation_id: Option<&str>, turn_id: Option<&str>) {
        if let Some(r) = self.record.as_mut() {
            if r.conversation_id.as_deref() != conversation_id {
                r.conversation_id = conversation_id.map(str::to_string);
            }
            if r.turn_id.as_deref() != turn_id {
                r.turn_id = turn_id.map(str::to_string);
            }
        }
    }

    /// The provider that answered.
    pub fn set_provider(&mut self, provider: &str) {
        if let Some(r) = self.record.as_mut() {
            let p = r.provider.get_or_insert_with(String::new);
            p.clear();
            p.push_str(provider);
        }
    }

    pub fn clear_provider(&mut self) {
        if let Some(r) = self.record.as_mut() {
            r.provider = None;
            r.upstream_model = None;
        }
    }

    /// Records the request (once; later calls do nothing).
    pub fn finish(&mut self, status: u16, tokens: Tokens) {
        self.finish_priced(status, tokens);
    }

    /// [`UsageTicket::finish`], returning the request's cost (status `none`
    /// when it was recorded already).
    pub fn finish_priced(&mut self, status: u16, tokens: Tokens) -> crate::spend::Cost {
        let cost = self.cost_of(&tokens);
        if let Some(mut r) = self.record.take() {
            r.cost = cost.clone();
            r.reasoning_tokens = tokens.reasoning;
            r.at = crate::store::now_ms();
            r.status = status;
            r.prompt_tokens = tokens.prompt;
            r.completion_tokens = tokens.completion;
            r.cache_read_tokens = tokens.cache_read;
            r.cache_write_tokens = tokens.cache_write;
            r.latency_ms = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
            self.sink.record(r);
            self.on_end.fire(tokens, cost.nanos.unwrap_or(0));
            return cost;
        }
        crate::spend::Cost::default()
    }

    /// Forget the request without recording it (another ticket records it).
    /// Hands the request over to the ticket another part makes from the
    /// returned context (who made it, and what to tell its tokens): this one
    /// records nothing.
    pub fn hand_over(&mut self) -> UsageContext {
        let on_end = std::mem::take(&mut self.on_end);
        match self.record.take() {
            Some(r) => UsageContext {
                user_id: r.user_id,
                api_key_id: r.api_key_id,
                agent: r.agent,
                device_id: r.device_id,
                conversation_id: r.conversation_id,
                turn_id: r.turn_id,
                api: r.api,
                on_end,
            },
            None => UsageContext {
                on_end,
                ..UsageContext::default()
            },
        }
    }

    pub fn is_finished(&self) -> bool {
        self.record.is_none()
    }
}

impl Drop for UsageTicket {
    fn drop(&mut self) {
        if self.record.is_some() {
            self.finish(CLIENT_CLOSED, Tokens::default());
        }
    }
}

/// The most records one transaction writes.
const BATCH: usize = 512;

/// Rows per `INSERT` statement, largest first (24 parameters a row: within
/// SQLite's and PostgreSQL's limits on bound parameters). Only these shapes
/// are ever prepared: each connection caches its prepared statements, and one
/// shape per batch length (1 to 64 rows, on each of eight connections) kept
/// several MiB of SQLite programs resident.
const INSERT_SHAPES: [usize; 4] = [64, 16, 4, 1];

/// How a batch of `n` records is cut into statements: as many of the
/// largest shape as fit, then the next, so every statement has one of
/// [`INSERT_SHAPES`]' lengths.
fn statement_lengths(mut n: usize) -> impl Iterator<Item = usize> {
    let mut shape = 0;
    std::iter::from_fn(move || {
        while shape < INSERT_SHAPES.len() && INSERT_SHAPES[shape] > n {
            shape += 1;
        }
        let len = *INSERT_SHAPES.get(shape)?;
        n -= len;
        Some(len)
    })
}

/// The writer task (`store::batch`); `finish` writes what is queued and ends it.
pub type UsageWriter = crate::store::batch::BatchWriter;

/// The usage records' side of the batch writer: a batch is costed into the
/// spend counters once, then inserted.
struct UsageTarget {
    store: Store,
    counters: Arc<UsageCounters>,
}

impl crate::store::batch::BatchTarget for UsageTarget {
    type Record = UsageRecord;
    const WHAT: &'static str = "usage";
    const BATCH: usize = BATCH;
    fn taken(&self, batch: &[UsageRecord]) {
        self.counters.spend.count(
            batch
                .iter()
                .map(|r| (r.model.as_str(), r.provider.as_deref(), &r.cost)),
        );
    }
    fn write<'a>(
        &'a self,
        batch: &'a [UsageRecord],
    ) -> futures_util::future::BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(write_batch(&self.store, batch))
    }
    fn written(&self, n: u64) {
        self.counters.written.fetch_add(n, Ordering::Relaxed);
    }
    fn failed(&self, n: u64) {
        self.counters.failed.fetch_add(n, Ordering::Relaxed);
    }
}

/// Starts the writer; it ends when every sink is dropped or when told to
/// finish, after writing what is queued.
pub fn start(
    store: Store,
    capacity: usize,
    prices: Arc<crate::spend::Prices>,
) -> (UsageSink, UsageWriter) {
    let counters = Arc::new(UsageCounters::default());
    let target = UsageTarget {
        store,
        counters: Arc::clone(&counters),
    };
    let (tx, writer) = crate::store::batch::start(target, capacity, crate::store::batch::LINGER);
    (
        UsageSink {
            tx,
            counters,
            prices,
        },
        writer,
    )
}

pub use crate::store::is_unavailable;

async fn write_batch(store: &Store, batch: &[UsageRecord]) -> Result<(), sqlx::Error> {
    let mut tx = store.pool.begin().await?;
    let mut rest = batch;
    for len in statement_lengths(batch.len()) {
        let (rows, after) = rest.split_at(len);
        rest = after;
        let sql = insert_sql(rows.len(), store.backend);
        let mut q = sqlx::query(&sql);
        for r in rows {
            q = q
                .bind(crate::store::new_id())
                .bind(r.at)
                .bind(&r.user_id)
                .bind(&r.api_key_id)
                .bind(&r.agent)
                .bind(&r.device_id)
                .bind(&r.model)
                .bind(r.kind)
                .bind(r.prompt_tokens)
                .bind(r.completion_tokens)
                .bind(r.latency_ms)
                .bind(i64::from(r.status))
                .bind(&r.conversation_id)
                .bind(&r.turn_id)
                .bind(&r.provider)
                .bind(r.api)
                .bind(r.cache_read_tokens)
                .bind(r.cache_write_tokens)
                .bind(&r.request_id)
                .bind(&r.upstream_model)
                .bind(r.reasoning_tokens)
                .bind(r.cost.nanos)
                .bind(r.cost.status.as_str())
                .bind(r.cost.version.as_deref());
        }
        q.execute(&mut *tx).await?;
    }
    tx.commit().await
}

/// One multi-row `INSERT` of `rows` usage records.
///
/// SQLite gets anonymous `?` placeholders: for each numbered one (`$7`) sqlx
/// asks SQLite for its name, a linear search of the statement's parameters,
/// which made a 64-row statement (960 parameters) cost a fifth of the
/// gateway's CPU under load.
fn insert_sql(rows: usize, backend: crate::store::Backend) -> String {
    const COLS: usize = 24;
    let mut sql = String::from(
        "INSERT INTO usage_records (id, at, user_id, api_key_id, agent, device_id, model, kind,
            prompt_tokens, completion_tokens, latency_ms, status, conversation_id, turn_id, provider,
            api, cache_read_tokens, cache_write_tokens, request_id, upstream_model, reasoning_tokens,
            cost_nanos, cost_status, price_version) VALUES ",
    );
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push('(');
        for c in 0..COLS {
            if c > 0 {
                sql.push(',');
            }
            match backend {
                crate::store::Backend::Sqlite => sql.push('?'),
                crate::store::Backend::Postgres => {
                    sql.push('$');
                    sql.push_str(&(r * COLS + c + 1).to_string());
                }
            }
        }
        sql.push(')');
    }
    sql
}

/// `last_used_at` stamps, kept in memory and written in batches so a request
/// never waits on a database write for them.
#[derive(Default)]
pub struct LastUsed {
    pub api_keys: DashMap<String, i64>,
    pub sign_ins: DashMap<String, i64>,
}

impl LastUsed {
    pub fn drain(map: &DashMap<String, i64>) -> Vec<(String, i64)> {
        let keys: Vec<String> = map.iter().map(|e| e.key().clone()).collect();
        keys.into_iter().filter_map(|k| map.remove(&k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DbOptions, Store};

    fn record(i: i64) -> UsageRecord {
        UsageRecord {
            at: 1_000 + i,
            user_id: Some(format!("user-{i}")),
            api_key_id: None,
            agent: None,
            device_id: None,
            model: format!("model-{}", i % 3),
            provider: Some("stub".to_string()),
            kind: "chat",
            prompt_tokens: i,
            completion_tokens: 2 * i,
            latency_ms: 7,
            status: 200,
            conversation_id: None,
            turn_id: Some(format!("turn-{i}")),
            api: Some("messages"),
            cache_read_tokens: i,
            cache_write_tokens: 1,
            ..UsageRecord::default()
        }
    }

    #[tokio::test]
    async fn a_model_name_is_kept_up_to_its_limit_in_characters() {
        let (tx, _rx) = mpsc::channel(1);
        let sink = UsageSink {
            tx,
            counters: Arc::default(),
            prices: Arc::new(crate::spend::Prices::new(crate::spend::Currency::USD)),
        };
        let mut ticket = UsageTicket::new(&sink, UsageContext::default(), "chat");
        for (name, kept) in [
            ("é".repeat(MAX_MODEL_CHARS + 1), "é".repeat(MAX_MODEL_CHARS)),
            ("é".repeat(MAX_MODEL_CHARS), "é".repeat(MAX_MODEL_CHARS)),
            ("llama".to_string(), "llama".to_string()),
        ] {
            ticket.set_model(&name);
            assert_eq!(
                ticket.record.as_ref().map(|r| r.model.as_str()),
                Some(kept.as_str())
            );
        }
        ticket.hand_over();
    }

    #[tokio::test]
    async fn a_ticket_handed_over_records_nothing_and_gives_back_who_asked() {
        let (tx, mut rx) = mpsc::channel(4);
        let sink = UsageSink {
            tx,
            counters: Arc::default(),
            prices: Arc::new(crate::spend::Prices::new(crate::spend::Currency::USD)),
        };
        let ctx = UsageContext {
            user_id: Some("u1".into()),
            api_key_id: Some("k1".into()),
            turn_id: Some("t1".into()),
            ..UsageContext::default()
        };
        let mut ticket = UsageTicket::new(&sink, ctx, "chat");
        ticket.set_model("m");
        let back = ticket.hand_over();
        assert!(ticket.is_finished());
        drop(ticket);
        assert!(rx.try_recv().is_err(), "the handed-over ticket recorded");
        assert_eq!(back.user_id.as_deref(), Some("u1"));
        assert_eq!(back.api_key_id.as_deref(), Some("k1"));
        assert_eq!(back.turn_id.as_deref(), Some("t1"));
        let mut next = UsageTicket::new(&sink, back, "chat");
        next.finish(200, Tokens::default());
        let r = rx.try_recv().expect("the new ticket records");
        assert_eq!((r.user_id.as_deref(), r.status), (Some("u1"), 200));
    }

    #[test]
    fn batches_are_cut_into_the_few_statement_shapes_and_lose_no_record() {
        // Up to one past the largest batch a transaction writes.
        for n in 0..=BATCH + 1 {
            let lengths: Vec<usize> = statement_lengths(n).collect();
            assert_eq!(lengths.iter().sum::<usize>(), n, "batch of {n}");
            assert!(
                lengths.iter().all(|l| INSERT_SHAPES.contains(l)),
                "{lengths:?}"
            );
            // Largest first, and never four of a smaller shape (they would make one larger).
            assert!(lengths.windows(2).all(|w| w[0] >= w[1]), "{lengths:?}");
            for &small in &INSERT_SHAPES[1..] {
                assert!(
                    lengths.iter().filter(|&&l| l == small).count() < 4,
                    "{lengths:?}"
                );
            }
        }
        assert_eq!(
            statement_lengths(149).collect::<Vec<_>>(),
            [64, 64, 16, 4, 1]
        );
    }

    #[tokio::test]
    async fn a_batch_longer_than_one_insert_stores_every_record_with_its_own_values() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&DbOptions {
            url: format!("sqlite://{}", dir.path().join("usage.db").display()),
            max_connections: 2,
            acquire_timeout_s: 5,
        })
        .await
        .unwrap();
        store.migrate().await.unwrap();
        // Five statements: 64 + 64 + 16 + 4 + 1 rows.
        let batch: Vec<UsageRecord> = (0..149).map(record).collect();
        write_batch(&store, &batch).await.unwrap();
        let rows: Vec<(i64, String, i64, i64, String, Option<String>)> = sqlx::query_as(
            "SELECT at, user_id, prompt_tokens, completion_tokens, model, turn_id
             FROM usage_records ORDER BY at",
        )
        .fetch_all(&store.pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 149);
        for (i, (at, user, prompt, completion, model, turn)) in rows.into_iter().enumerate() {
            let i = i as i64;
            assert_eq!(at, 1_000 + i);
            assert_eq!(user, format!("user-{i}"));
            assert_eq!((prompt, completion), (i, 2 * i));
            assert_eq!(model, format!("model-{}", i % 3));
            assert_eq!(turn, Some(format!("turn-{i}")));
        }
    }
}
