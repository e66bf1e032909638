//! Upstream routing: a model spread over several targets (provider + upstream
//! model + weight), the order in which one request tries them, what an
//! attempt's failure means, and each target's health in this process.
//!
//! Everything here is plain data and atomics, no I/O: the relay
//! ([`crate::proxy`]) asks [`Attempts::next`] for a target, makes the call,
//! judges the result with [`judge`], and reports it on the [`InFlight`] guard
//! it was given. One policy per file:
//!
//! * [`health`]: per-target counters (in flight, failures in a row, rest).
//! * [`plan`]: which target a request tries next.
//! * [`outcome`]: which failures are retried and which count against a target.
//! * [`form`]: the admin API and TOML form of a routed model, and its validation.
//! * [`stats`]: attempts and failures by provider and cause, for `/metrics`.

pub mod form;
pub mod health;
pub mod outcome;
pub mod plan;
pub mod stats;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use form::{FormError, ModelForm, ModelPatch, ModelSpec, TargetForm, TargetSpec};
pub use health::{
    mono_ms, HealthRegistry, InFlight, TargetHealth, TargetState, DEFAULT_COOLDOWN_S,
    FAILURES_TO_REST,
};
pub use outcome::{judge, Cause, Failure, Verdict};
pub use plan::{Attempts, Pick, Stage};
pub use stats::{ProviderStats, StatsRegistry};

use super::Provider;

/// How a request chooses among a model's targets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// At random, in proportion to the targets' weights.
    #[default]
    Weighted,
    /// The target with the fewest requests in flight in this process (ties by weight).
    LeastBusy,
}

impl Routing {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "weighted" => Some(Self::Weighted),
            "least_busy" => Some(Self::LeastBusy),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Weighted => "weighted",
            Self::LeastBusy => "least_busy",
        }
    }
}

/// One place a model runs, with its health in this process.
#[derive(Clone, Debug)]
pub struct Target {
    pub provider: Arc<Provider>,
    pub upstream_model: String,
    /// At least 1.
    pub weight: u32,
    /// Shared by every model naming the same provider and upstream model:
    /// they are the same deployment, so they fail together.
    pub health: Arc<TargetHealth>,
    /// The provider's attempt and failure counters.
    pub stats: Arc<ProviderStats>,
}
