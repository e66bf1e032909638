-- Anthropic as an upstream, and model aliases (issue 31). Portable SQL: runs
-- unchanged on SQLite and PostgreSQL. Existing rows keep working: providers
-- of other types leave both new columns NULL; models get no aliases and the
-- default max_tokens for Messages upstreams.

-- Sent as `anthropic-version` when the client sent none (NULL: 2023-06-01).
ALTER TABLE providers ADD COLUMN anthropic_version TEXT;
-- `forward`, `drop`, or a JSON array of allowed values (NULL: forward).
ALTER TABLE providers ADD COLUMN beta_headers TEXT;

-- A JSON array of names clients may send for the model (NULL: none).
ALTER TABLE models ADD COLUMN aliases TEXT;
-- `max_tokens` sent to an anthropic target when a chat request has none.
ALTER TABLE models ADD COLUMN max_tokens_default BIGINT NOT NULL DEFAULT 4096;
