-- Recordings (issue 15): the ordered call timeline of a run marked for recording, per (tenant,
-- run id). Shared SQL for SQLite and PostgreSQL (TEXT, BIGINT, INTEGER only): JSON is TEXT;
-- booleans are INTEGER 0/1. Unlike the audit, a recording holds values (canonical arguments and
-- responses); reading one needs the `admin` role or the run's own principal.
--
-- A recording is never silently truncated: the event that would pass its size cap is not stored
-- and `capped` is set (no event is stored after it); an event that could not be written sets
-- `gapped`. `expires_ms` is when retention deletes it (`purge_recordings`).
CREATE TABLE recordings (
    tenant     TEXT    NOT NULL,
    run_id     TEXT    NOT NULL,
    principal  TEXT    NOT NULL,
    purpose    TEXT    NOT NULL,
    created_ms BIGINT  NOT NULL,
    updated_ms BIGINT  NOT NULL,
    events     BIGINT  NOT NULL,
    bytes      BIGINT  NOT NULL,
    capped     INTEGER NOT NULL,
    gapped     INTEGER NOT NULL,
    expires_ms BIGINT  NOT NULL,
    PRIMARY KEY (tenant, run_id)
);
CREATE INDEX recordings_newest ON recordings (tenant, created_ms, run_id);
CREATE INDEX recordings_expiry ON recordings (expires_ms);

-- One decided call of a recorded run: `seq` from 1 without gaps, in the order written.
-- `response` is JSON or NULL (a refusal, an error, a stream's metadata-only event);
-- `attestation` is JSON or NULL.
CREATE TABLE recording_events (
    tenant      TEXT   NOT NULL,
    run_id      TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    op          TEXT   NOT NULL,
    args        TEXT   NOT NULL,
    response    TEXT,
    error_code  TEXT,
    attestation TEXT,
    started_ms  BIGINT NOT NULL,
    duration_us BIGINT NOT NULL,
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES recordings (tenant, run_id)
);
