//! Spend in money through the real server (docs/spend.md): prices and their
//! versions, the cost of each request as headers, stream usage, records and
//! totals, metrics, and prices as code.

mod budgets;
pub(crate) mod cost;
mod prices;
