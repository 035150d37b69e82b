//! This crate speaks corral's one catalog: its codes and its audit step ids are the policy's.

use corral_agents::codes;
use corral_agents::events::{ChangeKind, SessionEvent};

#[test]
fn every_code_the_agents_crate_emits_is_in_corrals_catalog_with_a_fix() {
    for code in codes::ALL {
        let info = corral_policy::codes::lookup(code);
        assert!(info.is_some(), "`{code}` is not in corral_policy::codes");
        assert!(!info.map(|i| i.fix).unwrap_or("").is_empty());
    }
    // A second turn while one runs is the store's `agents.session_busy`, one code for one meaning.
    assert_eq!(codes::AGENTS_TURN_BUSY, "agents.session_busy");
}

#[test]
fn the_audit_ops_of_session_steps_are_the_policys_step_kinds() {
    let steps = [
        SessionEvent::ModelTurn { turn: 1 },
        SessionEvent::Command {
            argv: vec!["ls".into()],
            exit: Some(0),
            done: true,
        },
        SessionEvent::FileChange {
            path: "/workspace/a".into(),
            kind: ChangeKind::Add,
            applied: true,
        },
        SessionEvent::Network {
            host: "pypi.org".into(),
            port: 443,
            allowed: true,
            reason: None,
        },
    ];
    let ops: Vec<String> = steps.iter().filter_map(|e| e.audit_op("codex")).collect();
    let expected: Vec<String> = corral_policy::scope::STEP_KINDS
        .iter()
        .map(|k| corral_policy::scope::step_op_id("codex", k))
        .collect();
    assert_eq!(ops, expected);
    assert_eq!(ops[1], "agents.codex.exec");
    // A message or an error is the session's record, not an audited step.
    assert_eq!(
        SessionEvent::error("agents.output", "x").audit_op("codex"),
        None
    );
}
