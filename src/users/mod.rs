//! Users: the e-mail address type and what the hot path knows of a user.

pub mod email;
pub mod mcp_grant;

pub use email::Email;

/// What the hot path needs to know about a user.
#[derive(Clone, Debug)]
pub struct UserInfo {
    pub id: String,
    pub email: String,
    pub is_admin: bool,
    pub is_active: bool,
    pub created_at: i64,
    pub limits: crate::limits::Limits,
    /// Login tokens issued before this (Unix ms) are refused.
    pub tokens_valid_after: i64,
    /// The user's `mcp` grant (`None`: no MCP access).
    pub mcp: Option<crate::users::mcp_grant::McpGrant>,
}

impl From<&crate::store::users::UserRow> for UserInfo {
    fn from(u: &crate::store::users::UserRow) -> Self {
        UserInfo {
            id: u.id.clone(),
            email: u.email.clone(),
            is_admin: u.admin(),
            is_active: u.active(),
            created_at: u.created_at,
            limits: crate::limits::Limits::from_db_or_closed(u.limits.as_deref(), &u.id),
            tokens_valid_after: u.tokens_valid_after,
            mcp: crate::users::mcp_grant::McpGrant::from_db_or_closed(u.mcp.as_deref(), &u.id),
        }
    }
}
