-- One row per decided call. Append-only: corral never updates or deletes a row.
-- The SQL is shared by SQLite and PostgreSQL, so it sticks to types both understand:
-- TEXT (JSON documents are stored as TEXT), BIGINT and INTEGER.
CREATE TABLE audit_events (
    request_id     TEXT    NOT NULL PRIMARY KEY,
    tenant         TEXT    NOT NULL,
    ts_ms          BIGINT  NOT NULL,
    principal_id   TEXT    NOT NULL,
    principal_kind TEXT    NOT NULL,
    act_chain      TEXT    NOT NULL,
    op             TEXT    NOT NULL,
    outcome        TEXT    NOT NULL,
    code           TEXT,
    rule           TEXT,
    args_hash      TEXT    NOT NULL,
    args_shape     TEXT    NOT NULL,
    status         INTEGER NOT NULL,
    duration_us    BIGINT  NOT NULL,
    attestation    TEXT
);

CREATE INDEX audit_events_tenant_ts ON audit_events (tenant, ts_ms);
CREATE INDEX audit_events_ts ON audit_events (ts_ms);
