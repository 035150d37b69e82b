//! The run tables (migration 0003, and 0016's model-call leases): `impl RunStore for Store`, so
//! replicas sharing a database share each run's budgets and its one model call in flight.
//!
//! A charge is one transaction that reads the run's usage, checks it against the budgets with
//! the same `over_budget` as the in-memory ledger, and increments it; concurrent charges to one
//! run are serialised on its row (PostgreSQL: `SELECT ... FOR UPDATE`; SQLite: `BEGIN
//! IMMEDIATE` takes the write lock before anything is read), so no more than the budget pass.

use corral_policy::AutonomyLevel;
use corral_ports::runs::{
    Budgets, Exhausted, RunKey, RunStore, RunStoreError, RunView, Usage, over_budget,
};
use futures_core::future::BoxFuture;

use crate::{Pool, Store, StoreError};

/// The condition naming one run (a macro so `concat!` can use it): its key is `$1`-`$4`.
macro_rules! where_run {
    () => {
        "tenant = $1 AND principal = $2 AND purpose = $3 AND run_id = $4"
    };
}

const INSERT_RUN: &str = "INSERT INTO runs (tenant, principal, purpose, run_id, started_ms, \
    last_ms, calls, output_bytes, level, dry_run) VALUES ($1, $2, $3, $4, $5, $5, 0, 0, NULL, 0) \
    ON CONFLICT (tenant, principal, purpose, run_id) DO NOTHING";

const ENTER: &str = concat!(
    "UPDATE runs SET last_ms = $5, ",
    "level = CASE WHEN $6 < 0 THEN level WHEN level IS NULL OR level > $6 THEN $6 ELSE level END, ",
    "dry_run = CASE WHEN $7 = 1 THEN 1 ELSE dry_run END WHERE ",
    where_run!(),
    " RETURNING level, dry_run"
);

/// A run's usage; PostgreSQL locks the row (`FOR UPDATE`), SQLite's `BEGIN IMMEDIATE` already
/// holds the write lock.
const USAGE: &str = concat!(
    "SELECT started_ms, calls, output_bytes FROM runs WHERE ",
    where_run!()
);
const USAGE_LOCKED: &str = concat!(
    "SELECT started_ms, calls, output_bytes FROM runs WHERE ",
    where_run!(),
    " FOR UPDATE"
);

const OP_CALLS: &str = concat!(
    "SELECT calls FROM run_op_calls WHERE ",
    where_run!(),
    " AND op = $5"
);

const CHARGE: &str = concat!("UPDATE runs SET calls = calls + 1 WHERE ", where_run!());

const CHARGE_OP: &str = "INSERT INTO run_op_calls (tenant, principal, purpose, run_id, op, calls) \
    VALUES ($1, $2, $3, $4, $5, 1) ON CONFLICT (tenant, principal, purpose, run_id, op) \
    DO UPDATE SET calls = run_op_calls.calls + 1";

const REFUND: &str = concat!(
    "UPDATE runs SET calls = CASE WHEN calls > 0 THEN calls - 1 ELSE 0 END WHERE ",
    where_run!()
);

const REFUND_OP: &str = concat!(
    "UPDATE run_op_calls SET calls = CASE WHEN calls > 0 THEN calls - 1 ELSE 0 END WHERE ",
    where_run!(),
    " AND op = $5"
);

/// The `run_op_calls` row that counts a run's model tokens (`budgets.tokens`) in its `calls`
/// column: `#` is in no op id, so no op's count can be this row.
const TOKENS_ROW: &str = "#tokens";

const CHARGE_TOKENS: &str = "INSERT INTO run_op_calls (tenant, principal, purpose, run_id, op, \
    calls) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, principal, purpose, run_id, op) \
    DO UPDATE SET calls = run_op_calls.calls + $6";

const OUTPUT: &str = concat!(
    "UPDATE runs SET output_bytes = output_bytes + $5 WHERE ",
    where_run!()
);

fn level_number(l: AutonomyLevel) -> i32 {
    match l {
        AutonomyLevel::L0 => 0,
        AutonomyLevel::L1 => 1,
        AutonomyLevel::L2 => 2,
        AutonomyLevel::L3 => 3,
        AutonomyLevel::L4 => 4,
    }
}

fn level_of(n: i32) -> Option<AutonomyLevel> {
    match n {
        0 => Some(AutonomyLevel::L0),
        1 => Some(AutonomyLevel::L1),
        2 => Some(AutonomyLevel::L2),
        3 => Some(AutonomyLevel::L3),
        4 => Some(AutonomyLevel::L4),
        _ => None,
    }
}

fn port_error(e: StoreError) -> RunStoreError {
    RunStoreError(format!("{}: {e}", e.code()))
}

/// Binds a run key's four columns, in `WHERE_RUN` order.
macro_rules! bind_key {
    ($q:expr, $k:expr) => {
        $q.bind($k.tenant)
            .bind($k.principal)
            .bind($k.purpose.as_str())
            .bind($k.run_id)
    };
}

/// The charge's transaction body, for either pool's transaction type.
macro_rules! charge_in {
    ($tx:expr, $q:expr, $key:expr, $op:expr, $budgets:expr, $now:expr, $usage:expr) => {{
        let mut tx = $tx.map_err($q)?;
        let usage: Option<(i64, i64, i64)> = bind_key!(sqlx::query_as($usage), $key)
            .fetch_optional(&mut *tx)
            .await
            .map_err($q)?;
        let Some((started_ms, calls, output_bytes)) = usage else {
            // Every call opens its run before it is charged: a missing row is an error (fail
            // closed), never a free call.
            return Err(StoreError::QueryFailed {
                what: "charge a run",
                reason: "the run has no record (it was not opened, or was purged mid-call)"
                    .to_owned(),
            });
        };
        let op_calls: Option<i64> = bind_key!(sqlx::query_scalar(OP_CALLS), $key)
            .bind($op)
            .fetch_optional(&mut *tx)
            .await
            .map_err($q)?;
        let tokens: Option<i64> = bind_key!(sqlx::query_scalar(OP_CALLS), $key)
            .bind(TOKENS_ROW)
            .fetch_optional(&mut *tx)
            .await
            .map_err($q)?;
        let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
        let usage = Usage {
            calls: as_u64(calls),
            output_bytes: as_u64(output_bytes),
            op_calls: as_u64(op_calls.unwrap_or(0)),
            tokens: as_u64(tokens.unwrap_or(0)),
        };
        if let Some(e) = over_budget(started_ms, usage, $op, $budgets, $now) {
            tx.rollback().await.map_err($q)?;
            return Ok(Err(e));
        }
        bind_key!(sqlx::query(CHARGE), $key)
            .execute(&mut *tx)
            .await
            .map_err($q)?;
        bind_key!(sqlx::query(CHARGE_OP), $key)
            .bind($op)
            .execute(&mut *tx)
            .await
            .map_err($q)?;
        tx.commit().await.map_err($q)?;
        Ok(Ok(()))
    }};
}

/// Takes a run's model-call lease: a new row, or the row of a lease that expired (`$7`: now).
/// One statement, so concurrent takers on any replica serialise on the row: one gets it.
const LEASE: &str = "INSERT INTO run_model_calls (tenant, principal, purpose, run_id, holder, \
    expires_ms) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, principal, purpose, run_id) \
    DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms \
    WHERE run_model_calls.expires_ms <= $7 OR run_model_calls.holder = excluded.holder";

const RENEW: &str = concat!(
    "UPDATE run_model_calls SET expires_ms = $6 WHERE ",
    where_run!(),
    " AND holder = $5"
);

const RELEASE: &str = concat!(
    "DELETE FROM run_model_calls WHERE ",
    where_run!(),
    " AND holder = $5"
);

/// Leases that expired before the purge's horizon (their holder died without releasing).
const PURGE_LEASES: &str = "DELETE FROM run_model_calls WHERE expires_ms < $1";

const PURGE_RUN_OPS: &str = "DELETE FROM run_op_calls WHERE EXISTS (SELECT 1 FROM runs r \
    WHERE r.tenant = run_op_calls.tenant AND r.principal = run_op_calls.principal \
    AND r.purpose = run_op_calls.purpose AND r.run_id = run_op_calls.run_id AND r.last_ms < $1)";
const PURGE_RUNS: &str = "DELETE FROM runs WHERE last_ms < $1";

impl Store {
    /// Deletes the runs idle since before `idle_before_ms` (and their per-op counts); how many.
    pub async fn purge_runs(&self, idle_before_ms: i64) -> Result<u64, StoreError> {
        let q = |e| self.redactor.query("purge idle runs", e);
        on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(q)?;
            sqlx::query(PURGE_RUN_OPS).bind(idle_before_ms).execute(&mut *tx).await.map_err(q)?;
            sqlx::query(PURGE_LEASES).bind(idle_before_ms).execute(&mut *tx).await.map_err(q)?;
            let gone = sqlx::query(PURGE_RUNS).bind(idle_before_ms).execute(&mut *tx).await.map_err(q)?;
            tx.commit().await.map_err(q)?;
            Ok(gone.rows_affected())
        })
    }

    /// Opens (or creates) a run and applies what the call asks of it; see `RunStore::enter`.
    pub async fn enter_run(
        &self,
        key: &RunKey<'_>,
        now_ms: i64,
        lower_to: Option<AutonomyLevel>,
        dry_run: bool,
    ) -> Result<RunView, StoreError> {
        let q = |e| self.redactor.query("open a run", e);
        let lower = lower_to.map_or(-1, level_number);
        let (opened, (level, dry)): (bool, (Option<i32>, i32)) = on_pool!(&self.pool, p => {
            let inserted = bind_key!(sqlx::query(INSERT_RUN), key)
                .bind(now_ms)
                .execute(p)
                .await
                .map_err(q)?
                .rows_affected();
            let view = bind_key!(sqlx::query_as(ENTER), key)
                .bind(now_ms)
                .bind(lower)
                .bind(i32::from(dry_run))
                .fetch_one(p)
                .await
                .map_err(q)?;
            (inserted == 1, view)
        });
        Ok(RunView {
            level: level.and_then(level_of),
            dry_run: dry == 1,
            opened,
        })
    }

    /// Charges one call to `op` unless a budget is used up; see `RunStore::charge`.
    pub async fn charge_run(
        &self,
        key: &RunKey<'_>,
        op: &str,
        budgets: &Budgets,
        now_ms: i64,
    ) -> Result<Result<(), Exhausted>, StoreError> {
        let q = |e| self.redactor.query("charge a run", e);
        match &self.pool {
            Pool::Postgres(p) => {
                charge_in!(p.begin().await, q, key, op, budgets, now_ms, USAGE_LOCKED)
            }
            Pool::Sqlite(p) => {
                charge_in!(
                    p.begin_with("BEGIN IMMEDIATE").await,
                    q,
                    key,
                    op,
                    budgets,
                    now_ms,
                    USAGE
                )
            }
        }
    }

    /// Gives back a charged call that did not run.
    pub async fn refund_run(&self, key: &RunKey<'_>, op: &str) -> Result<(), StoreError> {
        let q = |e| self.redactor.query("refund a run's call", e);
        on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(q)?;
            bind_key!(sqlx::query(REFUND), key).execute(&mut *tx).await.map_err(q)?;
            bind_key!(sqlx::query(REFUND_OP), key).bind(op).execute(&mut *tx).await.map_err(q)?;
            tx.commit().await.map_err(q)
        })
    }

    /// Adds model tokens to a run (`budgets.tokens`).
    pub async fn charge_run_tokens(&self, key: &RunKey<'_>, tokens: u64) -> Result<(), StoreError> {
        let q = |e| self.redactor.query("meter a run's model tokens", e);
        let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        on_pool!(&self.pool, p => bind_key!(sqlx::query(CHARGE_TOKENS), key)
            .bind(TOKENS_ROW)
            .bind(tokens)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(q))
    }

    /// Takes the run's model-call lease for `holder`; see `RunStore::lease_model_call`.
    pub async fn lease_model_call(
        &self,
        key: &RunKey<'_>,
        holder: &str,
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<bool, StoreError> {
        let q = |e| self.redactor.query("lease a run's model call", e);
        on_pool!(&self.pool, p => bind_key!(sqlx::query(LEASE), key)
            .bind(holder)
            .bind(expires_ms)
            .bind(now_ms)
            .execute(p)
            .await
            .map(|r| r.rows_affected() == 1)
            .map_err(q))
    }

    /// Renews `holder`'s model-call lease; `false` when it no longer holds it.
    pub async fn renew_model_call(
        &self,
        key: &RunKey<'_>,
        holder: &str,
        expires_ms: i64,
    ) -> Result<bool, StoreError> {
        let q = |e| self.redactor.query("renew a run's model-call lease", e);
        on_pool!(&self.pool, p => bind_key!(sqlx::query(RENEW), key)
            .bind(holder)
            .bind(expires_ms)
            .execute(p)
            .await
            .map(|r| r.rows_affected() == 1)
            .map_err(q))
    }

    /// Gives `holder`'s model-call lease back.
    pub async fn release_model_call(
        &self,
        key: &RunKey<'_>,
        holder: &str,
    ) -> Result<(), StoreError> {
        let q = |e| self.redactor.query("release a run's model-call lease", e);
        on_pool!(&self.pool, p => bind_key!(sqlx::query(RELEASE), key)
            .bind(holder)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(q))
    }

    /// Adds result bytes to a run.
    pub async fn add_run_output(&self, key: &RunKey<'_>, bytes: u64) -> Result<(), StoreError> {
        let q = |e| self.redactor.query("meter a run's output", e);
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        on_pool!(&self.pool, p => bind_key!(sqlx::query(OUTPUT), key)
            .bind(bytes)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(q))
    }
}

impl RunStore for Store {
    fn backend(&self) -> &'static str {
        self.backend_name()
    }

    fn enter<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        now_ms: i64,
        lower_to: Option<AutonomyLevel>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<RunView, RunStoreError>> {
        Box::pin(async move {
            self.enter_run(key, now_ms, lower_to, dry_run)
                .await
                .map_err(port_error)
        })
    }

    fn charge<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        op: &'a str,
        budgets: &'a Budgets,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Result<(), Exhausted>, RunStoreError>> {
        Box::pin(async move {
            self.charge_run(key, op, budgets, now_ms)
                .await
                .map_err(port_error)
        })
    }

    fn refund<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        op: &'a str,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        Box::pin(async move { self.refund_run(key, op).await.map_err(port_error) })
    }

    fn add_output<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        bytes: u64,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        Box::pin(async move { self.add_run_output(key, bytes).await.map_err(port_error) })
    }

    fn charge_tokens<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        tokens: u64,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        Box::pin(async move {
            self.charge_run_tokens(key, tokens)
                .await
                .map_err(port_error)
        })
    }

    fn lease_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
        now_ms: i64,
        expires_ms: i64,
    ) -> BoxFuture<'a, Result<bool, RunStoreError>> {
        Box::pin(async move {
            Store::lease_model_call(self, key, holder, now_ms, expires_ms)
                .await
                .map_err(port_error)
        })
    }

    fn renew_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
        expires_ms: i64,
    ) -> BoxFuture<'a, Result<bool, RunStoreError>> {
        Box::pin(async move {
            Store::renew_model_call(self, key, holder, expires_ms)
                .await
                .map_err(port_error)
        })
    }

    fn release_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        Box::pin(async move {
            Store::release_model_call(self, key, holder)
                .await
                .map_err(port_error)
        })
    }
}
