//! `RunLedger`, the in-memory `RunStore`: each budget refuses once used up, and a run only
//! ever tightens what it set on itself.

use std::time::Duration;

use corral_policy::AutonomyLevel;
use corral_ports::runs::{Budgets, RunKey, RunLedger, RunPurpose};

fn key(run: &str) -> RunKey<'_> {
    RunKey {
        tenant: "default",
        principal: "ada",
        purpose: RunPurpose::Live,
        run_id: run,
    }
}

#[test]
fn each_budget_refuses_once_used_up_and_zero_disables_it() {
    let ledger = RunLedger::default();
    let k = key("r1");
    ledger.enter(&k, 0, None, false);
    let b = Budgets {
        max_calls: 3,
        max_calls_per_op: [("files.write".to_owned(), 1), ("files.read".to_owned(), 0)]
            .into_iter()
            .collect(),
        ..Budgets::default()
    };
    assert!(ledger.charge(&k, "files.write", &b, 1).is_ok());
    let e = ledger.charge(&k, "files.write", &b, 2).unwrap_err();
    assert_eq!(e.budget, "budgets.max_calls_per_op.files.write");
    assert!(ledger.charge(&k, "files.read", &b, 3).is_ok());
    assert!(ledger.charge(&k, "files.read", &b, 4).is_ok());
    let e = ledger.charge(&k, "files.read", &b, 5).unwrap_err();
    assert_eq!(e.budget, "budgets.max_calls");
    ledger.refund(&k, "files.read");
    assert!(ledger.charge(&k, "files.read", &b, 6).is_ok());
    // Another run, another principal: their own budgets.
    let other = RunKey {
        principal: "bob",
        ..k
    };
    ledger.enter(&other, 7, None, false);
    assert!(ledger.charge(&other, "files.write", &b, 8).is_ok());
}

#[test]
fn wall_time_and_output_bytes_refuse_after_they_are_reached() {
    let ledger = RunLedger::default();
    let k = key("r2");
    ledger.enter(&k, 1_000, None, false);
    let b = Budgets {
        max_wall_time: Duration::from_secs(10),
        max_output_bytes: 100,
        ..Budgets::default()
    };
    assert!(ledger.charge(&k, "x", &b, 10_999).is_ok());
    ledger.add_output(&k, 100);
    assert_eq!(
        ledger.charge(&k, "x", &b, 5_000).unwrap_err().budget,
        "budgets.max_output_bytes"
    );
    let k2 = key("r3");
    ledger.enter(&k2, 1_000, None, false);
    assert_eq!(
        ledger.charge(&k2, "x", &b, 11_000).unwrap_err().budget,
        "budgets.max_wall_time"
    );
}

#[test]
fn a_run_only_ever_lowers_its_level_and_stays_in_dry_run() {
    let ledger = RunLedger::default();
    let k = key("r4");
    assert_eq!(ledger.enter(&k, 0, None, false).level, None);
    assert_eq!(
        ledger.enter(&k, 1, Some(AutonomyLevel::L1), false).level,
        Some(AutonomyLevel::L1)
    );
    assert_eq!(
        ledger.enter(&k, 2, Some(AutonomyLevel::L4), false).level,
        Some(AutonomyLevel::L1)
    );
    assert!(ledger.enter(&k, 3, None, true).dry_run);
    assert!(ledger.enter(&k, 4, None, false).dry_run);
}

#[test]
fn a_large_ledger_forgets_runs_idle_a_day_and_keeps_the_others() {
    let ledger = RunLedger::default();
    let day_ms = 24 * 3600 * 1000;
    for i in 0..10_050 {
        ledger.enter(&key(&format!("old-{i}")), 0, None, false);
    }
    // A day later the ledger keeps growing; once it has doubled since its last sweep, the next
    // new run sweeps: the day-idle runs are gone, the recent ones stay.
    for i in 0..10_000 {
        ledger.enter(&key(&format!("recent-{i}")), day_ms, None, false);
    }
    assert!(ledger.get(&key("old-0")).is_none());
    assert!(ledger.get(&key("old-10049")).is_none());
    assert!(ledger.get(&key("recent-0")).is_some());
    assert!(ledger.get(&key("recent-9999")).is_some());
}

#[test]
fn a_run_over_its_token_budget_is_refused_model_calls_only() {
    let ledger = RunLedger::default();
    let k = key("r-tokens");
    ledger.enter(&k, 0, None, false);
    let b = Budgets {
        max_tokens: 100,
        ..Budgets::default()
    };
    assert!(ledger.charge(&k, "llm.chat", &b, 1).is_ok());
    ledger.charge_tokens(&k, 60);
    assert!(ledger.charge(&k, "llm.chat", &b, 2).is_ok());
    ledger.charge_tokens(&k, 40);
    let e = ledger.charge(&k, "llm.chat", &b, 3).unwrap_err();
    assert_eq!(e.budget, "budgets.tokens");
    assert!(e.detail.contains("100 tokens"), "{}", e.detail);
    // The run's other calls go on.
    assert!(ledger.charge(&k, "files.read", &b, 4).is_ok());
    assert_eq!(ledger.get(&k).unwrap().tokens, 100);
}
