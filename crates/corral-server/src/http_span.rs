//! The HTTP request's span (`corral.http`, exported when `telemetry:` is set): method, route
//! template and status, joined to the caller's trace by its W3C `traceparent` header; the
//! call's span (`corral.call`, the guard chain's) opens inside it.

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// Runs the request inside its span (a disabled one when nothing exports spans).
pub async fn http_span(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("", MatchedPath::as_str);
    let method = known_method(req.method());
    let span = tracing::info_span!(
        target: corral_telemetry::TARGET,
        "corral.http",
        otel.name = %format_args!("{} {route}", if method == OTHER { "HTTP" } else { method }),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    if !span.is_disabled()
        && let Some(parent) = header(&req, "traceparent")
    {
        corral_telemetry::adopt_parent(&span, parent, header(&req, "tracestate"));
    }
    let res = next.run(req).instrument(span.clone()).await;
    if !span.is_disabled() {
        let status = res.status().as_u16();
        span.record("http.response.status_code", status);
        if status >= 500 {
            span.record("otel.status_code", "ERROR");
        }
    }
    res
}

/// OpenTelemetry's name for a method that is not one of HTTP's own.
const OTHER: &str = "_OTHER";

/// The method as the span names it: one of HTTP's own, or [`OTHER`]. An extension method is
/// whatever the caller sent, of any length (a request line may be hundreds of kilobytes), on
/// any route that takes every method; it never goes into a span.
fn known_method(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => OTHER,
    }
}

fn header<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}
