//! Tournaments through the `corral` binary with real command judges in the `linux` backend (no
//! network): docs/lab.md's example as written, in-process and through a server; a judge that
//! fails or answers otherwise reported as an error, never a tie; runs that are not one group
//! refused naming the odd run. Run as root and (CI) as a normal user.

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use super::{LOCAL, env, lab};
use crate::call::serve_with;
use crate::{corral_with_env, workspace};

/// docs/lab.md's tournament example, run by the tests below.
pub(crate) const TOURNAMENT_EXAMPLE: &str =
    "corral sandbox tournament <run-id> <run-id> <run-id> --judge command:longer --seed 7";

const BASE: &str = "version: 1
preset: workspace_jail
root: $WS
state_dir: .corral
auth:
  tokens:
    - {id: lab-operator, roles: [operator], token_env: CORRAL_IT_OPERATOR}
";

/// More judges, beside the docs' `longer`.
const MORE_JUDGES: &str = "    broken: {command: [python3, -c, 'print(\"maybe\")']}
    failing: {command: [python3, -c, 'import sys; sys.stderr.write(\"no verdict\"); sys.exit(3)']}
    netless: {command: [python3, netless_judge.py], read_paths: [judges]}
";

/// A judge that says `first` only if it reaches nothing: not corral's link port, not the
/// host's loopback, not the outside.
const NETLESS_JUDGE: &str = r#"
import json, socket, sys
sys.stdin.read()
for addr in (("127.0.0.1", 3128), ("127.0.0.1", 22), ("1.1.1.1", 80)):
    try:
        socket.create_connection(addr, timeout=3).close()
        print("reached %s:%d" % addr)
        sys.exit(0)
    except OSError:
        pass
print(json.dumps({"prefer": "first"}))
"#;

/// The fenced block of docs/lab.md with info `info` whose first line starts with `first`,
/// after the heading `## Tournaments`.
fn docs_block(info: &str, first: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/lab.md");
    let text = std::fs::read_to_string(path).unwrap();
    let section = text.split("## Tournaments").nth(1).unwrap();
    let mut lines = section.lines();
    while let Some(l) = lines.next() {
        if l.strip_prefix("```") == Some(info) {
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            if block.first().is_some_and(|l| l.starts_with(first)) {
                return block.join("\n") + "\n";
            }
        }
    }
    panic!("docs/lab.md's tournaments section has no `{info}` block starting `{first}`")
}

/// A workflow whose answer is the mocked response followed by `suffix`.
fn suffixed(suffix: &str) -> String {
    format!(
        "name: s\nversion: 1\nsteps:\n  - op: scenario.resource\n    args: {{resource: \"{{{{input}}}}\"}}\n    as: r\noutput: \"{{{{steps.r.response}}}}{suffix}\"\n"
    )
}

/// A workspace with docs/lab.md's judge config and script (and the judges above), a scenario
/// of three steps, and the workflows of the variants `medium` and `long`.
fn tournament_dir() -> tempfile::TempDir {
    let config = format!("{BASE}{}{MORE_JUDGES}", docs_block("yaml", "sandbox:"));
    let dir = workspace(Some(&config));
    let judges = dir.path().join("judges");
    std::fs::create_dir(&judges).unwrap();
    std::fs::write(
        judges.join("longer.py"),
        docs_block("python", "import json"),
    )
    .unwrap();
    std::fs::write(judges.join("netless_judge.py"), NETLESS_JUDGE).unwrap();
    let steps: Vec<Value> = (1..=3)
        .map(|i| serde_json::json!({"input": format!("k{i}"), "expected": format!("v{i}")}))
        .collect();
    let mocks: Vec<Value> = (1..=3)
        .map(|i| serde_json::json!({"resource": format!("k{i}"), "response": format!("v{i}")}))
        .collect();
    std::fs::write(
        dir.path().join("steps.json"),
        Value::from(steps).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("mocks.json"),
        Value::from(mocks).to_string(),
    )
    .unwrap();
    std::fs::write(dir.path().join("medium.yaml"), suffixed(", briefly")).unwrap();
    std::fs::write(
        dir.path().join("long.yaml"),
        suffixed(", explained at great length"),
    )
    .unwrap();
    dir
}

/// Creates the scenario and runs it by `short` (the identity agent), `medium` and `long`,
/// scored `exact`; the run ids, in that order.
fn group(dir: &Path, conn: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let (code, sc, out) = lab(
        dir,
        &[
            "scenarios",
            "create",
            "--name",
            "three tasks",
            "--steps-file",
            "steps.json",
            "--mocks-file",
            "mocks.json",
        ],
        conn,
        env,
    );
    assert_eq!(code, 0, "{out}");
    let id = sc["id"].as_str().unwrap().to_owned();
    let mut runs = Vec::new();
    for (variant, workflow) in [
        ("short", None),
        ("medium", Some("medium.yaml")),
        ("long", Some("long.yaml")),
    ] {
        let mut args = vec![
            "scenarios",
            "run",
            &id,
            "--variant",
            variant,
            "--scorer",
            "exact",
        ];
        if let Some(w) = workflow {
            args.extend_from_slice(&["--workflow", w]);
        }
        let (_, run, out) = lab(dir, &args, conn, env);
        assert_eq!(run["status"], "completed", "{out}");
        runs.push(run["id"].as_str().unwrap().to_owned());
    }
    runs
}

/// docs/lab.md's command with `runs` for its `<run-id>`s and `extra` appended: (exit, stdout,
/// stdout and stderr).
fn docs_command(
    dir: &Path,
    runs: &[String],
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let mut line = TOURNAMENT_EXAMPLE.to_owned();
    for r in runs {
        line = line.replacen("<run-id>", r, 1);
    }
    let mut args: Vec<&str> = line.split_whitespace().skip(1).collect();
    args.extend_from_slice(extra);
    let (code, out, err) = corral_with_env(dir, &args, env);
    let both = format!("{out}{err}");
    (code, out, both)
}

/// Every line of docs/lab.md's sample output is a line of `out`, each `...` or `[...]` in it
/// standing for any text.
fn matches_docs_sample(out: &str) {
    let sample = docs_block("text", "tournament ");
    for want in sample.lines() {
        let want = want.replace("[...]", "...");
        let parts: Vec<&str> = want.split("...").collect();
        let found = out.lines().any(|have| {
            let Some(mut rest) = have.strip_prefix(parts[0]) else {
                return false;
            };
            for (i, part) in parts.iter().enumerate().skip(1) {
                let at = if i == parts.len() - 1 && !part.is_empty() {
                    rest.rfind(part)
                } else {
                    rest.find(part)
                };
                let Some(at) = at else {
                    return false;
                };
                rest = &rest[at + part.len()..];
            }
            rest.is_empty() || parts.len() > 1 && parts.last() == Some(&"")
        });
        assert!(found, "docs/lab.md shows `{want}`; the output is:\n{out}");
    }
}

/// What the judged answer of docs/lab.md's example holds: the longer answer first, every call
/// answered, in sandboxes with no network.
fn check_ranking(t: &Value, runs: &[String]) {
    let ranked: Vec<(&str, &str)> = t["ranking"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["variant"].as_str().unwrap(),
                r["run_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ranked,
        [
            ("long", runs[2].as_str()),
            ("medium", runs[1].as_str()),
            ("short", runs[0].as_str())
        ],
        "{t}"
    );
    assert_eq!(
        (t["judge_calls"].as_u64(), t["judgments"].as_u64()),
        (Some(18), Some(18)),
        "{t}"
    );
    assert_eq!(t["purpose"], "judge");
    assert_eq!(t["position_bias"]["first_share"], 0.5, "{t}");
    assert_eq!(t["errors"].as_array().map(Vec::len), Some(0), "{t}");
    assert_eq!(t["not_judged"].as_array().map(Vec::len), Some(0), "{t}");
    assert_eq!(t["isolated"], true, "{t}");
    for a in t["attestations"].as_array().unwrap() {
        let p: Vec<&str> = a["primitives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert!(p.contains(&"netns:none") && p.contains(&"userns"), "{a}");
        assert_eq!(
            (&a["backend"], &a["destroyed"]),
            (&Value::from("linux"), &Value::from(true)),
            "{a}"
        );
    }
    for r in t["ranking"].as_array().unwrap() {
        let (s, lo, hi) = (
            r["strength"].as_f64().unwrap(),
            r["interval"]["lower"].as_f64().unwrap(),
            r["interval"]["upper"].as_f64().unwrap(),
        );
        assert!(lo <= s && s <= hi, "{r}");
    }
    assert_eq!(t["top_two"]["comparison"]["verdict"], "inconclusive", "{t}");
}

#[test]
fn docs_lab_md_tournament_example_runs_as_written_in_process() {
    let dir = tournament_dir();
    let env = env();
    let runs = group(dir.path(), LOCAL, &env);
    let (code, out, both) = docs_command(dir.path(), &runs, LOCAL, &env);
    assert_eq!(code, 0, "{both}");
    matches_docs_sample(&out);
    let (code, json, both) =
        docs_command(dir.path(), &runs, &[LOCAL, &["-o", "json"]].concat(), &env);
    assert_eq!(code, 0, "{both}");
    let t: Value = serde_json::from_str(&json).unwrap();
    check_ranking(&t, &runs);
    // The same seed, the same intervals.
    let (_, again, _) = docs_command(dir.path(), &runs, &[LOCAL, &["-o", "json"]].concat(), &env);
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["ranking"], t["ranking"]);
    assert_ne!(again["id"], t["id"]);
    // Stored: `tournaments get` answers it again.
    let (code, got, out) = lab(
        dir.path(),
        &["tournaments", "get", t["id"].as_str().unwrap()],
        LOCAL,
        &env,
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(got, t);
}

#[test]
fn docs_lab_md_tournament_example_runs_as_written_through_a_server() {
    let dir = tournament_dir();
    let env = env();
    let served = serve_with(dir.path(), &["-c", "corral.yaml"], &env, Stdio::null());
    let conn = [
        "--server",
        served.url.as_str(),
        "--token-env",
        "CORRAL_IT_OPERATOR",
    ];
    let runs = group(dir.path(), &conn, &env);
    let (code, out, both) = docs_command(dir.path(), &runs, &conn, &env);
    assert_eq!(code, 0, "{both}");
    matches_docs_sample(&out);
    let (code, json, both) = docs_command(
        dir.path(),
        &runs,
        &[&conn[..], &["-o", "json"]].concat(),
        &env,
    );
    assert_eq!(code, 0, "{both}");
    check_ranking(&serde_json::from_str(&json).unwrap(), &runs);
}

#[test]
fn a_judge_reaches_no_network_and_one_that_fails_or_answers_otherwise_is_an_error_never_a_tie() {
    let dir = tournament_dir();
    let env = env();
    let runs = group(dir.path(), LOCAL, &env);
    let tournament = |judge: &str| {
        let mut args = vec!["tournament"];
        args.extend(runs.iter().map(String::as_str));
        args.extend_from_slice(&["--judge", judge, "--bootstrap", "50"]);
        lab(dir.path(), &args, LOCAL, &env)
    };
    // `netless` answers `first` only when it reached nothing: every call answered.
    let (code, t, out) = tournament("command:netless");
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        (
            t["judgments"].as_u64(),
            t["position_bias"]["first_share"].as_f64()
        ),
        (Some(18), Some(1.0)),
        "{t}"
    );
    assert_eq!(t["isolated"], true, "{t}");
    for (judge, code_, words) in [
        ("command:broken", "lab.judge_answer", "maybe"),
        ("command:failing", "lab.judge_failed", "exit status 3"),
    ] {
        let (code, t, out) = tournament(judge);
        assert_eq!(code, 1, "an incomplete grading exits 1: {out}");
        assert_eq!(
            (t["judge_calls"].as_u64(), t["judgments"].as_u64()),
            (Some(18), Some(0)),
            "{t}"
        );
        let errors = t["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 18, "{t}");
        assert!(errors.iter().all(|e| e["code"] == code_), "{t}");
        assert!(
            errors[0]["message"].as_str().unwrap().contains(words),
            "{t}"
        );
        // Nothing was counted as a tie: no judgment at all, every strength at 1.
        assert_eq!(t["position_bias"]["decisive"], 0, "{t}");
        assert!(
            t["ranking"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["strength"] == 1.0),
            "{t}"
        );
    }
    // The human output lists each error with its code.
    let mut args = vec!["sandbox", "tournament"];
    args.extend(runs.iter().map(String::as_str));
    args.extend_from_slice(&["--judge", "command:broken", "--bootstrap", "50"]);
    args.extend_from_slice(LOCAL);
    let (code, out, err) = corral_with_env(dir.path(), &args, &env);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("errors 18")
            && out.contains("  error: task 1, first ")
            && out.contains(
                ": lab.judge_answer: \"judge `broken` printed \\\"maybe\\\", not one line"
            ),
        "{out}"
    );
}

#[test]
fn runs_of_another_scenario_or_an_undeclared_judge_are_refused_before_any_judge_call() {
    let dir = tournament_dir();
    let env = env();
    let runs = group(dir.path(), LOCAL, &env);
    let others = group(dir.path(), LOCAL, &env);
    let (code, _, out) = lab(
        dir.path(),
        &[
            "tournament",
            &runs[0],
            &others[1],
            "--judge",
            "command:longer",
        ],
        LOCAL,
        &env,
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("lab.tournament_mismatch") && out.contains(&others[1]),
        "{out}"
    );
    let (code, _, out) = lab(
        dir.path(),
        &["tournament", &runs[0], &runs[1], "--judge", "command:nope"],
        LOCAL,
        &env,
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("lab.program_unknown") && out.contains("sandbox.judges"),
        "{out}"
    );
    // One run is a usage error.
    let (code, _, out) = lab(
        dir.path(),
        &["tournament", &runs[0], "--judge", "command:longer"],
        LOCAL,
        &env,
    );
    assert_eq!(code, 2, "{out}");
}
