//! Per-process machinery every layer may use, and which imports none of its
//! users: the cache with generation-safe fills, the invalidation messages,
//! and the metrics registry.

pub mod cache;
pub mod invalidation;
pub mod metrics;

pub use cache::TtlCache;
pub use invalidation::Invalidation;
pub use metrics::Metrics;
