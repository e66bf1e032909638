//! What agent apps report and what administrators decide about it:
//! manifests, tool decisions, approvals, events.

use std::collections::HashMap;

use sqlx::FromRow;

use super::{new_id, now_ms, Store};

/// A checked event, as `agents::events::parse_batch` produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub id: Option<String>,
    pub kind: String,
    pub time: Option<String>,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
    /// Compact JSON of the `data` object.
    pub data: Option<String>,
}

#[derive(Clone, Debug, FromRow)]
pub struct ToolRow {
    pub agent: String,
    pub name: String,
    pub class: String,
    pub description: String,
    /// Stored decision: `held`, `accepted` or `rejected` (`contract` is derived at read time).
    pub status: String,
    pub first_seen_at: i64,
    /// `device` (a manifest or a chat offered it) or `mcp` (an MCP server's).
    pub source: String,
    /// The MCP server of an `mcp` tool.
    pub server: Option<String>,
}

impl ToolRow {
    /// A contract tool no app reported yet.
    pub fn contract_only(agent: &str, name: &str, first_seen_at: i64) -> ToolRow {
        ToolRow {
            agent: agent.to_string(),
            name: name.to_string(),
            class: "execute".into(),
            description: String::new(),
            status: "contract".into(),
            first_seen_at,
            source: "device".into(),
            server: None,
        }
    }
}

/// An MCP tool as an agent's caller saw it in a `tools/list` or a `tools/call`.
pub struct SeenMcpTool<'a> {
    /// Exposed name on `/mcp` (`server__tool`).
    pub name: &'a str,
    pub server: &'a str,
    pub class: &'a str,
    pub description: &'a str,
    /// `crate::mcp::agent::tool_hash` of description, input schema and class.
    pub hash: &'a str,
}

#[derive(Clone, Debug, FromRow)]
pub struct ApprovalRow {
    pub id: String,
    pub agent: String,
    pub user_id: String,
    pub device_id: String,
    pub tool_call_id: String,
    pub tool: String,
    pub arguments: String,
    pub status: String,
    pub reason: Option<String>,
    pub conversation_id: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_at: Option<i64>,
    /// `chat` or `mcp`.
    pub source: String,
    /// The MCP server of an `mcp` approval.
    pub server: Option<String>,
    /// When an `mcp` approval let its call through or answered it denied.
    pub used_at: Option<i64>,
}

#[derive(Clone, Debug, FromRow)]
pub struct EventRow {
    pub seq_id: String,
    pub agent: String,
    pub device_id: String,
    pub user_id: String,
    pub event_id: Option<String>,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub time: Option<String>,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
    pub data: Option<String>,
    pub received_at: i64,
    /// Position in the agent's commit order (the paging cursor).
    pub commit_seq: Option<i64>,
}

/// Why an approval could not be decided.
#[derive(Debug, PartialEq, Eq)]
pub enum DecideError {
    NotFound,
    AlreadyDecided,
    Expired,
}

pub(crate) const APPROVAL_COLS: &str = "id, agent, user_id, device_id, tool_call_id, tool, arguments, status, reason, conversation_id, created_at, expires_at, decided_at, source, server, used_at";
const EVENT_COLS: &str = "seq_id, agent, device_id, user_id, event_id, type, time, conversation_id, turn_id, data, received_at, commit_seq";

pub struct ManifestTool<'a> {
    pub name: &'a str,
    pub class: &'a str,
    pub description: &'a str,
    /// Hash of the tool's parameters schema (canonical JSON).
    pub parameters_hash: String,
}

impl Store {
    /// Keeps the device's latest manifest and records its tools. Returns
    /// whether this agent had received the same manifest before.
    pub async fn save_manifest(
        &self,
        agent: &str,
        device_id: &str,
        hash: &str,
        body: &str,
        tools: &[ManifestTool<'_>],
    ) -> Result<bool, sqlx::Error> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let fresh = sqlx::query(
            "INSERT INTO manifest_hashes (agent, manifest_hash, first_seen_at) VALUES ($1, $2, $3)
             ON CONFLICT (agent, manifest_hash) DO NOTHING",
        )
        .bind(agent)
        .bind(hash)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "INSERT INTO manifests (agent, device_id, manifest_hash, body, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (agent, device_id) DO UPDATE SET manifest_hash = $3, body = $4, updated_at = $5",
        )
        .bind(agent)
        .bind(device_id)
        .bind(hash)
        .bind(body)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        for t in tools {
            // A new tool starts held. An admin's decision stands while the tool
            // stays as the admin saw it; a changed class, description or
            // parameters make it held again.
            sqlx::query(
                "INSERT INTO agent_tools (agent, name, class, description, status, first_seen_at, parameters_hash)
                 VALUES ($1, $2, $3, $4, 'held', $5, $6)
                 ON CONFLICT (agent, name) DO UPDATE SET class = $3, description = $4, parameters_hash = $6,
                   status = CASE
                     WHEN agent_tools.status IN ('accepted', 'rejected')
                      AND (agent_tools.class <> $3 OR agent_tools.description <> $4
                           OR (agent_tools.parameters_hash <> '' AND agent_tools.parameters_hash <> $6))
                     THEN 'held' ELSE agent_tools.status END",
            )
            .bind(agent)
            .bind(t.name)
            .bind(t.class)
            .bind(t.description)
            .bind(now)
            .bind(&t.parameters_hash)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(fresh == 0)
    }

    /// The device's latest manifest body (canonical JSON), if any.
    pub async fn latest_manifest(
        &self,
        agent: &str,
        device_id: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        sqlx::query_scalar("SELECT body FROM manifests WHERE agent = $1 AND device_id = $2")
            .bind(agent)
            .bind(device_id)
            .fetch_optional(&self.pool)
            .await
    }

    /// Records tools offered in a chat that the agent had never seen (held, class execute).
    pub async fn record_offered_tools(
        &self,
        agent: &str,
        names: &[String],
    ) -> Result<(), sqlx::Error> {
        if names.is_empty() {
            return Ok(());
        }
        // One statement (one commit, one fsync) for the whole list.
        let mut sql = String::from(
            "INSERT INTO agent_tools (agent, name, class, description, status, first_seen_at) VALUES ",
        );
        for i in 0..names.len() {
            if i > 0 {
                sql.push(',');
            }
            sql.push_str(&format!("($1, ${}, 'execute', '', 'held', $2)", i + 3));
        }
        sql.push_str(" ON CONFLICT (agent, name) DO NOTHING");
        let mut q = sqlx::query(&sql).bind(agent).bind(now_ms());
        for n in names {
            q = q.bind(n);
        }
        q.execute(&self.pool).await?;
        Ok(())
    }

    pub async fn list_tools(&self, agent: &str) -> Result<Vec<ToolRow>, sqlx::Error> {
        sqlx::query_as::<_, ToolRow>(
            "SELECT agent, name, class, description, status, first_seen_at, source, server FROM agent_tools WHERE agent = $1 ORDER BY first_seen_at, name",
        )
        .bind(agent)
        .fetch_all(&self.pool)
        .await
    }

    /// Sets an admin decision; creates the row when the tool was never seen
    /// (an admin may decide ahead of the first report).
    pub async fn decide_tool(
        &self,
        agent: &str,
        name: &str,
        status: &str,
    ) -> Result<ToolRow, sqlx::Error> {
        sqlx::query(
            "INSERT INTO agent_tools (agent, name, class, description, status, first_seen_at)
             VALUES ($1, $2, 'execute', '', $3, $4) ON CONFLICT (agent, name) DO UPDATE SET status = $3",
        )
        .bind(agent)
        .bind(name)
        .bind(status)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        sqlx::query_as::<_, ToolRow>(
            "SELECT agent, name, class, description, status, first_seen_at, source, server FROM agent_tools WHERE agent = $1 AND name = $2",
        )
        .bind(agent)
        .bind(name)
        .fetch_one(&self.pool)
        .await
    }

    pub async fn create_approvals(&self, rows: &[ApprovalRow]) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        for a in rows {
            sqlx::query(&format!(
                "INSERT INTO approvals ({APPROVAL_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)"
            ))
            .bind(&a.id)
            .bind(&a.agent)
            .bind(&a.user_id)
            .bind(&a.device_id)
            .bind(&a.tool_call_id)
            .bind(&a.tool)
            .bind(&a.arguments)
            .bind(&a.status)
            .bind(&a.reason)
            .bind(&a.conversation_id)
            .bind(a.created_at)
            .bind(a.expires_at)
            .bind(a.decided_at)
            .bind(&a.source)
            .bind(&a.server)
            .bind(a.used_at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    /// Decides a pending approval of this agent (and of this user, when one
    /// is given: an admin decides any user's). One conditional update settles
    /// races, also between servers.
    pub async fn decide_approval(
        &self,
        agent: &str,
        user_id: Option<&str>,
        id: &str,
        status: &str,
        reason: Option<&str>,
    ) -> Result<Result<ApprovalRow, DecideError>, sqlx::Error> {
        let now = now_ms();
        let n = sqlx::query(
            "UPDATE approvals SET status = $4, reason = $5, decided_at = $6
             WHERE id = $1 AND agent = $2 AND ($3 IS NULL OR user_id = $3) AND status = 'pending' AND expires_at > $6",
        )
        .bind(id)
        .bind(agent)
        .bind(user_id)
        .bind(status)
        .bind(reason)
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        let row = sqlx::query_as::<_, ApprovalRow>(&format!(
            "SELECT {APPROVAL_COLS} FROM approvals WHERE id = $1 AND agent = $2 AND ($3 IS NULL OR user_id = $3)"
        ))
        .bind(id)
        .bind(agent)
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            None => Err(DecideError::NotFound),
            Some(r) if n == 1 => Ok(r),
            Some(r) if r.status == "pending" && r.expires_at <= now => Err(DecideError::Expired),
            Some(_) => Err(DecideError::AlreadyDecided),
        })
    }

    /// Approvals of this user on this agent, in this conversation (or both
    /// without one), for these tool calls: tool_call_id -> (status, expires_at).
    pub async fn approval_states(
        &self,
        agent: &str,
        user_id: &str,
        conversation_id: Option<&str>,
        call_ids: &[String],
    ) -> Result<HashMap<String, (String, i64)>, sqlx::Error> {
        let mut out = HashMap::new();
        for id in call_ids {
            // Conversation ids are never empty, so '' stands for "none".
            let row: Option<(String, i64)> = sqlx::query_as(
                "SELECT status, expires_at FROM approvals WHERE user_id = $1 AND tool_call_id = $2 AND agent = $3
                   AND COALESCE(conversation_id, '') = $4
                 ORDER BY created_at DESC LIMIT 1",
            )
            .bind(user_id)
            .bind(id)
            .bind(agent)
            .bind(conversation_id.unwrap_or(""))
            .fetch_optional(&self.pool)
            .await?;
            if let Some(r) = row {
                out.insert(id.clone(), r);
            }
        }
        Ok(out)
    }

    pub async fn list_approvals(&self, agent: &str) -> Result<Vec<ApprovalRow>, sqlx::Error> {
        sqlx::query_as::<_, ApprovalRow>(&format!(
            "SELECT {APPROVAL_COLS} FROM approvals WHERE agent = $1 ORDER BY created_at DESC, id"
        ))
        .bind(agent)
        .fetch_all(&self.pool)
        .await
    }

    /// Stores a batch in one transaction; an event id this device already sent is skipped.
    /// Returns (accepted, duplicates).
    pub async fn insert_events(
        &self,
        agent: &str,
        device_id: &str,
        user_id: &str,
        events: &[NewEvent],
    ) -> Result<(u64, u64), sqlx::Error> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // The counter row stays locked until this transaction commits, so
        // another one storing for this agent numbers after it: the numbers
        // follow commit order, whichever server stores.
        sqlx::query("INSERT INTO event_counters (agent, last) VALUES ($1, 0) ON CONFLICT (agent) DO NOTHING")
            .bind(agent)
            .execute(&mut *tx)
            .await?;
        let mut last: i64 = sqlx::query_scalar(
            "UPDATE event_counters SET last = last WHERE agent = $1 RETURNING last",
        )
        .bind(agent)
        .fetch_one(&mut *tx)
        .await?;
        let (mut accepted, mut dup) = (0, 0);
        for e in events {
            let n = sqlx::query(&format!(
                "INSERT INTO events ({EVENT_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)
                 ON CONFLICT (device_id, event_id) DO NOTHING"
            ))
            .bind(new_id())
            .bind(agent)
            .bind(device_id)
            .bind(user_id)
            .bind(&e.id)
            .bind(&e.kind)
            .bind(&e.time)
            .bind(&e.conversation_id)
            .bind(&e.turn_id)
            .bind(&e.data)
            .bind(now)
            .bind(last + 1)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 1 {
                accepted += 1;
                last += 1;
            } else {
                dup += 1;
            }
        }
        sqlx::query("UPDATE event_counters SET last = $2 WHERE agent = $1")
            .bind(agent)
            .bind(last)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((accepted, dup))
    }

    /// A page of an agent's events after the cursor (a `commit_seq`), in the
    /// order they were stored.
    pub async fn list_events(
        &self,
        agent: &str,
        device_id: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, sqlx::Error> {
        sqlx::query_as::<_, EventRow>(&format!(
            "SELECT {EVENT_COLS} FROM events WHERE agent = $1 AND ($2 IS NULL OR device_id = $2)
             AND commit_seq > $3 ORDER BY commit_seq LIMIT $4"
        ))
        .bind(agent)
        .bind(device_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }
}

/// The MCP side of agents (#33): the tools seen on MCP servers and the
/// approvals of `tools/call`s.
impl Store {
    /// Records MCP tools seen for an agent. A new one starts held; an admin's
    /// decision stands while the tool's hash (description, input schema,
    /// class) stays as the admin saw it, and a change makes it held again.
    pub async fn record_mcp_tools(
        &self,
        agent: &str,
        tools: &[SeenMcpTool<'_>],
    ) -> Result<(), sqlx::Error> {
        if tools.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        for t in tools {
            sqlx::query(
                "INSERT INTO agent_tools (agent, name, class, description, status, first_seen_at, parameters_hash, source, server)
                 VALUES ($1, $2, $3, $4, 'held', $5, $6, 'mcp', $7)
                 ON CONFLICT (agent, name) DO UPDATE SET class = $3, description = $4, parameters_hash = $6,
                   source = 'mcp', server = $7,
                   status = CASE
                     WHEN agent_tools.status IN ('accepted', 'rejected') AND agent_tools.parameters_hash <> $6
                     THEN 'held' ELSE agent_tools.status END",
            )
            .bind(agent)
            .bind(t.name)
            .bind(t.class)
            .bind(t.description)
            .bind(now)
            .bind(t.hash)
            .bind(t.server)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    /// The MCP tools seen for an agent: exposed name -> (status, hash).
    pub async fn mcp_tool_states(
        &self,
        agent: &str,
    ) -> Result<HashMap<String, (String, String)>, sqlx::Error> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT name, status, parameters_hash FROM agent_tools WHERE agent = $1 AND source = 'mcp'",
        )
        .bind(agent)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(n, s, h)| (n, (s, h))).collect())
    }

    /// The latest approval of this user and agent for this MCP tool (exposed
    /// name) with these canonical arguments.
    pub async fn latest_mcp_approval(
        &self,
        agent: &str,
        user_id: &str,
        tool: &str,
        arguments: &str,
    ) -> Result<Option<ApprovalRow>, sqlx::Error> {
        sqlx::query_as::<_, ApprovalRow>(&format!(
            "SELECT {APPROVAL_COLS} FROM approvals
             WHERE agent = $1 AND user_id = $2 AND tool = $3 AND source = 'mcp' AND arguments = $4
             ORDER BY created_at DESC, id DESC LIMIT 1"
        ))
        .bind(agent)
        .bind(user_id)
        .bind(tool)
        .bind(arguments)
        .fetch_optional(&self.pool)
        .await
    }

    /// Marks a decided approval used; false when another call used it first
    /// (one conditional update settles the race, also between servers).
    pub async fn use_approval(&self, id: &str) -> Result<bool, sqlx::Error> {
        let n = sqlx::query("UPDATE approvals SET used_at = $2 WHERE id = $1 AND used_at IS NULL")
            .bind(id)
            .bind(now_ms())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }
}

pub fn new_approval_id() -> String {
    format!("apr_{}", new_id())
}
