//! The lab's external programs in the `linux` backend (issue 14 items 2c and 5): a variant
//! written in Python reads each step's input on stdin, calls the run's world over HTTP or MCP
//! at `$CORRAL_URL` with `$CORRAL_TOKEN`, and prints its answer; a command scorer reads
//! `{input, output, expected}` and prints `{score, pass}`. Both in-process (`--local`) and
//! through a server, attested, as root and (CI) as a normal user. And what such a program must
//! not reach: the lab's own routes, the audit, the host, the network.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::call::serve_with;
use crate::{corral_with_env, workspace};

pub(crate) mod tournament;

const OPERATOR_TOKEN: &str = "lab-operator-token-0123456789abcdef";

const CONFIG: &str = "version: 1
preset: workspace_jail
root: $WS
state_dir: .corral
auth:
  tokens:
    - {id: lab-operator, roles: [operator], token_env: CORRAL_IT_OPERATOR}
sandbox:
  programs:
    http-agent: {command: [python3, http_agent.py], read_paths: [agents]}
    mcp-agent: {command: [python3, mcp_agent.py], read_paths: [agents]}
    probe: {command: [python3, probe.py], read_paths: [agents]}
    chatty: {command: [python3, chatty.py], read_paths: [agents]}
    own-files: {command: [python3, agents/own_files.py], read_paths: [.]}
    large: {command: [python3, -c, 'import sys; sys.stdout.write(\"x\" * 1000000)']}
    hostile-bytes: {command: [python3, -c, 'import sys; sys.stdout.write(\"\\x1b[2J\\x9b31m\\u202eevil\\u200b\")']}
    forks: {command: [python3, -c, 'import subprocess as s; s.Popen([\"sleep\", \"987.654\"], start_new_session=True, stdin=s.DEVNULL, stdout=s.DEVNULL, stderr=s.DEVNULL); print(\"forked\")']}
    token: {command: [python3, -c, 'import os; print(os.environ[\"CORRAL_TOKEN\"])']}
    failing: {command: [python3, -c, 'import sys; sys.stderr.write(\"boom\"); sys.exit(3)']}
  scorers:
    same: {command: [python3, same.py], read_paths: [agents]}
    own-files: {command: [python3, agents/own_files.py], read_paths: [.]}
    netless: {command: [python3, netless.py], read_paths: [agents]}
    broken: {command: [python3, -c, 'print(\"not json\")']}
    always-pass: {command: [python3, always_pass.py], read_paths: [agents]}
";

/// Calls an op of the run over HTTP; prints its `response`, or on a refusal the code.
const HTTP_AGENT: &str = r#"
import json, os, sys, urllib.request, urllib.error
resource = sys.stdin.read()
req = urllib.request.Request(
    os.environ["CORRAL_URL"] + "/ops/scenario.resource",
    data=json.dumps({"resource": resource}).encode(),
    headers={"Authorization": "Bearer " + os.environ["CORRAL_TOKEN"],
             "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req) as r:
        print(json.load(r)["result"]["response"])
except urllib.error.HTTPError as e:
    print("refused " + json.load(e)["code"])
"#;

/// The same over MCP (a JSON-RPC `tools/call` to `/mcp`, as any MCP client sends it).
const MCP_AGENT: &str = r#"
import json, os, sys, urllib.request
resource = sys.stdin.read()
msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
       "params": {"name": "scenario.resource", "arguments": {"resource": resource}}}
req = urllib.request.Request(
    os.environ["CORRAL_URL"] + "/mcp", data=json.dumps(msg).encode(),
    headers={"Authorization": "Bearer " + os.environ["CORRAL_TOKEN"],
             "Content-Type": "application/json",
             "Accept": "application/json, text/event-stream"})
with urllib.request.urlopen(req) as r:
    res = json.load(r)["result"]
if res.get("isError"):
    print("refused " + res["structuredContent"]["code"])
else:
    print(res["structuredContent"]["response"])
"#;

/// Tries what a hostile program would, and prints one line per attempt: the status (or the
/// error) it got.
const PROBE: &str = r#"
import json, os, socket, sys, urllib.request, urllib.error
sys.stdin.read()
url, token = os.environ["CORRAL_URL"], os.environ["CORRAL_TOKEN"]
def status(path, method="GET", body=None, tok=token):
    headers = {"Content-Type": "application/json"}
    if tok:
        headers["Authorization"] = "Bearer " + tok
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return str(r.status)
    except urllib.error.HTTPError as e:
        return "%d %s" % (e.code, json.load(e).get("code"))
    except Exception as e:
        return "error " + type(e).__name__
print("ops", status("/ops"))
print("sandbox", status("/v1/sandbox/scenarios"))
print("sandbox-run", status("/v1/sandbox/scenarios/x/runs", "POST", b'{"variant":"v"}'))
print("audit", status("/audit"))
print("me", status("/me"))
print("no-token", status("/ops", tok=None))
print("no-token-call", status("/ops/scenario.resource", "POST", b'{"resource":"r"}', tok=None))
print("wrong-token", status("/ops", tok="lab-operator-token-0123456789abcdef"))
print("real-op", status("/ops/files.read", "POST", b'{"path":"secret.txt"}'))
req = urllib.request.Request(url + "/ops/scenario.resource", data=b'{"resource":"agent:user1@example.test"}',
    headers={"Authorization": "Bearer " + token, "Content-Type": "application/json", "X-Corral-Run": "another-run"})
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print("run-header", r.status)
except urllib.error.HTTPError as e:
    print("run-header", e.code, json.load(e).get("code"))
def raw_status(head):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(head.encode())
    return s.makefile("rb").readline().decode().split(" ")[1]
auth = "Authorization: Bearer " + token + "\r\n"
print("big-head", raw_status("GET /ops HTTP/1.1\r\nHost: x\r\n" + auth + "X-Pad: " + "a" * 100000 + "\r\n\r\n"))
print("connect", raw_status("CONNECT 1.1.1.1:443 HTTP/1.1\r\nHost: 1.1.1.1:443\r\n" + auth + "\r\n"))
print("absolute-form", raw_status("GET http://127.0.0.1:3128/audit HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"))
print("h2c", raw_status("GET /me HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n" + auth + "\r\n"))
try:
    socket.create_connection(("1.1.1.1", 80), timeout=3)
    print("outside reached")
except OSError:
    print("outside unreachable")
try:
    open(os.environ.get("HOME", "/tmp") + "/../etc/shadow").read()
    print("shadow read")
except OSError:
    print("shadow unreadable")
print("env", sorted(k for k in os.environ if k.startswith("CORRAL_")))
"#;

/// Reads what it can of corral's own files in its read path (the config's directory): prints
/// `seen <name>` for each one it could open. As a scorer it prints a passing score after.
const OWN_FILES: &str = r#"
import json, os, sys
sys.stdin.read()
seen = []
for p in ("corral.yaml", ".corral", ".corral/corral.db", "agents/own_files.py"):
    try:
        if os.path.isdir(p):
            os.listdir(p)
        else:
            open(p, "rb").read(1)
        seen.append("seen " + p)
    except OSError:
        pass
if os.environ.get("CORRAL_TOKEN"):
    print(" ".join(seen))
else:
    sys.stderr.write(" ".join(seen))
    print(json.dumps({"score": 1.0, "pass": True}) if len(seen) == 1 else "leaked")
"#;

/// A command scorer that passes only if it reaches nothing: not corral's link port, not the
/// host's loopback, not the outside.
const NETLESS: &str = r#"
import json, socket, sys
sys.stdin.read()
reached = []
for addr in (("127.0.0.1", 3128), ("127.0.0.1", 22), ("1.1.1.1", 80)):
    try:
        socket.create_connection(addr, timeout=3).close()
        reached.append("%s:%d" % addr)
    except OSError:
        pass
print(json.dumps({"score": 1.0, "pass": True}) if not reached else "reached " + " ".join(reached))
"#;

/// Calls `GET /ops` 1,005 times, keeping one connection, and prints how many answers had each
/// status.
const CHATTY: &str = r#"
import collections, http.client, os, sys
sys.stdin.read()
host, port = os.environ["CORRAL_URL"].split("//")[1].split(":")
conn = http.client.HTTPConnection(host, int(port), timeout=10)
seen = collections.Counter()
for _ in range(1005):
    conn.request("GET", "/ops", headers={"Authorization": "Bearer " + os.environ["CORRAL_TOKEN"]})
    r = conn.getresponse()
    r.read()
    seen[r.status] += 1
print(" ".join("%d=%d" % kv for kv in sorted(seen.items())))
"#;

/// Exact equality, as a command scorer.
const SAME: &str = r#"
import json, sys
d = json.load(sys.stdin)
ok = d["output"] == d["expected"]
print(json.dumps({"score": 1.0 if ok else 0.0, "pass": ok}))
"#;

/// Two steps: the first mocked, the second a miss; both expect the mocked answer.
const STEPS: &str = r#"[{"input": "agent:user1@example.test", "expected": "first synthetic account"},
  {"input": "agent:user2@example.test", "expected": "second synthetic account"}]"#;
const MOCKS: &str =
    r#"[{"resource": "agent:user1@example.test", "response": "first synthetic account"}]"#;

fn lab_dir() -> tempfile::TempDir {
    let dir = workspace(Some(CONFIG));
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    for (name, text) in [
        ("http_agent.py", HTTP_AGENT),
        ("mcp_agent.py", MCP_AGENT),
        ("probe.py", PROBE),
        ("own_files.py", OWN_FILES),
        ("netless.py", NETLESS),
        ("same.py", SAME),
        (
            "always_pass.py",
            "print('{\"score\": 1.0, \"pass\": true}')\n",
        ),
        ("chatty.py", CHATTY),
    ] {
        std::fs::write(agents.join(name), text).unwrap();
    }
    std::fs::write(dir.path().join("ws/secret.txt"), "host secret").unwrap();
    std::fs::write(dir.path().join("steps.json"), STEPS).unwrap();
    std::fs::write(dir.path().join("mocks.json"), MOCKS).unwrap();
    dir
}

const LOCAL: &[&str] = &[
    "--local",
    "-c",
    "corral.yaml",
    "--principal",
    "lab-operator",
];

fn env() -> Vec<(&'static str, &'static str)> {
    vec![("CORRAL_IT_OPERATOR", OPERATOR_TOKEN)]
}

/// `corral sandbox <args> -o json` with `conn` appended; (exit code, JSON or Null, stderr).
fn lab(dir: &Path, args: &[&str], conn: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let mut all = vec!["sandbox"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    all.extend_from_slice(conn);
    let (code, out, err) = corral_with_env(dir, &all, env);
    (
        code,
        serde_json::from_str(&out).unwrap_or(Value::Null),
        format!("{out}{err}"),
    )
}

fn create_scenario(dir: &Path, conn: &[&str], env: &[(&str, &str)]) -> String {
    let (code, v, out) = lab(
        dir,
        &[
            "scenarios",
            "create",
            "--name",
            "program",
            "--steps-file",
            "steps.json",
            "--mocks-file",
            "mocks.json",
        ],
        conn,
        env,
    );
    assert_eq!(code, 0, "{out}");
    v["id"].as_str().unwrap().to_owned()
}

/// Runs the scenario with `extra` (`--program ...`), then reads its outputs.
fn run_scenario(
    dir: &Path,
    id: &str,
    extra: &[&str],
    conn: &[&str],
    env: &[(&str, &str)],
) -> (i32, Value, Vec<Value>) {
    let mut args = vec!["scenarios", "run", id, "--variant", "candidate"];
    args.extend_from_slice(extra);
    let (code, run, out) = lab(dir, &args, conn, env);
    assert!(run.is_object(), "no run record: {out}");
    let run_id = run["id"].as_str().unwrap().to_owned();
    let (c, outputs, o) = lab(dir, &["runs", "outputs", &run_id], conn, env);
    assert_eq!(c, 0, "{o}");
    (
        code,
        run,
        outputs["items"].as_array().cloned().unwrap_or_default(),
    )
}

fn answers(outputs: &[Value]) -> Vec<&str> {
    outputs
        .iter()
        .map(|o| o["output"].as_str().unwrap())
        .collect()
}

/// What every program run records: the linux backend, isolated, destroyed, the counts, the
/// miss of step 2 (reached through the program's own call), and the command scorer's verdict.
fn check_program_run(run: &Value, outputs: &[Value]) {
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["backend"], "linux", "{run}");
    assert_eq!(run["isolated"], true, "{run}");
    assert_eq!(run["destroyed"], true, "{run}");
    assert_eq!(run["purpose"], "simulation", "{run}");
    assert_eq!(
        (run["steps_total"].as_u64(), run["steps_ok"].as_u64()),
        (Some(2), Some(2)),
        "{run}"
    );
    let misses = run["mock_misses"].as_array().unwrap();
    assert_eq!(misses.len(), 1, "{run}");
    assert_eq!(misses[0]["step"], 2);
    assert_eq!(misses[0]["op"], "scenario.resource");
    assert_eq!(
        answers(outputs),
        ["first synthetic account", "refused lab.mock_miss"]
    );
    // The program's sandboxes reached only corral; the scorer's reached nothing.
    let primitives: Vec<Vec<&str>> = run["attestations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            assert_eq!(
                (&a["backend"], &a["isolated"], &a["destroyed"]),
                (&json!("linux"), &json!(true), &json!(true)),
                "{a}"
            );
            a["primitives"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap())
                .collect()
        })
        .collect();
    assert!(
        primitives.iter().any(|p| p.contains(&"netns:corral-link")),
        "{run}"
    );
    assert!(
        primitives.iter().any(|p| p.contains(&"netns:none")),
        "{run}"
    );
    assert!(
        primitives
            .iter()
            .all(|p| p.contains(&"userns") && p.iter().any(|x| x.starts_with("landlock"))),
        "{run}"
    );
    assert_eq!(run["scorer_suite"], "command:same", "{run}");
    assert_eq!(run["score"], 0.5, "{run}");
    assert_eq!(run["verdict"], "failed", "{run}");
    let passes: Vec<&Value> = outputs.iter().map(|o| &o["pass"]).collect();
    assert_eq!(passes, [&json!(true), &json!(false)]);
}

#[test]
fn a_python_program_answers_over_http_and_mcp_in_the_linux_backend_scored_by_a_command() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    for program in ["http-agent", "mcp-agent"] {
        let (code, run, outputs) = run_scenario(
            dir.path(),
            &id,
            &["--program", program, "--scorer", "command:same"],
            LOCAL,
            &env,
        );
        // Exit 1: the run completed, and its scorer failed it (one step of two is wrong).
        assert_eq!(code, 1, "{program}: {run}");
        assert_eq!(run["variant"], "candidate", "{run}");
        check_program_run(&run, &outputs);
    }
}

#[test]
fn the_same_program_run_twice_gives_byte_identical_outputs() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let extra = ["--program", "http-agent", "--seed", "7"];
    let (_, a, first) = run_scenario(dir.path(), &id, &extra, LOCAL, &env);
    let (_, b, second) = run_scenario(dir.path(), &id, &extra, LOCAL, &env);
    assert_ne!(a["id"], b["id"]);
    let strip = |v: &[Value]| -> Vec<(Value, Value, Value)> {
        v.iter()
            .map(|o| (o["step"].clone(), o["input"].clone(), o["output"].clone()))
            .collect()
    };
    assert_eq!(strip(&first), strip(&second));
    assert_eq!(a["verdict"], "not_scored", "{a}");
}

#[test]
fn a_program_through_a_server_reaches_only_its_runs_ops_and_mcp() {
    let dir = lab_dir();
    let env = env();
    let served = serve_with(dir.path(), &["-c", "corral.yaml"], &env, Stdio::null());
    let conn = [
        "--server",
        served.url.as_str(),
        "--token-env",
        "CORRAL_IT_OPERATOR",
    ];
    let id = create_scenario(dir.path(), &conn, &env);
    let (code, run, outputs) = run_scenario(
        dir.path(),
        &id,
        &["--program", "http-agent", "--scorer", "command:same"],
        &conn,
        &env,
    );
    assert_eq!(code, 1, "{run}");
    check_program_run(&run, &outputs);

    let (code, run, outputs) = run_scenario(dir.path(), &id, &["--program", "probe"], &conn, &env);
    assert_eq!(code, 0, "{run}");
    let text = outputs[0]["output"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            // Its world's ops: `scenario.resource` (and what the base policy allows).
            "ops 200",
            // Nothing of the lab, the audit or the caller's identity: not routes of a link.
            "sandbox 404 route.not_found",
            "sandbox-run 404 route.not_found",
            "audit 404 route.not_found",
            "me 404 route.not_found",
            "no-token 401 auth.missing",
            "no-token-call 401 auth.missing",
            // The operator's own token is not the run's: refused on the link.
            "wrong-token 401 auth.invalid",
            // A real op of the deployment is answered from the mocks (a miss), never run.
            "real-op 404 lab.mock_miss",
            // Its calls are its run's: another run id in `X-Corral-Run` is refused.
            "run-header 403 run.scope_mismatch",
            // A request head over 64 KiB is refused before corral buffers more of it.
            "big-head 431",
            // The link is no proxy and no tunnel: CONNECT, an absolute-form URI naming another
            // route, an upgrade to h2c are requests to the same few routes.
            "connect 404",
            "absolute-form 404",
            "h2c 404",
            "outside unreachable",
            "shadow unreadable",
            "env ['CORRAL_RUN', 'CORRAL_SEED', 'CORRAL_STEP', 'CORRAL_TOKEN', 'CORRAL_TRIAL', 'CORRAL_URL']",
        ],
        "{text}"
    );
    assert!(!text.contains("host secret"));

    // A step's token, printed by its program, is worth nothing on corral's own listener.
    let (code, run, outputs) = run_scenario(dir.path(), &id, &["--program", "token"], &conn, &env);
    assert_eq!(code, 0, "{run}");
    let token = outputs[0]["output"].as_str().unwrap().to_owned();
    assert!(token.starts_with("corral-run-"), "{token}");
    let mut with_token = env.clone();
    with_token.push(("CORRAL_IT_RUN_TOKEN", &token));
    let conn = [
        "--server",
        served.url.as_str(),
        "--token-env",
        "CORRAL_IT_RUN_TOKEN",
    ];
    let (code, _, out) = lab(dir.path(), &["runs", "list"], &conn, &with_token);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("auth.invalid"), "{out}");
}

#[test]
fn a_program_or_scorer_whose_read_path_holds_corrals_config_and_state_sees_neither() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let (code, run, outputs) = run_scenario(
        dir.path(),
        &id,
        &["--program", "own-files", "--scorer", "command:own-files"],
        LOCAL,
        &env,
    );
    // The program reads its own file in the config's directory, never corral's config or its
    // state (the store: every run, scenario and audit event); the scorer neither (it prints
    // `leaked`, failing the run, if it saw more than its own file).
    assert_eq!(
        answers(&outputs),
        ["seen agents/own_files.py", "seen agents/own_files.py"],
        "{run}"
    );
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["score"], 1.0, "{run}");
    assert_eq!(code, 0, "{run}");
}

#[test]
fn a_program_answering_a_mib_per_step_has_its_run_keep_at_most_64_mib_of_outputs() {
    // Held in corral's memory until the run is recorded, then stored: without a cap a run of
    // 10,000 steps could make corral hold (and store) 10 GiB of one program's answers.
    let dir = lab_dir();
    let env = env();
    std::fs::write(
        dir.path().join("one.json"),
        r#"[{"input": "agent:user1@example.test"}]"#,
    )
    .unwrap();
    let (code, v, out) = lab(
        dir.path(),
        &[
            "scenarios",
            "create",
            "--name",
            "one",
            "--steps-file",
            "one.json",
            "--mocks-file",
            "mocks.json",
        ],
        LOCAL,
        &env,
    );
    assert_eq!(code, 0, "{out}");
    let id = v["id"].as_str().unwrap();
    let mut args = vec![
        "scenarios",
        "run",
        id,
        "--variant",
        "v",
        "--program",
        "large",
    ];
    args.extend_from_slice(&["--trials", "70"]);
    let (code, run, out) = lab(dir.path(), &args, LOCAL, &env);
    assert_eq!(code, 1, "{}", &out[..out.len().min(2000)]);
    // 67 steps of a 1,000,000-byte answer (and its input) fit in 64 MiB; the 68th would pass
    // it, so the run stops there, failed on corral's side, and trials 69-70 never run.
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "lab.run_output_too_large", "{run}");
    assert_eq!(
        (run["steps_ok"].as_u64(), run["steps_error"].as_u64()),
        (Some(67), Some(1)),
        "{run}"
    );
    let (c, outputs, o) = lab(
        dir.path(),
        &["runs", "outputs", run["id"].as_str().unwrap()],
        LOCAL,
        &env,
    );
    assert_eq!(c, 0, "{}", &o[..o.len().min(2000)]);
    assert_eq!(outputs["items"].as_array().unwrap().len(), 68);
    let last = &outputs["items"][67];
    assert_eq!(last["error_code"], "lab.run_output_too_large", "{last}");
    assert_eq!(last["output"], "", "{last}");
}

#[test]
fn a_programs_answer_printed_as_json_carries_no_character_a_terminal_acts_on() {
    // serde_json writes C0 controls as `\u00XX`, but C1 controls (CSI is U+009B) and bidi or
    // zero-width characters as they are: printed to a terminal, they drive it or spoof the text.
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let (code, run, outputs) = run_scenario(
        dir.path(),
        &id,
        &["--program", "hostile-bytes"],
        LOCAL,
        &env,
    );
    assert_eq!(code, 0, "{run}");
    let answer = "\u{1b}[2J\u{9b}31m\u{202e}evil\u{200b}";
    assert_eq!(answers(&outputs), [answer, answer]);
    let (c, out, err) = corral_with_env(
        dir.path(),
        &[
            &[
                "sandbox",
                "runs",
                "outputs",
                run["id"].as_str().unwrap(),
                "-o",
                "json",
            ][..],
            LOCAL,
        ]
        .concat(),
        &env,
    );
    assert_eq!(c, 0, "{err}");
    for bad in ['\u{1b}', '\u{9b}', '\u{202e}', '\u{200b}'] {
        assert!(!out.contains(bad), "{bad:?} printed raw: {out:?}");
    }
    assert!(out.contains(r"\u009b31m\u202eevil\u200b"), "{out}");
}

#[test]
fn a_command_scorer_reaches_no_network_at_all() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let (code, run, _) = run_scenario(
        dir.path(),
        &id,
        &["--program", "http-agent", "--scorer", "command:netless"],
        LOCAL,
        &env,
    );
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["score"], 1.0, "{run}");
    assert_eq!(run["isolated"], true, "{run}");
}

/// Whether a process whose command line holds `marker` is running on the host.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
    })
}

#[test]
fn a_process_a_program_starts_in_a_session_of_its_own_does_not_outlive_its_step() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let (code, run, outputs) = run_scenario(dir.path(), &id, &["--program", "forks"], LOCAL, &env);
    assert_eq!(code, 0, "{run}");
    assert_eq!(answers(&outputs), ["forked", "forked"], "{run}");
    assert_eq!(run["destroyed"], true, "{run}");
    assert!(!running("987.654"), "a program's process outlived its run");
}

#[test]
fn a_failing_program_is_the_agents_failure_and_a_broken_scorer_fails_the_run() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let (code, run, outputs) =
        run_scenario(dir.path(), &id, &["--program", "failing"], LOCAL, &env);
    assert_eq!(code, 0, "agent failures complete the run: {run}");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps_error"], 2, "{run}");
    assert!(
        outputs
            .iter()
            .all(|o| o["error_code"] == "lab.program_failed"),
        "{outputs:?}"
    );

    let (code, run, _) = run_scenario(
        dir.path(),
        &id,
        &["--program", "http-agent", "--scorer", "command:broken"],
        LOCAL,
        &env,
    );
    assert_eq!(code, 1, "{run}");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "lab.program_output", "{run}");

    // A step the program failed (it crashed) fails its expected value: no scorer is asked, not
    // even one that passes everything.
    let (code, run, outputs) = run_scenario(
        dir.path(),
        &id,
        &["--program", "failing", "--scorer", "command:always-pass"],
        LOCAL,
        &env,
    );
    assert_eq!(code, 1, "{run}");
    assert_eq!(
        (&run["verdict"], &run["score"]),
        (&json!("failed"), &json!(0.0)),
        "{run}"
    );
    assert!(outputs.iter().all(|o| o["pass"] == false), "{outputs:?}");
}

#[test]
fn an_undeclared_program_or_scorer_and_a_mismatched_isolation_are_refused_before_anything_runs() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    for (extra, code_) in [
        (vec!["--program", "nope"], "lab.program_unknown"),
        (vec!["--scorer", "command:nope"], "lab.program_unknown"),
        (
            vec!["--program", "http-agent", "--isolation", "inproc-mock"],
            "lab.isolation_unsupported",
        ),
        (vec!["--isolation", "linux"], "lab.isolation_unsupported"),
    ] {
        let mut args = vec!["scenarios", "run", id.as_str(), "--variant", "v"];
        args.extend_from_slice(&extra);
        let (code, _, out) = lab(dir.path(), &args, LOCAL, &env);
        assert_eq!(code, 1, "{extra:?}: {out}");
        assert!(out.contains(code_), "{extra:?}: {out}");
    }
    let (code, v, out) = lab(dir.path(), &["runs", "list"], LOCAL, &env);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        v["items"].as_array().map(Vec::len),
        Some(0),
        "nothing was recorded: {v}"
    );
}

/// docs/lab.md's external-program example, run by the test below.
pub(crate) const PROGRAM_EXAMPLE: &str = "corral sandbox scenarios run <scenario-id> --variant candidate --program echo-agent --scorer command:same -o json";

#[test]
fn docs_lab_md_external_program_example_runs_as_written() {
    let blocks = crate::lab::lab_md_blocks();
    let block = |info: &str, first: &str| -> String {
        blocks
            .iter()
            .find(|(i, lines)| i == info && lines.first().is_some_and(|l| l.starts_with(first)))
            .map(|(_, lines)| lines.join("\n") + "\n")
            .unwrap_or_else(|| panic!("docs/lab.md has no `{info}` block starting `{first}`"))
    };
    let base = CONFIG.split("sandbox:").next().unwrap();
    let dir = workspace(Some(&format!("{base}{}", block("yaml", "sandbox:"))));
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    std::fs::write(
        agents.join("echo_agent.py"),
        block("python", "import json, os"),
    )
    .unwrap();
    std::fs::write(agents.join("same.py"), block("python", "import json, sys")).unwrap();
    std::fs::write(dir.path().join("steps.json"), STEPS).unwrap();
    std::fs::write(dir.path().join("mocks.json"), MOCKS).unwrap();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let line = PROGRAM_EXAMPLE.replace("<scenario-id>", &id);
    let mut args: Vec<&str> = line.split_whitespace().skip(1).collect();
    args.extend_from_slice(LOCAL);
    let (code, out, err) = corral_with_env(dir.path(), &args, &env);
    assert_eq!(
        code, 1,
        "the scorer fails the run's second step: {out}{err}"
    );
    let run: Value = serde_json::from_str(&out).unwrap();
    let (c, outputs, o) = lab(
        dir.path(),
        &["runs", "outputs", run["id"].as_str().unwrap()],
        LOCAL,
        &env,
    );
    assert_eq!(c, 0, "{o}");
    check_program_run(&run, outputs["items"].as_array().unwrap());
}

#[test]
fn a_program_gets_at_most_1000_requests_per_step_so_it_cannot_flood_the_audit() {
    let dir = lab_dir();
    let env = env();
    let id = create_scenario(dir.path(), LOCAL, &env);
    let (_, run, outputs) = run_scenario(dir.path(), &id, &["--program", "chatty"], LOCAL, &env);
    assert_eq!(run["status"], "completed", "{run}");
    // Each step has its own allowance: 1,000 answered, the rest refused (429 `limit.rate`).
    for o in &outputs {
        assert_eq!(o["output"], "200=1000 429=5", "{o}");
    }
}
