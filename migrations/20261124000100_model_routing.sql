-- Several targets per model, routing, fallbacks and attempts (issue 13).
-- Portable SQL: runs unchanged on SQLite and PostgreSQL.
--
-- Existing models keep working unchanged: each gets its provider and
-- upstream_model as its one target (weight 1), routing 'weighted', no
-- fallbacks and 3 attempts. The models row keeps provider and upstream_model
-- as the first target, so a server of the previous version reading the same
-- database during a rolling upgrade still finds a place to send requests.

CREATE TABLE model_targets (
    model_id TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    ordinal BIGINT NOT NULL,
    provider TEXT NOT NULL REFERENCES providers(name),
    upstream_model TEXT NOT NULL,
    weight BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (model_id, ordinal)
);
CREATE INDEX model_targets_provider ON model_targets(provider);

INSERT INTO model_targets (model_id, ordinal, provider, upstream_model, weight)
    SELECT id, 0, provider, upstream_model, 1 FROM models;

ALTER TABLE models ADD COLUMN routing TEXT NOT NULL DEFAULT 'weighted';
-- A JSON array of model ids, tried in order; NULL: none.
ALTER TABLE models ADD COLUMN fallbacks TEXT;
ALTER TABLE models ADD COLUMN max_attempts BIGINT NOT NULL DEFAULT 3;

-- The provider that answered (NULL for requests refused before any upstream call).
ALTER TABLE usage_records ADD COLUMN provider TEXT;
