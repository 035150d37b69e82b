//! Group commit for recordings (issue 15): the gateway queues each recorded call's event and
//! answers without waiting; one writer commits every event waiting at that moment, across runs,
//! in one transaction (`Store::commit_recordings`'s logic; SQLite on a dedicated thread with its
//! own connection, batched as the audit writer does: `writer::next_batch`).
//!
//! What stays true without the call waiting for the commit:
//!
//! - **Order**: `seq` is assigned in the writer, in queue order, from the recording's stored
//!   count read in the batch's transaction: gap-free and in call order per run.
//! - **Backpressure, never a drop**: the queue is bounded; when it is full a call waits for room.
//! - **Failures**: a batch that cannot be committed marks each of its recordings `gapped`, in a
//!   transaction of its own.
//! - **Crashes**: a process killed before its writer committed its tail loses that tail, so a
//!   recording never looks complete unless its writer shut down cleanly. Each writer registers
//!   an epoch (`recording_writers`: host, pid and the process's start time) and marks every
//!   recording it writes with it; a clean shutdown ([`Store::close`]) commits all it holds and
//!   clears the marks. A writer that starts (and each heartbeat) marks `gapped` the recordings of
//!   every dead epoch: a process of this host that no longer runs, or a writer of another host
//!   silent for [`STALE_MS`].
//!   Two limits, said so in docs/lab.md: a run whose every event was still queued when the
//!   process died leaves no recording at all (nothing was committed to mark), and a recording
//!   written by two processes at once (one identity calling one run through two replicas)
//!   carries the last writer's mark only.
//! - **Reads see writes**: the store's recording reads flush the writer first.
//! - **Limit**: [`RecordingWriter`] admits a call before it runs: a call that would start a new
//!   recording while its tenant keeps `max_per_tenant`, or its principal `max_per_principal`
//!   in the tenant, is refused (`recording.limit`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_policy::codes;
use corral_ports::recording::{
    AdmitRefusal, Recorded, RecordedCall, Recorder, RecorderError, RecordingKey,
};
use futures_core::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use crate::recording::{
    CREATE, INSERT_EVENT, Item, MARK_GAPPED, Pending, RecordingError, STATE, UPDATE_STATE,
    batch_keys, expires, state_numbers,
};
use crate::writer::{MAX_BATCH, next_batch, open_sqlite, sqlite_error};
use crate::{Pool, Store};

/// A writer of another host silent this long is taken for dead (its heartbeat is every
/// [`HEARTBEAT`]).
pub const STALE_MS: i64 = 10 * 60 * 1000;
/// How often a writer says it is alive.
const HEARTBEAT: Duration = Duration::from_secs(60);
/// Events waiting at most; a call waits for room beyond.
const QUEUE: usize = 4 * MAX_BATCH;
/// How long a tenant's count of live recordings is trusted before it is read again.
const COUNT_FRESH_MS: i64 = 30_000;
/// How long the writer lets events gather after a batch before it takes the next one: calls
/// then queue without waking it (one wake per batch, not per call).
const GATHER: Duration = Duration::from_millis(1);
/// Recordings remembered as admitted, at most (forgetting one costs a count, never a refusal).
const ADMITTED_MAX: usize = 100_000;

// An event moves once through the queue: boxing it would add an allocation per call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Job {
    Item(Item),
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
    Heartbeat,
}

/// This process's writer: its epoch and how another process tells whether it still runs.
#[derive(Debug, Clone)]
pub(crate) struct Epoch {
    pub(crate) id: String,
    host: String,
    pid: i64,
    pid_start: i64,
}

impl Epoch {
    fn current() -> Epoch {
        let host = host_id();
        let pid = i64::from(std::process::id());
        let pid_start = process_start(std::process::id()).unwrap_or(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Epoch {
            id: format!(
                "{pid}.{pid_start}.{nanos}.{}",
                uuid::Uuid::new_v4().simple()
            ),
            host,
            pid,
            pid_start,
        }
    }
}

/// The kernel's boot id and this process's pid namespace: processes with the same value see
/// the same pids.
fn host_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if boot.trim().is_empty() {
        // Not Linux: only the heartbeat tells a dead writer.
        return String::new();
    }
    format!("{}/{ns}", boot.trim())
}

/// A process's start time (clock ticks since boot, `/proc/<pid>/stat` field 22).
fn process_start(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the writer `(host, pid, pid_start, seen_ms)` is dead, seen from `me` at `now_ms`.
fn is_dead(me: &Epoch, host: &str, pid: i64, pid_start: i64, seen_ms: i64, now_ms: i64) -> bool {
    if !me.host.is_empty() && host == me.host {
        let alive = u32::try_from(pid)
            .ok()
            .and_then(process_start)
            .is_some_and(|s| s == pid_start);
        return !alive;
    }
    seen_ms < now_ms.saturating_sub(STALE_MS)
}

/// Now, in milliseconds since the Unix epoch, by this process's clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What the admission remembers: recordings known to exist (or admitted), and per tenant its
/// count of live recordings with when it was read.
#[derive(Debug, Default)]
struct Admissions {
    /// tenant -> run id -> identities (looked up by `&str`, no copy per call).
    known: HashMap<String, HashMap<String, HashSet<String>>>,
    /// How many recordings `known` holds.
    remembered: usize,
    /// tenant -> (live recordings, when counted).
    tenants: HashMap<String, (u64, i64)>,
    /// (tenant, identity) -> (live recordings, when counted).
    principals: HashMap<(String, String), (u64, i64)>,
}

/// The gateway's [`Recorder`]: queues events for the store's recording writer (see the module
/// doc). Cloning shares the writer; it stops when the store is closed or every clone is gone.
#[derive(Debug, Clone)]
pub struct RecordingWriter {
    tx: mpsc::Sender<Job>,
    store: Store,
    admissions: Arc<Mutex<Admissions>>,
    slow: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Job::Item(_) => "Item",
            Job::Flush(_) => "Flush",
            Job::Close(_) => "Close",
            Job::Heartbeat => "Heartbeat",
        })
    }
}

impl RecordingWriter {
    /// Starts the store's recording writer (a dedicated thread for SQLite, a task on the
    /// current tokio runtime for PostgreSQL), registers its epoch, and marks `gapped` the
    /// recordings of dead writers.
    pub fn spawn(store: &Store) -> RecordingWriter {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        let epoch = Epoch::current();
        let _ = store.recorder.set(tx.downgrade());
        let _ = store.epoch.set(epoch.id.clone());
        match &store.pool {
            Pool::Sqlite(pool) => {
                let file = pool.connect_options().get_filename().to_path_buf();
                let st = store.clone();
                let spawned = std::thread::Builder::new()
                    .name("corral-recording-writer".to_owned())
                    .spawn(move || sqlite_writer(&file, &st, &epoch, rx));
                if let Err(e) = spawned {
                    // The receiver is gone with the closure: every record call fails and marks
                    // nothing; admission refuses (`store.unavailable`), so nothing runs
                    // unrecorded.
                    tracing::error!(error = %e, "cannot start the recording writer thread");
                }
            }
            Pool::Postgres(_) => {
                tokio::spawn(pooled_writer(store.clone(), epoch, rx));
            }
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = tx.downgrade();
            rt.spawn(async move {
                let mut tick = tokio::time::interval(HEARTBEAT);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(tx) = weak.upgrade() else { return };
                    if tx.send(Job::Heartbeat).await.is_err() {
                        return;
                    }
                }
            });
        }
        RecordingWriter {
            tx,
            store: store.clone(),
            admissions: Arc::new(Mutex::new(Admissions::default())),
            slow: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    fn known(&self, key: &RecordingKey) -> bool {
        let a = self.admissions.lock().unwrap_or_else(|p| p.into_inner());
        a.known
            .get(&key.tenant)
            .and_then(|runs| runs.get(&key.run_id))
            .is_some_and(|ids| ids.contains(&key.identity))
    }

    /// Admits the call of `key` (see [`Recorder::admit`]).
    async fn admit_key(&self, key: &RecordingKey, now: i64) -> Result<(), AdmitRefusal> {
        if self.known(key) {
            return Ok(());
        }
        // Recordings new to this process: one at a time, so the count cannot be passed here.
        let _one = self.slow.lock().await;
        if self.known(key) {
            return Ok(());
        }
        let tenant_count = self.within(key, now, Scope::Tenant).await?;
        let principal_count = self.within(key, now, Scope::Principal).await?;
        let mut a = self.admissions.lock().unwrap_or_else(|p| p.into_inner());
        if a.remembered >= ADMITTED_MAX {
            a.known.clear();
            a.remembered = 0;
        }
        a.remembered += 1;
        a.known
            .entry(key.tenant.clone())
            .or_default()
            .entry(key.run_id.clone())
            .or_default()
            .insert(key.identity.clone());
        a.tenants
            .insert(key.tenant.clone(), (tenant_count + 1, now));
        a.principals.insert(
            (key.tenant.clone(), key.identity.clone()),
            (principal_count + 1, now),
        );
        Ok(())
    }

    /// The live recordings `scope` of `key` keeps (its tenant's, or its principal's in the
    /// tenant) when `key` may start one more: refused `recording.limit` at the scope's limit
    /// (`recordings.max_per_tenant`, `recordings.max_per_principal`). A count read in the last
    /// [`COUNT_FRESH_MS`] is trusted below the limit; at it, it is read again exactly, with
    /// every queued event committed, and a recording of `key` that exists is not a new one.
    async fn within(
        &self,
        key: &RecordingKey,
        now: i64,
        scope: Scope,
    ) -> Result<u64, AdmitRefusal> {
        let (limit, setting, identity) = match scope {
            Scope::Tenant => (
                self.store.recording_limits.max_per_tenant,
                "recordings.max_per_tenant",
                None,
            ),
            Scope::Principal => (
                self.store.recording_limits.max_per_principal,
                "recordings.max_per_principal",
                Some(key.identity.as_str()),
            ),
        };
        let unavailable = |e: RecordingError| AdmitRefusal {
            code: codes::RECORDING_UNAVAILABLE,
            message: format!(
                "the call is marked for recording and its recording cannot be checked ({}: \
                 {e}), so it was not run; retry when the store is back",
                e.code()
            ),
        };
        let cached = {
            let a = self.admissions.lock().unwrap_or_else(|p| p.into_inner());
            match scope {
                Scope::Tenant => a.tenants.get(&key.tenant).copied(),
                Scope::Principal => a
                    .principals
                    .get(&(key.tenant.clone(), key.identity.clone()))
                    .copied(),
            }
            .filter(|(_, at)| now.saturating_sub(*at) < COUNT_FRESH_MS)
            .map(|(n, _)| n)
        };
        let mut count = match cached {
            Some(n) => n,
            None => {
                self.store.flush_recordings().await;
                self.store
                    .live_recordings(&key.tenant, identity, now)
                    .await
                    .map_err(unavailable)?
            }
        };
        if count >= limit {
            // Near the limit: exactly, with every queued event committed.
            self.store.flush_recordings().await;
            let exists = self
                .store
                .get_recording(&key.tenant, &key.run_id, &key.identity)
                .await
                .map_err(unavailable)?
                .is_some_and(|r| r.expires_ms > now);
            count = self
                .store
                .live_recordings(&key.tenant, identity, now)
                .await
                .map_err(unavailable)?;
            if !exists && count >= limit {
                let mut a = self.admissions.lock().unwrap_or_else(|p| p.into_inner());
                let whose = match scope {
                    Scope::Tenant => {
                        a.tenants.insert(key.tenant.clone(), (count, now));
                        format!("tenant {:?}", key.tenant)
                    }
                    Scope::Principal => {
                        a.principals
                            .insert((key.tenant.clone(), key.identity.clone()), (count, now));
                        format!(
                            "its principal `{}` (in tenant {:?}; each principal has a share, so \
                             one cannot fill the tenant's)",
                            key.principal, key.tenant
                        )
                    }
                };
                return Err(AdmitRefusal {
                    code: codes::RECORDING_LIMIT,
                    message: format!(
                        "the call is marked for recording (run {:?}) and would start a new \
                         recording, and {whose} already keeps {count} live recordings, the \
                         most `{setting}` allows ({limit}); the call was not run. Wait for \
                         retention to delete old ones, ask an admin to delete some \
                         (`corral sandbox recordings delete RUN`), or raise the limit",
                        key.run_id
                    ),
                });
            }
            if exists {
                count = count.saturating_sub(1);
            }
        }
        Ok(count)
    }
}

/// Whose live recordings a limit counts.
#[derive(Debug, Clone, Copy)]
enum Scope {
    /// The tenant's (`recordings.max_per_tenant`).
    Tenant,
    /// One principal's, by identity, in its tenant (`recordings.max_per_principal`).
    Principal,
}

impl Store {
    /// Waits until every recording event queued before now is committed (or marked as a gap):
    /// a read after a call sees its event. A no-op without a running writer.
    pub async fn flush_recordings(&self) {
        self.recorder_job(Job::Flush).await;
    }

    /// Stops the recording writer cleanly: commits what it holds and clears its epoch marks.
    pub(crate) async fn close_recordings(&self) {
        self.recorder_job(Job::Close).await;
    }

    async fn recorder_job(&self, job: fn(oneshot::Sender<()>) -> Job) {
        let Some(tx) = self.recorder.get().and_then(mpsc::WeakSender::upgrade) else {
            return;
        };
        let (done, wait) = oneshot::channel();
        if tx.send(job(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

impl Recorder for RecordingWriter {
    fn admit<'a>(
        &'a self,
        key: &'a RecordingKey,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), AdmitRefusal>> {
        Box::pin(self.admit_key(key, now_ms))
    }

    fn record<'a>(
        &'a self,
        key: &'a RecordingKey,
        call: &'a RecordedCall,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Recorded, RecorderError>> {
        Box::pin(async move {
            let pending = Pending::new(key, call, now_ms)
                .map_err(|e| RecorderError(format!("{}: {e}", e.code())))?;
            self.tx
                .send(Job::Item(Item::Event(pending)))
                .await
                .map_err(|_| stopped())?;
            Ok(Recorded::Queued)
        })
    }

    fn mark_gapped<'a>(
        &'a self,
        key: &'a RecordingKey,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), RecorderError>> {
        Box::pin(async move {
            let gap = Item::Gap {
                key: key.clone(),
                now_ms,
            };
            self.tx.send(Job::Item(gap)).await.map_err(|_| stopped())
        })
    }
}

fn stopped() -> RecorderError {
    RecorderError("store.unavailable: the recording writer has stopped".to_owned())
}

/// A batch's jobs sorted out: the items to write, who waits for them, and whether to stop.
#[derive(Default)]
struct Sorted {
    items: Vec<Item>,
    waiting: Vec<oneshot::Sender<()>>,
    close: Option<oneshot::Sender<()>>,
    heartbeat: bool,
}

fn sort(jobs: &mut Vec<Job>) -> Sorted {
    let mut s = Sorted::default();
    for job in jobs.drain(..) {
        match job {
            Job::Item(i) => s.items.push(i),
            Job::Flush(w) => s.waiting.push(w),
            Job::Close(w) => s.close = Some(w),
            Job::Heartbeat => s.heartbeat = true,
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// SQLite: a dedicated thread with its own connection.
// ---------------------------------------------------------------------------------------------

/// `$N` placeholders as SQLite's numbered `?N` (rusqlite binds by position).
fn numbered(sql: &str) -> String {
    sql.replace('$', "?")
}

fn sqlite_writer(
    file: &std::path::Path,
    store: &Store,
    epoch: &Epoch,
    mut rx: mpsc::Receiver<Job>,
) {
    let conn = match open_sqlite(file) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "the recording writer cannot open the store; recorded calls are refused");
            return;
        }
    };
    let err = |what: &'static str| move |e: rusqlite::Error| tracing::warn!(error = %sqlite_error(&store.redactor, what, e), "recording writer");
    sqlite_register(&conn, epoch).unwrap_or_else(err("register the recording writer"));
    sqlite_sweep(&conn, epoch).unwrap_or_else(err("mark the recordings of dead writers gapped"));
    let mut jobs = Vec::with_capacity(MAX_BATCH);
    while next_batch(&mut rx, &mut jobs) {
        let s = sort(&mut jobs);
        if !s.items.is_empty()
            && let Err(e) = sqlite_commit(&conn, store, &s.items, &epoch.id)
        {
            let e = sqlite_error(&store.redactor, "record calls", e);
            tracing::warn!(error = %e, events = s.items.len(), "recording batch not committed; its recordings are marked gapped");
            sqlite_gaps(&conn, store, &s.items).unwrap_or_else(err("mark recordings gapped"));
        }
        let wrote = !s.items.is_empty();
        if s.heartbeat {
            sqlite_sweep(&conn, epoch)
                .unwrap_or_else(err("mark the recordings of dead writers gapped"));
        }
        for w in s.waiting {
            let _ = w.send(());
        }
        if let Some(w) = s.close {
            sqlite_clean(&conn, &epoch.id).unwrap_or_else(err("close the recording writer"));
            let _ = w.send(());
            return;
        }
        if wrote {
            std::thread::sleep(GATHER);
        }
    }
    sqlite_clean(&conn, &epoch.id).unwrap_or_else(err("close the recording writer"));
}

fn in_tx<T>(
    conn: &rusqlite::Connection,
    f: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let r = f().and_then(|v| conn.execute_batch("COMMIT").map(|()| v));
    if r.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    r
}

fn sqlite_commit(
    conn: &rusqlite::Connection,
    store: &Store,
    items: &[Item],
    writer: &str,
) -> rusqlite::Result<()> {
    let limits = store.recording_limits;
    let too_big = |_| rusqlite::Error::IntegralValueOutOfRange(0, 0);
    in_tx(conn, || {
        let mut create = conn.prepare_cached(&numbered(CREATE))?;
        let mut state = conn.prepare_cached(&numbered(STATE))?;
        let mut states = std::collections::BTreeMap::new();
        for (id, first) in batch_keys(items) {
            let k = first.key();
            let at = match first {
                Item::Event(p) => p.now_ms,
                Item::Gap { now_ms, .. } => *now_ms,
            };
            create.execute(rusqlite::params![
                k.tenant,
                k.run_id,
                k.identity,
                k.principal,
                k.purpose.as_str(),
                at,
                expires(at, &limits)
            ])?;
            let row = state.query_row(rusqlite::params![k.tenant, k.run_id, k.identity], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
            states.insert(id, (crate::recording::State::from_row(row), at));
        }
        let mut insert = conn.prepare_cached(&numbered(INSERT_EVENT))?;
        for item in items {
            let k = item.key();
            let id = (k.tenant.clone(), k.run_id.clone(), k.identity.clone());
            let Some((st, at)) = states.get_mut(&id) else {
                continue;
            };
            let p = match item {
                Item::Gap { now_ms, .. } => {
                    st.gapped = true;
                    *at = (*at).max(*now_ms);
                    continue;
                }
                Item::Event(p) => p,
            };
            *at = (*at).max(p.now_ms);
            let Recorded::Stored { seq } = st.place(p.size, &limits) else {
                continue;
            };
            insert.execute(rusqlite::params![
                k.tenant,
                k.run_id,
                k.identity,
                i64::try_from(seq).map_err(too_big)?,
                p.call.op,
                p.call.args,
                p.response,
                p.call.error_code,
                p.attestation,
                p.call.started_ms,
                p.call.duration_us
            ])?;
        }
        let mut update = conn.prepare_cached(&numbered(UPDATE_STATE))?;
        for ((tenant, run_id, identity), (st, at)) in &states {
            let (events, bytes) =
                state_numbers(st).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(3, 0))?;
            update.execute(rusqlite::params![
                tenant,
                run_id,
                identity,
                events,
                bytes,
                i32::from(st.capped),
                i32::from(st.gapped),
                at,
                writer
            ])?;
        }
        Ok(())
    })
}

/// Marks every recording of a batch that could not be committed `gapped`.
fn sqlite_gaps(conn: &rusqlite::Connection, store: &Store, items: &[Item]) -> rusqlite::Result<()> {
    let limits = store.recording_limits;
    in_tx(conn, || {
        for first in batch_keys(items).values() {
            let k = first.key();
            let at = now_ms();
            conn.execute(
                &numbered(CREATE),
                rusqlite::params![
                    k.tenant,
                    k.run_id,
                    k.identity,
                    k.principal,
                    k.purpose.as_str(),
                    at,
                    expires(at, &limits)
                ],
            )?;
            conn.execute(
                &numbered(MARK_GAPPED),
                rusqlite::params![k.tenant, k.run_id, k.identity, at],
            )?;
        }
        Ok(())
    })
}

fn sqlite_register(conn: &rusqlite::Connection, epoch: &Epoch) -> rusqlite::Result<()> {
    let now = now_ms();
    conn.execute(
        &numbered(REGISTER),
        rusqlite::params![epoch.id, epoch.host, epoch.pid, epoch.pid_start, now],
    )
    .map(|_| ())
}

fn sqlite_sweep(conn: &rusqlite::Connection, me: &Epoch) -> rusqlite::Result<()> {
    let now = now_ms();
    conn.execute(&numbered(SEEN), rusqlite::params![me.id, now])?;
    let writers: Vec<(String, String, i64, i64, i64)> = {
        let mut q = conn.prepare_cached(&numbered(WRITERS))?;
        q.query_map(rusqlite::params![me.id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?
    };
    for (epoch, host, pid, start, seen) in writers {
        if is_dead(me, &host, pid, start, seen, now) {
            let (n, work) = in_tx(conn, || {
                let n = conn.execute(&numbered(GAP_DEAD), rusqlite::params![epoch, now])?;
                let work = sqlite_interrupt(conn, &epoch, now)?;
                conn.execute(&numbered(FORGET), rusqlite::params![epoch])?;
                Ok((n, work))
            })?;
            interrupted(work);
            tracing::warn!(
                recordings = n,
                "a recording writer died before committing all it held; its recordings are marked gapped"
            );
        }
    }
    Ok(())
}

fn sqlite_clean(conn: &rusqlite::Connection, epoch: &str) -> rusqlite::Result<()> {
    in_tx(conn, || {
        conn.execute(&numbered(CLEAN), rusqlite::params![epoch])?;
        let now = now_ms();
        let work = sqlite_interrupt(conn, epoch, now)?;
        interrupted(work);
        conn.execute(&numbered(FORGET), rusqlite::params![epoch])?;
        Ok(())
    })
}

const REGISTER: &str = "INSERT INTO recording_writers (epoch, host, pid, pid_start, started_ms, \
    seen_ms) VALUES ($1, $2, $3, $4, $5, $5)";
const SEEN: &str = "UPDATE recording_writers SET seen_ms = $2 WHERE epoch = $1";
const WRITERS: &str =
    "SELECT epoch, host, pid, pid_start, seen_ms FROM recording_writers WHERE epoch <> $1";
const GAP_DEAD: &str =
    "UPDATE recordings SET gapped = 1, writer = NULL, updated_ms = $2 WHERE writer = $1";
const CLEAN: &str = "UPDATE recordings SET writer = NULL WHERE writer = $1";
/// A dead (or closing) process's running shadow evaluations: `interrupted`, never left running.
const INTERRUPT_SHADOWS: &str = "UPDATE lab_shadows SET status = 'interrupted', worker = NULL, \
    updated_ms = $2, finished_ms = $2 WHERE worker = $1 AND status = 'running'";
/// A dead (or closing) process's running lab runs: `failed`, `lab.interrupted` (the message
/// stored as JSON text, as every run's is).
const INTERRUPT_RUNS: &str = "UPDATE lab_runs SET status = 'failed', worker = NULL, \
    error_code = 'lab.interrupted', error_message = '\"the process executing this run stopped \
    before it finished; run it again\"', finished_ms = $2 WHERE worker = $1 AND status = 'running'";

/// A dead (or closing) process's running agent-session turns: the session `failed`,
/// `agents.interrupted`.
const INTERRUPT_SESSIONS: &str = "UPDATE agent_sessions SET status = 'failed', worker = NULL, \
    error_code = 'agents.interrupted', error_message = 'the process running this turn stopped \
    before it finished; start a new session', last_active_ms = $2 WHERE worker = $1 AND \
    status = 'in_progress'";
/// Every sweep of a dead (or closing) process's unfinished work, each bound to (epoch, now).
const INTERRUPTS: [&str; 3] = [INTERRUPT_SHADOWS, INTERRUPT_RUNS, INTERRUPT_SESSIONS];

/// Runs [`INTERRUPTS`] for `epoch` on SQLite; how many rows they marked.
fn sqlite_interrupt(conn: &rusqlite::Connection, epoch: &str, now: i64) -> rusqlite::Result<usize> {
    INTERRUPTS.iter().try_fold(0, |n, q| {
        Ok(n + conn.execute(&numbered(q), rusqlite::params![epoch, now])?)
    })
}

/// Says how many shadow evaluations and lab runs a dead or closing process left unfinished.
fn interrupted(work: usize) {
    if work > 0 {
        tracing::warn!(
            interrupted = work,
            "shadow evaluations, lab runs and agent-session turns of a process that stopped are marked interrupted"
        );
    }
}
const FORGET: &str = "DELETE FROM recording_writers WHERE epoch = $1";

// ---------------------------------------------------------------------------------------------
// PostgreSQL: a task on the pool.
// ---------------------------------------------------------------------------------------------

async fn pooled_writer(store: Store, epoch: Epoch, mut rx: mpsc::Receiver<Job>) {
    let Pool::Postgres(pool) = &store.pool else {
        return;
    };
    let warn = |what: &str, e: sqlx::Error| {
        let e = store.redactor.query("recording writer", e);
        tracing::warn!(error = %e, "{what}");
    };
    if let Err(e) = sqlx::query(REGISTER)
        .bind(&epoch.id)
        .bind(&epoch.host)
        .bind(epoch.pid)
        .bind(epoch.pid_start)
        .bind(now_ms())
        .execute(pool)
        .await
    {
        warn("cannot register the recording writer", e);
    }
    if let Err(e) = pooled_sweep(pool, &epoch).await {
        warn("cannot mark the recordings of dead writers gapped", e);
    }
    let mut jobs = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        let s = sort(&mut jobs);
        if !s.items.is_empty()
            && let Err(e) = store.commit_recordings(&s.items, Some(&epoch.id)).await
        {
            tracing::warn!(error = %e, events = s.items.len(), "recording batch not committed; its recordings are marked gapped");
            let gaps: Vec<Item> = batch_keys(&s.items)
                .values()
                .map(|i| Item::Gap {
                    key: i.key().clone(),
                    now_ms: now_ms(),
                })
                .collect();
            if let Err(e) = store.commit_recordings(&gaps, None).await {
                tracing::warn!(error = %e, "recordings could not be marked gapped");
            }
        }
        let wrote = !s.items.is_empty();
        if s.heartbeat
            && let Err(e) = pooled_sweep(pool, &epoch).await
        {
            warn("cannot mark the recordings of dead writers gapped", e);
        }
        for w in s.waiting {
            let _ = w.send(());
        }
        if let Some(w) = s.close {
            if let Err(e) = pooled_clean(pool, &epoch.id).await {
                warn("cannot close the recording writer", e);
            }
            let _ = w.send(());
            return;
        }
        if wrote {
            tokio::time::sleep(GATHER).await;
        }
    }
    if let Err(e) = pooled_clean(pool, &epoch.id).await {
        warn("cannot close the recording writer", e);
    }
}

async fn pooled_sweep(pool: &sqlx::PgPool, me: &Epoch) -> Result<(), sqlx::Error> {
    let now = now_ms();
    sqlx::query(SEEN)
        .bind(&me.id)
        .bind(now)
        .execute(pool)
        .await?;
    let writers: Vec<(String, String, i64, i64, i64)> =
        sqlx::query_as(WRITERS).bind(&me.id).fetch_all(pool).await?;
    for (epoch, host, pid, start, seen) in writers {
        if is_dead(me, &host, pid, start, seen, now) {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(GAP_DEAD)
                .bind(&epoch)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let mut work = 0;
            for q in INTERRUPTS {
                work += sqlx::query(q)
                    .bind(&epoch)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            sqlx::query(FORGET).bind(&epoch).execute(&mut *tx).await?;
            tx.commit().await?;
            interrupted(usize::try_from(work).unwrap_or(usize::MAX));
            tracing::warn!(
                recordings = n,
                "a recording writer died before committing all it held; its recordings are marked gapped"
            );
        }
    }
    Ok(())
}

async fn pooled_clean(pool: &sqlx::PgPool, epoch: &str) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(CLEAN).bind(epoch).execute(&mut *tx).await?;
    let mut work = 0;
    for q in INTERRUPTS {
        work += sqlx::query(q)
            .bind(epoch)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    interrupted(usize::try_from(work).unwrap_or(usize::MAX));
    sqlx::query(FORGET).bind(epoch).execute(&mut *tx).await?;
    tx.commit().await
}
