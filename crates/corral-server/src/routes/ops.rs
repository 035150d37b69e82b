//! `POST /ops/{id}`, `GET /ops`, `GET /capabilities`.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use corral_guard::{Call, Gateway, Reply};
use corral_policy::{OpSpec, codes};
use serde_json::json;

use super::extract::{Authed, Capabilities, ListOps, OpCall};
use crate::AppState;
use crate::error::{ApiError, REPLAYED_HEADER};

/// An op as `GET /ops` shows it.
pub(crate) fn op_json(op: &OpSpec) -> serde_json::Value {
    json!({
        "id": op.id.as_str(),
        "effects": op.effective_effects().iter().map(|e| e.as_str()).collect::<Vec<_>>(),
        "tier": op.tier().as_str(),
        "safety": op.safety().as_str(),
        "summary": op.summary,
        "params": op.params.iter().map(|p| json!({
            "name": p.name, "type": p.kind.name(), "required": p.required,
        })).collect::<Vec<_>>(),
    })
}

/// Whether a Content-Type is `application/json`, with or without parameters.
fn is_json(ct: &HeaderValue) -> bool {
    let essence = ct.to_str().unwrap_or("").split(';').next().unwrap_or("");
    essence.trim().eq_ignore_ascii_case("application/json")
}

/// The arguments of an op call's body, as JSON (an empty body is `null`: the body is required,
/// `{}` when the op takes no arguments); why not, else. Whether they are an object is the
/// gateway's to judge, once the op is resolved (an op the caller may not call answers 404
/// whatever the body holds).
fn call_args(body: &[u8], json_content: bool) -> Result<serde_json::Value, String> {
    if !json_content && !body.is_empty() {
        return Err("send the arguments as JSON with `Content-Type: application/json`".to_owned());
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .map_err(|e| format!("the body is not valid JSON: {e}"))
}

/// `POST /ops/{id}`.
pub async fn call(
    State(state): State<AppState>,
    // Authenticated before the path is decoded and before a byte of the body is read: an
    // unauthenticated request is answered 401 (and audited) whatever its path holds.
    Authed {
        caller,
        request_id: rid,
        options,
        gateway: gw,
        ..
    }: Authed<OpCall>,
    id: Result<Path<String>, PathRejection>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let Ok(Path(id)) = id else {
        gw.audit_rejected(&caller, "", &rid, codes::OP_INVALID_ID, 400)
            .await;
        return Err(ApiError::new(
            codes::OP_INVALID_ID,
            "the op id in the path is not UTF-8 text; use the dotted id `GET /ops` lists",
            None,
            &rid,
        ));
    };
    // Borrowed, not extracted: a `HeaderMap` extractor would copy every header per call.
    let headers = request.headers();
    let json_content = headers.get(header::CONTENT_TYPE).is_none_or(is_json);
    let declared = crate::body::content_length(headers);
    let limit = state.max_body_bytes();
    // Drained when oversized, so the client reads the 413 instead of a reset connection.
    let body = match crate::body::read(request.into_body(), limit, declared).await {
        Ok(b) => b,
        Err(e) => {
            let (status, code) = e.status_code();
            gw.audit_rejected(&caller, &id, &rid, code, status).await;
            return Ok(e.response(limit, Some(&id), &rid));
        }
    };
    let args = match call_args(&body, json_content) {
        Ok(a) => a,
        Err(message) => {
            gw.audit_rejected(&caller, &id, &rid, codes::ARGS_MALFORMED, 400)
                .await;
            return Err(ApiError::new(
                codes::ARGS_MALFORMED,
                message,
                Some(&id),
                &rid,
            ));
        }
    };
    let opts = match options {
        Ok(o) => o,
        Err(msg) => {
            let code = super::extract::INVALID_HEADER;
            gw.audit_rejected(&caller, &id, &rid, code, 400).await;
            return Err(ApiError::new(code, msg, Some(&id), &rid));
        }
    };
    let (reply, outcome) = gw
        .call_traced(
            Call {
                caller,
                op: id.clone(),
                args,
                request_id: rid.clone(),
            },
            opts,
        )
        .await;
    // An approved call that had run already: its stored outcome, marked in the body (beside
    // the result, never in it) and in `X-Corral-Replayed`, so nobody takes it for a new run.
    let replayed = outcome == corral_guard::audit::Outcome::Replayed;
    let mut resp = match reply {
        Reply::Json(v) => {
            let mut body = json!({"ok": true, "op": id, "request_id": rid, "result": v});
            if replayed {
                body["replayed"] = json!(true);
            }
            axum::Json(body).into_response()
        }
        Reply::Stream(s) => {
            let stream = tokio_util::io::ReaderStream::new(s.body);
            let mut r = Response::new(Body::from_stream(stream));
            if let Ok(v) = HeaderValue::from_str(&s.content_type) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            let h = r.headers_mut();
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(s.len));
            // A file's bytes are whatever a sandboxed program wrote: should a browser ever
            // render them (an HTML or SVG file), they run nothing, take no origin and are not
            // re-typed.
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'"),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            r
        }
        Reply::Refused(r) => {
            let e = ApiError::from_refusal(&r, Some(&id), &rid);
            return Err(if replayed { e.replayed() } else { e });
        }
    };
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    if replayed {
        resp.headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `GET /ops`: the ops the caller may call.
pub async fn list(
    Authed {
        caller: c, gateway, ..
    }: Authed<ListOps>,
) -> Result<Response, ApiError> {
    let d = gateway.deployment();
    let ops: Vec<_> = d
        .callable_ops(&c.principal)
        .into_iter()
        .map(op_json)
        .collect();
    Ok(axum::Json(json!({"ops": ops})).into_response())
}

/// `GET /capabilities`: the same, with the limits that apply.
pub async fn capabilities(
    Authed {
        caller: c, gateway, ..
    }: Authed<Capabilities>,
) -> Result<Response, ApiError> {
    let d = gateway.deployment();
    let ops: Vec<_> = d
        .callable_ops(&c.principal)
        .into_iter()
        .map(|op| {
            let mut v = op_json(op);
            let l = Gateway::base_limits(&d, op.id.as_str(), &c.principal);
            v["limits"] = json!({
                "max_bytes": l.max_bytes,
                "max_entries": l.max_entries,
                "timeout_ms": l.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                "max_output_bytes": l.max_output_bytes,
                "rate": l.rate.map(|r| r.to_string()),
                "concurrency": l.concurrency,
                "cpu_seconds": l.cpu_seconds,
                "memory": l.memory,
                "processes": l.processes,
            });
            v
        })
        .collect();
    Ok(axum::Json(json!({"principal": c.principal.id, "ops": ops})).into_response())
}
