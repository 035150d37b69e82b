//! `GET /confirmations` (paged) and `POST /confirmations/{action_id}/decision`.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::response::{IntoResponse, Response};
use corral_guard::confirm::Cursor;
use corral_guard::{LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT};
use corral_policy::codes;
use serde_json::json;

use super::extract::{Authed, Decision, ListConfirmations};
use crate::AppState;
use crate::error::ApiError;

/// `GET /confirmations?limit=N&after=CURSOR`: a page of the caller's live actions (an admin's:
/// the tenant's), newest first, and the cursor of the next page (`next`, `null` on the last).
pub async fn list(
    State(state): State<AppState>,
    // Authenticated before the query is read.
    Authed {
        caller: c,
        request_id: rid,
        ..
    }: Authed<ListConfirmations>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
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
    let after = match query.get("after").filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => Some(Cursor::parse(a).ok_or_else(|| {
            invalid(
                "`after` is not a cursor of this listing; pass the `next` of the previous page as it is, or drop `after` for the first page"
                    .to_owned(),
            )
        })?),
    };
    let page = state
        .gateway()
        .list_confirmations(&c, &rid, after.as_ref(), limit)
        .await
        .map_err(|r| ApiError::from_refusal(&r, None, &rid))?;
    Ok(axum::Json(json!({"confirmations": page.confirmations, "next": page.next})).into_response())
}

/// `POST /confirmations/{action_id}/decision` with `{"decision": "approve"|"deny"}`.
pub async fn decide(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    let (mut parts, body) = request.into_parts();
    // Read under the limit before anything else, so an oversized body is drained and
    // answered 413 rather than reset while the client is still sending it.
    let declared = crate::body::content_length(&parts.headers);
    let limit = state.max_body_bytes();
    let body = match crate::body::read(body, limit, declared).await {
        Ok(b) => b,
        Err(e) => return Ok(e.response(limit, None, &rid)),
    };
    let c = Authed::<Decision>::authenticate(&mut parts, &state, rid.clone())
        .await?
        .caller;
    // Decoded only once the caller is known: an unauthenticated request is answered 401 (and
    // audited) whatever its path holds; an id that is not UTF-8 names no action.
    let Ok(Path(action_id)) = Path::<String>::from_request_parts(&mut parts, &state).await else {
        return Err(ApiError::new(
            codes::CONFIRMATION_NOT_FOUND,
            "the action id in the path is not UTF-8 text, so it names no action; list yours with `GET /confirmations`",
            None,
            &rid,
        ));
    };
    let body: serde_json::Value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null)
    };
    let view = state
        .gateway()
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
