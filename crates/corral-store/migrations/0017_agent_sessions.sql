-- The agents host (issue 17): saved agents, sessions (each one a run: its id is the run id) and
-- each session's events, append-only and numbered from 1 per session. JSON columns hold what the
-- API returns (metadata, usage, attestation, an event's body); an event never holds a secret (the
-- runtime drops argument values and model text the audit would not keep). `worker` is the
-- executing process's recording-writer epoch, as for lab runs (migration 0015): a dead process's
-- `in_progress` sessions become `failed` with `agents.interrupted`. `turns` counts the turns
-- started, `events` the events appended (the next event's number is `events + 1`).
-- Shared SQL for SQLite and PostgreSQL.
CREATE TABLE agent_defs (
    tenant       TEXT   NOT NULL,
    id           TEXT   NOT NULL,
    owner        TEXT   NOT NULL,
    model        TEXT   NOT NULL,
    name         TEXT,
    instructions TEXT,
    metadata     TEXT   NOT NULL,
    created_ms   BIGINT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX agent_defs_newest ON agent_defs (tenant, created_ms, id);

CREATE TABLE agent_sessions (
    tenant         TEXT   NOT NULL,
    id             TEXT   NOT NULL,
    owner          TEXT   NOT NULL,
    adapter        TEXT   NOT NULL,
    model          TEXT   NOT NULL,
    agent_id       TEXT,
    workdir        TEXT   NOT NULL,
    metadata       TEXT   NOT NULL,
    status         TEXT   NOT NULL,
    error_code     TEXT,
    error_message  TEXT,
    turns          BIGINT NOT NULL,
    events         BIGINT NOT NULL,
    usage          TEXT   NOT NULL,
    attestation    TEXT   NOT NULL,
    worker         TEXT,
    created_ms     BIGINT NOT NULL,
    last_active_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX agent_sessions_newest ON agent_sessions (tenant, created_ms, id);
CREATE INDEX agent_sessions_worker ON agent_sessions (worker);

CREATE TABLE agent_session_events (
    tenant     TEXT   NOT NULL,
    session_id TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    body       TEXT   NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
);
