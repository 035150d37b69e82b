-- An audit event names the OpenTelemetry trace of its call when `telemetry:` exported one (32
-- hex digits), so an operator goes from a trace to its audit event and back. Older rows and
-- calls without an exported trace have NULL. Shared SQL for SQLite and PostgreSQL.
ALTER TABLE audit_events ADD COLUMN trace_id TEXT;
