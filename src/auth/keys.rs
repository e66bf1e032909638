//! API keys as the hot path knows them.

use crate::store::keys::ApiKeyRow;

/// A validated API key as the hot path needs it.
#[derive(Clone, Debug)]
pub struct KeyInfo {
    pub id: String,
    pub user_id: String,
    pub models: Option<Vec<String>>,
    pub expires_at: Option<i64>,
    pub limits: crate::limits::Limits,
}

impl KeyInfo {
    pub fn from_row(row: &ApiKeyRow) -> KeyInfo {
        KeyInfo {
            id: row.id.clone(),
            user_id: row.user_id.clone(),
            models: row
                .models
                .as_deref()
                .and_then(|m| serde_json::from_str(m).ok()),
            expires_at: row.expires_at,
            limits: crate::limits::Limits::from_db_or_closed(row.limits.as_deref(), &row.id),
        }
    }

    pub fn allows(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| x == model))
    }
}
