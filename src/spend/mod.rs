//! Spend in money: amounts and the currency, prices and their versions, the
//! cost of each request (docs/spend.md; contract, "Spend in money").

pub mod amount;
pub mod budget;
pub mod cost;
pub mod metrics;
pub mod price;
pub mod store;

pub use amount::{Amount, Currency};
pub use cost::{Cost, CostStatus};
pub use price::{PriceBook, PriceSpec, Prices};
