-- Usage records name the inbound dialect of a chat request (`chat` or
-- `messages`) and keep cache read and cache write tokens apart (issue 31,
-- "Usage, one convention": prompt_tokens includes both). Portable SQL: runs
-- unchanged on SQLite and PostgreSQL. The new columns have defaults, so a
-- server of the previous version still writing during a rolling upgrade
-- (its INSERT does not name them) keeps working.
ALTER TABLE usage_records ADD COLUMN api TEXT;
ALTER TABLE usage_records ADD COLUMN cache_read_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
