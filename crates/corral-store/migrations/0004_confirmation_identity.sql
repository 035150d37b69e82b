-- Confirmations belong to the requester's full identity (where its credential came from,
-- person or service, and its id: `token:service:agent`, `jwt:<issuer>:person:ada`), not to the
-- id alone, so a JWT with `sub: agent` can neither approve nor list the action of the static
-- token `agent`. Rows raised before this migration have no identity (NULL): they match nobody
-- (fail closed) and expire with their TTL.
ALTER TABLE confirmations ADD COLUMN requester_identity TEXT;

-- Listing one requester's actions, and counting its pending ones (`guardrails.max_pending`).
CREATE INDEX confirmations_tenant_identity ON confirmations (tenant, requester_identity, state, expires_ms);
