//! `/mcp`: corral's ops as MCP tools over streamable HTTP (stateless, JSON answers), behind the
//! same authentication as every other route.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use corral_mcp::CorralMcp;
use corral_mcp::rmcp::model::ClientJsonRpcMessage;
use corral_mcp::rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use corral_mcp::rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};
use corral_policy::codes;

use super::extract::{Authed, Mcp};
use crate::AppState;
use crate::error::ApiError;

/// The MCP service: a fresh handler per request; the caller comes from the request.
pub(crate) fn service(state: &AppState) -> StreamableHttpService<CorralMcp, NeverSessionManager> {
    let gateway = state.gateway().clone();
    let lab = state.runtime().lab().clone();
    // Never empty (an empty list would admit every Host): the config refuses `[]`, and the
    // default is the loopback names.
    let config = config(state.max_body_bytes())
        .with_allowed_hosts(state.mcp_allowed_hosts().to_vec())
        .with_allowed_origins(state.mcp_allowed_origins().to_vec());
    let underscored = state.mcp_underscored_names();
    StreamableHttpService::new(
        move || {
            Ok(CorralMcp::per_request(gateway.clone())
                .with_lab(lab.clone())
                .with_underscored_names(underscored))
        },
        std::sync::Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The MCP service of a lab program's link: the run's world's ops only (no lab tools), for
/// the sandbox's own `127.0.0.1`, the only address it reaches corral at.
pub(crate) fn linked_service(
    gateway: std::sync::Arc<corral_guard::Gateway>,
    max_body_bytes: usize,
) -> StreamableHttpService<CorralMcp, NeverSessionManager> {
    let config = config(max_body_bytes).with_allowed_hosts(["127.0.0.1", "localhost"]);
    StreamableHttpService::new(
        move || Ok(CorralMcp::per_request(gateway.clone())),
        std::sync::Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// Stateless, JSON answers, no keep-alive stream, the body limit.
fn config(max_body_bytes: usize) -> StreamableHttpServerConfig {
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = false;
    config.json_response = true;
    config.sse_keep_alive = None;
    config.max_request_body_bytes = max_body_bytes;
    config
}

/// Authenticates an MCP request like any route (401 without valid credentials), reads its
/// guardrail headers (`X-Corral-Run`, `X-Corral-Autonomy`, `X-Corral-Dry-Run`), and hands the
/// `Caller` and the `CallOptions` to the MCP handler through the request's extensions.
pub(crate) async fn authenticate(
    State(state): State<AppState>,
    authed: Result<Authed<Mcp>, ApiError>,
    mut request: Request,
    next: Next,
) -> Response {
    // A refused authentication (401) in the form an MCP client reads: a JSON-RPC error.
    let authed = match authed {
        Ok(a) => a,
        Err(e) => return e.into_jsonrpc_response(),
    };
    // The guardrail headers apply to every tool call of the request, as on `POST /ops`.
    let rid = authed.request_id;
    let opts = match authed.options {
        Ok(o) => o,
        Err(msg) => {
            let code = super::extract::INVALID_HEADER;
            return ApiError::new(code, msg, None, &rid).into_response();
        }
    };
    request.extensions_mut().insert(authed.caller);
    request.extensions_mut().insert(opts);
    if request.method() == Method::POST {
        if !accept_json(&mut request) {
            return ApiError::new(
                codes::MCP_NOT_ACCEPTABLE,
                "this client accepts neither JSON nor an event stream; send `Accept: application/json, text/event-stream` (or omit `Accept`)",
                None,
                &rid,
            )
            .into_response();
        }
        request = match checked_body(&state, request, &rid).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
    }
    let resp = next.run(request).await;
    host_refusal(resp, &rid)
}

/// The MCP transport wants clients to accept both JSON and an event stream; this server answers
/// JSON only (stateless, `json_response`), so a client that accepts JSON (no `Accept`, `*/*`,
/// `application/*` or `application/json` among its ranges) is served as if it had said both.
/// Any other (an event stream only, say) is refused: `false`, for `406 mcp.not_acceptable`.
fn accept_json(request: &mut Request) -> bool {
    let accepts_json = match request.headers().get(header::ACCEPT) {
        None => true,
        Some(v) => v.to_str().unwrap_or("").split(',').any(|range| {
            let essence = range.split(';').next().unwrap_or("").trim();
            ["*/*", "application/*", "application/json"]
                .iter()
                .any(|ok| essence.eq_ignore_ascii_case(ok))
        }),
    };
    if accepts_json {
        request.headers_mut().insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
    accepts_json
}

/// The MCP service's own `403` for a `Host` or `Origin` it does not answer (plain text that
/// names no setting) as corral's error, naming the settings that admit it.
fn host_refusal(resp: Response, rid: &str) -> Response {
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(is_json);
    if resp.status() != axum::http::StatusCode::FORBIDDEN || json {
        return resp;
    }
    ApiError::new(
        codes::MCP_HOST_NOT_ALLOWED,
        "this `Host` (or `Origin`) is not one `/mcp` answers; call it by a name in the config's `mcp.allowed_hosts` (a browser's Origin: `mcp.allowed_origins`), or add this one there",
        None,
        rid,
    )
    .into_jsonrpc_response()
}

/// Whether a Content-Type is `application/json`, with or without parameters.
fn is_json(ct: &HeaderValue) -> bool {
    let essence = ct.to_str().unwrap_or("").split(';').next().unwrap_or("");
    essence.trim().eq_ignore_ascii_case("application/json")
}

/// A POSTed MCP message, checked before the MCP service sees it, so that every bad body gets
/// corral's error format and code (the service's own answers are plain text, and a body nested
/// too deeply was a `415`): a type other than JSON is `415 args.unsupported_media_type`, an
/// oversized body `413 limit.body_too_large` (drained first), a body that is not JSON (or is
/// nested too deeply) or not a JSON-RPC message `400 args.malformed`. The request goes on with
/// the bytes read.
async fn checked_body(state: &AppState, request: Request, rid: &str) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    if !parts.headers.get(header::CONTENT_TYPE).is_some_and(is_json) {
        return Err(ApiError::new(
            codes::ARGS_UNSUPPORTED_MEDIA_TYPE,
            "send the MCP message as JSON with `Content-Type: application/json`",
            None,
            rid,
        )
        .into_response());
    }
    let limit = state.max_body_bytes();
    let declared = crate::body::content_length(&parts.headers);
    let bytes = crate::body::read(body, limit, declared)
        .await
        .map_err(|e| e.response(limit, None, rid))?;
    let malformed =
        |what: String| ApiError::new(codes::ARGS_MALFORMED, what, None, rid).into_response();
    // As JSON first (the nesting limit and syntax errors, by line and column), then as the
    // message the MCP service expects.
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return Err(malformed(format!(
            "the body is not valid JSON: {e}; send one JSON-RPC 2.0 message"
        )));
    }
    if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        return Err(malformed(format!(
            "the body is not a JSON-RPC 2.0 request, notification or response: {e}"
        )));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}
