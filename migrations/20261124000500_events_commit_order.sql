-- Events are paged in the order they were stored (committed), also across
-- servers: each agent has a counter whose row lock a storing transaction
-- holds until it commits, so commit_seq grows in commit order.
CREATE TABLE event_counters (
    agent TEXT PRIMARY KEY,
    last BIGINT NOT NULL
);
ALTER TABLE events ADD COLUMN commit_seq BIGINT;
UPDATE events SET commit_seq = (
    SELECT COUNT(*) FROM events e2 WHERE e2.agent = events.agent AND e2.seq_id <= events.seq_id
);
INSERT INTO event_counters (agent, last) SELECT agent, MAX(commit_seq) FROM events GROUP BY agent;
CREATE UNIQUE INDEX events_agent_commit ON events(agent, commit_seq);
