//! Agent sign-ins: one per device, with an access token and a rotating refresh token.

/// What the hot path needs to know about a sign-in.
#[derive(Clone, Debug)]
pub struct SignInInfo {
    pub device_id: String,
    pub user_id: String,
    pub agent: String,
    pub device_label: String,
    pub ended: bool,
}
