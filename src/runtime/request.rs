//! The request being served, as every layer may read it: its
//! `x-request-id`. Here, below the layers that read it (usage records,
//! upstream calls, the HTTP edge that sets it), so none of them imports
//! another for it.

use http::HeaderName;
use http::HeaderValue;

tokio::task_local! {
    /// The `x-request-id` of the request being served. The HTTP layer sets it
    /// around each request, so every upstream attempt made while serving it
    /// carries the same id without threading it through every call.
    pub static REQUEST_ID: HeaderValue;
}

/// `x-request-id` as a made name: inserting a header under a `&str` name
/// copies the name into a new allocation each time.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
