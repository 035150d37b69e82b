//! The tables against the documents: every key a table decodes is the key its unknown-key hint
//! lists, and no listed key is ignored.

use super::{Decoder, all_tables};
use crate::Diagnostic;
use crate::yaml::parse;

/// A document that reaches the mapping at `path` with `body` as that mapping, and any keys the
/// mapping needs to be read at all.
fn document(path: &str, body: &str) -> Option<String> {
    let doc = match path {
        "" => format!("{{{body}}}"),
        "rules[0]" => format!("{{version: 1, rules: [{{{body}}}]}}"),
        "rules[0].paths" | "rules[0].commands" | "rules[0].urls" | "rules[0].agents" => {
            let key = path.trim_start_matches("rules[0].");
            format!("{{version: 1, rules: [{{allow: [x], {key}: {{{body}}}}}]}}")
        }
        "rules[0].commands.network" => {
            format!("{{version: 1, rules: [{{allow: [x], commands: {{network: {{{body}}}}}}}]}}")
        }
        "rules[0].agents.network" => {
            format!("{{version: 1, rules: [{{allow: [x], agents: {{network: {{{body}}}}}}}]}}")
        }
        "rules[0].limits" => format!("{{version: 1, rules: [{{allow: [x], limits: {{{body}}}}}]}}"),
        "custom.x" => format!("{{version: 1, custom: {{x: {{{body}}}}}}}"),
        "custom.x.params.x" => {
            format!("{{version: 1, custom: {{x: {{argv: [x], params: {{x: {{{body}}}}}}}}}}}")
        }
        "custom.x.network" => {
            format!("{{version: 1, custom: {{x: {{argv: [x], network: {{{body}}}}}}}}}")
        }
        "mcp_servers.x" => format!("{{version: 1, mcp_servers: {{x: {{{body}}}}}}}"),
        "mcp_servers.x.network" => {
            format!("{{version: 1, mcp_servers: {{x: {{command: [x], network: {{{body}}}}}}}}}")
        }
        "run.network" => format!("{{version: 1, run: {{network: {{{body}}}}}}}"),
        "sandbox.programs.x" | "sandbox.scorers.x" | "sandbox.judges.x" => {
            let key = path.trim_start_matches("sandbox.").trim_end_matches(".x");
            format!("{{version: 1, sandbox: {{{key}: {{x: {{{body}}}}}}}}}")
        }
        "mcp_servers.x.tools.x" => {
            format!(
                "{{version: 1, mcp_servers: {{x: {{command: [x], tools: {{x: {{{body}}}}}}}}}}}"
            )
        }
        "auth.tokens[0]" => format!("{{version: 1, auth: {{tokens: [{{{body}}}]}}}}"),
        "auth.jwt" => format!("{{version: 1, auth: {{jwt: {{{body}}}}}}}"),
        "console" => format!("{{version: 1, console: {{{body}}}}}"),
        "auth.jwt.service_claim" => {
            format!("{{version: 1, auth: {{jwt: {{service_claim: {{{body}}}}}}}}}")
        }
        "autonomy.pins[0]" => format!("{{version: 1, autonomy: {{pins: [{{{body}}}]}}}}"),
        "run.limits" => format!("{{version: 1, run: {{limits: {{{body}}}}}}}"),
        "preset" => format!("{{version: 1, preset: {{{body}}}}}"),
        "preset[0]" => format!("{{version: 1, preset: [{{{body}}}]}}"),
        "budgets.replay" | "budgets.judge" => {
            let key = path.trim_start_matches("budgets.");
            format!("{{version: 1, budgets: {{{key}: {{{body}}}}}}}")
        }
        "storage" | "mcp" | "isolation" | "limits" | "auth" | "audit" | "autonomy" | "roles"
        | "guardrails" | "budgets" | "run" | "sandbox" | "recordings" | "llm" | "agents"
        | "install" | "telemetry" => {
            format!("{{version: 1, {path}: {{{body}}}}}")
        }
        _ => return None,
    };
    Some(doc)
}

fn decode(source: &str) -> Vec<Diagnostic> {
    let Ok(tree) = parse(source) else {
        unreachable!("the test documents are valid YAML: {source}")
    };
    let mut d = Decoder::new();
    d.config(&tree);
    d.diags
}

#[test]
fn every_tables_unknown_key_hint_lists_exactly_the_keys_it_decodes() {
    for (path, keys) in all_tables() {
        let Some(doc) = document(&path, "zzqxv_unknown: 1") else {
            unreachable!("no test document reaches the table at `{path}`: add one to `document`")
        };
        let diags = decode(&doc);
        let at = if path.is_empty() {
            "zzqxv_unknown".to_owned()
        } else {
            format!("{path}.zzqxv_unknown")
        };
        let Some(hint) = diags.iter().find(|d| d.location == at) else {
            unreachable!("no unknown-key error at `{at}` in {doc}: {diags:#?}")
        };
        assert_eq!(hint.code, "config.unknown_key");
        assert_eq!(
            hint.fix,
            format!("the keys here are {}", keys.join(", ")),
            "{doc}"
        );
    }
}

/// Keys written beside the one under test, so a key read only with another is reached.
const BESIDE: &[&[(&str, &str)]] = &[
    &[],
    &[("allow", "[x]")],
    &[("name", "workspace_jail")],
    &[("type", "path")],
    &[("type", "enum"), ("values", "[a]")],
    &[("principal", "\"kind:service\""), ("level", "L2")],
];

#[test]
fn every_key_a_table_lists_is_read() {
    // A value no key accepts (a list of lists) must draw an error under the key's path or in
    // the value; a key
    // whose meaning depends on another (a param's `root` and `values`) is tried beside each.
    for (path, keys) in all_tables() {
        for key in keys {
            let bodies: Vec<String> = BESIDE
                .iter()
                .map(|beside| {
                    let mut pairs: Vec<String> = beside
                        .iter()
                        .filter(|(k, _)| *k != key)
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect();
                    pairs.push(format!("{key}: [[1]]"));
                    pairs.join(", ")
                })
                .collect();
            let at = if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            };
            let read = bodies.iter().any(|body| {
                let Some(doc) = document(&path, body) else {
                    return false;
                };
                let Ok(tree) = parse(&doc) else {
                    return false;
                };
                let mut d = Decoder::new();
                d.config(&tree);
                let bad = format!("{key}: [[1]]");
                let Some(value) = doc.find(&bad).map(|i| i + key.len() + 2) else {
                    return false;
                };
                d.diags.iter().any(|d| {
                    d.location.starts_with(&at)
                        || d.span
                            .is_some_and(|s| (value..value + 5).contains(&s.offset))
                })
            });
            assert!(
                read,
                "`{at}` is listed but a bad value there draws no error"
            );
        }
    }
}

#[test]
fn the_lab_is_on_unless_the_config_turns_it_off() {
    let decoded = |source: &str| {
        let Ok(tree) = parse(source) else {
            unreachable!("valid YAML: {source}")
        };
        let mut d = Decoder::new();
        let config = d.config(&tree);
        (config.sandbox.enabled, d.diags)
    };
    let (on, diags) = decoded("{version: 1}");
    assert!(on && diags.is_empty(), "{diags:?}");
    let (on, diags) = decoded("{version: 1, sandbox: {enabled: false}}");
    assert!(!on && diags.is_empty(), "{diags:?}");
    let (_, diags) = decoded("{version: 1, sandbox: {enabled: maybe}}");
    assert_eq!(diags.len(), 1, "{diags:?}");
}
