//! The offline commands as a user runs them: init, check-config, describe, explain.

use crate::{corral, workspace};

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
        "version: 1\npreset: workspace_jail\nroot: $WS\nrules:\n  - allow: [agents.**]\n",
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
