-- The lease of a running action's runner (issue 20's kill -9 fault): `consume` sets it, the
-- request running the op renews it, and once it has run out (the process died before storing
-- the outcome) a retry stores "interrupted, may have partly run" instead of waiting on an
-- action nobody will finish. NULL for actions consumed before this migration: never abandoned.
ALTER TABLE confirmations ADD COLUMN running_until_ms BIGINT;
