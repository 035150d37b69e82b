//! Sandboxed replay (issue 15 item 3), spec 001's verification steps as they land. Steps 1-4:
//! 1. an unsafe-calling workflow is rejected at load, naming the tool;
//! 2. the rejection happens before any run (the run counter is 0, the ledger empty);
//! 3. a safe workflow is accepted and replayed with the real tools (the file it reads is read);
//! 4. defence in depth: at call time an unsafe op is `404 op.not_enabled`, even with the load
//!    check bypassed and a policy that allows it.
//!
//! Steps 5-7 (continuing past a divergence, purposes and ceilings, N*M runs counted) come with
//! the replay runner.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "it/support.rs"]
mod support;

use std::sync::Arc;

use corral_exec::mock::MockBackend;
use corral_guard::{Call, Caller, Reply};
use corral_lab::replay::ReplayLab;
use corral_lab::runner::{RunStatus, run_scenario};
use corral_lab::scenario::Scenario;
use corral_lab::workflow::Workflow;
use corral_lab::world::World;
use corral_policy::codes;
use serde_json::json;

use support::{Recorded, ada, deployment};

/// `files.read` and `files.write` allowed under `root`: a policy that would let a replay write.
fn config(root: &str) -> String {
    format!(
        "version: 1
rules:
  - allow: [files.read, files.write]
    paths: {{roots: [{root}]}}
"
    )
}

fn workflow(ops: &[&str], root: &str) -> Workflow {
    let steps: String = ops
        .iter()
        .enumerate()
        .map(|(i, op)| {
            format!(
                "  - op: {op}\n    args: {{path: \"{root}/{{{{input}}}}.txt\"{}}}\n    as: s{i}\n",
                if *op == "files.write" {
                    ", content: x"
                } else {
                    ""
                }
            )
        })
        .collect();
    let yaml = format!(
        "name: replayed\nversion: 1\nsteps:\n{steps}output: \"{{{{steps.s0.content}}}}\"\n"
    );
    match Workflow::from_yaml(&yaml) {
        Ok(w) => w,
        Err(e) => panic!("{}: {yaml}", e.message),
    }
}

/// The replay lab of a deployment whose config lives in `dir` and whose rule covers `dir/ws`
/// (the state directory, `dir/.corral`, stays outside what it may write); and that root.
fn replay_lab(dir: &std::path::Path) -> (ReplayLab, Arc<Recorded>) {
    let audit = Arc::new(Recorded::default());
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let base = deployment(&config(&root.display().to_string()), dir);
    let lab = ReplayLab::new(
        &base,
        Arc::new(MockBackend::default()),
        vec![audit.clone()],
        "default",
    );
    (lab, audit)
}

#[test]
fn step_1_and_2_an_unsafe_calling_workflow_is_rejected_at_load_naming_the_tool_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws").display().to_string();
    let (lab, audit) = replay_lab(dir.path());
    assert!(
        lab.left_out().iter().any(|op| op == "files.write"),
        "{:?}",
        lab.left_out()
    );
    let wf = workflow(&["files.read", "files.write"], &root);
    let e = lab.eligible(&wf).unwrap_err();
    assert_eq!(e.code, codes::REPLAY_UNSAFE_OP);
    assert_eq!(e.op, "files.write");
    assert!(e.message.contains("`files.write`"), "{}", e.message);
    // Step 2: nothing ran: the run counter is 0, the ledger and the audit are empty.
    assert!(lab.ledger().is_empty());
    assert_eq!(lab.ledger().len(), 0);
    assert!(audit.events().is_empty());
}

#[tokio::test]
async fn step_3_a_safe_workflow_is_accepted_and_replayed_with_the_real_tools() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws").display().to_string();
    let (lab, audit) = replay_lab(dir.path());
    std::fs::write(dir.path().join("ws/alice.txt"), "alice's real notes").unwrap();
    let wf = workflow(&["files.read"], &root);
    lab.eligible(&wf).unwrap();
    let scenario = Scenario::from_json(&json!({
        "name": "recorded task", "steps": [{"input": "alice"}]
    }))
    .unwrap();
    let world = World::over(lab.gateway(), &scenario, "replay-1", ada()).unwrap();
    let r = run_scenario(world, &wf, 0, 1).await;
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    assert_eq!(r.outputs[0].output, "alice's real notes", "{r:?}");
    assert_eq!(r.purpose, "replay");
    // Real tools ran: the run is attested as the replay's backend, never as an isolated mock.
    assert_eq!((r.backend, r.isolated), ("inproc-mock", false), "{r:?}");
    assert_eq!(lab.ledger().len(), 1, "one replay run was metered");
    let events = audit.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].op, "files.read");
    assert_eq!(events[0].purpose.as_str(), "replay");
}

#[tokio::test]
async fn step_4_at_call_time_an_unsafe_op_is_not_enabled_even_with_the_load_check_bypassed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws").display().to_string();
    let (lab, _) = replay_lab(dir.path());
    // No `eligible` check: the call goes straight to the replay's gateway.
    let reply = lab
        .gateway()
        .call(Call {
            caller: Caller::new(ada()).with_run(Some("replay-2".to_owned())),
            op: "files.write".to_owned(),
            args: json!({"path": format!("{root}/planted.txt"), "content": "written by a replay"}),
            request_id: "r-1".to_owned(),
        })
        .await;
    match reply {
        Reply::Refused(r) => assert_eq!((r.code, r.status()), (codes::OP_NOT_ENABLED, 404)),
        other => panic!("a replay wrote: {other:?}"),
    }
    assert!(!dir.path().join("ws/planted.txt").exists());
}
