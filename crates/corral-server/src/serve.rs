//! `corral serve`: storage, backend, guard chain and routes; graceful shutdown; SIGHUP reload.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use corral_config::Loaded;
use corral_config::model::ConfirmationBackend;
use corral_exec::Backend;
use corral_exec::linux::{LinuxBackend, Network};
use corral_exec::process::ProcessBackend;
use corral_guard::Gateway;
use corral_guard::audit::AuditSink;
use corral_guard::confirm::{ConfirmationStore, MemoryConfirmations};
use corral_store::Store;

use crate::{App, AppState, compose};

/// How to serve.
#[derive(Debug)]
pub struct ServeOptions {
    /// The loaded config.
    pub loaded: Loaded,
    /// Where the config came from, for SIGHUP reloads (`None`: built from flags, no reload).
    pub config_path: Option<PathBuf>,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Accept open mode beyond its safe bounds.
    pub allow_open: bool,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Open mode refused.
    #[error("{0}")]
    OpenMode(String),
    /// Storage could not be opened.
    #[error("storage: {0}")]
    Store(String),
    /// The listener could not bind.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// Auth config unusable.
    #[error("auth: {0}")]
    Auth(String),
    /// Corral's state directory (or config, or a key file) lies inside a root callers can
    /// write: the store refuses to start there.
    #[error("{0}")]
    Protected(String),
    /// `isolation.host_uids` names no usable host id range on this host.
    #[error("isolation.host_uids: {0}")]
    Isolation(String),
}

impl ServeError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::OpenMode(_) => corral_policy::codes::CONFIG_OPEN_MODE_REFUSED,
            ServeError::Store(_) => corral_policy::codes::STORE_UNAVAILABLE,
            ServeError::Bind { .. } => corral_policy::codes::SERVER_INTERNAL,
            ServeError::Auth(_) => corral_policy::codes::CONFIG_INVALID_VALUE,
            ServeError::Protected(_) => corral_policy::codes::CONFIG_PROTECTED_WRITABLE,
            ServeError::Isolation(_) => corral_policy::codes::ISOLATION_UNAVAILABLE,
        }
    }
}

/// Open mode is allowed only on loopback and only when no exec or admin op is mounted.
fn check_open_mode(
    loaded: &Loaded,
    auth_open: bool,
    listen: SocketAddr,
    allow_open: bool,
) -> Result<(), ServeError> {
    if !auth_open {
        return Ok(());
    }
    let risky = loaded.open_mode_risky_ops();
    let problem = if !listen.ip().is_loopback() {
        Some(format!(
            "no auth is configured and {listen} is not a loopback address"
        ))
    } else if !risky.is_empty() {
        Some(format!(
            "no auth is configured and {} can run programs",
            risky.join(", ")
        ))
    } else {
        None
    };
    match (problem, allow_open) {
        (None, _) => Ok(()),
        (Some(p), true) => {
            tracing::warn!(
                "OPEN MODE: {p}; anyone who can reach the server can call these ops (--allow-open)"
            );
            Ok(())
        }
        (Some(p), false) => Err(ServeError::OpenMode(format!(
            "{p}; add `auth.tokens` to the config (secret in an environment variable), listen on 127.0.0.1, or pass --allow-open"
        ))),
    }
}

/// The backend the config asks for (`isolation.backend`). The linux backend's preflight runs
/// here; when it fails the server still starts, and every exec op answers 503
/// `isolation.unavailable` naming the missing primitive: never a fallback to `process`.
fn backend(loaded: &Loaded) -> Result<Arc<dyn Backend>, ServeError> {
    use corral_config::model::{BackendKind, NetworkMode};
    match loaded.config.isolation.backend {
        BackendKind::Linux => {
            let network = match loaded.config.isolation.network {
                NetworkMode::None => Network::None,
                NetworkMode::Loopback => Network::Loopback,
            };
            // The running binary is the helper (`corral __sandbox-exec`); `/proc/self/exe`
            // names it even if the file on disk was replaced since.
            let host_uids = corral_exec::linux::HostUids::from_setting(
                loaded.config.isolation.host_uids.as_deref(),
            )
            .map_err(ServeError::Isolation)?;
            let linux = LinuxBackend::new(PathBuf::from("/proc/self/exe"))
                .with_network(network)
                .with_cgroup_parent(loaded.config.isolation.cgroup_parent.clone())
                .with_host_uids(host_uids)
                .map_err(ServeError::Isolation)?;
            if let Err(e) = linux.preflight() {
                tracing::error!(
                    code = e.code(),
                    "{e}; every exec op will answer 503 until this is fixed (see `corral doctor`)"
                );
            }
            Ok(Arc::new(linux))
        }
        BackendKind::Process => {
            tracing::warn!(
                "isolation.backend is `process`: commands run without isolation and every result says `isolated: false`"
            );
            Ok(Arc::new(ProcessBackend::new()))
        }
    }
}

/// Builds the app state for a loaded config (also used by tests and `corral call --local`).
pub async fn build_state(
    loaded: &Loaded,
    max_body_bytes: usize,
) -> Result<(AppState, Arc<Store>), ServeError> {
    // The store never starts inside a root that callers can write (issue 11 item 3): checked
    // at load, and again here on the paths as they resolve now.
    if let Some(d) = corral_config::protect::writable_conflicts(loaded).first() {
        return Err(ServeError::Protected(d.to_string()));
    }
    let url = loaded
        .config
        .storage
        .url
        .clone()
        .unwrap_or_else(|| Store::default_sqlite_url(&loaded.state_dir));
    let store = Arc::new(
        Store::connect(&url)
            .await
            .map_err(|e| ServeError::Store(e.to_string()))?,
    );
    let backend = backend(loaded)?;
    // One writer task commits concurrent calls' events together (group commit).
    let writer = corral_store::AuditWriter::spawn(store.as_ref().clone());
    let mut sinks: Vec<Arc<dyn AuditSink>> = vec![Arc::new(writer)];
    match &loaded.config.audit.sink {
        corral_config::model::AuditSink::Stderr => {
            sinks.push(Arc::new(corral_guard::audit::JsonLines::stderr()))
        }
        corral_config::model::AuditSink::File(path) => {
            let sink = corral_guard::audit::JsonLines::file(&corral_config_path(loaded, path))
                .map_err(|e| ServeError::Store(format!("audit file `{path}`: {e}")))?;
            sinks.push(Arc::new(sink));
        }
        corral_config::model::AuditSink::Store | corral_config::model::AuditSink::Off => {}
    }
    let auth = compose::authenticator(loaded).map_err(ServeError::Auth)?;
    let confirmations: Arc<dyn ConfirmationStore> = match loaded.config.guardrails.confirmations {
        ConfirmationBackend::Store => store.clone(),
        ConfirmationBackend::Memory => {
            tracing::warn!(
                "guardrails.confirmations: memory: pending actions and approvals live in this process only; they are lost on restart and invisible to other replicas"
            );
            Arc::new(MemoryConfirmations::new())
        }
    };
    warn_if_unisolated(loaded, &backend);
    let upstreams = corral_mcp::upstream::Upstreams::start(
        compose::upstream_specs(loaded),
        &backend,
        compose::disabled_ops(loaded),
        compose::declared_upstream_tools(loaded),
    );
    let deployment = compose::deployment(loaded, &upstreams, compose::UPSTREAM_LIST_WAIT).await;
    spawn_confirmation_purger(&confirmations);
    let metrics = Arc::new(crate::metrics::CallMetrics::default());
    let mut gateway = Gateway::new(deployment, backend, sinks, "default")
        .with_confirmations(confirmations)
        .with_observer(metrics.clone());
    // Run budgets: in PostgreSQL, shared by the replicas on it; with the SQLite default (one
    // node) in this process's memory, which meters the same without a write per call.
    if store.backend_name() == "postgres" {
        gateway = gateway.with_runs(store.clone());
        spawn_run_purger(&store);
    }
    let gateway = Arc::new(gateway);
    let deploy_lock = Arc::new(tokio::sync::Mutex::new(()));
    let upstreams = Arc::new(std::sync::RwLock::new(upstreams));
    spawn_upstream_refresher(&gateway, &upstreams, &deploy_lock);
    let state = AppState(Arc::new(App {
        gateway,
        metrics,
        upstreams,
        deploy_lock,
        auth: std::sync::RwLock::new(Arc::new(auth)),
        storage: store.backend_name(),
        store: Arc::clone(&store),
        max_body_bytes,
        mcp_allowed_hosts: loaded.config.mcp.hosts(),
        mcp_allowed_origins: loaded
            .config
            .mcp
            .allowed_origins
            .iter()
            .map(|o| o.value.clone())
            .collect(),
    }));
    Ok((state, store))
}

/// How often expired confirmations are purged.
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
fn spawn_confirmation_purger(confirmations: &Arc<dyn ConfirmationStore>) {
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
fn spawn_run_purger(store: &Arc<Store>) {
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

/// Upstream servers outside the `linux` backend run unconfined: said once per start or reload.
fn warn_if_unisolated(loaded: &Loaded, backend: &Arc<dyn corral_exec::Backend>) {
    if !loaded.config.mcp_servers.is_empty() && backend.name() != "linux" {
        tracing::warn!(
            backend = backend.name(),
            "upstream MCP servers run without isolation: `read_paths`/`write_paths` confine nothing outside the `linux` backend"
        );
    }
}

/// Completes the deployment again each time an upstream MCP server (re)starts and lists its
/// tools: one that was down at start-up gets its params, one that changed its list gets the new
/// one. Follows the upstreams a reload put in place (they share the listing counter). Stops
/// with the gateway.
fn spawn_upstream_refresher(
    gateway: &Arc<Gateway>,
    upstreams: &Arc<std::sync::RwLock<corral_mcp::upstream::Upstreams>>,
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

fn corral_config_path(loaded: &Loaded, p: &str) -> PathBuf {
    let base = PathBuf::from(&loaded.state_dir);
    let base = base.parent().map(PathBuf::from).unwrap_or(base);
    if p.starts_with('/') {
        PathBuf::from(p)
    } else {
        base.join(p)
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = term => {},
    }
    tracing::info!("shutting down: draining in-flight calls");
}

/// Reloads the config file on SIGHUP (a server started from flags has none: SIGHUP is logged and
/// ignored rather than ending the process). A file that does not load, or that would leave the
/// server open where start-up would refuse to be, is refused and the last good config stays.
fn spawn_reloader(state: AppState, reload: Option<Reload>) {
    use tokio::signal::unix::{SignalKind, signal};
    tokio::spawn(async move {
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("SIGHUP handler unavailable; config reload disabled");
            return;
        };
        let Some(reload) = reload else {
            while hup.recv().await.is_some() {
                tracing::warn!(
                    "SIGHUP ignored: this server was started from flags (--preset), so there is no config file to reload; start it with --config FILE to reload on SIGHUP"
                );
            }
            return;
        };
        while hup.recv().await.is_some() {
            match reload.apply(&state).await {
                Ok(()) => tracing::info!(config = %reload.path.display(), "config reloaded"),
                Err(why) => {
                    tracing::error!(error = %why, "config reload refused; keeping the last good config");
                }
            }
        }
    });
}

/// What a reload needs besides the app: the file, the listener's address and `--allow-open`
/// (the same open-mode check as start-up), and the config the server started with (what the
/// settings read only at start-up still are).
struct Reload {
    path: PathBuf,
    listen: SocketAddr,
    allow_open: bool,
    started: corral_config::model::Config,
    /// The state dir the store was opened in (resolved against the config's directory).
    state_dir: PathBuf,
}

impl Reload {
    /// Loads the file and, if it is good, swaps in its auth, deployment and upstreams.
    async fn apply(&self, state: &AppState) -> Result<(), String> {
        let loaded = corral_config::load_file(&self.path).map_err(|e| {
            e.diagnostics
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" | ")
        })?;
        let auth = compose::authenticator(&loaded)?;
        check_open_mode(&loaded, auth.is_open(), self.listen, self.allow_open)
            .map_err(|e| e.to_string())?;
        // The running store lives in the start-up state dir, which every deployment protects:
        // a deployment built for another one would leave the live database writable.
        if loaded.state_dir != self.state_dir {
            return Err(
                "`state_dir` changed: corral's store stays where it started, so the reload is refused; restart corral to move its state"
                    .to_owned(),
            );
        }
        let restart = needs_restart(&self.started, &loaded.config);
        if !restart.is_empty() {
            tracing::warn!(
                settings = %restart.join(", "),
                "these settings changed but apply only when corral starts; restart it to apply them"
            );
        }
        let _held = state.0.deploy_lock.lock().await;
        let backend = state.0.gateway.backend();
        let (upstreams, changes) = state.0.upstreams().reconcile(
            compose::upstream_specs(&loaded),
            backend,
            compose::disabled_ops(&loaded),
            compose::declared_upstream_tools(&loaded),
        );
        if changes.changed() {
            warn_if_unisolated(&loaded, backend);
            tracing::info!(
                started = ?changes.started,
                restarted = ?changes.restarted,
                stopped = ?changes.stopped,
                "upstream MCP servers follow the reloaded `mcp_servers`"
            );
        }
        let deployment = compose::deployment(&loaded, &upstreams, std::time::Duration::ZERO).await;
        match state.0.upstreams.write() {
            Ok(mut u) => *u = upstreams,
            Err(p) => *p.into_inner() = upstreams,
        }
        state.0.gateway.replace(deployment);
        match state.0.auth.write() {
            Ok(mut a) => *a = Arc::new(auth),
            Err(p) => *p.into_inner() = Arc::new(auth),
        }
        Ok(())
    }
}

/// The settings that differ between `old` and `new` but are read only at start-up (`state_dir`
/// is not among them: a reload that changes it is refused).
fn needs_restart(
    old: &corral_config::model::Config,
    new: &corral_config::model::Config,
) -> Vec<&'static str> {
    let origins = |c: &corral_config::model::Config| -> Vec<String> {
        c.mcp
            .allowed_origins
            .iter()
            .map(|o| o.value.clone())
            .collect()
    };
    let mut changed = Vec::new();
    if old.storage != new.storage {
        changed.push("storage");
    }
    if old.isolation != new.isolation {
        changed.push("isolation");
    }
    if old.audit != new.audit {
        changed.push("audit");
    }
    if old.guardrails.confirmations != new.guardrails.confirmations {
        changed.push("guardrails.confirmations");
    }
    if old.mcp.hosts() != new.mcp.hosts() || origins(old) != origins(new) {
        changed.push("mcp");
    }
    changed
}

/// Runs the server until SIGINT or SIGTERM, then drains in-flight calls.
pub async fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    let (state, store) = build_state(&opts.loaded, opts.max_body_bytes).await?;
    check_open_mode(
        &opts.loaded,
        state.0.authenticator().is_open(),
        opts.listen,
        opts.allow_open,
    )?;
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| ServeError::Bind {
            addr: opts.listen,
            reason: e.to_string(),
        })?;
    let local = listener.local_addr().unwrap_or(opts.listen);
    let reload = opts.config_path.clone().map(|path| Reload {
        path,
        listen: opts.listen,
        allow_open: opts.allow_open,
        started: opts.loaded.config.clone(),
        state_dir: opts.loaded.state_dir.clone(),
    });
    spawn_reloader(state.clone(), reload);
    tracing::info!(
        listen = %local,
        mode = state.0.mode(),
        storage = state.0.storage,
        confirmations = state.0.gateway.confirmations_backend(),
        runs = state.0.gateway.runs_backend(),
        backend = state.0.gateway.backend().name(),
        "corral serving"
    );
    eprintln!(
        "corral listening on http://{local} (mode: {}, storage: {})",
        state.0.mode(),
        state.0.storage
    );
    let app = crate::app(state);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await;
    store.close().await;
    served.map_err(|e| ServeError::Bind {
        addr: local,
        reason: e.to_string(),
    })
}
