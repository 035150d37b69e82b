-- Work left `running` by a dead process (issue 15): a shadow evaluation or a lab run is marked
-- with the epoch of the process executing it (`worker`, the process's recording writer epoch,
-- `recording_writers`). When that writer is found dead (at a process's start, and at each
-- heartbeat), its `running` shadow evaluations become `interrupted` and its `running` lab runs
-- `failed` with the code `lab.interrupted`; a clean shutdown does the same to its own (the
-- process will not finish them). NULL: written before this migration, or by a process without
-- a recording writer (never swept).
ALTER TABLE lab_shadows ADD COLUMN worker TEXT;
ALTER TABLE lab_runs ADD COLUMN worker TEXT;
CREATE INDEX lab_shadows_worker ON lab_shadows (worker);
CREATE INDEX lab_runs_worker ON lab_runs (worker);

-- Tournaments are listed newest first (`GET /v1/sandbox/tournaments`), like the other lab lists.
CREATE INDEX lab_tournaments_newest ON lab_tournaments (tenant, created_ms, id);

-- A replay's task scenario is reused per (recording, task input digest), found by its name.
CREATE INDEX lab_scenarios_name ON lab_scenarios (tenant, name);
