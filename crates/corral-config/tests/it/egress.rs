//! `network:` on command scopes, custom ops and upstream servers (issue 12 item 4): the three
//! forms load, a bad entry or key is a load error that says how to write it.

use corral_config::diag::Severity;
use corral_policy::codes;
use corral_policy::scope::NetworkSpec;

use crate::{line_of, list, load, load_err, span_line, the};

const CONFIG: &str = "version: 1
rules:
  - allow: [commands.run]
    commands:
      allow: [\"curl ...\"]
      cwd: /work
      network: {allow: [\"api.github.com:443\", \"*.pypi.org:443\", \"127.0.0.1:8080\"]}
custom:
  report.fetch:
    argv: [/opt/fetch.sh]
    effects: [read, net]
    network: loopback
mcp_servers:
  github:
    command: [/opt/github-mcp]
    network: {allow: [\"api.github.com:443\"]}
";

#[test]
fn network_loads_on_a_command_scope_a_custom_op_and_an_upstream_server() {
    let l = load(CONFIG);
    let scope = l.config.rules[0].commands.as_ref().unwrap();
    assert_eq!(
        scope
            .value
            .network
            .as_ref()
            .map(NetworkSpec::summary)
            .as_deref(),
        Some("allow: api.github.com:443, *.pypi.org:443, 127.0.0.1:8080")
    );
    assert_eq!(l.config.custom[0].network, Some(NetworkSpec::Loopback));
    assert_eq!(
        l.config.mcp_servers[0]
            .network
            .as_ref()
            .map(NetworkSpec::summary)
            .as_deref(),
        Some("allow: api.github.com:443")
    );
}

#[test]
fn a_bad_egress_entry_is_a_load_error_that_says_how_to_write_it() {
    let text = CONFIG.replace("\"*.pypi.org:443\"", "\"pypi.org\"");
    let e = load_err("corral.yaml", &text);
    let d = the(
        &e.diagnostics,
        codes::CONFIG_INVALID_EGRESS,
        Severity::Error,
    );
    assert_eq!(d.location, "rules[0].commands.network.allow[1]");
    assert!(d.message.contains("`pypi.org`"), "{d}");
    assert!(d.fix.contains("host:port"), "{d}");
    assert_eq!(span_line(d), line_of(&text, "pypi.org"));
}

#[test]
fn a_misspelt_network_key_or_mode_gets_a_did_you_mean() {
    let text = CONFIG.replace("network: loopback", "network: loopbak");
    let e = load_err("corral.yaml", &text);
    let d = the(&e.diagnostics, codes::CONFIG_INVALID_VALUE, Severity::Error);
    assert!(d.fix.contains("`loopback`"), "{}", list(&e.diagnostics));
    let text = CONFIG.replace(
        "network: {allow: [\"api.github.com:443\"]}",
        "network: {alow: [\"api.github.com:443\"]}",
    );
    let e = load_err("corral.yaml", &text);
    let d = the(&e.diagnostics, codes::CONFIG_UNKNOWN_KEY, Severity::Error);
    assert!(d.fix.contains("`allow`"), "{}", list(&e.diagnostics));
    let text = CONFIG.replace("      network: {allow", "      netwrk: {allow");
    let e = load_err("corral.yaml", &text);
    let d = the(&e.diagnostics, codes::CONFIG_UNKNOWN_KEY, Severity::Error);
    assert!(d.fix.contains("`network`"), "{}", list(&e.diagnostics));
}
