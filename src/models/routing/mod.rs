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
use std::time::Duration;

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

impl Target {
    /// Records a failed attempt on this target (metrics and health) and
    /// returns what it means for the request.
    pub fn failed(
        &self,
        guard: &mut InFlight,
        failure: Failure,
        client_got_bytes: bool,
    ) -> Verdict {
        let verdict = judge(failure, client_got_bytes);
        self.stats.failure(failure.cause());
        if verdict.against_target {
            guard.failed(mono_ms());
        } else {
            guard.ok();
        }
        verdict
    }
}

/// Which model and provider answered a request, and after how many attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answered {
    /// The requested model, or the fallback that answered.
    pub model: String,
    pub provider: String,
    /// The model name the provider was sent (with `provider`: the priced pair).
    pub upstream_model: String,
    pub attempts: u32,
}

impl Answered {
    /// The error of this attempt, marked as its answer: the client is told
    /// the provider and the attempts as for a success.
    pub fn mark(&self, e: crate::error::Error) -> crate::error::Error {
        e.with_attempted(&self.provider, self.attempts)
    }
}

/// The per-process routing state: every target's health and every
/// provider's counters. Kept across catalog rebuilds.
#[derive(Debug)]
pub struct RoutingState {
    pub health: HealthRegistry,
    pub stats: StatsRegistry,
}

impl RoutingState {
    pub fn new(cooldown: Duration) -> Self {
        RoutingState {
            health: HealthRegistry::new(cooldown),
            stats: StatsRegistry::default(),
        }
    }
}

/// The next attempt now. (A function, so the thread-local random source is
/// never held across an await.)
pub fn next_pick<'a>(attempts: &mut Attempts<'a>) -> Option<Pick<'a>> {
    attempts.next(mono_ms(), &mut rand::thread_rng())
}
