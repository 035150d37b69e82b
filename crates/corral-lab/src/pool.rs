//! Runs jobs on at most `workers` tokio tasks at once and answers their results in the jobs'
//! order, so that what a caller sees does not depend on how many ran at once.
//!
//! Jobs start in order. After a job fails no further job starts; the jobs already started run
//! to the end (each is its own task, so they finish even when the caller's future is dropped)
//! and are awaited before anything is answered; the error answered is the first in the jobs'
//! order, not the first in time.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::task::JoinError;

/// Runs `job(j)` for each of `jobs` in order, at most `workers` (at least 1) at once, and
/// answers every result in the jobs' order, or the first error in that order; `lost` turns a
/// task that ended without an answer (it panicked, or the runtime is shutting down) into one.
pub async fn in_order<J, T, E, Fut>(
    jobs: impl IntoIterator<Item = J>,
    workers: usize,
    job: impl Fn(J) -> Fut,
    lost: impl Fn(JoinError) -> E,
) -> Result<Vec<T>, E>
where
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let permits = Arc::new(tokio::sync::Semaphore::new(workers.max(1)));
    let failed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for j in jobs {
        // Never closed: an error here only means no further job may start.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        if failed.load(Ordering::Acquire) {
            break;
        }
        let (work, failed) = (job(j), failed.clone());
        tasks.push(tokio::spawn(async move {
            let r = work.await;
            if r.is_err() {
                failed.store(true, Ordering::Release);
            }
            drop(permit);
            r
        }));
    }
    // Every started job is awaited before anything is answered.
    let mut results = Vec::with_capacity(tasks.len());
    for t in tasks {
        results.push(t.await);
    }
    results
        .into_iter()
        .map(|r| r.map_err(&lost).and_then(|x| x))
        .collect()
}
