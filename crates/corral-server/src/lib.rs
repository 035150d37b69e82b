//! Corral's HTTP server: routes, authentication, the wire error, metrics and the OpenAPI
//! document. The only crate that knows HTTP.
//!
//! **Architecture invariant:** every route but `/healthz`, `/llms.txt` and the web console's
//! sign-in page and static assets authenticates first (the console's other pages by their
//! session, authenticated again on each request), and every op call goes through
//! `corral_guard::Gateway::call`.

pub mod auth;
mod body;
pub mod error;
mod http_span;
pub mod learning;
pub mod metrics;
pub mod openapi;
pub mod routes;
pub mod serve;
pub mod ui;

use std::sync::Arc;

use corral_config::Loaded;
use corral_guard::Gateway;
use corral_runtime::{Authenticator, Runtime};

pub use serve::{DEFAULT_MAX_BODY_BYTES, ServeOptions, local_state, serve};

/// The reference card, `docs/REFERENCE.md`: served as `GET /llms.txt`, printed by
/// `corral help reference`.
pub const REFERENCE_CARD: &str = include_str!("../../../docs/REFERENCE.md");

/// Shared state of the app: what every handler gets (derefs to [`App`]).
#[derive(Debug, Clone)]
pub struct AppState(Arc<App>);

impl AppState {
    /// Installs the hook every root agent's model reply goes through (learning mode's answer
    /// guard): once, at start-up, before the server answers; `false` when one is installed
    /// already (it stays).
    pub fn install_reply_hook(&self, hook: Arc<dyn routes::llm::ReplyHook>) -> bool {
        self.0.reply_hook.set(hook).is_ok()
    }

    /// The links of the agent sessions `owner` runs: each turn's link serves the LLM proxy
    /// only, as `owner` in the session's run (run id = session id: its budgets, audit and
    /// metering apply), authenticated by the turn's token alone (`routes::link::AgentLinks`);
    /// with `model`, the only model a turn may ask for (the runtime passes the session's).
    pub fn agent_links(
        &self,
        owner: corral_guard::Caller,
        model: Option<&str>,
    ) -> Arc<dyn corral_agents::ProxyLinks> {
        Arc::new(routes::link::AgentLinks::new(
            Arc::downgrade(&self.0),
            owner,
            model,
        ))
    }

    /// The state of an app. It also hands the app's lab the API it serves to external programs
    /// (`routes::link`).
    pub fn new(app: App) -> Self {
        let app = Arc::new(app);
        app.runtime
            .lab()
            .set_program_links(Arc::new(routes::link::ServerLinks(Arc::downgrade(&app))));
        app.runtime
            .agents()
            .set_links(Arc::new(routes::link::ServerAgentLinks(Arc::downgrade(
                &app,
            ))));
        Self(app)
    }
}

impl std::ops::Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.0
    }
}

/// Everything a request handler may need: the runtime, and the HTTP settings.
#[derive(Debug)]
pub struct App {
    runtime: Runtime,
    metrics: Arc<metrics::CallMetrics>,
    max_body_bytes: usize,
    mcp_allowed_hosts: Vec<String>,
    mcp_allowed_origins: Vec<String>,
    mcp_underscored_names: bool,
    /// Learning mode's state: `Some` only when `corral serve` activated it.
    learning: Option<Arc<learning::Learning>>,
    /// The LLM proxy's provider (`llm:`, read at start-up); `None`: its routes answer 503.
    llm: Option<Arc<routes::llm::Upstream>>,
    /// The hook of root agents' model replies; none by default (replies pass untouched).
    reply_hook: std::sync::OnceLock<Arc<dyn routes::llm::ReplyHook>>,
    /// Cancelled when the server starts shutting down: long-lived answers (an agent
    /// session's event stream) end then, so a graceful shutdown does not wait for them.
    shutdown: tokio_util::sync::CancellationToken,
    /// The console's sign-in attempts per client address and presented identity (bounded).
    sign_in_limiter: ui::SignInLimiter,
}

impl App {
    /// The app over `runtime` (built with `metrics` as its observer), with the HTTP settings of
    /// `loaded` (`mcp.allowed_hosts`, `mcp.allowed_origins`; read only at start-up).
    pub fn new(
        runtime: Runtime,
        metrics: Arc<metrics::CallMetrics>,
        loaded: &Loaded,
        max_body_bytes: usize,
    ) -> Self {
        Self {
            runtime,
            metrics,
            max_body_bytes,
            mcp_allowed_hosts: loaded.config.mcp.hosts(),
            mcp_allowed_origins: loaded
                .config
                .mcp
                .allowed_origins
                .iter()
                .map(|o| o.value.clone())
                .collect(),
            mcp_underscored_names: loaded.config.mcp.underscored_tool_names,
            learning: None,
            llm: routes::llm::Upstream::from_loaded(loaded).map(Arc::new),
            reply_hook: std::sync::OnceLock::new(),
            shutdown: tokio_util::sync::CancellationToken::new(),
            sign_in_limiter: ui::SignInLimiter::from_config(&loaded.config.console),
        }
    }

    /// The console's sign-in limiter.
    pub(crate) fn sign_in_limiter(&self) -> &ui::SignInLimiter {
        &self.sign_in_limiter
    }

    /// Sets how many console sign-in attempts a window one client address, and one presented
    /// identity, may make (`console.sign_in_rate`, 10 a minute by default): for a test that must sign in more often than a
    /// person would (the 16-sessions cap).
    pub fn set_sign_in_limit(&self, attempts_per_minute: u32) {
        self.sign_in_limiter.set_limit(attempts_per_minute);
    }

    /// Cancelled when the server starts shutting down.
    pub fn shutdown(&self) -> &tokio_util::sync::CancellationToken {
        &self.shutdown
    }

    /// The LLM proxy's provider, when `llm:` is configured.
    pub fn llm(&self) -> Option<Arc<routes::llm::Upstream>> {
        self.llm.clone()
    }

    /// The installed reply hook, if any.
    pub fn reply_hook(&self) -> Option<Arc<dyn routes::llm::ReplyHook>> {
        self.reply_hook.get().cloned()
    }

    /// The metrics registry, shared.
    pub(crate) fn metrics_arc(&self) -> Arc<metrics::CallMetrics> {
        Arc::clone(&self.metrics)
    }

    /// The app in learning mode (`serve::build_state_with` only, after every precondition held).
    pub fn with_learning(mut self, learning: Arc<learning::Learning>) -> Self {
        self.learning = Some(learning);
        self
    }

    /// Learning mode's state, when it is on.
    pub fn learning(&self) -> Option<&Arc<learning::Learning>> {
        self.learning.as_ref()
    }

    /// The running corral behind the routes.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The guard chain.
    pub fn gateway(&self) -> &Arc<Gateway> {
        self.runtime.gateway()
    }

    /// The store: where the audit events are read back from (`GET /audit`).
    pub fn store(&self) -> &Arc<corral_store::Store> {
        self.runtime.store()
    }

    /// The storage backend's name, for `/healthz`.
    pub fn storage(&self) -> &'static str {
        self.runtime.store().backend_name()
    }

    /// What the gateway reports of each call, rendered on `/metrics`.
    pub fn metrics(&self) -> &metrics::CallMetrics {
        &self.metrics
    }

    /// Largest request body accepted.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// `Host` values `/mcp` answers (`mcp.allowed_hosts`; loopback by default).
    pub fn mcp_allowed_hosts(&self) -> &[String] {
        &self.mcp_allowed_hosts
    }

    /// Browser `Origin`s `/mcp` answers (`mcp.allowed_origins`; empty: no Origin check).
    pub fn mcp_allowed_origins(&self) -> &[String] {
        &self.mcp_allowed_origins
    }

    /// Whether MCP tools are named with `__` for each `.` (`mcp.tool_names: underscored`).
    pub fn mcp_underscored_names(&self) -> bool {
        self.mcp_underscored_names
    }

    /// `learning` (learning mode on), `open` (no tokens, no JWT) or `auth`.
    pub fn mode(&self) -> &'static str {
        if self.learning.is_some() {
            "learning"
        } else if self.authenticator().is_open() {
            "open"
        } else {
            "auth"
        }
    }

    /// The current authenticator.
    pub fn authenticator(&self) -> Arc<Authenticator> {
        self.runtime.authenticator()
    }
}

/// The router: `app(state)` so tests can drive it without a socket, too.
pub fn app(state: AppState) -> axum::Router {
    routes::router(state)
}
