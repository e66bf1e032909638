-- Usage records without a primary key (issue 18). A record is written for
-- every request; each index on the table is one more B-tree insert per
-- record. The id is made by the gateway (time-ordered and random, never
-- looked up), so its unique index bought nothing. Portable SQL: runs
-- unchanged on SQLite and PostgreSQL; every row and the `at` index are kept.
--
-- The old table is renamed first: on PostgreSQL that takes its lock for the
-- whole migration, so a server of the previous version still running during
-- a rolling upgrade waits for the copy and then writes into the new table
-- (its INSERT names the same columns) rather than into the table being
-- dropped. Dropping the old table drops its indexes, so the new index can
-- take the old name.

ALTER TABLE usage_records RENAME TO usage_records_old;
CREATE TABLE usage_records (
    id TEXT,
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
    turn_id TEXT,
    provider TEXT
);
INSERT INTO usage_records (id, at, user_id, api_key_id, agent, device_id, model, kind,
        prompt_tokens, completion_tokens, latency_ms, status, conversation_id, turn_id, provider)
    SELECT id, at, user_id, api_key_id, agent, device_id, model, kind,
        prompt_tokens, completion_tokens, latency_ms, status, conversation_id, turn_id, provider
    FROM usage_records_old;
DROP TABLE usage_records_old;
CREATE INDEX usage_records_at ON usage_records(at);
