-- MCP gateway (issue 33, docs/mcp-admin.md). Portable SQL, like
-- 20261122000001_core.sql: runs unchanged on SQLite and PostgreSQL.

-- MCP servers ("upstreams") an admin configures. `headers` is one JSON object
-- of header name -> value, sealed (AES-256-GCM, HKDF label
-- `mcp-server-headers`); `header_names` is the sorted list of its names, kept
-- apart so listing never opens the sealed value. `tools` is a JSON array of
-- allow-list patterns, `tool_classes` a JSON object (upstream name -> class).
-- `source`: 'api' or 'config'.
CREATE TABLE mcp_servers (
    name TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    transport TEXT NOT NULL,
    timeout_s BIGINT NOT NULL,
    headers TEXT,
    header_names TEXT NOT NULL,
    tools TEXT NOT NULL,
    tool_classes TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The `mcp` grant of a key, user or agent as JSON text
-- (`{"servers":[...],"tools"?:{...}}`); NULL = no MCP access (the default).
ALTER TABLE api_keys ADD COLUMN mcp TEXT;
ALTER TABLE users ADD COLUMN mcp TEXT;
ALTER TABLE agents ADD COLUMN mcp TEXT;

-- One record per tools/call after authentication. Never arguments or
-- results: only their SHA-256. `user_email` is kept as it was at the call,
-- so the record reads the same after the user changes.
CREATE TABLE mcp_calls (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    request_id TEXT,
    user_id TEXT,
    user_email TEXT,
    api_key_id TEXT,
    agent TEXT,
    device_id TEXT,
    server TEXT,
    tool TEXT NOT NULL,
    exposed_name TEXT NOT NULL,
    class TEXT,
    mode TEXT,
    decision TEXT NOT NULL,
    reason TEXT,
    approval_id TEXT,
    outcome TEXT,
    latency_ms BIGINT NOT NULL,
    arguments_sha256 TEXT NOT NULL
);
CREATE INDEX mcp_calls_created ON mcp_calls(created_at, id);

-- Sessions ended by DELETE, by the SHA-256 of their id, until their
-- lifetime runs out (then the sealed id is refused anyway). Every server
-- reads rows newer than the last it saw (`ended_at`).
CREATE TABLE mcp_ended_sessions (
    id_hash TEXT PRIMARY KEY,
    ended_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX mcp_ended_sessions_ended ON mcp_ended_sessions(ended_at);
CREATE INDEX mcp_ended_sessions_expires ON mcp_ended_sessions(expires_at);
