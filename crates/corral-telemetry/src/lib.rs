//! OpenTelemetry for corral: when `telemetry:` is configured, the spans corral opens under
//! [`TARGET`] (a call, each guard step of it, the HTTP request around it) are exported over
//! OTLP/HTTP (protobuf) to a collector; [`trace_id`] names the trace a call belongs to, for
//! its audit event, and [`adopt_parent`] joins a caller's W3C `traceparent`.
//!
//! What goes into a span is chosen where the span is opened: op, principal, outcome, code,
//! never an argument value. Only spans and events of [`TARGET`] reach the exporter (the layer
//! from [`Exporter::layer`] is filtered to it), so no other log line of the process becomes a
//! span event. With `telemetry:` absent nothing listens to [`TARGET`], and its spans cost a
//! disabled callsite check each.

use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The `tracing` target of every span corral exports (and that the log output leaves out).
pub const TARGET: &str = "corral::otel";

/// How often the batch of finished spans is sent (and at most how long a span waits).
const EXPORT_DELAY: Duration = Duration::from_secs(1);
/// How long one export may take before it is given up (the spans are dropped, not retried).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutting down waits for the last batch.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What `telemetry:` says, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The collector: a base URL (its `/v1/traces` is used) or the traces URL itself.
    pub endpoint: String,
    /// The spans' `service.name`.
    pub service_name: String,
    /// The share of new traces kept, in millionths (1 to 1,000,000).
    pub sample_millionths: u32,
    /// The running corral's version (`service.version`).
    pub service_version: String,
}

impl Settings {
    /// The URL spans are posted to: `endpoint` with `/v1/traces` when it names no path.
    pub fn traces_url(&self) -> String {
        let e = self.endpoint.trim_end_matches('/');
        let after_scheme = e.split_once("://").map_or(e, |(_, rest)| rest);
        if after_scheme.contains('/') {
            e.to_owned()
        } else {
            format!("{e}/v1/traces")
        }
    }
}

/// The exporter could not be built (an endpoint the HTTP client refuses).
#[derive(Debug, thiserror::Error)]
#[error("the OpenTelemetry exporter for `{url}` cannot be built: {reason}")]
pub struct TelemetryError {
    /// Where spans would have gone.
    pub url: String,
    /// The exporter's words.
    pub reason: String,
}

impl TelemetryError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        corral_policy::codes::CONFIG_TELEMETRY_EXPORTER
    }
}

/// The running exporter: a batch of finished spans is sent from the SDK's own thread, so a
/// slow or absent collector never holds a call (spans beyond the queue are dropped).
pub struct Exporter {
    provider: SdkTracerProvider,
    url: String,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").field("url", &self.url).finish()
    }
}

impl Exporter {
    /// Builds the exporter; nothing is sent until spans end.
    pub fn start(s: &Settings) -> Result<Self, TelemetryError> {
        let url = s.traces_url();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(EXPORT_DELAY)
                    .build(),
            )
            .build();
        let ratio = f64::from(s.sample_millionths.clamp(1, 1_000_000)) / 1e6;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(s.service_name.clone())
                    .with_attribute(opentelemetry::KeyValue::new(
                        "service.version",
                        s.service_version.clone(),
                    ))
                    .build(),
            )
            .build();
        Ok(Self { provider, url })
    }

    /// Where spans go.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `tracing` layer that turns corral's spans ([`TARGET`] only) into OpenTelemetry
    /// spans for this exporter.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("corral"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE))
    }

    /// Sends what is left and stops (waits at most a few seconds for the collector).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(error = %e, url = %self.url, "the last spans were not exported");
        }
    }
}

/// The trace `span` belongs to, as 32 hex digits, when that trace is exported (the span is
/// sampled); `None` without an exporter, or for a trace the sampler left out.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    (sc.is_valid() && sc.is_sampled()).then(|| sc.trace_id().to_string())
}

/// The W3C trace context headers of one request.
struct TraceHeaders<'a> {
    traceparent: &'a str,
    tracestate: Option<&'a str>,
}

impl Extractor for TraceHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(self.traceparent),
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Makes `span` a child of the caller's span named by `traceparent` (W3C Trace Context); a
/// malformed header is ignored (the span starts its own trace). Call before the span is
/// entered.
pub fn adopt_parent(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&TraceHeaders {
        traceparent,
        tracestate,
    });
    if cx.span().span_context().is_valid() {
        // Fails only once the span has started (it has not: it was just opened).
        let _ = span.set_parent(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(endpoint: &str) -> Settings {
        Settings {
            endpoint: endpoint.to_owned(),
            service_name: "corral".to_owned(),
            sample_millionths: 1_000_000,
            service_version: "0".to_owned(),
        }
    }

    #[test]
    fn a_base_endpoint_gets_the_traces_path_and_a_full_one_is_kept() {
        assert_eq!(
            settings("http://c:4318").traces_url(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            settings("http://c:4318/").traces_url(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            settings("https://c/otlp/v1/traces").traces_url(),
            "https://c/otlp/v1/traces"
        );
    }

    #[test]
    fn without_an_exporter_there_is_no_trace_id() {
        let span = tracing::info_span!(target: TARGET, "corral.call");
        assert_eq!(trace_id(&span), None);
    }
}
