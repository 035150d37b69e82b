//! Recorded lab runs (`sandbox.record_runs`, issue 15 item 2): every call of the run and its task
//! input are kept in the run's recording, readable by the run's principal.

use std::sync::Arc;

use corral_exec::mock::MockBackend;
use corral_guard::audit::AuditSink;
use corral_guard::{Caller, Gateway};
use corral_lab::service::{LabService, RunBody, ScenarioBody};
use corral_policy::Principal;
use corral_store::Store;
use serde_json::json;

use crate::support;

pub(crate) struct Fixture {
    pub(crate) _dir: tempfile::TempDir,
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
    let gateway = Arc::new(Gateway::new(
        support::deployment(&support::config(&root), &root),
        Arc::new(MockBackend::default()),
        vec![Arc::new(support::Recorded::default()) as Arc<dyn AuditSink>],
        "default",
    ));
    let lab = LabService::new(store, gateway, true);
    lab.set_record_runs(record_runs);
    Fixture { _dir: dir, lab }
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
    let got = f.lab.get_recording(&olga(), "rid", &run.id).await.unwrap();
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
        .get_recording(&olga(), "rid", &run.id)
        .await
        .unwrap_err();
    assert_eq!(e.code, "recording.not_found", "{}", e.message);
}
