//! Learning mode's activation: `CORRAL_LEARNING_MODE=true` is honoured only by `corral serve`;
//! every other entry point refuses to start with it, and a value other than `true`/`false` is
//! refused everywhere it is read.

use crate::{corral_with_env, workspace};

const JAIL: &str = "version: 1\npreset: workspace_jail\nroot: $WS\n";

fn assert_refused(args: &[&str], code: i32) {
    let dir = workspace(Some(JAIL));
    let (exit, out, err) = corral_with_env(dir.path(), args, &[("CORRAL_LEARNING_MODE", "true")]);
    assert_eq!(exit, code, "{args:?}: {out}{err}");
    assert!(
        err.contains("error[learning.not_this_entry_point]"),
        "{args:?}: {err}"
    );
    assert!(
        err.contains("corral serve"),
        "the fix names `corral serve`: {err}"
    );
    assert!(out.is_empty(), "{args:?} ran: {out}");
    // Nothing ran: not even the store was opened.
    assert!(!dir.path().join(".corral/corral.db").exists(), "{args:?}");
}

#[test]
fn call_local_refuses_to_start_in_learning_mode() {
    assert_refused(&["call", "--local", "files.list", "path=."], 2);
}

#[test]
fn corral_mcp_refuses_to_start_in_learning_mode() {
    assert_refused(&["mcp"], 2);
}

#[test]
fn an_in_process_sandbox_command_refuses_to_start_in_learning_mode() {
    assert_refused(
        &[
            "sandbox",
            "scenarios",
            "list",
            "--local",
            "-c",
            "corral.yaml",
        ],
        2,
    );
}

#[test]
fn corral_run_refuses_to_start_in_learning_mode() {
    assert_refused(&["run", "--", "true"], 125);
}

#[test]
fn a_learning_flag_other_than_true_or_false_is_refused_by_every_entry_point() {
    let dir = workspace(Some(JAIL));
    for value in ["1", "TRUE", "yes", ""] {
        for args in [
            &["serve", "--listen", "127.0.0.1:0"][..],
            &["call", "--local", "files.list", "path=."],
        ] {
            let (exit, out, err) =
                corral_with_env(dir.path(), args, &[("CORRAL_LEARNING_MODE", value)]);
            assert_eq!(exit, 2, "{args:?} {value:?}: {out}{err}");
            assert!(err.contains("learning.flag_invalid"), "{value:?}: {err}");
        }
    }
    // `false` is off: the call runs.
    let (exit, out, err) = corral_with_env(
        dir.path(),
        &["call", "--local", "files.list", "path=."],
        &[("CORRAL_LEARNING_MODE", "false")],
    );
    assert_eq!(exit, 0, "{out}{err}");
}

#[test]
fn serve_in_learning_mode_names_every_missing_precondition_and_does_not_listen() {
    let dir = workspace(Some(JAIL));
    let (exit, out, err) = corral_with_env(
        dir.path(),
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("CORRAL_LEARNING_MODE", "true"),
            ("CORRAL_SCENARIO_MANIFEST", "missing.json"),
        ],
    );
    assert_eq!(exit, 2, "{out}{err}");
    for code in [
        "learning.precondition_auth",
        "learning.precondition_manifest",
        "learning.precondition_autonomy",
    ] {
        assert!(err.contains(&format!("error[{code}]")), "{code}: {err}");
    }
    assert!(!err.contains("listening"), "{err}");
}
