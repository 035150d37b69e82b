-- Recordings keyed by the principal's identity (issue 15, attack findings F-2 and F-3): a
-- recording is (tenant, run id, identity), `identity` being `Principal::identity()`
-- (`token:service:bot`, `jwt:<issuer>:person:bot`, ...), so two principals never share one: a
-- JWT whose `sub` names a static token is not that token's principal (F-3), and a principal who
-- records a run id first cannot capture or hide the calls another principal records under the
-- same id (F-2): each gets its own recording.
--
-- Rows written before this migration name the principal's id only: their identity becomes
-- `legacy:<id>`, which no caller's identity ever is (identities start `token:`, `jwt:`,
-- `local:` or are `anonymous`), so only an admin reads them (fail closed).
--
-- `writer` is the epoch of the process whose recording writer last queued an event of it, or
-- NULL once that writer shut down cleanly having committed all it held; a recording whose writer
-- died (`recording_writers`) is marked `gapped`: its unflushed tail may be lost.
CREATE TABLE recordings_v2 (
    tenant     TEXT    NOT NULL,
    run_id     TEXT    NOT NULL,
    identity   TEXT    NOT NULL,
    principal  TEXT    NOT NULL,
    purpose    TEXT    NOT NULL,
    created_ms BIGINT  NOT NULL,
    updated_ms BIGINT  NOT NULL,
    events     BIGINT  NOT NULL,
    bytes      BIGINT  NOT NULL,
    capped     INTEGER NOT NULL,
    gapped     INTEGER NOT NULL,
    expires_ms BIGINT  NOT NULL,
    input      TEXT,
    writer     TEXT,
    PRIMARY KEY (tenant, run_id, identity)
);
INSERT INTO recordings_v2 (tenant, run_id, identity, principal, purpose, created_ms, updated_ms,
    events, bytes, capped, gapped, expires_ms, input, writer)
SELECT tenant, run_id, 'legacy:' || principal, principal, purpose, created_ms, updated_ms,
    events, bytes, capped, gapped, expires_ms, input, NULL FROM recordings;

CREATE TABLE recording_events_v2 (
    tenant      TEXT   NOT NULL,
    run_id      TEXT   NOT NULL,
    identity    TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    op          TEXT   NOT NULL,
    args        TEXT   NOT NULL,
    response    TEXT,
    error_code  TEXT,
    attestation TEXT,
    started_ms  BIGINT NOT NULL,
    duration_us BIGINT NOT NULL,
    PRIMARY KEY (tenant, run_id, identity, seq),
    FOREIGN KEY (tenant, run_id, identity) REFERENCES recordings_v2 (tenant, run_id, identity)
);
INSERT INTO recording_events_v2 (tenant, run_id, identity, seq, op, args, response, error_code,
    attestation, started_ms, duration_us)
SELECT e.tenant, e.run_id, 'legacy:' || r.principal, e.seq, e.op, e.args, e.response,
    e.error_code, e.attestation, e.started_ms, e.duration_us
FROM recording_events e JOIN recordings r ON r.tenant = e.tenant AND r.run_id = e.run_id;

DROP TABLE recording_events;
DROP TABLE recordings;
ALTER TABLE recordings_v2 RENAME TO recordings;
ALTER TABLE recording_events_v2 RENAME TO recording_events;
CREATE INDEX recordings_newest ON recordings (tenant, created_ms, run_id, identity);
CREATE INDEX recordings_expiry ON recordings (expires_ms);
CREATE INDEX recordings_writer ON recordings (writer);

-- The recording writers of processes (one per process that records): `epoch` is unique per
-- process start; `host` (the kernel's boot id) and `pid`/`pid_start` (the process's start time
-- in clock ticks) let a process on the same host tell a dead writer at once, `seen_ms` (its
-- heartbeat) a writer of another host. A clean shutdown deletes its row.
CREATE TABLE recording_writers (
    epoch      TEXT   NOT NULL PRIMARY KEY,
    host       TEXT   NOT NULL,
    pid        BIGINT NOT NULL,
    pid_start  BIGINT NOT NULL,
    started_ms BIGINT NOT NULL,
    seen_ms    BIGINT NOT NULL
);
