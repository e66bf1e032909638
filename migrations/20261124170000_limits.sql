-- Limits and budgets (docs/limits.md). Portable SQL, like 20261122000001_core.sql.

-- The `limits` object of a key, user or agent as JSON text; NULL = no limit.
ALTER TABLE api_keys ADD COLUMN limits TEXT;
ALTER TABLE users ADD COLUMN limits TEXT;
ALTER TABLE agents ADD COLUMN limits TEXT;

-- Cluster-wide counts. subject: 'k:<key id>', 'u:<user id>', 'a:<agent>',
-- 's:<device id>'. metric: 'r' requests and 't' tokens per second (win =
-- Unix second), 'd' tokens per UTC day (win = days since 1970-01-01).
-- Every server adds its counts here; the sum is the cluster's.
CREATE TABLE limit_counters (
    subject TEXT NOT NULL,
    metric TEXT NOT NULL,
    win BIGINT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (subject, metric, win)
);
CREATE INDEX limit_counters_win ON limit_counters(metric, win);

-- Requests running now, per subject and server (max_parallel across servers).
CREATE TABLE limit_in_flight (
    subject TEXT NOT NULL,
    server_id TEXT NOT NULL,
    n BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (subject, server_id)
);

-- Live servers, so each knows how many share a limit.
CREATE TABLE limit_servers (
    server_id TEXT PRIMARY KEY,
    seen_at BIGINT NOT NULL
);

-- Login throttle shared by every server: one row per counted failure; the
-- key row is locked while an attempt is counted, so attempts arriving at
-- once on several servers are counted one after the other.
CREATE TABLE login_throttle_keys (
    key TEXT PRIMARY KEY,
    touched_at BIGINT NOT NULL
);
CREATE TABLE login_failures (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX login_failures_key ON login_failures(key, at);
