//! The baseline for `bench/gateway.sh`: a bare axum server that answers `POST /ops/core.health`
//! with the same JSON corral returns (`{"ok": true, "op", "request_id", "result"}`, a fresh
//! UUID v4 request id and an `x-request-id` header), with no authentication, policy, limits,
//! metrics or audit. Same runtime as `corral serve` (tokio multi-thread, one worker per core).
//!
//! Usage: `bare-axum [ADDR]` (default `127.0.0.1:9100`).

use axum::Router;
use axum::http::{HeaderValue, header::HeaderName};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

async fn health() -> Response {
    let rid = uuid::Uuid::new_v4().to_string();
    let mut resp = axum::Json(json!({
        "ok": true,
        "op": "core.health",
        "request_id": rid,
        "result": {"status": "ok"},
    }))
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut()
            .insert(HeaderName::from_static("x-request-id"), v);
    }
    resp
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9100".to_owned());
    let app = Router::new().route("/ops/core.health", post(health));
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bare-axum: cannot listen on {addr}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    eprintln!("bare-axum listening on http://{addr}");
    match axum::serve(listener, app).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-axum: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
