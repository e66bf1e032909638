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
//!    `x-ratelimit-*` headers.

use std::future::Future;

use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::error::{Error, ErrorKind, Result};
use crate::limits::{Admission, RateHeaders, Refusal, Subject};
use crate::usage::{EndHook, Tokens, UsageTicket};

/// Admits a request that must fit every subject's limits, and calls `call`
/// with its ticket (see the module documentation).
pub async fn admitted<F, Fut>(
    app: &App,
    subjects: &[Subject],
    mut ticket: UsageTicket,
    call: F,
) -> Response
where
    F: FnOnce(UsageTicket) -> Fut,
    Fut: Future<Output = Result<Response>>,
{
    let admission = match app.limiter.admit(subjects).await {
        Ok(a) => a,
        Err(r) => {
            ticket.finish(429, Tokens::default());
            return refused(&r);
        }
    };
    let headers = admission.headers;
    ticket.set_on_end(end_hook(admission));
    let mut resp = call(ticket)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    add_headers(&mut resp, &headers);
    resp
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
    let mut e =
        Error::new(ErrorKind::TooManyRequests, r.code, r.message.clone()).with_param(r.field);
    e.retry_after = Some(r.retry_after);
    let mut resp = e.into_response();
    add_headers(&mut resp, &r.headers);
    resp
}

/// Hands the admission to the request's usage ticket: it counts the
/// request's tokens and frees its `max_parallel` place when the request ends.
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

fn end_hook(mut admission: Admission) -> EndHook {
    EndHook::new(move |t: Tokens| {
        let n = t.prompt.saturating_add(t.completion).max(0);
        admission.finish(u64::try_from(n).unwrap_or(0));
    })
}
