//! Upstream adapters (filled by the model-routes work).
