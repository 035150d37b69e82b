//! The confirmation tables: `impl ConfirmationStore for Store`, shared by every replica on the
//! same database and kept across restarts.
//!
//! Three tables (migration 0002): `confirmations` (one row per action, with its state and, once
//! done, its stored outcome), `confirmation_keys` (the live action of each key) and
//! `confirmation_approvals` (a live approval). The exactly-once step is `consume`, which deletes
//! the approval row and marks the action `running` in one atomic unit:
//! - PostgreSQL: one statement, `WITH used AS (DELETE ... RETURNING action_id) UPDATE ...`. Two
//!   replicas racing on the row: the second `DELETE` waits for the first to commit, re-checks
//!   the row, finds it gone and deletes nothing.
//! - SQLite: one `BEGIN IMMEDIATE` transaction (`DELETE ... RETURNING`, then `UPDATE`): the
//!   write lock is taken before anything is read, so no two transactions see the same row.
//!
//! Raising takes the key with an upsert that only replaces an *expired* pointer, so concurrent
//! raises of the same call on several replicas leave one action. In the same transaction it
//! counts the requester's live pending actions (by tenant and full identity, migration 0004)
//! and gives up at `max_pending`: SQLite's `BEGIN IMMEDIATE` serializes raises, and on
//! PostgreSQL a transaction-scoped advisory lock on the requester does, so concurrent raises of
//! one requester never pass the cap.
//!
//! Listing is paged by a keyset cursor (`created_ms`, `action_id`), in the index's order.

use corral_ports::confirm::{
    Action, ActionState, ConfirmationError, ConfirmationStore, Cursor, RUNNING_LEASE_MS, Raised,
    StoredOutcome,
};
use futures_core::future::BoxFuture;

use crate::{Pool, Store, StoreError};

/// The columns of `confirmations`, in `ActionRow` order.
macro_rules! action_columns {
    () => {
        "action_id, key_hash, tenant, requester, requester_kind, op, op_version, tier, reason, \
         args, state, created_ms, expires_ms, decided_ms, decided_by, outcome, requester_identity"
    };
}

/// The same, qualified with the table name (for `UPDATE ... FROM ... RETURNING`).
macro_rules! qualified_action_columns {
    () => {
        "confirmations.action_id, confirmations.key_hash, confirmations.tenant, \
         confirmations.requester, confirmations.requester_kind, confirmations.op, \
         confirmations.op_version, confirmations.tier, confirmations.reason, confirmations.args, \
         confirmations.state, confirmations.created_ms, confirmations.expires_ms, \
         confirmations.decided_ms, confirmations.decided_by, confirmations.outcome, \
         confirmations.requester_identity"
    };
}

const PURGE_APPROVALS: &str = "DELETE FROM confirmation_approvals WHERE expires_ms <= $1";
const PURGE_KEYS: &str = "DELETE FROM confirmation_keys WHERE expires_ms <= $1";
const PURGE_ACTIONS: &str = "DELETE FROM confirmations WHERE expires_ms <= $1";
const PG_CONSUME: &str = concat!(
    "WITH used AS (DELETE FROM confirmation_approvals WHERE key_hash = $1 AND expires_ms > $2 \
     RETURNING action_id) \
     UPDATE confirmations SET state = 'running', running_until_ms = $3 FROM used \
     WHERE confirmations.action_id = used.action_id RETURNING ",
    qualified_action_columns!()
);
const SQLITE_TAKE_APPROVAL: &str = "DELETE FROM confirmation_approvals \
     WHERE key_hash = $1 AND expires_ms > $2 RETURNING action_id";
const MARK_RUNNING: &str = concat!(
    "UPDATE confirmations SET state = 'running', running_until_ms = $2 WHERE action_id = $1 \
     RETURNING ",
    action_columns!()
);
const CURRENT: &str = concat!(
    "SELECT ",
    qualified_action_columns!(),
    " FROM confirmation_keys JOIN confirmations \
     ON confirmations.action_id = confirmation_keys.action_id \
     WHERE confirmation_keys.key_hash = $1 AND confirmations.expires_ms > $2"
);
const TAKE_KEY: &str = "INSERT INTO confirmation_keys (key_hash, action_id, expires_ms) \
     VALUES ($1, $2, $3) ON CONFLICT (key_hash) DO UPDATE \
     SET action_id = excluded.action_id, expires_ms = excluded.expires_ms \
     WHERE confirmation_keys.expires_ms <= $4";
const DROP_STALE_APPROVALS: &str = "DELETE FROM confirmation_approvals WHERE key_hash = $1";
const INSERT_ACTION: &str = concat!(
    "INSERT INTO confirmations (",
    action_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
);
const GET: &str = concat!(
    "SELECT ",
    action_columns!(),
    " FROM confirmations WHERE action_id = $1 AND tenant = $2"
);
const DECIDE: &str = "UPDATE confirmations SET state = $2, decided_ms = $3, decided_by = $4 \
     WHERE action_id = $1 AND state = 'pending' RETURNING key_hash, expires_ms";
const INSERT_APPROVAL: &str =
    "INSERT INTO confirmation_approvals (action_id, key_hash, expires_ms) VALUES ($1, $2, $3)";
/// A running action back to approved (its op did not start); its key and expiry.
const RELEASE: &str = "UPDATE confirmations SET state = 'approved', running_until_ms = NULL \
     WHERE action_id = $1 AND state = 'running' AND expires_ms > $2 RETURNING key_hash, expires_ms";
const FINISH: &str = "UPDATE confirmations SET state = 'done', outcome = $2, finished_ms = $3, \
     running_until_ms = NULL WHERE action_id = $1 AND state = 'running'";
const RENEW: &str = "UPDATE confirmations SET running_until_ms = $2 \
     WHERE action_id = $1 AND state = 'running'";
const ABANDON: &str = "UPDATE confirmations SET state = 'done', outcome = $2, finished_ms = $3, \
     running_until_ms = NULL WHERE action_id = $1 AND state = 'running' \
     AND running_until_ms IS NOT NULL AND running_until_ms < $3";
const LIST_TENANT: &str = concat!(
    "SELECT ",
    action_columns!(),
    " FROM confirmations WHERE tenant = $1 AND expires_ms > $2 \
     AND (created_ms < $3 OR (created_ms = $3 AND action_id < $4)) \
     ORDER BY created_ms DESC, action_id DESC LIMIT $5"
);
const LIST_REQUESTER: &str = concat!(
    "SELECT ",
    action_columns!(),
    " FROM confirmations WHERE tenant = $1 AND expires_ms > $2 AND requester_identity = $3 \
     AND (created_ms < $4 OR (created_ms = $4 AND action_id < $5)) \
     ORDER BY created_ms DESC, action_id DESC LIMIT $6"
);
const COUNT_PENDING: &str = "SELECT COUNT(*), MIN(expires_ms) FROM confirmations \
     WHERE tenant = $1 AND requester_identity = $2 AND state = 'pending' AND expires_ms > $3";
/// Serializes the raises of one requester (tenant and identity) until the transaction ends.
const PG_LOCK_REQUESTER: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// One stored action, as the drivers decode it.
#[derive(sqlx::FromRow)]
struct ActionRow {
    action_id: String,
    key_hash: String,
    tenant: String,
    requester: String,
    requester_kind: String,
    op: String,
    op_version: String,
    tier: String,
    reason: String,
    args: String,
    state: String,
    created_ms: i64,
    expires_ms: i64,
    decided_ms: Option<i64>,
    decided_by: Option<String>,
    outcome: Option<String>,
    requester_identity: Option<String>,
}

impl TryFrom<ActionRow> for Action {
    type Error = ConfirmationError;

    fn try_from(r: ActionRow) -> Result<Self, ConfirmationError> {
        let state = ActionState::parse(&r.state).ok_or_else(|| {
            ConfirmationError(format!(
                "stored action {:?} has an unknown state {:?}",
                r.action_id, r.state
            ))
        })?;
        let outcome: Option<StoredOutcome> = r
            .outcome
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| {
                ConfirmationError(format!(
                    "stored action {:?} has a malformed outcome: {e}",
                    r.action_id
                ))
            })?;
        Ok(Action {
            action_id: r.action_id,
            key: r.key_hash,
            tenant: r.tenant,
            requester: r.requester,
            requester_identity: r.requester_identity.unwrap_or_default(),
            requester_kind: r.requester_kind,
            op: r.op,
            op_version: r.op_version,
            tier: r.tier,
            reason: r.reason,
            args: r.args,
            state,
            created_ms: r.created_ms,
            expires_ms: r.expires_ms,
            decided_ms: r.decided_ms,
            decided_by: r.decided_by,
            outcome,
        })
    }
}

fn port_error(e: StoreError) -> ConfirmationError {
    ConfirmationError(format!("{}: {e}", e.code()))
}

/// Raises an action inside an open transaction `$tx` (the same body for both pools), after
/// `$lock` (statements that serialize this requester's raises, if the begin did not).
macro_rules! raise_in {
    ($store:expr, $tx:expr, $lock:expr, $a:expr, $now:expr, $max:expr) => {{
        let what = "raise a confirmation";
        let q = |e| $store.redactor.query(what, e);
        let mut tx = $tx.map_err(q)?;
        if let Some(lock) = $lock {
            let requester = format!("{}\n{}", $a.tenant, $a.requester_identity);
            sqlx::query(lock)
                .bind(requester)
                .execute(&mut *tx)
                .await
                .map_err(q)?;
        }
        let (pending, first_expiry_ms): (i64, Option<i64>) = sqlx::query_as(COUNT_PENDING)
            .bind($a.tenant.as_str())
            .bind($a.requester_identity.as_str())
            .bind($now)
            .fetch_one(&mut *tx)
            .await
            .map_err(q)?;
        let pending = u64::try_from(pending).unwrap_or(0);
        let taken = sqlx::query(TAKE_KEY)
            .bind($a.key.as_str())
            .bind($a.action_id.as_str())
            .bind($a.expires_ms)
            .bind($now)
            .execute(&mut *tx)
            .await
            .map_err(q)?
            .rows_affected();
        if taken == 0 {
            tx.rollback().await.map_err(q)?;
            Ok(Raised::KeyTaken)
        } else if pending >= $max {
            tx.rollback().await.map_err(q)?;
            Ok(Raised::TooManyPending {
                pending,
                first_expiry_ms,
            })
        } else {
            sqlx::query(DROP_STALE_APPROVALS)
                .bind($a.key.as_str())
                .execute(&mut *tx)
                .await
                .map_err(q)?;
            sqlx::query(INSERT_ACTION)
                .bind($a.action_id.as_str())
                .bind($a.key.as_str())
                .bind($a.tenant.as_str())
                .bind($a.requester.as_str())
                .bind($a.requester_kind.as_str())
                .bind($a.op.as_str())
                .bind($a.op_version.as_str())
                .bind($a.tier.as_str())
                .bind($a.reason.as_str())
                .bind($a.args.as_str())
                .bind($a.state.as_str())
                .bind($a.created_ms)
                .bind($a.expires_ms)
                .bind($a.decided_ms)
                .bind($a.decided_by.as_deref())
                .bind(Option::<&str>::None)
                .bind($a.requester_identity.as_str())
                .execute(&mut *tx)
                .await
                .map_err(q)?;
            tx.commit().await.map_err(q)?;
            Ok(Raised::Raised)
        }
    }};
}

/// Decides a pending action inside an open transaction `$tx`.
macro_rules! decide_in {
    ($store:expr, $tx:expr, $id:expr, $approve:expr, $by:expr, $at:expr) => {{
        let what = "decide a confirmation";
        let q = |e| $store.redactor.query(what, e);
        let mut tx = $tx.map_err(q)?;
        let state = if $approve {
            ActionState::Approved
        } else {
            ActionState::Denied
        };
        let row: Option<(String, i64)> = sqlx::query_as(DECIDE)
            .bind($id)
            .bind(state.as_str())
            .bind($at)
            .bind($by)
            .fetch_optional(&mut *tx)
            .await
            .map_err(q)?;
        match row {
            None => {
                tx.rollback().await.map_err(q)?;
                Ok(false)
            }
            Some((key, expires_ms)) => {
                if $approve {
                    sqlx::query(INSERT_APPROVAL)
                        .bind($id)
                        .bind(key.as_str())
                        .bind(expires_ms)
                        .execute(&mut *tx)
                        .await
                        .map_err(q)?;
                }
                tx.commit().await.map_err(q)?;
                Ok(true)
            }
        }
    }};
}

impl Store {
    /// Deletes expired approvals and key entries, and actions expired for over `keep_ms`, in one
    /// transaction; the number of actions deleted.
    pub async fn purge_confirmations(&self, now_ms: i64, keep_ms: i64) -> Result<u64, StoreError> {
        let q = |e| self.redactor.query("purge expired confirmations", e);
        let cutoff = now_ms.saturating_sub(keep_ms);
        on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(q)?;
            sqlx::query(PURGE_APPROVALS).bind(now_ms).execute(&mut *tx).await.map_err(q)?;
            sqlx::query(PURGE_KEYS).bind(now_ms).execute(&mut *tx).await.map_err(q)?;
            let gone = sqlx::query(PURGE_ACTIONS).bind(cutoff).execute(&mut *tx).await.map_err(q)?;
            tx.commit().await.map_err(q)?;
            Ok(gone.rows_affected())
        })
    }

    /// Consumes the live approval of `key` (see the module doc), returning its action.
    pub async fn consume_confirmation(
        &self,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<Action>, StoreError> {
        let q = |e| self.redactor.query("consume a confirmation", e);
        let lease = now_ms.saturating_add(RUNNING_LEASE_MS);
        let row: Option<ActionRow> = match &self.pool {
            Pool::Postgres(p) => sqlx::query_as(PG_CONSUME)
                .bind(key)
                .bind(now_ms)
                .bind(lease)
                .fetch_optional(p)
                .await
                .map_err(q)?,
            Pool::Sqlite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await.map_err(q)?;
                let taken: Option<String> = sqlx::query_scalar(SQLITE_TAKE_APPROVAL)
                    .bind(key)
                    .bind(now_ms)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(q)?;
                let row = match taken {
                    None => None,
                    Some(id) => sqlx::query_as(MARK_RUNNING)
                        .bind(id)
                        .bind(lease)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(q)?,
                };
                tx.commit().await.map_err(q)?;
                row
            }
        };
        row.map(Action::try_from)
            .transpose()
            .map_err(|e| StoreError::QueryFailed {
                what: "consume a confirmation",
                reason: e.0,
            })
    }

    async fn current_confirmation(
        &self,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<Action>, ConfirmationError> {
        let row: Option<ActionRow> = on_pool!(&self.pool, p => sqlx::query_as(CURRENT)
            .bind(key)
            .bind(now_ms)
            .fetch_optional(p)
            .await)
        .map_err(|e| port_error(self.redactor.query("read a confirmation", e)))?;
        row.map(Action::try_from).transpose()
    }

    async fn raise_confirmation(
        &self,
        a: &Action,
        now_ms: i64,
        max_pending: u64,
    ) -> Result<Raised, StoreError> {
        match &self.pool {
            // The write lock is taken at `BEGIN`: raises are serialized already.
            Pool::Sqlite(p) => raise_in!(
                self,
                p.begin_with("BEGIN IMMEDIATE").await,
                None::<&str>,
                a,
                now_ms,
                max_pending
            ),
            Pool::Postgres(p) => raise_in!(
                self,
                p.begin().await,
                Some(PG_LOCK_REQUESTER),
                a,
                now_ms,
                max_pending
            ),
        }
    }

    async fn get_confirmation(
        &self,
        tenant: &str,
        action_id: &str,
    ) -> Result<Option<Action>, ConfirmationError> {
        let row: Option<ActionRow> = on_pool!(&self.pool, p => sqlx::query_as(GET)
            .bind(action_id)
            .bind(tenant)
            .fetch_optional(p)
            .await)
        .map_err(|e| port_error(self.redactor.query("read a confirmation", e)))?;
        row.map(Action::try_from).transpose()
    }

    async fn decide_confirmation(
        &self,
        action_id: &str,
        approve: bool,
        by: &str,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        match &self.pool {
            Pool::Sqlite(p) => decide_in!(
                self,
                p.begin_with("BEGIN IMMEDIATE").await,
                action_id,
                approve,
                by,
                at_ms
            ),
            Pool::Postgres(p) => decide_in!(self, p.begin().await, action_id, approve, by, at_ms),
        }
    }

    async fn finish_confirmation(
        &self,
        action_id: &str,
        outcome: &StoredOutcome,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(outcome).map_err(|e| StoreError::QueryFailed {
            what: "store a confirmation's outcome",
            reason: format!("the outcome cannot be encoded: {e}"),
        })?;
        let stored = on_pool!(&self.pool, p => sqlx::query(FINISH)
            .bind(action_id)
            .bind(text.as_str())
            .bind(now_ms)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| self.redactor.query("store a confirmation's outcome", e))?;
        if stored == 0 {
            tracing::error!(
                action_id,
                "an approved call's outcome was not stored: the action was no longer running (its lease ran out and a retry marked it cut off, or it expired)"
            );
        }
        Ok(())
    }

    async fn renew_confirmation(&self, action_id: &str, until_ms: i64) -> Result<bool, StoreError> {
        on_pool!(&self.pool, p => sqlx::query(RENEW)
            .bind(action_id)
            .bind(until_ms)
            .execute(p)
            .await
            .map(|r| r.rows_affected() == 1))
        .map_err(|e| {
            self.redactor
                .query("renew a running confirmation's lease", e)
        })
    }

    async fn abandon_confirmation(
        &self,
        action_id: &str,
        outcome: &StoredOutcome,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let text = serde_json::to_string(outcome).map_err(|e| StoreError::QueryFailed {
            what: "store an abandoned confirmation's outcome",
            reason: format!("the outcome cannot be encoded: {e}"),
        })?;
        on_pool!(&self.pool, p => sqlx::query(ABANDON)
            .bind(action_id)
            .bind(text.as_str())
            .bind(now_ms)
            .execute(p)
            .await
            .map(|r| r.rows_affected() == 1))
        .map_err(|e| {
            self.redactor
                .query("store an abandoned confirmation's outcome", e)
        })
    }

    async fn release_confirmation(&self, action_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        let q = |e| self.redactor.query("give a confirmation back", e);
        on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(q)?;
            let row: Option<(String, i64)> = sqlx::query_as(RELEASE)
                .bind(action_id)
                .bind(now_ms)
                .fetch_optional(&mut *tx)
                .await
                .map_err(q)?;
            let Some((key, expires_ms)) = row else {
                return Ok(false);
            };
            sqlx::query(INSERT_APPROVAL)
                .bind(action_id)
                .bind(key.as_str())
                .bind(expires_ms)
                .execute(&mut *tx)
                .await
                .map_err(q)?;
            tx.commit().await.map_err(q)?;
            Ok(true)
        })
    }

    async fn list_confirmations(
        &self,
        tenant: &str,
        requester_identity: Option<&str>,
        now_ms: i64,
        after: Option<&Cursor>,
        limit: u32,
    ) -> Result<Vec<Action>, ConfirmationError> {
        // No cursor: before everything (no action is created at `i64::MAX`).
        let (before_ms, before_id) =
            after.map_or((i64::MAX, ""), |c| (c.created_ms, c.action_id.as_str()));
        let limit = i64::from(limit);
        let rows: Vec<ActionRow> = on_pool!(&self.pool, p => match requester_identity {
            // An action stored without an identity is nobody's.
            Some("") => Ok(Vec::new()),
            Some(r) => sqlx::query_as(LIST_REQUESTER)
                .bind(tenant)
                .bind(now_ms)
                .bind(r)
                .bind(before_ms)
                .bind(before_id)
                .bind(limit)
                .fetch_all(p)
                .await,
            None => sqlx::query_as(LIST_TENANT)
                .bind(tenant)
                .bind(now_ms)
                .bind(before_ms)
                .bind(before_id)
                .bind(limit)
                .fetch_all(p)
                .await,
        })
        .map_err(|e| port_error(self.redactor.query("list confirmations", e)))?;
        rows.into_iter().map(Action::try_from).collect()
    }
}

impl ConfirmationStore for Store {
    fn backend(&self) -> &'static str {
        self.backend_name()
    }

    fn purge<'a>(
        &'a self,
        now_ms: i64,
        keep_ms: i64,
    ) -> BoxFuture<'a, Result<u64, ConfirmationError>> {
        Box::pin(async move {
            self.purge_confirmations(now_ms, keep_ms)
                .await
                .map_err(port_error)
        })
    }

    fn consume<'a>(
        &'a self,
        key: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>> {
        Box::pin(async move {
            self.consume_confirmation(key, now_ms)
                .await
                .map_err(port_error)
        })
    }

    fn current<'a>(
        &'a self,
        key: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>> {
        Box::pin(self.current_confirmation(key, now_ms))
    }

    fn raise<'a>(
        &'a self,
        action: &'a Action,
        now_ms: i64,
        max_pending: u64,
    ) -> BoxFuture<'a, Result<Raised, ConfirmationError>> {
        Box::pin(async move {
            self.raise_confirmation(action, now_ms, max_pending)
                .await
                .map_err(port_error)
        })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a str,
        action_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>> {
        Box::pin(self.get_confirmation(tenant, action_id))
    }

    fn decide<'a>(
        &'a self,
        action_id: &'a str,
        approve: bool,
        by: &'a str,
        at_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        Box::pin(async move {
            self.decide_confirmation(action_id, approve, by, at_ms)
                .await
                .map_err(port_error)
        })
    }

    fn finish<'a>(
        &'a self,
        action_id: &'a str,
        outcome: &'a StoredOutcome,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), ConfirmationError>> {
        Box::pin(async move {
            self.finish_confirmation(action_id, outcome, now_ms)
                .await
                .map_err(port_error)
        })
    }

    fn renew<'a>(
        &'a self,
        action_id: &'a str,
        until_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        Box::pin(async move {
            self.renew_confirmation(action_id, until_ms)
                .await
                .map_err(port_error)
        })
    }

    fn abandon<'a>(
        &'a self,
        action_id: &'a str,
        outcome: &'a StoredOutcome,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        Box::pin(async move {
            self.abandon_confirmation(action_id, outcome, now_ms)
                .await
                .map_err(port_error)
        })
    }

    fn release<'a>(
        &'a self,
        action_id: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        Box::pin(async move {
            self.release_confirmation(action_id, now_ms)
                .await
                .map_err(port_error)
        })
    }

    fn list<'a>(
        &'a self,
        tenant: &'a str,
        requester_identity: Option<&'a str>,
        now_ms: i64,
        after: Option<&'a Cursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Action>, ConfirmationError>> {
        Box::pin(self.list_confirmations(tenant, requester_identity, now_ms, after, limit))
    }
}
