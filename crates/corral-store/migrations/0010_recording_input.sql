-- Recordings (issue 15): the task input a recorded run was given (JSON text, or NULL when none
-- was kept): a lab run's scenario inputs, or what a live session's orchestrator set with
-- `PUT /v1/sandbox/recordings/{run}/input`. Set once; replay re-runs the task from it. Shared
-- SQL for SQLite and PostgreSQL.
ALTER TABLE recordings ADD COLUMN input TEXT;
