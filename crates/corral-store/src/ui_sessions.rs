//! The web console's sessions (issue 19, migration 0019): kept in the store so that every
//! replica on one database knows them, and a sign-out on one ends the session on all. A row is
//! keyed by the hash of the session's secret id (the id itself is only in the browser's
//! cookie); the store keeps what the server hands it and decides only expiry: a session is
//! live while its absolute expiry is ahead and it was seen within the idle timeout.

use crate::Store;
use crate::error::StoreError;

/// The most live sessions one identity keeps: a sign-in past it ends that identity's oldest.
pub const MAX_SESSIONS_PER_IDENTITY: i64 = 16;

/// A console session, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiSession {
    /// SHA-256 of the secret session id, hex.
    pub id_hash: String,
    /// The principal's full identity (`Principal::identity()`), for the per-identity cap.
    pub identity: String,
    /// What re-authenticates the principal (opaque to the store; never a token).
    pub proof: String,
    /// When it was opened (ms since the epoch).
    pub created_ms: i64,
    /// When it was last used.
    pub seen_ms: i64,
    /// When it ends whatever its use.
    pub expires_ms: i64,
}

const INSERT: &str = "INSERT INTO ui_sessions (id_hash, identity, proof, created_ms, seen_ms, \
                      expires_ms) VALUES ($1, $2, $3, $4, $5, $6)";
const TRIM: &str = "DELETE FROM ui_sessions WHERE identity = $1 AND id_hash NOT IN \
                    (SELECT id_hash FROM ui_sessions WHERE identity = $1 \
                     ORDER BY created_ms DESC, id_hash DESC LIMIT $2)";
const GET: &str = "SELECT id_hash, identity, proof, created_ms, seen_ms, expires_ms \
                   FROM ui_sessions WHERE id_hash = $1 AND expires_ms > $2 AND seen_ms > $3";
const TOUCH: &str = "UPDATE ui_sessions SET seen_ms = $2 WHERE id_hash = $1 AND seen_ms < $2";
const DELETE: &str = "DELETE FROM ui_sessions WHERE id_hash = $1";
const PURGE: &str = "DELETE FROM ui_sessions WHERE expires_ms <= $1 OR seen_ms <= $2";

type Row = (String, String, String, i64, i64, i64);

impl Store {
    /// Keeps a new session, then ends its identity's oldest beyond
    /// [`MAX_SESSIONS_PER_IDENTITY`].
    pub async fn create_ui_session(&self, s: &UiSession) -> Result<(), StoreError> {
        on_pool!(&self.pool, p => sqlx::query(INSERT)
            .bind(s.id_hash.as_str())
            .bind(s.identity.as_str())
            .bind(s.proof.as_str())
            .bind(s.created_ms)
            .bind(s.seen_ms)
            .bind(s.expires_ms)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(|e| self.redactor.query("open a console session", e))?);
        on_pool!(&self.pool, p => sqlx::query(TRIM)
            .bind(s.identity.as_str())
            .bind(MAX_SESSIONS_PER_IDENTITY)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(|e| self.redactor.query("cap console sessions", e))?);
        Ok(())
    }

    /// The live session whose id hashes to `id_hash` at `now_ms` (not past its absolute
    /// expiry, seen less than `idle_ms` ago), or `None`.
    pub async fn ui_session(
        &self,
        id_hash: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<Option<UiSession>, StoreError> {
        let row: Option<Row> = on_pool!(&self.pool, p => sqlx::query_as(GET)
            .bind(id_hash)
            .bind(now_ms)
            .bind(now_ms.saturating_sub(idle_ms))
            .fetch_optional(p)
            .await
            .map_err(|e| self.redactor.query("read a console session", e))?);
        Ok(row.map(
            |(id_hash, identity, proof, created_ms, seen_ms, expires_ms)| UiSession {
                id_hash,
                identity,
                proof,
                created_ms,
                seen_ms,
                expires_ms,
            },
        ))
    }

    /// Marks a session used at `now_ms` (it never goes back in time).
    pub async fn touch_ui_session(&self, id_hash: &str, now_ms: i64) -> Result<(), StoreError> {
        on_pool!(&self.pool, p => sqlx::query(TOUCH)
            .bind(id_hash)
            .bind(now_ms)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(|e| self.redactor.query("touch a console session", e))?);
        Ok(())
    }

    /// Ends a session (sign-out); whether there was one.
    pub async fn delete_ui_session(&self, id_hash: &str) -> Result<bool, StoreError> {
        let n = on_pool!(&self.pool, p => sqlx::query(DELETE)
            .bind(id_hash)
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| self.redactor.query("end a console session", e))?);
        Ok(n > 0)
    }

    /// Deletes every session past its absolute expiry, or idle for `idle_ms`; how many.
    pub async fn purge_ui_sessions(&self, now_ms: i64, idle_ms: i64) -> Result<u64, StoreError> {
        let n = on_pool!(&self.pool, p => sqlx::query(PURGE)
            .bind(now_ms)
            .bind(now_ms.saturating_sub(idle_ms))
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| self.redactor.query("purge console sessions", e))?);
        Ok(n)
    }
}
