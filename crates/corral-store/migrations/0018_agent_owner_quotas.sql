-- The agents host's per-owner quotas (issue 17): a session create and an agent save count the
-- owner's rows in the same statement that inserts, so these indexes keep that count cheap.
-- Shared SQL for SQLite and PostgreSQL.
CREATE INDEX agent_sessions_owner ON agent_sessions (tenant, owner);
CREATE INDEX agent_defs_owner ON agent_defs (tenant, owner);

-- The agent CLI's own session id after a session's last turn (what `codex exec resume` takes),
-- so that any process (after a restart, on another replica) resumes the agent's conversation.
ALTER TABLE agent_sessions ADD COLUMN cli_thread TEXT;
