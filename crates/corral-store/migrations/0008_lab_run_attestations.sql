-- The lab (issue 14): what the isolation backend applied to the programs a run started (an
-- external program's steps, a command scorer's outputs), as a JSON list of distinct
-- `{backend, isolated, destroyed, primitives}`; `[]` for an in-process run and for runs recorded
-- before this migration. Shared SQL for SQLite and PostgreSQL.
ALTER TABLE lab_runs ADD COLUMN attestations TEXT NOT NULL DEFAULT '[]';
