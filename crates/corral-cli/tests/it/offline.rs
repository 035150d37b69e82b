//! The offline commands as a user runs them: init, check-config, describe, explain.

use crate::{corral, corral_with_env, workspace};

#[test]
fn init_workspace_jail_writes_a_config_that_strict_check_accepts() {
    let dir = workspace(None);
    let ws = dir.path().join("ws");
    let ws = ws.to_string_lossy();
    let (code, out, err) = corral(
        dir.path(),
        &["init", "--preset", "workspace_jail", "--root", &ws],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = corral(dir.path(), &["check-config", "--strict"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 error(s), 0 warning(s)"), "{out}");
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let dir = workspace(Some("version: 1\n"));
    let (code, _, err) = corral(dir.path(), &["init", "--root", "/tmp"]);
    assert_eq!(code, 2);
    assert!(err.contains("--force"), "{err}");
}

#[test]
fn explain_names_the_rule_that_allowed_and_the_clause_that_refused() {
    let dir = workspace(None);
    let ws = dir.path().join("ws");
    let ws = ws.to_string_lossy().into_owned();
    let _ = corral(
        dir.path(),
        &["init", "--preset", "workspace_jail", "--root", &ws],
    );

    let (code, out, _) = corral(
        dir.path(),
        &[
            "explain",
            "--op",
            "files.read",
            "--arg",
            &format!("path={ws}/notes.txt"),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ALLOWED by rule `preset:workspace_jail/files`"),
        "{out}"
    );

    let (code, out, _) = corral(
        dir.path(),
        &[
            "explain",
            "--op",
            "files.read",
            "--arg",
            &format!("path={ws}/../secret"),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("policy.path_outside_scope"), "{out}");
    assert!(
        out.contains("closest rule `preset:workspace_jail/files`"),
        "{out}"
    );

    let (code, out, _) = corral(
        dir.path(),
        &["explain", "--op", "commands.run", "--arg", "argv=ls"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("NOT MOUNTED [op.not_enabled]"), "{out}");
}

#[test]
fn explain_shows_a_deny_rule_beating_the_preset() {
    let dir = workspace(Some(
        "version: 1\npreset: workspace_jail\nroot: $WS\nrules:\n  - deny: [files.delete]\n    reason: agents may not delete\n",
    ));
    let ws = dir.path().join("ws");
    let (code, out, _) = corral(
        dir.path(),
        &[
            "explain",
            "--op",
            "files.delete",
            "--arg",
            &format!("path={}/a", ws.to_string_lossy()),
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 1, "{out}");
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
        unreachable!("explain --format json prints JSON: {out}")
    };
    assert_eq!(v["decision"], "denied");
    assert_eq!(v["code"], "policy.denied");
    assert_eq!(v["rule"], "rules[0]");
    assert_eq!(v["reason"], "agents may not delete");
    let trace = v["trace"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(trace, 2, "every rule appears in the trace: {out}");
}

#[test]
fn a_typo_in_a_key_fails_with_the_close_match_and_the_line() {
    let dir = workspace(Some("version: 1\npreset: workspace_jail\nrot: $WS\n"));
    let (code, out, _) = corral(dir.path(), &["check-config"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown key `rot`"), "{out}");
    assert!(out.contains("did you mean `root`?"), "{out}");
    assert!(out.contains("line 3, column 1"), "{out}");
    assert!(
        out.contains("see: docs/errors.md#config.unknown_key"),
        "{out}"
    );
}

#[test]
fn a_typo_in_an_op_id_fails_with_the_close_match_and_the_line() {
    let dir = workspace(Some(
        "version: 1\nrules:\n  - allow: [files.dowload]\n    paths: {roots: [$WS]}\n",
    ));
    let (code, out, _) = corral(dir.path(), &["check-config", "--format", "json"]);
    assert_eq!(code, 2, "{out}");
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
        unreachable!("check-config --format json prints JSON: {out}")
    };
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "config.unknown_op");
    assert_eq!(d["line"], 3);
    assert!(
        d["fix"].as_str().unwrap_or("").contains("files.download"),
        "{out}"
    );
}

#[test]
fn strict_turns_warnings_into_failures() {
    let dir = workspace(Some(
        "version: 1\npreset: workspace_jail\nroot: $WS\nrules:\n  - allow: [browser.**]\n",
    ));
    let (code, out, _) = corral(dir.path(), &["check-config"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("lint.matches_nothing"), "{out}");
    let (code, out, _) = corral(dir.path(), &["check-config", "--strict"]);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn describe_lists_ops_and_effective_shows_who_may_call_what() {
    let dir = workspace(Some("version: 1\npreset: download-only\nroot: $WS\n"));
    let (code, out, _) = corral(dir.path(), &["describe"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("files.delete") && out.contains("destructive"),
        "{out}"
    );
    let (code, out, _) = corral(dir.path(), &["describe", "--effective"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("files.download"), "{out}");
    assert!(
        !out.contains("files.read "),
        "download_only mounts only files.download: {out}"
    );
}

#[test]
fn explain_as_a_token_principal_and_as_a_role() {
    let dir = workspace(Some(
        "version: 1\nauth:\n  tokens:\n    - {id: grader, roles: [viewer], token_env: CORRAL_TEST_GRADER}\nrules:\n  - allow: [files.read]\n    principals: [role:viewer]\n    paths: {roots: [$WS]}\n",
    ));
    let ws = dir.path().join("ws");
    let arg = format!("path={}/x", ws.to_string_lossy());
    let run = |extra: &[&str]| {
        let mut args = vec!["explain", "--op", "files.read", "--arg", arg.as_str()];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
            .args(&args)
            .current_dir(dir.path())
            .env("CORRAL_TEST_GRADER", "0123456789abcdef0123")
            .output();
        let Ok(out) = out else { unreachable!("runs") };
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(run(&["--principal", "grader"]).0, Some(0));
    assert_eq!(run(&["--role", "viewer"]).0, Some(0));
    let (code, out) = run(&[]);
    assert_eq!(
        code,
        Some(1),
        "an unauthenticated caller is not reached: {out}"
    );
    let (code, _) = run(&["--principal", "gradr"]);
    assert_eq!(code, Some(2));
}

#[test]
fn check_config_fails_with_exit_2_when_the_config_lies_in_a_writable_root() {
    // issue 11 item 4: an agent that can write corral.yaml rewrites its own policy.
    let dir = workspace(None);
    let ws = dir.path().join("ws");
    let _ = std::fs::write(
        ws.join("corral.yaml"),
        format!(
            "version: 1\nroot: {}\nstate_dir: {}\nenable: [files.read, files.write]\n",
            ws.display(),
            dir.path().join("state").display()
        ),
    );
    let (code, out, err) = corral(
        dir.path(),
        &[
            "check-config",
            "--config",
            &ws.join("corral.yaml").to_string_lossy(),
        ],
    );
    assert_eq!(code, 2, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("config.protected_writable"), "{all}");
    assert!(all.contains("the config file"), "{all}");
}

#[test]
fn explain_follows_a_symlink_and_refuses_what_a_deny_pattern_covers() {
    // issue 11 item 9: `data/link-to-env` -> `.env` passed `**/.env` when only the path asked
    // for was matched.
    let dir = workspace(Some(
        "version: 1\nroot: $WS\npreset: files_readonly\nstate_dir: .corral\n",
    ));
    let ws = dir.path().join("ws");
    let _ = std::fs::create_dir(ws.join("data"));
    let _ = std::fs::write(ws.join(".env"), "SECRET=1\n");
    let _ = std::fs::write(ws.join("ok.txt"), "fine\n");
    let _ = std::os::unix::fs::symlink("../.env", ws.join("data/link-to-env"));
    let _ = std::os::unix::fs::symlink("../ok.txt", ws.join("data/link-to-ok"));
    let explain = |rel: &str| {
        corral(
            dir.path(),
            &[
                "explain",
                "--op",
                "files.read",
                "--arg",
                &format!("path={}/{rel}", ws.display()),
            ],
        )
    };
    let (code, out, _) = explain("data/link-to-env");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("DENIED [policy.path_denied]"), "{out}");
    assert!(out.contains("resolved path of `path`"), "{out}");
    assert!(out.contains(".env"), "{out}");
    // The near miss: a symlink to an allowed file is still allowed, with the step shown.
    let (code, out, _) = explain("data/link-to-ok");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("resolves to"), "{out}");
}

/// A config in which the token `agent` carries only `viewer`, without a `roles:` block (issue
/// 11's reproduction), plus `extra` top-level keys.
fn viewer_config(extra: &str) -> tempfile::TempDir {
    workspace(Some(&format!(
        "version: 1\npreset: workspace_jail\nroot: $WS\nauth:\n  tokens:\n    - {{id: agent, roles: [viewer], token_env: CORRAL_TEST_AGENT}}\n{extra}"
    )))
}

const AGENT_ENV: (&str, &str) = ("CORRAL_TEST_AGENT", "0123456789abcdef0123456789");

/// `explain` as `who`, with `extra` flags; returns (exit code, stdout, stderr).
fn explain(dir: &std::path::Path, op: &str, path: &str, extra: &[&str]) -> (i32, String, String) {
    let arg = format!("path={}/{path}", dir.join("ws").to_string_lossy());
    let mut args = vec!["explain", "--op", op, "--arg", arg.as_str()];
    args.extend_from_slice(extra);
    corral_with_env(dir, &args, &[AGENT_ENV])
}

#[test]
fn explain_refuses_a_viewer_deleting_at_the_rbac_step_with_or_without_a_roles_block() {
    // issue 11 item 7: explain said ALLOWED for a viewer deleting, even with `roles: {}`.
    for extra in ["", "roles: {}\n"] {
        let dir = viewer_config(extra);
        for who in [
            &["--principal", "agent"][..],
            &["--token-env", AGENT_ENV.0][..],
        ] {
            let (code, out, err) = explain(dir.path(), "files.delete", "a", who);
            assert_eq!(code, 1, "{extra:?} {who:?}: {out}{err}");
            assert!(out.starts_with("REFUSED [rbac.denied]"), "{out}");
            assert!(
                out.contains("needs the role `admin`")
                    && out.contains("you have the role `viewer`"),
                "{out}"
            );
            assert!(out.contains("rbac refused [rbac.denied]"), "{out}");
            assert!(out.contains("policy not reached"), "{out}");
        }
        // The same call as an admin gets past RBAC and the policy, and would wait for a person.
        let (code, out, err) = explain(
            dir.path(),
            "files.delete",
            "a",
            &["--principal", "ada", "--role", "admin"],
        );
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.starts_with(
                "ALLOWED by rule `preset:workspace_jail/files`; would need confirmation"
            ),
            "{out}"
        );
        assert!(
            out.contains("confirmation required [confirmation.required]"),
            "{out}"
        );
    }
}

#[test]
fn describe_effective_offers_a_viewer_only_the_read_tier() {
    // issue 11 item 7: a viewer token was shown (and given) `files.delete`.
    let dir = viewer_config("");
    let (code, out, err) = corral_with_env(dir.path(), &["describe", "--effective"], &[AGENT_ENV]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("files.read"), "{out}");
    assert!(
        !out.contains("files.delete") && !out.contains("files.write"),
        "{out}"
    );
}

#[test]
fn explain_shows_every_guard_step_in_the_gateway_order_as_json() {
    // issue 11 item 7: explain runs RBAC, autonomy and confirmation (as a dry-run).
    let dir = viewer_config("autonomy: L3\n");
    let json = |extra: &[&str]| {
        let mut flags = extra.to_vec();
        flags.extend_from_slice(&["--arg", "content=x", "--format", "json"]);
        let (code, out, err) = explain(dir.path(), "files.write", "a", &flags);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
            unreachable!("explain --format json prints JSON: {out}{err}")
        };
        (code, v)
    };
    let steps = |v: &serde_json::Value| -> Vec<String> {
        v["guard"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                format!(
                    "{} {}",
                    s["step"].as_str().unwrap_or(""),
                    s["outcome"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    let operator = ["--principal", "ada", "--role", "operator"];
    let (code, v) = json(&operator);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["decision"], "allowed");
    assert_eq!(v["confirmation"], "required");
    assert_eq!(
        steps(&v),
        [
            "autonomy passed",
            "rbac passed",
            "policy allowed",
            "confirmation required"
        ]
    );
    // Dry-run: described, never run, nobody asked.
    let (code, v) = json(&[&operator[..], &["--dry-run"]].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["confirmation"], "dry_run");
    // A run lowered to L2: the autonomy step refuses before RBAC is looked at.
    let (code, v) = json(&[&operator[..], &["--autonomy", "L2"]].concat());
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["decision"], "refused");
    assert_eq!(v["code"], "autonomy.blocked");
    assert_eq!(
        steps(&v),
        [
            "autonomy refused",
            "rbac not_reached",
            "policy not_reached",
            "confirmation not_reached"
        ]
    );
    // The viewer: RBAC.
    let (code, v) = json(&["--principal", "agent"]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["code"], "rbac.denied");
    assert_eq!(v["confirmation"], serde_json::Value::Null);
}

#[test]
fn explain_of_a_viewer_deleting_reads_as_a_refusal() {
    // issue 11 item 7: the whole human output, paths made stable.
    let dir = viewer_config("");
    let (code, out, _) = explain(dir.path(), "files.delete", "a", &["--principal", "agent"]);
    assert_eq!(code, 1, "{out}");
    let out = out.replace(&*dir.path().to_string_lossy(), "$DIR");
    insta::assert_snapshot!(out);
}

#[test]
fn check_config_exits_2_for_a_load_level_error() {
    // issue 11, wrong errors: `policy.scope_required` exited 1 (findings), not 2 (config error).
    let dir = workspace(Some("version: 1\nrules:\n  - allow: [files.read]\n"));
    let (code, out, _) = corral(dir.path(), &["check-config"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("policy.scope_required"), "{out}");
    let (code, out, _) = corral(dir.path(), &["check-config", "--format", "json"]);
    assert_eq!(code, 2, "{out}");
    // A lint finding stays a finding: 1.
    let dir = workspace(Some(
        "version: 1\nrules:\n  - allow: [\"*\"]\n    paths: {roots: [$WS]}\n    commands: {allow: [\"ls\"]}\n    urls: {hosts: [example.com]}\n",
    ));
    let (code, out, _) = corral(dir.path(), &["check-config"]);
    assert!(out.contains("error[lint."), "{out}");
    assert_eq!(code, 1, "{out}");
}

#[test]
fn a_failing_command_prints_its_error_once_on_stderr_and_nothing_on_stdout() {
    // issue 13 item 4: one error exit; each command's failure is printed by `run()`, once.
    let dir = workspace(Some(
        "version: 1\npreset: workspace_jail\nroot: $WS\nauth:\n  tokens:\n    - id: agent\n      token_env: AGENT_TOKEN\n      roles: [agent]\n",
    ));
    let env = [("AGENT_TOKEN", "agent-token-0123456789abcdef0123456789")];
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["call", "files.list", "novalue"],
            2,
            "error: `novalue` is not `name=value`; arguments are `name=value` (JSON values are parsed)\n",
        ),
        (
            &["call", "--local", "files.list"],
            2,
            "error: the config has tokens, so there is no anonymous caller; pass `--principal ID` (one of: `agent`)\n",
        ),
        (
            &["explain", "--op", "files.read", "--autonomy", "L9"],
            2,
            "error: `--autonomy L9` is not a level; use L0 to L4\n",
        ),
        (
            &[
                "confirm",
                "some-action",
                "--token-env",
                "CORRAL_TEST_UNSET_VARIABLE",
            ],
            2,
            "error: `--token-env CORRAL_TEST_UNSET_VARIABLE` names a variable that is unset or empty\n",
        ),
        (
            &["init", "--root", "/"],
            2,
            "error: `/` cannot be a root (`--root`); pass the directory the agent works in\n",
        ),
    ];
    for (args, want_code, want_err) in cases {
        let (code, out, err) = corral_with_env(dir.path(), args, &env);
        assert_eq!(
            (code, err.as_str()),
            (*want_code, *want_err),
            "corral {args:?}"
        );
        assert_eq!(out, "", "corral {args:?}");
    }
}

/// A config with the adapter's session gate for everyone and the generic gate for `who`.
fn two_gates(who: &str) -> String {
    format!(
        "version: 1
rules:
  - name: codex-sessions
    allow: [agents.codex.sessions.create]
    agents: {{workdir: $WS, permissions: read-only}}
  - name: generic-gate
    allow: [agents.sessions.create]
    principals: [\"id:{who}\"]
"
    )
}

#[test]
fn explain_of_a_session_create_shows_the_rule_of_each_gate_in_one_trace() {
    let open = workspace(Some(&two_gates("anonymous-never")));
    let gate =
        |dir: &std::path::Path| corral(dir, &["explain", "--op", "agents.codex.sessions.create"]);
    let (code, out, err) = gate(open.path());
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("DENIED [agents.session_gate]"), "{out}");
    assert!(out.contains("allow `codex-sessions` decided"), "{out}");
    assert!(
        out.contains("allow `generic-gate` principal_not_matched"),
        "{out}"
    );

    let both = workspace(Some(
        "version: 1
rules:
  - name: codex-sessions
    allow: [agents.codex.sessions.create]
    agents: {workdir: $WS, permissions: read-only}
  - name: generic-gate
    allow: [agents.sessions.create]
",
    ));
    let (code, out, err) = gate(both.path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("allow `codex-sessions` decided"), "{out}");
    assert!(out.contains("allow `generic-gate` decided"), "{out}");
    assert!(
        out.contains("second gate `agents.sessions.create`: allowed by rule `generic-gate`"),
        "{out}"
    );
}

#[test]
fn init_agent_host_writes_a_config_that_strict_check_accepts() {
    let dir = workspace(None);
    let ws = dir.path().join("ws");
    let ws = ws.to_string_lossy();
    let (code, out, err) = corral(
        dir.path(),
        &["init", "--preset", "agent_host", "--root", &ws],
    );
    assert_eq!(code, 0, "{out}{err}");
    let env = [("CORRAL_AGENT_TOKEN", "agent-secret-0123456789abcdef")];
    let (code, out, err) = corral_with_env(dir.path(), &["check-config", "--strict"], &env);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(dir.path().join("corral.yaml")).unwrap_or_default();
    assert!(text.contains("agents: [codex]"), "{text}");
}

#[test]
fn every_subcommands_help_ends_its_sentences() {
    // `serve --help` once printed "... with exec ops mounted. Do not" (clap drops a lone
    // summary's final period): each option's text must read as whole sentences.
    let dir = workspace(None);
    for cmd in [
        "serve",
        "call",
        "run",
        "check-config",
        "explain",
        "describe",
        "doctor",
        "init",
        "mcp",
    ] {
        let (code, out, err) = corral(dir.path(), &[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd}: {err}");
        assert!(!out.contains(" Do not\n"), "{cmd} --help:\n{out}");
        assert!(out.contains("Usage: corral"), "{cmd} --help:\n{out}");
    }
    let (_, out, _) = corral(dir.path(), &["serve", "--help"]);
    assert!(
        out.contains("only for a throwaway lab machine"),
        "the --allow-open warning is whole:\n{out}"
    );
}

/// The offline commands need only the secrets they use: with no token secret in the
/// environment, `check-config` passes with a note per unset variable (and one for the root that
/// does not exist), `explain` and `describe --effective` answer for every principal, while
/// `corral serve` still refuses to start without them.
#[test]
fn offline_commands_need_no_secret_they_do_not_use_and_serve_still_does() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
    let ws = dir.path().join("ws-not-made-yet");
    let config = format!(
        "version: 1
preset: workspace_jail
root: {}
auth:
  tokens:
    - {{id: ada, roles: [operator], token_env: CORRAL_IT_OFFLINE_ADA}}
    - {{id: bot, kind: service, roles: [operator], token_env: CORRAL_IT_OFFLINE_BOT}}
",
        ws.display()
    );
    std::fs::write(dir.path().join("corral.yaml"), config).unwrap_or_else(|e| unreachable!("{e}"));
    let (code, out, err) = corral(dir.path(), &["check-config", "--strict"]);
    assert_eq!(code, 0, "{out}{err}");
    let all = format!("{out}{err}");
    for var in ["CORRAL_IT_OFFLINE_ADA", "CORRAL_IT_OFFLINE_BOT"] {
        assert!(
            all.contains(&format!("the variable `{var}` is unset here")),
            "{all}"
        );
    }
    assert!(all.contains("lint.root_missing"), "{all}");
    assert!(all.contains(&format!("mkdir -p {}", ws.display())), "{all}");
    let write = format!("path={}/a", ws.display());
    let write_as = |who: &str| {
        corral(
            dir.path(),
            &[
                "explain",
                "--op",
                "files.write",
                "--arg",
                &write,
                "--arg",
                "content=x",
                "--principal",
                who,
            ],
        )
    };
    let (code, out, err) = write_as("ada");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("would need confirmation"), "{out}");
    // A service principal without an autonomy pin is at L2: the confirm tier is beyond it.
    let (code, out, err) = write_as("bot");
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("autonomy.blocked"), "{out}");
    let (code, out, err) = corral(dir.path(), &["describe", "--effective"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("principal `bot`"), "{out}");
    // With the root made, the note is gone.
    std::fs::create_dir(&ws).unwrap_or_else(|e| unreachable!("{e}"));
    let (_, out, err) = corral(dir.path(), &["check-config"]);
    assert!(
        !format!("{out}{err}").contains("lint.root_missing"),
        "{out}{err}"
    );
    // `corral serve` authenticates: it needs every secret.
    let (code, out, err) = corral(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("config.token_env_unset"), "{err}");
}
