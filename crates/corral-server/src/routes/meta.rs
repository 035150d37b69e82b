//! `/healthz`, `/me`, `/metrics`, `/openapi.json` and the fallbacks.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use corral_policy::codes;
use serde_json::json;

use super::extract::{Authed, Me, Metrics, OpenApi, UnknownRoute, WrongMethod};
use crate::AppState;
use crate::error::ApiError;

/// `GET /healthz`: no auth; says the server is up, its version and mode.
pub async fn healthz(State(state): State<AppState>) -> Response {
    let mut body = json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "mode": state.mode(),
        "backend": state.gateway().backend().name(),
        "storage": state.storage(),
        "confirmations": state.gateway().confirmations_backend(),
    });
    // Learning mode: the scenario's id, never a value of it.
    if let Some(l) = state.learning() {
        body["scenario_id"] = json!(l.scenario().0);
    }
    axum::Json(body).into_response()
}

/// `GET /me`: the caller's principal (and the run its token is scoped to, if any).
/// In learning mode it carries `learning: {scenario_id, level, max_level, can_take_hint}`.
pub async fn me(
    State(state): State<AppState>,
    Authed { caller: c, .. }: Authed<Me>,
) -> Result<Response, ApiError> {
    let p = &c.principal;
    let mut body = json!({
        "id": p.id,
        "roles": p.roles,
        "kind": p.kind.as_str(),
        "tenant": p.tenant,
        "authenticated": p.authenticated,
        "act_chain": c.act_chain,
        "run": c.run,
    });
    if let Some(l) = state.learning() {
        let (scenario_id, default) = l.scenario();
        let view = l.levels().view(p, &scenario_id, default);
        body["learning"] = json!({
            "scenario_id": scenario_id,
            "level": view.level.get(),
            "max_level": view.max_level.get(),
            "can_take_hint": view.can_take_hint,
        });
    }
    Ok(axum::Json(body).into_response())
}

/// `GET /llms.txt`: no auth; the reference card (`docs/REFERENCE.md`), for people and the AI
/// agents that configure or call corral. It is the binary's own documentation: nothing of
/// this deployment is in it.
pub async fn llms_txt() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        crate::REFERENCE_CARD,
    )
        .into_response()
}

/// `GET /metrics`: OpenMetrics text (Prometheus scrapes it).
pub async fn metrics(
    State(state): State<AppState>,
    Authed {
        request_id: rid, ..
    }: Authed<Metrics>,
) -> Result<Response, ApiError> {
    let text = state.metrics().render().map_err(|_| {
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
    Authed { caller: c, .. }: Authed<OpenApi>,
) -> Result<Response, ApiError> {
    let d = state.gateway().deployment();
    let ops = d.callable_ops(&c.principal);
    let declared = state.runtime().lab().declared();
    let routes = crate::openapi::Routes {
        learning: state.learning().is_some(),
        llm: state.llm().is_some(),
        adapters: state.runtime().agents().mounted().0,
        programs: declared.programs,
        scorers: declared.scorers,
        judges: declared.judges,
    };
    Ok(axum::Json(crate::openapi::document(&ops, &routes)).into_response())
}

/// Unknown routes.
pub async fn not_found(
    Authed {
        request_id: rid, ..
    }: Authed<UnknownRoute>,
) -> Result<Response, ApiError> {
    Err(ApiError::new(
        codes::ROUTE_NOT_FOUND,
        "no such route; op calls are `POST /ops/{id}`",
        None,
        &rid,
    ))
}

/// Known routes with the wrong method.
pub async fn method_not_allowed(
    Authed {
        request_id: rid, ..
    }: Authed<WrongMethod>,
) -> Result<Response, ApiError> {
    Err(ApiError::new(
        codes::ROUTE_METHOD_NOT_ALLOWED,
        "op calls are `POST /ops/{id}`; listings are `GET`",
        None,
        &rid,
    ))
}
