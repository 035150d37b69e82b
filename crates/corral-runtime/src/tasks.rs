//! The runtime's background tasks: the purgers (expired confirmations, idle runs) and the
//! upstream refresher. Each holds only weak references to what it serves and stops when that
//! is dropped with the runtime.

use std::sync::{Arc, RwLock};

use corral_guard::Gateway;
use corral_guard::confirm::ConfirmationStore;
use corral_mcp::upstream::Upstreams;
use corral_store::Store;

use crate::compose;

/// A task a runtime started besides serving calls ([`crate::Runtime::background_tasks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackgroundTask {
    /// The upstream MCP servers' supervisors (one per `mcp_servers` entry; none when the config
    /// has none).
    UpstreamSupervisors,
    /// Completes the deployment each time an upstream (re)starts and lists its tools.
    UpstreamRefresher,
    /// Purges expired confirmations every 10 minutes.
    ConfirmationPurger,
    /// Purges the store's idle runs every 10 minutes (PostgreSQL only: with SQLite the run
    /// ledger is in memory and forgets by itself).
    RunPurger,
    /// Deletes expired recordings every 10 minutes (their retention).
    RecordingPurger,
}

impl BackgroundTask {
    /// The task's name, as logs and diagnostics say it.
    pub fn as_str(self) -> &'static str {
        match self {
            BackgroundTask::UpstreamSupervisors => "upstream-supervisors",
            BackgroundTask::UpstreamRefresher => "upstream-refresher",
            BackgroundTask::ConfirmationPurger => "confirmation-purger",
            BackgroundTask::RunPurger => "run-purger",
            BackgroundTask::RecordingPurger => "recording-purger",
        }
    }
}

/// How often expired confirmations and idle runs are purged.
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Runs `purge(target, now_ms)` every `PURGE_EVERY` (the first at once) until `target` is gone,
/// and logs what it removed.
fn spawn_purger<T, F, Fut>(target: std::sync::Weak<T>, what: &'static str, purge: F)
where
    T: ?Sized + Send + Sync + 'static,
    F: Fn(Arc<T>, i64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<u64, String>> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PURGE_EVERY);
        loop {
            tick.tick().await;
            let Some(target) = target.upgrade() else {
                return;
            };
            match purge(target, corral_guard::now_ms()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, what, "purged"),
                Err(e) => tracing::warn!(error = %e, what, "purging failed"),
            }
        }
    });
}

/// Expired approvals and keys at once, expired actions a day after expiry.
pub(crate) fn spawn_confirmation_purger(confirmations: &Arc<dyn ConfirmationStore>) {
    spawn_purger(
        Arc::downgrade(confirmations),
        "expired confirmations",
        |store, now| async move {
            store
                .purge(now, corral_guard::confirm::KEEP_EXPIRED_MS)
                .await
                .map_err(|e| e.to_string())
        },
    );
}

/// Runs idle this long are forgotten (their budgets start afresh if the id is used again), as
/// the in-memory ledger does.
const RUN_IDLE_FORGET_MS: i64 = 24 * 3600 * 1000;

/// Idle runs in the store.
pub(crate) fn spawn_run_purger(store: &Arc<Store>) {
    spawn_purger(
        Arc::downgrade(store),
        "idle runs",
        |store, now| async move {
            store
                .purge_runs(now.saturating_sub(RUN_IDLE_FORGET_MS))
                .await
                .map_err(|e| e.to_string())
        },
    );
}

/// Expired recordings (and their events) in the store.
pub(crate) fn spawn_recording_purger(store: &Arc<Store>) {
    spawn_purger(
        Arc::downgrade(store),
        "expired recordings",
        |store, now| async move { store.purge_recordings(now).await.map_err(|e| e.to_string()) },
    );
}

/// Completes the deployment again each time an upstream MCP server (re)starts and lists its
/// tools: one that was down at start-up gets its params, one that changed its list gets the new
/// one. Follows the upstreams a reload put in place (they share the listing counter). Stops
/// with the gateway.
pub(crate) fn spawn_upstream_refresher(
    gateway: &Arc<Gateway>,
    upstreams: &Arc<RwLock<Upstreams>>,
    deploy_lock: &Arc<tokio::sync::Mutex<()>>,
) {
    let gateway = Arc::downgrade(gateway);
    let upstreams = Arc::clone(upstreams);
    let deploy_lock = Arc::clone(deploy_lock);
    let current = move || match upstreams.read() {
        Ok(u) => u.clone(),
        Err(p) => p.into_inner().clone(),
    };
    let mut listings = current().listings();
    listings.borrow_and_update();
    tokio::spawn(async move {
        while listings.changed().await.is_ok() {
            let Some(gw) = gateway.upgrade() else { return };
            let _held = deploy_lock.lock().await;
            let running = gw.deployment();
            let refreshed = compose::refresh_upstream_tools(&running, &current()).await;
            // A server that restarted and listed the same tools changes nothing: no swap, and no
            // `tools/list_changed` for MCP clients.
            let same = running
                .registry
                .catalog()
                .iter()
                .eq(refreshed.registry.catalog().iter());
            if !same {
                gw.replace(refreshed);
                tracing::debug!("deployment completed with the upstreams' current tool lists");
            }
        }
    });
}
