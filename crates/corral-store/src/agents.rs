//! The agents host's records (issue 17, migration 0017): saved agents, sessions and each
//! session's events. A session is a run (its id is the run id); it takes one turn at a time,
//! claimed atomically (`idle` -> `in_progress`), so two replicas never run two turns of one
//! session at once; a turn's end and a cancel (migration 0022: asked on any replica, polled by
//! the one running the turn) name the turn's number, so neither reaches another turn. Events are
//! append-only, numbered from 1 per session without gaps, capped at
//! [`MAX_SESSION_EVENTS`] per session and [`MAX_EVENT_BYTES`] each. The store keeps what the
//! runtime gives it and checks only tenancy; who may read a session (its owner, an admin) is the
//! runtime's decision.

use std::collections::BTreeMap;

use corral_policy::codes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Store;
use crate::error::StoreError;
use crate::lab::{Page, Paged, check_plain, cursor_binds, from_json, json_text, page_of};

/// The most events one session keeps; an append past it is refused whole.
pub const MAX_SESSION_EVENTS: u64 = 10_000;
/// The most bytes of one event's body (JSON).
pub const MAX_EVENT_BYTES: usize = 64 * 1024;
/// The most events read in one call of [`Store::session_events`].
pub const MAX_EVENTS_READ: u32 = 1_000;

/// Why an agents-host store operation was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentStoreError {
    /// The store failed (an infrastructure error).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No agent or session of that id in the caller's tenant.
    #[error(
        "no {what} {id:?} in tenant {tenant:?}: it does not exist or belongs to another tenant; \
         list yours to find its id"
    )]
    NotFound {
        /// `agent` or `session`.
        what: &'static str,
        /// The id asked for.
        id: String,
        /// The caller's tenant.
        tenant: String,
    },
    /// The session has a turn running (or has failed), so it takes no new turn now.
    #[error(
        "session {id:?} is `{status}`: a session runs one turn at a time; wait for \
         `agent.session.idle` on its event stream, or cancel the turn"
    )]
    Busy {
        /// The session.
        id: String,
        /// Its status.
        status: String,
    },
    /// The session holds [`MAX_SESSION_EVENTS`] events, or an event is over [`MAX_EVENT_BYTES`].
    #[error(
        "session {id:?} would hold more than {MAX_SESSION_EVENTS} events, or one event over \
         {MAX_EVENT_BYTES} bytes: nothing of the batch was kept; start a new session"
    )]
    EventsFull {
        /// The session.
        id: String,
    },
    /// The owner has as many sessions (or saved agents) as one owner may keep.
    #[error(
        "{owner:?} has {max} {what}, as many as one owner may keep: delete the ones you no \
         longer need (`{delete}`), then try again"
    )]
    Quota {
        /// `sessions` or `saved agents`.
        what: &'static str,
        /// The request that deletes one.
        delete: &'static str,
        /// The owner.
        owner: String,
        /// The cap.
        max: u64,
    },
    /// A value cannot be stored (a NUL in an identifier).
    #[error("{reason}")]
    Invalid {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The session holds no pending hold of that id (applied already, never stored, or its
    /// session was deleted).
    #[error(
        "session {session:?} holds no changes {hold:?}: applied already, never held, or its \
         session was deleted; the session's `writes_held` events name its holds"
    )]
    HoldNotFound {
        /// The session.
        session: String,
        /// The hold asked for.
        hold: String,
    },
    /// The hold, or another hold of its session, is being applied (its claim's lease runs).
    #[error(
        "session {session:?} has held changes being applied (this hold or another, on some \
         replica): one hold of a session is applied at a time; wait for its `writes_applied` \
         event and try again"
    )]
    HoldApplying {
        /// The session.
        session: String,
    },
    /// A hold over [`corral_ports::holds::MAX_HOLD_BYTES`] or
    /// [`corral_ports::holds::MAX_HOLD_ENTRIES`]: nothing of it was kept.
    #[error(
        "the turn's held changes are over what one hold keeps ({} bytes of content, {} \
         entries): nothing of them was kept; have the agent make smaller changes per turn, or \
         list the directory in `confirm_writes_outside`",
        corral_ports::holds::MAX_HOLD_BYTES,
        corral_ports::holds::MAX_HOLD_ENTRIES
    )]
    HoldTooLarge,
    /// A held entry that cannot be kept, or a stored one that fails the checks on its way out.
    #[error("{reason}")]
    HoldInvalid {
        /// What is wrong.
        reason: String,
    },
}

impl AgentStoreError {
    /// The stable code (`agents.*`, or the store's `store.*`).
    pub fn code(&self) -> &'static str {
        match self {
            AgentStoreError::Store(e) => e.code(),
            AgentStoreError::NotFound { .. } => codes::AGENTS_NOT_FOUND,
            AgentStoreError::Busy { .. } => codes::AGENTS_SESSION_BUSY,
            AgentStoreError::EventsFull { .. } => codes::AGENTS_SESSION_FULL,
            AgentStoreError::Quota { .. } => codes::AGENTS_QUOTA,
            AgentStoreError::Invalid { .. } => codes::AGENTS_INVALID,
            AgentStoreError::HoldNotFound { .. } => codes::AGENTS_HOLD_NOT_FOUND,
            AgentStoreError::HoldApplying { .. } => codes::AGENTS_HOLD_APPLYING,
            AgentStoreError::HoldTooLarge => codes::AGENTS_HOLD_TOO_LARGE,
            AgentStoreError::HoldInvalid { .. } => codes::AGENTS_HOLD_INVALID,
        }
    }
}

impl From<crate::lab::LabStoreError> for AgentStoreError {
    fn from(e: crate::lab::LabStoreError) -> Self {
        match e {
            crate::lab::LabStoreError::Store(s) => AgentStoreError::Store(s),
            other => AgentStoreError::Invalid {
                reason: other.to_string(),
            },
        }
    }
}

/// A saved agent (`POST /v1/agents`): a model and its instructions, reused by sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentDef {
    /// Its id.
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// Who saved it (an identity).
    pub owner: String,
    /// The model (a real model name, or an adapter's name).
    pub model: String,
    /// Its name, if given.
    pub name: Option<String>,
    /// Instructions appended to the adapter's own.
    pub instructions: Option<String>,
    /// Up to 16 string pairs.
    pub metadata: BTreeMap<String, String>,
    /// When it was saved (ms since the epoch).
    pub created_ms: i64,
}

/// An agent to save.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewAgentDef {
    /// Who saves it (an identity).
    pub owner: String,
    /// The model.
    pub model: String,
    /// Its name.
    pub name: Option<String>,
    /// Instructions appended to the adapter's own.
    pub instructions: Option<String>,
    /// Up to 16 string pairs.
    pub metadata: BTreeMap<String, String>,
}

/// A session to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// Who starts it (an identity): the only non-admin who may read it.
    pub owner: String,
    /// The adapter (`codex`, `claude_code`).
    pub adapter: String,
    /// The model handed to the agent's CLI.
    pub model: String,
    /// The saved agent it was made from, if any.
    pub agent_id: Option<String>,
    /// Its working directory (as granted by the scope).
    pub workdir: String,
    /// Up to 16 string pairs.
    pub metadata: BTreeMap<String, String>,
}

/// A session as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Its id (also its run's id).
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// Who started it.
    pub owner: String,
    /// The adapter.
    pub adapter: String,
    /// The model.
    pub model: String,
    /// The saved agent it was made from.
    pub agent_id: Option<String>,
    /// Its working directory.
    pub workdir: String,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
    /// `idle`, `in_progress` or `failed`.
    pub status: String,
    /// Why it failed: a stable code and a message.
    pub error: Option<(String, String)>,
    /// Turns started.
    pub turns: u64,
    /// Events appended (the last event's number).
    pub events: u64,
    /// Token use so far (`{input_tokens, output_tokens, total_tokens}`), as the runtime keeps it.
    pub usage: Value,
    /// What the isolation backend applied to its last turn.
    pub attestation: Value,
    /// When it started (ms since the epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub last_active_ms: i64,
    /// The agent CLI's own session id after its last turn (what the next turn resumes).
    pub cli_thread: Option<String>,
}

/// How a turn ended, recorded on its session.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    /// `idle` (ready for the next turn) or `failed`.
    pub status: String,
    /// Why it failed.
    pub error: Option<(String, String)>,
    /// The session's token use so far.
    pub usage: Value,
    /// What the backend applied to the turn.
    pub attestation: Value,
    /// The agent CLI's own session id after the turn (`None`: keep the one stored).
    pub cli_thread: Option<String>,
}

/// One stored event of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEvent {
    /// Its number in the session, from 1.
    pub seq: u64,
    /// Its type (`agent.session.turn.item.done`, ...).
    pub kind: String,
    /// The event as the API sends it.
    pub body: Value,
    /// When it was appended.
    pub created_ms: i64,
}

macro_rules! agent_def_columns {
    () => {
        "tenant, id, owner, model, name, instructions, metadata, created_ms"
    };
}
macro_rules! session_columns {
    () => {
        "tenant, id, owner, adapter, model, agent_id, workdir, metadata, status, error_code, \
         error_message, turns, events, usage, attestation, created_ms, last_active_ms, cli_thread"
    };
}

/// Inserts only while the owner `$3` has fewer than `$9` saved agents.
const INSERT_AGENT_DEF: &str = concat!(
    "INSERT INTO agent_defs (",
    agent_def_columns!(),
    ") SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE (SELECT COUNT(*) FROM agent_defs \
     WHERE tenant = $1 AND owner = $3) < $9"
);
const GET_AGENT_DEF: &str = concat!(
    "SELECT ",
    agent_def_columns!(),
    " FROM agent_defs WHERE tenant = $1 AND id = $2"
);
const LIST_AGENT_DEFS: &str = concat!(
    "SELECT ",
    agent_def_columns!(),
    " FROM agent_defs WHERE tenant = $1 \
     AND ($2 IS NULL OR created_ms < $2 OR (created_ms = $2 AND id < $3)) \
     AND ($5 IS NULL OR owner = $5) \
     ORDER BY created_ms DESC, id DESC LIMIT $4"
);
const DELETE_AGENT_DEF: &str = "DELETE FROM agent_defs WHERE tenant = $1 AND id = $2";
/// Inserts only while the owner `$3` has fewer than `$10` sessions.
const INSERT_SESSION: &str = concat!(
    "INSERT INTO agent_sessions (",
    session_columns!(),
    ", worker) SELECT $1, $2, $3, $4, $5, $6, $7, $8, 'idle', NULL, NULL, 0, 0, '{}', '{}', \
     $9, $9, NULL, NULL WHERE (SELECT COUNT(*) FROM agent_sessions WHERE tenant = $1 AND owner = $3) \
     < $10"
);
/// A session that runs no turn, nor an apply of its held changes (a live claim's lease).
const DELETE_SESSION: &str = "DELETE FROM agent_sessions WHERE tenant = $1 AND id = $2 \
     AND status <> 'in_progress' AND (hold_lease_until_ms IS NULL OR hold_lease_until_ms < $3)";
const DELETE_SESSION_EVENTS: &str =
    "DELETE FROM agent_session_events WHERE tenant = $1 AND session_id = $2";
/// A deleted session's holds go with it (migration 0023).
const DELETE_SESSION_HOLDS: &str = "DELETE FROM agent_holds WHERE tenant = $1 AND session_id = $2";
const DELETE_SESSION_HOLD_ENTRIES: &str =
    "DELETE FROM agent_hold_entries WHERE tenant = $1 AND session_id = $2";
const GET_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM agent_sessions WHERE tenant = $1 AND id = $2"
);
/// `$5`: only this owner's sessions, or every one of the tenant when NULL.
const LIST_SESSIONS: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM agent_sessions WHERE tenant = $1 \
     AND ($2 IS NULL OR created_ms < $2 OR (created_ms = $2 AND id < $3)) \
     AND ($5 IS NULL OR owner = $5) \
     ORDER BY created_ms DESC, id DESC LIMIT $4"
);
/// A turn starts only on an `idle` session whose held changes are not being applied (an
/// apply's lease, migration 0023): one writer of the workdir at a time, across replicas.
const CLAIM_TURN: &str = "UPDATE agent_sessions SET status = 'in_progress', turns = turns + 1, \
     worker = $3, last_active_ms = $4, cancel_turn = NULL WHERE tenant = $1 AND id = $2 \
     AND status = 'idle' AND (hold_lease_until_ms IS NULL OR hold_lease_until_ms < $4)";
/// Only the running turn ends, and only itself: turn `$10` (a turn a restart marked failed
/// stays so; an end of an earlier turn changes nothing of a later one).
const END_TURN: &str = "UPDATE agent_sessions SET status = $3, error_code = $4, \
     error_message = $5, usage = $6, attestation = $7, worker = NULL, last_active_ms = $8, \
     cli_thread = COALESCE($9, cli_thread), cancel_turn = NULL WHERE tenant = $1 AND id = $2 \
     AND status = 'in_progress' AND turns = $10";
/// Asks to cancel turn `$3`, only while it is the session's running turn.
const REQUEST_CANCEL: &str = "UPDATE agent_sessions SET cancel_turn = $3 WHERE tenant = $1 \
     AND id = $2 AND status = 'in_progress' AND turns = $3";
/// Whether a cancel of turn `$3` was asked (and it still runs).
const CANCEL_ASKED: &str = "SELECT COUNT(*) FROM agent_sessions WHERE tenant = $1 AND id = $2 \
     AND status = 'in_progress' AND cancel_turn = $3";
/// Reserves `$3` event numbers; nothing when that would pass the cap `$4`.
const RESERVE_EVENTS: &str = "UPDATE agent_sessions SET events = events + $3, \
     last_active_ms = $5 WHERE tenant = $1 AND id = $2 AND events + $3 <= $4";
const EVENTS_NOW: &str = "SELECT events FROM agent_sessions WHERE tenant = $1 AND id = $2";
const INSERT_EVENT: &str = "INSERT INTO agent_session_events (tenant, session_id, seq, kind, \
     body, created_ms) VALUES ($1, $2, $3, $4, $5, $6)";
const READ_EVENTS: &str = "SELECT seq, kind, body, created_ms FROM agent_session_events \
     WHERE tenant = $1 AND session_id = $2 AND seq > $3 ORDER BY seq LIMIT $4";

#[derive(sqlx::FromRow)]
struct AgentDefRow {
    tenant: String,
    id: String,
    owner: String,
    model: String,
    name: Option<String>,
    instructions: Option<String>,
    metadata: String,
    created_ms: i64,
}

impl AgentDefRow {
    fn into_def(self) -> Result<AgentDef, AgentStoreError> {
        Ok(AgentDef {
            metadata: from_json("agent metadata", &self.id, &self.metadata)?,
            id: self.id,
            tenant: self.tenant,
            owner: self.owner,
            model: self.model,
            name: self.name,
            instructions: self.instructions,
            created_ms: self.created_ms,
        })
    }
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    tenant: String,
    id: String,
    owner: String,
    adapter: String,
    model: String,
    agent_id: Option<String>,
    workdir: String,
    metadata: String,
    status: String,
    error_code: Option<String>,
    error_message: Option<String>,
    turns: i64,
    events: i64,
    usage: String,
    attestation: String,
    created_ms: i64,
    last_active_ms: i64,
    cli_thread: Option<String>,
}

impl SessionRow {
    fn into_session(self) -> Result<Session, AgentStoreError> {
        let id = self.id;
        Ok(Session {
            metadata: from_json("session metadata", &id, &self.metadata)?,
            usage: from_json("session usage", &id, &self.usage)?,
            attestation: from_json("session attestation", &id, &self.attestation)?,
            error: self.error_code.zip(self.error_message),
            tenant: self.tenant,
            owner: self.owner,
            adapter: self.adapter,
            model: self.model,
            agent_id: self.agent_id,
            workdir: self.workdir,
            status: self.status,
            turns: u64::try_from(self.turns).unwrap_or(0),
            events: u64::try_from(self.events).unwrap_or(0),
            created_ms: self.created_ms,
            last_active_ms: self.last_active_ms,
            cli_thread: self.cli_thread,
            id,
        })
    }
}

crate::lab::keyed!(AgentDef => created_ms, Session => created_ms);

fn not_found(what: &'static str, tenant: &str, id: &str) -> AgentStoreError {
    AgentStoreError::NotFound {
        what,
        id: id.to_owned(),
        tenant: tenant.to_owned(),
    }
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    pub(crate) fn agents_err(
        &self,
        what: &'static str,
    ) -> impl Fn(sqlx::Error) -> AgentStoreError + '_ {
        move |e| AgentStoreError::Store(self.redactor.query(what, e))
    }

    /// Saves an agent of `tenant`, refused ([`AgentStoreError::Quota`]) when its owner has
    /// `max_owned` saved agents already (counted in the statement that inserts).
    pub async fn create_agent_def(
        &self,
        tenant: &str,
        new: &NewAgentDef,
        max_owned: u64,
        now_ms: i64,
    ) -> Result<AgentDef, AgentStoreError> {
        check_plain(&[
            ("the tenant", tenant),
            ("the owner", &new.owner),
            ("the model", &new.model),
        ])?;
        let def = AgentDef {
            id: format!("agent_{}", uuid::Uuid::now_v7().simple()),
            tenant: tenant.to_owned(),
            owner: new.owner.clone(),
            model: new.model.clone(),
            name: new.name.clone(),
            instructions: new.instructions.clone(),
            metadata: new.metadata.clone(),
            created_ms: now_ms,
        };
        // Free text goes in as JSON text so a NUL is escaped, as the lab stores it.
        let q = self.agents_err("save an agent");
        let inserted = on_pool!(&self.pool, p => sqlx::query(INSERT_AGENT_DEF)
            .bind(tenant)
            .bind(def.id.as_str())
            .bind(def.owner.as_str())
            .bind(def.model.as_str())
            .bind(def.name.as_ref().map(json_text))
            .bind(def.instructions.as_ref().map(json_text))
            .bind(json_text(&def.metadata))
            .bind(now_ms)
            .bind(i64_of(max_owned))
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(q)?);
        if inserted == 0 {
            return Err(AgentStoreError::Quota {
                what: "saved agents",
                delete: "DELETE /v1/agents/{id}",
                owner: def.owner,
                max: max_owned,
            });
        }
        Ok(def)
    }

    /// A saved agent of `tenant`; `None` if it has none with `id`.
    pub async fn get_agent_def(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<AgentDef>, AgentStoreError> {
        let q = self.agents_err("read an agent");
        let row: Option<AgentDefRow> = on_pool!(&self.pool, p => sqlx::query_as(GET_AGENT_DEF)
            .bind(tenant)
            .bind(id)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(|r| r.into_def().and_then(unquote_def)).transpose()
    }

    /// A page of `tenant`'s saved agents (only `owner`'s when given), newest first: the
    /// filter is in the query, so a page and its cursor hold nothing of another owner's.
    pub async fn list_agent_defs(
        &self,
        tenant: &str,
        owner: Option<&str>,
        page: &Page,
    ) -> Result<Paged<AgentDef>, AgentStoreError> {
        let q = self.agents_err("list agents");
        let (after_ms, after_id) = cursor_binds(page);
        let rows: Vec<AgentDefRow> = on_pool!(&self.pool, p => sqlx::query_as(LIST_AGENT_DEFS)
            .bind(tenant)
            .bind(after_ms)
            .bind(after_id)
            .bind(i64::from(page.rows()) + 1)
            .bind(owner)
            .fetch_all(p)
            .await
            .map_err(q)?);
        page_of(rows, page, |r| r.into_def().and_then(unquote_def))
    }

    /// Deletes a saved agent of `tenant` (sessions made from it keep their copy).
    pub async fn delete_agent_def(&self, tenant: &str, id: &str) -> Result<(), AgentStoreError> {
        let q = self.agents_err("delete an agent");
        let n = on_pool!(&self.pool, p => sqlx::query(DELETE_AGENT_DEF)
            .bind(tenant)
            .bind(id)
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(q)?);
        if n == 0 {
            return Err(not_found("agent", tenant, id));
        }
        Ok(())
    }

    /// Starts a session of `tenant`, `idle` with no turn yet; `id` is its run's id. Refused
    /// ([`AgentStoreError::Quota`]) when its owner has `max_owned` sessions already (counted
    /// in the statement that inserts).
    pub async fn create_session(
        &self,
        tenant: &str,
        id: &str,
        new: &NewSession,
        max_owned: u64,
        now_ms: i64,
    ) -> Result<Session, AgentStoreError> {
        check_plain(&[
            ("the tenant", tenant),
            ("the session id", id),
            ("the owner", &new.owner),
            ("the adapter", &new.adapter),
            ("the model", &new.model),
            ("the workdir", &new.workdir),
        ])?;
        let q = self.agents_err("start a session");
        let inserted = on_pool!(&self.pool, p => sqlx::query(INSERT_SESSION)
            .bind(tenant)
            .bind(id)
            .bind(new.owner.as_str())
            .bind(new.adapter.as_str())
            .bind(new.model.as_str())
            .bind(new.agent_id.as_deref())
            .bind(new.workdir.as_str())
            .bind(json_text(&new.metadata))
            .bind(now_ms)
            .bind(i64_of(max_owned))
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(q)?);
        if inserted == 0 {
            return Err(AgentStoreError::Quota {
                what: "sessions",
                delete: "DELETE /v1/agents/sessions/{id}",
                owner: new.owner.clone(),
                max: max_owned,
            });
        }
        self.get_session(tenant, id)
            .await?
            .ok_or_else(|| not_found("session", tenant, id))
    }

    /// Deletes a session of `tenant`, its events and its holds, in one transaction. Refused
    /// ([`AgentStoreError::Busy`]) while a turn runs; [`AgentStoreError::NotFound`] if there is
    /// no such session.
    pub async fn delete_session(&self, tenant: &str, id: &str) -> Result<(), AgentStoreError> {
        let q = self.agents_err("delete a session");
        let now = crate::recorder::now_ms();
        let deleted = on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(&q)?;
            let n = sqlx::query(DELETE_SESSION)
                .bind(tenant)
                .bind(id)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(&q)?
                .rows_affected();
            if n > 0 {
                for delete in [DELETE_SESSION_EVENTS, DELETE_SESSION_HOLDS, DELETE_SESSION_HOLD_ENTRIES] {
                    sqlx::query(delete)
                        .bind(tenant)
                        .bind(id)
                        .execute(&mut *tx)
                        .await
                        .map_err(&q)?;
                }
                tx.commit().await.map_err(&q)?;
            }
            n
        });
        if deleted > 0 {
            return Ok(());
        }
        match self.get_session(tenant, id).await? {
            Some(s) => Err(AgentStoreError::Busy {
                id: id.to_owned(),
                // Idle but not deleted: a hold of it is being applied.
                status: match s.status.as_str() {
                    "idle" => "applying held changes".to_owned(),
                    _ => s.status.to_string(),
                },
            }),
            None => Err(not_found("session", tenant, id)),
        }
    }

    /// A session of `tenant`; `None` if it has none with `id`.
    pub async fn get_session(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Session>, AgentStoreError> {
        let q = self.agents_err("read a session");
        let row: Option<SessionRow> = on_pool!(&self.pool, p => sqlx::query_as(GET_SESSION)
            .bind(tenant)
            .bind(id)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(SessionRow::into_session).transpose()
    }

    /// A page of `tenant`'s sessions, newest first: `owner`'s only, or all with `None`.
    pub async fn list_sessions(
        &self,
        tenant: &str,
        owner: Option<&str>,
        page: &Page,
    ) -> Result<Paged<Session>, AgentStoreError> {
        let q = self.agents_err("list sessions");
        let (after_ms, after_id) = cursor_binds(page);
        let rows: Vec<SessionRow> = on_pool!(&self.pool, p => sqlx::query_as(LIST_SESSIONS)
            .bind(tenant)
            .bind(after_ms)
            .bind(after_id)
            .bind(i64::from(page.rows()) + 1)
            .bind(owner)
            .fetch_all(p)
            .await
            .map_err(q)?);
        page_of(rows, page, SessionRow::into_session)
    }

    /// Starts a turn of an `idle` session (marks it `in_progress`, worked by this process).
    /// Refused [`AgentStoreError::Busy`] when a turn runs (here or on another replica), a hold of
    /// the session is being applied, or the session failed.
    pub async fn claim_turn(
        &self,
        tenant: &str,
        id: &str,
        now_ms: i64,
    ) -> Result<Session, AgentStoreError> {
        let q = self.agents_err("start a turn");
        let claimed = on_pool!(&self.pool, p => sqlx::query(CLAIM_TURN)
            .bind(tenant)
            .bind(id)
            .bind(self.worker())
            .bind(now_ms)
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(q)?);
        let session = self
            .get_session(tenant, id)
            .await?
            .ok_or_else(|| not_found("session", tenant, id))?;
        if claimed == 0 {
            return Err(AgentStoreError::Busy {
                id: id.to_owned(),
                // Idle but not claimed: a hold of it is being applied.
                status: match session.status.as_str() {
                    "idle" => "applying held changes".to_owned(),
                    _ => session.status,
                },
            });
        }
        Ok(session)
    }

    /// Ends turn `turn` of a session (its number, as [`Store::claim_turn`]'s `turns`). A turn
    /// no longer running (a restart marked the session failed, or it ended already and
    /// another started) is left as it is: `Busy` names the session's status.
    pub async fn end_turn(
        &self,
        tenant: &str,
        id: &str,
        turn: u64,
        end: &TurnEnd,
        now_ms: i64,
    ) -> Result<(), AgentStoreError> {
        let q = self.agents_err("end a turn");
        let (code, message) = end.error.clone().unzip();
        let n = on_pool!(&self.pool, p => sqlx::query(END_TURN)
            .bind(tenant)
            .bind(id)
            .bind(end.status.as_str())
            .bind(code)
            .bind(message)
            .bind(json_text(&end.usage))
            .bind(json_text(&end.attestation))
            .bind(now_ms)
            .bind(end.cli_thread.as_deref())
            .bind(i64_of(turn))
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(q)?);
        if n == 0 {
            return match self.get_session(tenant, id).await? {
                Some(s) => Err(AgentStoreError::Busy {
                    id: id.to_owned(),
                    status: s.status,
                }),
                None => Err(not_found("session", tenant, id)),
            };
        }
        Ok(())
    }

    /// Asks to cancel turn `turn` of a session, whichever process runs it (that process polls
    /// [`Store::cancel_asked`]); `false` when that turn does not run (the session is idle, or
    /// runs a later turn): nothing is recorded then.
    pub async fn request_cancel(
        &self,
        tenant: &str,
        id: &str,
        turn: u64,
    ) -> Result<bool, AgentStoreError> {
        let q = self.agents_err("cancel a turn");
        let n = on_pool!(&self.pool, p => sqlx::query(REQUEST_CANCEL)
            .bind(tenant)
            .bind(id)
            .bind(i64_of(turn))
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(q)?);
        Ok(n > 0)
    }

    /// Whether a cancel of turn `turn` of a session was asked ([`Store::request_cancel`]) and
    /// the turn still runs.
    pub async fn cancel_asked(
        &self,
        tenant: &str,
        id: &str,
        turn: u64,
    ) -> Result<bool, AgentStoreError> {
        let q = self.agents_err("read a turn's cancel");
        let (n,): (i64,) = on_pool!(&self.pool, p => sqlx::query_as(CANCEL_ASKED)
            .bind(tenant)
            .bind(id)
            .bind(i64_of(turn))
            .fetch_one(p)
            .await
            .map_err(q)?);
        Ok(n > 0)
    }

    /// Appends `events` (type, body) to a session, numbered after its last; returns their
    /// numbers. All or nothing: past [`MAX_SESSION_EVENTS`], or with a body over
    /// [`MAX_EVENT_BYTES`], nothing is kept.
    pub async fn append_session_events(
        &self,
        tenant: &str,
        id: &str,
        events: &[(String, Value)],
        now_ms: i64,
    ) -> Result<Vec<u64>, AgentStoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let bodies: Vec<String> = events.iter().map(|(_, b)| json_text(b)).collect();
        if bodies.iter().any(|b| b.len() > MAX_EVENT_BYTES)
            || events.iter().any(|(k, _)| k.contains('\0'))
        {
            return Err(AgentStoreError::EventsFull { id: id.to_owned() });
        }
        let n = i64::try_from(events.len()).unwrap_or(i64::MAX);
        let q = self.agents_err("append session events");
        let last: Option<i64> = on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(&q)?;
            let reserved = sqlx::query(RESERVE_EVENTS)
                .bind(tenant)
                .bind(id)
                .bind(n)
                .bind(i64_of(MAX_SESSION_EVENTS))
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(&q)?
                .rows_affected();
            if reserved == 0 {
                None
            } else {
                let (last,): (i64,) = sqlx::query_as(EVENTS_NOW)
                    .bind(tenant)
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(&q)?;
                for (i, ((kind, _), body)) in events.iter().zip(&bodies).enumerate() {
                    let seq = last - n + 1 + i64::try_from(i).unwrap_or(i64::MAX);
                    sqlx::query(INSERT_EVENT)
                        .bind(tenant)
                        .bind(id)
                        .bind(seq)
                        .bind(kind.as_str())
                        .bind(body.as_str())
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .map_err(&q)?;
                }
                tx.commit().await.map_err(&q)?;
                Some(last)
            }
        });
        let Some(last) = last else {
            return match self.get_session(tenant, id).await? {
                Some(_) => Err(AgentStoreError::EventsFull { id: id.to_owned() }),
                None => Err(not_found("session", tenant, id)),
            };
        };
        let last = u64::try_from(last).unwrap_or(0);
        let n = events.len() as u64;
        Ok((last + 1 - n..=last).collect())
    }

    /// Up to `limit` (at most [`MAX_EVENTS_READ`]) events of a session numbered after `after`,
    /// in order.
    pub async fn session_events(
        &self,
        tenant: &str,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<SessionEvent>, AgentStoreError> {
        let q = self.agents_err("read session events");
        let limit = limit.clamp(1, MAX_EVENTS_READ);
        let rows: Vec<(i64, String, String, i64)> = on_pool!(&self.pool, p => sqlx::query_as(READ_EVENTS)
            .bind(tenant)
            .bind(id)
            .bind(i64_of(after))
            .bind(i64::from(limit))
            .fetch_all(p)
            .await
            .map_err(q)?);
        rows.into_iter()
            .map(|(seq, kind, body, created_ms)| {
                Ok(SessionEvent {
                    seq: u64::try_from(seq).unwrap_or(0),
                    body: from_json("session event", id, &body)?,
                    kind,
                    created_ms,
                })
            })
            .collect()
    }
}

/// A saved agent's free text back from its JSON text.
fn unquote_def(mut d: AgentDef) -> Result<AgentDef, AgentStoreError> {
    let id = d.id.clone();
    d.name = d
        .name
        .map(|t| from_json::<String>("agent name", &id, &t))
        .transpose()?;
    d.instructions = d
        .instructions
        .map(|t| from_json::<String>("agent instructions", &id, &t))
        .transpose()?;
    Ok(d)
}
