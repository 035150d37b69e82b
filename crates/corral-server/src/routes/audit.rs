//! `GET /audit`: the most recent audit events of the caller's tenant, newest first, for a
//! principal with role `admin`. The events hold argument hashes and shapes, never values.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use corral_policy::{Role, codes};
use serde_json::json;

use super::meta::authed;
use crate::AppState;
use crate::error::ApiError;

/// Events answered when `limit` is not given.
const DEFAULT_LIMIT: u32 = 50;
/// The most events one request may ask for.
const MAX_LIMIT: u32 = 1000;

/// `GET /audit?limit=N`.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let rid = super::request_id();
    let c = authed(&state, &headers, "GET /audit", &rid).await?;
    if Role::highest_of(&c.principal.roles) != Some(Role::Admin) {
        return Err(ApiError::new(
            403,
            codes::AUDIT_NOT_PERMITTED,
            format!(
                "reading the audit log needs role admin; `{}` has {}",
                c.principal.id,
                if c.principal.roles.is_empty() {
                    "no role".to_owned()
                } else {
                    format!("roles {}", c.principal.roles.join(", "))
                }
            ),
            None,
            &rid,
        ));
    }
    if let Some(unknown) = query.keys().find(|k| k.as_str() != "limit") {
        return Err(ApiError::new(
            400,
            codes::ARGS_UNKNOWN,
            format!("`{unknown}` is not a parameter of GET /audit; it takes `limit`"),
            None,
            &rid,
        ));
    }
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => match l.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::new(
                    400,
                    codes::ARGS_INVALID,
                    format!("`limit` must be a whole number from 1 to {MAX_LIMIT}, not {l:?}"),
                    None,
                    &rid,
                ));
            }
        },
    };
    let tenant = c
        .principal
        .tenant
        .clone()
        .unwrap_or_else(|| state.0.gateway.tenant().to_owned());
    let events = state
        .0
        .store
        .audit_recent(Some(&tenant), limit)
        .await
        .map_err(|e| ApiError::new(503, e.code(), e.to_string(), None, &rid))?;
    Ok(axum::Json(json!({"tenant": tenant, "events": events})).into_response())
}
