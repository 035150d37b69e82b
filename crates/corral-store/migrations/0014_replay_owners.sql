-- What a replay draws from a recording stays the recording's (issue 15, attack finding X-1, and
-- the identity of replay runs): a scenario a replay makes of a recorded task (its task input, or
-- its call trajectory) is owned by the recording's principal, by identity (`owner`,
-- `Principal::identity()`); NULL is a tenant scenario, as every scenario made before. Only the
-- owner or an admin lists, reads, updates or runs an owned scenario.
--
-- A run keeps the identity of its principal beside its id (`identity`), so a replay run's
-- outputs are read by that identity, never the bare id (a JWT `sub: bot` is not the static token
-- `bot`). Runs made before this migration have none: their replay outputs are an admin's to
-- read (fail closed).
ALTER TABLE lab_scenarios ADD COLUMN owner TEXT;
ALTER TABLE lab_runs ADD COLUMN identity TEXT;
