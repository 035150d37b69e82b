-- Guardrails. Shared SQL for SQLite and PostgreSQL (TEXT, BIGINT, INTEGER only).

-- Audit events name the confirmation action and the run they belong to, and what a guard step
-- decided (`approve`/`deny`, the budget, the level, the role).
ALTER TABLE audit_events ADD COLUMN action_id TEXT;
ALTER TABLE audit_events ADD COLUMN run_id TEXT;
ALTER TABLE audit_events ADD COLUMN detail TEXT;

-- One row per action a guarded call raised: pending -> approved|denied, approved -> running ->
-- done (with the stored outcome). `args` is the canonical JSON (RFC 8785) that was shown and
-- that runs.
CREATE TABLE confirmations (
    action_id      TEXT   NOT NULL PRIMARY KEY,
    key_hash       TEXT   NOT NULL,
    tenant         TEXT   NOT NULL,
    requester      TEXT   NOT NULL,
    requester_kind TEXT   NOT NULL,
    op             TEXT   NOT NULL,
    op_version     TEXT   NOT NULL,
    tier           TEXT   NOT NULL,
    reason         TEXT   NOT NULL,
    args           TEXT   NOT NULL,
    state          TEXT   NOT NULL,
    created_ms     BIGINT NOT NULL,
    expires_ms     BIGINT NOT NULL,
    decided_ms     BIGINT,
    decided_by     TEXT,
    outcome        TEXT,
    finished_ms    BIGINT
);
CREATE INDEX confirmations_tenant_requester ON confirmations (tenant, requester, expires_ms);

-- The live action of each key; replaced only once the action it points at has expired, so two
-- replicas raising the same call concurrently end up with one action.
CREATE TABLE confirmation_keys (
    key_hash   TEXT   NOT NULL PRIMARY KEY,
    action_id  TEXT   NOT NULL,
    expires_ms BIGINT NOT NULL
);

-- A live approval. Consuming it deletes the row: a row can be deleted once, so an approval
-- runs its call once, whatever the number of retries and replicas.
CREATE TABLE confirmation_approvals (
    action_id  TEXT   NOT NULL PRIMARY KEY,
    key_hash   TEXT   NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX confirmation_approvals_key ON confirmation_approvals (key_hash);
