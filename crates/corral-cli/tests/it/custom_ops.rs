//! Custom ops through `corral serve` (issue 12 item 3): they run without a `cwd` (in the
//! config's `root`), see the files their path params name, write where they declare, and
//! nowhere else. Each test checks the file on the host.

use std::path::Path;
use std::process::Stdio;

use crate::call::serve_with;
use crate::{corral, corral_with_env, workspace};

const TOKEN: &str = "it-custom-ops-secret-0123456789";

/// A config with `custom` ops, mounted for the token `agent` without confirmation.
fn config(custom: &str, ops: &[&str]) -> String {
    format!(
        "version: 1\nroot: $WS\nstate_dir: .corral\ncustom:\n{custom}rules:\n  - allow: [{}]\n    confirm: never\nauth:\n  tokens:\n    - {{id: agent, roles: [operator], token_env: CORRAL_IT_TOKEN}}\n",
        ops.join(", ")
    )
}

/// `corral call --server URL OP ARGS --format json` as `agent`: (exit code, result JSON, all
/// output).
fn call(dir: &Path, url: &str, op: &str, args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut argv = vec!["call", "--server", url, op, "--format", "json"];
    argv.extend_from_slice(args);
    let (code, out, err) = corral_with_env(dir, &argv, &[("CORRAL_TOKEN", TOKEN)]);
    let v = serde_json::from_str(&out).unwrap_or(serde_json::Value::Null);
    (code, v, format!("{out}{err}"))
}

fn serve(dir: &Path) -> crate::call::Served {
    serve_with(
        dir,
        &["--config", "corral.yaml"],
        &[("CORRAL_IT_TOKEN", TOKEN)],
        Stdio::null(),
    )
}

#[test]
fn a_custom_op_without_cwd_runs_in_the_root_and_reads_the_file_its_param_names() {
    // Before: every call failed with `exec.invalid: the read path / cannot be bound`, and the
    // param's file was not bound either (README's own `grader.run` example).
    let dir = workspace(Some(&config(
        "  grader.run:\n    argv: [/bin/cat, \"{submission}\"]\n    params: {submission: {type: path, root: $WS/submissions}}\n    effects: [exec]\n",
        &["grader.run"],
    )));
    let ws = dir.path().join("ws");
    let _ = std::fs::create_dir(ws.join("submissions"));
    let _ = std::fs::write(ws.join("submissions").join("a.py"), "print('graded')\n");
    let served = serve(dir.path());
    let (code, v, all) = call(dir.path(), &served.url, "grader.run", &["submission=a.py"]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(v["result"]["exit_code"], 0, "{all}");
    assert_eq!(v["result"]["stdout"], "print('graded')\n", "{all}");
    assert_eq!(v["result"]["attestation"]["isolated"], true, "{all}");
}

#[test]
fn a_custom_op_with_the_write_effect_writes_its_cwd_and_nothing_else() {
    let dir = workspace(Some(&config(
        "  notes.make:\n    argv: [/bin/sh, -c, \"echo made > made.txt && echo x > /etc/corral-it-escape\"]\n    effects: [write, exec]\n",
        &["notes.make"],
    )));
    let served = serve(dir.path());
    let (code, v, all) = call(dir.path(), &served.url, "notes.make", &[]);
    // The call ran; the program failed (exit 3, `corral call`'s "the program failed").
    assert_eq!(code, 3, "{all}");
    // The first write lands on the host; the second is refused (so the shell exits non-zero).
    assert_ne!(v["result"]["exit_code"], 0, "{all}");
    let made = std::fs::read_to_string(dir.path().join("ws").join("made.txt"));
    assert_eq!(made.ok().as_deref(), Some("made\n"), "{all}");
    assert!(!Path::new("/etc/corral-it-escape").exists());
}

#[test]
fn declared_write_paths_and_a_writable_param_are_writable_and_a_read_only_param_is_not() {
    let dir = workspace(Some(&config(
        "  out.copy:\n    argv: [/bin/sh, -c, \"cat \\\"$1\\\" > \\\"$2\\\"; echo log >> $WS/logs/run.log; echo tamper >> \\\"$1\\\"\", sh, \"{src}\", \"{dst}\"]\n    params:\n      src: {type: path, root: $WS/in}\n      dst: {type: path, root: $WS/out, writable: true}\n    write_paths: [$WS/logs]\n    effects: [read, write, exec]\n",
        &["out.copy"],
    )));
    let ws = dir.path().join("ws");
    for d in ["in", "out", "logs"] {
        let _ = std::fs::create_dir(ws.join(d));
    }
    let _ = std::fs::write(ws.join("in").join("src.txt"), "payload\n");
    let served = serve(dir.path());
    let (code, v, all) = call(
        dir.path(),
        &served.url,
        "out.copy",
        &["src=src.txt", "dst=new.txt"],
    );
    assert_eq!(code, 3, "the program failed: {all}");
    // The copy and the log land; appending to the read-only source fails (last command).
    assert_ne!(v["result"]["exit_code"], 0, "{all}");
    let read =
        |p: &[&str]| std::fs::read_to_string(p.iter().fold(ws.clone(), |acc, c| acc.join(c))).ok();
    assert_eq!(
        read(&["out", "new.txt"]).as_deref(),
        Some("payload\n"),
        "{all}"
    );
    assert_eq!(
        read(&["logs", "run.log"]).as_deref(),
        Some("log\n"),
        "{all}"
    );
    assert_eq!(
        read(&["in", "src.txt"]).as_deref(),
        Some("payload\n"),
        "{all}"
    );
}

#[test]
fn a_custom_op_is_refused_in_open_mode_whatever_its_declared_effects() {
    // Declared `read`, but it runs a program: open mode must refuse it like an exec op.
    let dir = workspace(Some(
        "version: 1\nroot: $WS\nstate_dir: .corral\ncustom:\n  peek.run:\n    argv: [/bin/true]\n    effects: [read]\nrules:\n  - allow: [peek.run]\n",
    ));
    let (code, out, err) = corral(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("`peek.run` can run programs"), "{err}");
}

#[test]
fn check_config_explains_custom_op_paths() {
    let dir = workspace(Some(&config(
        "  notes.make:\n    argv: [/bin/sh, -c, \"echo > x\"]\n    effects: [write, exec]\n  grader.run:\n    argv: [/bin/cat, \"{f}\"]\n    params: {f: {type: path, root: /srv/elsewhere}}\n    effects: [exec]\n",
        &["notes.make", "grader.run"],
    )));
    let (code, out, err) = corral_with_env(
        dir.path(),
        &["check-config", "--strict"],
        &[("CORRAL_IT_TOKEN", TOKEN)],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("lint.custom_write_implicit"), "{out}");
    assert!(out.contains("lint.custom_param_outside_paths"), "{out}");
}

#[test]
fn a_custom_op_with_no_cwd_and_no_root_runs_in_a_private_empty_directory() {
    let dir = workspace(Some(
        "version: 1\nstate_dir: .corral\ncustom:\n  tool.pwd:\n    argv: [/bin/sh, -c, \"pwd; ls -A | wc -l; touch here\"]\n    effects: [exec]\nrules:\n  - allow: [tool.pwd]\n    confirm: never\nauth:\n  tokens:\n    - {id: agent, roles: [operator], token_env: CORRAL_IT_TOKEN}\n",
    ));
    let served = serve(dir.path());
    let (code, v, all) = call(dir.path(), &served.url, "tool.pwd", &[]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(v["result"]["exit_code"], 0, "{all}");
    assert_eq!(v["result"]["stdout"], "/tmp\n0\n", "{all}");
    assert!(
        !Path::new("/tmp/here").exists(),
        "the host's /tmp is not its cwd"
    );
}

#[test]
fn custom_op_paths_that_are_not_absolute_are_load_errors() {
    let dir = workspace(Some(
        "version: 1\nstate_dir: .corral\ncustom:\n  tool.x:\n    argv: [/bin/true]\n    effects: [exec]\n    cwd: rel\n    write_paths: [relative/dir]\nrules:\n  - allow: [tool.x]\nauth:\n  tokens:\n    - {id: agent, roles: [operator], token_env: CORRAL_IT_TOKEN}\n",
    ));
    let (code, out, err) =
        corral_with_env(dir.path(), &["check-config"], &[("CORRAL_IT_TOKEN", TOKEN)]);
    assert_eq!(code, 2, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("`rel` is not an absolute directory"), "{all}");
    assert!(
        all.contains("`relative/dir` is not an absolute directory"),
        "{all}"
    );
    assert!(all.contains("not the `write` effect"), "{all}");
}

#[test]
fn a_custom_op_that_could_write_corrals_own_files_does_not_load() {
    // Found by the attack on issue 11's fixes: `write_paths` holding the config and the state
    // directory loaded without `config.protected_writable`.
    let dir = workspace(Some(
        "version: 1\nstate_dir: .corral\ncustom:\n  tool.w:\n    argv: [/bin/true]\n    effects: [write, exec]\n    write_paths: [$DIR]\nrules:\n  - allow: [tool.w]\nauth:\n  tokens:\n    - {id: agent, roles: [operator], token_env: CORRAL_IT_TOKEN}\n",
    ));
    let yaml = std::fs::read_to_string(dir.path().join("corral.yaml")).unwrap_or_default();
    let _ = std::fs::write(
        dir.path().join("corral.yaml"),
        yaml.replace("$DIR", &dir.path().to_string_lossy()),
    );
    let (code, out, err) =
        corral_with_env(dir.path(), &["check-config"], &[("CORRAL_IT_TOKEN", TOKEN)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("config.protected_writable"),
        "{out}{err}"
    );
}

// issue 11 follow-up (corral's own files): a custom op whose `read_paths` hold corral's config
// and state directory sees neither: no policy, no audit database, no keys.
#[test]
fn a_read_path_that_holds_corrals_config_and_state_shows_the_op_neither() {
    let dir = workspace(None);
    let text = config(
        "  peek.all:\n    argv: [/bin/sh, -c, \"cat corral.yaml; ls -A .corral; cat .corral/corral.db | head -c 16; ls ws; echo end\"]\n    cwd: $DIR\n    read_paths: [$DIR]\n    effects: [read, exec]\n",
        &["peek.all"],
    )
    .replace("$WS", &dir.path().join("ws").to_string_lossy())
    .replace("$DIR", &dir.path().to_string_lossy());
    let _ = std::fs::write(dir.path().join("corral.yaml"), text);
    let served = serve(dir.path());
    let (code, v, all) = call(dir.path(), &served.url, "peek.all", &[]);
    assert_eq!(code, 0, "{all}");
    let stdout = v["result"]["stdout"].as_str().unwrap_or_default();
    assert!(stdout.ends_with("end\n"), "the op ran to its end: {all}");
    assert!(
        !stdout.contains("version: 1"),
        "the config was readable: {all}"
    );
    assert!(
        !stdout.contains("corral.db"),
        "the state directory was listable: {all}"
    );
    assert!(
        !stdout.contains("SQLite format"),
        "the database was readable: {all}"
    );
    assert!(
        dir.path().join(".corral").join("corral.db").exists(),
        "the state directory is where the test expects it: {all}"
    );
}
