//! The MCP store: servers (headers sealed at rest), `mcp` grants of keys, users and
//! agents, the call audit and ended sessions. Other MCP modules add their
//! functions at the end of this file. It lives with the MCP domain (as
//! `impl Store` blocks) so that the store stays below every domain.

use std::collections::BTreeMap;

use sqlx::FromRow;

use crate::agents::tools::ToolClass;
use crate::mcp::audit::{CallFilter, McpCallRecord};
use crate::mcp::servers::{McpServer, Source, Transport};
use crate::mcp::McpGrant;
use crate::runtime::Invalidation;
use crate::secrets::{Keyring, Use};
use crate::store::{now_ms, Store};

#[derive(Clone, Debug, FromRow)]
pub struct McpServerRow {
    pub name: String,
    pub url: String,
    pub transport: String,
    pub timeout_s: i64,
    /// Sealed JSON object of header name -> value; None: no headers.
    pub headers: Option<String>,
    /// JSON array of the header names, sorted.
    pub header_names: String,
    /// JSON array of allow-list patterns.
    pub tools: String,
    /// JSON object of upstream tool name -> class.
    pub tool_classes: String,
    pub source: String,
    pub created_at: i64,
    pub updated_at: i64,
}

const SERVER_COLS: &str = "name, url, transport, timeout_s, headers, header_names, tools, \
                           tool_classes, source, created_at, updated_at";

impl McpServerRow {
    /// The row of `s`, its headers sealed.
    pub fn seal(s: &McpServer, keyring: &Keyring) -> crate::error::Result<McpServerRow> {
        let headers = if s.headers.is_empty() {
            None
        } else {
            // A map of strings always serialises.
            let plain = serde_json::to_string(&s.headers).unwrap_or_default();
            Some(keyring.seal(Use::McpServerHeaders, &plain)?)
        };
        let classes: BTreeMap<&str, &str> = s
            .tool_classes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Ok(McpServerRow {
            name: s.name.clone(),
            url: s.url.clone(),
            transport: s.transport.as_str().to_string(),
            timeout_s: i64::try_from(s.timeout_s).unwrap_or(i64::MAX),
            headers,
            header_names: serde_json::to_string(&s.header_names()).unwrap_or_default(),
            tools: serde_json::to_string(&s.tools).unwrap_or_default(),
            tool_classes: serde_json::to_string(&classes).unwrap_or_default(),
            source: s.source.as_str().to_string(),
            created_at: s.created_at,
            updated_at: s.updated_at,
        })
    }

    /// The server with its header values opened, for upstream requests and
    /// edits. Headers that cannot be opened (the secret changed) keep their
    /// names with empty values, and the failure is logged (never a value).
    pub fn open(self, keyring: &Keyring) -> McpServer {
        let names: Vec<String> = serde_json::from_str(&self.header_names).unwrap_or_default();
        let headers = match &self.headers {
            None => BTreeMap::new(),
            Some(sealed) => match keyring
                .open(Use::McpServerHeaders, sealed)
                .ok()
                .and_then(|p| serde_json::from_str::<BTreeMap<String, String>>(&p).ok())
            {
                Some(h) => h,
                None => {
                    tracing::error!(mcp_server = %self.name, "the MCP server's headers cannot be opened: was GATEHOUSE_SECRET changed? Set its headers again");
                    names.into_iter().map(|n| (n, String::new())).collect()
                }
            },
        };
        let tool_classes = serde_json::from_str::<BTreeMap<String, String>>(&self.tool_classes)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| Some((k, ToolClass::parse(&v)?)))
            .collect();
        McpServer {
            transport: Transport::parse(&self.transport).unwrap_or_default(),
            timeout_s: u64::try_from(self.timeout_s).unwrap_or(60),
            headers,
            // Unreadable allow-list: no tool (fail closed).
            tools: serde_json::from_str(&self.tools).unwrap_or_default(),
            tool_classes,
            source: Source::parse(&self.source).unwrap_or_default(),
            name: self.name,
            url: self.url,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// Deleting a server: the caches each rewritten grant lives in.
fn grant_without(text: &str, server: &str, owner: &str) -> Option<String> {
    let mut g = McpGrant::from_db_or_closed(Some(text), owner)?;
    g.forget_server(server)
        .then(|| McpGrant::to_db(Some(&g)).unwrap_or_default())
}

impl Store {
    pub async fn list_mcp_server_rows(&self) -> Result<Vec<McpServerRow>, sqlx::Error> {
        sqlx::query_as::<_, McpServerRow>(&format!(
            "SELECT {SERVER_COLS} FROM mcp_servers ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await
    }

    /// Every server with its headers opened: for upstream use only (the
    /// snapshot of `crate::mcp::McpServers`), never for a view.
    pub async fn list_mcp_servers_opened(
        &self,
        keyring: &Keyring,
    ) -> Result<Vec<McpServer>, sqlx::Error> {
        Ok(self
            .list_mcp_server_rows()
            .await?
            .into_iter()
            .map(|r| r.open(keyring))
            .collect())
    }

    pub async fn mcp_server_row(&self, name: &str) -> Result<Option<McpServerRow>, sqlx::Error> {
        sqlx::query_as::<_, McpServerRow>(&format!(
            "SELECT {SERVER_COLS} FROM mcp_servers WHERE name = $1"
        ))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
    }

    pub async fn mcp_server_exists(&self, name: &str) -> Result<bool, sqlx::Error> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mcp_servers WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        Ok(n > 0)
    }

    /// Every server name (to check grants).
    pub async fn mcp_server_names(&self) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar("SELECT name FROM mcp_servers ORDER BY name")
            .fetch_all(&self.pool)
            .await
    }

    /// Inserts a server; false when the name is taken. `replace` (the config
    /// file) overwrites it instead, keeping its first `created_at`.
    pub async fn put_mcp_server(
        &self,
        r: &McpServerRow,
        replace: bool,
    ) -> Result<bool, sqlx::Error> {
        let conflict = if replace {
            "ON CONFLICT (name) DO UPDATE SET url = $2, transport = $3, timeout_s = $4, headers = $5, \
             header_names = $6, tools = $7, tool_classes = $8, source = $9, updated_at = $11"
        } else {
            "ON CONFLICT (name) DO NOTHING"
        };
        let n = sqlx::query(&format!(
            "INSERT INTO mcp_servers ({SERVER_COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) {conflict}"
        ))
        .bind(&r.name)
        .bind(&r.url)
        .bind(&r.transport)
        .bind(r.timeout_s)
        .bind(&r.headers)
        .bind(&r.header_names)
        .bind(&r.tools)
        .bind(&r.tool_classes)
        .bind(&r.source)
        .bind(r.created_at)
        .bind(r.updated_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    /// Overwrites an existing server (not its name, source or `created_at`);
    /// false when there is none.
    pub async fn update_mcp_server(&self, r: &McpServerRow) -> Result<bool, sqlx::Error> {
        let n = sqlx::query(
            "UPDATE mcp_servers SET url = $2, transport = $3, timeout_s = $4, headers = $5, \
             header_names = $6, tools = $7, tool_classes = $8, updated_at = $9 WHERE name = $1",
        )
        .bind(&r.name)
        .bind(&r.url)
        .bind(&r.transport)
        .bind(r.timeout_s)
        .bind(&r.headers)
        .bind(&r.header_names)
        .bind(&r.tools)
        .bind(&r.tool_classes)
        .bind(r.updated_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Deletes a server and removes its name from every grant, in one
    /// transaction. Returns None when there was no such server, else what
    /// the caller must invalidate (the keys, users and agents whose grant
    /// changed, and the servers).
    pub async fn delete_mcp_server(
        &self,
        name: &str,
    ) -> Result<Option<Vec<Invalidation>>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query("DELETE FROM mcp_servers WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            return Ok(None);
        }
        let mut out = vec![Invalidation::McpServers];
        // Server names hold no LIKE wildcard (`%`, `_`), so this finds every
        // grant naming it (and perhaps a few more, which are left alone).
        let like = format!("%\"{name}\"%");
        let keys: Vec<(String, String, String)> =
            sqlx::query_as("SELECT id, key_hash, mcp FROM api_keys WHERE mcp LIKE $1")
                .bind(&like)
                .fetch_all(&mut *tx)
                .await?;
        for (id, hash, text) in keys {
            if let Some(new) = grant_without(&text, name, &id) {
                sqlx::query("UPDATE api_keys SET mcp = $2 WHERE id = $1")
                    .bind(&id)
                    .bind(new)
                    .execute(&mut *tx)
                    .await?;
                out.push(Invalidation::ApiKey(hash));
            }
        }
        let users: Vec<(String, String)> =
            sqlx::query_as("SELECT id, mcp FROM users WHERE mcp LIKE $1")
                .bind(&like)
                .fetch_all(&mut *tx)
                .await?;
        for (id, text) in users {
            if let Some(new) = grant_without(&text, name, &id) {
                sqlx::query("UPDATE users SET mcp = $2 WHERE id = $1")
                    .bind(&id)
                    .bind(new)
                    .execute(&mut *tx)
                    .await?;
                out.push(Invalidation::User(id));
            }
        }
        let agents: Vec<(String, String)> =
            sqlx::query_as("SELECT address, mcp FROM agents WHERE mcp LIKE $1")
                .bind(&like)
                .fetch_all(&mut *tx)
                .await?;
        for (address, text) in agents {
            if let Some(new) = grant_without(&text, name, &address) {
                sqlx::query("UPDATE agents SET mcp = $2, updated_at = $3 WHERE address = $1")
                    .bind(&address)
                    .bind(new)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await?;
                out.push(Invalidation::Agent(address));
            }
        }
        tx.commit().await?;
        Ok(Some(out))
    }

    /// Sets (or clears) the grant of the caller's live key; returns its hash
    /// (to evict from caches), or None when the caller has no such key.
    pub async fn set_api_key_mcp(
        &self,
        user_id: &str,
        id: &str,
        grant: Option<&str>,
    ) -> Result<Option<String>, sqlx::Error> {
        sqlx::query_scalar(
            "UPDATE api_keys SET mcp = $3 WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL
             RETURNING key_hash",
        )
        .bind(id)
        .bind(user_id)
        .bind(grant)
        .fetch_optional(&self.pool)
        .await
    }

    /// Sets (or clears) a user's grant; false when there is no such user.
    pub async fn set_user_mcp(&self, id: &str, grant: Option<&str>) -> Result<bool, sqlx::Error> {
        let n = sqlx::query("UPDATE users SET mcp = $2, updated_at = $3 WHERE id = $1")
            .bind(id)
            .bind(grant)
            .bind(now_ms())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    /// Writes audit records (a batch in one transaction).
    pub async fn insert_mcp_calls(&self, records: &[McpCallRecord]) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        for r in records {
            sqlx::query(
                "INSERT INTO mcp_calls (id, created_at, request_id, user_id, user_email, api_key_id, \
                 agent, device_id, server, tool, exposed_name, class, mode, decision, reason, \
                 approval_id, outcome, latency_ms, arguments_sha256) \
                 VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)",
            )
            .bind(&r.id)
            .bind(r.created_at)
            .bind(&r.request_id)
            .bind(&r.user_id)
            .bind(&r.user_email)
            .bind(&r.api_key_id)
            .bind(&r.agent)
            .bind(&r.device_id)
            .bind(&r.server)
            .bind(&r.tool)
            .bind(&r.exposed_name)
            .bind(&r.class)
            .bind(&r.mode)
            .bind(&r.decision)
            .bind(&r.reason)
            .bind(&r.approval_id)
            .bind(&r.outcome)
            .bind(r.latency_ms)
            .bind(&r.arguments_sha256)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    /// Audit records matching `f`, newest first, at most `f.limit + 1` (one
    /// more than a page, so the caller knows whether another page follows).
    pub async fn list_mcp_calls(&self, f: &CallFilter) -> Result<Vec<McpCallRecord>, sqlx::Error> {
        let mut sql = String::from(
            "SELECT id, created_at, request_id, user_id, user_email, api_key_id, agent, device_id, \
             server, tool, exposed_name, class, mode, decision, reason, approval_id, outcome, \
             latency_ms, arguments_sha256 FROM mcp_calls WHERE 1 = 1",
        );
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        if f.from.is_some() {
            sql += &format!(" AND created_at >= {}", next());
        }
        if f.to.is_some() {
            sql += &format!(" AND created_at < {}", next());
        }
        for (col, v) in [
            ("server", &f.server),
            ("user_email", &f.user),
            ("agent", &f.agent),
            ("api_key_id", &f.api_key),
        ] {
            if v.is_some() {
                sql += &format!(" AND {col} = {}", next());
            }
        }
        if f.decision.is_some() {
            sql += &format!(" AND decision = {}", next());
        }
        if f.after.is_some() {
            let (a, b, c) = (next(), next(), next());
            sql += &format!(" AND (created_at < {a} OR (created_at = {b} AND id < {c}))");
        }
        sql += &format!(" ORDER BY created_at DESC, id DESC LIMIT {}", next());
        let mut q = sqlx::query_as::<_, McpCallRecord>(&sql);
        if let Some(v) = f.from {
            q = q.bind(v);
        }
        if let Some(v) = f.to {
            q = q.bind(v);
        }
        for v in [&f.server, &f.user, &f.agent, &f.api_key]
            .into_iter()
            .flatten()
        {
            q = q.bind(v.clone());
        }
        if let Some(d) = f.decision {
            q = q.bind(d.as_str());
        }
        if let Some((at, id)) = &f.after {
            q = q.bind(*at).bind(*at).bind(id.clone());
        }
        q.bind(i64::from(f.limit) + 1).fetch_all(&self.pool).await
    }

    /// Ends a session on every server: `id_hash` is the SHA-256 of its id.
    pub async fn end_mcp_session(&self, id_hash: &str, expires_at: i64) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO mcp_ended_sessions (id_hash, ended_at, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (id_hash) DO NOTHING",
        )
        .bind(id_hash)
        .bind(now_ms())
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn mcp_session_ended(&self, id_hash: &str) -> Result<bool, sqlx::Error> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM mcp_ended_sessions WHERE id_hash = $1")
                .bind(id_hash)
                .fetch_one(&self.pool)
                .await?;
        Ok(n > 0)
    }

    /// Sessions ended at or after `since` (Unix ms), oldest first, as
    /// `(id_hash, ended_at, expires_at)`: what a server polls to keep its
    /// in-memory set of ended sessions current.
    pub async fn mcp_sessions_ended_since(
        &self,
        since: i64,
    ) -> Result<Vec<(String, i64, i64)>, sqlx::Error> {
        sqlx::query_as(
            "SELECT id_hash, ended_at, expires_at FROM mcp_ended_sessions WHERE ended_at >= $1
             ORDER BY ended_at",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await
    }

    /// Forgets sessions past their lifetime (their ids are refused anyway).
    pub async fn purge_mcp_ended_sessions(&self, now: i64) -> Result<u64, sqlx::Error> {
        Ok(
            sqlx::query("DELETE FROM mcp_ended_sessions WHERE expires_at <= $1")
                .bind(now)
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
    }
}
