//! `/v1/sandbox/*`: the lab over HTTP (issue 14 item 7), a thin surface over the runtime's
//! `corral_lab::service::LabService`, which checks the off switch and the caller's role, works
//! in the caller's tenant and writes the one audit event of each action. A body is read under
//! the server's limit first (413 before anything else), then the caller is authenticated.

use std::collections::HashMap;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use corral_guard::Caller;
use corral_lab::service::{
    CompareBody, InputBody, LabError, LabService, PageQuery, ReplayBody, ReplayStatus, RunBody,
    ScenarioBody, TournamentBody, parse,
};
use corral_lab::synthetic;
use corral_policy::codes;
use corral_store::lab::Paged;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::extract::{Authed, Sandbox};
use crate::AppState;
use crate::error::ApiError;

pub(super) fn err(e: LabError, rid: &str) -> ApiError {
    ApiError::new(e.code, e.message, None, rid)
}

pub(super) fn answer(status: StatusCode, body: Value, rid: &str) -> Response {
    let mut resp = (status, axum::Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

pub(super) fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn paged<T: Serialize>(p: &Paged<T>) -> Value {
    json!({"items": to_json(&p.items), "next": p.next.as_ref().map(ToString::to_string)})
}

/// A listing (`GET ...?limit=&after=` plus the query keys `extra`) -> `{items, next}`: enters
/// the route as `op`, reads the page, and answers the one `list` gives.
pub(super) async fn listed<T: Serialize>(
    state: &AppState,
    q: &HashMap<String, String>,
    auth: Authed<Sandbox>,
    op: &'static str,
    extra: &[&str],
    list: impl AsyncFnOnce(&LabService, &Caller, &str, &PageQuery) -> Result<Paged<T>, LabError>,
) -> Result<Response, ApiError> {
    let (caller, rid) = enter(state, auth, op).await?;
    let lab = state.runtime().lab();
    let page = match page_of(q, extra) {
        Ok(p) => p,
        Err(e) => return Err(err(lab.rejected(&caller, &rid, op, e).await, &rid)),
    };
    let p = list(lab, &caller, &rid, &page)
        .await
        .map_err(|e| err(e, &rid))?;
    Ok(answer(StatusCode::OK, paged(&p), &rid))
}

/// A read of one record (`GET .../{id}`) -> the record: enters the route as `op` and answers
/// what `get` gives.
pub(super) async fn fetched<T: Serialize>(
    state: &AppState,
    auth: Authed<Sandbox>,
    op: &'static str,
    get: impl AsyncFnOnce(&LabService, &Caller, &str) -> Result<T, LabError>,
) -> Result<Response, ApiError> {
    let (caller, rid) = enter(state, auth, op).await?;
    let v = get(state.runtime().lab(), &caller, &rid)
        .await
        .map_err(|e| err(e, &rid))?;
    Ok(answer(StatusCode::OK, to_json(&v), &rid))
}

/// Authenticates a GET (or a bodiless request) and refuses it when the lab is off.
pub(super) async fn enter(
    state: &AppState,
    auth: Authed<Sandbox>,
    op: &'static str,
) -> Result<(Caller, String), ApiError> {
    let Authed {
        caller, request_id, ..
    } = auth;
    let lab = state.runtime().lab();
    if let Err(e) = lab.check_enabled() {
        return Err(err(
            lab.rejected(&caller, &request_id, op, e).await,
            &request_id,
        ));
    }
    Ok((caller, request_id))
}

/// Reads a JSON body under the limit, authenticates, refuses when the lab is off, and parses
/// it as the route's body (`route` names it in a refusal).
pub(super) async fn enter_with_body<B: DeserializeOwned>(
    state: &AppState,
    request: Request,
    op: &'static str,
    route: &str,
) -> Result<(Caller, String, B), Response> {
    let rid = super::request_id();
    let (mut parts, body) = request.into_parts();
    let declared = crate::body::content_length(&parts.headers);
    let limit = state.max_body_bytes();
    let body = match crate::body::read(body, limit, declared).await {
        Ok(b) => b,
        Err(e) => return Err(e.response(limit, None, &rid)),
    };
    let caller = match Authed::<Sandbox>::authenticate(&mut parts, state, rid.clone()).await {
        Ok(a) => a.caller,
        Err(e) => return Err(e.into_response()),
    };
    let lab = state.runtime().lab();
    if let Err(e) = lab.check_enabled() {
        return Err(err(lab.rejected(&caller, &rid, op, e).await, &rid).into_response());
    }
    let value = match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => v,
        parsed => {
            let message = match parsed {
                _ if body.iter().all(u8::is_ascii_whitespace) => {
                    "the request has no body; send a JSON object (`{}` for no fields)".to_owned()
                }
                Err(e) => format!("the request body is not JSON: {e}; send a JSON object"),
                Ok(_) => "the request body is not a JSON object; send one".to_owned(),
            };
            let e = LabError {
                code: codes::ARGS_MALFORMED,
                message,
            };
            return Err(err(lab.rejected(&caller, &rid, op, e).await, &rid).into_response());
        }
    };
    match parse(route, value) {
        Ok(b) => Ok((caller, rid, b)),
        Err(e) => Err(err(lab.rejected(&caller, &rid, op, e).await, &rid).into_response()),
    }
}

/// A lab answer as the route's response.
pub(super) fn reply<T: Serialize>(
    status: StatusCode,
    r: Result<T, LabError>,
    rid: &str,
) -> Response {
    match r {
        Ok(v) => answer(status, to_json(&v), rid),
        Err(e) => err(e, rid).into_response(),
    }
}

/// Reads `limit` and `after` (and lists which other parameters the route takes).
fn page_of(q: &HashMap<String, String>, extra: &[&str]) -> Result<PageQuery, LabError> {
    let invalid = |m: String| LabError {
        code: codes::ARGS_INVALID,
        message: m,
    };
    if let Some(k) = q
        .keys()
        .find(|k| !["limit", "after"].contains(&k.as_str()) && !extra.contains(&k.as_str()))
    {
        return Err(LabError {
            code: codes::ARGS_UNKNOWN,
            message: format!(
                "`{}` is not a parameter of this listing; it takes `limit` and `after`{}",
                k.chars().take(64).collect::<String>(),
                extra.iter().map(|e| format!(", `{e}`")).collect::<String>()
            ),
        });
    }
    let limit = match q.get("limit") {
        None => 50,
        Some(l) => match l.parse::<u32>() {
            Ok(n) if (1..=corral_store::lab::MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(invalid(format!(
                    "`limit` must be a whole number from 1 to {}",
                    corral_store::lab::MAX_PAGE
                )));
            }
        },
    };
    Ok(PageQuery {
        limit,
        after: q.get("after").cloned(),
    })
}

/// `POST /v1/sandbox/synthetic-data` `{subject_kind?, count?, seed?}` -> `{samples}`.
pub async fn generate(State(state): State<AppState>, request: Request) -> Response {
    const OP: &str = "sandbox.generate";
    let (caller, rid, req): (_, _, synthetic::Request) =
        match enter_with_body(&state, request, OP, "POST /v1/sandbox/synthetic-data").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    reply(
        StatusCode::OK,
        lab.generate(&caller, &rid, &req).await,
        &rid,
    )
}

/// `POST /v1/sandbox/scenarios` -> 201 the scenario.
pub async fn create_scenario(State(state): State<AppState>, request: Request) -> Response {
    const OP: &str = "sandbox.scenarios.create";
    let (caller, rid, b): (_, _, ScenarioBody) =
        match enter_with_body(&state, request, OP, "POST /v1/sandbox/scenarios").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    reply(
        StatusCode::CREATED,
        lab.create_scenario(&caller, &rid, b).await,
        &rid,
    )
}

/// `PUT /v1/sandbox/scenarios/{id}` (the create body plus `version`) -> the scenario.
pub async fn update_scenario(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    const OP: &str = "sandbox.scenarios.update";
    let (caller, rid, b): (_, _, ScenarioBody) =
        match enter_with_body(&state, request, OP, "PUT /v1/sandbox/scenarios/{id}").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    reply(
        StatusCode::OK,
        lab.update_scenario(&caller, &rid, &id, b).await,
        &rid,
    )
}

/// `GET /v1/sandbox/scenarios?limit=&after=` -> `{items, next}`.
pub async fn list_scenarios(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    listed(
        &state,
        &q,
        auth,
        "sandbox.scenarios.list",
        &[],
        async |lab, caller, rid, page| lab.list_scenarios(caller, rid, page).await,
    )
    .await
}

/// `GET /v1/sandbox/scenarios/{id}`.
pub async fn get_scenario(
    State(state): State<AppState>,
    Path(id): Path<String>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    fetched(
        &state,
        auth,
        "sandbox.scenarios.get",
        async |lab, caller, rid| lab.get_scenario(caller, rid, &id).await,
    )
    .await
}

/// `POST /v1/sandbox/scenarios/{id}/runs` -> 201 the finished run.
pub async fn run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    const OP: &str = "sandbox.scenarios.run";
    let (caller, rid, b): (_, _, RunBody) =
        match enter_with_body(&state, request, OP, "POST /v1/sandbox/scenarios/{id}/runs").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    reply(
        StatusCode::CREATED,
        lab.run(&caller, &rid, &id, b).await,
        &rid,
    )
}

/// `GET /v1/sandbox/runs?scenario=&limit=&after=` -> `{items, next}`.
pub async fn list_runs(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    listed(
        &state,
        &q,
        auth,
        "sandbox.runs.list",
        &["scenario"],
        async |lab, caller, rid, page| {
            lab.list_runs(caller, rid, q.get("scenario").map(String::as_str), page)
                .await
        },
    )
    .await
}

/// `GET /v1/sandbox/runs/{id}`.
pub async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    fetched(
        &state,
        auth,
        "sandbox.runs.get",
        async |lab, caller, rid| lab.get_run(caller, rid, &id).await,
    )
    .await
}

/// `GET /v1/sandbox/runs/{id}/outputs` -> `{items}`.
pub async fn outputs(
    State(state): State<AppState>,
    Path(id): Path<String>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    let (caller, rid) = enter(&state, auth, "sandbox.runs.outputs").await?;
    let items = state
        .runtime()
        .lab()
        .outputs(&caller, &rid, &id)
        .await
        .map_err(|e| err(e, &rid))?;
    Ok(answer(
        StatusCode::OK,
        json!({"items": to_json(&items)}),
        &rid,
    ))
}

/// `POST /v1/sandbox/comparisons` -> 201 the comparison.
pub async fn compare(State(state): State<AppState>, request: Request) -> Response {
    const OP: &str = "sandbox.compare";
    let (caller, rid, b): (_, _, CompareBody) =
        match enter_with_body(&state, request, OP, "POST /v1/sandbox/comparisons").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    reply(
        StatusCode::CREATED,
        lab.compare(&caller, &rid, b).await,
        &rid,
    )
}

/// `POST /v1/sandbox/tournaments` -> 201 the graded tournament, stored.
pub async fn tournament(State(state): State<AppState>, request: Request) -> Response {
    const OP: &str = "sandbox.tournament";
    let (caller, rid, b): (_, _, TournamentBody) =
        match enter_with_body(&state, request, OP, "POST /v1/sandbox/tournaments").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    // The ceiling of judge calls: the config's `budgets.judge.max_calls`.
    reply(
        StatusCode::CREATED,
        lab.tournament(&caller, &rid, b, lab.max_judge_calls())
            .await,
        &rid,
    )
}

/// `GET /v1/sandbox/tournaments/{id}`.
pub async fn get_tournament(
    State(state): State<AppState>,
    Path(id): Path<String>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    fetched(
        &state,
        auth,
        "sandbox.tournaments.get",
        async |lab, caller, rid| lab.get_tournament(caller, rid, &id).await,
    )
    .await
}

/// `GET /v1/sandbox/tournaments?limit=&after=` -> `{items, next}`.
pub async fn list_tournaments(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    listed(
        &state,
        &q,
        auth,
        "sandbox.tournaments.list",
        &[],
        async |lab, caller, rid, page| lab.list_tournaments(caller, rid, page).await,
    )
    .await
}

/// `GET /v1/sandbox/metering` -> the tenant's runs and calls per purpose (admin).
pub async fn metering(
    State(state): State<AppState>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    fetched(
        &state,
        auth,
        "sandbox.metering.get",
        async |lab, caller, rid| lab.metering(caller, rid).await,
    )
    .await
}

/// `GET /v1/sandbox/comparisons?limit=&after=` -> `{items, next}`.
pub async fn list_comparisons(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    listed(
        &state,
        &q,
        auth,
        "sandbox.comparisons.list",
        &[],
        async |lab, caller, rid, page| lab.list_comparisons(caller, rid, page).await,
    )
    .await
}

/// `GET /v1/sandbox/comparisons/{id}`.
pub async fn get_comparison(
    State(state): State<AppState>,
    Path(id): Path<String>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    fetched(
        &state,
        auth,
        "sandbox.comparisons.get",
        async |lab, caller, rid| lab.get_comparison(caller, rid, &id).await,
    )
    .await
}

/// `GET /v1/sandbox/recordings?limit=&after=` -> `{items, next}`: every recording of the tenant
/// for an admin, the caller's own runs for anyone else.
pub async fn list_recordings(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    listed(
        &state,
        &q,
        auth,
        "sandbox.recordings.list",
        &[],
        async |lab, caller, rid, page| lab.list_recordings(caller, rid, page).await,
    )
    .await
}

/// `GET /v1/sandbox/recordings/{id}?principal=` -> `{recording, events}` (admin, or the run's
/// principal; `principal` names one when several recorded under the run id).
pub async fn get_recording(
    State(state): State<AppState>,
    Path(run): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    let (caller, rid) = enter(&state, auth, "sandbox.recordings.get").await?;
    let r = state
        .runtime()
        .lab()
        .get_recording(&caller, &rid, &run, q.get("principal").map(String::as_str))
        .await
        .map_err(|e| err(e, &rid))?;
    Ok(answer(StatusCode::OK, to_json(&r), &rid))
}

/// `DELETE /v1/sandbox/recordings/{id}?principal=` -> the deleted recording (admin; `principal`
/// names one when several recorded under the run id).
pub async fn delete_recording(
    State(state): State<AppState>,
    Path(run): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    let (caller, rid) = enter(&state, auth, "sandbox.recordings.delete").await?;
    let r = state
        .runtime()
        .lab()
        .delete_recording(&caller, &rid, &run, q.get("principal").map(String::as_str))
        .await
        .map_err(|e| err(e, &rid))?;
    Ok(answer(StatusCode::OK, to_json(&r), &rid))
}

/// `GET /v1/sandbox/recordings/{id}/export?principal=` -> JSON lines (`application/x-ndjson`):
/// the recording, then its events by `seq` (admin, or the run's principal).
pub async fn export_recording(
    State(state): State<AppState>,
    Path(run): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    auth: Authed<Sandbox>,
) -> Result<Response, ApiError> {
    let (caller, rid) = enter(&state, auth, "sandbox.recordings.export").await?;
    let lines = state
        .runtime()
        .lab()
        .export_recording(&caller, &rid, &run, q.get("principal").map(String::as_str))
        .await
        .map_err(|e| err(e, &rid))?;
    let mut resp = (StatusCode::OK, lines).into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    Ok(resp)
}

/// `PUT /v1/sandbox/recordings/{id}/input` `{steps: [{input, expected?}]}` -> the recording: a
/// live session's task input, set once (the run's own principal; an admin for one that exists).
pub async fn set_recording_input(
    State(state): State<AppState>,
    Path(run): Path<String>,
    request: Request,
) -> Response {
    const OP: &str = "sandbox.recordings.input";
    let (caller, rid, b): (_, _, InputBody) =
        match enter_with_body(&state, request, OP, "PUT /v1/sandbox/recordings/{id}/input").await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let lab = state.runtime().lab();
    reply(
        StatusCode::OK,
        lab.set_recording_input(&caller, &rid, &run, b).await,
        &rid,
    )
}

/// `POST /v1/sandbox/recordings/{id}/replay` `{variant?, workflow?, program?, seed?}` -> the
/// replay report: 201 with its run, or 200 `degraded` with zero steps and no run.
pub async fn replay(
    State(state): State<AppState>,
    Path(run): Path<String>,
    request: Request,
) -> Response {
    const OP: &str = "sandbox.replay";
    let (caller, rid, b): (_, _, ReplayBody) = match enter_with_body(
        &state,
        request,
        OP,
        "POST /v1/sandbox/recordings/{id}/replay",
    )
    .await
    {
        Ok(x) => x,
        Err(r) => return r,
    };
    let lab = state.runtime().lab();
    let r = lab.replay(&caller, &rid, &run, b).await;
    let status = match &r {
        Ok(x) if x.status == ReplayStatus::Degraded => StatusCode::OK,
        _ => StatusCode::CREATED,
    };
    reply(status, r, &rid)
}
