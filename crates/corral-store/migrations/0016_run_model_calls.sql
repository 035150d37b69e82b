-- One model call in flight per run with a token budget (issue 16), shared by every replica on
-- the database: a run's tokens are charged only once its model call ended, so a second call
-- checked while one is in flight (on this replica or another) would pass on a stale count.
-- The call that holds a run's lease has its row: `holder`, an id unique to that call;
-- `expires_ms`, when the lease lapses unless the holder renews it (it does every few seconds
-- while its call runs), so a replica that died mid-call blocks its run for a short while only.
-- Its call deletes the row when it ends. Shared SQL for SQLite and PostgreSQL.
CREATE TABLE run_model_calls (
    tenant     TEXT   NOT NULL,
    principal  TEXT   NOT NULL,
    purpose    TEXT   NOT NULL,
    run_id     TEXT   NOT NULL,
    holder     TEXT   NOT NULL,
    expires_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, principal, purpose, run_id)
);
