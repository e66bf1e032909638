//! API keys as the hot path knows them.

use crate::store::keys::ApiKeyRow;

/// A validated API key as the hot path needs it.
#[derive(Clone, Debug)]
pub struct KeyInfo {
    pub id: String,
    pub user_id: String,
    /// The key's name (budget refusals name it).
    pub name: String,
    /// None: every model. An unreadable stored list allows none (fail closed).
    pub models: Option<Vec<String>>,
    pub expires_at: Option<i64>,
    pub limits: crate::limits::Limits,
    /// The key's `mcp` grant (`None`: no MCP access).
    pub mcp: Option<crate::users::mcp_grant::McpGrant>,
}

impl KeyInfo {
    pub fn from_row(row: &ApiKeyRow) -> KeyInfo {
        KeyInfo {
            id: row.id.clone(),
            user_id: row.user_id.clone(),
            name: row.name.clone(),
            models: row.models.as_deref().map(|m| {
                serde_json::from_str(m).unwrap_or_else(|e| {
                    tracing::error!(api_key_id = %row.id, error = %e, "the key's model list cannot be read: the key allows no model");
                    Vec::new()
                })
            }),
            expires_at: row.expires_at,
            limits: crate::limits::Limits::from_db_or_closed(row.limits.as_deref(), &row.id),
            mcp: crate::users::mcp_grant::McpGrant::from_db_or_closed(row.mcp.as_deref(), &row.id),
        }
    }

    pub fn allows(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| x == model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(models: Option<&str>) -> ApiKeyRow {
        ApiKeyRow {
            id: "k".into(),
            user_id: "u".into(),
            name: "n".into(),
            key_hash: "h".into(),
            models: models.map(str::to_string),
            created_at: 0,
            expires_at: None,
            last_used_at: None,
            limits: None,
            mcp: None,
        }
    }

    #[test]
    fn an_unreadable_model_list_allows_no_model() {
        assert!(KeyInfo::from_row(&row(None)).allows("any"));
        assert!(KeyInfo::from_row(&row(Some(r#"["a"]"#))).allows("a"));
        assert!(!KeyInfo::from_row(&row(Some(r#"["a"]"#))).allows("b"));
        assert!(!KeyInfo::from_row(&row(Some("not json"))).allows("a"));
        assert!(!KeyInfo::from_row(&row(Some(r#"{"a":1}"#))).allows("a"));
    }
}
