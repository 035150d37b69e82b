//! `corral sandbox shadow ...` end to end: docs/lab.md's shadow evaluation session against a
//! server and in-process (`--local`), the cost announced before anything runs, and the refusal
//! without a terminal and without `--yes`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use crate::call::serve_with;
use crate::lab::sh;
use crate::workspace;

const OPERATOR_TOKEN: &str = "shadow-operator-token-0123456789ab";

const CONFIG: &str = "version: 1
preset: workspace_jail
root: $WS
state_dir: .corral
sandbox: {record_runs: true}
auth:
  tokens:
    - {id: olga, roles: [operator], token_env: CORRAL_IT_SHADOW_OPERATOR}
";

/// docs/lab.md's shadow evaluation session; `<scenario-id>` and `<run-id>` take the ids the
/// commands before answered.
pub(crate) const SHADOW_EXAMPLE: &[&str] = &[
    r#"printf '%s\n' '[{"input": "notes"}]' > task.json"#,
    "corral sandbox scenarios create --name task --steps-file task.json -o json",
    "corral sandbox scenarios run <scenario-id> --variant recorded -o json",
    r#"printf 'name: reader\nversion: 1\nsteps:\n  - op: files.read\n    args: {path: "{{input}}.txt"}\n    as: s0\noutput: "{{steps.s0.content}}"\n' > reader.yaml"#,
    "corral sandbox shadow run --task <run-id> --variant reader=reader.yaml",
    "corral sandbox shadow list -o json",
];

fn shadow_workspace() -> tempfile::TempDir {
    let dir = workspace(Some(CONFIG));
    std::fs::write(dir.path().join("ws/notes.txt"), "the real notes").unwrap();
    dir
}

/// Runs the session (each `corral` line with `extra` appended) and checks what a user sees:
/// the count first, the divergence from the recording, the metering; the evaluation listed.
fn shadow_session(dir: &Path, env: &[(&str, &str)], extra: &str) {
    let (mut scenario_id, mut run_id) = (String::new(), String::new());
    let mut printed = Vec::new();
    for line in SHADOW_EXAMPLE {
        let mut line = line
            .replace("<scenario-id>", &scenario_id)
            .replace("<run-id>", &run_id);
        if line.starts_with("corral ") {
            line = format!("{line} {extra}");
        }
        let (code, out, err) = sh(dir, line.trim_end(), env, "");
        assert_eq!(code, 0, "`{line}` failed:\n{out}{err}");
        if line.contains("scenarios create") {
            scenario_id = serde_json::from_str::<Value>(&out).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        if line.contains("scenarios run") {
            run_id = serde_json::from_str::<Value>(&out).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        printed.push(out);
    }
    let report = &printed[4];
    assert!(
        report.starts_with("1 variant x 1 task = 1 run\n"),
        "the count comes first: {report}"
    );
    assert!(
        report.contains(": completed; planned 1, ran 1, not run 0"),
        "{report}"
    );
    assert!(
        report.contains("1/1 steps ok")
            && report.contains("diverged at call 1: files.read (recorded: scenario.resource)"),
        "{report}"
    );
    assert!(
        report.contains("model tokens and spend: not known"),
        "{report}"
    );
    let list: Value = serde_json::from_str(&printed[5]).unwrap();
    let shadow = &list["items"][0];
    assert_eq!(shadow["status"], "completed", "{list}");
    let replay_run = shadow["runs"][&run_id]["runs"]["reader"].as_str().unwrap();
    // The replay run read the real file: its output is the file's content.
    let (code, out, err) = sh(
        dir,
        format!("corral sandbox runs outputs {replay_run} -o json {extra}").trim_end(),
        env,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let outputs: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(outputs["items"][0]["output"], "the real notes");
}

#[test]
fn docs_lab_md_shadow_session_runs_against_a_server() {
    let dir = shadow_workspace();
    let env = [("CORRAL_IT_SHADOW_OPERATOR", OPERATOR_TOKEN)];
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &env,
        Stdio::null(),
    );
    let client = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", OPERATOR_TOKEN),
    ];
    shadow_session(dir.path(), &client, "");
}

#[test]
fn docs_lab_md_shadow_session_runs_in_process_with_local() {
    let dir = shadow_workspace();
    let env = [("CORRAL_IT_SHADOW_OPERATOR", OPERATOR_TOKEN)];
    shadow_session(dir.path(), &env, "--local -c corral.yaml --principal olga");
}

#[test]
fn over_ten_runs_without_a_terminal_shadow_run_refuses_and_says_to_pass_yes_and_nothing_runs() {
    let dir = shadow_workspace();
    let env = [("CORRAL_IT_SHADOW_OPERATOR", OPERATOR_TOKEN)];
    let local = "--local -c corral.yaml --principal olga";
    let (code, out, err) = sh(
        dir.path(),
        &format!(
            r#"printf '%s\n' '[{{"input": "notes"}}]' > task.json && corral sandbox scenarios create --name t --steps-file task.json -o json {local}"#
        ),
        &env,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let scenario: Value = serde_json::from_str(&out).unwrap();
    let (code, out, err) = sh(
        dir.path(),
        &format!(
            "corral sandbox scenarios run {} -o json {local}",
            scenario["id"].as_str().unwrap()
        ),
        &env,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let task = serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(
        dir.path().join("reader.yaml"),
        "name: reader\nversion: 1\nsteps:\n  - op: files.read\n    args: {path: \"{{input}}.txt\"}\n    as: s0\noutput: \"{{steps.s0.content}}\"\n",
    )
    .unwrap();
    let variants: String = (1..=11)
        .map(|i| format!(" --variant v{i}=reader.yaml"))
        .collect();
    let run = format!("corral sandbox shadow run --task {task}{variants} {local} < /dev/null");
    let (code, out, err) = sh(dir.path(), &run, &env, "");
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "11 variants x 1 task = 11 runs\n", "the count first");
    assert!(err.starts_with("error[replay.confirm_needed]: "), "{err}");
    assert!(err.contains("pass `--yes`"), "{err}");
    let list = format!("corral sandbox shadow list -o json {local}");
    let (code, out, _) = sh(dir.path(), &list, &env, "");
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["items"],
        serde_json::json!([])
    );
    // With `--yes`: the 11 runs, counted and reported.
    let (code, out, err) = sh(
        dir.path(),
        &run.replace(" < /dev/null", " --yes -o json"),
        &env,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("11 variants x 1 task = 11 runs"), "{err}");
    let shadow: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (shadow["planned"].as_u64(), shadow["ran"].as_u64()),
        (Some(11), Some(11))
    );
    assert_eq!(shadow["report"]["metering"]["replay"]["runs"], 11);
}

#[test]
fn an_admin_reads_the_servers_metering_per_purpose_and_an_operator_is_refused() {
    let dir = workspace(Some(&format!(
        "{CONFIG}    - {{id: ada, roles: [admin], token_env: CORRAL_IT_SHADOW_ADMIN}}\n"
    )));
    std::fs::write(dir.path().join("ws/notes.txt"), "the real notes").unwrap();
    const ADMIN_TOKEN: &str = "shadow-admin-token-0123456789abcd";
    let env = [
        ("CORRAL_IT_SHADOW_OPERATOR", OPERATOR_TOKEN),
        ("CORRAL_IT_SHADOW_ADMIN", ADMIN_TOKEN),
    ];
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &env,
        Stdio::null(),
    );
    let operator = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", OPERATOR_TOKEN),
    ];
    shadow_session(dir.path(), &operator, "");
    let admin = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", ADMIN_TOKEN),
    ];
    let (code, out, err) = sh(dir.path(), "corral sandbox metering", &admin, "");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("metering of tenant default (since the server started)\n"),
        "{out}"
    );
    // The session: one recorded simulation run (one call), one replay run (one call).
    for line in [
        "  simulation  runs 1  calls 1  model tokens not known  spend not known",
        "  replay      runs 1  calls 1  model tokens not known  spend not known",
        "  judge       runs 0  calls 0  model tokens not known  spend not known",
    ] {
        assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
    }
    let (code, out, err) = sh(dir.path(), "corral sandbox metering", &operator, "");
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("error[rbac.denied]: "), "{err}");
    // No tournament was graded: the list says so.
    let (code, out, err) = sh(dir.path(), "corral sandbox tournaments list", &operator, "");
    assert_eq!((code, out.as_str()), (0, "no tournaments\n"), "{err}");
}
