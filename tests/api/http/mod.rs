//! What the HTTP layer does for every route: the two error shapes, request
//! ids, health, version and metrics, the OpenAPI document, and the
//! contract's hardening rules.

mod errors;
mod hardening;
mod openapi;
mod request_ids;
mod system;
