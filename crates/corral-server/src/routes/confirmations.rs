//! `GET /confirmations`, `POST /confirmations/{action_id}/decision`, and the guardrail headers
//! of an op call (`X-Corral-Run`, `X-Corral-Autonomy`, `X-Corral-Dry-Run`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use corral_guard::{CallOptions, valid_run_id};
use corral_policy::{AutonomyLevel, codes};
use serde_json::json;

use super::meta::authed;
use crate::AppState;
use crate::error::ApiError;

/// The run header.
pub const RUN_HEADER: &str = "x-corral-run";
/// The header that lowers the autonomy level (of the run, or of the call).
pub const AUTONOMY_HEADER: &str = "x-corral-autonomy";
/// The header that asks for dry-run (of the run, or of the call).
pub const DRY_RUN_HEADER: &str = "x-corral-dry-run";

/// Reads the guardrail headers of an op call; the message says which one is malformed.
pub fn call_options(headers: &HeaderMap) -> Result<CallOptions, String> {
    let text = |name: &str| -> Result<Option<&str>, String> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|s| Some(s.trim()))
                .map_err(|_| format!("`{name}` is not text")),
        }
    };
    let run_id = match text(RUN_HEADER)? {
        None => None,
        Some(id) if valid_run_id(id) => Some(id.to_owned()),
        Some(_) => {
            return Err(format!(
                "`{RUN_HEADER}` must be 1-128 characters of letters, digits, `_`, `-`, `.` and `:`"
            ));
        }
    };
    let autonomy = match text(AUTONOMY_HEADER)? {
        None => None,
        Some(l) => Some(
            AutonomyLevel::parse(l)
                .ok_or_else(|| format!("`{AUTONOMY_HEADER}` must be one of L0, L1, L2, L3, L4"))?,
        ),
    };
    let dry_run = match text(DRY_RUN_HEADER)? {
        None => false,
        Some("true" | "1") => true,
        Some("false" | "0") => false,
        Some(_) => return Err(format!("`{DRY_RUN_HEADER}` must be `true` or `false`")),
    };
    Ok(CallOptions {
        run_id,
        autonomy,
        dry_run,
    })
}

/// `GET /confirmations`: the caller's live actions (an admin's: the tenant's).
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let rid = super::request_id();
    let c = authed(&state, &headers, "GET /confirmations", &rid).await?;
    let actions = state
        .0
        .gateway
        .list_confirmations(&c, &rid)
        .await
        .map_err(|r| ApiError::from_refusal(&r, None, &rid))?;
    Ok(axum::Json(json!({"confirmations": actions})).into_response())
}

/// `POST /confirmations/{action_id}/decision` with `{"decision": "approve"|"deny"}`.
pub async fn decide(
    State(state): State<AppState>,
    Path(action_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    let c = authed(&state, &headers, "POST /confirmations", &rid).await?;
    let body: serde_json::Value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null)
    };
    let view = state
        .0
        .gateway
        .decide_confirmation(&c, &action_id, &body, &rid)
        .await
        .map_err(|r| ApiError::from_refusal(&r, None, &rid))?;
    let mut resp =
        axum::Json(json!({"ok": true, "request_id": rid, "action": view})).into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    Ok(resp)
}

/// The code of a malformed guardrail header (for the op route).
pub const INVALID_HEADER: &str = codes::RUN_INVALID_HEADER;
