//! `telemetry:` (OpenTelemetry over OTLP/HTTP): off when absent; an endpoint without
//! credentials, a sample ratio in (0, 1].

use corral_config::Severity;
use corral_config::model::TelemetryConfig;

use crate::{load, load_err, the};

#[test]
fn no_telemetry_section_exports_nothing() {
    assert_eq!(load("version: 1\n").config.telemetry, None);
}

#[test]
fn a_telemetry_section_names_the_collector_and_the_share_of_traces_kept() {
    let l = load(
        "version: 1\ntelemetry: {endpoint: 'http://otel-collector:4318', service_name: corral-eu, sample_ratio: 0.25}\n",
    );
    assert_eq!(
        l.config.telemetry,
        Some(TelemetryConfig {
            endpoint: "http://otel-collector:4318".to_owned(),
            service_name: Some("corral-eu".to_owned()),
            sample_millionths: 250_000,
        })
    );
    // Every trace when the ratio is not given.
    let l = load("version: 1\ntelemetry: {endpoint: 'https://c.example/otlp/v1/traces'}\n");
    assert_eq!(
        l.config.telemetry.map(|t| t.sample_millionths),
        Some(1_000_000)
    );
}

#[test]
fn credentials_in_the_endpoint_are_refused_and_never_echoed() {
    let e = load_err(
        "corral.yaml",
        "version: 1\ntelemetry: {endpoint: 'https://ops:hunter2-otlp@c.example:4318'}\n",
    );
    let d = the(&e.diagnostics, "config.inline_secret", Severity::Error);
    assert_eq!(d.location, "telemetry.endpoint");
    assert!(d.fix.contains("OTEL_EXPORTER_OTLP_HEADERS"));
    let said = format!("{:?}", e.diagnostics);
    assert!(!said.contains("hunter2"), "{said}");
    // A password with a `/` ends the URL's authority before its `@`: still credentials.
    for endpoint in [
        "http://ops:hunter2/x@c.example:4318",
        "http://ops:4318/hunter2@c.example",
    ] {
        let e = load_err(
            "corral.yaml",
            &format!("version: 1\ntelemetry: {{endpoint: '{endpoint}'}}\n"),
        );
        let d = the(&e.diagnostics, "config.inline_secret", Severity::Error);
        assert_eq!(d.location, "telemetry.endpoint");
        let said = format!("{:?}", e.diagnostics);
        assert!(!said.contains("hunter2"), "{said}");
    }
}

#[test]
fn a_bad_endpoint_a_missing_one_and_a_ratio_out_of_range_are_load_errors() {
    for (yaml, code, at) in [
        (
            "{endpoint: 'otel-collector:4318'}",
            "config.invalid_value",
            "telemetry.endpoint",
        ),
        (
            "{endpoint: 'http://'}",
            "config.invalid_value",
            "telemetry.endpoint",
        ),
        (
            "{endpoint: 'http://c:4318/?x=1'}",
            "config.invalid_value",
            "telemetry.endpoint",
        ),
        ("{service_name: corral}", "config.missing_key", "telemetry"),
        (
            "{endpoint: 'http://c:4318', sample_ratio: 0}",
            "config.invalid_value",
            "telemetry.sample_ratio",
        ),
        (
            "{endpoint: 'http://c:4318', sample_ratio: 1.5}",
            "config.invalid_value",
            "telemetry.sample_ratio",
        ),
        (
            "{endpoint: 'http://c:4318', sample_ratio: all}",
            "config.invalid_value",
            "telemetry.sample_ratio",
        ),
        (
            "{endpoint: 'http://c:4318', sampling: 1}",
            "config.unknown_key",
            "telemetry.sampling",
        ),
    ] {
        let text = format!("version: 1\ntelemetry: {yaml}\n");
        let e = load_err("corral.yaml", &text);
        let d = the(&e.diagnostics, code, Severity::Error);
        assert_eq!(d.location, at, "{yaml}");
        assert!(!d.fix.is_empty(), "{yaml}: {d:?}");
    }
}
