-- A cancel asked for a session's running turn (`agent.session.input.cancel`), on whichever
-- replica the request reached: the number of the turn it ends (`turns` when it was asked). The
-- replica running that turn polls it and ends the turn; the turn's own task records the end,
-- so the session's events show it once. A claim or an end clears it; a cancel of a turn no
-- longer running matches nothing. Shared SQL for SQLite and PostgreSQL.
ALTER TABLE agent_sessions ADD COLUMN cancel_turn BIGINT;
