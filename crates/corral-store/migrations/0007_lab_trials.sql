-- The lab (issue 14): a scored run's trial counts and its pass@k and pass^k (k = the run's
-- `trials`). NULL for a run that was not scored ("executed, not scored" is never a pass) and for
-- runs recorded before this migration. Shared SQL for SQLite and PostgreSQL: one column per
-- statement (SQLite's ALTER TABLE adds one at a time); the estimates are TEXT in Rust's shortest
-- round-trip form, like every other lab float.
ALTER TABLE lab_runs ADD COLUMN trials_passed BIGINT;
ALTER TABLE lab_runs ADD COLUMN pass_at_k TEXT;
ALTER TABLE lab_runs ADD COLUMN pass_hat_k TEXT;
