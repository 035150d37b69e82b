//! `/v1/agents/*` (also under `/agents/{adapter}`): the agents host over HTTP, in the wire
//! format of the official `openai` SDK's `client.beta.agents` (saved agents, sessions, their
//! input events and their event stream). A session create and each input event are op calls
//! through the gateway (`agents.<a>.sessions.create`, whose engine also requires the generic
//! gate `agents.sessions.create`; `agents.<a>.sessions.send_event`): decided, audited,
//! metered like every call; the runtime's `AgentHost` runs the turns. Reads are the owner's
//! only: another principal's session or agent is `404 agents.not_found`, as one that does not
//! exist. The adapter is chosen in the six-case order (`corral_agents::select`).

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use corral_agents::select::{AdapterAsk, Mounted, environment_workdir, select};
use corral_guard::{Call, Caller, Reply};
use corral_policy::codes;
use corral_runtime::agents::session_json;
use corral_store::agents::{AgentStoreError, NewAgentDef, Session as StoredSession};
use corral_store::lab::Page;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::extract::{Agents, Authed};
use super::sandbox::answer;
use crate::AppState;
use crate::error::{ApiError, REPLAYED_HEADER};

/// The header naming the adapter (the second case of the selection order).
pub const ADAPTER_HEADER: &str = "x-corral-adapter";
/// How often the event stream looks for new events, and sends a keep-alive comment.
const POLL: Duration = Duration::from_millis(200);
const KEEPALIVE: Duration = Duration::from_secs(15);
/// The longest one event stream stays open.
const STREAM_MAX: Duration = Duration::from_secs(3600);

fn invalid(message: impl Into<String>, rid: &str) -> ApiError {
    ApiError::new(codes::AGENTS_INVALID, message, None, rid)
}

fn not_found(what: &str, id: &str, rid: &str) -> ApiError {
    ApiError::new(
        codes::AGENTS_NOT_FOUND,
        format!("no {what} `{id}` of yours; list yours to find its id"),
        None,
        rid,
    )
}

fn store_error(e: &AgentStoreError, rid: &str) -> ApiError {
    ApiError::new(e.code(), e.to_string(), None, rid)
}

/// The caller's tenant, as the gateway picks it.
fn tenant(state: &AppState, caller: &Caller) -> String {
    state.runtime().agents().tenant_of(&caller.principal)
}

/// The body as a JSON object (required: an empty one is `400 args.malformed`), under the
/// server's size limit.
async fn json_body(state: &AppState, request: Request, rid: &str) -> Result<Value, ApiError> {
    let declared = crate::body::content_length(request.headers());
    let limit = state.max_body_bytes();
    let body = crate::body::read(request.into_body(), limit, declared)
        .await
        .map_err(|e| {
            let (status, code) = e.status_code();
            ApiError::new(
                code,
                format!("the body was not read (over {limit} bytes, or cut)"),
                None,
                rid,
            )
            .with_status(status)
        })?;
    match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ if body.iter().all(u8::is_ascii_whitespace) => Err(ApiError::new(
            codes::ARGS_MALFORMED,
            "the request has no body; send a JSON object (`{}` for no fields)",
            None,
            rid,
        )),
        Ok(_) => Err(invalid("the body must be a JSON object", rid)),
        Err(e) => Err(ApiError::new(
            codes::ARGS_MALFORMED,
            format!("the body is not valid JSON: {e}"),
            None,
            rid,
        )),
    }
}

/// Calls op `op` with `args` as the caller, through the gateway: the handler's JSON, or the
/// refusal as the wire error.
/// Calls `op` through the guard chain: its result, and whether it is an approved call's stored
/// outcome (it did not run again: the caller marks the answer so).
async fn call_op(
    auth: &Authed<Agents>,
    op: String,
    args: Value,
) -> Result<(Value, bool), ApiError> {
    let rid = &auth.request_id;
    let opts = auth
        .options
        .clone()
        .map_err(|m| ApiError::new(super::extract::INVALID_HEADER, m, Some(&op), rid))?;
    let (reply, outcome) = auth
        .gateway
        .call_traced(
            Call {
                caller: auth.caller.clone(),
                op: op.clone(),
                args,
                request_id: rid.clone(),
            },
            opts,
        )
        .await;
    let replayed = outcome == corral_guard::audit::Outcome::Replayed;
    match reply {
        Reply::Json(v) => Ok((v, replayed)),
        Reply::Refused(r) => {
            let e = ApiError::from_refusal(&r, Some(&op), rid);
            Err(if replayed { e.replayed() } else { e })
        }
        Reply::Stream(_) => Err(ApiError::new(
            codes::SERVER_INTERNAL,
            "an agents op answered a byte stream",
            Some(&op),
            rid,
        )),
    }
}

fn secs(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

/// corral's usage (`{input_tokens, cached_input_tokens, output_tokens}`) as the SDK's
/// `TokenUsage`; `null` when none.
fn token_usage(u: &Value) -> Value {
    if !u.is_object() {
        return Value::Null;
    }
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    json!({
        "input_tokens": n("input_tokens"),
        "input_tokens_details": {"cached_tokens": n("cached_input_tokens")},
        "output_tokens": n("output_tokens"),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": n("input_tokens") + n("output_tokens"),
    })
}

/// A stored session as the SDK's `AgentSession` (corral's own fields under `corral`).
fn session_obj(s: &Value) -> Value {
    let status = match s["status"].as_str() {
        Some("in_progress") => "in_progress",
        Some("failed") => "failed",
        _ => "idle",
    };
    json!({
        "id": s["id"],
        "object": "agent.session",
        "agent": {
            "id": s["agent_id"].as_str().map_or_else(|| format!("adapter:{}", s["adapter"].as_str().unwrap_or_default()), str::to_owned),
            "model": s["model"],
            "name": null,
            "instructions": null,
            "tools": [],
        },
        "created_at": secs(s["created_ms"].as_i64().unwrap_or(0)),
        "last_active_at": secs(s["last_active_ms"].as_i64().unwrap_or(0)),
        "environment": {"type": "self_hosted", "workspace_directory": s["workdir"]},
        "status": status,
        "error": s["error"]["message"],
        "metadata": s["metadata"],
        "required_actions": [],
        "usage": token_usage(&s["usage"]),
        "vault_ids": [],
        "corral": {
            "adapter": s["adapter"],
            "turns": s["turns"],
            "events": s["events"],
            "error_code": s["error"]["code"],
            "attestation": s["attestation"],
        },
    })
}

fn agent_obj(d: &corral_store::agents::AgentDef) -> Value {
    json!({
        "id": d.id,
        "object": "agent",
        "model": d.model,
        "name": d.name,
        "instructions": d.instructions,
        "metadata": d.metadata,
        "created_at": secs(d.created_ms),
        "tools": [],
    })
}

/// The caller's own stored session `id`.
async fn own_session(
    state: &AppState,
    caller: &Caller,
    id: &str,
    rid: &str,
) -> Result<StoredSession, ApiError> {
    state
        .runtime()
        .store()
        .get_session(&tenant(state, caller), id)
        .await
        .map_err(|e| store_error(&e, rid))?
        .filter(|s| s.owner == caller.principal.identity())
        .ok_or_else(|| not_found("session", id, rid))
}

/// The most items of a page of agents or sessions.
pub(crate) const MAX_PAGE: u32 = 100;

/// The page a listing's query asks for (`limit`, `after`), or what is wrong with it.
fn page_of(q: &HashMap<String, String>) -> Result<Page, &'static str> {
    let limit = match q.get("limit") {
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or("`limit` must be a whole number from 1 to 100")?,
        None => 20,
    };
    let after = match q.get("after").filter(|a| !a.is_empty()) {
        Some(a) => Some(
            a.parse()
                .map_err(|_| "`after` must be the `next` cursor of a previous page")?,
        ),
        None => None,
    };
    Ok(Page { limit, after })
}

fn list_obj(data: Vec<Value>, next: Option<String>) -> Value {
    let first = data
        .first()
        .and_then(|v| v["id"].as_str())
        .map(str::to_owned);
    let last = data
        .last()
        .and_then(|v| v["id"].as_str())
        .map(str::to_owned);
    json!({
        "object": "list",
        "data": data,
        "first_id": first,
        "last_id": last,
        "has_more": next.is_some(),
        "next": next,
    })
}

/// `POST /v1/agents`: saves an agent (`model`, `name`, `instructions`, `metadata`) for its
/// owner. `lab_coach` is reserved (learning mode's coach) and refused as a name.
pub async fn create_agent(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    request: Request,
) -> Result<Response, ApiError> {
    let rid = auth.request_id.clone();
    let body = json_body(&state, request, &rid).await?;
    // An optional text field: absent or `null` is none; another type is refused.
    let text = |k: &str| -> Result<Option<String>, String> {
        match body.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("`{k}` must be a string")),
        }
    };
    let Some(model) = text("model")
        .map_err(|m| invalid(m, &rid))?
        .filter(|m| corral_lab::service::is_label(m))
    else {
        return Err(invalid(
            "`model` is required: a real model name, or an adapter's name (`codex`, `claude_code`); 1 to 200 characters, no control character",
            &rid,
        ));
    };
    let name = text("name").map_err(|m| invalid(m, &rid))?;
    if name
        .as_deref()
        .is_some_and(|n| n.trim_matches(' ') == "lab_coach")
    {
        return Err(invalid(
            "the agent name `lab_coach` is reserved for learning mode's coach; pick another name",
            &rid,
        ));
    }
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => Default::default(),
        Some(Value::Object(m)) if m.len() <= 16 => m
            .iter()
            .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid("`metadata` values must be strings", &rid))?,
        Some(_) => {
            return Err(invalid(
                "`metadata` must be an object of at most 16 strings",
                &rid,
            ));
        }
    };
    let new = NewAgentDef {
        owner: auth.caller.principal.identity(),
        model,
        name,
        instructions: text("instructions").map_err(|m| invalid(m, &rid))?,
        metadata,
    };
    let def = state
        .runtime()
        .store()
        .create_agent_def(
            &tenant(&state, &auth.caller),
            &new,
            corral_runtime::agents::MAX_AGENTS_PER_OWNER,
            corral_guard::now_ms(),
        )
        .await
        .map_err(|e| store_error(&e, &rid))?;
    audited(&state, &auth.caller, &rid, "agents.create", &def.id).await?;
    Ok(answer(StatusCode::OK, agent_obj(&def), &rid))
}

/// Writes the audit event of a change the agents routes made outside the guard chain (saving or
/// deleting an agent, deleting a session): who, what and which record, no values, committed
/// before the answer, as every call's is; when the audit cannot take it, `503
/// server.audit_unavailable` (the change is made: the message says so).
async fn audited(
    state: &AppState,
    caller: &Caller,
    rid: &str,
    op: &str,
    id: &str,
) -> Result<(), ApiError> {
    let event = crate::learning::audit_event(
        caller,
        state.gateway().tenant(),
        rid,
        op,
        format!("id {id}"),
    );
    // `Gateway::record` logs a sink's failure and makes the first one's the call's.
    state.gateway().record(&event).await.map_err(|_| {
        ApiError::new(
            codes::SERVER_AUDIT_UNAVAILABLE,
            format!(
                "`{op}` of {id} was done, but its audit event could not be written; the server log has the request id"
            ),
            None,
            rid,
        )
    })
}

/// A page of the caller's own records (`?limit=&after=`), listed by `list` (the owner filter
/// in its query) and shaped by `shape`, as the SDK's list object.
async fn own_page<T>(
    state: &AppState,
    auth: &Authed<Agents>,
    q: &HashMap<String, String>,
    list: impl AsyncFnOnce(
        &corral_store::Store,
        &str,
        &str,
        &Page,
    ) -> Result<corral_store::lab::Paged<T>, AgentStoreError>,
    shape: impl Fn(&T) -> Value,
) -> Result<Response, ApiError> {
    let rid = &auth.request_id;
    let page = page_of(q).map_err(|m| invalid(m, rid))?;
    let p = list(
        state.runtime().store(),
        &tenant(state, &auth.caller),
        &auth.caller.principal.identity(),
        &page,
    )
    .await
    .map_err(|e| store_error(&e, rid))?;
    let data = p.items.iter().map(shape).collect();
    Ok(answer(
        StatusCode::OK,
        list_obj(data, p.next.map(|n| n.to_string())),
        rid,
    ))
}

/// `GET /v1/agents`: the caller's saved agents.
pub async fn list_agents(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    own_page(
        &state,
        &auth,
        &q,
        async |store, tenant, owner, page| store.list_agent_defs(tenant, Some(owner), page).await,
        agent_obj,
    )
    .await
}

/// `GET /v1/agents/{id}` and `DELETE` it: the caller's own only.
pub async fn agent(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    Path(params): Path<HashMap<String, String>>,
    method: axum::http::Method,
) -> Result<Response, ApiError> {
    let rid = auth.request_id.clone();
    let id = params.get("id").cloned().unwrap_or_default();
    let store = state.runtime().store();
    let t = tenant(&state, &auth.caller);
    let def = store
        .get_agent_def(&t, &id)
        .await
        .map_err(|e| store_error(&e, &rid))?
        .filter(|d| d.owner == auth.caller.principal.identity())
        .ok_or_else(|| not_found("agent", &id, &rid))?;
    if method == axum::http::Method::DELETE {
        store
            .delete_agent_def(&t, &id)
            .await
            .map_err(|e| store_error(&e, &rid))?;
        audited(&state, &auth.caller, &rid, "agents.delete", &def.id).await?;
        return Ok(answer(
            StatusCode::OK,
            json!({"id": def.id, "object": "agent.deleted", "deleted": true}),
            &rid,
        ));
    }
    Ok(answer(StatusCode::OK, agent_obj(&def), &rid))
}

/// The text of the SDK's `input`: a string, or messages whose `input_text` parts are joined.
fn input_text(input: &Value) -> Option<String> {
    match input {
        Value::String(s) => Some(s.clone()),
        Value::Array(messages) => {
            let mut parts = Vec::new();
            for m in messages {
                match &m["content"] {
                    Value::String(s) => parts.push(s.clone()),
                    Value::Array(c) => parts.extend(
                        c.iter()
                            .filter_map(|p| p["text"].as_str().map(str::to_owned)),
                    ),
                    _ => {}
                }
            }
            (!parts.is_empty()).then(|| parts.join("\n"))
        }
        _ => None,
    }
}

/// `POST /v1/agents/sessions`: the op `agents.<a>.sessions.create` with the adapter chosen in
/// the order, the model, the workdir of `environment`, the first `input`.
pub async fn create_session(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    Path(params): Path<HashMap<String, String>>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let rid = auth.request_id.clone();
    let body = json_body(&state, request, &rid).await?;
    let host = state.runtime().agents();
    let mut model = body["agent"]["model"]
        .as_str()
        .or_else(|| body["model"].as_str())
        .map(str::to_owned);
    let agent_id = body["agent_id"].as_str().map(str::to_owned);
    if model.is_none()
        && let Some(id) = &agent_id
    {
        model = state
            .runtime()
            .store()
            .get_agent_def(&tenant(&state, &auth.caller), id)
            .await
            .ok()
            .flatten()
            .filter(|d| d.owner == auth.caller.principal.identity())
            .map(|d| d.model);
    }
    let (adapters, default) = host.mounted();
    let ask = AdapterAsk {
        path: params.get("adapter").map(String::as_str),
        header: headers.get(ADAPTER_HEADER).and_then(|h| h.to_str().ok()),
        model: model.as_deref(),
    };
    let mounted = Mounted {
        adapters: &adapters,
        default: default.as_deref(),
    };
    let selected =
        select(&ask, &mounted).map_err(|e| ApiError::new(e.code, e.message, None, &rid))?;
    let workdir = environment_workdir(body.get("environment"))
        .map_err(|e| ApiError::new(e.code, e.message, None, &rid))?;
    let mut args = serde_json::Map::new();
    if let Some(m) = selected.model {
        args.insert("model".into(), json!(m));
    }
    if let Some(w) = workdir {
        args.insert("workdir".into(), json!(w.to_string_lossy()));
    }
    if let Some(t) = body.get("input").and_then(input_text) {
        args.insert("task".into(), json!(t));
    }
    if let Some(a) = agent_id {
        args.insert("agent".into(), json!(a));
    }
    if let Some(m) = body.get("metadata").filter(|m| !m.is_null()) {
        args.insert("metadata".into(), m.clone());
    }
    let op = format!("agents.{}.sessions.create", selected.adapter.name());
    let (session, replayed) = call_op(&auth, op, Value::Object(args)).await?;
    let mut body = session_obj(&session);
    if replayed {
        body["replayed"] = json!(true);
    }
    let mut resp = answer(StatusCode::OK, body, &rid);
    if replayed {
        resp.headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `GET /v1/agents/sessions`: the caller's sessions, newest first.
pub async fn list_sessions(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    own_page(
        &state,
        &auth,
        &q,
        async |store, tenant, owner, page| store.list_sessions(tenant, Some(owner), page).await,
        |s| session_obj(&session_json(s)),
    )
    .await
}

/// `GET /v1/agents/sessions/{id}`, and `DELETE` it (refused while a turn runs): the
/// caller's own only.
pub async fn session(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    Path(params): Path<HashMap<String, String>>,
    method: axum::http::Method,
) -> Result<Response, ApiError> {
    let rid = auth.request_id.clone();
    let id = params.get("id").cloned().unwrap_or_default();
    let s = own_session(&state, &auth.caller, &id, &rid).await?;
    if method == axum::http::Method::DELETE {
        state
            .runtime()
            .agents()
            .delete_session(&tenant(&state, &auth.caller), &id)
            .await
            .map_err(|e| ApiError::new(e.code, e.message, None, &rid))?;
        audited(&state, &auth.caller, &rid, "agents.sessions.delete", &s.id).await?;
        return Ok(answer(
            StatusCode::OK,
            json!({"id": s.id, "object": "agent.session.deleted", "deleted": true}),
            &rid,
        ));
    }
    Ok(answer(StatusCode::OK, session_obj(&session_json(&s)), &rid))
}

/// `POST /v1/agents/sessions/{id}/events`: each input event as the op
/// `agents.<a>.sessions.send_event` (`agent.session.input.message` starts a turn;
/// `agent.session.input.cancel` ends the running one). `202`, no body.
pub async fn post_events(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    Path(params): Path<HashMap<String, String>>,
    request: Request,
) -> Result<Response, ApiError> {
    let rid = auth.request_id.clone();
    let id = params.get("id").cloned().unwrap_or_default();
    let body = json_body(&state, request, &rid).await?;
    let s = own_session(&state, &auth.caller, &id, &rid).await?;
    let Some(events) = body["events"]
        .as_array()
        .filter(|e| !e.is_empty() && e.len() <= 16)
    else {
        return Err(invalid(
            "`events` must list 1 to 16 events: `{\"type\": \"agent.session.input.message\", \"input\": [...]}` or `{\"type\": \"agent.session.input.cancel\"}`",
            &rid,
        ));
    };
    let op = format!("agents.{}.sessions.send_event", s.adapter);
    let mut replayed = false;
    for e in events {
        let event = match e["type"].as_str() {
            Some("agent.session.input.message") => {
                let text = input_text(&e["input"])
                    .or_else(|| e["text"].as_str().map(str::to_owned))
                    .ok_or_else(|| invalid("an `agent.session.input.message` needs `input`: a string or messages with `input_text` parts", &rid))?;
                json!({"type": "message", "text": text})
            }
            Some("agent.session.input.cancel") => json!({"type": "cancel"}),
            _ => {
                return Err(invalid(
                    "an input event's `type` is `agent.session.input.message` or `agent.session.input.cancel`",
                    &rid,
                ));
            }
        };
        let args = json!({"session": id, "event": event, "workdir": s.workdir, "model": s.model});
        replayed |= call_op(&auth, op.clone(), args).await?.1;
    }
    let mut resp = StatusCode::ACCEPTED.into_response();
    if replayed {
        resp.headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    Ok(resp)
}

/// One stored event as the SDK's `AgentSessionEvent` (`None`: an event the wire does not
/// carry). `turn` is the turn the events belong to, followed along the stream.
fn wire_event(
    seq: u64,
    kind: &str,
    body: &Value,
    session: &Value,
    turn: &mut u64,
) -> Option<Value> {
    let sid = session["id"].clone();
    let turn_obj = |t: u64, status: &str, usage: &Value, error: &Value| {
        json!({
            "id": format!("turn_{t}"), "object": "agent.session.turn", "agent_id": session["agent"]["id"],
            "session_id": sid, "created_at": session["last_active_at"], "status": status,
            "usage": token_usage(usage), "error": if error.is_null() { Value::Null } else { error.clone() },
        })
    };
    let item_id = format!("item_{seq}");
    let mut e = match kind {
        "created" => json!({"type": "agent.session.created", "session": session}),
        "turn_started" => {
            *turn = body["turn"].as_u64().unwrap_or(*turn + 1);
            json!({"type": "agent.session.turn.created", "turn": turn_obj(*turn, "in_progress", &Value::Null, &Value::Null)})
        }
        "model_turn" => {
            json!({"type": "agent.session.turn.in_progress", "turn": turn_obj(*turn, "in_progress", &Value::Null, &Value::Null)})
        }
        "command" => {
            let argv: Vec<&str> = body["argv"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let done = body["done"].as_bool().unwrap_or(false);
            let exit = body["exit"].as_i64();
            let status = match (done, exit) {
                (false, _) => "in_progress",
                (true, Some(0)) => "completed",
                (true, _) => "failed",
            };
            json!({
                "type": if done { "agent.session.turn.item.done" } else { "agent.session.turn.item.added" },
                "item": {"type": "command_execution", "id": item_id, "command": argv.join(" "), "argv": argv,
                         "exit_code": exit, "status": status, "turn_id": format!("turn_{turn}")},
            })
        }
        "file_change" => json!({
            "type": "agent.session.turn.item.done",
            "item": {"type": "file_change", "id": item_id, "path": body["path"], "kind": body["kind"],
                     "status": if body["applied"].as_bool() == Some(true) { "completed" } else { "failed" },
                     "turn_id": format!("turn_{turn}")},
        }),
        "network" => json!({
            "type": "agent.session.turn.item.done",
            "item": {"type": "network_connection", "id": item_id, "host": body["host"], "port": body["port"],
                     "status": if body["allowed"].as_bool() == Some(true) { "completed" } else { "failed" },
                     "reason": body["reason"], "turn_id": format!("turn_{turn}")},
        }),
        // Changes that wait for a person: applied by calling the op named, which a person
        // approves (always confirmed).
        "writes_held" => json!({
            "type": "agent.session.turn.item.done",
            "item": {"type": "held_writes", "id": item_id, "hold": body["hold"], "changes": body["changes"],
                     "more": body["more"], "status": "pending_confirmation",
                     "apply": {"op": format!("agents.{}.sessions.apply_writes", session["corral"]["adapter"].as_str().unwrap_or("<adapter>")),
                               "args": {"session": sid, "hold": body["hold"]}},
                     "turn_id": format!("turn_{turn}")},
        }),
        "writes_applied" => json!({
            "type": "agent.session.turn.item.done",
            "item": {"type": "held_writes", "id": item_id, "hold": body["hold"], "applied": body["applied"],
                     "refused": body["refused"], "status": "completed", "turn_id": format!("turn_{turn}")},
        }),
        // Changes the agent made in its sandbox that never reached the host.
        "changes_refused" => json!({
            "type": "agent.session.turn.item.done",
            "item": {"type": "refused_changes", "id": item_id, "changes": body["changes"],
                     "more": body["more"], "status": "failed", "turn_id": format!("turn_{turn}")},
        }),
        "message" => json!({
            "type": "agent.session.turn.item.done",
            "item": {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": body["text"], "annotations": []}],
                     "turn_id": format!("turn_{turn}")},
        }),
        "error" => {
            json!({"type": "error", "error": {"code": body["code"], "message": body["message"]}})
        }
        "turn_ended" => {
            let ok = body["ok"].as_bool().unwrap_or(false);
            let t = body["turn"].as_u64().unwrap_or(*turn);
            json!({
                "type": if ok { "agent.session.turn.completed" } else { "agent.session.turn.failed" },
                "turn": turn_obj(t, if ok { "completed" } else { "failed" }, &body["usage"], &body["error"]),
                "usage": token_usage(&body["usage"]),
            })
        }
        "idle" => json!({"type": "agent.session.idle", "session": session}),
        _ => return None,
    };
    let obj = e.as_object_mut()?;
    obj.insert("event_id".into(), json!(seq.to_string()));
    if !obj.contains_key("session") {
        obj.insert("session_id".into(), sid);
        obj.insert("turn_id".into(), json!(format!("turn_{turn}")));
    }
    Some(e)
}

/// `GET /v1/agents/sessions/{id}/events`: with `Accept: text/event-stream`, the session's
/// events as SSE from the start (or after `Last-Event-ID` / `?after=`), following new ones as
/// they are stored (a keep-alive comment every 15 s; at most an hour per connection); else
/// the events stored so far as a JSON list.
pub async fn events(
    State(state): State<AppState>,
    auth: Authed<Agents>,
    Path(params): Path<HashMap<String, String>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let rid = auth.request_id.clone();
    let id = params.get("id").cloned().unwrap_or_default();
    let s = own_session(&state, &auth.caller, &id, &rid).await?;
    let after = match headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or(q.get("after").map(String::as_str))
    {
        None => 0,
        Some(v) => v.trim().parse::<u64>().map_err(|_| {
            invalid(
                "`Last-Event-ID` (or `after`) must be an event's `event_id`",
                &rid,
            )
        })?,
    };
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    let store = std::sync::Arc::clone(state.runtime().store());
    let t = tenant(&state, &auth.caller);
    let mut turn = if after > 0 { s.turns } else { 0 };
    if !sse {
        let rows = store
            .session_events(&t, &id, after, 1000)
            .await
            .map_err(|e| store_error(&e, &rid))?;
        let session = session_obj(&session_json(&s));
        let data: Vec<Value> = rows
            .iter()
            .filter_map(|r| wire_event(r.seq, &r.kind, &r.body, &session, &mut turn))
            .collect();
        return Ok(answer(
            StatusCode::OK,
            json!({"object": "list", "data": data}),
            &rid,
        ));
    }
    let Some(slot) = state
        .runtime()
        .agents()
        .open_stream(&t, &auth.caller.principal.identity())
    else {
        return Err(ApiError::new(
            codes::LIMIT_CONCURRENCY,
            format!(
                "you hold {} event streams open, the most at once; close one (or read the events as a JSON list, without `Accept: text/event-stream`)",
                corral_runtime::agents::MAX_STREAMS_PER_OWNER
            ),
            None,
            &rid,
        ));
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let shutdown = state.shutdown().clone();
    tokio::spawn(async move {
        let _slot = slot;
        // The stream ends when the server shuts down (a graceful shutdown waits for open
        // answers), or when the client goes.
        tokio::select! {
            () = follow(store, t, id, after, turn, tx) => {}
            () = shutdown.cancelled() => {}
        }
    });
    let mut resp = super::llm::sse_response(Body::from_stream(super::llm::ChannelBody(rx)));
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    Ok(resp)
}

/// Sends the session's events after `after` on `tx` as SSE frames, following new ones (a
/// keep-alive comment every 15 s; at most an hour), until the client goes or the session is
/// deleted.
async fn follow(
    store: std::sync::Arc<corral_store::Store>,
    t: String,
    id: String,
    after: u64,
    mut turn: u64,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    {
        let started = tokio::time::Instant::now();
        let mut last_sent = started;
        let mut after = after;
        while started.elapsed() < STREAM_MAX {
            let Ok(rows) = store.session_events(&t, &id, after, 200).await else {
                return;
            };
            if rows.is_empty() {
                if last_sent.elapsed() >= KEEPALIVE {
                    // A session deleted meanwhile ends its streams.
                    if !matches!(store.get_session(&t, &id).await, Ok(Some(_))) {
                        return;
                    }
                    if tx
                        .send(Ok(Bytes::from_static(b": keep-alive\n\n")))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    last_sent = tokio::time::Instant::now();
                }
                // A client that went is noticed at once (its body was dropped), not at the
                // next keep-alive.
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    () = tx.closed() => return,
                }
                continue;
            }
            // The session as it is now, for the events that carry it.
            let Ok(Some(now)) = store.get_session(&t, &id).await else {
                return;
            };
            let session = session_obj(&session_json(&now));
            for r in rows {
                after = r.seq;
                let Some(e) = wire_event(r.seq, &r.kind, &r.body, &session, &mut turn) else {
                    continue;
                };
                let frame = format!("id: {}\ndata: {}\n\n", r.seq, e);
                if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                    return;
                }
            }
            last_sent = tokio::time::Instant::now();
        }
    }
}
