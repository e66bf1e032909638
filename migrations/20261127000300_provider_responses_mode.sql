-- How a provider of type openai answers Responses requests (issue 32):
-- 'bridge' (translated to chat completions) or 'native' (its /responses).
-- Portable SQL: runs unchanged on SQLite and PostgreSQL. Existing providers
-- keep bridging, which is what they did (nothing) before: no change.
ALTER TABLE providers ADD COLUMN responses TEXT NOT NULL DEFAULT 'bridge';
