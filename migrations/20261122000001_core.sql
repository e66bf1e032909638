-- Portable SQL: runs unchanged on SQLite and PostgreSQL. Text ids, BIGINT
-- integers (booleans as 0/1, timestamps as Unix milliseconds), TEXT for JSON.

CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    is_admin BIGINT NOT NULL DEFAULT 0,
    is_active BIGINT NOT NULL DEFAULT 1,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    models TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT,
    last_used_at BIGINT
);
CREATE INDEX api_keys_user ON api_keys(user_id);

CREATE TABLE providers (
    name TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    base_url TEXT NOT NULL,
    api_key TEXT,
    timeout_s BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE models (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    provider TEXT NOT NULL REFERENCES providers(name),
    upstream_model TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE usage_records (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    user_id TEXT,
    api_key_id TEXT,
    agent TEXT,
    device_id TEXT,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    latency_ms BIGINT NOT NULL,
    status BIGINT NOT NULL,
    conversation_id TEXT,
    turn_id TEXT
);
CREATE INDEX usage_records_at ON usage_records(at);

CREATE TABLE agents (
    address TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    model TEXT NOT NULL,
    default_tool_mode TEXT NOT NULL,
    tool_contract TEXT NOT NULL,
    pii TEXT NOT NULL,
    allow_local_mcp BIGINT NOT NULL DEFAULT 0,
    instructions TEXT,
    allowed_users TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE sign_ins (
    device_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    agent TEXT NOT NULL,
    device_label TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    expires_at BIGINT NOT NULL,
    ended_at BIGINT,
    end_reason TEXT
);
CREATE INDEX sign_ins_user ON sign_ins(user_id);

-- One row per refresh token ever issued; state 'current' or 'used'.
CREATE TABLE refresh_tokens (
    token_hash TEXT PRIMARY KEY,
    device_id TEXT NOT NULL REFERENCES sign_ins(device_id),
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX refresh_tokens_device ON refresh_tokens(device_id);

-- Hashes of issued access-token identifiers, so an access token can be tied
-- to its sign-in without keeping the identifier itself.
CREATE TABLE access_tokens (
    jti_hash TEXT PRIMARY KEY,
    device_id TEXT NOT NULL REFERENCES sign_ins(device_id),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE TABLE manifests (
    agent TEXT NOT NULL,
    device_id TEXT NOT NULL,
    manifest_hash TEXT NOT NULL,
    body TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (agent, device_id)
);

CREATE TABLE manifest_hashes (
    agent TEXT NOT NULL,
    manifest_hash TEXT NOT NULL,
    first_seen_at BIGINT NOT NULL,
    PRIMARY KEY (agent, manifest_hash)
);

CREATE TABLE agent_tools (
    agent TEXT NOT NULL,
    name TEXT NOT NULL,
    class TEXT NOT NULL,
    description TEXT NOT NULL,
    status TEXT NOT NULL,
    first_seen_at BIGINT NOT NULL,
    PRIMARY KEY (agent, name)
);

CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    user_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    conversation_id TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    decided_at BIGINT
);
CREATE INDEX approvals_agent ON approvals(agent, status);
CREATE INDEX approvals_call ON approvals(user_id, tool_call_id);

CREATE TABLE events (
    seq_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    device_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    event_id TEXT,
    type TEXT NOT NULL,
    time TEXT,
    conversation_id TEXT,
    turn_id TEXT,
    data TEXT,
    received_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX events_device_event ON events(device_id, event_id);
CREATE INDEX events_agent ON events(agent, seq_id);

CREATE TABLE pii_vaults (
    conversation_key TEXT PRIMARY KEY,
    sealed TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
