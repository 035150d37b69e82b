//! The declarative workflow variant: five templated op calls against op mocks through the
//! deployment's policy; a refusal is the policy's (the mock for that exact call is never
//! consulted), a miss never reaches the real file, and bad templates are load errors with
//! their line and column.

use std::sync::Arc;

use corral_lab::runner::{RunStatus, run_scenario};
use corral_lab::scenario::Scenario;
use corral_lab::workflow::Workflow;
use serde_json::json;

use crate::support::{Recorded, ada, lab};

fn workflow(root: &str) -> Workflow {
    let yaml = format!(
        r#"name: account-lookup
version: 3
steps:
  - op: files.read
    args: {{path: "{root}/accounts/{{{{input}}}}.json"}}
    as: account
  - op: http.fetch
    args: {{url: "https://api.example.test/users/{{{{steps.account.content}}}}"}}
    as: profile
  - op: http.fetch
    args: {{url: "https://api.example.test/orders?user={{{{steps.profile.body}}}}"}}
    as: orders
  - op: files.read
    args: {{path: "{root}/notes/{{{{steps.account.content}}}}.txt"}}
    as: notes
  - op: http.fetch
    args: {{url: "https://api.example.test/audit/{{{{input}}}}"}}
output: "{{{{steps.profile.body}}}} has {{{{steps.orders.body}}}} orders; {{{{steps.notes.content}}}}"
"#
    );
    Workflow::from_yaml(&yaml).unwrap()
}

/// Three steps: `alice` (every call mocked), `../private/bob` (the first call's path lies under
/// the denied `private/`, and a mock answers exactly that call), `carol` (no mock for her
/// account, whose real file exists on disk).
fn scenario(root: &str) -> Scenario {
    let ok = |body: &str| json!({"status": 200, "body": body});
    Scenario::from_json(&json!({
        "name": "accounts",
        "steps": [{"input": "alice"}, {"input": "../private/bob"}, {"input": "carol"}],
        "mocks": [
            {"op": "files.read", "args": {"path": format!("{root}/accounts/alice.json")},
             "response": {"content": "u-17"}},
            {"op": "http.fetch", "args": {"url": "https://api.example.test/users/u-17"},
             "response": ok("Alice")},
            {"op": "http.fetch", "args": {"url": "https://api.example.test/orders?user=Alice"},
             "response": ok("3")},
            {"op": "files.read", "args": {"path": format!("{root}/notes/u-17.txt")},
             "response": {"content": "prefers email"}},
            {"op": "http.fetch", "args": {"url": "https://api.example.test/audit/alice"},
             "response": ok("noted")},
            {"op": "files.read", "args": {"path": format!("{root}/accounts/../private/bob.json")},
             "response": {"content": "LEAKED BY A MOCK"}}
        ]
    }))
    .unwrap()
}

#[tokio::test]
async fn a_five_call_workflow_answers_from_op_mocks_and_a_policy_refusal_is_never_mocked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    std::fs::create_dir_all(dir.path().join("accounts")).unwrap();
    std::fs::write(dir.path().join("accounts/carol.json"), "REAL FILE CONTENT").unwrap();
    let audit = Arc::new(Recorded::default());
    let lab = lab(dir.path(), audit.clone());
    let wf = workflow(&root);
    assert_eq!(wf.calls(), 5);
    let world = lab.world(&scenario(&root), "wf-1", ada()).unwrap();
    let r = run_scenario(world, &wf, 1, 1).await;
    assert_eq!(r.variant, "workflow:account-lookup@3");
    assert_eq!(
        r.outputs[0].output, "Alice has 3 orders; prefers email",
        "{:?}",
        r.agent_errors
    );
    assert!(r.outputs[0].ok);
    // Refused by the deny pattern before any mock was asked.
    let bob = &r.outputs[1];
    assert_eq!((bob.output.as_str(), bob.ok), ("", false));
    assert_eq!(bob.error, Some("policy.path_denied"));
    // A miss: the marker, not the real file.
    let carol = &r.outputs[2];
    assert_eq!(
        carol.output,
        format!("[[mock-miss:files.read {{\"path\":\"{root}/accounts/carol.json\"}}]]")
    );
    assert_eq!(carol.error, Some("lab.mock_miss"));
    assert_eq!((r.steps_total, r.steps_ok, r.steps_error), (3, 1, 2));
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.mock_misses.len(), 1);
    assert_eq!(
        (r.mock_misses[0].step, r.mock_misses[0].op.as_str()),
        (3, "files.read")
    );
    assert_eq!(r.agent_errors.len(), 2);
    assert!(r.infra_errors.is_empty());
    // Five calls for alice, one refused for bob, one missed for carol: all audited in the run.
    let events = audit.events();
    let codes: Vec<Option<&str>> = events.iter().map(|e| e.code.as_deref()).collect();
    assert_eq!(
        codes,
        [
            None,
            None,
            None,
            None,
            None,
            Some("policy.path_denied"),
            Some("lab.mock_miss")
        ]
    );
    assert!(events.iter().all(|e| e.run_id.as_deref() == Some("wf-1")));
    let text = serde_json::to_string(&r).unwrap();
    assert!(
        !text.contains("LEAKED") && !text.contains("REAL FILE"),
        "{text}"
    );
}

#[tokio::test]
async fn a_mocked_error_fails_the_step_with_its_code_and_later_calls_are_not_made() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let audit = Arc::new(Recorded::default());
    let lab = lab(dir.path(), audit.clone());
    let s = Scenario::from_json(&json!({
        "name": "gone",
        "steps": [{"input": "dave"}],
        "mocks": [{"op": "files.read", "args": {"path": format!("{root}/accounts/dave.json")},
                   "error": {"code": "files.not_found", "message": "no such account"}}]
    }))
    .unwrap();
    let r = run_scenario(
        lab.world(&s, "wf-2", ada()).unwrap(),
        &workflow(&root),
        1,
        1,
    )
    .await;
    assert_eq!(r.outputs[0].error, Some("files.not_found"));
    assert_eq!(r.agent_errors[0].message, "no such account");
    assert!(r.mock_misses.is_empty());
    assert_eq!(audit.events().len(), 1);
}

#[tokio::test]
async fn the_same_workflow_scenario_and_seed_give_byte_identical_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let lab = lab(dir.path(), Arc::new(Recorded::default()));
    let wf = workflow(&root);
    let a = run_scenario(
        lab.world(&scenario(&root), "d-1", ada()).unwrap(),
        &wf,
        9,
        2,
    )
    .await;
    let b = run_scenario(
        lab.world(&scenario(&root), "d-2", ada()).unwrap(),
        &wf,
        9,
        2,
    )
    .await;
    assert_eq!(a.outputs_digest(), b.outputs_digest());
    let codes = |r: &corral_lab::runner::RunReport| -> Vec<&str> {
        r.agent_errors.iter().map(|f| f.code).collect()
    };
    assert_eq!(codes(&a), codes(&b));
}

fn load_error(yaml: &str) -> (String, usize, usize, String) {
    let e = Workflow::from_yaml(yaml).unwrap_err();
    (e.code.to_owned(), e.line, e.col, e.message)
}

#[test]
fn a_template_naming_a_later_or_unknown_step_is_a_load_error_at_its_line() {
    let yaml = "name: w\nversion: 1\nsteps:\n  - op: files.read\n    args: {path: \"/d/{{steps.later.content}}\"}\n  - op: files.read\n    args: {path: /d/x}\n    as: later\noutput: x\n";
    let (code, line, col, message) = load_error(yaml);
    assert_eq!(code, "lab.workflow_template");
    assert_eq!((line, col), (5, 18), "{message}");
    assert!(message.contains("step `later`"), "{message}");
}

#[test]
fn an_unclosed_or_unknown_placeholder_is_a_load_error() {
    let unclosed = "name: w\nversion: 1\nsteps:\n  - op: files.read\n    args: {path: \"/d/{{input\"}\noutput: x\n";
    assert_eq!(load_error(unclosed).0, "lab.workflow_template");
    let unknown = "name: w\nversion: 1\nsteps:\n  - op: files.read\noutput: \"{{env.HOME}}\"\n";
    let (code, line, _, message) = load_error(unknown);
    assert_eq!((code.as_str(), line), ("lab.workflow_template", 5));
    assert!(message.contains("`{{env.HOME}}`"), "{message}");
}

#[test]
fn a_repeated_as_an_unknown_key_and_a_missing_output_are_load_errors_with_their_place() {
    let repeated = "name: w\nversion: 1\nsteps:\n  - op: files.read\n    as: a\n  - op: files.read\n    as: a\noutput: x\n";
    let (code, line, col, _) = load_error(repeated);
    assert_eq!((code.as_str(), line, col), ("lab.workflow_invalid", 7, 9));
    let unknown = "name: w\nversion: 1\nsteps:\n  - op: files.read\n    run: rm\noutput: x\n";
    let (code, line, _, message) = load_error(unknown);
    assert_eq!((code.as_str(), line), ("lab.workflow_invalid", 5));
    assert!(message.contains("unknown key `run`"), "{message}");
    let no_output = "name: w\nversion: 1\nsteps:\n  - op: files.read\n";
    let (code, _, _, message) = load_error(no_output);
    assert_eq!(code, "lab.workflow_invalid");
    assert!(message.contains("`output`"), "{message}");
}

/// Regression (attack finding Y-4): a workflow step naming `files.download` (an op that answers
/// a stream, not JSON) ended its simulation's step in `500 server.internal` ("answered a stream
/// in a simulation"). It is refused when the workflow is loaded, naming the op and the fix, and
/// nothing runs.
#[tokio::test]
async fn a_workflow_step_naming_a_streamed_op_is_refused_at_load_and_nothing_runs() {
    let f = crate::recorded::fixture(false).await;
    let scenario = crate::recorded::lookups(&f.lab).await;
    let yaml = "name: dl\nversion: 1\nsteps:\n  - op: files.download\n    args: {path: \"{{input}}\"}\n    as: d\noutput: \"{{steps.d}}\"\n";
    let e = Workflow::from_yaml(yaml).unwrap_err();
    assert_eq!(e.code, "lab.workflow_streamed_op", "{}", e.message);
    let e = f
        .lab
        .run(
            &crate::recorded::olga(),
            "rid",
            &scenario,
            corral_lab::service::RunBody {
                variant: "dl".to_owned(),
                workflow: Some(yaml.to_owned()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "lab.workflow_streamed_op", "{}", e.message);
    assert!(
        e.message.contains("files.download") && e.message.contains("files.read"),
        "{}",
        e.message
    );
    let runs = f
        .lab
        .list_runs(
            &crate::recorded::olga(),
            "rid",
            None,
            &corral_lab::service::PageQuery::default(),
        )
        .await
        .unwrap();
    assert!(runs.items.is_empty(), "{:?}", runs.items);
}
