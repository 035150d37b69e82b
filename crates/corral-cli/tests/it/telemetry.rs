//! `telemetry:` end to end (issue 21 item 4): `corral serve` exports its spans over OTLP/HTTP to
//! a collector written here (it decodes the protobuf the way an OpenTelemetry collector does,
//! with the project's own generated messages). A call is one `corral.call` span inside the
//! request's `corral.http` span, with a child per guard step; the spans carry op, principal,
//! outcome and code, never an argument value; the caller's `traceparent` is the trace's parent;
//! and the call's audit event names the trace.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;

use crate::call::serve_with;
use crate::workspace;

const AGENT: &str = "otel-agent-token-0123456789";
const ADMIN: &str = "otel-admin-token-0123456789";
/// Argument values the spans must never carry.
const FILE: &str = "marker-7f3a.txt";
const OUTSIDE: &str = "../outside-9c1e";
/// The caller's trace context (W3C's own example ids).
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct Span {
    trace: String,
    id: String,
    parent: String,
    name: String,
    attrs: HashMap<String, String>,
    service: String,
}

/// What the collector received: every span, and every request body as sent.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    bodies: Vec<Vec<u8>>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn record(into: &Mutex<Received>, body: Vec<u8>) {
    let Ok(req) = ExportTraceServiceRequest::decode(body.as_slice()) else {
        unreachable!("the exporter sends OTLP protobuf")
    };
    let mut r = into
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|res| &res.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            r.spans.push(Span {
                trace: hex(&span.trace_id),
                id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
                name: span.name.clone(),
                attrs: span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                    .collect(),
                service: service.clone(),
            });
        }
    }
    r.bodies.push(body);
}

/// Serves one keep-alive connection of the exporter: `POST /v1/traces`, answered 200 with an
/// empty `ExportTraceServiceResponse`.
fn collect(conn: TcpStream, into: &Mutex<Received>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        let mut path = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if path.is_empty() {
                path = line.split(' ').nth(1).unwrap_or("").to_owned();
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        assert_eq!(
            path, "/v1/traces",
            "spans go to the base endpoint's traces path"
        );
        record(into, body);
        let reply =
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// An OTLP/HTTP collector on loopback: its port, and what it received.
fn collector() -> (u16, Arc<Mutex<Received>>) {
    let Ok(listener) = TcpListener::bind("127.0.0.1:0") else {
        unreachable!("loopback can bind")
    };
    let Ok(addr) = listener.local_addr() else {
        unreachable!("a bound socket has an address")
    };
    let received = Arc::new(Mutex::new(Received::default()));
    let r = Arc::clone(&received);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let r = Arc::clone(&r);
            std::thread::spawn(move || collect(conn, &r));
        }
    });
    (addr.port(), received)
}

/// One HTTP/1.1 request to the server; its status and body.
fn http(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let Ok(mut conn) = TcpStream::connect(addr) else {
        unreachable!("the server listens")
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let _ = conn.write_all(req.as_bytes());
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}

#[test]
fn a_call_is_a_span_with_a_child_per_guard_step_and_its_audit_event_names_the_trace() {
    let (port, received) = collector();
    let config = format!(
        "version: 1\nstate_dir: .corral\n\
         telemetry: {{endpoint: 'http://127.0.0.1:{port}', service_name: corral-it}}\n\
         auth:\n  tokens:\n\
         \x20   - {{id: agent, roles: [operator], token_env: OTEL_AGENT}}\n\
         \x20   - {{id: boss, roles: [admin], token_env: OTEL_ADMIN}}\n\
         rules:\n  - allow: [files.read]\n    paths: {{roots: [$WS]}}\n"
    );
    let dir = workspace(Some(&config));
    let _ = std::fs::write(dir.path().join("ws").join(FILE), "hello\n");
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &[("OTEL_AGENT", AGENT), ("OTEL_ADMIN", ADMIN)],
        Stdio::null(),
    );
    let agent = format!("Bearer {AGENT}");
    let (status, body) = http(
        &served.url,
        "POST",
        "/ops/files.read",
        &[("Authorization", &agent)],
        &format!(r#"{{"path":"{FILE}"}}"#),
    );
    assert_eq!(status, 200, "{body}");
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let (status, body) = http(
        &served.url,
        "POST",
        "/ops/files.read",
        &[("Authorization", &agent), ("traceparent", &traceparent)],
        &format!(r#"{{"path":"{OUTSIDE}"}}"#),
    );
    assert_eq!(status, 403, "{body}");
    let refused_code = json(&body)["code"].as_str().unwrap_or("").to_owned();
    assert!(!refused_code.is_empty(), "{body}");

    // Both calls' spans reach the collector within a few export rounds.
    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .spans
            .clone();
        let calls = spans.iter().filter(|s| s.name == "corral.call").count();
        let audits = spans.iter().filter(|s| s.name == "guard.audit").count();
        let https = spans.iter().filter(|s| s.name.starts_with("POST ")).count();
        if calls >= 2 && audits >= 2 && https >= 2 {
            break spans;
        }
        assert!(Instant::now() < deadline, "spans not exported: {spans:#?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(spans.iter().all(|s| s.service == "corral-it"), "{spans:#?}");
    let children = |parent: &Span| -> Vec<String> {
        spans
            .iter()
            .filter(|s| s.parent == parent.id && s.trace == parent.trace)
            .map(|s| s.name.clone())
            .collect()
    };
    let call = |outcome: &str| -> Span {
        let found = spans.iter().find(|s| {
            s.name == "corral.call"
                && s.attrs.get("corral.outcome").map(String::as_str) == Some(outcome)
        });
        let Some(s) = found else {
            unreachable!("a call span with outcome {outcome}: {spans:#?}")
        };
        s.clone()
    };

    // The allowed call: op, principal, outcome; every guard step a child, in the chain's order.
    let ok = call("ok");
    assert_eq!(ok.attrs["corral.op"], "files.read");
    assert_eq!(ok.attrs["corral.principal.id"], "agent");
    assert_eq!(ok.attrs["corral.status"], "200");
    assert!(!ok.attrs.contains_key("corral.code"), "{ok:?}");
    let mut steps = children(&ok);
    steps.sort();
    let mut chain = [
        "guard.resolve",
        "guard.arguments",
        "guard.run",
        "guard.autonomy",
        "guard.rbac",
        "guard.policy",
        "guard.limits",
        "guard.budgets",
        "guard.confirmation",
        "guard.execute",
        "guard.audit",
    ]
    .map(str::to_owned)
    .to_vec();
    chain.sort();
    assert_eq!(steps, chain);
    let http_of = |s: &Span| spans.iter().find(|h| h.id == s.parent).cloned();
    let Some(outer) = http_of(&ok) else {
        unreachable!("the call span's parent is the request's: {spans:#?}")
    };
    assert_eq!(outer.name, "POST /ops/{id}");
    assert_eq!(outer.attrs["http.response.status_code"], "200");

    // The refused call: the step that refused carries the code; nothing after it ran but the
    // audit; the caller's traceparent is the trace and the parent of the request's span.
    let denied = call("denied");
    assert_eq!(denied.attrs["corral.code"], refused_code);
    assert_eq!(denied.attrs["corral.status"], "403");
    assert_eq!(denied.trace, TRACE);
    let steps = children(&denied);
    assert!(!steps.contains(&"guard.execute".to_owned()), "{steps:?}");
    assert!(steps.contains(&"guard.audit".to_owned()), "{steps:?}");
    let Some(policy) = spans
        .iter()
        .find(|s| s.parent == denied.id && s.name == "guard.policy")
    else {
        unreachable!("the policy step's span: {spans:#?}")
    };
    assert_eq!(policy.attrs["corral.code"], refused_code);
    let Some(outer) = http_of(&denied) else {
        unreachable!("the refused call's request span: {spans:#?}")
    };
    assert_eq!(outer.parent, PARENT);
    assert_eq!(outer.trace, TRACE);

    // No argument value left the process in a span.
    for body in &received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .bodies
    {
        let seen = String::from_utf8_lossy(body);
        assert!(
            !seen.contains("marker-7f3a") && !seen.contains("outside-9c1e"),
            "{seen}"
        );
    }

    // Each call's audit event names its trace.
    let admin = format!("Bearer {ADMIN}");
    let (status, body) = http(
        &served.url,
        "GET",
        "/audit?op=files.read",
        &[("Authorization", &admin)],
        "",
    );
    assert_eq!(status, 200, "{body}");
    let events = json(&body)["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let trace_of = |outcome: &str| {
        events
            .iter()
            .find(|e| e["outcome"] == outcome)
            .and_then(|e| e["trace_id"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(trace_of("ok"), Some(ok.trace.clone()), "{body}");
    assert_eq!(trace_of("denied").as_deref(), Some(TRACE), "{body}");
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_corral_serves() {
    let Ok(text) = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/corral.json"
    )) else {
        unreachable!("deploy/grafana/corral.json is in the repository")
    };
    let dashboard = json(&text);
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    assert!(exprs.len() >= 8, "{exprs:?}");
    // The metric names the queries use, as families (`_total`, `_bucket` are series suffixes).
    let mut families: Vec<String> = exprs
        .iter()
        .flat_map(|e| {
            e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("corral_"))
                .map(|w| {
                    w.trim_end_matches("_total")
                        .trim_end_matches("_bucket")
                        .to_owned()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    families.sort();
    families.dedup();

    let config = "version: 1\nstate_dir: .corral\npreset: workspace_jail\nroot: $WS\n\
                  auth:\n  tokens:\n    - {id: scraper, roles: [viewer], token_env: OTEL_SCRAPER}\n";
    let dir = workspace(Some(config));
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &[("OTEL_SCRAPER", AGENT)],
        Stdio::null(),
    );
    // One call, so that the call counters have a series.
    let (status, body) = http(
        &served.url,
        "POST",
        "/ops/files.list",
        &[("Authorization", &format!("Bearer {AGENT}"))],
        r#"{"path":"."}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = http(
        &served.url,
        "GET",
        "/metrics",
        &[("Authorization", &format!("Bearer {AGENT}"))],
        "",
    );
    assert_eq!(status, 200, "{metrics}");
    for f in &families {
        assert!(
            metrics.contains(&format!("# TYPE {f} ")),
            "the dashboard queries `{f}`, which /metrics does not serve:\n{metrics}"
        );
    }
    assert!(
        families.contains(&"corral_calls".to_owned()),
        "{families:?}"
    );
}

#[test]
fn an_endpoint_the_exporter_cannot_use_stops_serve_with_its_code() {
    let config = "version: 1\nstate_dir: .corral\npreset: workspace_jail\nroot: $WS\n\
                  telemetry: {endpoint: 'http://[::1:4318'}\n";
    let dir = workspace(Some(config));
    let (code, out, err) = crate::corral(
        dir.path(),
        &[
            "serve",
            "--config",
            "corral.yaml",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    // As for a config that does not load.
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("error[config.telemetry_exporter]"), "{err}");
    assert!(err.contains("http://[::1:4318/v1/traces"), "{err}");
}

/// Spans exported so far, once one satisfies `done` (within a few export rounds).
fn spans_until(received: &Mutex<Received>, done: impl Fn(&Span) -> bool) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spans = received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .spans
            .clone();
        if spans.iter().any(&done) {
            return spans;
        }
        let names: Vec<String> = spans
            .iter()
            .map(|s| s.name.chars().take(80).collect())
            .collect();
        assert!(Instant::now() < deadline, "not exported; got {names:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An extension method is whatever the caller sent (any length a request line holds, before
/// any authentication): on a route that takes every method, the request's span names it
/// `_OTHER`, as OpenTelemetry does, and the method itself is in no exported byte.
#[test]
fn a_callers_own_http_method_never_reaches_a_span() {
    let (port, received) = collector();
    let config = format!(
        "version: 1\nstate_dir: .corral\npreset: workspace_jail\nroot: $WS\n\
         telemetry: {{endpoint: 'http://127.0.0.1:{port}'}}\n\
         auth:\n  tokens:\n    - {{id: agent, roles: [operator], token_env: OTEL_AGENT}}\n"
    );
    let dir = workspace(Some(&config));
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &[("OTEL_AGENT", AGENT)],
        Stdio::null(),
    );
    let method = "CALLERMETHOD".repeat(5000);
    let (status, body) = http(&served.url, &method, "/ui/anything", &[], "");
    assert_eq!(status, 404, "{body}");

    let spans = spans_until(&received, |s| {
        s.attrs.get("http.route").map(String::as_str) == Some("/ui/{*rest}")
    });
    let Some(ui) = spans
        .iter()
        .find(|s| s.attrs.get("http.route").map(String::as_str) == Some("/ui/{*rest}"))
    else {
        unreachable!("spans_until found it")
    };
    assert_eq!(ui.name, "HTTP /ui/{*rest}");
    assert_eq!(ui.attrs["http.request.method"], "_OTHER");
    assert_eq!(ui.attrs["http.response.status_code"], "404");
    for body in &received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .bodies
    {
        let seen = String::from_utf8_lossy(body);
        assert!(!seen.contains("CALLERMETHOD"), "{} bytes", body.len());
    }
}
