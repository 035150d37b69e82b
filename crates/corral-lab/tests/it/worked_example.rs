//! Spec 003's worked example, to the byte: the identity agent over two synthetic inputs, one
//! mocked; and what a run attests and records.

use std::sync::Arc;

use corral_lab::agent::Identity;
use corral_lab::runner::{RunStatus, run_scenario};
use corral_lab::scenario::Scenario;
use serde_json::json;

use crate::support::{Broken, Recorded, ada, lab};

/// The scenario of the example: the inputs `generate` makes from the template
/// `{{subject_kind}}:user{{index}}@example.test` with count 2, written literally here.
fn example() -> Scenario {
    Scenario::from_json(&json!({
        "name": "worked example",
        "steps": [
            {"input": "agent:user1@example.test"},
            {"input": "agent:user2@example.test"}
        ],
        "mocks": [{"resource": "agent:user1@example.test", "response": "first synthetic account"}]
    }))
    .unwrap()
}

#[tokio::test]
async fn the_worked_example_resolves_step_one_to_the_mock_and_step_two_to_the_miss_marker() {
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(Recorded::default());
    let lab = lab(dir.path(), audit.clone());
    let world = lab.world(&example(), "run-1", ada()).unwrap();
    let r = run_scenario(world, &Identity, 7, 1).await;
    let outputs: Vec<&str> = r.outputs.iter().map(|o| o.output.as_str()).collect();
    assert_eq!(
        outputs,
        [
            "first synthetic account",
            "[[mock-miss:agent:user2@example.test]]"
        ]
    );
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!((r.steps_total, r.steps_ok, r.steps_error), (2, 1, 1));
    assert!(r.isolated && r.destroyed);
    assert_eq!(
        (r.runner, r.backend, r.purpose),
        ("inproc", "inproc-mock", "simulation")
    );
    assert_eq!(r.verdict, "executed, not scored");
    assert_eq!(r.outputs[1].error, Some("lab.mock_miss"));
    assert_eq!(r.mock_misses.len(), 1);
    let miss = &r.mock_misses[0];
    assert_eq!((miss.step, miss.op.as_str()), (2, "scenario.resource"));
    // The miss is the audited call's: same op, same hash of the arguments, same run.
    let events = audit.events();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.run_id.as_deref() == Some("run-1")));
    assert_eq!(events[1].args_hash, miss.args_hash);
    assert_eq!(events[1].code.as_deref(), Some("lab.mock_miss"));
    let att = events[0].attestation.as_ref().unwrap();
    assert_eq!((att.backend.as_str(), att.isolated), ("inproc-mock", true));
}

#[tokio::test]
async fn matching_is_on_the_exact_input_text_newlines_included() {
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let s = Scenario::from_json(&json!({
        "name": "newlines",
        "steps": [{"input": "line one\nline two"}, {"input": "line one\nline two\n"}],
        "mocks": [{"resource": "line one\nline two", "response": "two lines"}]
    }))
    .unwrap();
    let r = run_scenario(lab.world(&s, "run-nl", ada()).unwrap(), &Identity, 0, 1).await;
    assert_eq!(r.outputs[0].output, "two lines");
    assert_eq!(r.outputs[1].output, "[[mock-miss:line one\nline two\n]]");
}

#[tokio::test]
async fn the_same_scenario_variant_and_seed_give_byte_identical_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let a = run_scenario(
        lab.world(&example(), "run-a", ada()).unwrap(),
        &Identity,
        42,
        3,
    )
    .await;
    let b = run_scenario(
        lab.world(&example(), "run-b", ada()).unwrap(),
        &Identity,
        42,
        3,
    )
    .await;
    assert_eq!(a.steps_total, 6);
    assert_eq!(a.outputs_digest(), b.outputs_digest());
    assert_eq!(
        serde_json::to_vec(&a.outputs).unwrap(),
        serde_json::to_vec(&b.outputs).unwrap()
    );
}

#[tokio::test]
async fn an_audit_that_fails_is_an_infrastructure_error_and_fails_the_run_not_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(dir.path(), Arc::new(Broken));
    let r = run_scenario(
        lab.world(&example(), "run-x", ada()).unwrap(),
        &Identity,
        0,
        1,
    )
    .await;
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.infra_errors.len(), 2);
    assert!(r.agent_errors.is_empty());
    assert!(
        r.infra_errors
            .iter()
            .all(|f| f.code == "server.audit_unavailable")
    );
}

#[tokio::test]
async fn the_deployments_budgets_meter_a_simulation_run_and_an_exhausted_one_is_the_agents_failure()
{
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "{}budgets: {{max_calls: 1}}\n",
        crate::support::config(dir.path())
    );
    let base = crate::support::deployment(&yaml, dir.path());
    let lab =
        corral_lab::world::Lab::new(&base, vec![Arc::new(Recorded::default())], "default").unwrap();
    let s = Scenario::from_json(&json!({
        "name": "two mocked",
        "steps": [{"input": "a"}, {"input": "a"}],
        "mocks": [{"resource": "a", "response": "x"}]
    }))
    .unwrap();
    let r = run_scenario(lab.world(&s, "budget-1", ada()).unwrap(), &Identity, 0, 1).await;
    assert_eq!(r.outputs[0].output, "x");
    assert_eq!(r.outputs[1].error, Some("budget.exhausted"));
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.agent_errors.len(), 1);
    // Another run has its own budget.
    let again = run_scenario(lab.world(&s, "budget-2", ada()).unwrap(), &Identity, 0, 1).await;
    assert_eq!(again.steps_ok, 1);
}

#[tokio::test]
async fn a_deployment_that_already_has_the_labs_op_cannot_host_a_lab() {
    let dir = tempfile::tempdir().unwrap();
    let yaml =
        "version: 1\ncustom:\n  scenario.resource:\n    argv: [/bin/true]\n    effects: [read]\n";
    let base = crate::support::deployment(yaml, dir.path());
    let e = corral_lab::world::Lab::new(&base, Vec::new(), "default").unwrap_err();
    assert_eq!(e.code, "lab.reserved_op");
}
