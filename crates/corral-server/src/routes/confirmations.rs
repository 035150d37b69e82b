//! `GET /confirmations` (paged), `POST /confirmations/{action_id}/decision`, and the guardrail headers
//! of an op call (`X-Corral-Run`, `X-Corral-Autonomy`, `X-Corral-Dry-Run`).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use corral_guard::confirm::Cursor;
use corral_guard::{CallOptions, LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT, valid_run_id};
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

/// `GET /confirmations?limit=N&after=CURSOR`: a page of the caller's live actions (an admin's:
/// the tenant's), newest first, and the cursor of the next page (`next`, `null` on the last).
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    let c = authed(&state, &headers, "GET /confirmations", &rid).await?;
    if let Some(unknown) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "limit" | "after"))
    {
        return Err(ApiError::new(
            codes::ARGS_UNKNOWN,
            format!(
                "`{}` is not a parameter of GET /confirmations; it takes `limit` and `after`",
                unknown.chars().take(64).collect::<String>()
            ),
            None,
            &rid,
        ));
    }
    let invalid = |message: String| ApiError::new(codes::ARGS_INVALID, message, None, &rid);
    let limit = match query.get("limit") {
        None => LIST_DEFAULT_LIMIT,
        Some(l) => match l.parse::<u32>() {
            Ok(n) if (1..=LIST_MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(invalid(format!(
                    "`limit` must be a whole number from 1 to {LIST_MAX_LIMIT}, not {:?}",
                    l.chars().take(64).collect::<String>()
                )));
            }
        },
    };
    let after = match query.get("after") {
        None => None,
        Some(a) => Some(Cursor::parse(a).ok_or_else(|| {
            invalid(
                "`after` is not a cursor of this listing; pass the `next` of the previous page as it is, or drop `after` for the first page"
                    .to_owned(),
            )
        })?),
    };
    let page = state
        .0
        .gateway
        .list_confirmations(&c, &rid, after.as_ref(), limit)
        .await
        .map_err(|r| ApiError::from_refusal(&r, None, &rid))?;
    Ok(axum::Json(json!({"confirmations": page.confirmations, "next": page.next})).into_response())
}

/// `POST /confirmations/{action_id}/decision` with `{"decision": "approve"|"deny"}`.
pub async fn decide(
    State(state): State<AppState>,
    Path(action_id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    // Read under the limit before anything else, so an oversized body is drained and
    // answered 413 rather than reset while the client is still sending it.
    let declared = crate::body::content_length(&headers);
    let body = match crate::body::read(body, state.0.max_body_bytes, declared).await {
        Ok(b) => b,
        Err(e) => return Ok(e.response(state.0.max_body_bytes, None, &rid)),
    };
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
