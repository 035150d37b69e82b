-- Runs and their budgets, shared by every replica on the same database. Shared SQL for SQLite
-- and PostgreSQL (TEXT, BIGINT, INTEGER only).

-- One row per run: its owner (tenant, principal, purpose) and id, what it used, and what it did
-- to itself (`level`: the autonomy level it lowered itself to, 0-4 for L0-L4; `dry_run`: 0/1).
CREATE TABLE runs (
    tenant       TEXT    NOT NULL,
    principal    TEXT    NOT NULL,
    purpose      TEXT    NOT NULL,
    run_id       TEXT    NOT NULL,
    started_ms   BIGINT  NOT NULL,
    last_ms      BIGINT  NOT NULL,
    calls        BIGINT  NOT NULL,
    output_bytes BIGINT  NOT NULL,
    level        INTEGER,
    dry_run      INTEGER NOT NULL,
    PRIMARY KEY (tenant, principal, purpose, run_id)
);

-- A run's calls per op.
CREATE TABLE run_op_calls (
    tenant    TEXT   NOT NULL,
    principal TEXT   NOT NULL,
    purpose   TEXT   NOT NULL,
    run_id    TEXT   NOT NULL,
    op        TEXT   NOT NULL,
    calls     BIGINT NOT NULL,
    PRIMARY KEY (tenant, principal, purpose, run_id, op)
);
