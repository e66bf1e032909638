-- Agent sign-in lookups that would otherwise scan whole tables: pruning a
-- device's expired access-token ids at each renewal, and finding an agent's
-- live sign-ins when its allowed_users list changes.
CREATE INDEX access_tokens_device ON access_tokens(device_id);
CREATE INDEX sign_ins_agent ON sign_ins(agent);
