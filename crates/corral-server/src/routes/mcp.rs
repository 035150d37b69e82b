//! `/mcp`: corral's ops as MCP tools over streamable HTTP (stateless, JSON answers), behind the
//! same authentication as every other route.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use corral_mcp::CorralMcp;
use corral_mcp::rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use corral_mcp::rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};

use super::meta::authed;
use crate::AppState;

/// The MCP service: a fresh handler per request; the caller comes from the request.
pub(crate) fn service(state: &AppState) -> StreamableHttpService<CorralMcp, NeverSessionManager> {
    let gateway = state.0.gateway.clone();
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = false;
    config.json_response = true;
    config.sse_keep_alive = None;
    config.max_request_body_bytes = state.0.max_body_bytes;
    // Never empty (an empty list would admit every Host): the config refuses `[]`, and the
    // default is the loopback names.
    config = config
        .with_allowed_hosts(state.0.mcp_allowed_hosts.clone())
        .with_allowed_origins(state.0.mcp_allowed_origins.clone());
    StreamableHttpService::new(
        move || Ok(CorralMcp::per_request(gateway.clone())),
        std::sync::Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// Authenticates an MCP request like any route (401 without valid credentials), reads its
/// guardrail headers (`X-Corral-Run`, `X-Corral-Autonomy`, `X-Corral-Dry-Run`), and hands the
/// `Caller` and the `CallOptions` to the MCP handler through the request's extensions.
pub(crate) async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let rid = super::request_id();
    match authed(&state, request.headers(), "/mcp", &rid).await {
        Ok(caller) => {
            // The guardrail headers apply to every tool call of the request, as on `POST /ops`.
            let opts = match super::confirmations::call_options(request.headers()) {
                Ok(o) => o,
                Err(msg) => {
                    let code = super::confirmations::INVALID_HEADER;
                    return crate::error::ApiError::new(400, code, msg, None, &rid).into_response();
                }
            };
            request.extensions_mut().insert(caller);
            request.extensions_mut().insert(opts);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}
