//! `GET /audit`: the most recent audit events of the caller's tenant, newest first, optionally
//! only one run's, op's, principal's or purpose's (`live` calls or a lab's `simulation` ones),
//! for a principal with role `admin`, a page at a time (`next`, the cursor of the following
//! page, passed back as `after`). The events hold argument hashes and shapes, never values.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use corral_guard::runs::RunPurpose;
use corral_policy::{Role, codes, valid_run_id};
use corral_store::{AuditCursor, AuditFilter};
use serde_json::json;

use super::extract::{Audit, Authed};
use crate::AppState;
use crate::error::ApiError;

/// Events answered when `limit` is not given.
const DEFAULT_LIMIT: u32 = 50;
/// The most events one request may ask for.
const MAX_LIMIT: u32 = 1000;
/// The longest value of a filter (`op`, `principal`), in bytes.
const MAX_FILTER: usize = 256;

/// `GET /audit?limit=N&run=R&op=OP&principal=ID&purpose=P&after=CURSOR` (every filter
/// optional): `{tenant, events, next}`, `next` being `null` on the last page.
pub async fn list(
    State(state): State<AppState>,
    // Authenticated before the query is read.
    Authed {
        caller: c,
        request_id: rid,
        ..
    }: Authed<Audit>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    if Role::highest_of(&c.principal.roles) != Some(Role::Admin) {
        return Err(ApiError::new(
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
    let params = ["limit", "run", "op", "principal", "purpose", "after"];
    if let Some(unknown) = query.keys().find(|k| !params.contains(&k.as_str())) {
        return Err(ApiError::new(
            codes::ARGS_UNKNOWN,
            format!(
                "`{unknown}` is not a parameter of GET /audit; it takes `limit`, `run`, `op`, `principal`, `purpose` and `after`"
            ),
            None,
            &rid,
        ));
    }
    let invalid = |message: String| ApiError::new(codes::ARGS_INVALID, message, None, &rid);
    // A filter's value, if given; the message says what is wrong with it.
    let text = |name: &str| -> Result<Option<String>, String> {
        match query.get(name) {
            None => Ok(None),
            Some(v)
                if !v.is_empty()
                    && v.chars().count() <= MAX_FILTER
                    && !v.chars().any(char::is_control) =>
            {
                Ok(Some(v.clone()))
            }
            Some(_) => Err(format!(
                "`{name}` must be 1 to {MAX_FILTER} characters with no control characters"
            )),
        }
    };
    let filter = AuditFilter {
        run_id: text("run").map_err(invalid)?,
        op: text("op").map_err(invalid)?,
        principal_id: text("principal").map_err(invalid)?,
        purpose: match query.get("purpose") {
            None => None,
            Some(p) => Some(RunPurpose::parse(p).ok_or_else(|| {
                let allowed: Vec<&str> = RunPurpose::ALL.iter().map(|p| p.as_str()).collect();
                invalid(format!(
                    "`purpose` must be one of {} (`live`: calls that act on the world; \
                     `simulation`: a lab run's calls against its mocks), not {:?}",
                    allowed.join(", "),
                    p.chars().take(64).collect::<String>()
                ))
            })?),
        },
    };
    if let Some(run) = &filter.run_id
        && !valid_run_id(run)
    {
        return Err(invalid(
            "`run` must be 1-128 characters of letters, digits, `_`, `-`, `.` and `:`".to_owned(),
        ));
    }
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => match l.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(invalid(format!(
                    "`limit` must be a whole number from 1 to {MAX_LIMIT}, not {l:?}"
                )));
            }
        },
    };
    let after = match query.get("after").filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => Some(AuditCursor::parse(a).ok_or_else(|| invalid(BAD_CURSOR.to_owned()))?),
    };
    let tenant = c
        .principal
        .tenant
        .clone()
        .unwrap_or_else(|| state.gateway().tenant().to_owned());
    let (events, next) = page(&state, &tenant, &filter, after.as_ref(), limit)
        .await
        .map_err(|e| ApiError::new(e.code(), e.to_string(), None, &rid))?;
    Ok(axum::Json(json!({"tenant": tenant, "events": events, "next": next})).into_response())
}

/// What a bad `after` gets.
pub(crate) const BAD_CURSOR: &str = "`after` is not a cursor of this listing; pass the `next` of the previous page as it is, or drop `after` for the first page";

/// Up to `limit` of the tenant's events `filter` matches, newest first from `after`, and the
/// cursor of the next page (`None` on the last). Also the console's audit page.
pub(crate) async fn page(
    state: &AppState,
    tenant: &str,
    filter: &AuditFilter,
    after: Option<&AuditCursor>,
    limit: u32,
) -> Result<(Vec<corral_guard::audit::AuditEvent>, Option<String>), corral_store::StoreError> {
    // One more than the page, to know whether there is a next one.
    let mut events = state
        .store()
        .audit_page(Some(tenant), filter, after, limit.saturating_add(1))
        .await?;
    let more = events.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    events.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next = more
        .then(|| events.last().map(|e| AuditCursor::after(e).to_string()))
        .flatten();
    Ok((events, next))
}
