//! `POST /learning/hint` (learning mode only): a verified human raises their own disclosure
//! level by one; audited as `learning_hint` and counted in `corral_learning_hints_total`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use corral_learn::levels::HintRefusal;
use serde_json::json;

use super::extract::{Authed, LearningHint};
use crate::AppState;
use crate::error::ApiError;

/// `POST /learning/hint`: the new level, or 403 (not a verified human), 429 (too soon), 409
/// (already 3). No body is read.
pub async fn hint(
    State(state): State<AppState>,
    Authed {
        caller: c,
        request_id: rid,
        ..
    }: Authed<LearningHint>,
) -> Result<Response, ApiError> {
    Ok(axum::Json(take_hint(&state, &c, &rid).await?).into_response())
}

/// Raises `c`'s level by one hint (the API's route and the web console's hint button both
/// take it here): `{scenario_id, old_level, level, max_level}`, audited and counted, or the
/// refusal (`route.not_found` when learning mode is off).
pub(crate) async fn take_hint(
    state: &AppState,
    c: &corral_guard::Caller,
    rid: &str,
) -> Result<serde_json::Value, ApiError> {
    let Some(l) = state.learning() else {
        return Err(ApiError::new(
            corral_policy::codes::ROUTE_NOT_FOUND,
            "no such route; learning mode is off",
            None,
            rid,
        ));
    };
    let (scenario_id, default) = l.scenario();
    let hint = l
        .levels()
        .hint(&c.principal, &scenario_id, default)
        .map_err(|refusal| {
            let mut e = ApiError::new(refusal.code(), refusal.to_string(), None, rid);
            if let HintRefusal::RateLimited { retry_after } = refusal {
                e.retry_after_secs = Some(retry_after.as_secs().max(1));
            }
            e
        })?;
    let event = crate::learning::audit_event(
        c,
        state.gateway().tenant(),
        rid,
        "learning_hint",
        format!(
            "subject {}; scenario {scenario_id}; level {} -> {}",
            corral_learn::levels::subject(&c.principal),
            hint.old,
            hint.new
        ),
    );
    for sink in state.gateway().sinks() {
        if let Err(e) = sink.append(&event).await {
            tracing::error!(request_id = %rid, error = %e, "learning_hint: audit append failed");
        }
    }
    state.metrics().hint_taken(hint.new.get());
    Ok(json!({
        "scenario_id": scenario_id,
        "old_level": hint.old.get(),
        "level": hint.new.get(),
        "max_level": 3,
    }))
}

/// Keys a narrowed view keeps, when their value is a scalar: ids, op, agent, status, outcome,
/// codes and times (never arguments, outputs or model-written text).
const KEPT: &[&str] = &[
    "id",
    "op",
    "agent",
    "status",
    "outcome",
    "code",
    "ts_ms",
    "seq",
    "run_id",
    "request_id",
    "principal_id",
    "principal_kind",
    "tenant",
    "next",
    "scenario_id",
    "purpose",
    "created_at",
    "started_at",
    "finished_at",
];

/// Keys a narrowed view descends into (lists of runs, events, steps).
const CONTAINERS: &[&str] = &[
    "items",
    "events",
    "recording",
    "steps",
    "runs",
    "calls",
    "outputs",
    "results",
];

/// The narrowed view of `v`: objects keep only [`KEPT`] scalars and [`CONTAINERS`] (narrowed in
/// turn); arrays are narrowed item by item; a bare scalar at the top is dropped.
pub(crate) fn narrowed(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Array(items) => Value::Array(items.iter().map(narrowed).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(k, v)| {
                    let scalar = !(v.is_object() || v.is_array());
                    if KEPT.contains(&k.as_str()) && scalar {
                        Some((k.clone(), v.clone()))
                    } else if CONTAINERS.contains(&k.as_str()) && !scalar {
                        Some((k.clone(), narrowed(v)))
                    } else {
                        None
                    }
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// The largest answer body narrowed (a larger one is refused: it is never passed on whole).
const MAX_NARROWED_BYTES: usize = 64 << 20;

/// Learning mode's layer on `/audit` and `/v1/sandbox/*`: for a caller below level 3 (or one
/// that cannot be authenticated: fail closed), a successful JSON or JSON-lines answer is
/// narrowed to op, agent and status ([`narrowed`]).
pub(crate) async fn narrow(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    let covered = path == "/audit" || path.starts_with("/v1/sandbox/");
    let Some(l) = state.learning().cloned() else {
        return next.run(request).await;
    };
    if !covered {
        return next.run(request).await;
    }
    let narrows = match crate::auth::authenticate(&state.authenticator(), request.headers()) {
        Ok(caller) => l.narrows_for(&caller),
        Err(_) => true,
    };
    let response = next.run(request).await;
    if !narrows || !response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_NARROWED_BYTES).await else {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "the answer was too large to narrow for learning mode",
        )
            .into_response();
    };
    let text: String = if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        narrowed(&v).to_string()
    } else {
        // JSON lines (a recording's export): each line narrowed; a line that is not JSON is
        // dropped.
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| narrowed(&v).to_string() + "\n")
            .collect()
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(text))
}
