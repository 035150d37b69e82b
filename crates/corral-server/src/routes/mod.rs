//! The route table. Every route but `/healthz` authenticates first (`extract::Authed`); the web
//! console (`crate::ui`, merged in) authenticates its pages by their session.

pub(crate) mod agents;
pub(crate) mod audit;
mod confirmations;
mod extract;
pub(crate) mod learning;
pub(crate) mod link;
pub mod llm;
mod mcp;
mod meta;
mod ops;
mod sandbox;
mod shadows;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub use agents::ADAPTER_HEADER;

use crate::AppState;

/// All routes: the table below, plus, only when learning mode is on, `POST /learning/hint` and
/// the layer narrowing `/audit` and `/v1/sandbox/*` below level 3 (`learning::narrow`).
pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes();
    let mut table = table(&state);
    if state.learning().is_some() {
        table = table.route("/learning/hint", post(learning::hint)).layer(
            axum::middleware::from_fn_with_state(state.clone(), learning::narrow),
        );
    }
    table = table.merge(crate::ui::routes());
    // Only when something exports spans (`telemetry:`): otherwise no layer costs a request
    // anything. After the routes, so the span names the route's template (`MatchedPath`).
    if tracing::enabled!(target: corral_telemetry::TARGET, tracing::Level::INFO) {
        table = table.route_layer(axum::middleware::from_fn(crate::http_span::http_span));
    }
    table
        .fallback(meta::not_found)
        .method_not_allowed_fallback(meta::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Every route learning mode does not add.
fn table(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/healthz", get(meta::healthz))
        .route("/llms.txt", get(meta::llms_txt))
        .route("/ops", get(ops::list))
        .route("/ops/{id}", post(ops::call))
        .route("/capabilities", get(ops::capabilities))
        .route("/audit", get(audit::list))
        .route("/confirmations", get(confirmations::list))
        .route(
            "/confirmations/{action_id}/decision",
            post(confirmations::decide),
        )
        .route("/me", get(meta::me))
        .route("/metrics", get(meta::metrics))
        .route("/mcp", mcp_route(state))
        .route("/openapi.json", get(meta::openapi))
        .route("/v1/chat/completions", post(llm::chat_completions))
        .route("/v1/models", get(llm::models))
        .route("/v1/responses", post(llm::responses))
        .route("/v1/messages", post(llm::messages))
        .merge(agents_routes())
        .nest("/agents/{adapter}", agents_routes())
        .route("/v1/sandbox/synthetic-data", post(sandbox::generate))
        .route(
            "/v1/sandbox/scenarios",
            post(sandbox::create_scenario).get(sandbox::list_scenarios),
        )
        .route(
            "/v1/sandbox/scenarios/{id}",
            get(sandbox::get_scenario).put(sandbox::update_scenario),
        )
        .route("/v1/sandbox/scenarios/{id}/runs", post(sandbox::run))
        .route("/v1/sandbox/runs", get(sandbox::list_runs))
        .route("/v1/sandbox/runs/{id}", get(sandbox::get_run))
        .route("/v1/sandbox/runs/{id}/outputs", get(sandbox::outputs))
        .route(
            "/v1/sandbox/comparisons",
            post(sandbox::compare).get(sandbox::list_comparisons),
        )
        .route("/v1/sandbox/comparisons/{id}", get(sandbox::get_comparison))
        .route(
            "/v1/sandbox/tournaments",
            post(sandbox::tournament).get(sandbox::list_tournaments),
        )
        .route("/v1/sandbox/tournaments/{id}", get(sandbox::get_tournament))
        .route(
            "/v1/sandbox/shadows",
            post(shadows::start).get(shadows::list),
        )
        .route("/v1/sandbox/shadows/{id}", get(shadows::get))
        .route("/v1/sandbox/metering", get(sandbox::metering))
        .route("/v1/sandbox/recordings", get(sandbox::list_recordings))
        .route(
            "/v1/sandbox/recordings/{id}",
            get(sandbox::get_recording).delete(sandbox::delete_recording),
        )
        .route(
            "/v1/sandbox/recordings/{id}/export",
            get(sandbox::export_recording),
        )
        .route(
            "/v1/sandbox/recordings/{id}/input",
            axum::routing::put(sandbox::set_recording_input),
        )
        .route("/v1/sandbox/recordings/{id}/replay", post(sandbox::replay))
}

/// `/mcp`: the MCP service behind the authentication middleware.
/// The agents host's routes (`/v1/agents/*`): mounted at the root and under
/// `/agents/{adapter}` (the path's adapter is the first case of the selection order).
fn agents_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/agents",
            post(agents::create_agent).get(agents::list_agents),
        )
        .route(
            "/v1/agents/sessions",
            post(agents::create_session).get(agents::list_sessions),
        )
        .route(
            "/v1/agents/sessions/{id}",
            get(agents::session).delete(agents::session),
        )
        .route(
            "/v1/agents/sessions/{id}/events",
            post(agents::post_events).get(agents::events),
        )
        .route("/v1/agents/{id}", get(agents::agent).delete(agents::agent))
}

fn mcp_route(state: &AppState) -> axum::routing::MethodRouter<AppState> {
    axum::routing::any_service(mcp::service(state)).layer(axum::middleware::from_fn_with_state(
        state.clone(),
        mcp::authenticate,
    ))
}

/// A fresh request id: a UUIDv7, so ids sort by time and audit inserts append to the end of
/// the primary-key index instead of landing on random pages.
pub(crate) fn request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
