//! Recorded runs and deterministic replay (issue 15): with `sandbox.record_runs`, every call of a
//! lab run and its task input are kept in the run's recording; `LabService::replay` re-runs a
//! recording against its own responses (the same input gives the same output), reports each
//! call the recording lacks as a typed divergence, and a history it cannot put in order as
//! `degraded` with zero steps.

use std::sync::Arc;

use corral_exec::mock::MockBackend;
use corral_guard::audit::AuditSink;
use corral_guard::recording::RecordingKey;
use corral_guard::runs::RunPurpose;
use corral_guard::{Call, CallOptions, Caller, Gateway};
use corral_lab::service::{
    InputBody, LabService, PageQuery, ReplayBody, ReplayStatus, RunBody, ScenarioBody,
};
use corral_policy::Principal;
use corral_store::Store;
use serde_json::json;

use crate::support;

pub(crate) struct Fixture {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) root: std::path::PathBuf,
    pub(crate) store: Arc<Store>,
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) lab: LabService,
}

pub(crate) async fn fixture(record_runs: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::connect(&Store::default_sqlite_url(dir.path()))
            .await
            .unwrap(),
    );
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let gateway = Arc::new(
        Gateway::new(
            support::deployment(&support::config(&root), &root),
            Arc::new(MockBackend::default()),
            vec![Arc::new(support::Recorded::default()) as Arc<dyn AuditSink>],
            "default",
        )
        .with_recorder(Arc::new(corral_store::RecordingWriter::spawn(&store))),
    );
    let lab = LabService::new(store.clone(), gateway.clone(), true);
    lab.set_record_runs(record_runs);
    Fixture {
        _dir: dir,
        root,
        store,
        gateway,
        lab,
    }
}

pub(crate) fn olga() -> Caller {
    Caller::new(Principal::new("olga", &["operator"]))
}

/// A scenario of two lookups, `a` mocked and `b` not.
pub(crate) async fn lookups(lab: &LabService) -> String {
    lab.create_scenario(
        &olga(),
        "rid",
        ScenarioBody {
            name: "lookups".to_owned(),
            steps: Some(json!([{"input": "a", "expected": "alpha"}, {"input": "b"}])),
            mocks: Some(json!([{"resource": "a", "response": "alpha"}])),
            ..ScenarioBody::default()
        },
    )
    .await
    .unwrap()
    .id
}

pub(crate) fn identity() -> RunBody {
    RunBody {
        variant: "identity".to_owned(),
        workflow: None,
        program: None,
        seed: None,
        trials: None,
        scorer: None,
        isolation: None,
    }
}

#[tokio::test]
async fn with_record_runs_a_lab_run_keeps_its_task_input_and_every_call_in_its_recording() {
    let f = fixture(true).await;
    let scenario = lookups(&f.lab).await;
    let run = f
        .lab
        .run(&olga(), "rid", &scenario, identity())
        .await
        .unwrap();
    let got = f
        .lab
        .get_recording(&olga(), "rid", &run.id, None)
        .await
        .unwrap();
    assert_eq!(got.recording.principal, "olga");
    assert_eq!(
        got.recording.input,
        Some(json!({
            "scenario": {"id": scenario, "version": 1, "name": "lookups"},
            "steps": [{"input": "a", "expected": "alpha"}, {"input": "b"}],
        }))
    );
    let calls: Vec<(u64, &str, serde_json::Value, Option<&str>)> = got
        .events
        .iter()
        .map(|e| {
            (
                e.seq,
                e.op.as_str(),
                e.args.clone(),
                e.error_code.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (1, "scenario.resource", json!({"resource": "a"}), None),
            (
                2,
                "scenario.resource",
                json!({"resource": "b"}),
                Some("lab.mock_miss")
            ),
        ]
    );
    assert_eq!(got.events[0].response, Some(json!({"response": "alpha"})));
    assert!(!got.recording.gapped && !got.recording.capped);
}

#[tokio::test]
async fn without_record_runs_a_lab_run_leaves_no_recording() {
    let f = fixture(false).await;
    let scenario = lookups(&f.lab).await;
    let run = f
        .lab
        .run(&olga(), "rid", &scenario, identity())
        .await
        .unwrap();
    let e = f
        .lab
        .get_recording(&olga(), "rid", &run.id, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, "recording.not_found", "{}", e.message);
}

/// A live session of `caller`, recorded as run `run`: it reads `notes.txt` twice (the file
/// changes in between) and asks for a file the policy denies.
async fn live_session(f: &Fixture, caller: &Caller, run: &str) {
    let notes = f.root.join("notes.txt");
    let private = f.root.join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("key"), "secret").unwrap();
    let calls = [
        (notes.clone(), Some("first draft")),
        (notes.clone(), Some("second draft")),
        (private.join("key"), None),
    ];
    for (path, content) in calls {
        if let Some(c) = content {
            std::fs::write(&notes, c).unwrap();
        }
        read_recorded(f, caller, run, &path).await;
    }
}

/// `caller` reads `path` in run `run`, the call recorded.
pub(crate) async fn read_recorded(f: &Fixture, caller: &Caller, run: &str, path: &std::path::Path) {
    let call = Call {
        caller: caller.clone(),
        op: "files.read".to_owned(),
        args: json!({"path": path.display().to_string()}),
        request_id: format!("live-{}", path.display()),
    };
    let opts = CallOptions {
        run_id: Some(run.to_owned()),
        record: true,
        ..CallOptions::default()
    };
    f.gateway.call_with(call, opts).await;
}

#[tokio::test]
async fn replaying_a_recorded_live_session_reproduces_every_output_byte_for_byte() {
    let f = fixture(false).await;
    live_session(&f, &olga(), "task-1").await;
    // The world changed since: a replay reaches nothing real.
    std::fs::write(f.root.join("notes.txt"), "changed").unwrap();
    let got = f
        .lab
        .replay(&olga(), "rid", "task-1", ReplayBody::default())
        .await
        .unwrap();
    assert_eq!(got.status, ReplayStatus::Replayed);
    assert_eq!((got.steps, got.identical), (3, Some(true)), "{got:?}");
    assert!(got.differing_steps.is_empty() && got.divergences.is_empty());
    let run = got.run.unwrap();
    assert_eq!(
        (run.purpose.as_str(), run.variant.as_str()),
        ("replay", "recorded")
    );
    let recorded = f
        .lab
        .get_recording(&olga(), "rid", "task-1", None)
        .await
        .unwrap();
    let outputs = f.lab.outputs(&olga(), "rid", &run.id).await.unwrap();
    let printed: Vec<(String, Option<String>)> = outputs
        .iter()
        .map(|o| (o.output.clone(), o.error_code.clone()))
        .collect();
    let was: Vec<(String, Option<String>)> = recorded
        .events
        .iter()
        .map(|e| match &e.error_code {
            Some(c) => (String::new(), Some(c.clone())),
            None => (e.response.as_ref().unwrap().to_string(), None),
        })
        .collect();
    assert_eq!(printed, was);
    assert!(printed[0].0.contains("first draft") && printed[1].0.contains("second draft"));
    assert_eq!(printed[2].1.as_deref(), Some("policy.path_denied"));
}

#[tokio::test]
async fn a_replay_under_a_policy_that_now_refuses_a_recorded_call_names_the_step_that_differs() {
    let f = fixture(false).await;
    let dir = f.root.join("sub");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "a").unwrap();
    read_recorded(&f, &olga(), "task-2", &dir.join("a.txt")).await;
    // Today's policy denies what was read then.
    let tighter = format!(
        "version: 1\nrules:\n  - allow: [files.read]\n    paths: {{roots: [{r}], deny: ['{r}/sub/**']}}\n",
        r = f.root.display()
    );
    f.gateway.replace(support::deployment(&tighter, &f.root));
    let got = f
        .lab
        .replay(&olga(), "rid", "task-2", ReplayBody::default())
        .await
        .unwrap();
    assert_eq!(
        (got.identical, got.differing_steps.clone()),
        (Some(false), vec![1])
    );
}

#[tokio::test]
async fn replaying_a_recorded_lab_run_with_its_variant_reproduces_its_outputs_and_a_new_variant_diverges_typed()
 {
    let f = fixture(true).await;
    let scenario = lookups(&f.lab).await;
    let original = f
        .lab
        .run(&olga(), "rid", &scenario, identity())
        .await
        .unwrap();
    let same = f
        .lab
        .replay(
            &olga(),
            "rid",
            &original.id,
            ReplayBody {
                variant: Some("identity".to_owned()),
                ..ReplayBody::default()
            },
        )
        .await
        .unwrap();
    let strip = |v: Vec<corral_store::lab::Output>| -> Vec<(u32, String, String, Option<String>)> {
        v.into_iter()
            .map(|o| (o.step, o.input, o.output, o.error_code))
            .collect()
    };
    let was = strip(f.lab.outputs(&olga(), "rid", &original.id).await.unwrap());
    let replay_run = same.run.clone().unwrap();
    let now = strip(f.lab.outputs(&olga(), "rid", &replay_run.id).await.unwrap());
    assert_eq!(now, was);
    assert_eq!(replay_run.scenario_id, scenario, "the task's own scenario");
    // Step 2's lookup missed in the original too: the recording answers it the same way (the
    // recorded error), so it is no divergence.
    assert!(same.divergences.is_empty(), "{:?}", same.divergences);
    // A new version asks for `user:<input>`, which the recording never saw.
    let prefixed = "name: prefixed\nversion: 2\nsteps:\n  - op: scenario.resource\n    args: {resource: \"user:{{input}}\"}\n    as: r\noutput: \"{{steps.r.response}}\"\n";
    let new = f
        .lab
        .replay(
            &olga(),
            "rid",
            &original.id,
            ReplayBody {
                variant: Some("prefixed".to_owned()),
                workflow: Some(prefixed.to_owned()),
                ..ReplayBody::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(new.steps, 2, "the run went on past the first divergence");
    let d: Vec<(usize, &str, Option<u64>)> = new
        .divergences
        .iter()
        .map(|d| (d.step, d.op.as_str(), d.expected.as_ref().map(|e| e.seq)))
        .collect();
    assert_eq!(
        d,
        vec![
            (1, "scenario.resource", Some(1)),
            (2, "scenario.resource", Some(1)),
        ]
    );
    let first = &new.divergences[0];
    assert_eq!(
        first.args_hash,
        corral_guard::args::args_hash(&json!({"resource": "user:a"}))
    );
    assert_eq!(
        first.expected.as_ref().unwrap().args_hash,
        corral_guard::args::args_hash(&json!({"resource": "a"}))
    );
}

#[tokio::test]
async fn a_gapped_recording_replays_degraded_with_zero_steps_and_makes_no_run() {
    let f = fixture(false).await;
    live_session(&f, &olga(), "task-3").await;
    let key = RecordingKey {
        tenant: "default".to_owned(),
        run_id: "task-3".to_owned(),
        identity: olga().principal.identity(),
        principal: "olga".to_owned(),
        purpose: RunPurpose::Live,
    };
    f.store.mark_recording_gapped(&key, 0).await.unwrap();
    let runs_before = f
        .lab
        .list_runs(&olga(), "rid", None, &PageQuery::default())
        .await
        .unwrap();
    let got = f
        .lab
        .replay(&olga(), "rid", "task-3", ReplayBody::default())
        .await
        .unwrap();
    assert_eq!(got.status, ReplayStatus::Degraded);
    assert_eq!((got.steps, got.run.is_none()), (0, true));
    assert!(got.reason.unwrap().contains("gapped"));
    let runs_after = f
        .lab
        .list_runs(&olga(), "rid", None, &PageQuery::default())
        .await
        .unwrap();
    assert_eq!(runs_after.items.len(), runs_before.items.len());
}

#[tokio::test]
async fn a_recording_cannot_be_replayed_by_a_viewer_another_operator_or_another_tenant() {
    let f = fixture(false).await;
    live_session(&f, &olga(), "task-4").await;
    let viewer = Caller::new(Principal::new("olga", &["viewer"]));
    let e = f
        .lab
        .replay(&viewer, "rid", "task-4", ReplayBody::default())
        .await
        .unwrap_err();
    assert_eq!(e.code, "rbac.denied", "{}", e.message);
    let other = Caller::new(Principal::new("oscar", &["operator"]));
    let e = f
        .lab
        .replay(&other, "rid", "task-4", ReplayBody::default())
        .await
        .unwrap_err();
    assert_eq!(e.code, "recording.forbidden", "{}", e.message);
    // A replay's outputs are the recording's values: another viewer of the tenant cannot read
    // them, though run outputs are otherwise a viewer's to read.
    let run = f
        .lab
        .replay(&olga(), "rid", "task-4", ReplayBody::default())
        .await
        .unwrap()
        .run
        .unwrap();
    let vera = Caller::new(Principal::new("vera", &["viewer"]));
    let e = f.lab.outputs(&vera, "rid", &run.id).await.unwrap_err();
    assert_eq!(e.code, "recording.forbidden", "{}", e.message);
    assert_eq!(
        f.lab.outputs(&olga(), "rid", &run.id).await.unwrap().len(),
        3
    );
    let mut tenant = Principal::new("olga", &["operator"]);
    tenant.tenant = Some("acme".to_owned());
    let e = f
        .lab
        .replay(&Caller::new(tenant), "rid", "task-4", ReplayBody::default())
        .await
        .unwrap_err();
    assert_eq!(e.code, "recording.not_found", "{}", e.message);
}

#[tokio::test]
async fn a_variant_replay_of_a_recording_without_a_task_input_says_how_to_keep_one() {
    let f = fixture(false).await;
    live_session(&f, &olga(), "task-5").await;
    let e = f
        .lab
        .replay(
            &olga(),
            "rid",
            "task-5",
            ReplayBody {
                variant: Some("identity".to_owned()),
                ..ReplayBody::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "replay.no_input");
    assert!(e.message.contains("record_runs"), "{}", e.message);
}

// Found by the attack review of session 6 (task X): a recorded refusal of the guard chain, and a
// code outside the catalog, are no answer of the op.

#[tokio::test]
async fn a_replay_under_a_policy_that_now_allows_a_recorded_refusal_shows_the_step_as_different_and_diverging()
 {
    let f = fixture(false).await;
    let private = f.root.join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("key"), "secret").unwrap();
    read_recorded(&f, &olga(), "task-x3", &private.join("key")).await;
    let recorded = f
        .lab
        .get_recording(&olga(), "rid", "task-x3", None)
        .await
        .unwrap();
    assert_eq!(
        recorded.events[0].error_code.as_deref(),
        Some("policy.path_denied")
    );
    // Today's policy allows what was refused then.
    let looser = format!(
        "version: 1\nrules:\n  - allow: [files.read]\n    paths: {{roots: [{r}]}}\n",
        r = f.root.display()
    );
    f.gateway.replace(support::deployment(&looser, &f.root));
    let got = f
        .lab
        .replay(&olga(), "rid", "task-x3", ReplayBody::default())
        .await
        .unwrap();
    assert_eq!(
        (
            got.identical,
            got.differing_steps.clone(),
            got.divergences.len()
        ),
        (Some(false), vec![1], 1),
        "the call today's policy allows was answered with the recorded refusal: {got:?}"
    );
}

/// What: a recorded error code this corral's catalog does not know (a recording kept by another
/// version, or written by anything that can append to the store) is answered, per
/// `playback::recorded_error`, "as a divergence" (`replay.divergence`), yet no divergence is
/// reported: the event was found and taken, so it is not a miss, and the report says
/// `divergences: []` (the CLI prints "no divergence: every call was one the recording holds",
/// exit 0). Repro: a recording whose one event is `files.read {path}` failed with
/// `made.up_code`, a task input of that path, a variant replay (a workflow reading `{{input}}`):
/// the step fails `replay.divergence` and the report lists no divergence. Impact: the replay
/// verdict a user acts on ("the new variant makes exactly the recorded calls") is wrong
/// whenever the recording holds a code outside the catalog; a divergence is hidden.
#[tokio::test]
async fn a_recorded_error_code_outside_the_catalog_answers_nothing_and_is_reported_as_a_divergence()
{
    let f = fixture(false).await;
    let path = f.root.join("notes.txt").display().to_string();
    let key = corral_guard::recording::RecordingKey {
        tenant: "default".to_owned(),
        run_id: "task-x4".to_owned(),
        identity: olga().principal.identity(),
        principal: "olga".to_owned(),
        purpose: corral_guard::runs::RunPurpose::Live,
    };
    let event = corral_guard::recording::RecordedCall {
        op: "files.read".to_owned(),
        args: corral_guard::canonical::canonical(&json!({"path": path})),
        response: None,
        error_code: Some("made.up_code".to_owned()),
        attestation: None,
        started_ms: 1,
        duration_us: 1,
    };
    f.store.record_call(&key, &event, 1).await.unwrap();
    f.lab
        .set_recording_input(
            &olga(),
            "rid",
            "task-x4",
            InputBody {
                steps: json!([{"input": path}]),
            },
        )
        .await
        .unwrap();
    let reader = "name: reader\nversion: 2\nsteps:\n  - op: files.read\n    args: {path: \"{{input}}\"}\n    as: r\noutput: \"{{steps.r.content}}\"\n";
    let got = f
        .lab
        .replay(
            &olga(),
            "rid",
            "task-x4",
            ReplayBody {
                variant: Some("reader".to_owned()),
                workflow: Some(reader.to_owned()),
                ..ReplayBody::default()
            },
        )
        .await
        .unwrap();
    let run = got.run.clone().unwrap();
    let outputs = f.lab.outputs(&olga(), "rid", &run.id).await.unwrap();
    let codes: Vec<Option<String>> = outputs.iter().map(|o| o.error_code.clone()).collect();
    assert_eq!(codes, vec![Some("replay.divergence".to_owned())], "{got:?}");
    assert!(
        !got.divergences.is_empty(),
        "the step was answered `replay.divergence` and the report lists no divergence: {got:?}"
    );
}
