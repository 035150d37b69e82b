//! Sandboxed replay (issue 15 item 3), spec 001's verification steps as they land. Steps 1-4:
//! 1. an unsafe-calling workflow is rejected at load, naming the tool;
//! 2. the rejection happens before any run (the run counter is 0, the ledger empty);
//! 3. a safe workflow is accepted and replayed with the real tools (the file it reads is read);
//! 4. defence in depth: at call time an unsafe op is `404 op.not_enabled`, even with the load
//!    check bypassed and a policy that allows it.
//!
//! 5. replay re-executes the recorded task input, not the recorded trajectory: with a planted
//!    divergence, execution continues past it and yields a complete episode;
//! 6. replay runs carry purpose `replay` and count against the replay ceiling, never the
//!    judging one;
//! 7. N variants x M tasks is N*M runs, announced before anything runs and reported after.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "it/support.rs"]
mod support;

use std::sync::Arc;

use corral_exec::mock::MockBackend;
use corral_guard::audit::AuditSink;
use corral_guard::recording::RecordingKey;
use corral_guard::runs::RunPurpose;
use corral_guard::{Call, Caller, Gateway, Reply};
use corral_lab::replay::ReplayLab;
use corral_lab::runner::{RunStatus, run_scenario};
use corral_lab::scenario::Scenario;
use corral_lab::service::{LabService, PageQuery, VariantBody};
use corral_lab::shadow::{Ceilings, ShadowBody};
use corral_lab::workflow::Workflow;
use corral_lab::world::World;
use corral_policy::codes;
use corral_store::Store;
use corral_store::shadow::Shadow;
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

// ------------------------------------------------------------- steps 5-7: the shadow runner

/// A lab service over a store and the replay deployment's base (files.read and files.write
/// allowed under `dir/ws`), its gateway recording to the store; the audit in memory.
struct Shadowed {
    dir: tempfile::TempDir,
    store: Arc<Store>,
    gateway: Arc<Gateway>,
    lab: LabService,
    audit: Arc<Recorded>,
}

impl Shadowed {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            Store::connect(&Store::default_sqlite_url(dir.path()))
                .await
                .unwrap(),
        );
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        let audit = Arc::new(Recorded::default());
        let gateway = Arc::new(
            Gateway::new(
                deployment(&config(&root.display().to_string()), dir.path()),
                Arc::new(MockBackend::default()),
                vec![audit.clone() as Arc<dyn AuditSink>],
                "default",
            )
            .with_recorder(Arc::new(corral_store::RecordingWriter::spawn(&store))),
        );
        let lab = LabService::new(store.clone(), gateway.clone(), true);
        Self {
            dir,
            store,
            gateway,
            lab,
            audit,
        }
    }

    fn root(&self) -> String {
        self.dir.path().join("ws").display().to_string()
    }

    /// Writes `ws/<name>.txt`.
    fn file(&self, name: &str, content: &str) {
        std::fs::write(self.dir.path().join(format!("ws/{name}.txt")), content).unwrap();
    }

    /// Records a live session `run` by ada: a real `files.read` of each of `paths` (under
    /// `ws/`, recorded as called), then its task input: one step per input.
    async fn record(&self, run: &str, paths: &[&str], inputs: &[&str]) {
        for (i, p) in paths.iter().enumerate() {
            let reply = self
                .gateway
                .call(Call {
                    caller: Caller::new(ada())
                        .with_run(Some(run.to_owned()))
                        .with_record(true),
                    op: "files.read".to_owned(),
                    args: json!({"path": format!("{}/{p}", self.root())}),
                    request_id: format!("{run}-{i}"),
                })
                .await;
            assert!(matches!(reply, Reply::Json(_)), "{reply:?}");
        }
        let key = RecordingKey {
            tenant: "default".to_owned(),
            run_id: run.to_owned(),
            identity: support::ada().identity(),
            principal: "ada".to_owned(),
            purpose: RunPurpose::Live,
        };
        let steps: Vec<_> = inputs.iter().map(|i| json!({"input": i})).collect();
        self.store
            .set_recording_input(&key, &json!({"steps": steps}), 0)
            .await
            .unwrap();
    }

    /// The variant `label`: the workflow reading `ws/{{input}}.txt` for every step.
    fn reader(&self, label: &str) -> VariantBody {
        VariantBody {
            variant: label.to_owned(),
            workflow: Some(format!(
                "name: {label}\nversion: 1\nsteps:\n  - op: files.read\n    args: {{path: \"{}/{{{{input}}}}.txt\"}}\n    as: s0\noutput: \"{{{{steps.s0.content}}}}\"\n",
                self.root()
            )),
            program: None,
        }
    }

    async fn runs(&self) -> Vec<corral_store::lab::Run> {
        self.lab
            .list_runs(&Caller::new(ada()), "rid", None, &PageQuery::default())
            .await
            .unwrap()
            .items
    }

    async fn shadows(&self) -> Vec<Shadow> {
        self.lab
            .list_shadows(&Caller::new(ada()), "rid", &PageQuery::default())
            .await
            .unwrap()
            .items
    }
}

fn body(tasks: &[&str], variants: Vec<VariantBody>) -> ShadowBody {
    ShadowBody {
        tasks: tasks.iter().map(|t| (*t).to_owned()).collect(),
        variants,
        ..ShadowBody::default()
    }
}

#[tokio::test]
async fn step_5_replay_re_executes_the_task_input_past_a_planted_divergence_to_a_complete_episode()
{
    let s = Shadowed::new().await;
    for who in ["alice", "bob", "carol"] {
        s.file(who, &format!("{who}'s real notes"));
    }
    // The planted divergence: the recorded session read `bob-draft.txt` at its second call,
    // where the task's input (and the replayed agent) says `bob`.
    s.file("bob-draft", "what the recording saw");
    s.record(
        "task-1",
        &["alice.txt", "bob-draft.txt", "carol.txt"],
        &["alice", "bob", "carol"],
    )
    .await;
    let shadow = s
        .lab
        .shadow(
            &Caller::new(ada()),
            "rid",
            body(&["task-1"], vec![s.reader("challenger")]),
        )
        .await
        .unwrap();
    assert_eq!(
        (shadow.status.as_str(), shadow.planned, shadow.ran),
        ("completed", 1, 1)
    );
    let run = &shadow.report["runs"][0];
    let hash =
        |p: &str| corral_guard::args::args_hash(&json!({"path": format!("{}/{p}", s.root())}));
    // The first divergence is reported at its place in the call timeline, with what the
    // recording has there.
    assert_eq!(
        run["divergence"],
        json!({
            "step": 2,
            "op": "files.read",
            "args_hash": hash("bob.txt"),
            "recorded": {"op": "files.read", "args_hash": hash("bob-draft.txt")},
        }),
        "{run}"
    );
    assert_eq!(run["timeline"], "ordered");
    // Execution continued past it: every step has an output, read from the real files now
    // (the task input), never the recorded trajectory's responses.
    assert_eq!(
        (run["steps_total"].as_u64(), run["steps_ok"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(run["calls"], 3);
    let run_id = run["run_id"].as_str().unwrap();
    let outputs = s
        .lab
        .outputs(&Caller::new(ada()), "rid", run_id)
        .await
        .unwrap();
    let answers: Vec<&str> = outputs.iter().map(|o| o.output.as_str()).collect();
    assert_eq!(
        answers,
        [
            "alice's real notes",
            "bob's real notes",
            "carol's real notes"
        ]
    );
    assert!(!answers.contains(&"what the recording saw"));
}

#[tokio::test]
async fn step_5_a_replay_identical_to_its_recording_reports_no_divergence() {
    let s = Shadowed::new().await;
    s.file("alice", "notes");
    s.record("task-1", &["alice.txt"], &["alice"]).await;
    let shadow = s
        .lab
        .shadow(
            &Caller::new(ada()),
            "rid",
            body(&["task-1"], vec![s.reader("same")]),
        )
        .await
        .unwrap();
    assert_eq!(
        shadow.report["runs"][0]["divergence"],
        json!(null),
        "{shadow:?}"
    );
}

#[tokio::test]
async fn step_6_replay_runs_have_purpose_replay_and_count_against_the_replay_ceiling_not_the_judge_one()
 {
    let s = Shadowed::new().await;
    for who in ["alice", "bob", "carol"] {
        s.file(who, who);
    }
    s.record(
        "task-1",
        &["alice.txt", "bob.txt", "carol.txt"],
        &["alice", "bob", "carol"],
    )
    .await;
    s.record("task-2", &["carol.txt"], &["carol"]).await;
    // The judging ceiling is tiny: if a replay run or call were charged to it, it would stop.
    s.lab.set_ceilings(Ceilings {
        replay_max_runs: 2,
        replay_max_calls: 10_000,
        judge_max_calls: 1,
    });
    let shadow = s
        .lab
        .shadow(
            &Caller::new(ada()),
            "rid",
            body(&["task-1", "task-2"], vec![s.reader("v1"), s.reader("v2")]),
        )
        .await
        .unwrap();
    // The replay ceiling stopped scheduling after 2 runs, and says which pairs did not run.
    assert_eq!(shadow.status, "stopped_by_ceiling");
    assert_eq!((shadow.planned, shadow.ran), (4, 2));
    assert_eq!(shadow.report["stopped_by"], "budgets.replay.max_runs");
    assert_eq!(
        shadow.not_run,
        json!([{"variant": "v2", "task": "task-1"}, {"variant": "v2", "task": "task-2"}])
    );
    // Metered per purpose: 2 replay runs and their 4 calls; nothing charged to judging (its
    // ceiling of 1 call was passed by replay's calls, and never reached).
    let m = &shadow.report["metering"];
    assert_eq!(
        (m["replay"]["runs"].as_u64(), m["replay"]["calls"].as_u64()),
        (Some(2), Some(4))
    );
    assert_eq!(
        (m["judge"]["runs"].as_u64(), m["judge"]["calls"].as_u64()),
        (Some(0), Some(0))
    );
    // Model tokens and spend are unknown, not free.
    assert_eq!(
        (&m["replay"]["tokens"], &m["replay"]["spend"]),
        (&json!(null), &json!(null))
    );
    assert_eq!(s.lab.max_judge_calls(), 1);
    // Every run is a lab run of purpose `replay`, and so is every call it made.
    let runs = s.runs().await;
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.purpose == "replay"), "{runs:?}");
    let calls: Vec<_> = s
        .audit
        .events()
        .into_iter()
        .filter(|e| {
            e.op == "files.read"
                && e.run_id.as_deref() != Some("task-1")
                && e.run_id.as_deref() != Some("task-2")
        })
        .collect();
    assert_eq!(calls.len(), 4);
    assert!(
        calls.iter().all(|e| e.purpose == RunPurpose::Replay),
        "{calls:?}"
    );
}

#[tokio::test]
async fn step_6_the_replay_call_ceiling_caps_the_run_that_reaches_it_and_stops_the_rest() {
    let s = Shadowed::new().await;
    for who in ["alice", "bob", "carol"] {
        s.file(who, who);
    }
    s.record(
        "task-1",
        &["alice.txt", "bob.txt", "carol.txt"],
        &["alice", "bob", "carol"],
    )
    .await;
    s.lab.set_ceilings(Ceilings {
        replay_max_runs: 100,
        replay_max_calls: 4,
        judge_max_calls: 1_000,
    });
    let shadow = s
        .lab
        .shadow(
            &Caller::new(ada()),
            "rid",
            body(
                &["task-1"],
                vec![s.reader("v1"), s.reader("v2"), s.reader("v3")],
            ),
        )
        .await
        .unwrap();
    assert_eq!(shadow.status, "stopped_by_ceiling");
    assert_eq!(shadow.report["stopped_by"], "budgets.replay.max_calls");
    // v1 used 3 calls; v2 had 1 left: its first step ran, the others were refused by the
    // budget (its episode is still complete: every step has an output); v3 never ran.
    assert_eq!(shadow.report["metering"]["replay"]["calls"], 4);
    let v2 = &shadow.report["runs"][1];
    assert_eq!(
        (v2["steps_total"].as_u64(), v2["steps_ok"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(shadow.not_run, json!([{"variant": "v3", "task": "task-1"}]));
    assert_eq!(s.runs().await.len(), 2);
}

#[tokio::test]
async fn step_7_n_variants_x_m_tasks_is_n_m_runs_announced_before_anything_runs_and_reported() {
    let s = Shadowed::new().await;
    s.file("alice", "a");
    let tasks = ["t1", "t2", "t3", "t4"];
    for t in tasks {
        s.record(t, &["alice.txt"], &["alice"]).await;
    }
    let variants = || vec![s.reader("v1"), s.reader("v2"), s.reader("v3")];
    // 3 x 4 = 12 runs, over the threshold: not announced, nothing runs.
    for expected in [None, Some(11)] {
        let e = s
            .lab
            .shadow(
                &Caller::new(ada()),
                "rid",
                ShadowBody {
                    expected_runs: expected,
                    ..body(&tasks, variants())
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, codes::REPLAY_CONFIRM_NEEDED);
        assert!(e.message.contains("12 full agent runs"), "{}", e.message);
        assert!(e.message.contains("expected_runs: 12"), "{}", e.message);
        assert!(s.runs().await.is_empty());
        assert!(s.shadows().await.is_empty());
    }
    // Announced: 12 runs, counted and reported.
    let seen = std::sync::Mutex::new(Vec::new());
    let shadow = s
        .lab
        .shadow_with_progress(
            &Caller::new(ada()),
            "rid",
            ShadowBody {
                expected_runs: Some(12),
                ..body(&tasks, variants())
            },
            &|p| seen.lock().unwrap().push((p.done, p.planned)),
        )
        .await
        .unwrap();
    assert_eq!(
        (shadow.status.as_str(), shadow.planned, shadow.ran),
        ("completed", 12, 12)
    );
    assert_eq!(shadow.not_run, json!([]));
    assert_eq!(shadow.report["metering"]["replay"]["runs"], 12);
    assert_eq!(seen.lock().unwrap().first(), Some(&(1, 12)));
    assert_eq!(seen.lock().unwrap().last(), Some(&(12, 12)));
    // The run ids per task and variant (what a tournament grades), each a distinct replay run.
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        for v in ["v1", "v2", "v3"] {
            let id = shadow.runs[t]["runs"][v].as_str().unwrap();
            assert!(ids.insert(id.to_owned()));
        }
    }
    let runs = s.runs().await;
    assert_eq!(runs.len(), 12);
    assert!(
        runs.iter()
            .all(|r| r.purpose == "replay" && ids.contains(&r.id))
    );
    // It reads back as answered.
    let read = s
        .lab
        .get_shadow(&Caller::new(ada()), "rid", &shadow.id)
        .await
        .unwrap();
    assert_eq!(read, shadow);
}

#[tokio::test]
async fn step_1_and_2_a_shadow_evaluation_with_an_unsafe_variant_names_it_and_runs_nothing() {
    let s = Shadowed::new().await;
    s.file("alice", "a");
    s.record("task-1", &["alice.txt"], &["alice"]).await;
    let writer = VariantBody {
        variant: "writer".to_owned(),
        workflow: Some(format!(
            "name: w\nversion: 1\nsteps:\n  - op: files.write\n    args: {{path: \"{}/x.txt\", content: x}}\n    as: s0\noutput: done\n",
            s.root()
        )),
        program: None,
    };
    let e = s
        .lab
        .shadow(
            &Caller::new(ada()),
            "rid",
            body(&["task-1"], vec![s.reader("safe"), writer]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, codes::REPLAY_UNSAFE_OP);
    assert!(e.message.contains("variant `writer`"), "{}", e.message);
    assert!(e.message.contains("`files.write`"), "{}", e.message);
    // Nothing ran: no run, no shadow row, no call but the recorded session's.
    assert!(s.runs().await.is_empty());
    assert!(s.shadows().await.is_empty());
    let tool_calls = s
        .audit
        .events()
        .iter()
        .filter(|e| !e.op.starts_with("sandbox."))
        .count();
    assert_eq!(tool_calls, 1);
}
