//! Integration tests for corral-config: every lint finding, the load errors, the rendered
//! diagnostics, the starter configs and the policy a config builds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agents;
mod downloads;
mod egress;
mod errors;
mod guardrails;
mod lints;
mod llm;
mod policy_from_config;
mod protect;
mod snapshots;
mod starter;
mod telemetry;

use std::collections::HashMap;
use std::path::Path;

use corral_config::{Diagnostic, LoadError, Loaded, Severity, load_str};

/// Token variables the test configs name, each with a distinct secret of 16+ characters.
pub const AGENT_SECRET: &str = "agent-secret-0123456789abcdef";
pub const VIEWER_SECRET: &str = "viewer-secret-0123456789abcdef";
pub const ADMIN_SECRET: &str = "admin-secret-0123456789abcdef";

/// The environment every test loads with.
pub fn env() -> HashMap<String, String> {
    [
        ("CORRAL_AGENT_TOKEN", AGENT_SECRET),
        ("CORRAL_VIEWER_TOKEN", VIEWER_SECRET),
        ("CORRAL_ADMIN_TOKEN", ADMIN_SECRET),
        ("CORRAL_SHORT_TOKEN", "fifteen-chars!!"),
        ("CORRAL_EMPTY_TOKEN", ""),
        (
            "CORRAL_JWT_SECRET",
            "jwt-secret-0123456789abcdef-0123456789",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The directory relative paths (the state directory) are anchored at.
pub const BASE: &str = "/srv/project";

/// Loads YAML text that must load, failing the test with the rendered errors otherwise.
pub fn load(yaml: &str) -> Loaded {
    match load_str("corral.yaml", yaml, Path::new(BASE), &env()) {
        Ok(l) => l,
        Err(e) => panic!("the config should load, but:\n{}", e.render()),
    }
}

/// Loads text that must not load, failing the test otherwise.
pub fn load_err(file_name: &str, text: &str) -> LoadError {
    match load_str(file_name, text, Path::new(BASE), &env()) {
        Ok(_) => panic!("the config should not load:\n{text}"),
        Err(e) => e,
    }
}

/// The one diagnostic with `code` and `severity`, failing the test (with every diagnostic)
/// when there is none or more than one.
pub fn the<'a>(diags: &'a [Diagnostic], code: &str, severity: Severity) -> &'a Diagnostic {
    let hits: Vec<&Diagnostic> = diags
        .iter()
        .filter(|d| d.code == code && d.severity == severity)
        .collect();
    match hits.as_slice() {
        [one] => one,
        _ => panic!(
            "expected exactly one {} `{code}`, found {}:\n{}",
            severity.as_str(),
            hits.len(),
            list(diags)
        ),
    }
}

/// Every diagnostic, one a line, for failure messages.
pub fn list(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("  {}[{}]: {d}", d.severity.as_str(), d.code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The 1-based line of the first occurrence of `needle` in `text`.
pub fn line_of(text: &str, needle: &str) -> usize {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("`{needle}` is not in the text"));
    text[..at].matches('\n').count() + 1
}

/// The line a diagnostic's span starts on, failing the test when it has no span.
pub fn span_line(d: &Diagnostic) -> usize {
    d.span
        .unwrap_or_else(|| panic!("`{}` has no span: {d}", d.code))
        .line
}
