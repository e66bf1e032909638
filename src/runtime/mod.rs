//! Per-process machinery every layer may use, and which imports none of its
//! users: the cache with generation-safe fills, the invalidation messages,
//! the metrics registry, and the request id of the request being served.

pub mod cache;
pub mod invalidation;
pub mod metrics;
pub mod request;

pub use cache::TtlCache;
pub use invalidation::Invalidation;
pub use metrics::Metrics;
