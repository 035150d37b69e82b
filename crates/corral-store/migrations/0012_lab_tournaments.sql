-- The lab (issue 15 item 6): graded tournaments. A tournament's answer (its ranking, position
-- bias, judge calls, errors, pairs not judged, the verdict between the top two) is kept as the
-- lab computed it, as JSON in `details`; the store does not read into it. Tenant-scoped, read
-- by id. Shared SQL for SQLite and PostgreSQL.
CREATE TABLE lab_tournaments (
    tenant      TEXT   NOT NULL,
    id          TEXT   NOT NULL,
    recorded_by TEXT   NOT NULL,
    details     TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant, id)
);
