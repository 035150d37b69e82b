//! `/v1/sandbox/shadows`: shadow evaluations over HTTP (issue 15 items 3-5). `POST` checks
//! everything (the variants' eligibility, the announced count, access to every recording) and
//! answers `202` with the evaluation stored `running`; its N*M replay runs then execute in the
//! background, and `GET /v1/sandbox/shadows/{id}` shows `ran` of `planned` while they do and the
//! report when it ends. A refusal answers before anything runs.

use std::collections::HashMap;

use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use corral_lab::shadow::ShadowBody;

use super::extract::{Authed, Sandbox};
use super::sandbox::{enter_with_body, fetched, listed, reply};
use crate::AppState;
use crate::error::ApiError;

/// `POST /v1/sandbox/shadows` -> 202 the evaluation, `running`.
pub async fn start(State(state): State<AppState>, request: Request) -> Response {
    const OP: &str = "sandbox.shadows.run";
    let (caller, rid, b): (_, _, ShadowBody) =
        match enter_with_body(&state, request, OP, "POST /v1/sandbox/shadows").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    reply(
        StatusCode::ACCEPTED,
        lab.spawn_shadow(&caller, &rid, b).await,
        &rid,
    )
}

/// `GET /v1/sandbox/shadows?limit=&after=` -> `{items, next}`.
pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    listed(
        &state,
        &q,
        auth,
        "sandbox.shadows.list",
        &[],
        async |lab, caller, rid, page| lab.list_shadows(caller, rid, page).await,
    )
    .await
}

/// `GET /v1/sandbox/shadows/{id}`.
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    fetched(
        &state,
        auth,
        "sandbox.shadows.get",
        async |lab, caller, rid| lab.get_shadow(caller, rid, &id).await,
    )
    .await
}
