//! An agent session's held writes (issue 17, migration 0023), kept so that any replica applies
//! a hold another made, exactly once.
//!
//! A turn's hold is stored whole or not at all: [`Store::begin_hold`] opens a transaction,
//! [`HoldWriter::push`] adds one entry at a time (the caller reads the next file only then, so
//! a hold is in memory once, an entry at a time), and [`HoldWriter::commit`] records the hold
//! `pending`. A hold over [`MAX_HOLD_BYTES`] or [`MAX_HOLD_ENTRIES`] is refused and nothing of
//! it is kept. An apply claims it ([`Store::claim_hold`]: `pending` -> `applying`, with a lease,
//! on the hold and on its session in one transaction, refused while a turn runs), reads its
//! entries under that claim ([`Store::hold_entries`], each checked again as it leaves the
//! store), and ends by deleting it ([`Store::finish_hold`]) or putting it back
//! ([`Store::release_hold`]). A claim whose lease lapsed (its replica died) is claimed again.
//! Every statement that changes a claim names the claim's id, so a late replica changes
//! nothing of a newer claim.
//!
//! Lock order: a transaction that changes both rows changes the session's first.

use corral_ports::holds::{
    HeldEntry, HeldKind, HeldPath, MAX_HOLD_BYTES, MAX_HOLD_ENTRIES, is_hold_id,
};

use crate::agents::AgentStoreError;
use crate::lab::check_plain;
use crate::{Pool, Store};

/// The most entries one call of [`Store::hold_entries`] reads.
pub const MAX_HOLD_ENTRIES_READ: u32 = 256;

/// A stored hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHold {
    /// Its id (32 hex digits).
    pub hold: String,
    /// `pending` or `applying`.
    pub status: String,
    /// Until when its apply's claim holds (ms since the epoch), while `applying`.
    pub lease_until_ms: Option<i64>,
    /// Bytes of content.
    pub bytes: u64,
    /// Entries.
    pub entries: u64,
    /// When it was stored.
    pub created_ms: i64,
}

const INSERT_ENTRY: &str = "INSERT INTO agent_hold_entries (tenant, session_id, hold, seq, kind, \
     path, mode, content) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
/// The hold's row, only while its session exists.
const INSERT_HOLD: &str = "INSERT INTO agent_holds (tenant, session_id, hold, status, \
     claimed_by, lease_until_ms, created_ms, bytes, entries) SELECT $1, $2, $3, 'pending', NULL, \
     NULL, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM agent_sessions WHERE tenant = $1 AND id = $2)";
const GET_HOLD: &str = "SELECT hold, status, lease_until_ms, bytes, entries, created_ms \
     FROM agent_holds WHERE tenant = $1 AND session_id = $2 AND hold = $3";
/// The session's side of a claim: no turn runs, no other claim's lease runs.
const CLAIM_SESSION: &str = "UPDATE agent_sessions SET hold_claim = $3, hold_lease_until_ms = $4 \
     WHERE tenant = $1 AND id = $2 AND status <> 'in_progress' \
     AND (hold_lease_until_ms IS NULL OR hold_lease_until_ms < $5)";
/// The hold's side: pending, or claimed by an apply whose lease lapsed.
const CLAIM_HOLD: &str = "UPDATE agent_holds SET status = 'applying', claimed_by = $4, \
     lease_until_ms = $5 WHERE tenant = $1 AND session_id = $2 AND hold = $3 \
     AND (status = 'pending' OR lease_until_ms < $6)";
const RENEW_SESSION: &str = "UPDATE agent_sessions SET hold_lease_until_ms = $4 WHERE tenant = $1 \
     AND id = $2 AND hold_claim = $3 AND status <> 'in_progress'";
const RENEW_HOLD: &str = "UPDATE agent_holds SET lease_until_ms = $5 WHERE tenant = $1 \
     AND session_id = $2 AND hold = $3 AND claimed_by = $4 AND status = 'applying'";
const FREE_SESSION: &str = "UPDATE agent_sessions SET hold_claim = NULL, \
     hold_lease_until_ms = NULL WHERE tenant = $1 AND id = $2 AND hold_claim = $3";
const RELEASE_HOLD: &str = "UPDATE agent_holds SET status = 'pending', claimed_by = NULL, \
     lease_until_ms = NULL WHERE tenant = $1 AND session_id = $2 AND hold = $3 \
     AND claimed_by = $4";
const DELETE_HOLD: &str = "DELETE FROM agent_holds WHERE tenant = $1 AND session_id = $2 \
     AND hold = $3 AND claimed_by = $4";
const DELETE_ENTRIES: &str =
    "DELETE FROM agent_hold_entries WHERE tenant = $1 AND session_id = $2 AND hold = $3";
/// Entries after `$4`, only for the hold's claim `$5`.
const READ_ENTRIES: &str = "SELECT e.seq, e.kind, e.path, e.mode, e.content \
     FROM agent_hold_entries e WHERE e.tenant = $1 AND e.session_id = $2 AND e.hold = $3 \
     AND e.seq > $4 AND EXISTS (SELECT 1 FROM agent_holds h WHERE h.tenant = $1 \
     AND h.session_id = $2 AND h.hold = $3 AND h.claimed_by = $5) ORDER BY e.seq LIMIT $6";

type HoldRow = (String, String, Option<i64>, i64, i64, i64);

fn stored(row: HoldRow) -> StoredHold {
    let (hold, status, lease_until_ms, bytes, entries, created_ms) = row;
    StoredHold {
        hold,
        status,
        lease_until_ms,
        bytes: u64::try_from(bytes).unwrap_or(0),
        entries: u64::try_from(entries).unwrap_or(0),
        created_ms,
    }
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One stored entry, checked again on its way out: a row is as hostile as the agent that wrote
/// the hold (its path plain and relative, its kind known, its mode permission bits).
fn entry_of(
    hold: &str,
    (seq, kind, path, mode, content): (i64, String, String, i64, Vec<u8>),
) -> Result<(u64, HeldEntry), AgentStoreError> {
    let invalid = |why: String| AgentStoreError::HoldInvalid {
        reason: format!("entry {seq} of the stored hold `{hold}` is refused: {why}"),
    };
    let kind = HeldKind::parse(&kind).ok_or_else(|| invalid("its kind is unknown".to_owned()))?;
    let path = HeldPath::new(&path).map_err(|e| invalid(e.to_string()))?;
    let mode = u32::try_from(mode).map_err(|_| invalid("its mode is out of range".to_owned()))?;
    let entry = HeldEntry::new(kind, path, mode, content).map_err(|e| invalid(e.to_string()))?;
    Ok((u64::try_from(seq).unwrap_or(0), entry))
}

/// In one transaction: `$first` (a statement on the session's row), then, if it changed a row,
/// `$then` (on the hold's); committed only if both did (else rolled back as dropped). Whether
/// both did. The statements are written once and built in each backend's arm.
macro_rules! both_or_neither {
    ($store:expr, $what:expr, $first:expr, $then:expr) => {{
        let q = $store.agents_err($what);
        on_pool!(&$store.pool, p => {
            let mut tx = p.begin().await.map_err(&q)?;
            let mut n = $first.execute(&mut *tx).await.map_err(&q)?.rows_affected();
            if n > 0 {
                n = $then.execute(&mut *tx).await.map_err(&q)?.rows_affected();
            }
            if n > 0 {
                tx.commit().await.map_err(&q)?;
            }
            n > 0
        })
    }};
}

/// A transaction of either backend.
#[derive(Debug)]
enum Tx {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

/// Runs the same body against whichever transaction `$tx` is; `$t` is bound to its connection.
macro_rules! on_tx {
    ($tx:expr, $t:ident => $body:expr) => {
        match $tx {
            Tx::Sqlite(tx) => {
                let $t = &mut **tx;
                $body
            }
            Tx::Postgres(tx) => {
                let $t = &mut **tx;
                $body
            }
        }
    };
}

/// A hold being stored ([`Store::begin_hold`]): entries pushed one at a time, kept only once
/// [`HoldWriter::commit`] succeeds (dropped before: nothing was kept).
#[derive(Debug)]
pub struct HoldWriter<'s> {
    store: &'s Store,
    tx: Tx,
    tenant: String,
    session: String,
    hold: String,
    entries: u64,
    bytes: u64,
}

impl HoldWriter<'_> {
    /// Adds `entry`; refused [`AgentStoreError::HoldTooLarge`] past [`MAX_HOLD_ENTRIES`] or
    /// [`MAX_HOLD_BYTES`] (the hold is then to be dropped: nothing of it is kept).
    pub async fn push(&mut self, entry: &HeldEntry) -> Result<(), AgentStoreError> {
        let bytes = self.bytes.saturating_add(entry.content().len() as u64);
        if self.entries >= MAX_HOLD_ENTRIES || bytes > MAX_HOLD_BYTES {
            return Err(AgentStoreError::HoldTooLarge);
        }
        self.entries += 1;
        self.bytes = bytes;
        let q = self.store.agents_err("keep a held change");
        on_tx!(&mut self.tx, t => sqlx::query(INSERT_ENTRY)
            .bind(self.tenant.as_str())
            .bind(self.session.as_str())
            .bind(self.hold.as_str())
            .bind(i64_of(self.entries))
            .bind(entry.kind().as_str())
            .bind(entry.path().as_str())
            .bind(i64::from(entry.mode()))
            .bind(entry.content())
            .execute(t)
            .await
            .map(|_| ())
            .map_err(q)?);
        Ok(())
    }

    /// Keeps the hold, `pending`; [`AgentStoreError::NotFound`] if its session is gone.
    pub async fn commit(mut self, now_ms: i64) -> Result<StoredHold, AgentStoreError> {
        let q = self.store.agents_err("keep a hold");
        let n = on_tx!(&mut self.tx, t => sqlx::query(INSERT_HOLD)
            .bind(self.tenant.as_str())
            .bind(self.session.as_str())
            .bind(self.hold.as_str())
            .bind(now_ms)
            .bind(i64_of(self.bytes))
            .bind(i64_of(self.entries))
            .execute(t)
            .await
            .map(|r| r.rows_affected())
            .map_err(&q)?);
        if n == 0 {
            return Err(AgentStoreError::NotFound {
                what: "session",
                id: self.session,
                tenant: self.tenant,
            });
        }
        match self.tx {
            Tx::Sqlite(tx) => tx.commit().await.map_err(&q)?,
            Tx::Postgres(tx) => tx.commit().await.map_err(&q)?,
        }
        Ok(StoredHold {
            hold: self.hold,
            status: "pending".to_owned(),
            lease_until_ms: None,
            bytes: self.bytes,
            entries: self.entries,
            created_ms: now_ms,
        })
    }
}

impl Store {
    /// Starts storing the hold `hold` (32 hex digits) of a session of `tenant`.
    pub async fn begin_hold(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
    ) -> Result<HoldWriter<'_>, AgentStoreError> {
        check_plain(&[("the tenant", tenant), ("the session id", session)])?;
        if !is_hold_id(hold) {
            return Err(AgentStoreError::HoldInvalid {
                reason: "a hold's id is 32 lowercase hex digits".to_owned(),
            });
        }
        let q = self.agents_err("keep a hold");
        let tx = match &self.pool {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await.map_err(&q)?),
            Pool::Postgres(p) => Tx::Postgres(p.begin().await.map_err(&q)?),
        };
        Ok(HoldWriter {
            store: self,
            tx,
            tenant: tenant.to_owned(),
            session: session.to_owned(),
            hold: hold.to_owned(),
            entries: 0,
            bytes: 0,
        })
    }

    /// A stored hold of a session of `tenant`; `None` if it has none with that id.
    pub async fn get_hold(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
    ) -> Result<Option<StoredHold>, AgentStoreError> {
        let q = self.agents_err("read a hold");
        let row: Option<HoldRow> = on_pool!(&self.pool, p => sqlx::query_as(GET_HOLD)
            .bind(tenant)
            .bind(session)
            .bind(hold)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        Ok(row.map(stored))
    }

    /// Claims a hold for applying it, as `claim` (an id of this apply's own) until
    /// `lease_until_ms`: the hold `pending` (or claimed by an apply whose lease lapsed before
    /// `now_ms`), its session running no turn and no other apply. Refused
    /// [`AgentStoreError::HoldNotFound`] (no such hold), [`AgentStoreError::Busy`] (a turn
    /// runs) or [`AgentStoreError::HoldApplying`] (an apply's lease runs).
    pub async fn claim_hold(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
        claim: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<StoredHold, AgentStoreError> {
        check_plain(&[("the claim", claim)])?;
        let claimed = both_or_neither!(
            self,
            "claim a hold",
            sqlx::query(CLAIM_SESSION)
                .bind(tenant)
                .bind(session)
                .bind(claim)
                .bind(lease_until_ms)
                .bind(now_ms),
            sqlx::query(CLAIM_HOLD)
                .bind(tenant)
                .bind(session)
                .bind(hold)
                .bind(claim)
                .bind(lease_until_ms)
                .bind(now_ms)
        );
        let found = self.get_hold(tenant, session, hold).await?;
        let not_found = || AgentStoreError::HoldNotFound {
            session: session.to_owned(),
            hold: hold.to_owned(),
        };
        if claimed {
            return found.ok_or_else(not_found);
        }
        let Some(_) = found else {
            return Err(not_found());
        };
        match self.get_session(tenant, session).await? {
            None => Err(not_found()),
            Some(s) if s.status == "in_progress" => Err(AgentStoreError::Busy {
                id: session.to_owned(),
                status: s.status,
            }),
            Some(_) => Err(AgentStoreError::HoldApplying {
                session: session.to_owned(),
            }),
        }
    }

    /// Extends `claim`'s lease on its hold and session to `lease_until_ms`; `false` when the
    /// claim is no longer this apply's (its lease lapsed and another apply claimed it) or a
    /// turn runs: the apply must not go on then.
    pub async fn renew_hold(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
        claim: &str,
        lease_until_ms: i64,
    ) -> Result<bool, AgentStoreError> {
        Ok(both_or_neither!(
            self,
            "renew a hold's claim",
            sqlx::query(RENEW_SESSION)
                .bind(tenant)
                .bind(session)
                .bind(claim)
                .bind(lease_until_ms),
            sqlx::query(RENEW_HOLD)
                .bind(tenant)
                .bind(session)
                .bind(hold)
                .bind(claim)
                .bind(lease_until_ms)
        ))
    }

    /// Up to `limit` (at most [`MAX_HOLD_ENTRIES_READ`]) entries of a hold claimed by `claim`,
    /// numbered after `after`, in order; none when the claim is not (or no longer) this
    /// one's. An entry that fails the checks is [`AgentStoreError::HoldInvalid`].
    pub async fn hold_entries(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
        claim: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, HeldEntry)>, AgentStoreError> {
        let q = self.agents_err("read a hold");
        let limit = limit.clamp(1, MAX_HOLD_ENTRIES_READ);
        let rows: Vec<(i64, String, String, i64, Vec<u8>)> = on_pool!(&self.pool, p => sqlx::query_as(READ_ENTRIES)
            .bind(tenant)
            .bind(session)
            .bind(hold)
            .bind(i64_of(after))
            .bind(claim)
            .bind(i64::from(limit))
            .fetch_all(p)
            .await
            .map_err(q)?);
        rows.into_iter().map(|r| entry_of(hold, r)).collect()
    }

    /// Ends `claim`'s apply of a hold that reached the workdir whole: the hold and its entries
    /// are deleted, its session freed. `false` when the claim was no longer this one's
    /// (nothing changed).
    pub async fn finish_hold(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
        claim: &str,
    ) -> Result<bool, AgentStoreError> {
        self.end_claim(tenant, session, hold, claim, true).await
    }

    /// Ends `claim`'s apply of a hold that did not reach the workdir whole: the hold is
    /// `pending` again (kept for a person), its session freed. `false` when the claim was no
    /// longer this one's (nothing changed).
    pub async fn release_hold(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
        claim: &str,
    ) -> Result<bool, AgentStoreError> {
        self.end_claim(tenant, session, hold, claim, false).await
    }

    /// Frees `claim`'s session and ends its hold: deleted with its entries (`applied`), or
    /// released, in one transaction.
    async fn end_claim(
        &self,
        tenant: &str,
        session: &str,
        hold: &str,
        claim: &str,
        applied: bool,
    ) -> Result<bool, AgentStoreError> {
        let (statement, what) = if applied {
            (DELETE_HOLD, "delete an applied hold")
        } else {
            (RELEASE_HOLD, "release a hold")
        };
        let q = self.agents_err(what);
        Ok(on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(&q)?;
            sqlx::query(FREE_SESSION)
                .bind(tenant)
                .bind(session)
                .bind(claim)
                .execute(&mut *tx)
                .await
                .map_err(&q)?;
            let n = sqlx::query(statement)
                .bind(tenant)
                .bind(session)
                .bind(hold)
                .bind(claim)
                .execute(&mut *tx)
                .await
                .map_err(&q)?
                .rows_affected();
            if n > 0 && applied {
                sqlx::query(DELETE_ENTRIES)
                    .bind(tenant)
                    .bind(session)
                    .bind(hold)
                    .execute(&mut *tx)
                    .await
                    .map_err(&q)?;
            }
            tx.commit().await.map_err(&q)?;
            n > 0
        }))
    }
}
