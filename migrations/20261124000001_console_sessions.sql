-- Web console sessions: the cookie carries a random secret; only its hash is
-- stored, with the session's own CSRF token. Ending a session deletes its row.
CREATE TABLE console_sessions (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    csrf_token TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions(user_id);

-- Every live sign-in, newest first (the admin's list without filters).
CREATE INDEX sign_ins_created ON sign_ins(created_at);
