-- Usage records without a primary key (issue 18). A record is written for
-- every request; each index on the table is one more B-tree insert per
-- record. The id is made by the gateway (time-ordered and random, never
-- looked up), so its unique index bought nothing. Portable SQL: runs
-- unchanged on SQLite and PostgreSQL; rows and the `at` index are kept.
-- Servers of the previous version keep writing during a rolling upgrade:
-- their INSERT names the same columns.

CREATE TABLE usage_records_new (
    id TEXT NOT NULL,
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
INSERT INTO usage_records_new (id, at, user_id, api_key_id, agent, device_id, model, kind,
        prompt_tokens, completion_tokens, latency_ms, status, conversation_id, turn_id, provider)
    SELECT id, at, user_id, api_key_id, agent, device_id, model, kind,
        prompt_tokens, completion_tokens, latency_ms, status, conversation_id, turn_id, provider
    FROM usage_records;
DROP TABLE usage_records;
ALTER TABLE usage_records_new RENAME TO usage_records;
CREATE INDEX usage_records_at ON usage_records(at);
