//! The agents host in config: the rule key `agents:`, the top-level `agents:` and `install:`,
//! the `agent_host` preset, the required scope and the agent lints.

use corral_config::model::InstallMode;
use corral_config::{Severity, lint};
use corral_policy::scope::AgentPermissions;
use corral_policy::{Args, Decision, Principal, Request, codes};

use crate::{line_of, list, load, load_err, span_line, the};

const TOKENS: &str = "auth:\n  tokens:\n    - id: agent\n      roles: [operator]\n      token_env: CORRAL_AGENT_TOKEN\n";

fn agent() -> Principal {
    Principal::new("agent", &["operator"])
}

fn decide(l: &corral_config::Loaded, op: &str, args: &Args) -> Decision {
    l.engine().decide(&Request {
        op,
        principal: &agent(),
        args,
    })
}

#[test]
fn the_agent_host_preset_with_top_level_root_and_agents_hosts_codex_read_only() {
    let text =
        format!("version: 1\npreset: agent_host\nroot: /workspace\nagents: [codex]\n{TOKENS}");
    let l = load(&text);
    let e = l.engine();
    assert!(e.is_mounted("agents.codex.run", &agent()));
    assert!(e.is_mounted("agents.codex.sessions.create", &agent()));
    assert!(!e.is_mounted("agents.claude_code.run", &agent()));
    let args = Args::new().str("task", "fix it");
    let Decision::Allowed(a) = decide(&l, "agents.codex.run", &args) else {
        unreachable!("allowed")
    };
    let scope = e.agent_scope(&a);
    assert_eq!(
        scope.map(|s| (s.spec().workdir.as_str(), s.permissions())),
        Some(("/workspace", AgentPermissions::ReadOnly))
    );
    assert_eq!(
        l.config.agents.as_ref().map(|a| a.names()),
        Some(vec!["codex".to_owned()])
    );
    assert_eq!(l.config.install.mode, InstallMode::Lazy);
    let findings = lint::lint(&l);
    assert!(!lint::fails(&findings, true), "{}", list(&findings));
}

#[test]
fn the_preset_mapping_takes_its_own_agents_and_permissions() {
    let text = format!(
        "version: 1\npreset: {{name: agent_host, root: /srv/code, agents: [claude_code], permissions: workspace-write}}\n{TOKENS}"
    );
    let l = load(&text);
    let e = l.engine();
    assert!(e.is_mounted("agents.claude_code.run", &agent()));
    assert!(!e.is_mounted("agents.codex.run", &agent()));
    let Decision::Allowed(a) = decide(&l, "agents.claude_code.run", &Args::new().str("task", "t"))
    else {
        unreachable!("allowed")
    };
    assert_eq!(
        e.agent_scope(&a).map(|s| s.permissions()),
        Some(AgentPermissions::WorkspaceWrite)
    );
}

#[test]
fn the_agents_mapping_names_adapters_and_a_default_and_install_takes_a_mode() {
    let l = load(
        "version: 1\nagents: {adapters: [codex, claude_code], default: claude_code}\ninstall: {mode: build}\n",
    );
    let a = l
        .config
        .agents
        .as_ref()
        .map(|a| (a.names(), a.default.as_ref().map(|d| d.value.clone())));
    assert_eq!(
        a,
        Some((
            vec!["codex".to_owned(), "claude_code".to_owned()],
            Some("claude_code".to_owned())
        ))
    );
    assert_eq!(l.config.install.mode, InstallMode::Build);
}

#[test]
fn an_unknown_adapter_is_refused_with_did_you_mean() {
    let text = "version: 1\nagents: [codec]\n";
    let e = load_err("corral.yaml", text);
    let d = the(
        &e.diagnostics,
        codes::CONFIG_UNKNOWN_ADAPTER,
        Severity::Error,
    );
    assert!(d.to_string().contains("codec"), "{d}");
    assert_eq!(d.fix, "did you mean `codex`?");
    assert_eq!(span_line(d), 2);
    let e = load_err(
        "corral.yaml",
        "version: 1\npreset: {name: agent_host, root: /w, agents: [claude-code]}\n",
    );
    let d = the(
        &e.diagnostics,
        codes::CONFIG_UNKNOWN_ADAPTER,
        Severity::Error,
    );
    assert_eq!(d.fix, "did you mean `claude_code`?");
}

#[test]
fn a_default_adapter_outside_the_list_and_an_unknown_install_mode_are_refused() {
    let e = load_err(
        "corral.yaml",
        "version: 1\nagents: {adapters: [codex], default: claude_code}\n",
    );
    let d = the(&e.diagnostics, codes::CONFIG_INVALID_VALUE, Severity::Error);
    assert!(d.to_string().contains("not in `adapters`"), "{d}");
    let e = load_err("corral.yaml", "version: 1\ninstall: {mode: lazzy}\n");
    let d = the(&e.diagnostics, codes::CONFIG_INVALID_VALUE, Severity::Error);
    assert_eq!(d.fix, "did you mean `lazy`?");
}

#[test]
fn a_rule_with_an_agents_scope_decodes_every_key() {
    let text = format!(
        r#"version: 1
rules:
  - allow: [agents.codex.run, agents.codex.sessions.create, agents.sessions.create]
    agents:
      workdir: /workspace
      permissions: workspace-write
      commands: [pytest, git, /usr/bin/make]
      models: [gpt-5-codex]
      max_turns: 20
      network: {{allow: ["pypi.org:443"]}}
      confirm_writes_outside: [/workspace/src]
{TOKENS}"#
    );
    let l = load(&text);
    let spec = l.config.rules[0].agents.as_ref().map(|a| a.value.clone());
    let Some(spec) = spec else {
        unreachable!("decoded")
    };
    assert_eq!(spec.workdir, "/workspace");
    assert_eq!(spec.permissions, Some(AgentPermissions::WorkspaceWrite));
    assert_eq!(spec.commands, vec!["pytest", "git", "/usr/bin/make"]);
    assert_eq!(spec.models, vec!["gpt-5-codex"]);
    assert_eq!(spec.max_turns, Some(20));
    assert!(spec.network.is_some());
    assert_eq!(spec.confirm_writes_outside, vec!["/workspace/src"]);
    let d = decide(
        &l,
        "agents.codex.run",
        &Args::new().str("task", "t").str("model", "o3"),
    );
    assert_eq!(d.code(), Some(codes::AGENTS_MODEL_NOT_ALLOWED), "{d:?}");
    assert!(
        decide(&l, "agents.codex.sessions.create", &Args::new()).is_allowed(),
        "both gates are in the rule"
    );
}

#[test]
fn naming_an_agent_op_without_an_agents_scope_is_a_load_error_that_names_the_key() {
    let text = "version: 1\nrules:\n  - allow: [agents.codex.run]\n";
    let e = load_err("corral.yaml", text);
    let d = the(
        &e.diagnostics,
        codes::POLICY_SCOPE_REQUIRED,
        Severity::Error,
    );
    assert!(d.to_string().contains("`agents.codex.run`"), "{d}");
    assert!(d.fix.contains("agents: {workdir:"), "{d:?}");
    assert_eq!(span_line(d), line_of(text, "- allow"));
    let e = load_err(
        "corral.yaml",
        "version: 1\nrules:\n  - allow: [\"agents.**\"]\n",
    );
    the(
        &e.diagnostics,
        codes::POLICY_SCOPE_REQUIRED,
        Severity::Error,
    );
    let e = load_err(
        "corral.yaml",
        "version: 1\nroot: /w\nenable: [agents.codex.run]\n",
    );
    the(
        &e.diagnostics,
        codes::POLICY_SCOPE_REQUIRED,
        Severity::Error,
    );
}

#[test]
fn wildcard_rules_without_an_agents_scope_still_load_and_mount_no_agent() {
    let text = format!(
        "version: 1\nrules:\n  - allow: [\"effect:exec\"]\n    commands: {{allow: [\"pytest ...\"], cwd: /w}}\n{TOKENS}"
    );
    let l = load(&text);
    assert!(!l.engine().is_mounted("agents.codex.run", &agent()));
    let findings = lint::lint(&l);
    assert!(
        !findings
            .iter()
            .any(|d| d.code == codes::POLICY_SCOPE_REQUIRED),
        "{}",
        list(&findings)
    );
}

#[test]
fn agent_commands_are_programs_never_argv_patterns_nor_beneath_the_workdir() {
    for (commands, says, fix) in [
        (
            "[\"pytest ...\"]",
            "not a program name",
            "write the program alone",
        ),
        (
            "[/w/tools/run]",
            "lies beneath the workdir",
            "cannot change",
        ),
        (
            "[/usr/bin/../bin/sh]",
            "not a plain absolute path",
            "without `..`",
        ),
        (
            "[\"git*\"]",
            "not a program name",
            "write the program alone",
        ),
    ] {
        let text = format!(
            "version: 1\nrules:\n  - allow: [agents.codex.run]\n    agents: {{workdir: /w, commands: {commands}}}\n"
        );
        let e = load_err("corral.yaml", &text);
        let d = the(&e.diagnostics, codes::CONFIG_INVALID_SCOPE, Severity::Error);
        assert!(d.message.contains(says), "{commands}: {d:?}");
        assert!(d.fix.contains(fix), "{commands}: {d:?}");
    }
}

#[test]
fn full_permissions_without_unconfined_ok_do_not_load() {
    let text = "version: 1\nrules:\n  - allow: [agents.codex.run]\n    agents: {workdir: /w, permissions: full}\n";
    let e = load_err("corral.yaml", text);
    let d = the(&e.diagnostics, codes::CONFIG_INVALID_SCOPE, Severity::Error);
    assert!(d.fix.contains("unconfined_ok: true"), "{d:?}");
    assert_eq!(span_line(d), line_of(text, "agents: {"));
}

#[test]
fn full_permissions_with_unconfined_ok_load_with_a_lint_warning() {
    let text = format!(
        "version: 1\nrules:\n  - allow: [agents.codex.run]\n    agents: {{workdir: /w, permissions: full, unconfined_ok: true}}\n{TOKENS}"
    );
    let l = load(&text);
    let findings = lint::lint(&l);
    let d = the(&findings, codes::LINT_AGENT_UNCONFINED, Severity::Warning);
    assert_eq!(span_line(d), line_of(&text, "agents: {"));
    assert!(lint::fails(&findings, true));
}

#[test]
fn agents_allowed_with_file_scopes_and_unstated_permissions_are_a_lint_warning() {
    let with = |perm: &str| {
        format!(
            "version: 1\nrules:\n  - allow: [files.read]\n    paths: [/w]\n  - allow: [agents.codex.run]\n    agents: {{workdir: /w{perm}}}\n{TOKENS}"
        )
    };
    let text = with("");
    let findings = lint::lint(&load(&text));
    let d = the(
        &findings,
        codes::LINT_AGENT_PERMISSIONS_IMPLICIT,
        Severity::Warning,
    );
    assert!(d.to_string().contains("do not confine agents"), "{d}");
    let stated = lint::lint(&load(&with(", permissions: read-only")));
    assert!(
        !stated
            .iter()
            .any(|d| d.code == codes::LINT_AGENT_PERMISSIONS_IMPLICIT),
        "{}",
        list(&stated)
    );
}

#[test]
fn a_deny_rule_may_not_carry_an_agents_scope_and_the_scope_needs_a_workdir() {
    let e = load_err(
        "corral.yaml",
        "version: 1\nrules:\n  - deny: [agents.codex.run]\n    agents: {workdir: /w}\n",
    );
    the(&e.diagnostics, codes::CONFIG_INVALID_VALUE, Severity::Error);
    let e = load_err(
        "corral.yaml",
        "version: 1\nrules:\n  - allow: [agents.codex.run]\n    agents: {permissions: read-only}\n",
    );
    let d = the(&e.diagnostics, codes::CONFIG_MISSING_KEY, Severity::Error);
    assert!(d.to_string().contains("`workdir`"), "{d}");
    let e = load_err(
        "corral.yaml",
        "version: 1\nrules:\n  - allow: [agents.codex.run]\n    agents: {workdir: /w, permisions: read-only}\n",
    );
    let d = the(&e.diagnostics, codes::CONFIG_UNKNOWN_KEY, Severity::Error);
    assert!(d.fix.contains("permissions"), "{d:?}");
}

#[test]
fn an_agent_that_may_write_a_workdir_holding_corrals_state_does_not_load() {
    // The state directory defaults to `.corral` beside the config, in `/srv/project`.
    let text = format!(
        "version: 1\npreset: {{name: agent_host, root: /srv/project, permissions: workspace-write}}\n{TOKENS}"
    );
    let e = load_err("corral.yaml", &text);
    let d = the(
        &e.diagnostics,
        codes::CONFIG_PROTECTED_WRITABLE,
        Severity::Error,
    );
    assert!(d.to_string().contains("agents' workdir"), "{d}");
    let read_only = format!("version: 1\npreset: agent_host\nroot: /srv/project\n{TOKENS}");
    load(&read_only);
}

/// The fenced ```yaml blocks of docs/agents.md, in order.
fn doc_examples() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/agents.md");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match &mut block {
            None if line.trim_start() == "```yaml" => block = Some(String::new()),
            None => {}
            Some(b) if line.trim_start() == "```" => {
                out.push(std::mem::take(b));
                block = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
        }
    }
    out
}

#[test]
fn the_docs_quick_start_is_strict_clean_and_every_example_does_what_the_page_says() {
    let ex = doc_examples();
    assert_eq!(ex.len(), 4, "docs/agents.md's yaml blocks");
    let quick = load(&ex[0]);
    let findings = lint::lint(&quick);
    assert!(!lint::fails(&findings, true), "{}", list(&findings));
    let e = quick.engine();
    assert!(e.is_mounted("agents.codex.sessions.create", &agent()));
    assert!(!e.is_mounted("agents.codex.install", &agent()));
    // The agents' model traffic is `llm.chat` as the session's owner: the preset allows it.
    assert!(e.is_mounted("llm.chat", &agent()));

    let writable = load(&ex[1]);
    let Decision::Allowed(a) = decide(
        &writable,
        "agents.claude_code.run",
        &Args::new().str("task", "t"),
    ) else {
        unreachable!("allowed")
    };
    assert_eq!(
        writable.engine().agent_scope(&a).map(|s| s.permissions()),
        Some(AgentPermissions::WorkspaceWrite)
    );

    let rule = load(&ex[2]);
    let run = |args: Args| decide(&rule, "agents.codex.run", &args);
    assert!(run(Args::new().str("task", "t").str("workdir", "src")).is_allowed());
    assert_eq!(
        run(Args::new().str("task", "t").str("model", "o3")).code(),
        Some(codes::AGENTS_MODEL_NOT_ALLOWED)
    );
    assert_eq!(
        run(Args::new().str("task", "t").str("workdir", "/workspace")).code(),
        Some(codes::AGENTS_WORKDIR_OUTSIDE)
    );
    let Decision::Allowed(a) = run(Args::new().str("task", "t")) else {
        unreachable!("allowed")
    };
    let scope = rule.engine().agent_scope(&a).cloned();
    assert!(scope.is_some_and(|s| {
        s.write_needs_confirmation("/workspace/repo/setup.py", &agent())
            && !s.write_needs_confirmation("/workspace/repo/src/x.py", &agent())
    }));

    let top = load(&ex[3]);
    assert_eq!(
        top.config
            .agents
            .as_ref()
            .and_then(|a| a.default.as_ref())
            .map(|d| d.value.as_str()),
        Some("codex")
    );
}

#[test]
fn a_group_selector_that_reaches_only_agent_ops_without_an_agents_scope_matches_nothing() {
    let text = format!("version: 1\nrules:\n  - allow: [\"group:agents\"]\n{TOKENS}");
    let findings = lint::lint(&load(&text));
    let d = the(&findings, codes::LINT_MATCHES_NOTHING, Severity::Warning);
    assert!(d.to_string().contains("`agents:` scope"), "{d}");
    let scoped = format!(
        "version: 1\nrules:\n  - allow: [\"group:agents\"]\n    agents: {{workdir: /w, permissions: read-only}}\n{TOKENS}"
    );
    let findings = lint::lint(&load(&scoped));
    assert!(
        !findings
            .iter()
            .any(|d| d.code == codes::LINT_MATCHES_NOTHING),
        "{}",
        list(&findings)
    );
}

#[test]
fn a_scope_that_holds_writes_needs_a_rule_that_applies_them() {
    let rule = |ops: &str| {
        format!(
            "version: 1\nrules:\n  - allow: [{ops}]\n    agents: {{workdir: /w, permissions: workspace-write, confirm_writes_outside: [/w/src]}}\n{TOKENS}"
        )
    };
    let l = load(&rule("agents.codex.run"));
    let findings = lint::lint(&l);
    let d = the(
        &findings,
        codes::LINT_AGENT_HOLDS_UNAPPLIED,
        Severity::Warning,
    );
    assert!(
        d.message.contains("agents.codex.sessions.apply_writes"),
        "{d:?}"
    );
    let l = load(&rule(
        "agents.codex.run, agents.codex.sessions.apply_writes",
    ));
    assert!(
        !lint::lint(&l)
            .iter()
            .any(|d| d.code == codes::LINT_AGENT_HOLDS_UNAPPLIED),
        "{}",
        list(&lint::lint(&l))
    );
}
