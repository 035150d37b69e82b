//! A running corral, composed once from a loaded config: the store, the isolation backend, the
//! audit sinks, the confirmation store, the upstream MCP servers, the deployment (engine + op
//! handlers + guard settings), the gateway over them, the authenticator, and the background
//! tasks the caller asked for. The HTTP server, `corral call --local` and `corral mcp` each
//! build one [`Runtime`] with [`Runtime::build`]; what differs between them is only their
//! [`RuntimeOptions`]. No HTTP here: corral-server wraps a runtime in its routes.
//!
//! **Architecture invariant:** a background task is started only when its option asks for it,
//! and [`Runtime::background_tasks`] lists every one that was.

pub mod agents;
pub mod auth;
pub mod compose;
mod services;
mod tasks;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use corral_config::Loaded;
use corral_guard::metering::Meter;
use corral_guard::{CallObserver, Gateway};
use corral_lab::service::LabService;
use corral_mcp::upstream::Upstreams;
use corral_store::Store;

pub use auth::{AuthError, Authenticator};
pub use tasks::BackgroundTask;

/// What a [`Runtime`] starts besides the gateway, and how its backend runs.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Start the upstream MCP servers (`mcp_servers`) and the refresher that follows their tool
    /// lists. Off: no server is started, and their `mcp.*` ops answer `upstream.unavailable`.
    pub upstreams: bool,
    /// With `upstreams`: start only the server of this name (`corral call --local` of one of its
    /// tools), not every one.
    pub only_upstream: Option<String>,
    /// How long [`Runtime::build`] waits for the upstream servers' first tool lists.
    pub upstream_wait: Duration,
    /// Purge expired confirmations (and expired recordings) every 10 minutes.
    pub confirmation_purger: bool,
    /// Purge idle runs every 10 minutes (PostgreSQL stores only).
    pub run_purger: bool,
    /// A linux backend for a process that runs a call or two and exits: no preflight probe
    /// (`LinuxBackend::with_one_shot`). Off: the probe runs at build and logs what is missing.
    pub one_shot: bool,
    /// Told of every decided call (the server's `/metrics`); none by default.
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Where runs and calls are metered per (tenant, purpose) (the server's `/metrics` reads
    /// it); a meter of the runtime's own by default.
    pub meter: Option<Arc<Meter>>,
    /// Learning mode activated (`CORRAL_LEARNING_MODE=true` honoured): only `corral serve`'s
    /// path sets it, after checking learning mode's preconditions. Off (every other entry
    /// point, every library user): [`Runtime::build`] refuses to build with the flag set.
    pub learning: bool,
}

/// How long a long-lived runtime waits at build for the upstream servers' first tool lists.
pub const UPSTREAM_LIST_WAIT: Duration = Duration::from_secs(20);

impl RuntimeOptions {
    /// A long-lived corral (`corral serve`, `corral mcp`): every background task, upstreams
    /// waited for up to [`UPSTREAM_LIST_WAIT`], the backend's preflight probe run.
    pub fn long_lived() -> Self {
        Self {
            upstreams: true,
            only_upstream: None,
            upstream_wait: UPSTREAM_LIST_WAIT,
            confirmation_purger: true,
            run_purger: true,
            one_shot: false,
            observer: None,
            meter: None,
            learning: false,
        }
    }

    /// A process that makes one call and exits (`corral call --local`): no background task, no
    /// upstream server, a one-shot backend. [`RuntimeOptions::with_upstreams`] adds the
    /// upstreams for a call of an `mcp.*` op.
    pub fn one_shot() -> Self {
        Self {
            upstreams: false,
            only_upstream: None,
            upstream_wait: Duration::ZERO,
            confirmation_purger: false,
            run_purger: false,
            one_shot: true,
            observer: None,
            meter: None,
            learning: false,
        }
    }

    /// Starts the upstream MCP servers (and their refresher), waiting up to
    /// [`UPSTREAM_LIST_WAIT`] for their first tool lists.
    pub fn with_upstreams(mut self) -> Self {
        self.upstreams = true;
        self.upstream_wait = UPSTREAM_LIST_WAIT;
        self
    }

    /// Starts only the upstream MCP server `name` (and the refresher), as
    /// [`RuntimeOptions::with_upstreams`] does all of them: a call of one server's tool starts
    /// no other server.
    pub fn with_upstream(mut self, name: &str) -> Self {
        self = self.with_upstreams();
        self.only_upstream = Some(name.to_owned());
        self
    }

    /// Honours `CORRAL_LEARNING_MODE=true`: for `corral serve`'s path only, which checks learning
    /// mode's preconditions first (corral-server's `serve::build_state_with`).
    pub fn with_learning(mut self) -> Self {
        self.learning = true;
        self
    }

    /// Reports every decided call to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Meters runs and calls per (tenant, purpose) in `meter`.
    pub fn with_meter(mut self, meter: Arc<Meter>) -> Self {
        self.meter = Some(meter);
        self
    }
}

/// Why a runtime could not be built or reloaded.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Storage could not be opened.
    #[error("storage: {0}")]
    Store(String),
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
    /// A reload named another state directory than the one the store was opened in.
    #[error(
        "`state_dir` changed: corral's store stays where it started, so the reload is refused; restart corral to move its state"
    )]
    StateDirChanged,
    /// `CORRAL_LEARNING_MODE` is set (or unreadable) where learning mode was not activated.
    #[error("{}", without_code(.0))]
    Learning(corral_learn::gate::EnvError),
}

impl RuntimeError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        use corral_policy::codes;
        match self {
            RuntimeError::Store(_) => codes::STORE_UNAVAILABLE,
            RuntimeError::Auth(_) | RuntimeError::StateDirChanged => codes::CONFIG_INVALID_VALUE,
            RuntimeError::Protected(_) => codes::CONFIG_PROTECTED_WRITABLE,
            RuntimeError::Isolation(_) => codes::ISOLATION_UNAVAILABLE,
            RuntimeError::Learning(e) => e.code,
        }
    }
}

/// An [`corral_learn::gate::EnvError`]'s message without its `error[code]: ` prefix (the
/// surfaces print the code themselves).
fn without_code(e: &corral_learn::gate::EnvError) -> String {
    let text = e.to_string();
    match text.split_once("]: ") {
        Some((_, rest)) => rest.to_owned(),
        None => text,
    }
}

/// A running corral: the gateway and everything it was composed from.
#[derive(Debug)]
pub struct Runtime {
    gateway: Arc<Gateway>,
    store: Arc<Store>,
    /// The upstream MCP servers of the current config (reconciled on reload: unchanged ones
    /// keep running, new ones start, removed ones stop). Empty when not started.
    upstreams: Arc<RwLock<Upstreams>>,
    /// Whether upstream servers are started (at build and on reload).
    upstreams_started: bool,
    /// Held while a new deployment is computed and swapped in (a reload, an upstream refresh),
    /// so one never overwrites the other with a deployment built from a stale one.
    deploy_lock: Arc<tokio::sync::Mutex<()>>,
    /// Who may call, and how they prove it. Swapped with the deployment on reload.
    auth: RwLock<Arc<Authenticator>>,
    /// The state directory the store was opened in.
    state_dir: PathBuf,
    tasks: Vec<BackgroundTask>,
    /// The lab's use cases (`sandbox.*`), over the same store, gateway and audit sinks.
    lab: Arc<LabService>,
    /// The agents host (`agents.*` ops): its sessions, installer and running turns.
    agents: Arc<agents::AgentHost>,
}

impl Runtime {
    /// Composes a running corral from a loaded config: opens the store, makes the backend, the
    /// audit sinks, the authenticator and the confirmation store, starts the upstream servers
    /// (if asked) and waits for their tool lists, builds the deployment and the gateway, and
    /// starts the background tasks `options` asks for.
    ///
    /// With `CORRAL_LEARNING_MODE=true` in the environment and `options.learning` off, nothing
    /// is built: `learning.not_this_entry_point` (an unreadable flag: `learning.flag_invalid`).
    pub async fn build(loaded: &Loaded, options: RuntimeOptions) -> Result<Self, RuntimeError> {
        if !options.learning {
            corral_learn::gate::refuse_outside_serve(
                std::env::var_os(corral_learn::gate::FLAG_ENV).as_deref(),
            )
            .map_err(RuntimeError::Learning)?;
        } else {
            corral_learn::gate::flag_from_env().map_err(RuntimeError::Learning)?;
        }
        let store = services::store(loaded).await?;
        let backend = services::backend(loaded, options.one_shot)?;
        let sinks = services::audit_sinks(loaded, &store)?;
        let auth = compose::authenticator(loaded).map_err(RuntimeError::Auth)?;
        let confirmations = services::confirmations(loaded, &store);
        let mut tasks = Vec::new();
        let upstreams = if options.upstreams {
            services::warn_if_unisolated(loaded, &backend);
            if !loaded.config.mcp_servers.is_empty() {
                tasks.push(BackgroundTask::UpstreamSupervisors);
            }
            let mut specs = compose::upstream_specs(loaded);
            if let Some(only) = &options.only_upstream {
                specs.retain(|s| &s.name == only);
            }
            Upstreams::start(
                specs,
                &backend,
                compose::disabled_ops(loaded),
                compose::declared_upstream_tools(loaded),
            )
        } else {
            Upstreams::start(
                Vec::new(),
                &backend,
                compose::disabled_ops(loaded),
                compose::declared_upstream_tools(loaded),
            )
        };
        // The tenant of a caller without one, for the gateway and the agents host alike.
        let tenant = "default";
        let agents = Arc::new(agents::AgentHost::new(
            loaded,
            store.clone(),
            sinks.clone(),
            services::agents_backend(loaded)?,
            tenant,
        ));
        let deployment =
            compose::deployment_with(loaded, &upstreams, options.upstream_wait, Some(&agents))
                .await;
        if options.confirmation_purger {
            tasks::spawn_confirmation_purger(&confirmations);
            tasks.push(BackgroundTask::ConfirmationPurger);
        }
        // Recordings of runs marked for recording (issue 15) go to the store, through its
        // recording writer (group commit; `close` stops it cleanly).
        let mut gateway = Gateway::new(deployment, backend, sinks, tenant)
            .with_confirmations(confirmations)
            .with_recorder(Arc::new(corral_store::RecordingWriter::spawn(&store)));
        if options.confirmation_purger {
            tasks::spawn_recording_purger(&store);
            tasks.push(BackgroundTask::RecordingPurger);
        }
        if let Some(observer) = options.observer {
            gateway = gateway.with_observer(observer);
        }
        if let Some(meter) = options.meter {
            gateway = gateway.with_meter(meter);
        }
        // Run budgets: in PostgreSQL, shared by the replicas on it; with the SQLite default (one
        // node) in this process's memory, which meters the same without a write per call.
        if store.backend_name() == "postgres" {
            gateway = gateway.with_runs(store.clone());
            if options.run_purger {
                tasks::spawn_run_purger(&store);
                tasks.push(BackgroundTask::RunPurger);
            }
        }
        let gateway = Arc::new(gateway);
        let deploy_lock = Arc::new(tokio::sync::Mutex::new(()));
        let upstreams = Arc::new(RwLock::new(upstreams));
        if options.upstreams {
            tasks::spawn_upstream_refresher(&gateway, &upstreams, &deploy_lock);
            tasks.push(BackgroundTask::UpstreamRefresher);
        }
        let lab = Arc::new(LabService::new(
            store.clone(),
            gateway.clone(),
            loaded.config.sandbox.enabled,
        ));
        lab.set_programs(compose::lab_programs(loaded, Arc::clone(gateway.backend())));
        lab.set_record_runs(loaded.config.sandbox.record_runs);
        lab.set_ceilings(compose::lab_ceilings(loaded));
        Ok(Self {
            lab,
            agents,
            gateway,
            store,
            upstreams,
            upstreams_started: options.upstreams,
            deploy_lock,
            auth: RwLock::new(Arc::new(auth)),
            state_dir: loaded.state_dir.clone(),
            tasks,
        })
    }

    /// The guard chain: every call goes through it.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The agents host: the HTTP crate hands it the links and reads its sessions.
    pub fn agents(&self) -> &Arc<agents::AgentHost> {
        &self.agents
    }

    /// The lab (scenarios, runs, comparisons): every surface's lab actions go through it.
    pub fn lab(&self) -> &Arc<LabService> {
        &self.lab
    }

    /// The store (audit events, confirmations, runs).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The current upstream MCP servers (none when the runtime does not start them).
    pub fn upstreams(&self) -> Upstreams {
        match self.upstreams.read() {
            Ok(u) => u.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The current authenticator.
    pub fn authenticator(&self) -> Arc<Authenticator> {
        match self.auth.read() {
            Ok(a) => a.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The background tasks this runtime started, in the order they started.
    pub fn background_tasks(&self) -> &[BackgroundTask] {
        &self.tasks
    }

    /// Swaps in a reloaded config's deployment, upstream servers and authenticator (`auth`,
    /// from [`compose::authenticator`], checked by the caller first): unchanged servers keep
    /// their process, new or changed ones start, removed ones stop; the new deployment does not
    /// wait for tool lists (the refresher completes it). Settings read only at build (storage,
    /// isolation, audit sinks, where confirmations live) keep their values. A config with
    /// another state directory is refused and nothing changes.
    pub async fn reload(&self, loaded: &Loaded, auth: Authenticator) -> Result<(), RuntimeError> {
        // The running store lives in the start-up state dir, which every deployment protects:
        // a deployment built for another one would leave the live database writable.
        if loaded.state_dir != self.state_dir {
            return Err(RuntimeError::StateDirChanged);
        }
        let _held = self.deploy_lock.lock().await;
        let backend = self.gateway.backend();
        let specs = if self.upstreams_started {
            compose::upstream_specs(loaded)
        } else {
            Vec::new()
        };
        let (upstreams, changes) = self.upstreams().reconcile(
            specs,
            backend,
            compose::disabled_ops(loaded),
            compose::declared_upstream_tools(loaded),
        );
        if changes.changed() {
            services::warn_if_unisolated(loaded, backend);
            tracing::info!(
                started = ?changes.started,
                restarted = ?changes.restarted,
                stopped = ?changes.stopped,
                "upstream MCP servers follow the reloaded `mcp_servers`"
            );
        }
        self.agents.reload(loaded);
        let deployment =
            compose::deployment_with(loaded, &upstreams, Duration::ZERO, Some(&self.agents)).await;
        match self.upstreams.write() {
            Ok(mut u) => *u = upstreams,
            Err(p) => *p.into_inner() = upstreams,
        }
        self.gateway.replace(deployment);
        self.lab.set_enabled(loaded.config.sandbox.enabled);
        self.lab.set_record_runs(loaded.config.sandbox.record_runs);
        self.lab.set_ceilings(compose::lab_ceilings(loaded));
        self.lab.set_programs(compose::lab_programs(
            loaded,
            Arc::clone(self.gateway.backend()),
        ));
        match self.auth.write() {
            Ok(mut a) => *a = Arc::new(auth),
            Err(p) => *p.into_inner() = Arc::new(auth),
        }
        Ok(())
    }

    /// Closes the store's connections, waiting for statements in flight (what the gateway
    /// answered is already committed).
    pub async fn close(&self) {
        self.store.close().await;
    }
}
