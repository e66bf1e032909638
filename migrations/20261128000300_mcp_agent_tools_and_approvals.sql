-- Agents' tool rules reach MCP tools (#33).
-- Approvals come from agent chat ('chat') or from a tools/call on /mcp ('mcp').
-- An MCP approval names its server, has no tool call id ('' here, null in
-- views) and is used once: `used_at` marks the call it let through (or the
-- denied answer it gave).
ALTER TABLE approvals ADD COLUMN source TEXT NOT NULL DEFAULT 'chat';
ALTER TABLE approvals ADD COLUMN server TEXT;
ALTER TABLE approvals ADD COLUMN used_at BIGINT;
-- A tools/call looks up the latest approval of this user, agent, tool and arguments.
CREATE INDEX approvals_mcp_call ON approvals(agent, user_id, tool, created_at);

-- MCP tools seen for an agent sit beside the device tools, under their
-- exposed name on /mcp (`server__tool`); `parameters_hash` holds the hash of
-- description, input schema and class, so a change re-holds an accepted tool.
ALTER TABLE agent_tools ADD COLUMN source TEXT NOT NULL DEFAULT 'device';
ALTER TABLE agent_tools ADD COLUMN server TEXT;
