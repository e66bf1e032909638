//! The HTTP answers of the model routes: a relayed chat (JSON, or an
//! unbuffered event stream) and the routing headers (`x-gatehouse-provider`,
//! `x-gatehouse-attempts`) on every answer an upstream attempt was made for.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::models::routing::Answered;
use crate::proxy::chat::{Relayed, RelayedBody};
use crate::spend::{Cost, Currency};

// Names made once (a `&str` name is copied into a new allocation on each insert).
pub const X_GATEHOUSE_PROVIDER: HeaderName = HeaderName::from_static("x-gatehouse-provider");
const X_GATEHOUSE_ATTEMPTS: HeaderName = HeaderName::from_static("x-gatehouse-attempts");
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
const X_GATEHOUSE_COST_STATUS: HeaderName = HeaderName::from_static("x-gatehouse-cost-status");
const X_GATEHOUSE_COST: HeaderName = HeaderName::from_static("x-gatehouse-cost");
const X_GATEHOUSE_CURRENCY: HeaderName = HeaderName::from_static("x-gatehouse-currency");

/// A plain 2xx answer's cost: `x-gatehouse-cost-status`, and when priced
/// `x-gatehouse-cost` and `x-gatehouse-currency` (docs/spend.md).
pub fn cost_headers(h: &mut HeaderMap, cost: &Cost, currency: Currency) {
    h.insert(
        X_GATEHOUSE_COST_STATUS,
        HeaderValue::from_static(cost.status.as_str()),
    );
    if let Some(a) = cost.amount() {
        let nanos = i64::try_from(a.nanos()).unwrap_or(i64::MAX);
        // Copied once from the stack into the value's own buffer.
        let amount = crate::spend::amount::nanos_text(nanos);
        if let Ok(v) = HeaderValue::from_bytes(amount.as_bytes()) {
            h.insert(X_GATEHOUSE_COST, v);
        }
        // The default currency without an allocation.
        let currency = if currency == Currency::USD {
            Ok(HeaderValue::from_static("USD"))
        } else {
            HeaderValue::from_str(currency.as_str())
        };
        if let Ok(v) = currency {
            h.insert(X_GATEHOUSE_CURRENCY, v);
        }
    }
}

/// `x-gatehouse-provider` and `x-gatehouse-attempts` of an answer.
pub fn routing_headers(resp: &mut Response, answered: &Answered) {
    write_routing_headers(resp.headers_mut(), &answered.provider, answered.attempts);
}

/// The routing headers of a success ([`routing_headers`]) or of an
/// upstream attempt's error (`crate::error::Attempted`).
pub fn write_routing_headers(h: &mut HeaderMap, provider: &str, attempts: u32) {
    if let Ok(v) = HeaderValue::from_str(provider) {
        h.insert(X_GATEHOUSE_PROVIDER, v);
    }
    // The usual counts without formatting a number into a new buffer.
    const COUNTS: [&str; 4] = ["0", "1", "2", "3"];
    let attempts = match COUNTS.get(attempts as usize) {
        Some(n) => HeaderValue::from_static(n),
        None => HeaderValue::from(attempts),
    };
    h.insert(X_GATEHOUSE_ATTEMPTS, attempts);
}

/// The HTTP answer for a relayed chat: JSON, or an unbuffered event stream.
/// The most headers a relayed answer carries: content type (and a stream's
/// two more), request id, the routing, cost, `x-ratelimit-*` and budget
/// headers.
const ANSWER_HEADERS: usize = 24;

pub fn relayed_response(relayed: Relayed) -> Response {
    let mut resp = match relayed.body {
        RelayedBody::Answer(v) => Json(v).into_response(),
        RelayedBody::Raw(bytes) => {
            let mut resp = Response::new(axum::body::Body::from(bytes));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        RelayedBody::Stream(body) => {
            let mut resp = Response::new(axum::body::Body::from_stream(body));
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            // Tells nginx in front not to buffer the stream.
            h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
            resp
        }
    };
    // Room for every header an answer may get (routing, cost, limits,
    // budget) at once: the map otherwise grows, and rehashes, several times.
    resp.headers_mut().reserve(ANSWER_HEADERS);
    routing_headers(&mut resp, &relayed.answered);
    if let Some((cost, currency)) = &relayed.cost {
        cost_headers(resp.headers_mut(), cost, *currency);
    }
    resp
}
