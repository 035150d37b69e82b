-- An agent session's held writes (issue 17, `confirm_writes_outside`), kept in the store so any
-- replica applies a hold another made. `agent_holds` is one hold: `pending` until a person's
-- approved apply claims it (`applying`, `claimed_by` the claim's id, until `lease_until_ms`:
-- a replica that dies mid-apply lets the lease lapse, and another claims it again); an
-- applied hold's rows are deleted, a failed apply puts it back to `pending`.
-- `agent_hold_entries` is its content, one row per entry numbered from 1: `kind` `file`,
-- `dir`, `symlink` or `delete`, `path` relative to the workdir (checked when stored and again
-- when read), `mode` permission bits only, `content` a file's bytes or a symlink's target.
-- `agent_sessions.hold_claim` and `hold_lease_until_ms` are the running apply's claim on its
-- session: while its lease runs no turn starts and no other hold of the session is claimed,
-- and while a turn runs no apply claims (one writer of a workdir at a time, across replicas). `BYTEA` is PostgreSQL's bytes type; SQLite keeps a blob in any column.
-- Shared SQL for SQLite and PostgreSQL.
CREATE TABLE agent_holds (
    tenant         TEXT   NOT NULL,
    session_id     TEXT   NOT NULL,
    hold           TEXT   NOT NULL,
    status         TEXT   NOT NULL,
    claimed_by     TEXT,
    lease_until_ms BIGINT,
    created_ms     BIGINT NOT NULL,
    bytes          BIGINT NOT NULL,
    entries        BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id, hold)
);

CREATE TABLE agent_hold_entries (
    tenant     TEXT   NOT NULL,
    session_id TEXT   NOT NULL,
    hold       TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    path       TEXT   NOT NULL,
    mode       BIGINT NOT NULL,
    content    BYTEA  NOT NULL,
    PRIMARY KEY (tenant, session_id, hold, seq)
);

ALTER TABLE agent_sessions ADD COLUMN hold_claim TEXT;
ALTER TABLE agent_sessions ADD COLUMN hold_lease_until_ms BIGINT;
