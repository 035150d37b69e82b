//! Group commit for audit events: one writer task commits every event waiting at that moment in
//! one transaction, and each call still gets its answer only after its own event is committed.
//!
//! With one commit per call, concurrent calls queue on SQLite's write lock (busy sleeps of
//! milliseconds) and pay one fsync each; with a single writer the lock is never contended and
//! a burst of N calls costs one fsync. Durability per call is unchanged.

use corral_exec::BoxFuture;
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use tokio::sync::{mpsc, oneshot};

use crate::{Store, StoreError};

/// Events committed in one transaction at most.
const MAX_BATCH: usize = 256;

type Job = (AuditEvent, oneshot::Sender<Result<(), StoreError>>);

/// An `AuditSink` that batches concurrent appends into shared commits.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    tx: mpsc::Sender<Job>,
}

impl AuditWriter {
    /// Starts the writer task on the current tokio runtime. It stops when every `AuditWriter`
    /// clone is dropped, after committing what it holds.
    pub fn spawn(store: Store) -> Self {
        let (tx, rx) = mpsc::channel::<Job>(4 * MAX_BATCH);
        tokio::spawn(run(store, rx));
        Self { tx }
    }
}

async fn run(store: Store, mut rx: mpsc::Receiver<Job>) {
    let mut jobs: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        let events: Vec<AuditEvent> = jobs.iter().map(|(e, _)| e.clone()).collect();
        match store.append_audit_batch(&events).await {
            Ok(()) => {
                for (_, done) in jobs.drain(..) {
                    let _ = done.send(Ok(()));
                }
            }
            Err(batch_err) => {
                // One bad event (a duplicate request id) must not fail its neighbours: commit
                // them one by one so each call gets its own answer.
                tracing::warn!(error = %batch_err, events = jobs.len(), "audit batch refused; committing one by one");
                for (event, done) in jobs.drain(..) {
                    let _ = done.send(store.append_audit(&event).await);
                }
            }
        }
    }
}

impl AuditSink for AuditWriter {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            let (done, answer) = oneshot::channel();
            self.tx.send((event.clone(), done)).await.map_err(|_| {
                AuditError("store.unavailable: the audit writer has stopped".to_owned())
            })?;
            match answer.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(AuditError(format!("{}: {e}", e.code()))),
                Err(_) => Err(AuditError(
                    "store.unavailable: the audit writer stopped before committing".to_owned(),
                )),
            }
        })
    }
}
