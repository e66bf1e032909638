-- A password change ends every login token issued before it: tokens carry
-- their issue time in milliseconds, refused when older than this stamp.
ALTER TABLE users ADD COLUMN tokens_valid_after BIGINT NOT NULL DEFAULT 0;
