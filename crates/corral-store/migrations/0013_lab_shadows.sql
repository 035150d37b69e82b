-- Shadow evaluations (issue 15 items 3-5): N variants x M recorded tasks re-run as replay runs.
-- One row per evaluation, owned by a tenant; `tasks` and `variants` (JSON lists) are what was
-- asked, `runs` (JSON: per variant, the run id of each task, `null` where none ran) and
-- `not_run` (JSON: the (variant, task) pairs a ceiling stopped) what happened, `report` (JSON)
-- the divergences and metering. Updated as runs finish (`running`), then once more when it ends.
-- Shared SQL for SQLite and PostgreSQL.
CREATE TABLE lab_shadows (
    tenant      TEXT   NOT NULL,
    id          TEXT   NOT NULL,
    principal   TEXT   NOT NULL,
    status      TEXT   NOT NULL,
    planned     BIGINT NOT NULL,
    ran         BIGINT NOT NULL,
    tasks       TEXT   NOT NULL,
    variants    TEXT   NOT NULL,
    runs        TEXT   NOT NULL,
    not_run     TEXT   NOT NULL,
    report      TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL,
    finished_ms BIGINT,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX lab_shadows_newest ON lab_shadows (tenant, created_ms, id);
