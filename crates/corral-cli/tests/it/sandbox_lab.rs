//! `corral sandbox ...` end to end: spec 003's worked example through a real server (and
//! in-process with `--local`), exactly as the spec writes it; synthetic inputs and their limits;
//! `compare --inspect` on Inspect AI eval logs. (The module is `lab`, not `sandbox`: CI's
//! `sandbox::` filter is the isolation tests run as a normal user.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::call::serve_with;
use crate::{corral_with_env, workspace};

const OPERATOR_TOKEN: &str = "lab-operator-token-0123456789abcdef";
const VIEWER_TOKEN: &str = "lab-viewer-token-0123456789abcdef";

const CONFIG: &str = "version: 1
preset: workspace_jail
root: $WS
state_dir: .corral
auth:
  tokens:
    - {id: lab-operator, roles: [operator], token_env: CORRAL_IT_OPERATOR}
    - {id: lab-viewer, roles: [viewer], token_env: CORRAL_IT_VIEWER}
";

/// Spec 003's worked example, line by line as the spec writes it (`olivares` is `corral`); the
/// `<scenario-id>` and `<run-id>` placeholders take the ids the commands before answered.
/// docs/lab.md shows the same session.
pub(crate) const WORKED_EXAMPLE: &[&str] = &[
    "printf '%s' '{{subject_kind}}:user{{index}}@example.test' > seed.txt",
    r#"printf '%s\n' '[{"resource":"agent:user1@example.test","response":"first synthetic account"}]' > mocks.json"#,
    "corral sandbox generate --count 2 --seed-file seed.txt -o json > steps.json",
    "corral sandbox scenarios create --name generated --steps-file steps.json --mocks-file mocks.json -o json",
    "corral sandbox scenarios run <scenario-id> --variant candidate -o json",
    "corral sandbox runs get <run-id> -o json",
    "corral sandbox runs outputs <run-id> -o json",
];

/// docs/lab.md's second session, after the worked example: the scenario updated with expected
/// outputs (based on version 1), then run 3 times with a scorer. `<scenario-id>` is the worked
/// example's scenario.
pub(crate) const SCORED_EXAMPLE: &[&str] = &[
    r#"printf '%s\n' '{"name": "generated, scored", "steps": [{"input": "agent:user1@example.test", "expected": "first synthetic account"}], "mocks": [{"resource": "agent:user1@example.test", "response": "first synthetic account"}]}' > scored.json"#,
    "corral sandbox scenarios update <scenario-id> --file scored.json --version 1 -o json",
    "corral sandbox scenarios run <scenario-id> --variant candidate --trials 3 --scorer exact -o json",
    "corral sandbox runs get <run-id>",
];

/// The directory holding the `corral` binary under test, for a shell's PATH.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_corral"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// One line of a session, run by `sh` in `dir` with the `corral` under test first on PATH,
/// `env` added and, when given, `extra` appended to a `corral sandbox scenarios|runs` command
/// (`--local ...`). Returns (exit code, stdout, stderr).
pub(crate) fn sh(
    dir: &Path,
    line: &str,
    env: &[(&str, &str)],
    extra: &str,
) -> (i32, String, String) {
    let line = if !extra.is_empty()
        && (line.starts_with("corral sandbox scenarios") || line.starts_with("corral sandbox runs"))
    {
        format!("{line} {extra}")
    } else {
        line.to_owned()
    };
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args(["-c", &line])
        .current_dir(dir)
        .env_remove("CORRAL_CONFIG")
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .env("PATH", path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the worked example in `dir` and checks what the spec says a user sees: the counts, the
/// attestation and the marker.
fn worked_example(dir: &Path, env: &[(&str, &str)], extra: &str) -> String {
    let mut scenario_id = String::new();
    let mut run_id = String::new();
    let mut answers = Vec::new();
    for line in WORKED_EXAMPLE {
        let line = line
            .replace("<scenario-id>", &scenario_id)
            .replace("<run-id>", &run_id);
        let (code, out, err) = sh(dir, &line, env, extra);
        assert_eq!(code, 0, "`{line}` failed:\n{out}{err}");
        if line.contains("-o json") && !line.contains('>') {
            let v: Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("`{line}` printed no JSON ({e}):\n{out}{err}"));
            if line.contains("scenarios create") {
                scenario_id = v["id"].as_str().unwrap().to_owned();
            }
            if line.contains("scenarios run") {
                run_id = v["id"].as_str().unwrap().to_owned();
            }
            answers.push(v);
        }
    }
    // The generated steps, exactly.
    let steps: Value =
        serde_json::from_slice(&std::fs::read(dir.join("steps.json")).unwrap()).unwrap();
    assert_eq!(
        steps,
        json!({"samples": [
            {"key": "sample-1", "input": "agent:user1@example.test"},
            {"key": "sample-2", "input": "agent:user2@example.test"},
        ]})
    );
    let [scenario, ran, got, outputs] = answers.as_slice() else {
        panic!("four JSON answers: {answers:?}")
    };
    assert_eq!(scenario["name"], "generated");
    assert_eq!(
        scenario["steps"],
        json!([{"input": "agent:user1@example.test"}, {"input": "agent:user2@example.test"}])
    );
    for run in [ran, got] {
        assert_eq!(run["id"], run_id.as_str());
        assert_eq!(run["scenario_id"], scenario_id.as_str());
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["steps_total"], 2, "{run}");
        assert_eq!(run["steps_ok"], 1, "{run}");
        assert_eq!(run["steps_error"], 1, "{run}");
        assert_eq!(run["isolated"], true, "{run}");
        assert_eq!(run["destroyed"], true, "{run}");
        assert_eq!(run["backend"], "inproc-mock", "{run}");
        assert_eq!(run["purpose"], "simulation", "{run}");
        assert_eq!(run["variant"], "candidate", "{run}");
        assert_eq!(
            run["verdict"], "not_scored",
            "no scorer: executed, not scored: {run}"
        );
        let misses = run["mock_misses"].as_array().unwrap();
        assert_eq!(misses.len(), 1, "{run}");
        assert_eq!(misses[0]["step"], 2, "{run}");
        assert_eq!(misses[0]["op"], "scenario.resource", "{run}");
    }
    let items = outputs["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{outputs}");
    assert_eq!(items[0]["input"], "agent:user1@example.test");
    assert_eq!(items[0]["output"], "first synthetic account");
    assert_eq!(items[0]["ok"], true);
    assert_eq!(items[1]["input"], "agent:user2@example.test");
    assert_eq!(items[1]["output"], "[[mock-miss:agent:user2@example.test]]");
    assert_eq!(items[1]["ok"], false);
    for run in [ran, got] {
        for k in ["trials_passed", "pass_at_k", "pass_hat_k"] {
            assert_eq!(run[k], Value::Null, "not scored, so no {k}: {run}");
        }
    }
    scenario_id
}

/// Runs docs/lab.md's second session on the worked example's scenario and checks what the docs
/// say: the update is version 2, the scored run of 3 trials passed all three, and a second
/// update based on version 1 is refused.
fn scored_example(dir: &Path, env: &[(&str, &str)], extra: &str, scenario_id: &str) {
    let mut run_id = String::new();
    let mut answers = Vec::new();
    for line in SCORED_EXAMPLE {
        let line = line
            .replace("<scenario-id>", scenario_id)
            .replace("<run-id>", &run_id);
        let (code, out, err) = sh(dir, &line, env, extra);
        assert_eq!(code, 0, "`{line}` failed:\n{out}{err}");
        if line.contains("-o json") {
            let v: Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("`{line}` printed no JSON ({e}):\n{out}{err}"));
            if line.contains("scenarios run") {
                run_id = v["id"].as_str().unwrap().to_owned();
            }
            answers.push(v);
        } else if line.starts_with("corral sandbox runs get") {
            for want in [
                "  verdict: passed (scorer exact, score 1.0000)",
                "  trials passed 3/3, pass@3 1.0000, pass^3 1.0000",
                "  seed 0, trials 3",
            ] {
                assert!(out.contains(want), "`{want}` in:\n{out}");
            }
        }
    }
    let [updated, ran] = answers.as_slice() else {
        panic!("two JSON answers: {answers:?}")
    };
    assert_eq!(updated["id"], scenario_id);
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["name"], "generated, scored");
    assert_eq!(updated["steps"][0]["expected"], "first synthetic account");
    assert_eq!(ran["verdict"], "passed", "{ran}");
    assert_eq!(
        (
            &ran["trials"],
            &ran["trials_passed"],
            &ran["pass_at_k"],
            &ran["pass_hat_k"]
        ),
        (&json!(3), &json!(3), &json!(1.0), &json!(1.0)),
        "{ran}"
    );
    // The same update again, still based on version 1: someone changed it since.
    let (code, out, err) = sh(
        dir,
        &SCORED_EXAMPLE[1].replace("<scenario-id>", scenario_id),
        env,
        extra,
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("error[lab.version_conflict]: "), "{err}");
    assert!(err.contains("update with version 2"), "{err}");
    // Without `--version` it is unconditional, and says so for people.
    let (code, out, err) = sh(
        dir,
        &format!("corral sandbox scenarios update {scenario_id} --file scored.json"),
        env,
        extra,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "updated scenario {scenario_id} (\"generated, scored\", version 3): 1 steps, 1 mocks\n"
        )
    );
    // What `scenarios get -o json` prints is a valid update file (its own keys ignored); an
    // unknown key is refused with the keys a scenario takes.
    let (code, out, err) = sh(
        dir,
        &format!("corral sandbox scenarios get {scenario_id} -o json > got.json"),
        env,
        extra,
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = sh(
        dir,
        &format!(
            "corral sandbox scenarios update {scenario_id} --file got.json --version 3 -o json"
        ),
        env,
        extra,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["version"], 4);
    std::fs::write(
        dir.join("bad.json"),
        r#"{"name": "x", "steps": [{"input": "a"}], "trials": 3}"#,
    )
    .unwrap();
    let (code, _, err) = sh(
        dir,
        &format!("corral sandbox scenarios update {scenario_id} --file bad.json"),
        env,
        extra,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("has the key trials")
            && err.contains("keys: name, description, steps, samples, mocks"),
        "{err}"
    );
}

#[test]
fn spec_003s_worked_example_runs_through_a_real_server_with_its_exact_counts_and_marker() {
    let dir = workspace(Some(CONFIG));
    let env = [
        ("CORRAL_IT_OPERATOR", OPERATOR_TOKEN),
        ("CORRAL_IT_VIEWER", VIEWER_TOKEN),
    ];
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &env,
        Stdio::null(),
    );
    let worked = worked_example(
        dir.path(),
        &[
            ("CORRAL_SERVER", &served.url),
            ("CORRAL_TOKEN", OPERATOR_TOKEN),
        ],
        "",
    );

    // The text output says the same for people.
    let operator = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", OPERATOR_TOKEN),
    ];
    let (code, out, err) = sh(
        dir.path(),
        "corral sandbox runs list -o json",
        &operator,
        "",
    );
    assert_eq!(code, 0, "{err}");
    let run_id = serde_json::from_str::<Value>(&out).unwrap()["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox runs get {run_id}"),
        &operator,
        "",
    );
    assert_eq!(code, 0, "{err}");
    for line in [
        "  backend inproc-mock via inproc: isolated true, destroyed true; purpose simulation",
        "  steps: 2 total, 1 ok, 1 error; infrastructure errors: 0",
        "  verdict: executed, not scored",
        "  mock miss: step 2 op scenario.resource args ",
    ] {
        assert!(out.contains(line), "`{line}` in:\n{out}");
    }
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox runs outputs {run_id}"),
        &operator,
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "step 1 trial 1  ok\n  input:  agent:user1@example.test\n  output: first synthetic account\n\
         step 2 trial 1  error lab.mock_miss\n  input:  agent:user2@example.test\n  output: [[mock-miss:agent:user2@example.test]]\n"
    );

    // Same scenario, variant and seed: the same outputs.
    let scenario_id = serde_json::from_str::<Value>(
        &sh(
            dir.path(),
            "corral sandbox scenarios list -o json",
            &operator,
            "",
        )
        .1,
    )
    .unwrap()["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox scenarios run {scenario_id} --variant candidate -o json"),
        &operator,
        "",
    );
    assert_eq!(code, 0, "{err}");
    let again = serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let outputs = |id: &str| {
        let (_, out, _) = sh(
            dir.path(),
            &format!("corral sandbox runs outputs {id} -o json"),
            &operator,
            "",
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["input"].clone(), o["output"].clone(), o["ok"].clone()))
            .collect::<Vec<_>>()
    };
    assert_ne!(again, run_id);
    assert_eq!(outputs(&again), outputs(&run_id));

    // OS-level isolation asked for a mock run: refused with its code, never run without it.
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox scenarios run {scenario_id} --isolation linux"),
        &operator,
        "",
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.starts_with("error[lab.isolation_unsupported]: "),
        "{err}"
    );

    let (code, out, err) = sh(
        dir.path(),
        "corral sandbox runs list",
        &[
            ("CORRAL_SERVER", &served.url),
            ("CORRAL_TOKEN", VIEWER_TOKEN),
        ],
        "",
    );
    assert_eq!(code, 0, "a viewer reads runs: {out}{err}");
    assert!(
        out.contains("completed  candidate  executed, not scored") && out.contains("steps 1/2 ok"),
        "{out}"
    );

    // A viewer cannot run: the refusal's code, exit 1.
    let scenario = out
        .split("scenario=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_owned();
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox scenarios run {scenario} --variant candidate"),
        &[
            ("CORRAL_SERVER", &served.url),
            ("CORRAL_TOKEN", VIEWER_TOKEN),
        ],
        "",
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("error[rbac.denied]: "), "{err}");

    // A comparison on the one scenario, scored: the verdict is forced and says by which rule;
    // a deploy comparison is an admin's decision.
    std::fs::write(
        dir.path().join("scored.json"),
        r#"[{"input": "agent:user1@example.test", "expected": "first synthetic account"}]"#,
    )
    .unwrap();
    let operator = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", OPERATOR_TOKEN),
    ];
    let (code, out, err) = sh(
        dir.path(),
        "corral sandbox scenarios create --name scored --steps-file scored.json --mocks-file mocks.json -o json",
        &operator,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let scored: Value = serde_json::from_str(&out).unwrap();
    let scored = scored["id"].as_str().unwrap();
    let compare = format!(
        "corral sandbox compare --baseline v1 --candidate v2 --scenario {scored} --scorer exact"
    );
    let (code, out, err) = sh(dir.path(), &compare, &operator, "");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        err, "",
        "no progress is drawn when stderr is not a terminal"
    );
    assert!(out.contains("verdict: inconclusive\n"), "{out}");
    assert!(
        out.contains("forced inconclusive by: too_few_scenarios (fewer than 10 scenarios)"),
        "{out}"
    );
    assert!(
        out.contains("delta (candidate - baseline): +0.0000 over 1 scenarios"),
        "{out}"
    );
    let id = out
        .strip_prefix("comparison ")
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_owned();
    let viewer = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", VIEWER_TOKEN),
    ];
    let (code, out, err) = sh(dir.path(), "corral sandbox comparisons list", &viewer, "");
    assert_eq!(code, 0, "a viewer reads comparisons: {out}{err}");
    assert!(
        out.starts_with(&format!("{id}  inconclusive  v1 -> v2  delta +0.0000\n")),
        "{out}"
    );
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox comparisons get {id} -o json"),
        &viewer,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let recorded: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(recorded["verdict"], "inconclusive");
    assert_eq!(recorded["forced_by"], "too_few_scenarios");
    // `--workers` reaches the server: 1 to 8 runs at once, any other count refused.
    let (code, out, err) = sh(dir.path(), &format!("{compare} --workers 9"), &operator, "");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.starts_with("error[args.invalid]: `workers` is 9; ask for 1 to 8"),
        "{err}"
    );
    let (code, out, err) = sh(
        dir.path(),
        &format!("{compare} --workers 2 -o json"),
        &operator,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let two: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(two["delta"], 0.0, "{two}");
    let (code, out, err) = sh(dir.path(), &format!("{compare} --deploy"), &operator, "");
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("error[rbac.denied]: "), "{err}");

    // docs/lab.md's second session: the update and the scored run of 3 trials.
    scored_example(dir.path(), &operator, "", &worked);
}

#[test]
fn spec_003s_worked_example_runs_in_process_with_local_and_the_off_switch_keeps_its_data() {
    let dir = workspace(Some(CONFIG));
    let env = [
        ("CORRAL_IT_OPERATOR", OPERATOR_TOKEN),
        ("CORRAL_IT_VIEWER", VIEWER_TOKEN),
    ];
    let local = "--local -c corral.yaml --principal lab-operator";
    let worked = worked_example(dir.path(), &env, local);

    // `sandbox: {enabled: false}`: every command but `generate` refuses, nothing is deleted.
    let config = std::fs::read_to_string(dir.path().join("corral.yaml")).unwrap();
    std::fs::write(
        dir.path().join("corral.yaml"),
        format!("{config}sandbox: {{enabled: false}}\n"),
    )
    .unwrap();
    let (code, out, err) = sh(dir.path(), "corral sandbox scenarios list", &env, local);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("error[lab.disabled]: "), "{err}");
    assert!(
        err.contains("sandbox.enabled"),
        "the message says how to turn it on: {err}"
    );
    let (code, _, err) = sh(dir.path(), "corral sandbox generate --count 1", &env, local);
    assert_eq!(code, 0, "generate is local and stores nothing: {err}");
    std::fs::write(dir.path().join("corral.yaml"), &config).unwrap();
    let (code, out, err) = sh(dir.path(), "corral sandbox scenarios list", &env, local);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  v1  generated\n"),
        "the scenario is back: {out}"
    );
    // docs/lab.md's second session, in-process.
    scored_example(dir.path(), &env, local, &worked);

    // A config without tokens has only the anonymous caller, who has no role.
    std::fs::write(
        dir.path().join("corral.yaml"),
        format!(
            "version: 1\npreset: workspace_jail\nroot: {}\nstate_dir: .corral\n",
            dir.path().join("ws").display()
        ),
    )
    .unwrap();
    let (code, out, err) = sh(dir.path(), "corral sandbox scenarios list --local", &[], "");
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("error[rbac.denied]: "), "{err}");
}

#[test]
fn generate_reads_its_template_from_stdin_with_seed_file_dash_keeping_newlines() {
    let dir = workspace(None);
    let mut child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["sandbox", "generate", "--count", "2", "--seed-file", "-"])
        .args(["--subject-kind", "user", "--format", "json"])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{{subject_kind}} #{{index}}\nsecond line {{other}}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        json!({"samples": [
            {"key": "sample-1", "input": "user #1\nsecond line {{other}}\n"},
            {"key": "sample-2", "input": "user #2\nsecond line {{other}}\n"},
        ]})
    );

    // Without a template: spec 003's defaults (subject `agent`, 10 samples); text for people.
    let (code, out, err) = corral_with_env(dir.path(), &["sandbox", "generate"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 10, "{out}");
    assert_eq!(out.lines().next(), Some("sample-1  agent-sample-1"));
    // A newline in an input is escaped in the text output, never a forged line.
    std::fs::write(dir.path().join("two.txt"), "a\nb").unwrap();
    let (_, out, _) = corral_with_env(
        dir.path(),
        &[
            "sandbox",
            "generate",
            "--count",
            "1",
            "--seed-file",
            "two.txt",
        ],
        &[],
    );
    assert_eq!(out, "sample-1  \"a\\nb\"\n");
}

#[test]
fn generate_requests_over_a_limit_are_refused_whole_with_their_code() {
    let dir = workspace(None);
    std::fs::write(dir.path().join("big.txt"), "x".repeat(8193)).unwrap();
    std::fs::write(
        dir.path().join("ok.txt"),
        "{{subject_kind}}{{subject_kind}}",
    )
    .unwrap();
    let subject = "s".repeat(201);
    let cases: [(&[&str], &str); 5] = [
        (&["--count", "101"], "lab.synthetic_count"),
        (&["--count", "0"], "lab.synthetic_count"),
        (
            &["--subject-kind", &subject],
            "lab.synthetic_subject_too_long",
        ),
        (
            &["--seed-file", "big.txt"],
            "lab.synthetic_template_too_long",
        ),
        (
            &["--seed-file", "ok.txt", "--subject-kind", &"k".repeat(200)],
            "",
        ),
    ];
    for (args, code_wanted) in cases {
        let mut argv = vec!["sandbox", "generate", "--format", "json"];
        argv.extend_from_slice(args);
        let (code, out, err) = corral_with_env(dir.path(), &argv, &[]);
        if code_wanted.is_empty() {
            assert_eq!(code, 0, "{args:?} is within the limits: {err}");
            continue;
        }
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            err.starts_with(&format!("error[{code_wanted}]: ")),
            "{args:?}: {err}"
        );
        assert_eq!(out, "", "refused whole: no partial set of samples");
    }
}

/// Writes a `.eval`-shaped zip of single-epoch samples `q00..`, each passing or not.
fn eval_log(dir: &Path, name: &str, passes: &[bool]) -> PathBuf {
    let path = dir.join(name);
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("header.json", opts).unwrap();
    zip.write_all(b"{}").unwrap();
    for (i, pass) in passes.iter().enumerate() {
        let id = format!("q{i:02}");
        let sample = json!({
            "id": id, "epoch": 1, "error": null,
            "scores": {"match": {"value": if *pass { "C" } else { "I" }}},
        });
        zip.start_file(format!("samples/{id}_epoch_1.json"), opts)
            .unwrap();
        zip.write_all(&serde_json::to_vec(&sample).unwrap())
            .unwrap();
    }
    zip.finish().unwrap();
    path
}

#[test]
fn compare_inspect_prints_the_verdict_interval_wilson_and_mcnemar_of_two_eval_logs() {
    let dir = workspace(None);
    let mut base = vec![false; 12];
    base[0] = true;
    base[1] = true;
    eval_log(dir.path(), "base.eval", &base);
    eval_log(dir.path(), "cand.eval", &[true; 12]);
    let compare = |a: &str, b: &str, json: bool| {
        let mut argv = vec!["sandbox", "compare", "--inspect", a, b, "--seed", "7"];
        if json {
            argv.extend(["--format", "json"]);
        }
        corral_with_env(dir.path(), &argv, &[])
    };

    // docs/lab.md's example, as a shell runs it, prints what the docs show.
    let (code, out, err) = sh(dir.path(), INSPECT_EXAMPLE, &[], "");
    assert_eq!(code, 0, "{err}");
    matches_docs_sample_output(&out);
    let (code, out, err) = compare("base.eval", "cand.eval", false);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("verdict: improved\n"), "{out}");
    assert!(
        out.contains("delta (candidate - baseline): +0.8333 over 12 scenarios"),
        "{out}"
    );
    assert!(out.contains("95% interval: ["), "{out}");
    assert!(out.contains("10000 resamples, seed 7"), "{out}");
    assert!(
        out.contains("McNemar exact p: 0.0020 (baseline only 0, candidate only 10)"),
        "{out}"
    );
    assert!(
        out.contains("pass rate 0.1667 (2/12 trials), Wilson 95% ["),
        "{out}"
    );
    assert!(
        out.contains("pass rate 1.0000 (12/12 trials), Wilson 95% ["),
        "{out}"
    );

    let (code, out, err) = compare("base.eval", "cand.eval", true);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "improved");
    assert_eq!(v["seed"], 7);
    assert!((v["mcnemar"]["p_value"].as_f64().unwrap() - 2.0 * 0.5f64.powi(10)).abs() < 1e-12);
    assert!(v["interval"]["lower"].as_f64().unwrap() > 0.0, "{v}");

    // Swapped, the candidate regressed: a finding, exit 1.
    let (code, out, _) = compare("cand.eval", "base.eval", false);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("verdict: regressed\n"), "{out}");

    // Five samples: forced inconclusive, and the rule is named.
    eval_log(dir.path(), "b5.eval", &[false; 5]);
    eval_log(dir.path(), "c5.eval", &[true; 5]);
    let (code, out, _) = compare("b5.eval", "c5.eval", false);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("verdict: inconclusive\n"), "{out}");
    assert!(
        out.contains("forced inconclusive by: too_few_scenarios (fewer than 10 scenarios)"),
        "{out}"
    );

    // A log that is not an Inspect log: its code, exit 2.
    std::fs::write(dir.path().join("junk.eval"), "not a zip").unwrap();
    let (code, _, err) = compare("junk.eval", "cand.eval", false);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with("error[lab.inspect_log_invalid]: "), "{err}");
}

#[test]
fn compare_inspect_reads_logs_a_real_inspect_task_on_mockllm_wrote() {
    let Some(python) = crate::python("inspect-ai") else {
        return;
    };
    let dir = workspace(None);
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corral-lab/tests/reference/make_inspect_logs.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(dir.path())
        .current_dir(dir.path())
        .env("INSPECT_LOG_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make_inspect_logs.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let logs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (base, cand) = (
        logs["baseline"].as_str().unwrap(),
        logs["candidate"].as_str().unwrap(),
    );
    let (code, out, err) = corral_with_env(
        dir.path(),
        &["sandbox", "compare", "--inspect", base, cand],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("verdict: improved\n"), "{out}");
    assert!(
        out.contains("(8/24 trials)") && out.contains("(24/24 trials)"),
        "{out}"
    );
    assert!(out.contains("McNemar: not applicable"), "two epochs: {out}");
}

/// The fenced blocks of docs/lab.md with their info string (`sh`, `text`, ...).
pub(crate) fn lab_md_blocks() -> Vec<(String, Vec<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/lab.md");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut block: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        match &mut block {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    block = Some((info.trim().to_owned(), Vec::new()));
                }
            }
            Some(_) if line.trim_start() == "```" => out.extend(block.take()),
            Some((_, lines)) => lines.push(line.to_owned()),
        }
    }
    out
}

#[test]
fn every_shell_example_in_docs_lab_md_is_a_session_these_tests_run() {
    let sessions: Vec<Vec<String>> = lab_md_blocks()
        .into_iter()
        .filter(|(info, _)| info == "sh")
        .map(|(_, lines)| lines)
        .collect();
    assert_eq!(sessions.len(), 8, "{sessions:?}");
    // The worked example, line for line: the server and `--local` tests run exactly these.
    assert_eq!(sessions[0], WORKED_EXAMPLE);
    // Then the update and the scored run of 3 trials, run by the same tests.
    assert_eq!(sessions[1], SCORED_EXAMPLE);
    // An external program's run, run by `lab_program::docs_lab_md_external_program_example_*`.
    assert_eq!(sessions[2], [crate::lab_program::PROGRAM_EXAMPLE]);
    // A tournament, run by `lab_program::tournament::docs_lab_md_tournament_example_*`.
    assert_eq!(
        sessions[3],
        [crate::lab_program::tournament::TOURNAMENT_EXAMPLE]
    );
    // The Inspect comparison: the command the Inspect test runs.
    assert_eq!(sessions[4], [INSPECT_EXAMPLE]);
    // The recordings session, run by `docs_lab_md_recordings_session_*`.
    assert_eq!(sessions[5], RECORDING_EXAMPLE);
    // The replay session, run by `docs_lab_md_replay_session_*`.
    assert_eq!(sessions[6], REPLAY_EXAMPLE);
    // The shadow evaluation session, run by `shadow_lab::docs_lab_md_shadow_session_*`.
    assert_eq!(sessions[7], crate::shadow_lab::SHADOW_EXAMPLE);
}

/// docs/lab.md's replay session: the task input kept by the agent, then (as an admin) the
/// trajectory replayed and the new version re-run on the task.
const REPLAY_EXAMPLE: &[&str] = &[
    "corral sandbox recordings input task-1 --steps-file task.json",
    "corral sandbox replay task-1 -o json",
    "corral sandbox replay task-1 --variant v2 --workflow v2.yaml -o json",
];

const ADA_TOKEN: &str = "replay-admin-token-0123456789abc";

/// The recordings workspace with an admin `ada`, docs/lab.md's `task.json` and `v2.yaml`, and
/// the agent's recorded call made.
fn replay_workspace(env: &[(&str, &str)], extra: &str) -> tempfile::TempDir {
    let dir = recording_workspace();
    let path = dir.path().join("corral.yaml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{config}    - {{id: ada, roles: [admin], token_env: CORRAL_IT_ADA}}\n"),
    )
    .unwrap();
    let blocks = lab_md_blocks();
    let block = |info: &str, first: &str| {
        blocks
            .iter()
            .find(|(i, lines)| i == info && lines.first().is_some_and(|l| l.starts_with(first)))
            .map(|(_, lines)| lines.join("\n"))
            .unwrap()
    };
    std::fs::write(dir.path().join("task.json"), block("json", "[{\"input\"")).unwrap();
    std::fs::write(
        dir.path().join("v2.yaml"),
        block("yaml workflow", "name: v2"),
    )
    .unwrap();
    let line = format!("corral call files.list path=. {extra}");
    let (code, out, err) = sh(dir.path(), line.trim_end(), env, "");
    assert_eq!(code, 0, "{out}{err}");
    dir
}

/// Runs docs/lab.md's replay session: `agent` keeps the input, `ada` replays.
fn replay_session(dir: &Path, agent: (&[(&str, &str)], &str), ada: (&[(&str, &str)], &str)) {
    let mut printed = Vec::new();
    for (i, line) in REPLAY_EXAMPLE.iter().enumerate() {
        let (env, extra) = if i == 0 { agent } else { ada };
        let line = format!("{line} {extra}");
        let (code, out, err) = sh(dir, line.trim_end(), env, "");
        assert_eq!(code, 0, "`{line}` failed:\n{out}{err}");
        printed.push(out);
    }
    assert!(printed[0].contains("task input kept"), "{}", printed[0]);
    let same: Value = serde_json::from_str(&printed[1]).unwrap();
    assert_eq!(
        (&same["status"], &same["steps"], &same["identical"]),
        (&json!("replayed"), &json!(1), &json!(true)),
        "{same}"
    );
    assert_eq!(same["run"]["purpose"], "replay");
    let v2: Value = serde_json::from_str(&printed[2]).unwrap();
    assert_eq!(v2["run"]["variant"], "v2", "{v2}");
    assert_eq!(
        v2["divergences"],
        json!([]),
        "v2 makes the recorded call: {v2}"
    );
    assert_eq!(v2["identical"], Value::Null);
    let outputs_line = format!(
        "corral sandbox runs outputs {} -o json {}",
        v2["run"]["id"].as_str().unwrap(),
        ada.1
    );
    let (code, out, err) = sh(dir, outputs_line.trim_end(), ada.0, "");
    assert_eq!(code, 0, "{out}{err}");
    let outputs: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(outputs["items"][0]["output"], "listed .", "{outputs}");
}

#[test]
fn docs_lab_md_replay_session_runs_against_a_server() {
    let env = [
        ("CORRAL_AGENT_TOKEN", AGENT_TOKEN),
        ("CORRAL_IT_VIC", VIC_TOKEN),
        ("CORRAL_IT_ADA", ADA_TOKEN),
    ];
    let dir = replay_workspace(&env, "--local -c corral.yaml --principal agent");
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &env,
        Stdio::null(),
    );
    let agent = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", AGENT_TOKEN),
    ];
    let ada = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", ADA_TOKEN),
    ];
    replay_session(dir.path(), (&agent, ""), (&ada, ""));
}

#[test]
fn docs_lab_md_replay_session_runs_in_process_with_local() {
    let env = [
        ("CORRAL_AGENT_TOKEN", AGENT_TOKEN),
        ("CORRAL_IT_VIC", VIC_TOKEN),
        ("CORRAL_IT_ADA", ADA_TOKEN),
    ];
    let dir = replay_workspace(&env, "--local -c corral.yaml --principal agent");
    replay_session(
        dir.path(),
        (&env, "--local -c corral.yaml --principal agent"),
        (&env, "--local -c corral.yaml --principal ada"),
    );
}

/// docs/lab.md's recordings session: a call with the run-scoped, recording token, then the
/// recording listed, read and exported.
const RECORDING_EXAMPLE: &[&str] = &[
    "corral call files.list path=.",
    "corral sandbox recordings list -o json",
    "corral sandbox recordings get task-1 -o json",
    "corral sandbox recordings export task-1",
];

const AGENT_TOKEN: &str = "recording-agent-token-0123456789";
const VIC_TOKEN: &str = "recording-viewer-token-0123456789";

/// A config of docs/lab.md's recording token (its `yaml` block), and a viewer `vic`.
fn recording_workspace() -> tempfile::TempDir {
    let docs = lab_md_blocks()
        .into_iter()
        .find(|(info, lines)| info == "yaml" && lines.first().is_some_and(|l| l == "auth:"))
        .map(|(_, lines)| lines.join("\n"))
        .unwrap();
    assert!(docs.contains("record: true"), "{docs}");
    let config = format!(
        "version: 1\npreset: workspace_jail\nroot: $WS\nstate_dir: .corral\n{docs}\n    - {{id: vic, roles: [viewer], token_env: CORRAL_IT_VIC}}\n"
    );
    workspace(Some(&config))
}

/// Runs docs/lab.md's recordings session (each `corral` line with `extra` appended) and checks
/// what a user sees; then a viewer who is not the run's principal is refused.
fn recordings_session(
    dir: &Path,
    env: &[(&str, &str)],
    extra: &str,
    as_vic: (&[(&str, &str)], &str),
) {
    let mut printed = Vec::new();
    for line in RECORDING_EXAMPLE {
        let line = format!("{line} {extra}");
        let (code, out, err) = sh(dir, line.trim_end(), env, "");
        assert_eq!(code, 0, "`{line}` failed:\n{out}{err}");
        printed.push(out);
    }
    let list: Value = serde_json::from_str(&printed[1]).unwrap();
    assert_eq!(list["items"][0]["run_id"], "task-1", "{list}");
    assert_eq!(list["items"][0]["principal"], "agent");
    assert_eq!(list["items"][0]["events"], 1);
    let got: Value = serde_json::from_str(&printed[2]).unwrap();
    assert_eq!(got["recording"]["capped"], false, "{got}");
    let event = &got["events"][0];
    assert_eq!(
        (event["seq"].clone(), event["op"].clone()),
        (json!(1), json!("files.list"))
    );
    assert_eq!(event["args"], json!({"path": "."}));
    assert!(event["response"].is_object(), "{got}");
    let kinds: Vec<String> = printed[3]
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["recording", "event"]);

    let (vic_env, vic_extra) = as_vic;
    let line = format!("corral sandbox recordings get task-1 {vic_extra}");
    let (code, out, err) = sh(dir, line.trim_end(), vic_env, "");
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("error[recording.forbidden]: "), "{err}");
    assert!(out.is_empty(), "nothing of the recording is printed: {out}");
}

#[test]
fn docs_lab_md_recordings_session_runs_against_a_server() {
    let dir = recording_workspace();
    let env = [
        ("CORRAL_AGENT_TOKEN", AGENT_TOKEN),
        ("CORRAL_IT_VIC", VIC_TOKEN),
    ];
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &env,
        Stdio::null(),
    );
    let agent = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", AGENT_TOKEN),
    ];
    let vic = [
        ("CORRAL_SERVER", served.url.as_str()),
        ("CORRAL_TOKEN", VIC_TOKEN),
    ];
    recordings_session(dir.path(), &agent, "", (&vic, ""));
}

#[test]
fn docs_lab_md_recordings_session_runs_in_process_with_local() {
    let dir = recording_workspace();
    let env = [
        ("CORRAL_AGENT_TOKEN", AGENT_TOKEN),
        ("CORRAL_IT_VIC", VIC_TOKEN),
    ];
    recordings_session(
        dir.path(),
        &env,
        "--local -c corral.yaml --principal agent",
        (&env, "--local -c corral.yaml --principal vic"),
    );
}

#[test]
fn a_recordings_export_carries_no_character_a_terminal_acts_on() {
    let dir = recording_workspace();
    // A file name a terminal would act on (CSI, a right-to-left override): recorded as
    // `files.list` answered it.
    std::fs::write(dir.path().join("ws/evil\u{9b}2J\u{202e}txt.exe"), "x").unwrap();
    let env = [
        ("CORRAL_AGENT_TOKEN", AGENT_TOKEN),
        ("CORRAL_IT_VIC", VIC_TOKEN),
    ];
    let local = "--local -c corral.yaml --principal agent";
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral call files.list path=. {local}"),
        &env,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox recordings export task-1 {local}"),
        &env,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !out.contains('\u{9b}') && !out.contains('\u{202e}'),
        "{out:?}"
    );
    // Escaped, the lines are the same JSON: the name is there, whole.
    assert!(
        out.lines().any(|l| serde_json::from_str::<Value>(l)
            .unwrap()
            .to_string()
            .contains("evil\u{9b}2J\u{202e}txt.exe")),
        "{out:?}"
    );
}

#[test]
fn the_configs_recordings_max_events_caps_a_recording_and_marks_it_capped() {
    let dir = recording_workspace();
    let path = dir.path().join("corral.yaml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{config}recordings: {{max_events: 1, retention: 24h}}\n"),
    )
    .unwrap();
    let env = [
        ("CORRAL_AGENT_TOKEN", AGENT_TOKEN),
        ("CORRAL_IT_VIC", VIC_TOKEN),
    ];
    let local = "--local -c corral.yaml --principal agent";
    for _ in 0..2 {
        let (code, out, err) = sh(
            dir.path(),
            &format!("corral call files.list path=. {local}"),
            &env,
            "",
        );
        assert_eq!(code, 0, "{out}{err}");
    }
    let (code, out, err) = sh(
        dir.path(),
        &format!("corral sandbox recordings get task-1 -o json {local}"),
        &env,
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["recording"]["capped"], true, "{got}");
    assert_eq!(got["events"].as_array().map(Vec::len), Some(1), "{got}");
}

/// docs/lab.md's `compare --inspect` example, run by the Inspect test (in a directory holding
/// `base.eval` and `cand.eval`).
const INSPECT_EXAMPLE: &str = "corral sandbox compare --inspect base.eval cand.eval --seed 7";

/// Every line of docs/lab.md's sample output of `compare --inspect` is a line of `out`, a
/// `[...]` in it standing for an interval.
fn matches_docs_sample_output(out: &str) {
    let blocks = lab_md_blocks();
    let sample = blocks
        .iter()
        .find(|(info, lines)| {
            info == "text" && lines.first().is_some_and(|l| l == "verdict: improved")
        })
        .map(|(_, lines)| lines)
        .unwrap();
    for want in sample {
        let parts: Vec<&str> = want.split("[...]").collect();
        let found = out.lines().any(|have| {
            let Some(mut rest) = have.strip_prefix(parts[0]) else {
                return false;
            };
            for part in &parts[1..] {
                // `[...]` is one `[lower, upper]` interval.
                let Some(after) = rest.strip_prefix('[').and_then(|r| r.split_once(']')) else {
                    return false;
                };
                let Some(r) = after.1.strip_prefix(part) else {
                    return false;
                };
                rest = r;
            }
            rest.is_empty()
        });
        assert!(found, "docs/lab.md shows `{want}`; the output is:\n{out}");
    }
}

/// Every page of a `corral sandbox ... list` with `--limit 2`, following `next` with `--after`
/// to the end: the ids, and how many pages.
fn all_pages(dir: &Path, list: &str, env: &[(&str, &str)], extra: &str) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut after = String::new();
    for pages in 1..=10 {
        let (code, out, err) = sh(dir, &format!("{list} --limit 2{after} -o json"), env, extra);
        assert_eq!(code, 0, "{out}{err}");
        let page: Value = serde_json::from_str(&out).unwrap();
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2, "{page}");
        ids.extend(items.iter().map(|i| i["id"].as_str().unwrap().to_owned()));
        match &page["next"] {
            Value::Null => return (ids, pages),
            Value::String(n) => after = format!(" --after {n}"),
            other => panic!("`next` is {other}"),
        }
    }
    panic!("paging does not end: {ids:?}")
}

#[test]
fn listing_with_limit_2_and_after_next_shows_every_scenario_and_run_once_and_scored_runs_show_pass_at_k()
 {
    // In-process.
    let dir = workspace(Some(CONFIG));
    let env = [
        ("CORRAL_IT_OPERATOR", OPERATOR_TOKEN),
        ("CORRAL_IT_VIEWER", VIEWER_TOKEN),
    ];
    paging_and_table(
        dir.path(),
        &env,
        "--local -c corral.yaml --principal lab-operator",
    );
    // Through a server.
    let dir = workspace(Some(CONFIG));
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &env,
        Stdio::null(),
    );
    paging_and_table(
        dir.path(),
        &[
            ("CORRAL_SERVER", &served.url),
            ("CORRAL_TOKEN", OPERATOR_TOKEN),
        ],
        "",
    );
}

/// Five scenarios and a run of each (scored or not), listed two a page to the end, and the
/// runs' table lines.
fn paging_and_table(dir: &Path, env: &[(&str, &str)], local: &str) {
    std::fs::write(
        dir.join("steps.json"),
        r#"[{"input": "a", "expected": "yes"}]"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("mocks.json"),
        r#"[{"resource": "a", "response": "yes"}]"#,
    )
    .unwrap();
    let mut scenarios = Vec::new();
    for i in 0..5 {
        let (code, out, err) = sh(
            dir,
            &format!(
                "corral sandbox scenarios create --name page{i} --steps-file steps.json --mocks-file mocks.json -o json"
            ),
            env,
            local,
        );
        assert_eq!(code, 0, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        scenarios.push(v["id"].as_str().unwrap().to_owned());
    }
    let mut runs = Vec::new();
    for (i, id) in scenarios.iter().enumerate() {
        let scorer = if i % 2 == 0 { " --scorer exact" } else { "" };
        let (code, out, err) = sh(
            dir,
            &format!("corral sandbox scenarios run {id} --variant v --trials 2{scorer} -o json"),
            env,
            local,
        );
        assert_eq!(code, 0, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        runs.push(v["id"].as_str().unwrap().to_owned());
    }
    // Newest first, each exactly once, over 3 pages.
    let (listed, pages) = all_pages(dir, "corral sandbox scenarios list", env, local);
    assert_eq!(listed, scenarios.iter().rev().cloned().collect::<Vec<_>>());
    assert_eq!(pages, 3);
    let (listed, pages) = all_pages(dir, "corral sandbox runs list", env, local);
    assert_eq!(listed, runs.iter().rev().cloned().collect::<Vec<_>>());
    assert_eq!(pages, 3);
    // The text form says where the next page starts, and the last page says nothing more.
    let (code, out, err) = sh(dir, "corral sandbox runs list --limit 2", env, local);
    assert_eq!(code, 0, "{err}");
    let more = out.lines().last().unwrap();
    assert!(more.starts_with("more: --after "), "{out}");
    let (_, rest, _) = sh(
        dir,
        &format!(
            "corral sandbox runs list --limit 10 --after {}",
            more.trim_start_matches("more: --after ")
        ),
        env,
        local,
    );
    assert_eq!(rest.lines().count(), 3, "{rest}");
    assert!(!rest.contains("more:"), "{rest}");
    // The table: a scored run shows its trials passed, pass@k and pass^k; an unscored one none.
    let (_, table, _) = sh(dir, "corral sandbox runs list", env, local);
    for (i, id) in runs.iter().enumerate() {
        let line = table.lines().find(|l| l.starts_with(id.as_str())).unwrap();
        if i % 2 == 0 {
            assert!(
                line.contains("  passed  ")
                    && line
                        .ends_with("steps 2/2 ok  trials passed 2/2, pass@2 1.0000, pass^2 1.0000"),
                "{line}"
            );
        } else {
            assert!(
                line.contains("executed, not scored") && line.ends_with("steps 2/2 ok"),
                "{line}"
            );
        }
    }
}
