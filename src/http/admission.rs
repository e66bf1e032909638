//! Admission, written once for every model route (chat, embeddings, rerank,
//! agent chat, and the routes to come):
//!
//! 1. the route opens the request's usage ticket first, so every request
//!    that passed authentication is recorded, failures included
//!    ([`recorded`] records a failure before admission);
//! 2. [`admitted`] checks the limits of every subject the request must fit;
//!    a refusal is the 429 with `Retry-After` and the `x-ratelimit-*`
//!    headers, recorded on the ticket;
//! 3. the ticket is told to count the request's tokens and free its
//!    `max_parallel` place when it ends;
//! 4. the call runs with the ticket (recording its own outcome, or handing
//!    the ticket on to the relay);
//! 5. whatever it answers, success or error, carries the caller's
//!    `x-ratelimit-*` headers, and under a budget the
//!    `x-gatehouse-budget-*` ones (a plain answer is settled by then, so
//!    they count its cost; a stream's count its reservation).
//!
//! Under a budget, the request reserves at admission what it may cost at
//! the dearest price it may reach ([`Charge`]; docs/spend.md, "Budgets"),
//! and its end hook settles: the reservation released, the cost added.

use std::future::Future;

use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::error::{Error, ErrorKind, Result};
use crate::limits::rules::{BudgetQuota, BUDGET_HEADERS};
use crate::limits::{Admission, RateHeaders, Refusal, Subject};
use crate::models::Model;
use crate::spend::budget::{self, UnpricedPolicy};
use crate::spend::PriceBook;
use crate::usage::{EndHook, Tokens, UsageTicket};

/// What a request may cost, for its reservation under a budget: the model
/// it names (its targets and its fallbacks' targets are what it may reach)
/// and the token figures (the prompt's estimate, the body's maximum
/// completion when it gives one).
pub struct Charge<'a> {
    pub model: &'a Model,
    prompt: Prompt<'a>,
    pub completion: Option<u64>,
}

/// The prompt's estimate in tokens, or how to make it: only a budget reads
/// it, and some bodies cost a pass over their text to count it.
enum Prompt<'a> {
    Tokens(u64),
    Later(Box<dyn Fn() -> u64 + Send + 'a>),
}

impl<'a> Charge<'a> {
    pub fn new(model: &'a Model, prompt: u64, completion: Option<u64>) -> Charge<'a> {
        Charge {
            model,
            prompt: Prompt::Tokens(prompt),
            completion,
        }
    }

    /// A charge whose prompt estimate is made only if a budget applies.
    pub fn later(
        model: &'a Model,
        prompt: impl Fn() -> u64 + Send + 'a,
        completion: Option<u64>,
    ) -> Charge<'a> {
        Charge {
            model,
            prompt: Prompt::Later(Box::new(prompt)),
            completion,
        }
    }

    fn prompt(&self) -> u64 {
        match &self.prompt {
            Prompt::Tokens(n) => *n,
            Prompt::Later(f) => f(),
        }
    }

    /// The reservation in nanos, or the 403 of an unpriced target under
    /// `GATEHOUSE_UNPRICED_POLICY=refuse`.
    fn reservation(&self, app: &App, book: &PriceBook) -> Result<i64> {
        let targets = || self.model.models().flat_map(|m| m.targets.iter());
        let completion = self
            .completion
            .unwrap_or(app.settings.reserve_output_tokens);
        let (nanos, unpriced) = budget::reservation(
            targets().map(|t| {
                book.get(&t.provider.name, &t.upstream_model)
                    .map(|p| &p.spec)
            }),
            self.prompt(),
            completion,
        );
        if unpriced {
            let missing =
                targets().filter(|t| book.get(&t.provider.name, &t.upstream_model).is_none());
            match app.settings.unpriced_policy {
                UnpricedPolicy::Refuse => {
                    let t = missing.into_iter().next();
                    let pair = t.map_or(String::new(), |t| {
                        format!(" ({}/{})", t.provider.name, t.upstream_model)
                    });
                    return Err(Error::new(
                        ErrorKind::Forbidden,
                        "model_unpriced",
                        format!(
                            "Model '{}' may run on a target without a price{pair}, and a budget applies to this request.",
                            self.model.id
                        ),
                    )
                    .with_param("model"));
                }
                UnpricedPolicy::Admit => {
                    for t in missing {
                        budget::warn_unpriced_once(&t.provider.name, &t.upstream_model);
                    }
                }
            }
        }
        Ok(nanos)
    }
}

/// Admits a request that must fit every subject's limits, and calls `call`
/// with its ticket (see the module documentation).
pub async fn admitted<F, Fut>(
    app: &App,
    subjects: &[Subject],
    charge: Charge<'_>,
    mut ticket: UsageTicket,
    call: F,
) -> Response
where
    F: FnOnce(UsageTicket) -> Fut,
    Fut: Future<Output = Result<Response>>,
{
    let reservation = if subjects.iter().any(|s| s.limits.has_budget()) {
        // The prices the ticket prices the request with.
        match charge.reservation(app, ticket.prices()) {
            Ok(n) => n,
            Err(e) => {
                ticket.finish(e.status(), Tokens::default());
                return e.into_response();
            }
        }
    } else {
        0
    };
    let admission = match app.limiter.admit_reserving(subjects, reservation).await {
        Ok(a) => a,
        Err(r) => {
            ticket.finish(429, Tokens::default());
            if let Some(period) = budget::Period::of_field(r.field) {
                app.usage.counters.spend.budget_refused(period);
            }
            return refused(&r);
        }
    };
    let headers = admission.headers;
    let probe = admission.budget_probe();
    ticket.set_on_end(end_hook(admission));
    let mut resp = call(ticket)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    add_headers(&mut resp, &headers);
    // A stream's figure counts its own reservation (as at admission: a
    // short stream may have ended, and settled, before its headers go out);
    // a plain answer's, settled by now, its cost.
    let stream = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let figure = if stream {
        probe.admitted()
    } else {
        probe.quota()
    };
    add_budget_headers(&mut resp, figure);
    resp
}

/// Adds `x-gatehouse-budget-remaining` and `-reset` (nothing without a budget).
pub fn add_budget_headers(resp: &mut Response, q: Option<BudgetQuota>) {
    // Names checked once, at compile time (not on every answer).
    const NAMES: [HeaderName; 2] = [
        HeaderName::from_static(BUDGET_HEADERS[0]),
        HeaderName::from_static(BUDGET_HEADERS[1]),
    ];
    let Some(q) = q else { return };
    // Copied once from the stack into the value's own buffer.
    let remaining = crate::spend::amount::nanos_text(q.remaining);
    if let Ok(v) = HeaderValue::from_bytes(remaining.as_bytes()) {
        resp.headers_mut().insert(NAMES[0].clone(), v);
    }
    if let Some(v) = reset_value(q.reset_ms) {
        resp.headers_mut().insert(NAMES[1].clone(), v);
    }
}

/// The reset header's value for `reset_ms`: every answer under a budget
/// carries one, and its text changes once a second, so each thread keeps
/// the last one made (a clone shares its buffer) instead of formatting,
/// checking and allocating it again.
fn reset_value(reset_ms: i64) -> Option<HeaderValue> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(i64, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    let secs = crate::limits::rules::reset_seconds(reset_ms);
    LAST.with_borrow_mut(|last| match last {
        Some((s, v)) if *s == secs => Some(v.clone()),
        _ => {
            let text = crate::limits::rules::reset_text(reset_ms);
            let v = HeaderValue::from_bytes(text.as_bytes()).ok()?;
            *last = Some((secs, v.clone()));
            Some(v)
        }
    })
}

/// Records a failure before the upstream call on the request's ticket.
pub fn recorded<T>(ticket: &mut UsageTicket, r: Result<T>) -> Result<T> {
    r.inspect_err(|e| ticket.finish(e.status(), Tokens::default()))
}

/// Adds the `x-ratelimit-*` headers (nothing when no limit applies).
pub fn add_headers(resp: &mut Response, h: &RateHeaders) {
    if h.is_empty() {
        return;
    }
    for (name, value) in h.pairs() {
        if let Ok(v) = HeaderValue::from_str(&value) {
            // A static name is not copied (a `&str` one is, on each insert).
            resp.headers_mut().insert(HeaderName::from_static(name), v);
        }
    }
}

/// The 429 answer: the contract's error (OpenAI shape on /v1), `Retry-After`
/// and the caller's `x-ratelimit-*` headers.
fn refused(r: &Refusal) -> Response {
    let mut e = Error::new(ErrorKind::TooManyRequests, r.code, r.message.clone());
    // A used-up budget names no parameter (contract, "Budgets": refusal).
    if r.code != crate::limits::rules::BUDGET_EXHAUSTED {
        e = e.with_param(r.field);
    }
    e.retry_after = Some(r.retry_after);
    let mut resp = e.into_response();
    add_headers(&mut resp, &r.headers);
    add_budget_headers(&mut resp, r.budget);
    resp
}

/// Admits a `count_tokens` call against each subject's own
/// `count_tokens_per_minute` (it counts against no other limit and leaves
/// no usage record); the refusal is the 429 of [`admitted`].
pub async fn admit_count_tokens(app: &App, subjects: &[Subject]) -> Result<(), Response> {
    let counted: Vec<Subject> = subjects
        .iter()
        .filter(|s| s.limits.count_tokens_per_minute.is_some())
        .map(Subject::count_tokens)
        .collect();
    if counted.is_empty() {
        return Ok(());
    }
    match app.limiter.admit(&counted).await {
        Ok(_) => Ok(()),
        Err(mut r) => {
            r.field = "count_tokens_per_minute";
            Err(refused(&r))
        }
    }
}

/// Hands the admission to the request's usage ticket: it counts the
/// request's tokens, settles the request's cost and frees its `max_parallel`
/// place when the request ends. Public for the `spend` benchmark.
pub fn end_hook(admission: Admission) -> EndHook {
    EndHook::new(move |t: Tokens, cost_nanos: i64| {
        let n = t.prompt.saturating_add(t.completion).max(0);
        admission.end(u64::try_from(n).unwrap_or(0), cost_nanos);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_value_kept_from_the_last_answer_is_the_one_its_second_shows() {
        let v = |ms| reset_value(ms).map(|v| v.to_str().unwrap_or_default().to_string());
        assert_eq!(v(86_399_001).as_deref(), Some("24h0m0s"));
        // The same second: the kept value; the next and the one before: new ones.
        assert_eq!(v(86_399_999).as_deref(), Some("24h0m0s"));
        assert_eq!(v(86_398_999).as_deref(), Some("23h59m59s"));
        assert_eq!(v(86_400_001).as_deref(), Some("24h0m1s"));
        assert_eq!(v(0).as_deref(), Some("0s"));
    }
}
