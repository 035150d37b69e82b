//! Group commit for audit events: one writer commits every event waiting at that moment in one
//! transaction, and each call still gets its answer only after its own event is committed.
//!
//! With one commit per call, concurrent calls queue on SQLite's write lock (busy sleeps of
//! milliseconds) and pay one fsync each; with a single writer the lock is never contended and
//! a burst of N calls costs one fsync. Durability per call is unchanged.
//!
//! The writer is the one serial stage of every call, so its cost per event bounds the whole
//! gateway's throughput. Two shapes:
//!
//! - **SQLite**: a dedicated OS thread owns one `rusqlite` connection to the store's file and
//!   runs `BEGIN IMMEDIATE`, one cached prepared `INSERT` per event, `COMMIT`. No async driver
//!   hand-off per batch, no SQL text built per batch, no copy of the bound strings. A duplicate
//!   `request_id` fails its own `INSERT` (SQLite aborts that statement, not the transaction),
//!   so a bad event never fails its neighbours.
//! - **PostgreSQL**: a tokio task sends each batch as one multi-row `INSERT` through the pool;
//!   if the batch is refused, its events are committed one by one so each call gets its own
//!   answer.
//!
//! Events are JSON-encoded by the calling task, in parallel, before they reach the writer.
//!
//! Answers go back through one relay task on the callers' tokio runtime: the writer thread
//! hands it a whole batch's answers at once (one cross-thread wake per batch), and the relay
//! completes each caller from inside the runtime, where waking a task is a queue push. Sent
//! from the writer thread, each answer would wake its caller from outside the runtime, which
//! costs one `write(2)` to the runtime's eventfd per event (measured: one per event, about a
//! tenth of the audit path's CPU). Without a runtime (or once it is gone) the writer answers
//! each caller itself.

use corral_ports::audit::{AuditError, AuditEvent, AuditSink};
use futures_core::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use crate::audit::{Encoded, INSERT_EVENT};
use crate::error::Redactor;
use crate::{Pool, Store, StoreError};

/// Events committed in one transaction at most.
pub(crate) const MAX_BATCH: usize = 256;

/// Where a caller learns its event's fate.
type Done = oneshot::Sender<Result<(), StoreError>>;

/// A committed (or failed) batch's answers, one per caller.
type Batch = Vec<(Done, Result<(), StoreError>)>;

struct Job {
    event: AuditEvent,
    encoded: Encoded,
    done: Done,
}

/// Hands a batch's answers to the callers: through the relay task when there is one, else
/// directly.
struct Answers {
    relay: Option<mpsc::UnboundedSender<Batch>>,
}

impl Answers {
    /// A relay task on the current tokio runtime, if there is one.
    fn spawn() -> Self {
        let relay = tokio::runtime::Handle::try_current().ok().map(|rt| {
            let (tx, mut rx) = mpsc::unbounded_channel::<Vec<(Done, Result<(), StoreError>)>>();
            rt.spawn(async move {
                while let Some(batch) = rx.recv().await {
                    for (done, result) in batch {
                        let _ = done.send(result);
                    }
                }
            });
            tx
        });
        Self { relay }
    }

    fn send(&self, batch: Batch) {
        let unsent = match &self.relay {
            Some(relay) => match relay.send(batch) {
                Ok(()) => return,
                // The runtime is gone: nobody is left to relay.
                Err(mpsc::error::SendError(batch)) => batch,
            },
            None => batch,
        };
        for (done, result) in unsent {
            let _ = done.send(result);
        }
    }
}

/// An `AuditSink` that batches concurrent appends into shared commits.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    tx: mpsc::Sender<Job>,
}

impl AuditWriter {
    /// Starts the writer: a dedicated thread for a SQLite store, a task on the current tokio
    /// runtime for PostgreSQL. It stops when every `AuditWriter` clone is dropped, after
    /// committing what it holds.
    pub fn spawn(store: Store) -> Self {
        let (tx, rx) = mpsc::channel::<Job>(4 * MAX_BATCH);
        match &store.pool {
            Pool::Sqlite(pool) => {
                let file = pool.connect_options().get_filename().to_path_buf();
                let redactor = store.redactor.clone();
                let answers = Answers::spawn();
                let spawned = std::thread::Builder::new()
                    .name("corral-audit-writer".to_owned())
                    .spawn(move || sqlite_writer(&file, &redactor, &answers, rx));
                if let Err(e) = spawned {
                    // The receiver is gone with the closure: every append fails with
                    // `store.unavailable`, nothing is silently dropped.
                    tracing::error!(error = %e, "cannot start the audit writer thread");
                }
            }
            Pool::Postgres(_) => {
                tokio::spawn(pooled_writer(store, rx));
            }
        }
        Self { tx }
    }
}

/// Receives up to `MAX_BATCH` jobs: blocks for the first, then takes what is already queued.
/// (The recording writer's thread batches the same way.)
pub(crate) fn next_batch<J>(rx: &mut mpsc::Receiver<J>, jobs: &mut Vec<J>) -> bool {
    let Some(first) = rx.blocking_recv() else {
        return false;
    };
    jobs.push(first);
    while jobs.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    true
}

/// The SQLite writer thread's loop.
fn sqlite_writer(
    file: &std::path::Path,
    redactor: &Redactor,
    answers: &Answers,
    mut rx: mpsc::Receiver<Job>,
) {
    let conn = match open_sqlite(file) {
        Ok(c) => c,
        Err(e) => {
            let err = redactor.unavailable(format!("the audit writer cannot open the file: {e}"));
            tracing::error!(error = %err, "audit writer stopped");
            let mut jobs = Vec::new();
            while next_batch(&mut rx, &mut jobs) {
                answers.send(jobs.drain(..).map(|j| (j.done, Err(err.clone()))).collect());
            }
            return;
        }
    };
    let mut jobs = Vec::with_capacity(MAX_BATCH);
    let mut results = Vec::with_capacity(MAX_BATCH);
    while next_batch(&mut rx, &mut jobs) {
        match commit_sqlite(&conn, &jobs, &mut results) {
            Ok(()) => {
                let batch = jobs.drain(..).zip(results.drain(..)).map(|(job, result)| {
                    let result =
                        result.map_err(|e| sqlite_error(redactor, "append audit event", e));
                    (job.done, result)
                });
                answers.send(batch.collect());
            }
            Err(e) => {
                let err = sqlite_error(redactor, "append audit events", e);
                tracing::warn!(error = %err, events = jobs.len(), "audit batch not committed");
                results.clear();
                answers.send(jobs.drain(..).map(|j| (j.done, Err(err.clone()))).collect());
            }
        }
    }
}

/// Opens the writer's own connection with the store's settings (the file is already in WAL
/// mode and migrated: `Store::connect` did both).
pub(crate) fn open_sqlite(file: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(crate::SQLITE_BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    Ok(conn)
}

/// One transaction: every job's `INSERT`, each with its own result in `results`, then the
/// commit. `Err` means nothing of the batch is committed.
fn commit_sqlite(
    conn: &rusqlite::Connection,
    jobs: &[Job],
    results: &mut Vec<rusqlite::Result<()>>,
) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let inserted = insert_each(conn, jobs, results);
    let committed = inserted.and_then(|()| conn.execute_batch("COMMIT"));
    if committed.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    committed
}

fn insert_each(
    conn: &rusqlite::Connection,
    jobs: &[Job],
    results: &mut Vec<rusqlite::Result<()>>,
) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(INSERT_EVENT)?;
    for Job { event, encoded, .. } in jobs {
        let r = stmt.execute(rusqlite::params![
            event.request_id,
            event.tenant,
            event.ts_ms,
            event.principal_id,
            event.principal_kind,
            encoded.act_chain,
            event.op,
            event.outcome.as_str(),
            event.code,
            event.rule,
            event.args_hash,
            encoded.args_shape,
            i32::from(event.status),
            event.duration_us,
            encoded.attestation,
            event.action_id,
            event.run_id,
            event.detail,
            event.purpose.as_str(),
            event.trace_id,
        ]);
        match r {
            Ok(_) => results.push(Ok(())),
            // A constraint (a duplicate request id) aborts this statement only.
            Err(e) if is_constraint(&e) => results.push(Err(e)),
            // Anything else (I/O, disk full) may have rolled the transaction back.
            Err(e) => return Err(e),
        }
        if conn.is_autocommit() {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                Some("the transaction was rolled back".to_owned()),
            ));
        }
    }
    Ok(())
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
}

/// Classifies a SQLite error as the sqlx path does: a duplicate key or any statement error is
/// `store.query_failed`; a file that cannot be reached or locked is `store.unavailable`.
pub(crate) fn sqlite_error(
    redactor: &Redactor,
    what: &'static str,
    e: rusqlite::Error,
) -> StoreError {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::ConstraintViolation) => StoreError::QueryFailed {
            what,
            reason: redactor.scrub(&format!("duplicate key, the row already exists: {e}")),
        },
        Some(
            C::CannotOpen
            | C::DatabaseBusy
            | C::DatabaseLocked
            | C::DiskFull
            | C::SystemIoFailure
            | C::ReadOnly
            | C::PermissionDenied,
        ) => redactor.unavailable(format!("{what}: {e}")),
        _ => StoreError::QueryFailed {
            what,
            reason: redactor.scrub(&e.to_string()),
        },
    }
}

/// The PostgreSQL writer task's loop.
async fn pooled_writer(store: Store, mut rx: mpsc::Receiver<Job>) {
    let mut jobs: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        match store
            .insert_encoded(jobs.iter().map(|j| (&j.event, &j.encoded)))
            .await
        {
            Ok(()) => {
                for job in jobs.drain(..) {
                    let _ = job.done.send(Ok(()));
                }
            }
            Err(down @ StoreError::Unavailable { .. }) => {
                // The database is unreachable: one by one would wait out the pool's timeout for
                // each event while calls hang; every call of the batch fails now instead.
                tracing::warn!(error = %down, events = jobs.len(), "audit batch not committed");
                for job in jobs.drain(..) {
                    let _ = job.done.send(Err(down.clone()));
                }
            }
            Err(batch_err) => {
                // One bad event (a duplicate request id) must not fail its neighbours: commit
                // them one by one so each call gets its own answer.
                tracing::warn!(error = %batch_err, events = jobs.len(), "audit batch refused; committing one by one");
                for job in jobs.drain(..) {
                    let one = std::iter::once((&job.event, &job.encoded));
                    let _ = job.done.send(store.insert_encoded(one).await);
                }
            }
        }
    }
}

impl AuditSink for AuditWriter {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            let failed = |e: StoreError| AuditError(format!("{}: {e}", e.code()));
            let encoded = Encoded::new(event).map_err(failed)?;
            let (done, answer) = oneshot::channel();
            let job = Job {
                event: event.clone(),
                encoded,
                done,
            };
            self.tx.send(job).await.map_err(|_| {
                AuditError("store.unavailable: the audit writer has stopped".to_owned())
            })?;
            match answer.await {
                Ok(result) => result.map_err(failed),
                Err(_) => Err(AuditError(
                    "store.unavailable: the audit writer stopped before committing".to_owned(),
                )),
            }
        })
    }
}
