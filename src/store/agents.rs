//! Agents as stored: JSON lists and objects in TEXT columns.

use sqlx::FromRow;

use super::Store;

#[derive(Clone, Debug, PartialEq, Eq, FromRow)]
pub struct AgentRow {
    pub address: String,
    pub name: String,
    pub model: String,
    pub default_tool_mode: String,
    /// JSON array of tool names.
    pub tool_contract: String,
    /// JSON object `{mode, user_choosable, terms}`.
    pub pii: String,
    pub allow_local_mcp: i64,
    pub instructions: Option<String>,
    /// JSON array of e-mails, or NULL for every user.
    pub allowed_users: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The `limits` object as JSON text; NULL for none.
    pub limits: Option<String>,
    /// The `mcp` grant as JSON text; NULL for no MCP access.
    pub mcp: Option<String>,
}

const COLS: &str = "address, name, model, default_tool_mode, tool_contract, pii, allow_local_mcp, \
                    instructions, allowed_users, created_at, updated_at, limits, mcp";

const INSERT: &str =
    "INSERT INTO agents (address, name, model, default_tool_mode, tool_contract, pii, \
                      allow_local_mcp, instructions, allowed_users, created_at, updated_at, limits, mcp) \
                      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

fn bind_all<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    r: &'q AgentRow,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(&r.address)
        .bind(&r.name)
        .bind(&r.model)
        .bind(&r.default_tool_mode)
        .bind(&r.tool_contract)
        .bind(&r.pii)
        .bind(r.allow_local_mcp)
        .bind(&r.instructions)
        .bind(&r.allowed_users)
        .bind(r.created_at)
        .bind(r.updated_at)
        .bind(&r.limits)
        .bind(&r.mcp)
}

impl Store {
    /// Inserts a new agent; false when the address is taken.
    pub async fn insert_agent(&self, row: &AgentRow) -> Result<bool, sqlx::Error> {
        let sql = format!("{INSERT} ON CONFLICT (address) DO NOTHING");
        let n = bind_all(sqlx::query(&sql), row)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    /// Inserts or overwrites an agent, keeping its first `created_at`.
    pub async fn upsert_agent(&self, row: &AgentRow) -> Result<(), sqlx::Error> {
        let sql = format!(
            "{INSERT} ON CONFLICT (address) DO UPDATE SET name = $2, model = $3, default_tool_mode = $4, \
             tool_contract = $5, pii = $6, allow_local_mcp = $7, instructions = $8, allowed_users = $9, \
             updated_at = $11, limits = $12, mcp = $13"
        );
        bind_all(sqlx::query(&sql), row).execute(&self.pool).await?;
        Ok(())
    }

    /// Overwrites an existing agent's settings; false when there is none.
    pub async fn update_agent(&self, r: &AgentRow) -> Result<bool, sqlx::Error> {
        let n = sqlx::query(
            "UPDATE agents SET name = $2, model = $3, default_tool_mode = $4, tool_contract = $5, \
             pii = $6, allow_local_mcp = $7, instructions = $8, allowed_users = $9, updated_at = $10, \
             limits = $11, mcp = $12 WHERE address = $1",
        )
        .bind(&r.address)
        .bind(&r.name)
        .bind(&r.model)
        .bind(&r.default_tool_mode)
        .bind(&r.tool_contract)
        .bind(&r.pii)
        .bind(r.allow_local_mcp)
        .bind(&r.instructions)
        .bind(&r.allowed_users)
        .bind(r.updated_at)
        .bind(&r.limits)
        .bind(&r.mcp)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    pub async fn agent(&self, address: &str) -> Result<Option<AgentRow>, sqlx::Error> {
        sqlx::query_as::<_, AgentRow>(&format!("SELECT {COLS} FROM agents WHERE address = $1"))
            .bind(address)
            .fetch_optional(&self.pool)
            .await
    }

    pub async fn list_agents(&self) -> Result<Vec<AgentRow>, sqlx::Error> {
        sqlx::query_as::<_, AgentRow>(&format!("SELECT {COLS} FROM agents ORDER BY address"))
            .fetch_all(&self.pool)
            .await
    }
}
