//! One config that triggers each lint finding (code, severity and the line it points at) and
//! one near miss that must not.

use corral_config::{Diagnostic, Severity, lint};
use corral_policy::codes;

use crate::{list, load, span_line, the};

/// Lints a config that must load.
fn findings(yaml: &str) -> Vec<Diagnostic> {
    lint::lint(&load(yaml))
}

/// Asserts that `yaml` yields exactly one `code` finding of `severity`, pointing at the line
/// where `marker` is first written; returns it.
fn finds(yaml: &str, code: &str, severity: Severity, marker: &str) -> Diagnostic {
    let all = findings(yaml);
    let d = the(&all, code, severity).clone();
    assert_eq!(
        span_line(&d),
        crate::line_of(yaml, marker),
        "`{code}` points at the wrong line: {d}\nin:\n{yaml}"
    );
    d
}

/// Asserts that `yaml` yields no `code` finding at all.
fn misses(yaml: &str, code: &str) {
    let all = findings(yaml);
    assert!(
        all.iter().all(|d| d.code != code),
        "`{code}` should not be reported for:\n{yaml}\nfindings:\n{}",
        list(&all)
    );
}

/// One authenticated token, so the open-mode finding stays out of the way.
const AUTH: &str = "
auth:
  tokens:
    - id: agent
      roles: [operator]
      token_env: CORRAL_AGENT_TOKEN
";

fn with_auth(body: &str) -> String {
    format!("{body}{AUTH}")
}

// ---------------------------------------------------------------- lint.allow_all

#[test]
fn a_rule_that_allows_every_op_is_an_error_at_its_selector() {
    let yaml = with_auth(
        "version: 1
rules:
  - name: everything
    allow:
      - \"*\"
    paths: {roots: [/workspace]}
    commands: {allow: [\"pytest\"], cwd: /workspace}
    urls: {hosts: [example.com]}
",
    );
    let d = finds(&yaml, codes::LINT_ALLOW_ALL, Severity::Error, "- \"*\"");
    assert_eq!(d.location, "rules[0].allow[0]");
}

#[test]
fn a_rule_that_allows_a_namespace_is_not_allow_all() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [\"files.*\"]
    paths: {roots: [/workspace]}
",
        ),
        codes::LINT_ALLOW_ALL,
    );
}

#[test]
fn the_full_access_preset_allows_every_op_without_an_allow_all_finding() {
    let yaml = with_auth(
        "version: 1
preset:
  name: full_access
  unsafe: true
root: /workspace
",
    );
    let all = findings(&yaml);
    assert!(
        all.iter().all(|d| d.code != codes::LINT_ALLOW_ALL),
        "{}",
        list(&all)
    );
    the(&all, codes::LINT_FULL_ACCESS, Severity::Error);
}

// ---------------------------------------------------------------- lint.matches_nothing

#[test]
fn a_selector_that_reaches_no_op_is_a_warning_at_the_selector() {
    let yaml = with_auth(
        "version: 1
rules:
  - deny:
      - \"kafka.*\"
",
    );
    let d = finds(
        &yaml,
        codes::LINT_MATCHES_NOTHING,
        Severity::Warning,
        "\"kafka.*\"",
    );
    assert_eq!(d.location, "rules[0].deny[0]");
}

#[test]
fn an_allow_selector_that_reaches_only_explicit_only_ops_matches_nothing() {
    let yaml = with_auth(
        "version: 1
custom:
  kafka.purge_all:
    argv: [/usr/bin/kafka-purge]
rules:
  - allow:
      - \"kafka.*\"
",
    );
    let d = finds(
        &yaml,
        codes::LINT_MATCHES_NOTHING,
        Severity::Warning,
        "\"kafka.*\"",
    );
    assert!(d.message.contains("explicit-only"), "{d}");
    assert!(d.fix.contains("exact id"), "{d}");
}

#[test]
fn a_selector_that_names_an_explicit_only_op_exactly_matches_it() {
    misses(
        &with_auth(
            "version: 1
custom:
  kafka.purge_all:
    argv: [/usr/bin/kafka-purge]
rules:
  - allow: [kafka.purge_all]
  - deny: [\"kafka.*\"]
    principals: [\"role:viewer\"]
",
        ),
        codes::LINT_MATCHES_NOTHING,
    );
}

#[test]
fn an_effect_selector_with_no_op_of_that_effect_matches_nothing() {
    finds(
        &with_auth(
            // The only built-in admin ops are the agents' installs: without them, nothing is admin.
            "version: 1
disabled_ops: [agents.codex.install, agents.claude_code.install]
rules:
  - deny: [\"effect:admin\"]
",
        ),
        codes::LINT_MATCHES_NOTHING,
        Severity::Warning,
        "effect:admin",
    );
    misses(
        &with_auth(
            "version: 1
rules:
  - deny: [\"effect:delete\"]
",
        ),
        codes::LINT_MATCHES_NOTHING,
    );
}

// ---------------------------------------------------------------- lint.shadowed_rule

#[test]
fn an_allow_rule_whose_ops_an_unscoped_deny_refuses_is_shadowed() {
    let yaml = with_auth(
        "version: 1
rules:
  - name: read-files
    allow: [files.read]
    paths: {roots: [/workspace]}
  - name: no-files
    deny: [\"files.*\"]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_SHADOWED_RULE,
        Severity::Warning,
        "name: read-files",
    );
    assert_eq!(d.location, "rules[0]");
    assert!(d.message.contains("no-files"), "{d}");
    assert!(d.fix.contains("rules[1]"), "{d}");
}

#[test]
fn enable_is_shadowed_when_disable_lists_the_same_ops() {
    let yaml = with_auth(
        "version: 1
root: /workspace
enable: [files.read]
disable: [files.read]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_SHADOWED_RULE,
        Severity::Warning,
        "enable:",
    );
    assert_eq!(d.location, "enable");
}

#[test]
fn an_allow_rule_that_repeats_an_earlier_one_is_shadowed() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
  - allow: [files.read]
    paths: {roots: [/workspace]}
",
    );
    let all = findings(&yaml);
    let d = the(&all, codes::LINT_SHADOWED_RULE, Severity::Warning);
    assert_eq!(d.location, "rules[1]");
    assert_eq!(span_line(d), 5, "{d}");
}

#[test]
fn a_deny_with_a_path_scope_does_not_shadow_the_allow_it_narrows() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
  - deny: [\"files.*\"]
    paths: {roots: [/workspace/secret]}
  - allow: [files.read]
    paths: {roots: [/data]}
",
        ),
        codes::LINT_SHADOWED_RULE,
    );
}

#[test]
fn a_deny_for_one_role_does_not_shadow_an_allow_for_everyone() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
  - deny: [files.read]
    principals: [\"role:operator\"]
",
        ),
        codes::LINT_SHADOWED_RULE,
    );
}

// ---------------------------------------------------------------- lint.writable_script

#[test]
fn a_command_that_runs_a_file_callers_may_write_is_an_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [files.write]
    paths: {roots: [/workspace]}
  - name: grade
    allow: [commands.run]
    commands: {allow: [\"python3 /workspace/grade.py\"], cwd: /workspace}
",
    );
    let d = finds(
        &yaml,
        codes::LINT_WRITABLE_SCRIPT,
        Severity::Error,
        "commands: {allow: [\"python3 /workspace/grade.py\"]",
    );
    assert_eq!(d.location, "rules[1].commands");
    assert!(d.message.contains("/workspace/grade.py"), "{d}");
    assert!(d.message.contains("files.write"), "{d}");
}

#[test]
fn a_relative_script_is_resolved_against_the_cwd() {
    finds(
        &with_auth(
            "version: 1
rules:
  - allow: [files.write]
    paths: {roots: [/workspace]}
  - name: grade
    allow: [commands.run]
    commands: {allow: [\"python3 grade.py\"], cwd: /workspace}
",
        ),
        codes::LINT_WRITABLE_SCRIPT,
        Severity::Error,
        "commands: {allow: [\"python3 grade.py\"]",
    );
}

#[test]
fn a_preset_that_runs_a_script_in_its_writable_root_is_an_error_at_the_preset() {
    let yaml = with_auth(
        "version: 1
root: /workspace
preset:
  name: workspace_jail
  commands: [\"python3 grade.py\"]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_WRITABLE_SCRIPT,
        Severity::Error,
        "name: workspace_jail",
    );
    assert!(d.message.contains("/workspace/grade.py"), "{d}");
    misses(
        &with_auth(
            "version: 1
root: /workspace
preset:
  name: workspace_jail
  readonly: true
  commands: [\"python3 grade.py\"]
",
        ),
        codes::LINT_WRITABLE_SCRIPT,
    );
}

#[test]
fn a_script_outside_every_writable_scope_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [files.write]
    paths: {roots: [/workspace]}
  - allow: [files.read]
    paths: {roots: [/opt/grader]}
  - allow: [commands.run]
    commands: {allow: [\"python3 /opt/grader/grade.py\"], cwd: /workspace}
",
        ),
        codes::LINT_WRITABLE_SCRIPT,
    );
}

#[test]
fn a_script_in_a_read_only_scope_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [\"files.*\"]
    paths: {roots: [/workspace], readonly: true}
  - allow: [commands.run]
    commands: {allow: [\"python3 /workspace/grade.py\"], cwd: /workspace}
",
        ),
        codes::LINT_WRITABLE_SCRIPT,
    );
}

#[test]
fn a_script_the_writable_scope_denies_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [files.write]
    paths: {roots: [/workspace], deny: [grade.py]}
  - allow: [commands.run]
    commands: {allow: [\"python3 /workspace/grade.py\"], cwd: /workspace}
",
        ),
        codes::LINT_WRITABLE_SCRIPT,
    );
}

// ---------------------------------------------------------------- lint.root_is_slash

#[test]
fn an_allow_scope_rooted_at_slash_is_an_error_at_the_scope() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [files.read]
    paths:
      roots: [/]
      unsafe: true
",
    );
    let d = finds(
        &yaml,
        codes::LINT_ROOT_IS_SLASH,
        Severity::Error,
        "roots: [/]",
    );
    assert_eq!(d.location, "rules[0].paths");
}

#[test]
fn a_deny_scope_rooted_at_slash_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
  - deny: [files.delete]
    paths: {roots: [/]}
",
        ),
        codes::LINT_ROOT_IS_SLASH,
    );
}

// ---------------------------------------------------------------- lint.symlinks_follow

#[test]
fn a_scope_that_follows_symlinks_is_an_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [files.read]
    paths:
      roots: [/workspace]
      symlinks: follow
      unsafe: true
",
    );
    let d = finds(
        &yaml,
        codes::LINT_SYMLINKS_FOLLOW,
        Severity::Error,
        "roots: [/workspace]",
    );
    assert_eq!(d.location, "rules[0].paths.symlinks");
}

#[test]
fn a_scope_that_keeps_symlinks_within_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace], symlinks: within}
",
        ),
        codes::LINT_SYMLINKS_FOLLOW,
    );
}

// ---------------------------------------------------------------- lint.shell

#[test]
fn a_command_scope_with_the_shell_on_is_an_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [commands.run]
    commands:
      allow: [\"pytest\"]
      cwd: /workspace
      shell: true
",
    );
    let d = finds(
        &yaml,
        codes::LINT_SHELL,
        Severity::Error,
        "allow: [\"pytest\"]",
    );
    assert_eq!(d.location, "rules[0].commands.shell");
}

#[test]
fn a_command_scope_with_the_shell_off_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [commands.run]
    commands: {allow: [\"pytest\"], cwd: /workspace, shell: false}
",
        ),
        codes::LINT_SHELL,
    );
}

// ---------------------------------------------------------------- lint.escape_capable_command

#[test]
fn an_interpreter_with_free_arguments_is_an_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [commands.run]
    commands:
      allow:
        - \"pytest tests/...\"
        - \"python3 ...\"
      cwd: /workspace
",
    );
    let d = finds(
        &yaml,
        codes::LINT_ESCAPE_CAPABLE_COMMAND,
        Severity::Error,
        "- \"python3 ...\"",
    );
    assert_eq!(d.location, "rules[0].commands.allow[1]");
    assert!(d.message.contains("`python3 ...`"), "{d}");
}

#[test]
fn an_interpreter_pinned_to_one_script_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [commands.run]
    commands: {allow: [\"python3 /workspace/grade.py\", \"git status\"], cwd: /workspace}
",
        ),
        codes::LINT_ESCAPE_CAPABLE_COMMAND,
    );
}

#[test]
fn an_interpreter_given_any_script_path_or_a_glob_is_an_error() {
    for pattern in ["bash {path}", "python3 tests/*.py", "/usr/bin/env pytest"] {
        let yaml = with_auth(&format!(
            "version: 1
rules:
  - allow: [commands.run]
    commands: {{allow: [\"{pattern}\"], cwd: /workspace}}
"
        ));
        let all = findings(&yaml);
        the(&all, codes::LINT_ESCAPE_CAPABLE_COMMAND, Severity::Error);
    }
}

#[test]
fn a_versioned_interpreter_with_free_arguments_is_an_error() {
    for pattern in ["python3.11 ...", "/usr/bin/node18 ...", "bash5 -c ..."] {
        let yaml = with_auth(&format!(
            "version: 1
rules:
  - allow: [commands.run]
    commands: {{allow: [\"{pattern}\"], cwd: /workspace}}
"
        ));
        let all = findings(&yaml);
        let d = the(&all, codes::LINT_ESCAPE_CAPABLE_COMMAND, Severity::Error);
        assert!(d.message.contains(pattern), "{d}");
    }
}

#[test]
fn a_non_interpreter_with_free_arguments_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [commands.run]
    commands: {allow: [\"pytest ...\", \"cat {path}\"], cwd: /workspace}
",
        ),
        codes::LINT_ESCAPE_CAPABLE_COMMAND,
    );
}

// ---------------------------------------------------------------- lint.path_without_cwd

#[test]
fn a_path_placeholder_without_a_cwd_is_a_warning() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [commands.run]
    commands:
      allow: [\"cat {path}\"]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_PATH_WITHOUT_CWD,
        Severity::Warning,
        "allow: [\"cat {path}\"]",
    );
    assert_eq!(d.location, "rules[0].commands.allow[0]");
}

#[test]
fn a_path_placeholder_in_a_later_pattern_points_at_that_pattern() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [commands.run]
    commands:
      - \"pytest\"
      - \"cat {path}\"
",
    );
    let d = finds(
        &yaml,
        codes::LINT_PATH_WITHOUT_CWD,
        Severity::Warning,
        "- \"cat {path}\"",
    );
    assert_eq!(d.location, "rules[0].commands.allow[1]");
}

#[test]
fn a_path_placeholder_with_a_cwd_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [commands.run]
    commands: {allow: [\"cat {path}\"], cwd: /workspace}
",
        ),
        codes::LINT_PATH_WITHOUT_CWD,
    );
}

// ---------------------------------------------------------------- lint.undeclared_path_param

#[test]
fn a_path_like_param_typed_string_is_an_error_at_the_param() {
    let yaml = with_auth(
        "version: 1
custom:
  reports.render:
    argv: [/usr/bin/render, \"{file}\"]
    params:
      file: {type: string}
    effects: [read]
rules:
  - allow: [reports.render]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_UNDECLARED_PATH_PARAM,
        Severity::Error,
        "file: {type: string}",
    );
    assert_eq!(d.location, "custom.reports.render.params.file");
}

#[test]
fn a_word_param_placed_inside_a_path_is_an_error() {
    finds(
        &with_auth(
            "version: 1
custom:
  reports.render:
    argv: [/usr/bin/render, \"/data/{name}\"]
    params:
      name: {type: word}
    effects: [read]
rules:
  - allow: [reports.render]
",
        ),
        codes::LINT_UNDECLARED_PATH_PARAM,
        Severity::Error,
        "name: {type: word}",
    );
}

#[test]
fn a_path_param_typed_path_or_a_plain_word_is_fine() {
    misses(
        &with_auth(
            "version: 1
custom:
  reports.render:
    argv: [/usr/bin/render, \"{file}\", \"--name={name}\"]
    params:
      file: {type: path, root: /workspace/reports}
      name: {type: word}
    effects: [read]
rules:
  - allow: [reports.render]
",
        ),
        codes::LINT_UNDECLARED_PATH_PARAM,
    );
}

// ---------------------------------------------------------------- lint.custom_op_without_effects

#[test]
fn a_custom_op_without_effects_is_a_warning_at_its_id() {
    let yaml = with_auth(
        "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
rules:
  - allow: [kafka.list_topics]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_CUSTOM_OP_WITHOUT_EFFECTS,
        Severity::Warning,
        "kafka.list_topics:",
    );
    assert_eq!(d.location, "custom.kafka.list_topics");
}

#[test]
fn a_custom_op_with_an_empty_effects_list_is_a_warning_too() {
    let all = findings(&with_auth(
        "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: []
rules:
  - allow: [kafka.list_topics]
",
    ));
    the(
        &all,
        codes::LINT_CUSTOM_OP_WITHOUT_EFFECTS,
        Severity::Warning,
    );
}

#[test]
fn a_custom_op_with_effects_is_fine() {
    misses(
        &with_auth(
            "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
rules:
  - allow: [kafka.list_topics]
",
        ),
        codes::LINT_CUSTOM_OP_WITHOUT_EFFECTS,
    );
}

// ---------------------------------------------------------------- lint.open_mode

#[test]
fn open_mode_with_exec_mounted_is_an_error() {
    let all = findings(
        "version: 1
rules:
  - allow: [commands.run]
    commands: {allow: [\"pytest\"], cwd: /workspace}
",
    );
    let d = the(&all, codes::LINT_OPEN_MODE, Severity::Error);
    assert!(d.message.contains("`commands.run`"), "{d}");
    assert_eq!(d.location, "auth");
    assert_eq!(d.span, None, "open mode is about what is missing: {d}");
}

#[test]
fn open_mode_with_an_admin_custom_op_mounted_is_an_error() {
    let all = findings(
        "version: 1
custom:
  db.vacuum:
    argv: [/usr/bin/vacuumdb]
rules:
  - allow: [db.vacuum]
",
    );
    let d = the(&all, codes::LINT_OPEN_MODE, Severity::Error);
    assert!(d.message.contains("`db.vacuum`"), "{d}");
}

#[test]
fn open_mode_with_only_reads_mounted_is_a_note() {
    let all = findings(
        "version: 1
root: /workspace
enable: [files.read]
",
    );
    the(&all, codes::LINT_OPEN_MODE, Severity::Note);
    assert!(
        !all.iter()
            .any(|d| d.code == codes::LINT_OPEN_MODE && d.severity == Severity::Error),
        "{}",
        list(&all)
    );
}

#[test]
fn exec_mounted_only_for_a_role_is_not_an_open_mode_error() {
    let all = findings(
        "version: 1
rules:
  - allow: [commands.run]
    principals: [\"role:operator\"]
    commands: {allow: [\"pytest\"], cwd: /workspace}
",
    );
    the(&all, codes::LINT_OPEN_MODE, Severity::Note);
}

#[test]
fn a_config_with_tokens_is_not_in_open_mode() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [commands.run]
    commands: {allow: [\"pytest\"], cwd: /workspace}
",
        ),
        codes::LINT_OPEN_MODE,
    );
}

// ---------------------------------------------------------------- lint.unreachable_principal

#[test]
fn a_role_no_token_has_is_a_warning_at_the_principal() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
    principals:
      - \"role:operator\"
      - \"role:viewer\"
",
    );
    let d = finds(
        &yaml,
        codes::LINT_UNREACHABLE_PRINCIPAL,
        Severity::Warning,
        "\"role:viewer\"",
    );
    assert_eq!(d.location, "rules[0].principals[1]");
}

#[test]
fn an_id_no_token_has_is_a_warning() {
    let all = findings(&with_auth(
        "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
    principals: [\"id:grader\"]
",
    ));
    the(&all, codes::LINT_UNREACHABLE_PRINCIPAL, Severity::Warning);
}

#[test]
fn principals_that_tokens_produce_are_fine() {
    misses(
        "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
    principals: [\"role:viewer\", \"id:agent\", \"kind:service\", \"*\"]
auth:
  tokens:
    - {id: agent, roles: [operator], token_env: CORRAL_AGENT_TOKEN}
    - {id: dashboard, roles: [viewer], kind: service, token_env: CORRAL_VIEWER_TOKEN}
",
        codes::LINT_UNREACHABLE_PRINCIPAL,
    );
}

// ---------------------------------------------------------------- lint.literal_secret

#[test]
fn env_set_with_a_secret_named_variable_is_an_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [commands.run]
    commands:
      allow: [\"pytest\"]
      cwd: /workspace
      env_set: {GITHUB_TOKEN: not-a-real-value}
",
    );
    let d = finds(
        &yaml,
        codes::LINT_LITERAL_SECRET,
        Severity::Error,
        "allow: [\"pytest\"]",
    );
    assert_eq!(d.location, "rules[0].commands.env_set.GITHUB_TOKEN");
}

#[test]
fn a_github_token_anywhere_in_the_config_is_an_error_at_its_line() {
    let yaml = with_auth(
        "version: 1
rules:
  - deny: [files.delete]
    reason: \"ghp_0123456789abcdefghijklmnopqrstuvwxyz\"
",
    );
    let d = finds(&yaml, codes::LINT_LITERAL_SECRET, Severity::Error, "ghp_");
    assert_eq!(d.span.unwrap().col, 13, "{d}");
}

#[test]
fn an_openai_key_in_a_custom_op_argv_is_an_error_at_its_line() {
    finds(
        &with_auth(
            "version: 1
custom:
  llm.ask:
    argv:
      - /usr/bin/ask
      - --key=x
      - sk-abcdefghijklmnopqrstuvwxyz012345
    effects: [net]
rules:
  - allow: [llm.ask]
",
        ),
        codes::LINT_LITERAL_SECRET,
        Severity::Error,
        "sk-abc",
    );
}

#[test]
fn a_key_inside_a_longer_value_is_an_error_at_its_line() {
    let yaml = with_auth(
        "version: 1
custom:
  gh.list_repos:
    argv:
      - /usr/bin/curl
      - -H
      - \"Authorization: Bearer ghp_0123456789abcdefghijklmnopqrstuvwxyz\"
      - https://api.github.com/user/repos
    effects: [net]
rules:
  - allow: [gh.list_repos]
",
    );
    finds(&yaml, codes::LINT_LITERAL_SECRET, Severity::Error, "Bearer");
}

#[test]
fn ordinary_values_and_empty_secret_variables_are_not_secrets() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [commands.run]
    commands:
      allow: [\"pytest\"]
      cwd: /workspace
      env_set: {LANG: C.UTF-8, API_TOKEN: \"\"}
  - deny: [files.delete]
    reason: \"ghp_short and sk-short are not keys\"
",
        ),
        codes::LINT_LITERAL_SECRET,
    );
}

// ---------------------------------------------------------------- lint.mutating_name

#[test]
fn a_read_only_op_named_like_a_change_is_an_error() {
    let yaml = with_auth(
        "version: 1
custom:
  kafka.delete_topic:
    argv: [/usr/bin/kafka-topics, --delete, --topic, \"{topic}\"]
    params: {topic: word}
    effects: [read]
rules:
  - allow: [kafka.delete_topic]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_MUTATING_NAME,
        Severity::Error,
        "kafka.delete_topic:",
    );
    assert_eq!(d.location, "custom.kafka.delete_topic.effects");
}

#[test]
fn a_read_only_op_named_like_a_read_is_fine() {
    misses(
        &with_auth(
            "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
rules:
  - allow: [kafka.list_topics]
",
        ),
        codes::LINT_MUTATING_NAME,
    );
}

#[test]
fn a_mutating_name_with_its_real_effects_is_fine() {
    misses(
        &with_auth(
            "version: 1
custom:
  kafka.delete_topic:
    argv: [/usr/bin/kafka-topics, --delete, --topic, \"{topic}\"]
    params: {topic: word}
    effects: [delete]
rules:
  - allow: [kafka.delete_topic]
",
        ),
        codes::LINT_MUTATING_NAME,
    );
}

#[test]
fn a_mutating_name_listed_in_state_only_with_a_reason_is_fine() {
    let yaml = with_auth(
        "version: 1
custom:
  kafka.delete_topic:
    argv: [/usr/bin/kafka-topics, --delete, --topic, \"{topic}\"]
    params: {topic: word}
    effects: [read]
state_only:
  kafka.delete_topic: \"deletes only the caller's own scratch topic\"
rules:
  - allow: [kafka.delete_topic]
",
    );
    misses(&yaml, codes::LINT_MUTATING_NAME);
    misses(&yaml, codes::LINT_STALE_STATE_ONLY);
}

// ---------------------------------------------------------------- lint.stale_state_only

#[test]
fn a_state_only_entry_for_an_op_that_reads_is_stale() {
    let yaml = with_auth(
        "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
state_only:
  kafka.list_topics: \"lists only\"
rules:
  - allow: [kafka.list_topics]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_STALE_STATE_ONLY,
        Severity::Error,
        "kafka.list_topics: \"lists only\"",
    );
    assert_eq!(d.location, "state_only.kafka.list_topics");
}

#[test]
fn a_state_only_entry_for_an_op_that_declares_its_change_is_stale() {
    finds(
        &with_auth(
            "version: 1
custom:
  kafka.delete_topic:
    argv: [/usr/bin/kafka-topics, --delete, --topic, \"{topic}\"]
    params: {topic: word}
    effects: [delete]
state_only:
  kafka.delete_topic: \"was read-only once\"
rules:
  - allow: [kafka.delete_topic]
",
        ),
        codes::LINT_STALE_STATE_ONLY,
        Severity::Error,
        "kafka.delete_topic: \"was",
    );
}

#[test]
fn a_state_only_entry_for_no_op_at_all_is_stale() {
    finds(
        &with_auth(
            "version: 1
state_only:
  kafka.gone: \"removed last week\"
",
        ),
        codes::LINT_STALE_STATE_ONLY,
        Severity::Error,
        "kafka.gone",
    );
}

// ---------------------------------------------------------------- lint.unmounted_custom_op

#[test]
fn a_custom_op_no_rule_mounts_is_a_warning_at_its_id() {
    let yaml = with_auth(
        "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
",
    );
    let d = finds(
        &yaml,
        codes::LINT_UNMOUNTED_CUSTOM_OP,
        Severity::Warning,
        "kafka.list_topics:",
    );
    assert_eq!(d.location, "custom.kafka.list_topics");
}

#[test]
fn a_custom_op_only_a_deny_names_is_unmounted() {
    let all = findings(&with_auth(
        "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
rules:
  - deny: [kafka.list_topics]
",
    ));
    the(&all, codes::LINT_UNMOUNTED_CUSTOM_OP, Severity::Warning);
}

#[test]
fn a_custom_op_mounted_by_its_namespace_is_fine() {
    misses(
        &with_auth(
            "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
rules:
  - allow: [\"kafka.*\"]
",
        ),
        codes::LINT_UNMOUNTED_CUSTOM_OP,
    );
}

// ---------------------------------------------------------------- lint.block_private_off

#[test]
fn a_url_scope_that_reaches_private_addresses_is_an_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [http.fetch]
    urls:
      hosts: [api.example.com]
      block_private: false
",
    );
    let d = finds(
        &yaml,
        codes::LINT_BLOCK_PRIVATE_OFF,
        Severity::Error,
        "hosts: [api.example.com]",
    );
    assert_eq!(d.location, "rules[0].urls.block_private");
}

#[test]
fn a_url_scope_that_blocks_private_addresses_is_fine() {
    misses(
        &with_auth(
            "version: 1
rules:
  - allow: [http.fetch]
    urls: {hosts: [api.example.com], block_private: true}
  - allow: [http.fetch]
    urls: [docs.example.com]
",
        ),
        codes::LINT_BLOCK_PRIVATE_OFF,
    );
}

// ---------------------------------------------------------------- lint.full_access

#[test]
fn the_full_access_preset_is_an_error_at_its_name() {
    let yaml = with_auth(
        "version: 1
root: /workspace
preset:
  name: full_access
  unsafe: true
",
    );
    let d = finds(
        &yaml,
        codes::LINT_FULL_ACCESS,
        Severity::Error,
        "name: full_access",
    );
    assert_eq!(d.location, "preset");
}

#[test]
fn an_unsafe_path_scope_is_a_full_access_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - allow: [files.read]
    paths:
      roots: [/workspace]
      unsafe: true
",
    );
    let d = finds(
        &yaml,
        codes::LINT_FULL_ACCESS,
        Severity::Error,
        "roots: [/workspace]",
    );
    assert_eq!(d.location, "rules[0].paths.unsafe");
}

#[test]
fn a_narrow_preset_is_not_full_access() {
    misses(
        &with_auth(
            "version: 1
root: /workspace
preset: workspace_jail
",
        ),
        codes::LINT_FULL_ACCESS,
    );
}

// ---------------------------------------------------------------- policy.scope_required

#[test]
fn an_allow_for_a_path_op_without_paths_is_a_scope_required_error() {
    let yaml = with_auth(
        "version: 1
rules:
  - name: read-anything
    allow: [files.read, files.stat]
",
    );
    let d = finds(
        &yaml,
        codes::POLICY_SCOPE_REQUIRED,
        Severity::Error,
        "name: read-anything",
    );
    assert_eq!(d.location, "rules[0]");
    assert!(d.message.contains("`files.read`, `files.stat`"), "{d}");
    assert!(d.message.contains("`paths:`"), "{d}");
    assert!(d.fix.contains("paths: {roots:"), "{d}");
}

#[test]
fn an_allow_for_each_scoped_op_without_its_scope_is_one_error_per_scope() {
    let all = findings(&with_auth(
        "version: 1
rules:
  - allow: [commands.run, http.fetch]
",
    ));
    let scope: Vec<&Diagnostic> = all
        .iter()
        .filter(|d| d.code == codes::POLICY_SCOPE_REQUIRED)
        .collect();
    assert_eq!(scope.len(), 2, "{}", list(&all));
    assert!(scope.iter().any(|d| d.message.contains("`commands:`")));
    assert!(scope.iter().any(|d| d.message.contains("`urls:`")));
}

#[test]
fn an_allow_with_the_scope_its_ops_need_is_fine() {
    misses(
        &with_auth(
            "version: 1
root: /workspace
enable: [files.read]
rules:
  - allow: [files.read, files.stat]
    paths: {roots: [/data]}
  - allow: [core.health]
",
        ),
        codes::POLICY_SCOPE_REQUIRED,
    );
}

// ---------------------------------------------------------------- lint::fails

#[test]
fn a_warning_fails_the_check_only_under_strict() {
    let all = findings(&with_auth(
        "version: 1
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
",
    ));
    assert!(
        all.iter().all(|d| d.severity != Severity::Error),
        "{}",
        list(&all)
    );
    the(&all, codes::LINT_UNMOUNTED_CUSTOM_OP, Severity::Warning);
    assert!(!lint::fails(&all, false));
    assert!(lint::fails(&all, true));
}

#[test]
fn an_error_fails_the_check_with_or_without_strict() {
    let all = findings(&with_auth(
        "version: 1
rules:
  - allow: [files.read]
",
    ));
    assert!(lint::fails(&all, false));
    assert!(lint::fails(&all, true));
}

#[test]
fn notes_never_fail_the_check() {
    let all = findings(
        "version: 1
root: /workspace
enable: [files.read]
",
    );
    assert!(
        all.iter().all(|d| d.severity == Severity::Note),
        "{}",
        list(&all)
    );
    assert!(!all.is_empty());
    assert!(!lint::fails(&all, false));
    assert!(!lint::fails(&all, true));
}

#[test]
fn findings_are_sorted_by_position() {
    let all = findings(
        "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace], symlinks: follow, unsafe: true}
  - allow: [commands.run]
    commands: {allow: [\"python3 ...\"], shell: true}
",
    );
    let lines: Vec<usize> = all.iter().filter_map(|d| d.span.map(|s| s.line)).collect();
    assert!(lines.len() >= 4, "{}", list(&all));
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{}", list(&all));
    assert!(
        all.iter()
            .skip_while(|d| d.span.is_some())
            .all(|d| d.span.is_none()),
        "findings without a span come last:\n{}",
        list(&all)
    );
}

// ---------------------------------------------------------------- lint.upstream_tool_undeclared

#[test]
fn an_upstream_tool_without_effects_is_admin_and_a_warning_at_the_tool() {
    let yaml = with_auth(
        "version: 1
mcp_servers:
  notes:
    command: [/opt/notes-mcp]
    tools:
      search: {effects: [read]}
      purge: {}
",
    );
    let d = finds(
        &yaml,
        codes::LINT_UPSTREAM_TOOL_UNDECLARED,
        Severity::Warning,
        "purge",
    );
    assert!(d.message.contains("`purge`"), "{d}");
    let loaded = load(&yaml);
    let purge = loaded.catalog.get("mcp.notes.purge").unwrap();
    assert!(purge.explicit_only);
    assert_eq!(purge.tier(), corral_policy::Tier::Destructive);
    let search = loaded.catalog.get("mcp.notes.search").unwrap();
    assert_eq!(search.tier(), corral_policy::Tier::Read);
}

#[test]
fn an_upstream_server_with_no_declared_tools_is_a_warning_and_declared_ones_are_not() {
    let none = with_auth("version: 1\nmcp_servers:\n  notes:\n    command: [/opt/notes-mcp]\n");
    finds(
        &none,
        codes::LINT_UPSTREAM_TOOL_UNDECLARED,
        Severity::Warning,
        "notes:",
    );
    misses(
        &with_auth(
            "version: 1\nmcp_servers:\n  notes:\n    command: [/opt/notes-mcp]\n    tools:\n      search: {effects: [read]}\n",
        ),
        codes::LINT_UPSTREAM_TOOL_UNDECLARED,
    );
}

// ---------------------------------------------------------------- lint.run_token_human

#[test]
fn a_run_scoped_token_of_kind_human_is_a_warning_and_a_service_one_is_not() {
    let human = "version: 1
auth:
  tokens:
    - {id: eval-agent, token_env: CORRAL_AGENT_TOKEN, run: eval-7}
";
    let d = finds(
        human,
        codes::LINT_RUN_TOKEN_HUMAN,
        Severity::Warning,
        "eval-agent",
    );
    assert!(
        d.message.contains("`eval-agent`") && d.message.contains("`eval-7`"),
        "{d}"
    );
    assert!(d.fix.contains("kind: service"), "{d}");
    misses(
        "version: 1
auth:
  tokens:
    - {id: eval-agent, kind: service, token_env: CORRAL_AGENT_TOKEN, run: eval-7}
    - {id: ada, token_env: CORRAL_ADMIN_TOKEN}
",
        codes::LINT_RUN_TOKEN_HUMAN,
    );
}

// ---------------------------------------------------------------- lint.raised_cap

// Safe by default (issue 11 item 5): raising the default memory cap or write quota is explicit
// and linted; lowering them is not.
#[test]
fn a_rule_that_raises_the_default_memory_cap_or_write_quota_is_a_warning() {
    let yaml = with_auth(
        "version: 1
rules:
  - name: big
    allow: [commands.run]
    commands: {allow: [\"make ...\"], cwd: /workspace}
    limits: {memory: 4GiB, write_quota: 8GiB}
",
    );
    let all = findings(&yaml);
    let raised: Vec<&Diagnostic> = all
        .iter()
        .filter(|d| d.code == codes::LINT_RAISED_CAP)
        .collect();
    assert_eq!(raised.len(), 2, "{}", list(&all));
    assert!(raised.iter().all(|d| d.severity == Severity::Warning));
    assert!(
        raised
            .iter()
            .any(|d| d.message.contains("rules[0].limits.memory") && d.message.contains("4GiB")),
        "{}",
        list(&all)
    );
    assert!(
        raised.iter().any(|d| d.message.contains("write_quota")),
        "{}",
        list(&all)
    );
}

#[test]
fn a_lowered_cap_is_not_linted() {
    misses(
        &with_auth(
            "version: 1
limits: {memory: 512MiB, write_quota: 64MiB}
rules:
  - allow: [commands.run]
    commands: {allow: [\"make ...\"], cwd: /workspace}
",
        ),
        codes::LINT_RAISED_CAP,
    );
}

// Shadow evaluation's ceilings (issue 15 item 4): raising the replay or judge ceiling is linted
// like the other caps; the defaults and a lowered one are not.
#[test]
fn raising_the_replay_or_judge_ceiling_is_a_raised_cap_warning_and_the_defaults_are_not() {
    let all = findings(&with_auth(
        "version: 1
budgets:
  replay: {max_runs: 500, max_calls: 10000}
  judge: {max_calls: 5000}
",
    ));
    let raised: Vec<&Diagnostic> = all
        .iter()
        .filter(|d| d.code == codes::LINT_RAISED_CAP)
        .collect();
    assert_eq!(raised.len(), 2, "{}", list(&all));
    assert!(
        raised
            .iter()
            .any(|d| d.message.contains("`budgets.replay.max_runs`")
                && d.message.contains("100 to 500")),
        "{}",
        list(&all)
    );
    assert!(
        raised
            .iter()
            .any(|d| d.message.contains("`budgets.judge.max_calls`")),
        "{}",
        list(&all)
    );
    misses(
        &with_auth("version: 1\nbudgets: {replay: {max_runs: 5}, judge: {max_calls: 10}}\n"),
        codes::LINT_RAISED_CAP,
    );
}

#[test]
fn the_replay_and_judge_ceilings_decode_with_safe_defaults_and_a_programs_tools_list_is_kept() {
    let c = load("version: 1\n").config;
    assert_eq!(
        (
            c.budgets.replay.max_runs,
            c.budgets.replay.max_calls,
            c.budgets.judge.max_calls
        ),
        (100, 10_000, 1_000)
    );
    let c = load(
        "version: 1
budgets: {max_calls: 50, replay: {max_runs: 7}, judge: {max_calls: 3}}
sandbox:
  programs:
    reader: {command: [python3, r.py], tools: [files.read, files.list]}
    unknown: {command: [python3, u.py]}
",
    )
    .config;
    assert_eq!(c.budgets.max_calls, 50);
    assert_eq!(
        (c.budgets.replay.max_runs, c.budgets.replay.max_calls),
        (7, 10_000)
    );
    assert_eq!(c.budgets.judge.max_calls, 3);
    let tools: Vec<Option<Vec<String>>> = c
        .sandbox
        .programs
        .iter()
        .map(|p| {
            p.tools
                .as_ref()
                .map(|t| t.iter().map(|o| o.value.clone()).collect())
        })
        .collect();
    assert_eq!(
        tools,
        [
            Some(vec!["files.read".to_owned(), "files.list".to_owned()]),
            None
        ]
    );
}

// ---------------------------------------------------------------- lab programs

#[test]
fn lab_programs_under_the_process_backend_are_a_warning_and_a_raised_memory_cap_too() {
    let yaml = with_auth(
        "version: 1
isolation: {backend: process}
sandbox:
  programs:
    agent: {command: [python3, agent.py], memory: 2GiB}
  scorers:
    same: {command: [python3, same.py]}
",
    );
    let all = findings(&yaml);
    let unisolated: Vec<&Diagnostic> = all
        .iter()
        .filter(|d| d.code == codes::LINT_LAB_PROGRAM_UNISOLATED)
        .collect();
    assert_eq!(unisolated.len(), 2, "{}", list(&all));
    assert!(
        unisolated
            .iter()
            .any(|d| d.location == "sandbox.programs.agent" && d.message.contains("`agent`")),
        "{}",
        list(&all)
    );
    assert!(
        all.iter().any(|d| d.code == codes::LINT_RAISED_CAP
            && d.message.contains("sandbox.programs.agent.memory")),
        "{}",
        list(&all)
    );
    // Under the linux backend (the default) the programs can run: no warning.
    misses(
        &with_auth(
            "version: 1
sandbox:
  programs:
    agent: {command: [python3, agent.py]}
",
        ),
        codes::LINT_LAB_PROGRAM_UNISOLATED,
    );
}

#[test]
fn a_raised_recording_cap_is_a_warning_and_a_lowered_one_is_not() {
    let raised = findings(&with_auth(
        "version: 1
recordings: {max_bytes: 64MiB, max_events: 20000, max_per_tenant: 20000, max_per_principal: 5000, retention: 24h}
",
    ));
    let caps: Vec<&Diagnostic> = raised
        .iter()
        .filter(|d| d.code == codes::LINT_RAISED_CAP)
        .collect();
    assert_eq!(caps.len(), 4, "{}", list(&raised));
    assert!(
        caps.iter()
            .any(|d| d.message.contains("recordings.max_per_principal"))
    );
    assert!(
        caps.iter()
            .any(|d| d.message.contains("recordings.max_bytes"))
    );
    assert!(
        caps.iter()
            .any(|d| d.message.contains("recordings.max_events"))
    );
    assert!(
        caps.iter()
            .any(|d| d.message.contains("recordings.max_per_tenant"))
    );
    misses(
        &with_auth(
            "version: 1
recordings: {max_bytes: 1MiB, max_events: 100, max_per_principal: 10}
",
        ),
        codes::LINT_RAISED_CAP,
    );
}

// ---------------------------------------------------------------- lint.op_contained

#[test]
fn a_custom_op_declaring_contained_is_warned_that_replays_then_run_it_for_real() {
    let d = finds(
        &with_auth(
            "version: 1
custom:
  notes.save:
    argv: [/usr/bin/save-note]
    effects: [write]
    write_paths: [/workspace/notes]
    contained: true
rules:
  - allow: [notes.save]
",
        ),
        codes::LINT_OP_CONTAINED,
        Severity::Warning,
        "notes.save",
    );
    assert!(
        d.message.contains("replay") && d.message.contains("for real"),
        "{d}"
    );
    assert!(d.fix.contains("contained: true"), "{d}");
    // A claim that cannot make the op safe is said to have no effect.
    let d = finds(
        &with_auth(
            "version: 1
custom:
  notes.purge:
    argv: [/usr/bin/purge-notes]
    effects: [delete]
    contained: true
rules:
  - allow: [notes.purge]
",
        ),
        codes::LINT_OP_CONTAINED,
        Severity::Warning,
        "notes.purge",
    );
    assert!(d.message.contains("no effect"), "{d}");
    misses(
        &with_auth(
            "version: 1
custom:
  notes.save:
    argv: [/usr/bin/save-note]
    effects: [write]
    write_paths: [/workspace/notes]
rules:
  - allow: [notes.save]
",
        ),
        codes::LINT_OP_CONTAINED,
    );
}

#[test]
fn a_console_sign_in_without_a_limit_is_a_warning() {
    let d = the(
        &findings("version: 1\nconsole: {sign_in_rate: \"off\"}\n"),
        codes::LINT_CONSOLE_SIGN_IN_UNLIMITED,
        Severity::Warning,
    )
    .clone();
    assert_eq!(d.location, "console.sign_in_rate");
    misses(
        "version: 1\nconsole: {sign_in_rate: 600/min}\n",
        codes::LINT_CONSOLE_SIGN_IN_UNLIMITED,
    );
}
