//! Configs that do not load: the code, the place and the fix of each error.

use corral_config::{Diagnostic, LoadError, Severity};
use corral_policy::codes;

use crate::{list, load, load_err, span_line, the};

/// The errors of a YAML config that must not load.
fn errors(yaml: &str) -> Vec<Diagnostic> {
    let e = load_err("corral.yaml", yaml);
    assert!(
        e.diagnostics.iter().any(|d| d.severity == Severity::Error),
        "a load error carries at least one error:\n{}",
        list(&e.diagnostics)
    );
    e.diagnostics
}

/// The one error with `code`.
fn error(yaml: &str, code: &str) -> Diagnostic {
    the(&errors(yaml), code, Severity::Error).clone()
}

#[test]
fn a_misspelt_top_level_key_is_unknown_with_the_closest_key_and_its_position() {
    let yaml = "version: 1\nrootz: /workspace\n";
    let d = error(yaml, codes::CONFIG_UNKNOWN_KEY);
    assert_eq!(d.fix, "did you mean `root`?");
    assert_eq!(d.location, "rootz");
    assert!(d.message.contains("`rootz`"), "{d}");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (2, 1));
    assert_eq!(&yaml[s.offset..s.offset + s.len], "rootz");
}

#[test]
fn a_misspelt_nested_key_names_its_full_path() {
    let yaml = "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace], readonyl: true}
";
    let d = error(yaml, codes::CONFIG_UNKNOWN_KEY);
    assert_eq!(d.location, "rules[0].paths.readonyl");
    assert_eq!(d.fix, "did you mean `readonly`?");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (4, 34));
}

#[test]
fn a_key_with_no_close_match_lists_the_valid_keys() {
    let d = error("version: 1\nzzzzzzzz: 1\n", codes::CONFIG_UNKNOWN_KEY);
    assert!(
        d.fix.starts_with("the keys here are version, preset"),
        "{d}"
    );
}

#[test]
fn a_misspelt_op_id_in_a_selector_is_an_unknown_op_with_the_closest_id() {
    let yaml = "version: 1
rules:
  - allow: [files.dowload]
    paths: {roots: [/workspace]}
";
    let d = error(yaml, codes::CONFIG_UNKNOWN_OP);
    assert!(d.fix.contains("`files.download`"), "{d}");
    assert_eq!(d.location, "rules[0].allow[0]");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (3, 13));
}

#[test]
fn an_op_id_with_the_ops_prefix_says_to_write_it_without() {
    let d = error(
        "version: 1\nroot: /workspace\nenable: [ops.files.download]\n",
        codes::CONFIG_UNKNOWN_OP,
    );
    assert!(d.fix.contains("write `files.download`"), "{d}");
    assert_eq!(d.location, "enable[0]");
    assert_eq!(span_line(&d), 3);
}

#[test]
fn a_size_with_a_space_is_invalid() {
    let yaml = "version: 1\nlimits:\n  max_bytes: 10 MB\n";
    let d = error(yaml, codes::CONFIG_INVALID_SIZE);
    assert_eq!(d.location, "limits.max_bytes");
    assert!(d.message.contains("`10 MB`"), "{d}");
    assert!(d.fix.contains("MB"), "{d}");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (3, 14));
}

#[test]
fn a_size_written_as_a_bare_number_is_invalid() {
    let d = error(
        "version: 1\nlimits:\n  memory: 1024\n",
        codes::CONFIG_INVALID_SIZE,
    );
    assert!(d.fix.contains("`10MB`"), "{d}");
}

#[test]
fn a_duration_with_an_unknown_unit_is_invalid() {
    let d = error(
        "version: 1\nlimits:\n  timeout: 5min\n",
        codes::CONFIG_INVALID_DURATION,
    );
    assert_eq!(d.location, "limits.timeout");
    assert!(d.message.contains("`5min`"), "{d}");
    assert_eq!(span_line(&d), 3);
}

#[test]
fn a_rate_with_an_unknown_period_is_invalid() {
    let d = error(
        "version: 1\nrules:\n  - deny: [files.delete]\n    limits: {rate: 10/fortnight}\n",
        codes::CONFIG_INVALID_RATE,
    );
    assert_eq!(d.location, "rules[0].limits.rate");
    assert!(d.message.contains("`10/fortnight`"), "{d}");
    assert_eq!(span_line(&d), 4);
}

#[test]
fn every_bad_unit_in_one_file_is_reported_at_once() {
    let diags = errors(
        "version: 1
limits:
  max_bytes: 10 MB
  timeout: 5min
  rate: 10/fortnight
",
    );
    for code in [
        codes::CONFIG_INVALID_SIZE,
        codes::CONFIG_INVALID_DURATION,
        codes::CONFIG_INVALID_RATE,
    ] {
        the(&diags, code, Severity::Error);
    }
}

#[test]
fn a_token_secret_written_in_the_config_is_refused() {
    let yaml = "version: 1
auth:
  tokens:
    - id: agent
      token: agent-secret-0123456789abcdef
      token_env: CORRAL_AGENT_TOKEN
";
    let d = error(yaml, codes::CONFIG_INLINE_SECRET);
    assert_eq!(d.location, "auth.tokens[0].token");
    assert!(d.fix.contains("token_env"), "{d}");
    assert_eq!(span_line(&d), 5);
    assert!(
        !d.to_string().contains("agent-secret"),
        "the diagnostic never repeats the secret: {d}"
    );
}

#[test]
fn a_token_env_that_is_unset_is_refused_with_how_to_set_it() {
    let yaml = "version: 1
auth:
  tokens:
    - id: agent
      token_env: CORRAL_UNSET_TOKEN
";
    let d = error(yaml, codes::CONFIG_TOKEN_ENV_UNSET);
    assert_eq!(d.location, "auth.tokens[0].token_env");
    assert!(d.fix.contains("export CORRAL_UNSET_TOKEN="), "{d}");
    assert_eq!(span_line(&d), 5);
}

#[test]
fn a_token_env_that_is_empty_counts_as_unset() {
    error(
        "version: 1
auth:
  tokens:
    - {id: agent, token_env: CORRAL_EMPTY_TOKEN}
",
        codes::CONFIG_TOKEN_ENV_UNSET,
    );
}

#[test]
fn a_fifteen_character_secret_is_too_short() {
    let d = error(
        "version: 1
auth:
  tokens:
    - {id: agent, token_env: CORRAL_SHORT_TOKEN}
",
        codes::CONFIG_TOKEN_TOO_SHORT,
    );
    assert!(d.message.contains("CORRAL_SHORT_TOKEN"), "{d}");
    assert!(!d.to_string().contains("fifteen"), "{d}");
}

#[test]
fn a_sixteen_character_secret_is_long_enough() {
    let mut env = crate::env();
    env.insert("CORRAL_SIXTEEN".to_owned(), "sixteen-chars!!!".to_owned());
    let loaded = corral_config::load_str(
        "corral.yaml",
        "version: 1\nauth:\n  tokens:\n    - {id: agent, token_env: CORRAL_SIXTEEN}\n",
        std::path::Path::new(crate::BASE),
        &env,
    )
    .unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(loaded.tokens.len(), 1);
    assert_eq!(loaded.tokens[0].secret.expose(), "sixteen-chars!!!");
    assert!(!format!("{:?}", loaded.tokens[0]).contains("sixteen-chars"));
}

#[test]
fn a_config_without_a_version_is_refused() {
    let d = error("root: /workspace\n", codes::CONFIG_VERSION);
    assert!(d.message.contains("no `version`"), "{d}");
}

#[test]
fn an_empty_config_is_refused_for_its_missing_version() {
    error("", codes::CONFIG_VERSION);
    error("# only a comment\n", codes::CONFIG_VERSION);
}

#[test]
fn version_two_is_refused_at_its_value() {
    let d = error("root: /workspace\nversion: 2\n", codes::CONFIG_VERSION);
    assert_eq!(d.fix, "write `version: 1`");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (2, 10));
}

#[test]
fn a_rule_with_both_allow_and_deny_is_refused_at_the_deny() {
    let d = error(
        "version: 1
rules:
  - allow: [files.read]
    deny: [files.read]
    paths: {roots: [/workspace]}
",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "rules[0]");
    assert_eq!(d.fix, "split it into two rules");
    assert_eq!(span_line(&d), 4);
}

#[test]
fn a_rule_with_neither_allow_nor_deny_is_refused() {
    let d = error(
        "version: 1\nrules:\n  - paths: {roots: [/workspace]}\n",
        codes::CONFIG_MISSING_KEY,
    );
    assert_eq!(d.location, "rules[0]");
}

#[test]
fn a_custom_op_in_a_reserved_namespace_is_refused() {
    let d = error(
        "version: 1
custom:
  files.mine:
    argv: [/usr/bin/mine]
    effects: [read]
",
        codes::CONFIG_INVALID_OP,
    );
    assert!(d.message.contains("reserved namespace `files`"), "{d}");
    assert_eq!(d.location, "custom.files.mine");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (3, 3));
}

#[test]
fn a_custom_op_argv_with_an_undeclared_param_is_refused_with_the_closest_param() {
    let diags = errors(
        "version: 1
custom:
  kafka.describe_topic:
    argv: [/usr/bin/kafka-topics, --describe, --topic, \"{topc}\"]
    params:
      topic: {type: word}
    effects: [read]
",
    );
    let [d, unused] = diags.as_slice() else {
        panic!(
            "two errors: the unknown `{{topc}}` and the unused `topic`:\n{}",
            list(&diags)
        );
    };
    assert_eq!(unused.code, codes::CONFIG_INVALID_OP);
    assert_eq!(unused.location, "custom.kafka.describe_topic.params.topic");
    assert_eq!(d.code, codes::CONFIG_INVALID_OP);
    assert!(d.message.contains("`{topc}`"), "{d}");
    assert_eq!(d.fix, "did you mean `{topic}`?");
    assert_eq!(d.location, "custom.kafka.describe_topic.argv[3]");
    assert_eq!(span_line(d), 4);
}

#[test]
fn a_custom_op_argv_with_a_param_and_no_params_says_how_to_declare_it() {
    let diags = errors(
        "version: 1
custom:
  kafka.describe_topic:
    argv: [/usr/bin/kafka-topics, --topic, \"{topic}\"]
    effects: [read]
",
    );
    let d = the(&diags, codes::CONFIG_INVALID_OP, Severity::Error);
    assert!(d.fix.contains("params: {topic: {type: word}}"), "{d}");
}

#[test]
fn a_declared_param_argv_never_uses_is_refused() {
    let d = error(
        "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    params: {topic: word}
    effects: [read]
",
        codes::CONFIG_INVALID_OP,
    );
    assert_eq!(d.location, "custom.kafka.list_topics.params.topic");
    assert_eq!(span_line(&d), 5);
}

#[test]
fn a_templated_program_is_refused() {
    let d = error(
        "version: 1
custom:
  tools.run_any:
    argv: [\"{tool}\"]
    params: {tool: word}
    effects: [exec]
",
        codes::CONFIG_INVALID_OP,
    );
    assert_eq!(d.location, "custom.tools.run_any.argv[0]");
}

#[test]
fn a_param_required_flag_that_is_not_a_boolean_is_refused() {
    let d = error(
        "version: 1
custom:
  kafka.describe_topic:
    argv: [/usr/bin/kafka-topics, --topic, \"{topic}\"]
    params:
      topic: {type: word, required: \"no\"}
    effects: [read]
",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(
        d.location,
        "custom.kafka.describe_topic.params.topic.required"
    );
    assert_eq!(span_line(&d), 6);
}

#[test]
fn a_tier_below_the_effects_tier_is_refused() {
    let d = error(
        "version: 1\ntiers:\n  files.delete: read\n",
        codes::CONFIG_INVALID_OP,
    );
    assert!(d.message.contains("`files.delete`"), "{d}");
    assert!(d.message.contains("`destructive`"), "{d}");
    assert_eq!(d.location, "tiers.files.delete");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (3, 3));
}

#[test]
fn a_tier_raised_above_the_effects_tier_loads() {
    let loaded = load("version: 1\ntiers:\n  files.read: confirm\n");
    assert_eq!(
        loaded.catalog.get("files.read").unwrap().tier(),
        corral_policy::Tier::Confirm
    );
}

#[test]
fn a_tier_for_an_unknown_op_is_an_unknown_op() {
    let d = error(
        "version: 1\ntiers:\n  files.reed: confirm\n",
        codes::CONFIG_UNKNOWN_OP,
    );
    assert!(d.fix.contains("`files.read`"), "{d}");
}

#[test]
fn an_unknown_preset_suggests_the_closest_name() {
    let d = error(
        "version: 1\nroot: /workspace\npreset: workspace-jial\n",
        codes::CONFIG_UNKNOWN_PRESET,
    );
    assert_eq!(d.fix, "did you mean `workspace_jail`?");
    assert_eq!(d.location, "preset");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (3, 9));
}

#[test]
fn a_preset_name_with_dashes_is_accepted() {
    let loaded = load("version: 1\nroot: /workspace\npreset: download-only\n");
    assert_eq!(
        loaded.config.presets[0].preset,
        corral_policy::presets::Preset::DownloadOnly
    );
}

#[test]
fn a_preset_that_needs_a_root_without_one_is_refused() {
    let d = error(
        "version: 1\npreset: files_readonly\n",
        codes::CONFIG_MISSING_KEY,
    );
    assert!(d.message.contains("`root`"), "{d}");
}

#[test]
fn full_access_without_unsafe_is_refused() {
    error(
        "version: 1\nroot: /workspace\npreset: full_access\n",
        codes::CONFIG_UNSAFE_REQUIRED,
    );
}

#[test]
fn enable_of_a_path_op_without_a_root_is_refused() {
    let d = error(
        "version: 1\nenable: [files.read]\n",
        codes::CONFIG_MISSING_KEY,
    );
    assert_eq!(d.location, "root");
    assert_eq!(span_line(&d), 2);
}

#[test]
fn a_json_config_loads_the_same_as_yaml() {
    let yaml = load(
        "version: 1
root: /workspace
enable: [files.read]
rules:
  - deny: [files.delete]
    reason: no deletes
",
    );
    let json = crate::load(
        r#"{
  "version": 1,
  "root": "/workspace",
  "enable": ["files.read"],
  "rules": [{"deny": ["files.delete"], "reason": "no deletes"}]
}"#,
    );
    assert_eq!(shape(&json), shape(&yaml));
    assert_eq!(json.state_dir, yaml.state_dir);
    let agent = corral_policy::Principal::new("agent", &[]);
    for (op, path) in [
        ("files.read", "/workspace/a.txt"),
        ("files.read", "/etc/passwd"),
        ("files.delete", "/workspace/a.txt"),
        ("files.write", "/workspace/a.txt"),
    ] {
        let args = corral_policy::Args::new().str("path", path);
        let req = corral_policy::Request {
            op,
            principal: &agent,
            args: &args,
        };
        assert_eq!(
            json.engine().decide(&req).kind(),
            yaml.engine().decide(&req).kind(),
            "{op} {path}"
        );
    }
}

/// What a loaded config says, without where it was written.
fn shape(l: &corral_config::Loaded) -> String {
    let c = &l.config;
    let values = |v: &[corral_config::model::Spanned<String>]| {
        v.iter().map(|s| s.value.clone()).collect::<Vec<_>>()
    };
    let rules: Vec<String> = c
        .rules
        .iter()
        .map(|r| {
            format!(
                "{} {:?} {:?} {:?}",
                r.name,
                r.effect,
                values(&r.selectors),
                r.reason
            )
        })
        .collect();
    let policy: Vec<String> = l
        .policy
        .rules
        .iter()
        .map(|r| format!("{} {:?} {:?}", r.name, r.effect, r.selectors))
        .collect();
    format!(
        "version {} root {:?} enable {:?} rules {rules:?} policy {policy:?}",
        c.version,
        c.root.as_ref().map(|r| &r.value),
        values(&c.enable),
    )
}

#[test]
fn a_json_config_with_a_misspelt_key_gets_the_same_error_with_its_position() {
    let json = "{\n  \"version\": 1,\n  \"rootz\": \"/workspace\"\n}\n";
    let e = load_err("corral.json", json);
    let d = the(&e.diagnostics, codes::CONFIG_UNKNOWN_KEY, Severity::Error);
    assert_eq!(d.fix, "did you mean `root`?");
    let s = d.span.unwrap();
    assert_eq!((s.line, s.col), (3, 3));
    assert_eq!(e.file_name, "corral.json");
}

#[test]
fn invalid_yaml_is_a_parse_error_with_its_line() {
    let yaml = "version: 1\nrules:\n  - allow: [files.read\n    paths: {roots: [/w]}\nroot: /w\n";
    let d = error(yaml, codes::CONFIG_PARSE);
    assert!(
        d.message.starts_with("the file is not valid YAML or JSON"),
        "{d}"
    );
    assert_eq!(
        span_line(&d),
        4,
        "the parser stops on the line after the open list: {d}"
    );
}

#[test]
fn invalid_json_is_a_parse_error_with_its_line() {
    let d = error(
        "{\n  \"version\": 1\n  \"root\": \"/w\"\n}\n",
        codes::CONFIG_PARSE,
    );
    assert_eq!(span_line(&d), 3, "{d}");
}

#[test]
fn a_duplicate_key_is_a_parse_error_at_the_second_one() {
    let d = error("version: 1\nroot: /a\nroot: /b\n", codes::CONFIG_PARSE);
    assert!(d.message.contains("`root` appears twice"), "{d}");
    assert_eq!(span_line(&d), 3);
}

#[test]
fn a_config_with_many_mistakes_reports_each_one() {
    let diags = errors(
        "version: 1
rootz: /workspace
limits: {timeout: 5min}
audit: {sink: stder}
",
    );
    the(&diags, codes::CONFIG_UNKNOWN_KEY, Severity::Error);
    the(&diags, codes::CONFIG_INVALID_DURATION, Severity::Error);
    let sink = the(&diags, codes::CONFIG_INVALID_VALUE, Severity::Error);
    assert_eq!(sink.fix, "did you mean `stderr`?");
}

#[test]
fn a_missing_file_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = corral_config::load_file(&dir.path().join("nope.yaml")).unwrap_err();
    let d = the(&e.diagnostics, codes::CONFIG_IO, Severity::Error);
    assert!(d.fix.contains("corral init"), "{d}");
    assert!(e.source.is_empty());
}

#[test]
fn a_file_on_disk_anchors_the_state_dir_next_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corral.yaml");
    std::fs::write(&path, "version: 1\n").unwrap();
    let loaded = corral_config::load_file(&path).unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(loaded.state_dir, dir.path().join(".corral"));
}

/// Every diagnostic reads `<what> (<where>); <fix>; see: docs/errors.md#<code>`.
fn assert_display_form(d: &Diagnostic) {
    let expected = format!(
        "{} ({}); {}; see: docs/errors.md#{}",
        d.message,
        d.place(),
        d.fix,
        d.code
    );
    assert_eq!(d.to_string(), expected);
    assert!(!d.message.is_empty(), "{d}");
    assert!(
        !d.fix.is_empty(),
        "every diagnostic says how to fix it: {d}"
    );
    assert!(
        codes::lookup(d.code).is_some(),
        "`{}` is not in the catalog",
        d.code
    );
    if let Some(s) = d.span {
        assert!(
            d.to_string()
                .contains(&format!("line {}, column {}", s.line, s.col)),
            "{d}"
        );
    }
}

#[test]
fn every_diagnostic_reads_what_where_fix_and_doc() {
    let broken = [
        "version: 1\nrootz: /workspace\n",
        "version: 1\nrules:\n  - allow: [files.dowload]\n    paths: [/w]\n",
        "version: 1\nlimits: {max_bytes: 10 MB, timeout: 5min, rate: 10/fortnight}\n",
        "version: 1\nauth:\n  tokens:\n    - {id: a, token: x, token_env: CORRAL_AGENT_TOKEN}\n",
        "version: 1\nauth:\n  tokens:\n    - {id: a, token_env: CORRAL_UNSET_TOKEN}\n",
        "version: 1\nauth:\n  tokens:\n    - {id: a, token_env: CORRAL_SHORT_TOKEN}\n",
        "root: /w\n",
        "version: 2\n",
        "version: 1\ncustom:\n  files.mine: {argv: [/bin/true], effects: [read]}\n",
        "version: 1\ntiers: {files.delete: read}\n",
        "version: 1\nroot: /w\npreset: workspace-jial\n",
        "version: 1\nrules: [\n",
    ];
    for text in broken {
        let e: LoadError = load_err("corral.yaml", text);
        assert!(!e.diagnostics.is_empty());
        e.diagnostics.iter().for_each(assert_display_form);
    }
    let lint_findings = corral_config::lint::lint(&load(
        "version: 1
rules:
  - allow: [\"*\"]
    paths: {roots: [/], unsafe: true, symlinks: follow, readonly: true}
    commands: {allow: [\"python3 ...\", \"cat {path}\"], shell: true, env_set: {MY_TOKEN: x}}
    urls: {hosts: [example.com], block_private: false}
    principals: [\"role:nobody\"]
custom:
  kafka.delete_topic: {argv: [/bin/k, \"{file}\"], params: {file: string}, effects: [read]}
  kafka.purge: {argv: [/bin/k]}
state_only: {kafka.list: \"nothing\"}
",
    ));
    assert!(lint_findings.len() >= 10, "{}", list(&lint_findings));
    lint_findings.iter().for_each(assert_display_form);
}

#[test]
fn a_diagnostic_without_a_location_or_span_says_the_config() {
    let d = Diagnostic::error(codes::LINT_OPEN_MODE, "m", "", None);
    assert_eq!(
        d.to_string(),
        format!(
            "m (the config); {}; see: docs/errors.md#lint.open_mode",
            codes::lookup(codes::LINT_OPEN_MODE).unwrap().fix
        )
    );
}

#[test]
fn an_empty_mcp_host_allow_list_is_refused_rather_than_admitting_every_host() {
    let d = error(
        "version: 1\nmcp:\n  allowed_hosts: []\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "mcp.allowed_hosts");
    assert!(d.fix.contains("remove the key"), "{d}");
}

#[test]
fn a_trusted_proxy_that_is_not_a_network_does_not_load() {
    for (bad, why) in [
        ("10.0.0.0/33", "prefix length `33`"),
        ("10.0.0.1/8", "the network is `10.0.0.0/8`"),
        ("proxy.example.com", "not an IPv4 or IPv6 address"),
        ("fd00::/129", "prefix length `129`"),
    ] {
        let d = error(
            &format!("version: 1\nconsole:\n  trusted_proxies: [10.1.0.0/16, \"{bad}\"]\n"),
            codes::CONFIG_INVALID_VALUE,
        );
        assert_eq!(d.location, "console.trusted_proxies[1]", "{d}");
        assert!(d.message.contains(why), "{bad}: {d}");
        assert_eq!(d.span.unwrap().line, 3);
    }
    let d = error(
        "version: 1\nconsole: {sign_in_rate: 10}\n",
        codes::CONFIG_INVALID_RATE,
    );
    assert_eq!(d.location, "console.sign_in_rate");
}

#[test]
fn the_console_reads_its_sign_in_rate_and_trusted_networks() {
    let l = crate::load(
        "version: 1\nconsole: {sign_in_rate: 30/min, trusted_proxies: [10.0.0.0/8, \"fd00::/8\", 192.0.2.7]}\n",
    );
    let c = &l.config.console;
    let r = c.sign_in_limit().unwrap();
    assert_eq!((r.count, r.per.as_secs()), (30, 60));
    let nets: Vec<String> = c.trusted_proxies.iter().map(ToString::to_string).collect();
    assert_eq!(nets, ["10.0.0.0/8", "fd00::/8", "192.0.2.7/32"]);
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert!(c.trusted_proxies[0].contains(ip("10.200.1.1")));
    assert!(c.trusted_proxies[0].contains(ip("::ffff:10.0.0.1")));
    assert!(!c.trusted_proxies[0].contains(ip("11.0.0.1")));
    assert!(c.trusted_proxies[1].contains(ip("fd12::1")));
    assert!(!c.trusted_proxies[1].contains(ip("fe80::1")));
    // Absent: 10 a minute, no proxy trusted.
    let d = crate::load("version: 1\n");
    let r = d.config.console.sign_in_limit().unwrap();
    assert_eq!((r.count, r.per.as_secs()), (10, 60));
    assert!(d.config.console.trusted_proxies.is_empty());
    let off = crate::load("version: 1\nconsole:\n  sign_in_rate: off\n");
    assert_eq!(off.config.console.sign_in_limit(), None);
}

#[test]
fn an_upstream_server_needs_a_command_and_a_name_fit_for_an_op_id() {
    let d = error(
        "version: 1\nmcp_servers:\n  notes:\n    tools: {search: {effects: [read]}}\n",
        codes::CONFIG_MISSING_KEY,
    );
    assert_eq!(d.location, "mcp_servers.notes");
    let d = error(
        "version: 1\nmcp_servers:\n  \"no.dots\":\n    command: [x]\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "mcp_servers.no.dots");
}

#[test]
fn a_custom_op_may_not_take_the_upstream_namespace() {
    let e = load_err(
        "corral.yaml",
        "version: 1\ncustom:\n  mcp.fake.tool:\n    argv: [\"true\"]\n    effects: [read]\n",
    );
    assert!(
        e.diagnostics.iter().any(|d| d.message.contains("mcp")),
        "{}",
        list(&e.diagnostics)
    );
}

// issue 12 item 1: `isolation.cgroup_parent` is a key, with a did-you-mean, and must be absolute.
#[test]
fn isolation_cgroup_parent_loads_is_spelt_right_and_is_absolute() {
    let loaded = load("version: 1\nisolation: {cgroup_parent: /sys/fs/cgroup/corral.slice}\n");
    assert_eq!(
        loaded.config.isolation.cgroup_parent,
        Some(std::path::PathBuf::from("/sys/fs/cgroup/corral.slice"))
    );
    let d = error(
        "version: 1\nisolation: {cgroup_parnet: /sys/fs/cgroup/x}\n",
        codes::CONFIG_UNKNOWN_KEY,
    );
    assert_eq!(d.fix, "did you mean `cgroup_parent`?");
    let d = error(
        "version: 1\nisolation: {cgroup_parent: corral.slice}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "isolation.cgroup_parent");
    assert!(d.fix.contains("full path"), "{d}");
}

// issue 12 item 2 (as root): `isolation.host_uids` is `auto`, `root` or a usable range.
#[test]
fn isolation_host_uids_takes_auto_root_or_a_usable_range_and_says_why_not() {
    for ok in ["auto", "root", "\"1879048192:65536\""] {
        let loaded = load(&format!("version: 1\nisolation: {{host_uids: {ok}}}\n"));
        assert_eq!(
            loaded.config.isolation.host_uids.as_deref(),
            Some(ok.trim_matches('"'))
        );
    }
    for bad in [
        "nobody",
        "\"0:65536\"",
        "\"100000:100\"",
        "\"4294967000:65536\"",
    ] {
        let d = error(
            &format!("version: 1\nisolation: {{host_uids: {bad}}}\n"),
            codes::CONFIG_INVALID_VALUE,
        );
        assert_eq!(d.location, "isolation.host_uids", "{bad}: {d}");
        assert!(d.fix.contains("START:COUNT"), "{bad}: {d}");
    }
}

// `run:` (the profile of `corral run --config F`) is decoded with the same diagnostics.
#[test]
fn a_misspelt_run_key_names_its_path_and_the_closest_key() {
    let yaml = "version: 1\nrun:\n  profile: readonly\n  limits: {memroy: 1GiB}\n";
    let d = error(yaml, codes::CONFIG_UNKNOWN_KEY);
    assert_eq!(d.location, "run.limits.memroy");
    assert_eq!(d.fix, "did you mean `memory`?");
    assert_eq!(span_line(&d), 4);
}

#[test]
fn a_run_profile_network_env_or_limit_that_is_malformed_is_reported_where_it_is_written() {
    let yaml = "version: 1
run:
  profile: read-only
  network: {allow: [\"no-port\"]}
  env: [\"BAD NAME=1\"]
  limits: {timeout: 5 minutes, write_quota: lots, processes: 0}
";
    let diags = errors(yaml);
    let profile = diags.iter().find(|d| d.location == "run.profile");
    assert_eq!(
        profile.map(|d| (d.code, d.fix.as_str())),
        Some((codes::CONFIG_INVALID_VALUE, "did you mean `readonly`?")),
        "{}",
        list(&diags)
    );
    let at: Vec<&str> = diags.iter().map(|d| d.location.as_str()).collect();
    for place in [
        "run.network.allow[0]",
        "run.env[0]",
        "run.limits.timeout",
        "run.limits.write_quota",
        "run.limits.processes",
    ] {
        assert!(at.contains(&place), "{place} in {at:?}");
    }
}

#[test]
fn a_run_section_decodes_every_key() {
    let loaded = load(
        "version: 1
run:
  profile: none
  read: [/opt/tools]
  write: [out]
  network: {allow: [\"pypi.org:443\"]}
  env: [GITHUB_TOKEN, LANG=C.UTF-8]
  limits: {memory: 2GiB, processes: 256, timeout: 10m, write_quota: 64MiB}
",
    );
    let Some(r) = loaded.config.run else {
        unreachable!("the run section is decoded")
    };
    assert_eq!(
        r.profile.map(|p| p.value),
        Some(corral_config::RunProfile::None)
    );
    let strings = |v: &[corral_config::model::Spanned<String>]| -> Vec<String> {
        v.iter().map(|s| s.value.clone()).collect()
    };
    assert_eq!(strings(&r.read), ["/opt/tools"]);
    assert_eq!(strings(&r.write), ["out"]);
    assert_eq!(strings(&r.env), ["GITHUB_TOKEN", "LANG=C.UTF-8"]);
    assert_eq!(
        r.network.map(|n| n.summary()).as_deref(),
        Some("allow: pypi.org:443")
    );
    assert_eq!(r.memory, Some(2 << 30));
    assert_eq!(r.processes, Some(256));
    assert_eq!(r.timeout, Some(std::time::Duration::from_secs(600)));
    assert_eq!(r.write_quota, Some(64 << 20));
}
