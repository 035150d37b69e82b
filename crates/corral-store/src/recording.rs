//! Recordings (issue 15, migrations 0009 and 0011): the ordered call timeline of a run marked for
//! recording, per (tenant, run id, principal identity); the gateway writes them through
//! [`crate::RecordingWriter`] (group commit).
//!
//! - **Ownership**: a recording is the principal identity's (`Principal::identity()`), never
//!   the bare id: a JWT whose `sub` names a static token is another principal. Two principals
//!   recording under one run id get one recording each, so neither captures, hides or reads the
//!   other's calls; an admin reading a run id several principals recorded names one.
//!
//! - **Append**: one transaction (PostgreSQL: the recording row is read `FOR UPDATE`; SQLite:
//!   `BEGIN IMMEDIATE`) creates the recording at its first event, numbers the event `events + 1` (so `seq` runs from 1 without gaps) and
//!   checks the cap: the event that would take the recording over [`RecordingLimits`]'
//!   `max_bytes` or `max_events` is not stored, the recording is marked `capped`, and no later
//!   event is stored either. Never a silent truncation.
//! - **Gaps**: an event the gateway could not write marks the recording `gapped`.
//! - **Reads** are tenant-scoped: another tenant's recording is `None`, as if it did not exist.
//! - **Retention**: a recording expires `retention` after it was created;
//!   [`Store::purge_recordings`] deletes the expired ones and their events.

use std::time::Duration;

use corral_policy::codes;
use corral_ports::audit::AttestationRecord;
use corral_ports::recording::{Recorded, RecordedCall, RecordingKey};
use corral_ports::runs::RunPurpose;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::lab::{Page, PageCursor, Paged};
use crate::{Pool, Store, StoreError};

/// The most a recording may take unless configured: the stored text of its events, in bytes
/// (16 MiB).
pub const MAX_RECORDING_BYTES: u64 = corral_policy::limits::DEFAULT_RECORDING_BYTES;
/// The most events a recording may hold unless configured (10,000).
pub const MAX_RECORDING_EVENTS: u64 = corral_policy::limits::DEFAULT_RECORDING_EVENTS;
/// How long a recording is kept after it was created, unless configured (30 days).
pub const DEFAULT_RECORDING_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The cap and the retention of recordings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordingLimits {
    /// Bytes of stored event text per recording.
    pub max_bytes: u64,
    /// Events per recording.
    pub max_events: u64,
    /// How long a recording is kept after its first event.
    pub retention: Duration,
    /// Live (unexpired) recordings per tenant: a call that would start one more is refused
    /// before it runs (`recording.limit`).
    pub max_per_tenant: u64,
    /// Live recordings per principal (by identity) in a tenant: its share, so one principal
    /// cannot fill the tenant's (`recording.limit`).
    pub max_per_principal: u64,
}

impl Default for RecordingLimits {
    fn default() -> Self {
        RecordingLimits {
            max_bytes: MAX_RECORDING_BYTES,
            max_events: MAX_RECORDING_EVENTS,
            retention: DEFAULT_RECORDING_RETENTION,
            max_per_tenant: corral_policy::limits::DEFAULT_RECORDINGS_PER_TENANT,
            max_per_principal: corral_policy::limits::DEFAULT_RECORDINGS_PER_PRINCIPAL,
        }
    }
}

/// A recording, without its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    /// The tenant that owns it.
    pub tenant: String,
    /// The run id.
    pub run_id: String,
    /// The full identity of the principal whose calls it holds (`Principal::identity()`):
    /// `token:service:bot`, `jwt:<issuer>:person:ada`, ...; `legacy:<id>` for a recording
    /// written before identities were kept (only an admin reads those).
    pub identity: String,
    /// That principal's id, for display.
    pub principal: String,
    /// The run's purpose.
    pub purpose: RunPurpose,
    /// When its first event was written (ms since the epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// Events stored.
    pub events: u64,
    /// Bytes of stored event text.
    pub bytes: u64,
    /// Whether it reached its cap: later events were not stored.
    pub capped: bool,
    /// Whether an event could not be written: its timeline has a hole.
    pub gapped: bool,
    /// When retention deletes it.
    pub expires_ms: i64,
    /// The task input the run was given, when it was kept (a lab run's scenario inputs, or
    /// what `PUT /v1/sandbox/recordings/{run}/input` set): what replay re-runs the task from.
    #[serde(default)]
    pub input: Option<Value>,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordingEvent {
    /// Its place in the timeline, from 1.
    pub seq: u64,
    /// The op id.
    pub op: String,
    /// The canonical arguments (JSON).
    pub args: Value,
    /// The response; `None` for a refusal, an error, or a stream.
    pub response: Option<Value>,
    /// The code of a refusal or an op error.
    pub error_code: Option<String>,
    /// What the isolation backend applied.
    pub attestation: Option<AttestationRecord>,
    /// When the call arrived.
    pub started_ms: i64,
    /// How long it took, in microseconds.
    pub duration_us: i64,
}

/// Why a recording operation was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordingError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The recording's task input is already set (it is set once).
    #[error(
        "the task input of recording {run_id:?} is already set; it is kept as first given: record \
         the task again under a new run id"
    )]
    InputSet {
        /// The run id.
        run_id: String,
    },
    /// The task input is larger than the recording's size cap.
    #[error(
        "the task input is {bytes} bytes, over the recording's cap of {max} bytes; shorten it, or \
         raise `recordings.max_bytes`"
    )]
    InputTooLarge {
        /// Its size as JSON text.
        bytes: u64,
        /// The cap.
        max: u64,
    },
    /// The event cannot be stored as given.
    #[error("a recorded event cannot be stored: {reason}")]
    Invalid {
        /// What is wrong.
        reason: String,
    },
}

impl RecordingError {
    /// The stable code (`recording.*`, or the store's `store.*`).
    pub fn code(&self) -> &'static str {
        match self {
            RecordingError::Store(e) => e.code(),
            RecordingError::Invalid { .. } => codes::RECORDING_INVALID,
            RecordingError::InputSet { .. } => codes::RECORDING_INPUT_SET,
            RecordingError::InputTooLarge { .. } => codes::RECORDING_INPUT_TOO_LARGE,
        }
    }
}

fn invalid(reason: impl Into<String>) -> RecordingError {
    RecordingError::Invalid {
        reason: reason.into(),
    }
}

fn corrupt(what: &str, run_id: &str, detail: impl std::fmt::Display) -> RecordingError {
    RecordingError::Store(StoreError::QueryFailed {
        what: "read a recording",
        reason: format!("the stored {what} of recording {run_id:?} cannot be read: {detail}"),
    })
}

// ---------------------------------------------------------------------------------------------
// SQL
// ---------------------------------------------------------------------------------------------

const RECORDING_COLUMNS: &str = "tenant, run_id, identity, principal, purpose, created_ms, \
    updated_ms, events, bytes, capped, gapped, expires_ms, input";

// Every statement on one recording names it by `$1` tenant, `$2` run id, `$3` identity.
pub(crate) const CREATE: &str = "INSERT INTO recordings (tenant, run_id, identity, principal, purpose, \
    created_ms, updated_ms, events, bytes, capped, gapped, expires_ms) \
    VALUES ($1, $2, $3, $4, $5, $6, $6, 0, 0, 0, 0, $7) \
    ON CONFLICT (tenant, run_id, identity) DO NOTHING";
pub(crate) const STATE: &str = "SELECT events, bytes, capped, gapped FROM recordings \
    WHERE tenant = $1 AND run_id = $2 AND identity = $3";
const STATE_LOCKED: &str = "SELECT events, bytes, capped, gapped FROM recordings \
    WHERE tenant = $1 AND run_id = $2 AND identity = $3 FOR UPDATE";
pub(crate) const MARK_GAPPED: &str = "UPDATE recordings SET gapped = 1, updated_ms = $4 \
    WHERE tenant = $1 AND run_id = $2 AND identity = $3";
pub(crate) const UPDATE_STATE: &str = "UPDATE recordings SET events = $4, bytes = $5, \
    capped = $6, gapped = $7, updated_ms = $8, writer = COALESCE($9, writer) \
    WHERE tenant = $1 AND run_id = $2 AND identity = $3";
const SET_INPUT: &str = "UPDATE recordings SET input = $4, bytes = bytes + $5, updated_ms = $6 \
    WHERE tenant = $1 AND run_id = $2 AND identity = $3 AND input IS NULL";
const COUNT_LIVE: &str = "SELECT COUNT(*) FROM recordings WHERE tenant = $1 AND expires_ms > $2 \
    AND ($3 IS NULL OR identity = $3)";
const DELETE_EVENTS: &str =
    "DELETE FROM recording_events WHERE tenant = $1 AND run_id = $2 AND identity = $3";
const DELETE: &str = "DELETE FROM recordings WHERE tenant = $1 AND run_id = $2 AND identity = $3";
pub(crate) const INSERT_EVENT: &str = "INSERT INTO recording_events (tenant, run_id, identity, seq, op, \
    args, response, error_code, attestation, started_ms, duration_us) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

fn get_sql() -> String {
    format!(
        "SELECT {RECORDING_COLUMNS} FROM recordings \
         WHERE tenant = $1 AND run_id = $2 AND identity = $3"
    )
}

fn of_run_sql() -> String {
    format!(
        "SELECT {RECORDING_COLUMNS} FROM recordings WHERE tenant = $1 AND run_id = $2 \
         ORDER BY identity LIMIT $3"
    )
}

/// A page, newest first; the cursor is (created_ms, run id, identity).
fn list_sql() -> String {
    format!(
        "SELECT {RECORDING_COLUMNS} FROM recordings WHERE tenant = $1 AND \
         ($5 IS NULL OR identity = $5) AND \
         ($2 IS NULL OR created_ms < $2 OR (created_ms = $2 AND run_id < $3) \
          OR (created_ms = $2 AND run_id = $3 AND identity < $6)) \
         ORDER BY created_ms DESC, run_id DESC, identity DESC LIMIT $4"
    )
}

const EVENTS: &str = "SELECT seq, op, args, response, error_code, attestation, started_ms, \
    duration_us FROM recording_events WHERE tenant = $1 AND run_id = $2 AND identity = $3 \
    ORDER BY seq";

const PURGE_EVENTS: &str = "DELETE FROM recording_events WHERE EXISTS (SELECT 1 FROM recordings \
    r WHERE r.tenant = recording_events.tenant AND r.run_id = recording_events.run_id \
    AND r.identity = recording_events.identity AND r.expires_ms <= $1)";
const PURGE: &str = "DELETE FROM recordings WHERE expires_ms <= $1";

#[derive(sqlx::FromRow)]
struct RecordingRow {
    tenant: String,
    run_id: String,
    identity: String,
    principal: String,
    purpose: String,
    created_ms: i64,
    updated_ms: i64,
    events: i64,
    bytes: i64,
    capped: i32,
    gapped: i32,
    expires_ms: i64,
    input: Option<String>,
}

impl RecordingRow {
    fn into_recording(self) -> Result<Recording, RecordingError> {
        let purpose = RunPurpose::parse(&self.purpose)
            .ok_or_else(|| corrupt("purpose", &self.run_id, &self.purpose))?;
        let events = u64::try_from(self.events).map_err(|e| corrupt("count", &self.run_id, e))?;
        let bytes = u64::try_from(self.bytes).map_err(|e| corrupt("size", &self.run_id, e))?;
        let input = self
            .input
            .as_deref()
            .map(|t| serde_json::from_str(t).map_err(|e| corrupt("task input", &self.run_id, e)))
            .transpose()?;
        Ok(Recording {
            tenant: self.tenant,
            run_id: self.run_id,
            identity: self.identity,
            principal: self.principal,
            purpose,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            events,
            bytes,
            capped: self.capped != 0,
            gapped: self.gapped != 0,
            expires_ms: self.expires_ms,
            input,
        })
    }
}

#[derive(sqlx::FromRow)]
struct EventRow {
    seq: i64,
    op: String,
    args: String,
    response: Option<String>,
    error_code: Option<String>,
    attestation: Option<String>,
    started_ms: i64,
    duration_us: i64,
}

impl EventRow {
    fn into_event(self, run_id: &str) -> Result<RecordingEvent, RecordingError> {
        let json = |what: &str, t: &str| -> Result<Value, RecordingError> {
            serde_json::from_str(t).map_err(|e| corrupt(what, run_id, e))
        };
        Ok(RecordingEvent {
            seq: u64::try_from(self.seq).map_err(|e| corrupt("seq", run_id, e))?,
            op: self.op,
            args: json("arguments", &self.args)?,
            response: self
                .response
                .as_deref()
                .map(|t| json("response", t))
                .transpose()?,
            error_code: self.error_code,
            attestation: self
                .attestation
                .as_deref()
                .map(|t| serde_json::from_str(t).map_err(|e| corrupt("attestation", run_id, e)))
                .transpose()?,
            started_ms: self.started_ms,
            duration_us: self.duration_us,
        })
    }
}

/// The event's texts as stored: (response, attestation).
fn event_texts(call: &RecordedCall) -> (Option<String>, Option<String>) {
    (
        call.response.as_ref().map(json_text),
        call.attestation.as_ref().map(json_text),
    )
}

/// JSON text of plain data (serializing maps with string keys, strings and numbers cannot fail).
fn json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

pub(crate) fn check_plain(key: &RecordingKey, call: &RecordedCall) -> Result<(), RecordingError> {
    let fields = [
        ("the tenant", key.tenant.as_str()),
        ("the run id", key.run_id.as_str()),
        ("the identity", key.identity.as_str()),
        ("the principal", key.principal.as_str()),
        ("the op", call.op.as_str()),
        ("the arguments", call.args.as_str()),
        ("the error code", call.error_code.as_deref().unwrap_or("")),
    ];
    match fields.iter().find(|(_, v)| v.contains('\0')) {
        Some((name, _)) => Err(invalid(format!(
            "{name} contains a raw NUL character; identifiers are plain text and arguments \
             canonical JSON (which escapes NUL)"
        ))),
        None => Ok(()),
    }
}

pub(crate) fn expires(now_ms: i64, limits: &RecordingLimits) -> i64 {
    let keep = i64::try_from(limits.retention.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_add(keep)
}

/// A recording's state while a batch is written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct State {
    pub(crate) events: u64,
    pub(crate) bytes: u64,
    pub(crate) capped: bool,
    pub(crate) gapped: bool,
}

impl State {
    pub(crate) fn from_row((events, bytes, capped, gapped): (i64, i64, i32, i32)) -> State {
        State {
            events: u64::try_from(events).unwrap_or(u64::MAX),
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            capped: capped != 0,
            gapped: gapped != 0,
        }
    }

    /// Places an event of `size` bytes: the next `seq`, or `Capped` when it would pass the cap
    /// (the recording is capped from then on: no later event either).
    pub(crate) fn place(&mut self, size: u64, limits: &RecordingLimits) -> Recorded {
        if self.capped {
            return Recorded::Capped;
        }
        if self.events.saturating_add(1) > limits.max_events
            || self.bytes.saturating_add(size) > limits.max_bytes
        {
            self.capped = true;
            return Recorded::Capped;
        }
        self.events += 1;
        self.bytes = self.bytes.saturating_add(size);
        Recorded::Stored { seq: self.events }
    }
}

/// An event ready to store: its texts and size computed by the calling task.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) key: RecordingKey,
    pub(crate) call: RecordedCall,
    pub(crate) response: Option<String>,
    pub(crate) attestation: Option<String>,
    pub(crate) size: u64,
    pub(crate) now_ms: i64,
}

impl Pending {
    /// Checks and encodes `call` (on the caller's task, in parallel with other calls).
    pub(crate) fn new(
        key: &RecordingKey,
        call: &RecordedCall,
        now_ms: i64,
    ) -> Result<Pending, RecordingError> {
        check_plain(key, call)?;
        let (response, attestation) = event_texts(call);
        // `RecordedCall::stored_bytes`, from the texts already made (no second encoding).
        let size = call.op.len()
            + call.args.len()
            + response.as_ref().map_or(0, String::len)
            + call.error_code.as_ref().map_or(0, String::len)
            + attestation.as_ref().map_or(0, String::len);
        Ok(Pending {
            key: key.clone(),
            call: call.clone(),
            response,
            attestation,
            size: u64::try_from(size).unwrap_or(u64::MAX),
            now_ms,
        })
    }
}

/// One thing a batch writes: an event, or a gap mark.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Item {
    Event(Pending),
    Gap { key: RecordingKey, now_ms: i64 },
}

impl Item {
    pub(crate) fn key(&self) -> &RecordingKey {
        match self {
            Item::Event(p) => &p.key,
            Item::Gap { key, .. } => key,
        }
    }

    fn now_ms(&self) -> i64 {
        match self {
            Item::Event(p) => p.now_ms,
            Item::Gap { now_ms, .. } => *now_ms,
        }
    }
}

/// A recording's name in a batch.
pub(crate) type KeyId = (String, String, String);

fn key_id(k: &RecordingKey) -> KeyId {
    (k.tenant.clone(), k.run_id.clone(), k.identity.clone())
}

/// The distinct recordings of a batch, each with the first item naming it, in (tenant, run
/// id, identity) order: every writer locks rows in the same order, so two never deadlock.
pub(crate) fn batch_keys(items: &[Item]) -> std::collections::BTreeMap<KeyId, &Item> {
    let mut keys = std::collections::BTreeMap::new();
    for item in items {
        keys.entry(key_id(item.key())).or_insert(item);
    }
    keys
}

/// Writes a batch inside the open transaction `$tx` (sqlx), reading each recording's state with
/// `$state` (which locks the row where the begin did not); the outcome of each event, in order.
macro_rules! commit_in {
    ($store:expr, $tx:expr, $state:expr, $items:expr, $writer:expr) => {{
        let q = |e| RecordingError::Store($store.redactor.query("record calls", e));
        let limits = $store.recording_limits;
        let mut tx = $tx.map_err(&q)?;
        let mut states = std::collections::BTreeMap::new();
        for (id, first) in batch_keys($items) {
            let k = first.key();
            sqlx::query(CREATE)
                .bind(&k.tenant)
                .bind(&k.run_id)
                .bind(&k.identity)
                .bind(&k.principal)
                .bind(k.purpose.as_str())
                .bind(first.now_ms())
                .bind(expires(first.now_ms(), &limits))
                .execute(&mut *tx)
                .await
                .map_err(&q)?;
            let row: (i64, i64, i32, i32) = sqlx::query_as($state)
                .bind(&k.tenant)
                .bind(&k.run_id)
                .bind(&k.identity)
                .fetch_one(&mut *tx)
                .await
                .map_err(&q)?;
            states.insert(id, (State::from_row(row), first.now_ms()));
        }
        let mut outcomes = Vec::with_capacity($items.len());
        for item in $items {
            let Some((state, at)) = states.get_mut(&key_id(item.key())) else {
                continue;
            };
            *at = (*at).max(item.now_ms());
            let p = match item {
                Item::Gap { .. } => {
                    state.gapped = true;
                    continue;
                }
                Item::Event(p) => p,
            };
            let placed = state.place(p.size, &limits);
            outcomes.push(placed);
            let Recorded::Stored { seq } = placed else {
                continue;
            };
            let seq = i64::try_from(seq).map_err(|_| invalid("the event count is over i64"))?;
            sqlx::query(INSERT_EVENT)
                .bind(&p.key.tenant)
                .bind(&p.key.run_id)
                .bind(&p.key.identity)
                .bind(seq)
                .bind(&p.call.op)
                .bind(&p.call.args)
                .bind(p.response.as_deref())
                .bind(p.call.error_code.as_deref())
                .bind(p.attestation.as_deref())
                .bind(p.call.started_ms)
                .bind(p.call.duration_us)
                .execute(&mut *tx)
                .await
                .map_err(&q)?;
        }
        for ((tenant, run_id, identity), (st, at)) in &states {
            let (events, bytes) = state_numbers(st)?;
            sqlx::query(UPDATE_STATE)
                .bind(tenant)
                .bind(run_id)
                .bind(identity)
                .bind(events)
                .bind(bytes)
                .bind(i32::from(st.capped))
                .bind(i32::from(st.gapped))
                .bind(*at)
                .bind($writer)
                .execute(&mut *tx)
                .await
                .map_err(&q)?;
        }
        tx.commit().await.map_err(&q)?;
        Ok(outcomes)
    }};
}

/// A state's counters as stored.
pub(crate) fn state_numbers(st: &State) -> Result<(i64, i64), RecordingError> {
    Ok((
        i64::try_from(st.events).map_err(|_| invalid("the event count is over i64"))?,
        i64::try_from(st.bytes).map_err(|_| invalid("the size is over i64"))?,
    ))
}

impl Store {
    /// This store with other recording limits (tests, and the `recordings:` config).
    pub fn with_recording_limits(mut self, limits: RecordingLimits) -> Store {
        self.recording_limits = limits;
        self
    }

    /// The recording limits in force.
    pub fn recording_limits(&self) -> RecordingLimits {
        self.recording_limits
    }

    /// Appends `call` to the recording of `key` now, in a transaction of its own (see the
    /// module doc): `Stored { seq }`, or `Capped` when it would pass the cap (or the recording
    /// already had). The gateway writes through [`crate::RecordingWriter`] instead, which
    /// batches events the same way without the caller waiting.
    pub async fn record_call(
        &self,
        key: &RecordingKey,
        call: &RecordedCall,
        now_ms: i64,
    ) -> Result<Recorded, RecordingError> {
        let items = [Item::Event(Pending::new(key, call, now_ms)?)];
        let outcomes = self.commit_recordings(&items, None).await?;
        Ok(outcomes.first().copied().unwrap_or(Recorded::Capped))
    }

    /// Writes a batch of events and gap marks in one transaction; the outcome of each event,
    /// in order. `writer` is the epoch of the writer that queued them (the recordings are
    /// marked with it until it shuts down cleanly).
    pub(crate) async fn commit_recordings(
        &self,
        items: &[Item],
        writer: Option<&str>,
    ) -> Result<Vec<Recorded>, RecordingError> {
        match &self.pool {
            Pool::Postgres(p) => commit_in!(self, p.begin().await, STATE_LOCKED, items, writer),
            Pool::Sqlite(p) => commit_in!(
                self,
                p.begin_with("BEGIN IMMEDIATE").await,
                STATE,
                items,
                writer
            ),
        }
    }

    /// Marks the recording of `key` `gapped`, creating it if needed.
    pub async fn mark_recording_gapped(
        &self,
        key: &RecordingKey,
        now_ms: i64,
    ) -> Result<(), RecordingError> {
        let items = [Item::Gap {
            key: key.clone(),
            now_ms,
        }];
        self.commit_recordings(&items, None).await.map(|_| ())
    }

    /// Keeps `input` as the task input of the recording of `key` (creating the recording if
    /// needed). It is set once (`recording.input_set` after) and counts against the recording's
    /// byte cap.
    pub async fn set_recording_input(
        &self,
        key: &RecordingKey,
        input: &Value,
        now_ms: i64,
    ) -> Result<(), RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("keep a recording's task input", e));
        let text = json_text(input);
        let bytes = u64::try_from(text.len()).unwrap_or(u64::MAX);
        let max = self.recording_limits.max_bytes;
        if bytes > max {
            return Err(RecordingError::InputTooLarge { bytes, max });
        }
        if [&text, &key.run_id, &key.identity, &key.principal]
            .iter()
            .any(|t| t.contains('\0'))
        {
            return Err(invalid("a raw NUL character in the run id or principal"));
        }
        let size = i64::try_from(bytes).map_err(|_| invalid("the input size is over i64"))?;
        let exp = expires(now_ms, &self.recording_limits);
        let changed = on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(&q)?;
            sqlx::query(CREATE)
                .bind(&key.tenant)
                .bind(&key.run_id)
                .bind(&key.identity)
                .bind(&key.principal)
                .bind(key.purpose.as_str())
                .bind(now_ms)
                .bind(exp)
                .execute(&mut *tx)
                .await
                .map_err(&q)?;
            let n = sqlx::query(SET_INPUT)
                .bind(&key.tenant)
                .bind(&key.run_id)
                .bind(&key.identity)
                .bind(&text)
                .bind(size)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(&q)?
                .rows_affected();
            tx.commit().await.map_err(&q)?;
            n
        });
        if changed == 0 {
            return Err(RecordingError::InputSet {
                run_id: key.run_id.clone(),
            });
        }
        Ok(())
    }

    /// How many recordings of `tenant` (of the principal `identity` in it, when given) are live
    /// (not expired) at `now_ms`.
    pub(crate) async fn live_recordings(
        &self,
        tenant: &str,
        identity: Option<&str>,
        now_ms: i64,
    ) -> Result<u64, RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("count recordings", e));
        let (n,): (i64,) = on_pool!(&self.pool, p => sqlx::query_as(COUNT_LIVE)
            .bind(tenant)
            .bind(now_ms)
            .bind(identity)
            .fetch_one(p)
            .await
            .map_err(&q)?);
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The recording of `run_id` by the principal `identity` in `tenant`, without its events;
    /// `None` if there is none.
    pub async fn get_recording(
        &self,
        tenant: &str,
        run_id: &str,
        identity: &str,
    ) -> Result<Option<Recording>, RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("read a recording", e));
        // Read your writes: every event queued before this read is committed first.
        self.flush_recordings().await;
        let sql = get_sql();
        let row: Option<RecordingRow> = on_pool!(&self.pool, p => sqlx::query_as(&sql)
            .bind(tenant)
            .bind(run_id)
            .bind(identity)
            .fetch_optional(p)
            .await
            .map_err(&q)?);
        row.map(RecordingRow::into_recording).transpose()
    }

    /// The recordings of `run_id` in `tenant`, one per principal that recorded under it, by
    /// identity (at most `limit`).
    pub async fn recordings_of_run(
        &self,
        tenant: &str,
        run_id: &str,
        limit: u32,
    ) -> Result<Vec<Recording>, RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("read a run's recordings", e));
        // Read your writes: every event queued before this read is committed first.
        self.flush_recordings().await;
        let sql = of_run_sql();
        let rows: Vec<RecordingRow> = on_pool!(&self.pool, p => sqlx::query_as(&sql)
            .bind(tenant)
            .bind(run_id)
            .bind(i64::from(limit))
            .fetch_all(p)
            .await
            .map_err(&q)?);
        rows.into_iter().map(RecordingRow::into_recording).collect()
    }

    /// The events of the recording of `run_id` by `identity` in `tenant`, by `seq` (empty if
    /// there is no such recording: ask [`Store::get_recording`] first).
    pub async fn recording_events(
        &self,
        tenant: &str,
        run_id: &str,
        identity: &str,
    ) -> Result<Vec<RecordingEvent>, RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("read a recording's events", e));
        // Read your writes: every event queued before this read is committed first.
        self.flush_recordings().await;
        let rows: Vec<EventRow> = on_pool!(&self.pool, p => sqlx::query_as(EVENTS)
            .bind(tenant)
            .bind(run_id)
            .bind(identity)
            .fetch_all(p)
            .await
            .map_err(&q)?);
        rows.into_iter().map(|r| r.into_event(run_id)).collect()
    }

    /// The recordings of `tenant` (only those of the principal `identity` when given), newest
    /// first, a page at a time (the cursor's id is the run id, `/`, the identity: a run id holds no `/`).
    pub async fn list_recordings(
        &self,
        tenant: &str,
        identity: Option<&str>,
        page: &Page,
    ) -> Result<Paged<Recording>, RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("list recordings", e));
        // Read your writes: every event queued before this read is committed first.
        self.flush_recordings().await;
        let rows_wanted = page.rows();
        let (after_ms, after_run, after_identity) = match &page.after {
            Some(c) => {
                let (run, identity) = c.id.split_once('/').unwrap_or((c.id.as_str(), ""));
                (Some(c.created_ms), run, identity)
            }
            None => (None, "", ""),
        };
        let sql = list_sql();
        let rows: Vec<RecordingRow> = on_pool!(&self.pool, p => sqlx::query_as(&sql)
            .bind(tenant)
            .bind(after_ms)
            .bind(after_run)
            .bind(i64::from(rows_wanted) + 1)
            .bind(identity)
            .bind(after_identity)
            .fetch_all(p)
            .await
            .map_err(&q)?);
        let mut items = rows
            .into_iter()
            .map(RecordingRow::into_recording)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if items.len() > rows_wanted as usize {
            items.truncate(rows_wanted as usize);
            items.last().map(|r| PageCursor {
                created_ms: r.created_ms,
                id: format!("{}/{}", r.run_id, r.identity),
            })
        } else {
            None
        };
        Ok(Paged { items, next })
    }

    /// Deletes the recording of `run_id` by `identity` in `tenant`, with its events, in one
    /// transaction (an admin's delete: it frees its principal's and its tenant's share);
    /// whether there was one. A later recorded call of that run by that principal starts a
    /// new recording, as after retention.
    pub async fn delete_recording(
        &self,
        tenant: &str,
        run_id: &str,
        identity: &str,
    ) -> Result<bool, RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("delete a recording", e));
        // Every queued event is committed first, so none lands after the delete.
        self.flush_recordings().await;
        let deleted = on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(&q)?;
            sqlx::query(DELETE_EVENTS)
                .bind(tenant)
                .bind(run_id)
                .bind(identity)
                .execute(&mut *tx)
                .await
                .map_err(&q)?;
            let n = sqlx::query(DELETE)
                .bind(tenant)
                .bind(run_id)
                .bind(identity)
                .execute(&mut *tx)
                .await
                .map_err(&q)?
                .rows_affected();
            tx.commit().await.map_err(&q)?;
            n
        });
        Ok(deleted > 0)
    }

    /// Deletes every recording (of every tenant) expired at `now_ms`, with its events, in one
    /// transaction; returns how many recordings were deleted.
    pub async fn purge_recordings(&self, now_ms: i64) -> Result<u64, RecordingError> {
        let q = |e| RecordingError::Store(self.redactor.query("purge recordings", e));
        let deleted = on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(&q)?;
            sqlx::query(PURGE_EVENTS)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(&q)?;
            let n = sqlx::query(PURGE)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(&q)?
                .rows_affected();
            tx.commit().await.map_err(&q)?;
            n
        });
        if deleted > 0 {
            tracing::info!(recordings = deleted, "expired recordings deleted");
        }
        Ok(deleted)
    }
}
