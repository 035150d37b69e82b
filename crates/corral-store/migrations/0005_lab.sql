-- The lab (issue 14): scenarios, runs, per-step outputs and comparisons, every row owned by a
-- tenant. Shared SQL for SQLite and PostgreSQL (TEXT, BIGINT, INTEGER only): JSON is TEXT; free
-- text (a scenario's name and description, an output's input and output, a run's error
-- message) is a JSON string literal, so any text round-trips, NUL included (PostgreSQL's TEXT
-- refuses a raw NUL); booleans are INTEGER 0/1; floating-point numbers are TEXT in Rust's
-- shortest round-trip form (exact both ways); 64-bit seeds are TEXT in decimal (a u64 does not
-- fit BIGINT).
--
-- Keys start with the tenant, and every reference carries it, so a row can only ever point at a
-- row of its own tenant: the schema itself refuses a run of another tenant's scenario.

-- A scenario: mutable (an update replaces name, description, steps and mocks, and bumps
-- `version`). `steps` and `mocks` are JSON; the four together are clamped to 1 MiB.
CREATE TABLE lab_scenarios (
    tenant      TEXT   NOT NULL,
    id          TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    description TEXT   NOT NULL,
    steps       TEXT   NOT NULL,
    mocks       TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL,
    version     BIGINT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX lab_scenarios_newest ON lab_scenarios (tenant, created_ms, id);

-- A run of one scenario (at `scenario_version`) by one variant: `running` until it finishes
-- once (`completed`, `failed` or `cancelled`). A scenario with runs cannot be deleted.
CREATE TABLE lab_runs (
    tenant           TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    scenario_id      TEXT    NOT NULL,
    scenario_version BIGINT  NOT NULL,
    status           TEXT    NOT NULL,
    runner           TEXT    NOT NULL,
    backend          TEXT    NOT NULL,
    isolated         INTEGER NOT NULL,
    destroyed        INTEGER NOT NULL,
    steps_total      BIGINT  NOT NULL,
    steps_ok         BIGINT  NOT NULL,
    steps_error      BIGINT  NOT NULL,
    infra_errors     BIGINT  NOT NULL,
    purpose          TEXT    NOT NULL,
    variant          TEXT    NOT NULL,
    seed             TEXT    NOT NULL,
    trials           BIGINT,
    scorer_suite     TEXT,
    score            TEXT,
    verdict          TEXT    NOT NULL,
    error_code       TEXT,
    error_message    TEXT,
    mock_misses      TEXT    NOT NULL,
    principal        TEXT    NOT NULL,
    started_ms       BIGINT  NOT NULL,
    finished_ms      BIGINT,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, scenario_id) REFERENCES lab_scenarios (tenant, id)
);
CREATE INDEX lab_runs_newest ON lab_runs (tenant, started_ms, id);
CREATE INDEX lab_runs_by_scenario ON lab_runs (tenant, scenario_id, started_ms, id);

-- What a run's agent answered at each step of each trial: append-only (the crate has no UPDATE
-- or DELETE for this table), one row per (run, trial, step).
CREATE TABLE lab_outputs (
    tenant     TEXT    NOT NULL,
    run_id     TEXT    NOT NULL,
    trial      BIGINT  NOT NULL,
    step       BIGINT  NOT NULL,
    input      TEXT    NOT NULL,
    output     TEXT    NOT NULL,
    ok         INTEGER NOT NULL,
    error_code TEXT,
    score      TEXT,
    pass       INTEGER,
    created_ms BIGINT  NOT NULL,
    PRIMARY KEY (tenant, run_id, trial, step),
    FOREIGN KEY (tenant, run_id) REFERENCES lab_runs (tenant, id)
);

-- A recorded before/after comparison: append-only. The statistics result is `details` (JSON);
-- the columns beside it are what listings show and filter on.
CREATE TABLE lab_comparisons (
    tenant            TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    baseline_variant  TEXT    NOT NULL,
    baseline_runs     TEXT    NOT NULL,
    candidate_variant TEXT    NOT NULL,
    candidate_runs    TEXT    NOT NULL,
    scenarios         TEXT    NOT NULL,
    verdict           TEXT    NOT NULL,
    delta             TEXT    NOT NULL,
    lower_bound       TEXT    NOT NULL,
    upper_bound       TEXT    NOT NULL,
    margin            TEXT    NOT NULL,
    seed              TEXT    NOT NULL,
    resamples         BIGINT  NOT NULL,
    forced_by         TEXT,
    mcnemar_p         TEXT,
    wilson            TEXT,
    details           TEXT    NOT NULL,
    recorded_by       TEXT    NOT NULL,
    deploy            INTEGER NOT NULL,
    created_ms        BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX lab_comparisons_newest ON lab_comparisons (tenant, created_ms, id);
