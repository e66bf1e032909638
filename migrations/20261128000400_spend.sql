-- Spend in money (issue 34): versioned prices per (provider, upstream model),
-- and the cost fixed on each usage record. Portable SQL: runs unchanged on
-- SQLite and PostgreSQL. Amounts are whole nano-units (10^-9 of the currency)
-- in BIGINT. The new usage columns have defaults, so a server of the previous
-- version still writing during a rolling upgrade keeps working.
CREATE TABLE prices (
    version TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    upstream_model TEXT NOT NULL,
    input BIGINT NOT NULL,
    output BIGINT NOT NULL,
    cache_read BIGINT,
    cache_write BIGINT,
    reasoning BIGINT,
    request BIGINT,
    -- JSON: [{"above", "input", "output", "cache_read", "cache_write", "reasoning"}] in nanos.
    tiers TEXT NOT NULL DEFAULT '[]',
    effective_from BIGINT NOT NULL,
    effective_to BIGINT,
    -- Orders versions made in the same millisecond by creation.
    seq BIGINT NOT NULL
);
-- At most one current version per pair, whichever server writes it.
CREATE UNIQUE INDEX prices_current ON prices (provider, upstream_model) WHERE effective_to IS NULL;
CREATE INDEX prices_pair ON prices (provider, upstream_model, effective_from, seq);

ALTER TABLE usage_records ADD COLUMN request_id TEXT;
ALTER TABLE usage_records ADD COLUMN upstream_model TEXT;
ALTER TABLE usage_records ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN cost_nanos BIGINT;
ALTER TABLE usage_records ADD COLUMN cost_status TEXT NOT NULL DEFAULT 'none';
ALTER TABLE usage_records ADD COLUMN price_version TEXT;
CREATE INDEX usage_records_request_id ON usage_records (request_id);
