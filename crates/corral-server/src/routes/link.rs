//! The API a lab run's external program reaches through its link (`$CORRAL_URL` in its
//! sandbox): `GET /ops`, `POST /ops/{id}` and `/mcp`, the same handlers as the deployment's
//! routes, over the run's world (its mocks, its run, purpose `simulation`), authenticated only
//! by the step's token (see `extract::Authed::authenticate_linked`). Every other path is a 404,
//! and no configured token reaches anything here.
//!
//! An agent session's turn has a link of its own ([`AgentLinks`]): the LLM proxy only,
//! authenticated by the turn's token (`Authorization: Bearer` or `x-api-key`), as the
//! session's owner in the session's run.
//!
//! Each connection the program makes is served in this process, on the connection the
//! isolation backend accepted in the sandbox's network namespace: no port is opened on the host.
//! What one connection makes corral hold is bounded (a head of [`MAX_HEAD_BYTES`], a body of
//! the server's limit), as is the number served at once (the backend's
//! `corral_exec::linux::MAX_LINK_CONNECTIONS`).

use std::sync::{Arc, Weak};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use corral_guard::{Caller, Gateway};
use corral_lab::program::{CorralLink, ProgramLinks, TokenDigest};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;

use corral_agents::ProxyLinks;

use super::extract::{LinkKind, Linked};
use super::{llm, mcp, meta, ops};
use crate::{App, AppState};

/// The most bytes of a request head (and of what is read ahead of a request) corral buffers for
/// one of a program's connections; a larger head is answered `431`. With the backend's cap on the
/// connections served at once, what a program makes corral hold stays small.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The link's routes, with `linked` in every request's extensions.
fn router(state: AppState, linked: Linked) -> Router {
    let limit = state.max_body_bytes();
    let mcp =
        axum::routing::any_service(mcp::linked_service(Arc::clone(&linked.gateway), limit)).layer(
            axum::middleware::from_fn_with_state(state.clone(), mcp::authenticate),
        );
    let routes = Router::new()
        .route("/ops", get(ops::list))
        .route("/ops/{id}", post(ops::call))
        .route("/mcp", mcp);
    linked_router(routes, state, linked)
}

/// `routes` as a link serves them: every request carries `linked`, the server's body limit,
/// and corral's own answers for an unknown path or method.
fn linked_router(routes: Router<AppState>, state: AppState, linked: Linked) -> Router {
    let limit = state.max_body_bytes();
    routes
        .fallback(meta::not_found)
        .method_not_allowed_fallback(meta::method_not_allowed)
        .layer(axum::Extension(linked))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// The server's [`ProgramLinks`]: holds the app weakly (the app holds the lab, which holds
/// this), so a link made after the server stopped serves nothing.
#[derive(Debug)]
pub(crate) struct ServerLinks(pub(crate) Weak<App>);

impl ProgramLinks for ServerLinks {
    fn link(&self, gateway: Arc<Gateway>, caller: Caller, token: TokenDigest) -> CorralLink {
        let router = self.0.upgrade().map(|app| {
            router(
                AppState(app),
                Linked {
                    gateway,
                    caller,
                    token,
                    requests: Arc::default(),
                    kind: LinkKind::Program,
                    model: None,
                },
            )
        });
        serve_with(router)
    }
}

/// How long a link's connection may take to send a request head.
const LINK_HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A link serving each connection with `router` (none: the server stopped; nothing is served).
fn serve_with(router: Option<Router>) -> CorralLink {
    CorralLink::new(move |conn: tokio::net::TcpStream| {
        let router = router.clone();
        Box::pin(async move {
            let Some(router) = router else {
                return;
            };
            let service = TowerToHyperService::new(router);
            // A connection that sends no complete head in time is closed: it holds one of the
            // run's few link slots.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(LINK_HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .max_header_size(MAX_HEAD_BYTES)
                .serve_connection(TokioIo::new(conn), service)
                .await;
        })
    })
}

/// The routes of an agent turn's link: the LLM proxy only (`/v1/responses`,
/// `/v1/chat/completions`, `/v1/messages`, also under `?beta=true`, and `/v1/models`), the
/// same handlers as the deployment's, with `linked` in every request's extensions.
fn agent_router(state: AppState, linked: Linked) -> Router {
    let routes = Router::new()
        .route("/v1/responses", post(llm::responses))
        .route("/v1/chat/completions", post(llm::chat_completions))
        .route("/v1/messages", post(llm::messages))
        .route("/v1/models", get(llm::models));
    linked_router(routes, state, linked)
}

/// The [`ProxyLinks`] of one agent session: each turn's link serves the LLM proxy, through
/// the deployment's gateway (audited, metered, budgets of the session's run: the caller is
/// the session's owner scoped to the run whose id is the session's), authenticated only by
/// the turn's token. The upstream key stays in corral: the CLI only ever holds the token.
/// Holds the app weakly, as [`ServerLinks`] does.
#[derive(Debug)]
pub(crate) struct AgentLinks {
    app: Weak<App>,
    owner: Caller,
    model: Option<Arc<str>>,
}

impl AgentLinks {
    /// The links of the sessions `owner` starts; with `model`, the only model a turn's
    /// requests may ask for (`agents.model_not_allowed` otherwise).
    pub(crate) fn new(app: Weak<App>, owner: Caller, model: Option<&str>) -> Self {
        Self {
            app,
            owner,
            model: model.map(Arc::from),
        }
    }
}

/// The links of every owner's agent sessions, for the runtime's agents host (holds the app
/// weakly).
#[derive(Debug)]
pub(crate) struct ServerAgentLinks(pub(crate) Weak<App>);

impl corral_runtime::agents::AgentLinksFor for ServerAgentLinks {
    fn links(&self, owner: Caller, model: &str) -> Arc<dyn ProxyLinks> {
        Arc::new(AgentLinks::new(self.0.clone(), owner, Some(model)))
    }
}

impl ProxyLinks for AgentLinks {
    fn link(&self, session: &str, token: TokenDigest) -> CorralLink {
        let caller = self.owner.clone().with_run(Some(session.to_owned()));
        let router = self.app.upgrade().map(|app| {
            let state = AppState(app);
            let gateway = Arc::clone(state.gateway());
            agent_router(
                state,
                Linked {
                    gateway,
                    caller,
                    token,
                    requests: Arc::default(),
                    kind: LinkKind::AgentTurn,
                    model: self.model.clone(),
                },
            )
        });
        serve_with(router)
    }
}
