//! `corral serve`: storage, backend, guard chain and routes; graceful shutdown; SIGHUP reload.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use corral_config::Loaded;
use corral_runtime::{Runtime, RuntimeError, RuntimeOptions};
use corral_store::Store;

use crate::{App, AppState};

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
    /// Learning mode, when `CORRAL_LEARNING_MODE=true` (read by the CLI: only `corral serve`
    /// passes one).
    pub learning: Option<crate::learning::LearningSetup>,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Open mode refused.
    #[error("{0}")]
    OpenMode(String),
    /// The listener could not bind.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The runtime could not be composed (storage, auth, protected paths, isolation).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Learning mode was asked for and a precondition does not hold (each one is named).
    #[error("{0}")]
    Learning(crate::learning::Refused),
    /// Learning mode's answer guard could not be installed (another reply hook was): the
    /// server does not start unguarded.
    #[error(
        "learning mode: the answer guard could not be installed (another reply hook was); \
         the server does not start without it"
    )]
    GuardNotInstalled,
}

impl ServeError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::OpenMode(_) => corral_policy::codes::CONFIG_OPEN_MODE_REFUSED,
            ServeError::Bind { .. } => corral_policy::codes::SERVER_INTERNAL,
            ServeError::Runtime(e) => e.code(),
            ServeError::Learning(r) => r.code(),
            ServeError::GuardNotInstalled => corral_policy::codes::SERVER_INTERNAL,
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

/// The largest request body when nothing says otherwise (`corral serve --max-body-bytes`).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// The app of an in-process entry point (`corral sandbox --local`) over `runtime`: no listener
/// and no metrics registry of its own; what it serves is the links of the lab's external
/// programs (`routes::link`), with the default body limit.
pub fn local_state(runtime: Runtime, loaded: &Loaded) -> AppState {
    let metrics = Arc::new(crate::metrics::CallMetrics::default());
    AppState::new(App::new(runtime, metrics, loaded, DEFAULT_MAX_BODY_BYTES))
}

/// Builds the app state for a loaded config: a long-lived [`Runtime`] (every background task)
/// reporting to the `/metrics` registry, and the HTTP settings. Also what tests serve.
pub async fn build_state(
    loaded: &Loaded,
    max_body_bytes: usize,
) -> Result<(AppState, Arc<Store>), ServeError> {
    build_state_with(loaded, max_body_bytes, None).await
}

/// Learning mode's activation, as `corral serve` passes it to [`build_state_with`].
#[derive(Debug, Clone)]
pub struct Activation {
    /// The manifest and settings.
    pub setup: crate::learning::LearningSetup,
    /// `--allow-open` was passed (learning mode refuses it).
    pub allow_open: bool,
}

/// [`build_state`], with learning mode when `learning` is given: every precondition is checked
/// before anything is built (all unmet ones are named), and only then is the runtime built with
/// the flag honoured. Without it, no learning code runs.
pub async fn build_state_with(
    loaded: &Loaded,
    max_body_bytes: usize,
    learning: Option<Activation>,
) -> Result<(AppState, Arc<Store>), ServeError> {
    let learning = match learning {
        None => None,
        Some(a) => Some(Arc::new(
            crate::learning::Learning::start(loaded, &a.setup, a.allow_open)
                .map_err(ServeError::Learning)?,
        )),
    };
    let metrics = Arc::new(match &learning {
        None => crate::metrics::CallMetrics::default(),
        Some(l) => crate::metrics::CallMetrics::with_learning(l.watcher()),
    });
    let mut options = RuntimeOptions::long_lived()
        .with_observer(metrics.clone())
        .with_meter(metrics.meter());
    if learning.is_some() {
        options = options.with_learning();
    }
    let runtime = Runtime::build(loaded, options).await?;
    let store = Arc::clone(runtime.store());
    let mut app = App::new(runtime, metrics, loaded, max_body_bytes);
    let hook = learning.as_ref().map(|l| {
        crate::learning::AnswerHook::new(
            Arc::clone(l),
            app.gateway().sinks().to_vec(),
            app.gateway().tenant(),
        )
    });
    if let Some(l) = learning {
        app = app.with_learning(l);
    }
    let state = AppState::new(app);
    if let Some(h) = hook {
        // The first and only hook: learning mode's answer guard.
        if !state.install_reply_hook(Arc::new(h)) {
            return Err(ServeError::GuardNotInstalled);
        }
    }
    Ok((state, store))
}

/// SIGTERM or Ctrl-C; then `token` is cancelled (long-lived answers end) and the server
/// drains.
async fn shutdown_signal(token: tokio_util::sync::CancellationToken) {
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
    token.cancel();
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
        let auth = corral_runtime::compose::authenticator(&loaded)?;
        check_open_mode(&loaded, auth.is_open(), self.listen, self.allow_open)
            .map_err(|e| e.to_string())?;
        state
            .runtime()
            .reload(&loaded, auth)
            .await
            .map_err(|e| e.to_string())?;
        let restart = needs_restart(&self.started, &loaded.config);
        if !restart.is_empty() {
            tracing::warn!(
                settings = %restart.join(", "),
                "these settings changed but apply only when corral starts; restart it to apply them"
            );
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
    if old.console != new.console {
        changed.push("console");
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
    if old.recordings != new.recordings {
        changed.push("recordings");
    }
    if old.llm != new.llm {
        changed.push("llm");
    }
    if old.telemetry != new.telemetry {
        changed.push("telemetry");
    }
    changed
}

/// Runs the server until SIGINT or SIGTERM, then drains in-flight calls.
pub async fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    let activation = opts.learning.clone().map(|setup| Activation {
        setup,
        allow_open: opts.allow_open,
    });
    let (state, store) = build_state_with(&opts.loaded, opts.max_body_bytes, activation).await?;
    check_open_mode(
        &opts.loaded,
        state.authenticator().is_open(),
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
    });
    spawn_reloader(state.clone(), reload);
    tracing::info!(
        listen = %local,
        mode = state.mode(),
        storage = state.storage(),
        confirmations = state.gateway().confirmations_backend(),
        runs = state.gateway().runs_backend(),
        backend = state.gateway().backend().name(),
        "corral serving"
    );
    eprintln!(
        "corral listening on http://{local} (mode: {}, storage: {})",
        state.mode(),
        state.storage()
    );
    let token = state.shutdown().clone();
    let app = crate::app(state);
    // The peer address: the console's sign-in limiter counts attempts per client.
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal(token))
        .await;
    store.close().await;
    served.map_err(|e| ServeError::Bind {
        addr: local,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use corral_config::model::{Config, LlmConfig, TelemetryConfig};

    /// A reload names every start-up-only setting it changed, `llm`, `recordings` and
    /// `telemetry` too.
    #[test]
    fn a_reload_names_the_start_up_settings_it_changed() {
        let old = Config::default();
        let mut new = Config::default();
        assert!(super::needs_restart(&old, &new).is_empty());
        new.llm = Some(LlmConfig::default());
        new.recordings.max_events = Some(10);
        new.telemetry = Some(TelemetryConfig::default());
        assert_eq!(
            super::needs_restart(&old, &new),
            ["recordings", "llm", "telemetry"]
        );
    }
}
