//! `/healthz`, `/me`, `/metrics`, `/openapi.json` and the fallbacks.

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use corral_guard::Caller;
use corral_policy::codes;
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;

/// Authenticates or answers 401 (and audits the refusal).
pub(crate) async fn authed(
    state: &AppState,
    headers: &HeaderMap,
    what: &str,
    request_id: &str,
) -> Result<Caller, ApiError> {
    match state.0.authenticator().authenticate(headers) {
        Ok(c) => Ok(c),
        Err(e) => {
            state
                .0
                .gateway
                .audit_unauthenticated(what, request_id, e.code, 401)
                .await;
            Err(ApiError::new(e.code, e.message, None, request_id))
        }
    }
}

/// `GET /healthz`: no auth; says the server is up, its version and mode.
pub async fn healthz(State(state): State<AppState>) -> Response {
    axum::Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "mode": state.0.mode(),
        "backend": state.0.gateway.backend().name(),
        "storage": state.0.storage,
        "confirmations": state.0.gateway.confirmations_backend(),
    }))
    .into_response()
}

/// `GET /me`: the caller's principal (and the run its token is scoped to, if any).
pub async fn me(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let rid = super::request_id();
    let c = authed(&state, &headers, "GET /me", &rid).await?;
    let p = &c.principal;
    Ok(axum::Json(json!({
        "id": p.id,
        "roles": p.roles,
        "kind": p.kind.as_str(),
        "tenant": p.tenant,
        "authenticated": p.authenticated,
        "act_chain": c.act_chain,
        "run": c.run,
    }))
    .into_response())
}

/// `GET /metrics`: OpenMetrics text (Prometheus scrapes it).
pub async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    authed(&state, &headers, "GET /metrics", &rid).await?;
    let text = state.0.metrics.render().map_err(|_| {
        tracing::error!(request_id = %rid, "GET /metrics: the metrics could not be encoded");
        ApiError::new(
            codes::SERVER_INTERNAL,
            "the metrics could not be encoded; the server log has the request id",
            None,
            &rid,
        )
    })?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}

/// `GET /openapi.json`: the API as the caller sees it.
pub async fn openapi(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    let c = authed(&state, &headers, "GET /openapi.json", &rid).await?;
    let d = state.0.gateway.deployment();
    let ops = d.callable_ops(&c.principal);
    Ok(axum::Json(crate::openapi::document(&ops)).into_response())
}

/// Unknown routes.
pub async fn not_found(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    authed(&state, &headers, "unknown route", &rid).await?;
    Err(ApiError::new(
        codes::ROUTE_NOT_FOUND,
        "no such route; op calls are `POST /ops/{id}`",
        None,
        &rid,
    ))
}

/// Known routes with the wrong method.
pub async fn method_not_allowed(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    authed(&state, &headers, "wrong method", &rid).await?;
    Err(ApiError::new(
        codes::ROUTE_METHOD_NOT_ALLOWED,
        "op calls are `POST /ops/{id}`; listings are `GET`",
        None,
        &rid,
    ))
}
