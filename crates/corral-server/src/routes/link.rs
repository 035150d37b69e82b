//! The API a lab run's external program reaches through its link (`$CORRAL_URL` in its
//! sandbox): `GET /ops`, `POST /ops/{id}` and `/mcp`, the same handlers as the deployment's
//! routes, over the run's world (its mocks, its run, purpose `simulation`), authenticated only
//! by the step's token (see `extract::Authed::authenticate_linked`). Every other path is a 404,
//! and no configured token reaches anything here.
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

use super::extract::Linked;
use super::{mcp, meta, ops};
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
    Router::new()
        .route("/ops", get(ops::list))
        .route("/ops/{id}", post(ops::call))
        .route("/mcp", mcp)
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
                },
            )
        });
        CorralLink::new(move |conn: tokio::net::TcpStream| {
            let router = router.clone();
            Box::pin(async move {
                let Some(router) = router else {
                    return;
                };
                let service = TowerToHyperService::new(router);
                let _ = hyper::server::conn::http1::Builder::new()
                    .max_buf_size(MAX_HEAD_BYTES)
                    .max_header_size(MAX_HEAD_BYTES)
                    .serve_connection(TokioIo::new(conn), service)
                    .await;
            })
        })
    }
}
