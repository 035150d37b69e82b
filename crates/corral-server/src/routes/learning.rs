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
    let Some(l) = state.learning() else {
        return Err(ApiError::new(
            corral_policy::codes::ROUTE_NOT_FOUND,
            "no such route; learning mode is off",
            None,
            &rid,
        ));
    };
    let (scenario_id, default) = l.scenario();
    let hint = l
        .levels()
        .hint(&c.principal, &scenario_id, default)
        .map_err(|refusal| {
            let mut e = ApiError::new(refusal.code(), refusal.to_string(), None, &rid);
            if let HintRefusal::RateLimited { retry_after } = refusal {
                e.retry_after_secs = Some(retry_after.as_secs().max(1));
            }
            e
        })?;
    let event = crate::learning::audit_event(
        &c,
        state.gateway().tenant(),
        &rid,
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
    Ok(axum::Json(json!({
        "scenario_id": scenario_id,
        "old_level": hint.old.get(),
        "level": hint.new.get(),
        "max_level": 3,
    }))
    .into_response())
}
