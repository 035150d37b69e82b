//! The lab's world attacked: a scenario author, an agent under test or a caller trying to make
//! a simulation reach something real, forge a miss or a refusal, widen the policy, spend a live
//! run's budget, or inject templates.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use corral_exec::mock::MockBackend;
use corral_guard::{Call, CallOptions, Caller, Gateway, Reply};
use corral_lab::agent::Identity;
use corral_lab::runner::run_scenario;
use corral_lab::scenario::Scenario;
use corral_lab::workflow::Workflow;
use corral_lab::world::{CallAt, Lab};
use corral_mcp::upstream::Upstreams;
use serde_json::{Value, json};

use crate::support::{Recorded, ada, lab};

struct NoEnv;

impl corral_config::Env for NoEnv {
    fn var(&self, _name: &str) -> Option<String> {
        None
    }
}

/// The code of a scenario's refusal.
fn refused(v: Value) -> (&'static str, String) {
    let e = Scenario::from_json(&v).unwrap_err();
    (e.code, e.message)
}

fn at(n: usize) -> CallAt {
    CallAt {
        trial: 1,
        step: 1,
        n,
    }
}

fn code(r: &Reply) -> Option<&'static str> {
    match r {
        Reply::Refused(r) => Some(r.code),
        Reply::Json(_) | Reply::Stream(_) => None,
    }
}

#[test]
fn a_mocked_error_cannot_answer_a_miss_a_budget_or_a_refusal_of_the_guard_chain() {
    for forged in [
        "lab.mock_miss",
        "lab.scenario_invalid",
        "policy.denied",
        "op.not_enabled",
        "budget.exhausted",
        "rbac.denied",
        "autonomy.blocked",
        "confirmation.required",
        "auth.invalid",
        "run.scope_mismatch",
        "limit.rate",
    ] {
        let (code, message) = refused(json!({
            "name": "forged", "steps": [{"input": "x"}],
            "mocks": [{"op": "files.read", "args": {"path": "/a"}, "error": {"code": forged}}]
        }));
        assert_eq!(code, "lab.mock_invalid", "{forged}");
        assert!(
            message.contains("mocks[0]") && message.contains(forged),
            "{message}"
        );
        assert!(message.contains("files.not_found"), "{message}");
    }
    // The op's own failures stay mockable.
    for own in [
        "files.not_found",
        "net.connect_failed",
        "upstream.failed",
        "limit.timeout",
    ] {
        Scenario::from_json(&json!({
            "name": "own", "steps": [{"input": "x"}],
            "mocks": [{"op": "files.read", "args": {"path": "/a"}, "error": {"code": own}}]
        }))
        .unwrap();
    }
}

#[test]
fn a_scenario_built_in_code_is_held_to_the_same_mock_rules() {
    use corral_lab::scenario::{Mock, MockAnswer, Step};
    let step = || {
        vec![Step {
            input: "x".to_owned(),
            expected: None,
        }]
    };
    for code in ["lab.mock_miss", "server.internal", "no.such_code"] {
        let mock = Mock::Op {
            op: "files.read".to_owned(),
            args: json!({}),
            answer: MockAnswer::Error {
                code,
                message: "m".to_owned(),
            },
        };
        let e = Scenario::new("built", "", step(), vec![mock]).unwrap_err();
        assert_eq!(e.code, "lab.mock_invalid", "{code}");
    }
    let marker = Mock::Resource {
        resource: "a".to_owned(),
        response: "[[mock-miss:a]]".to_owned(),
    };
    let e = Scenario::new("built", "", step(), vec![marker]).unwrap_err();
    assert_eq!(e.code, "lab.mock_invalid");
}

#[tokio::test]
async fn a_mocked_answer_carrying_the_miss_marker_is_refused_so_a_hit_never_prints_a_miss() {
    let (code, message) = refused(json!({
        "name": "marker", "steps": [{"input": "a"}],
        "mocks": [{"resource": "a", "response": "[[mock-miss:b]]"}]
    }));
    assert_eq!(code, "lab.mock_invalid");
    assert!(
        message.contains("mocks[0]") && message.contains("[[mock-miss:"),
        "{message}"
    );
    for response in [
        json!({"content": "[[mock-miss:files.read {}]]"}),
        json!({"list": [1, {"deep": "x [[mock-miss:y"}]}),
        json!({"[[mock-miss:k": 1}),
    ] {
        let (code, _) = refused(json!({
            "name": "marker", "steps": [{"input": "a"}],
            "mocks": [{"op": "files.read", "args": {}, "response": response}]
        }));
        assert_eq!(code, "lab.mock_invalid", "{response}");
    }
    // The marker's text without its opening is an ordinary answer; a real miss is still one.
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let s = Scenario::from_json(&json!({
        "name": "near", "steps": [{"input": "a"}, {"input": "b"}],
        "mocks": [{"resource": "a", "response": "mock-miss:b]]"}]
    }))
    .unwrap();
    let r = run_scenario(lab.world(&s, "marker-1", ada()).unwrap(), &Identity, 0, 1).await;
    assert_eq!(r.outputs[0].output, "mock-miss:b]]");
    assert_eq!(r.outputs[1].output, "[[mock-miss:b]]");
    assert_eq!((r.steps_ok, r.mock_misses.len()), (1, 1));
}

/// A deployment as the runtime composes it for `corral serve`, every kind of op allowed: files,
/// commands, http, a custom op running a program, an upstream MCP server's tool.
async fn everything(root: &Path, port: u16) -> corral_guard::Deployment {
    let r = root.display();
    let yaml = format!(
        r#"version: 1
state_dir: {r}/.corral
custom:
  notes.make:
    argv: [/bin/sh, -c, "echo ran > {r}/custom-ran"]
    effects: [write, exec]
mcp_servers:
  fx:
    command: [/bin/sh, -c, "echo ran > {r}/upstream-ran"]
    tools:
      read_file: {{effects: [read]}}
rules:
  - allow: [files.read, files.write, files.list, files.download]
    paths: {{roots: ["{r}/ws"]}}
    confirm: never
  - allow: [files.delete]
    paths: {{roots: ["{r}/ws"]}}
  - allow: [commands.run]
    confirm: never
    commands:
      allow: ["sh ..."]
      cwd: {r}/ws
  - allow: [http.fetch]
    urls: {{hosts: ["127.0.0.1"], schemes: [http], ports: [{port}], block_private: false}}
    confirm: never
  - allow: [notes.make, mcp.fx.read_file]
    confirm: never
"#
    );
    let loaded = match corral_config::load_str("corral.yaml", &yaml, root, &NoEnv) {
        Ok(l) => l,
        Err(e) => panic!("{}", e.render()),
    };
    let backend: Arc<dyn corral_exec::Backend> = Arc::new(MockBackend::default());
    let upstreams = Upstreams::start(
        Vec::new(),
        &backend,
        Vec::new(),
        corral_runtime::compose::declared_upstream_tools(&loaded),
    );
    corral_runtime::compose::deployment(&loaded, &upstreams, Duration::ZERO).await
}

#[tokio::test]
async fn a_simulated_world_runs_no_command_no_custom_op_no_upstream_and_touches_no_file_or_host() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("keep"), "real content").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let base = everything(root, port).await;
    let w = |p: &str| ws.join(p).display().to_string();
    let url = format!("http://127.0.0.1:{port}/x");
    // Each op: the arguments of a call, every one mocked with an answer, an error, or not at all.
    let calls: Vec<(&str, Value)> = vec![
        ("files.read", json!({"path": w("keep")})),
        ("files.write", json!({"path": w("written"), "content": "x"})),
        ("files.delete", json!({"path": w("keep")})),
        ("files.list", json!({"path": w(".")})),
        ("files.download", json!({"path": w("keep")})),
        (
            "commands.run",
            json!({"argv": ["sh", "-c", format!("echo ran > {}", w("cmd-ran"))]}),
        ),
        ("http.fetch", json!({"url": url})),
        ("notes.make", json!({})),
        ("mcp.fx.read_file", json!({})),
    ];
    let audit = Arc::new(Recorded::default());
    let lab = Lab::new(&base, vec![audit.clone()], "default").unwrap();
    // Three worlds: every call mocked with an answer, every call mocked with an error, no mock.
    for mode in ["response", "error", "miss"] {
        let mocks: Vec<Value> = match mode {
            "response" => calls
                .iter()
                .map(|(op, args)| json!({"op": op, "args": args, "response": {"mocked": op}}))
                .collect(),
            "error" => calls
                .iter()
                .map(|(op, args)| json!({"op": op, "args": args, "error": {"code": "files.not_found", "message": "mocked"}}))
                .collect(),
            _ => Vec::new(),
        };
        let s =
            Scenario::from_json(&json!({"name": mode, "steps": [{"input": "x"}], "mocks": mocks}))
                .unwrap();
        let world = lab.world(&s, &format!("everything-{mode}"), ada()).unwrap();
        for (n, (op, args)) in calls.iter().enumerate() {
            let reply = world.call(at(n + 1), op, args.clone()).await;
            match (mode, reply) {
                // A destructive op is confirmed even in a simulation: nobody approves, nothing runs.
                (_, Reply::Refused(r)) if *op == "files.delete" => {
                    assert_eq!(r.code, "confirmation.required");
                }
                ("response", Reply::Json(v)) => assert_eq!(v, json!({"mocked": op}), "{op}"),
                ("error", Reply::Refused(r)) => {
                    assert_eq!(
                        (r.code, r.message.as_str()),
                        ("files.not_found", "mocked"),
                        "{op}"
                    );
                }
                ("miss", Reply::Refused(r)) => assert_eq!(r.code, "lab.mock_miss", "{op}"),
                (_, other) => panic!("{mode} {op}: {other:?}"),
            }
        }
        assert_eq!(
            world.take_misses().len(),
            if mode == "miss" { calls.len() - 1 } else { 0 }
        );
    }
    for marker in ["custom-ran", "upstream-ran", "ws/cmd-ran", "ws/written"] {
        assert!(
            !root.join(marker).exists(),
            "{marker} was created: something real ran"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("keep")).unwrap(),
        "real content"
    );
    assert!(
        listener.accept().is_err(),
        "the simulated http.fetch connected to the host"
    );
    let events = audit.events();
    let ok: Vec<_> = events
        .iter()
        .filter(|e| e.outcome == corral_guard::audit::Outcome::Ok)
        .collect();
    assert_eq!(ok.len(), calls.len() - 1);
    assert!(
        ok.iter()
            .all(|e| e.attestation.as_ref().unwrap().backend == "inproc-mock")
    );
}

/// A call of `op` with `args` through `gw` as `ada`, in run `run`.
async fn live(gw: &Gateway, op: &str, args: Value, run: &str) -> Reply {
    let call = Call {
        caller: Caller::new(ada()).with_run(Some(run.to_owned())),
        op: op.to_owned(),
        args,
        request_id: format!("live-{op}"),
    };
    gw.call_with(call, CallOptions::default()).await
}

#[tokio::test]
async fn the_labs_op_is_not_enabled_on_the_deployments_own_gateway_and_its_rule_widens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    std::fs::create_dir_all(dir.path().join("private")).unwrap();
    std::fs::write(dir.path().join("private/secret"), "real secret").unwrap();
    let base = crate::support::deployment(&crate::support::config(dir.path()), dir.path());
    let live_gw = Gateway::new(
        base,
        Arc::new(MockBackend::default()),
        vec![Arc::new(Recorded::default())],
        "default",
    );
    let r = live(&live_gw, "scenario.resource", json!({"resource": "a"}), "r").await;
    assert_eq!(code(&r), Some("op.not_enabled"));
    // In a world, every op the base does not allow stays refused, mocked or not, and the
    // refusal is the policy's: the mocks are never asked (no miss).
    let secret = format!("{root}/private/secret");
    let s = Scenario::from_json(&json!({
        "name": "widen", "steps": [{"input": "a"}],
        "mocks": [
            {"resource": "a", "response": "ok"},
            {"op": "files.read", "args": {"path": secret}, "response": {"content": "mocked"}},
            {"op": "files.write", "args": {"path": format!("{root}/x"), "content": "x"}, "response": {}},
            {"op": "commands.run", "args": {"argv": ["true"]}, "response": {}}
        ]
    }))
    .unwrap();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let world = lab.world(&s, "widen-1", ada()).unwrap();
    let r = world
        .call(at(1), "files.read", json!({"path": secret}))
        .await;
    assert_eq!(code(&r), Some("policy.path_denied"), "{r:?}");
    for (op, args) in [
        (
            "files.write",
            json!({"path": format!("{root}/x"), "content": "x"}),
        ),
        ("commands.run", json!({"argv": ["true"]})),
    ] {
        let r = world.call(at(2), op, args).await;
        assert_eq!(code(&r), Some("op.not_enabled"), "{op}: {r:?}");
    }
    assert!(world.take_misses().is_empty());
    let r = world
        .call(at(3), "scenario.resource", json!({"resource": "a"}))
        .await;
    assert!(matches!(r, Reply::Json(_)), "{r:?}");
}

#[tokio::test]
async fn op_ids_with_odd_case_whitespace_or_lookalike_letters_are_not_enabled_and_ask_no_mock() {
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario::from_json(&json!({
        "name": "odd", "steps": [{"input": "a"}],
        "mocks": [{"resource": "a", "response": "ok"}]
    }))
    .unwrap();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let world = lab.world(&s, "odd-1", ada()).unwrap();
    for op in [
        "Scenario.Resource",
        " scenario.resource",
        "scenario.resource\n",
        "scenario.resource\0",
        "scenario.res\u{043e}urce",
        "scenario..resource",
        "scenario.*",
        "*",
        "",
    ] {
        let r = world.call(at(1), op, json!({"resource": "a"})).await;
        assert_eq!(code(&r), Some("op.not_enabled"), "{op:?}: {r:?}");
    }
    assert!(world.take_misses().is_empty());
}

#[tokio::test]
async fn a_lab_run_and_a_live_run_with_one_id_and_principal_spend_separate_budgets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), "real").unwrap();
    let yaml = format!(
        "{}budgets: {{max_calls: 1}}\n",
        crate::support::config(dir.path())
    );
    let base = crate::support::deployment(&yaml, dir.path());
    let lab = Lab::new(&base, vec![Arc::new(Recorded::default())], "default").unwrap();
    let live_gw = Gateway::new(
        base,
        Arc::new(MockBackend::default()),
        vec![Arc::new(Recorded::default())],
        "default",
    );
    let path = dir.path().join("a").display().to_string();
    let r = live(&live_gw, "files.read", json!({"path": path}), "shared").await;
    assert!(matches!(r, Reply::Json(_)), "{r:?}");
    let s = Scenario::from_json(&json!({
        "name": "budget", "steps": [{"input": "a"}],
        "mocks": [{"resource": "a", "response": "x"}]
    }))
    .unwrap();
    // The live run spent its one call; the lab run of the same id and principal has its own.
    let r = run_scenario(lab.world(&s, "shared", ada()).unwrap(), &Identity, 0, 1).await;
    assert_eq!(r.steps_ok, 1, "{:?}", r.agent_errors);
    // And the lab run did not spend the live run's: it is exhausted by its own call only.
    let r = live(&live_gw, "files.read", json!({"path": path}), "shared").await;
    assert_eq!(code(&r), Some("budget.exhausted"));
    let r = live(&live_gw, "files.read", json!({"path": path}), "other").await;
    assert!(matches!(r, Reply::Json(_)), "{r:?}");
}

#[tokio::test]
async fn step_inputs_and_mocked_answers_are_inserted_as_text_and_never_expanded_again() {
    let dir = tempfile::tempdir().unwrap();
    let wf = Workflow::from_yaml(
        r#"name: echo
version: 1
steps:
  - op: scenario.resource
    args: {resource: "{{input}}"}
    as: a
  - op: scenario.resource
    args: {resource: "{{steps.a.response}}"}
    as: b
output: "{{steps.b.response}}|{{input}}"
"#,
    )
    .unwrap();
    let s = Scenario::from_json(&json!({
        "name": "inject", "steps": [{"input": "{{steps.a.response}}"}],
        "mocks": [
            {"resource": "{{steps.a.response}}", "response": "{{input}}"},
            {"resource": "{{input}}", "response": "{{steps.b}} }}{{"}
        ]
    }))
    .unwrap();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let r = run_scenario(lab.world(&s, "inject-1", ada()).unwrap(), &wf, 0, 1).await;
    assert_eq!(r.outputs[0].output, "{{steps.b}} }}{{|{{steps.a.response}}");
    assert!(r.mock_misses.is_empty());
}

#[test]
fn yaml_bombs_and_deep_nesting_in_a_workflow_are_load_errors_not_crashes() {
    let aliases = "name: a\nversion: 1\nsteps:\n  - op: files.read\n    args: &x {path: a}\n  - op: files.read\n    args: *x\noutput: x\n";
    let e = Workflow::from_yaml(aliases).unwrap_err();
    assert_eq!(e.code, "lab.workflow_invalid");
    let deep = format!(
        "name: a\nversion: 1\nsteps:\n  - op: files.read\n    args: {{path: {}{}}}\noutput: x\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = Workflow::from_yaml(&deep).unwrap_err();
    assert_eq!(e.code, "lab.workflow_invalid");
    let template = format!("{}input{}", "{{".repeat(50_000), "}}".repeat(50_000));
    let wide = format!("name: a\nversion: 1\nsteps:\n  - op: files.read\noutput: \"{template}\"\n");
    let e = Workflow::from_yaml(&wide).unwrap_err();
    assert_eq!(e.code, "lab.workflow_template");
}

#[tokio::test]
async fn a_workflow_repeating_a_large_answer_is_stopped_at_one_mib_not_held_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(600 * 1024);
    let s = Scenario::from_json(&json!({
        "name": "amplify", "steps": [{"input": "a"}],
        "mocks": [{"resource": "a", "response": big}]
    }))
    .unwrap();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let fetch = "  - op: scenario.resource\n    args: {resource: \"{{input}}\"}\n    as: a\n";
    // The output repeats the answer twice (1.2 MiB); then a call's arguments do.
    let output = Workflow::from_yaml(&format!(
        "name: o\nversion: 1\nsteps:\n{fetch}output: \"{{{{steps.a.response}}}}{{{{steps.a.response}}}}\"\n"
    ))
    .unwrap();
    let args = Workflow::from_yaml(&format!(
        "name: a\nversion: 1\nsteps:\n{fetch}  - op: scenario.resource\n    args: {{resource: [\"{{{{steps.a.response}}}}\", \"{{{{steps.a.response}}}}\"]}}\noutput: done\n"
    ))
    .unwrap();
    for (wf, what) in [(output, "`output`"), (args, "call 2")] {
        let audit = Arc::new(Recorded::default());
        let lab = crate::support::lab(dir.path(), audit.clone());
        let r = run_scenario(lab.world(&s, "amplify-1", ada()).unwrap(), &wf, 0, 1).await;
        assert_eq!(r.outputs[0].error, Some("lab.output_too_large"), "{what}");
        assert!(r.outputs[0].output.is_empty());
        assert!(
            r.agent_errors[0].message.starts_with(what),
            "{}",
            r.agent_errors[0].message
        );
        // The call whose arguments were too large was never made.
        assert_eq!(audit.events().len(), 1, "{what}");
    }
    // Under the bound, the same answer renders whole.
    let once = Workflow::from_yaml(&format!(
        "name: once\nversion: 1\nsteps:\n{fetch}output: \"{{{{steps.a.response}}}}\"\n"
    ))
    .unwrap();
    let r = run_scenario(lab.world(&s, "amplify-2", ada()).unwrap(), &once, 0, 1).await;
    assert_eq!(r.outputs[0].output.len(), big.len());
}

#[test]
fn a_regex_expectation_cannot_close_the_anchoring_group_and_pass_any_output() {
    let re = corral_lab::score::builtin("regex").unwrap();
    for pattern in ["no)|(?:.*", "no)|(.*", "x)|(?s:.*", "(?x)no|.*#"] {
        let r = re.score("in", "any output at all", &json!(pattern));
        let e = r.map(|s| s.pass()).unwrap_err();
        assert_eq!(e.code(), "lab.expected_invalid", "{pattern}");
    }
    // A pattern that compiles alone keeps whole-output semantics.
    let r = re.score("in", "line\nyes", &json!("(?x) line \\n yes # comment\n"));
    assert!(r.unwrap().pass());
}

#[tokio::test]
async fn a_run_whose_outputs_reach_the_per_run_cap_stops_there_failed_and_says_where_and_how_to_fix_it()
 {
    use corral_lab::runner::{MAX_RUN_OUTPUT_BYTES, RunStatus};
    let dir = tempfile::tempdir().unwrap();
    // One step whose mocked answer is 900 KiB: 100 trials would hold about 88 MiB.
    let big = "y".repeat(900 * 1024);
    let s = Scenario::from_json(&json!({
        "name": "large answers", "steps": [{"input": "big"}],
        "mocks": [{"resource": "big", "response": big}]
    }))
    .unwrap();
    let audit = Arc::new(Recorded::default());
    let lab = lab(dir.path(), audit.clone());
    let r = run_scenario(lab.world(&s, "capped-1", ada()).unwrap(), &Identity, 0, 100).await;
    let per_step = big.len() + "big".len();
    let kept = MAX_RUN_OUTPUT_BYTES / per_step;
    let stop = u32::try_from(kept).unwrap() + 1;
    assert_eq!(kept, 72);
    assert_eq!(r.status, RunStatus::Failed);
    assert!(r.output_bytes <= MAX_RUN_OUTPUT_BYTES, "{}", r.output_bytes);
    assert_eq!(r.output_bytes, kept * per_step);
    // The step that would pass the cap is an infrastructure failure naming its trial and step
    // and how to fix it; nothing of its answer is kept, and no later trial ran.
    assert_eq!(r.infra_errors.len(), 1);
    let f = &r.infra_errors[0];
    assert_eq!(
        (f.code, f.trial, f.step),
        ("lab.run_output_too_large", stop, 1)
    );
    assert!(
        f.message.contains(&format!("at trial {stop} step 1"))
            && f.message.contains("fewer `trials`")
            && f.message.contains("smaller answers"),
        "{}",
        f.message
    );
    assert!(r.agent_errors.is_empty(), "not the agent's failure");
    assert_eq!(r.outputs.len(), kept + 1);
    let last = r.outputs.last().unwrap();
    assert_eq!(
        (last.trial, last.ok, last.error),
        (stop, false, Some("lab.run_output_too_large"))
    );
    assert!(last.output.is_empty() && last.input.is_empty());
    assert_eq!(
        (r.steps_total, r.steps_ok, r.steps_error),
        (kept + 1, kept, 1)
    );
    // The trials after it never called anything.
    assert_eq!(audit.events().len(), kept + 1);
    assert!(r.destroyed);
}
