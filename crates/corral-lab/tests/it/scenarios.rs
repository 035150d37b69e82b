//! Scenario validation: each malformed scenario refused whole, with its own code and where.

use corral_lab::scenario::{MockAnswer, Scenario};
use serde_json::{Value, json};

fn refused(v: Value) -> (&'static str, String) {
    let e = Scenario::from_json(&v).unwrap_err();
    (e.code, e.message)
}

#[test]
fn a_scenario_without_steps_is_refused() {
    let (code, message) = refused(json!({"name": "s", "steps": [], "mocks": []}));
    assert_eq!(code, "lab.scenario_no_steps");
    assert!(message.contains("`s`"), "{message}");
}

#[test]
fn a_mock_with_both_a_resource_and_an_op_is_refused() {
    let (code, message) = refused(json!({"name": "s", "steps": [{"input": "a"}],
        "mocks": [{"resource": "a", "op": "files.read", "response": "x"}]}));
    assert_eq!(code, "lab.mock_ambiguous");
    assert!(message.starts_with("mocks[0]"), "{message}");
}

#[test]
fn two_mocks_of_one_op_with_the_same_canonical_arguments_are_refused() {
    let (code, message) = refused(json!({"name": "s", "steps": [{"input": "a"}],
    "mocks": [
        {"op": "files.read", "args": {"path": "/a", "n": 1.0}, "response": {}},
        {"resource": "a", "response": "x"},
        {"op": "files.read", "args": {"n": 1, "path": "/a"}, "response": {}}
    ]}));
    assert_eq!(code, "lab.mock_duplicate");
    assert!(message.starts_with("mocks[0] and mocks[2]"), "{message}");
    let (code, _) = refused(json!({"name": "s", "steps": [{"input": "a"}],
        "mocks": [{"resource": "a", "response": "x"}, {"resource": "a", "response": "y"}]}));
    assert_eq!(code, "lab.mock_duplicate");
}

#[test]
fn malformed_mocks_are_refused_with_what_to_write() {
    let cases = [
        json!({"response": "x"}),
        json!({"resource": "a"}),
        json!({"resource": "a", "response": {"not": "a string"}}),
        json!({"op": "files.read", "args": {}}),
        json!({"op": "files.read", "response": 1, "error": {"code": "files.not_found"}}),
        json!({"op": "files.read", "error": {"code": "no.such_code"}}),
        // Corral's own failures are kept apart from the agent's: not mockable.
        json!({"op": "files.read", "error": {"code": "server.audit_unavailable"}}),
        json!({"op": "not an id", "response": 1}),
    ];
    for m in cases {
        let (code, message) =
            refused(json!({"name": "s", "steps": [{"input": "a"}], "mocks": [m.clone()]}));
        assert_eq!(code, "lab.mock_invalid", "{m}: {message}");
        assert!(message.starts_with("mocks[0]"), "{message}");
    }
}

#[test]
fn other_malformed_scenarios_are_refused_as_invalid() {
    for v in [
        json!([]),
        json!({"steps": [{"input": "a"}]}),
        json!({"name": "s", "steps": [{"input": 1}]}),
        json!({"name": "s", "steps": [{"input": "a"}], "extra": true}),
    ] {
        assert_eq!(refused(v.clone()).0, "lab.scenario_invalid", "{v}");
    }
}

#[test]
fn a_valid_scenario_reads_back_as_written_and_looks_mocks_up_canonically() {
    let v = json!({"name": "s", "description": "d",
    "steps": [{"input": "a", "expected": "x"}],
    "mocks": [
        {"resource": "a", "response": "x"},
        {"op": "files.read", "args": {"path": "/a"}, "error": {"code": "files.not_found", "message": "gone"}}
    ]});
    let s = Scenario::from_json(&v).unwrap();
    assert_eq!(s.to_json(), v);
    assert_eq!(Scenario::from_json(&s.to_json()).unwrap().to_json(), v);
    assert_eq!(s.table().resource("a"), Some("x"));
    assert_eq!(s.table().resource("a\n"), None);
    assert_eq!(
        s.table().op("files.read", &json!({"path": "/a"})),
        Some(&MockAnswer::Error {
            code: "files.not_found",
            message: "gone".to_owned()
        })
    );
}
