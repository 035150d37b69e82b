//! Corral's HTTP server: routes, authentication, the wire error, metrics and the OpenAPI
//! document. The only crate that knows HTTP.
//!
//! **Architecture invariant:** every route but `/healthz` authenticates first, and every op call
//! goes through `corral_guard::Gateway::call`.

pub mod auth;
mod body;
pub mod compose;
pub mod error;
pub mod metrics;
pub mod openapi;
pub mod routes;
pub mod serve;

use std::sync::Arc;

use corral_guard::Gateway;

pub use serve::{ServeOptions, serve};

/// Shared state of the app.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<App>);

/// Everything a request handler may need.
#[derive(Debug)]
pub struct App {
    /// The guard chain.
    pub gateway: Arc<Gateway>,
    /// What the gateway reports of each call, rendered on `/metrics`.
    pub metrics: Arc<metrics::CallMetrics>,
    /// The upstream MCP servers of the current config (reconciled on reload: unchanged ones
    /// keep running, new ones start, removed ones stop).
    pub upstreams: Arc<std::sync::RwLock<corral_mcp::upstream::Upstreams>>,
    /// Held while a new deployment is computed and swapped in (a reload, an upstream refresh),
    /// so one never overwrites the other with a deployment built from a stale one.
    pub deploy_lock: Arc<tokio::sync::Mutex<()>>,
    /// Who may call, and how they prove it. Swapped with the deployment on reload.
    pub auth: std::sync::RwLock<Arc<auth::Authenticator>>,
    /// The storage backend's name, for `/healthz`.
    pub storage: &'static str,
    /// The store: where the audit events are read back from (`GET /audit`).
    pub store: Arc<corral_store::Store>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// `Host` values `/mcp` answers (`mcp.allowed_hosts`; loopback by default).
    pub mcp_allowed_hosts: Vec<String>,
    /// Browser `Origin`s `/mcp` answers (`mcp.allowed_origins`; empty: no Origin check).
    pub mcp_allowed_origins: Vec<String>,
}

impl App {
    /// The current upstream MCP servers.
    pub fn upstreams(&self) -> corral_mcp::upstream::Upstreams {
        match self.upstreams.read() {
            Ok(u) => u.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// `open` (no tokens, no JWT) or `auth`, as the current config has it.
    pub fn mode(&self) -> &'static str {
        if self.authenticator().is_open() {
            "open"
        } else {
            "auth"
        }
    }

    /// The current authenticator.
    pub fn authenticator(&self) -> Arc<auth::Authenticator> {
        match self.auth.read() {
            Ok(a) => a.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// The router: `app(state)` so tests can drive it without a socket, too.
pub fn app(state: AppState) -> axum::Router {
    routes::router(state)
}
