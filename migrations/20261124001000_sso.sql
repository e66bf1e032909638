-- Single sign-on (OpenID Connect). Portable SQL as in the core migration.

-- Providers; the client secret only sealed (AES-256-GCM, key from the gateway secret).
CREATE TABLE sso_providers (
    name TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    client_secret_sealed TEXT NOT NULL,
    scopes TEXT NOT NULL,
    allowed_domains TEXT NOT NULL,
    admin_group TEXT,
    groups_claim TEXT NOT NULL,
    create_users BIGINT NOT NULL,
    app_redirect_uris TEXT NOT NULL,
    from_config BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Sign-ins on their way through a provider, by the hash of the gateway's
-- state. In the database, so the callback may reach another server.
CREATE TABLE sso_states (
    state_hash TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    sealed TEXT NOT NULL,
    app_redirect_uri TEXT,
    app_state TEXT,
    app_code_challenge TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sso_states_expires ON sso_states(expires_at);

-- One-time gtc_ codes for agent apps, by hash.
CREATE TABLE sso_codes (
    code_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    redirect_uri TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sso_codes_expires ON sso_codes(expires_at);
