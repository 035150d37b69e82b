//! Levels and hints: per (subject, scenario), human only, rate-limited, +1, never lower, max 3.

use std::sync::Arc;
use std::time::Duration;

use corral_learn::levels::{self, HintRefusal, LAB_COACH, Level, Levels, level_line};
use corral_learn::watch::ManualClock;
use corral_policy::codes;
use corral_policy::{Principal, PrincipalKind, PrincipalOrigin};

fn human(id: &str) -> Principal {
    let mut p = Principal::new(id, &["viewer"]);
    p.origin = PrincipalOrigin::StaticToken;
    p
}

fn table() -> (Levels, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    (Levels::new(Duration::from_secs(10), clock.clone()), clock)
}

fn lv(n: u8) -> Level {
    Level::new(n).unwrap()
}

#[test]
fn a_learner_starts_at_the_manifests_default() {
    let (t, _) = table();
    assert_eq!(t.level(&human("alice"), "s-1", lv(0)), lv(0));
    assert_eq!(t.level(&human("alice"), "s-1", lv(2)), lv(2));
}

#[test]
fn a_hint_adds_one_and_returns_old_and_new() {
    let (t, clock) = table();
    let alice = human("alice");
    let h = t.hint(&alice, "s-1", lv(0)).unwrap();
    assert_eq!((h.old, h.new), (lv(0), lv(1)));
    assert_eq!(t.level(&alice, "s-1", lv(0)), lv(1));
    clock.advance(Duration::from_secs(10));
    let h = t.hint(&alice, "s-1", lv(0)).unwrap();
    assert_eq!((h.old, h.new), (lv(1), lv(2)));
    clock.advance(Duration::from_secs(10));
    let h = t.hint(&alice, "s-1", lv(0)).unwrap();
    assert_eq!((h.old, h.new), (lv(2), lv(3)));
    clock.advance(Duration::from_secs(10));
    let err = t.hint(&alice, "s-1", lv(0)).unwrap_err();
    assert_eq!(err, HintRefusal::AtMax);
    assert_eq!(err.code(), codes::LEARNING_HINT_AT_MAX);
    assert_eq!(t.level(&alice, "s-1", lv(0)), Level::MAX);
}

#[test]
fn hints_are_rate_limited_per_subject() {
    let (t, clock) = table();
    let (alice, bob) = (human("alice"), human("bob"));
    t.hint(&alice, "s-1", lv(0)).unwrap();
    clock.advance(Duration::from_secs(4));
    let err = t.hint(&alice, "s-1", lv(0)).unwrap_err();
    assert_eq!(
        err,
        HintRefusal::RateLimited {
            retry_after: Duration::from_secs(6)
        }
    );
    assert_eq!(err.code(), codes::LEARNING_HINT_RATE_LIMITED);
    assert!(err.to_string().contains("6 s"), "{err}");
    assert_eq!(
        t.level(&alice, "s-1", lv(0)),
        lv(1),
        "a refused hint changes nothing"
    );
    // Another learner is not limited by alice.
    assert_eq!(t.hint(&bob, "s-1", lv(0)).unwrap().new, lv(1));
    assert!(!t.view(&alice, "s-1", lv(0)).can_take_hint);
    clock.advance(Duration::from_secs(6));
    assert!(t.view(&alice, "s-1", lv(0)).can_take_hint);
    assert_eq!(t.hint(&alice, "s-1", lv(0)).unwrap().new, lv(2));
}

#[test]
fn only_a_verified_human_takes_a_hint() {
    let (t, _) = table();
    let mut agent = human("alice");
    agent.kind = PrincipalKind::Delegated;
    let mut service = human("svc");
    service.kind = PrincipalKind::Service;
    let local = Principal::new("alice", &[]);
    let anonymous = Principal::anonymous();
    for p in [&agent, &service, &local, &anonymous] {
        let err = t.hint(p, "s-1", lv(0)).unwrap_err();
        assert_eq!(err, HintRefusal::NotHuman, "{p:?}");
        assert_eq!(err.code(), codes::LEARNING_HINT_NOT_HUMAN);
        assert!(!t.view(p, "s-1", lv(0)).can_take_hint);
    }
}

#[test]
fn a_delegated_agent_acts_at_its_humans_level() {
    let (t, _) = table();
    let alice = human("alice");
    t.hint(&alice, "s-1", lv(0)).unwrap();
    let mut agent = human("alice");
    agent.kind = PrincipalKind::Delegated;
    assert_eq!(t.level(&agent, "s-1", lv(0)), lv(1));
    assert_eq!(levels::subject(&agent), levels::subject(&alice));
}

#[test]
fn a_level_recorded_for_another_scenario_reads_as_the_default() {
    let (t, clock) = table();
    let alice = human("alice");
    t.hint(&alice, "s-1", lv(0)).unwrap();
    assert_eq!(t.level(&alice, "s-2", lv(0)), lv(0));
    clock.advance(Duration::from_secs(10));
    let h = t.hint(&alice, "s-2", lv(1)).unwrap();
    assert_eq!((h.old, h.new), (lv(1), lv(2)));
    assert_eq!(
        t.level(&alice, "s-1", lv(0)),
        lv(0),
        "s-1's level was replaced"
    );
}

#[test]
fn a_level_never_reads_below_the_default() {
    let (t, _) = table();
    let alice = human("alice");
    t.hint(&alice, "s-1", lv(0)).unwrap();
    assert_eq!(t.level(&alice, "s-1", lv(2)), lv(2));
}

#[test]
fn a_new_table_reads_everyone_at_the_default() {
    let (t, _) = table();
    t.hint(&human("alice"), "s-1", lv(0)).unwrap();
    let (restarted, _) = table();
    assert_eq!(restarted.level(&human("alice"), "s-1", lv(0)), lv(0));
}

#[test]
fn the_level_line_names_the_level_and_no_value() {
    let lines: Vec<&str> = (0..=3).map(|n| level_line(lv(n))).collect();
    for (n, line) in lines.iter().enumerate() {
        assert!(line.contains(&format!("level {n} of 3")), "{line}");
        assert!(!line.contains('\n'));
    }
    assert!(lines[0].contains("Do not state"));
    assert!(lines[3].contains("may state"));
    assert_eq!(LAB_COACH, "lab_coach");
}

#[test]
fn levels_above_three_do_not_exist() {
    assert!(Level::new(4).is_none());
    assert_eq!(Level::new(3), Some(Level::MAX));
}
