-- The web console's sessions (issue 19): one row per signed-in browser, shared by replicas.
-- `id_hash` is the SHA-256 (hex) of the session's secret id: the id itself lives only in the
-- browser's cookie. `proof` is what re-authenticates the principal on each request (never the
-- token: corral-runtime's `SessionProof`, as corral-server writes it). Shared SQL for SQLite
-- and PostgreSQL.
CREATE TABLE ui_sessions (
    id_hash TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    proof TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    seen_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX ui_sessions_identity ON ui_sessions (identity, created_ms);
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_ms);
