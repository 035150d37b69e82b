-- Audit events say whether the call acted on the world (`live`) or ran against a lab's mocks
-- (`simulation`): the purpose of the gateway that decided it. Rows written before this migration
-- were all live calls, and read back as `live`. Shared SQL for SQLite and PostgreSQL.
ALTER TABLE audit_events ADD COLUMN purpose TEXT NOT NULL DEFAULT 'live';
