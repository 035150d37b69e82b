//! The guard: what a learner sees of a root response that states an answer.

use std::sync::Arc;
use std::time::Duration;

use corral_learn::guard::{
    self, GENERIC_NUDGE, Guard, LAST_RESORT, Outcome, Replacement, SHORT_LINE, TurnState, Withheld,
};
use corral_learn::levels::Level;
use corral_learn::manifest;
use corral_learn::watch::{ManualClock, Snapshot, Watcher};
use serde_json::json;

use crate::manifest::good;

fn snapshot() -> Snapshot {
    Snapshot::new(manifest::parse(good().to_string().as_bytes()).unwrap()).unwrap()
}

fn level(n: u8) -> Level {
    Level::new(n).unwrap()
}

fn texts(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

fn withheld(ids: &[&str]) -> Vec<Withheld> {
    ids.iter()
        .map(|id| Withheld {
            scenario_id: "kafka-lag-7f3a".into(),
            target_id: (*id).into(),
        })
        .collect()
}

#[test]
fn a_stated_value_is_replaced_by_a_nudge_from_the_descriptor_and_level() {
    let snap = snapshot();
    let mut turn = TurnState::new();
    let mut t = texts(&["The total lag is 5,100 messages."]);
    let outcome = guard::check(&snap, level(0), &mut turn, &mut t, false);
    assert_eq!(
        outcome,
        Outcome::Withheld {
            scenario_id: "kafka-lag-7f3a".into(),
            targets: withheld(&["total_lag"]),
            replacement: Replacement::Nudge,
        }
    );
    assert_eq!(
        t,
        vec![guard::nudge(
            level(0),
            "total lag of group orders-processor"
        )]
    );
    assert!(t[0].starts_with("I can't give that value yet. Here's what to look at next:"));
    assert!(t[0].contains("total lag of group orders-processor"));
    assert!(!t[0].contains("5,100") && !t[0].contains("5100"));
}

#[test]
fn the_nudge_differs_by_level() {
    let d = "total lag";
    let all = [0, 1, 2].map(|n| guard::nudge(level(n), d));
    assert_ne!(all[0], all[1]);
    assert_ne!(all[1], all[2]);
}

#[test]
fn a_clean_response_is_untouched() {
    let snap = snapshot();
    let mut turn = TurnState::new();
    let mut t = texts(&[
        "Check the consumer group's offsets per partition.",
        "Then sum them.",
    ]);
    let before = t.clone();
    assert_eq!(
        guard::check(&snap, level(0), &mut turn, &mut t, false),
        Outcome::Clean
    );
    assert_eq!(t, before);
    assert!(!turn.nudged());
}

#[test]
fn level_three_is_unguarded() {
    let snap = snapshot();
    let mut turn = TurnState::new();
    let mut t = texts(&["The lag is 5100 on orders-7."]);
    assert_eq!(
        guard::check(&snap, Level::MAX, &mut turn, &mut t, false),
        Outcome::Unguarded
    );
    assert_eq!(t, texts(&["The lag is 5100 on orders-7."]));
}

#[test]
fn every_level_below_three_is_guarded() {
    let snap = snapshot();
    for n in 0..3 {
        let mut turn = TurnState::new();
        let mut t = texts(&["five thousand one hundred"]);
        let outcome = guard::check(&snap, level(n), &mut turn, &mut t, false);
        assert!(matches!(outcome, Outcome::Withheld { .. }), "level {n}");
        assert!(!t[0].contains("five thousand"));
    }
}

#[test]
fn one_nudge_per_turn_then_a_short_line() {
    let snap = snapshot();
    let mut turn = TurnState::new();
    let mut first = texts(&["It's 5100."]);
    guard::check(&snap, level(0), &mut turn, &mut first, false);
    let mut second = texts(&["Fine, it's orders-7 and 5.1k."]);
    let outcome = guard::check(&snap, level(0), &mut turn, &mut second, false);
    assert_eq!(
        outcome,
        Outcome::Withheld {
            scenario_id: "kafka-lag-7f3a".into(),
            targets: withheld(&["total_lag", "bad_partition"]),
            replacement: Replacement::ShortLine,
        }
    );
    assert_eq!(second, texts(&[SHORT_LINE]));
    // A new turn gets a nudge again.
    let mut turn = TurnState::new();
    let mut third = texts(&["5100"]);
    guard::check(&snap, level(0), &mut turn, &mut third, false);
    assert!(third[0].starts_with("I can't give that value yet"));
}

#[test]
fn tool_calls_are_kept_and_no_text_part_is_ever_empty() {
    let snap = snapshot();
    let mut turn = TurnState::new();
    // A mixed response: its text becomes the nudge; the caller keeps its tool calls as they are.
    let mut t = texts(&["Lag is 5100, let me check the offsets", ""]);
    let outcome = guard::check(&snap, level(0), &mut turn, &mut t, true);
    assert!(matches!(
        outcome,
        Outcome::Withheld {
            replacement: Replacement::Nudge,
            ..
        }
    ));
    assert_eq!(t.len(), 1);
    assert!(!t[0].is_empty());
    // A later match in the same turn, with tool calls: only the tool calls remain (no text part).
    let mut t = texts(&["still 5100"]);
    let outcome = guard::check(&snap, level(0), &mut turn, &mut t, true);
    assert!(matches!(
        outcome,
        Outcome::Withheld {
            replacement: Replacement::ToolCallsOnly,
            ..
        }
    ));
    assert!(t.is_empty());
    // A response that is only tool calls stays so.
    let mut t: Vec<String> = Vec::new();
    assert_eq!(
        guard::check(&snap, level(0), &mut turn, &mut t, true),
        Outcome::Clean
    );
    assert!(t.is_empty());
}

#[test]
fn a_value_split_over_two_text_parts_of_one_response_is_caught() {
    let snap = snapshot();
    let mut turn = TurnState::new();
    let mut t = texts(&["The lag is 51", "00 messages"]);
    let outcome = guard::check(&snap, level(0), &mut turn, &mut t, false);
    assert!(matches!(outcome, Outcome::Withheld { .. }));
    assert_eq!(t.len(), 1);
}

#[test]
fn a_nudge_that_would_state_a_value_falls_back_to_fixed_lines() {
    // The descriptor holds another target's value in words: the manifest check refuses that,
    // but a graced target's old descriptor may meet a new value, so the guard checks anyway.
    let mut m = manifest::parse(good().to_string().as_bytes()).unwrap();
    m.targets[0].descriptor = "orders-7 lag".into();
    let snap = Snapshot::new(m).unwrap();
    let mut turn = TurnState::new();
    let mut t = texts(&["5100"]);
    guard::check(&snap, level(0), &mut turn, &mut t, false);
    assert_eq!(t, texts(&[GENERIC_NUDGE]));

    // A string value that is a word of every fixed line: the last resort.
    let mut doc = good();
    doc["targets"][1]["value"] = json!("value");
    doc["targets"][1]["descriptor"] = json!("name of the stuck partition");
    let mut m = manifest::parse(doc.to_string().as_bytes()).unwrap();
    m.targets[0].descriptor = "lag".into();
    let snap = Snapshot::new(m).unwrap();
    let mut turn = TurnState::new();
    let mut t = texts(&["the value is 5100"]);
    guard::check(&snap, level(0), &mut turn, &mut t, false);
    assert_eq!(t, texts(&[LAST_RESORT]));
    let mut t = texts(&["5100 again"]);
    guard::check(&snap, level(0), &mut turn, &mut t, false);
    assert!(!snap.matcher().is_match(&t[0]), "{t:?}");
    assert!(!t[0].is_empty());
}

#[test]
fn the_outcome_names_ids_only_never_the_value_or_the_original() {
    let snap = snapshot();
    let mut turn = TurnState::new();
    let mut t = texts(&["The lag is 5100 and the partition is orders-7."]);
    let outcome = guard::check(&snap, level(0), &mut turn, &mut t, false);
    let shown = format!("{outcome:?}");
    assert!(
        !shown.contains("5100") && !shown.contains("orders-7"),
        "{shown}"
    );
    assert!(shown.contains("total_lag") && shown.contains("bad_partition"));
}

#[test]
fn the_guard_reads_the_manifest_through_the_watcher_on_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.json");
    std::fs::write(&path, good().to_string()).unwrap();
    let watcher =
        Watcher::open(&path, Duration::from_secs(60), Arc::new(ManualClock::new())).unwrap();
    let g = Guard::new(Arc::new(watcher));
    let mut doc = good();
    doc["targets"][0]["value"] = json!(7300);
    let tmp = dir.path().join("m.tmp");
    std::fs::write(&tmp, doc.to_string()).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let mut turn = TurnState::new();
    let mut t = texts(&["7,300 now"]);
    let checked = g.check(level(0), &mut turn, &mut t, false);
    assert!(checked.manifest_error.is_none());
    assert!(matches!(checked.outcome, Outcome::Withheld { .. }));

    std::fs::write(&tmp, "{").unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let mut turn = TurnState::new();
    let mut t = texts(&["7300 still"]);
    let checked = g.check(level(0), &mut turn, &mut t, false);
    assert!(checked.manifest_error.is_some());
    assert!(matches!(checked.outcome, Outcome::Withheld { .. }));
    assert_eq!(g.watcher().errors_total(), 1);
}

/// The targets withheld from `new` after `seen` (level 0, a fresh turn), and what `new` became.
fn after(seen: &[&str], new: &str) -> (Vec<String>, Vec<String>) {
    let snap = snapshot();
    let mut t = texts(&[new]);
    let outcome = guard::check_after(&snap, level(0), &mut TurnState::new(), seen, &mut t, false);
    let ids = match outcome {
        Outcome::Withheld { targets, .. } => targets.into_iter().map(|w| w.target_id).collect(),
        Outcome::Clean | Outcome::Unguarded => Vec::new(),
    };
    (ids, t)
}

#[test]
fn a_value_completed_by_the_next_response_is_withheld_there_and_the_history_is_kept() {
    let seen = ["The answer is 51"];
    let (ids, t) = after(&seen, "00.");
    assert_eq!(ids, ["total_lag"]);
    assert_eq!(
        t,
        vec![guard::nudge(
            level(0),
            "total lag of group orders-processor"
        )]
    );
    assert_eq!(seen, ["The answer is 51"]);
}

#[test]
fn a_value_split_over_every_form_the_matcher_knows_is_withheld_where_it_is_completed() {
    for (seen, new, id) in [
        (&["Total lag: 5,1"][..], "00 messages.", "total_lag"),
        (
            &["The lag is five thousand"][..],
            "one hundred messages.",
            "total_lag",
        ),
        (&["It is about 5.1"][..], "k messages.", "total_lag"),
        (
            &["The stuck one is orders-"][..],
            "7, look there.",
            "bad_partition",
        ),
        (&["The stuck one is ORD"][..], "ERS-7.", "bad_partition"),
        // Over three responses: the two before are joined too.
        (&["It is 5", "1"][..], "00.", "total_lag"),
        // A choice after another of the same completion ("51" / "00").
        (&["51"][..], "00", "total_lag"),
    ] {
        assert_eq!(after(seen, new).0, [id], "{seen:?} + {new:?}");
    }
}

#[test]
fn a_join_that_does_not_form_the_value_is_not_withheld() {
    for (seen, new) in [
        (&["The answer is 51"][..], "000."),
        (&["The answer is 5,1"][..], "000."),
        (&["Partition 5"][..], "10 is behind."),
        (&["It is abc51"][..], "00."),
        (&["The answer is 51"][..], "0 and counting."),
        (&["Look at orders"][..], "-8 first."),
        (&["The lag is five thousand"][..], "two hundred."),
        (&["51"][..], ".00"),
        (&[][..], "00."),
        (&["The answer is 51"][..], "Check the offsets."),
    ] {
        let (ids, t) = after(seen, new);
        assert!(ids.is_empty(), "{seen:?} + {new:?}: {ids:?}");
        assert_eq!(t, vec![new.to_owned()]);
    }
}

#[test]
fn a_value_the_history_already_stated_is_not_withheld_again_from_a_clean_reply() {
    let (ids, t) = after(&["The lag was 5100 an hour ago."], "It has not moved.");
    assert!(ids.is_empty(), "{ids:?}");
    assert_eq!(t, ["It has not moved."]);
    let (ids, _) = after(&["Look at orders-7."], "Then at 5100.");
    assert_eq!(ids, ["total_lag"]);
}

#[test]
fn a_long_history_is_joined_by_its_tail() {
    let long = format!("{} The answer is 51", "Check the offsets. ".repeat(2_000));
    assert_eq!(after(&[long.as_str()], "00.").0, ["total_lag"]);
    let (ids, _) = after(&[long.as_str(), "orders-"], "7");
    assert_eq!(ids, ["bad_partition"]);
}

#[test]
fn at_level_3_a_join_is_not_checked() {
    let snap = snapshot();
    let mut t = texts(&["00."]);
    let outcome = guard::check_after(
        &snap,
        level(3),
        &mut TurnState::new(),
        &["The answer is 51"],
        &mut t,
        false,
    );
    assert_eq!(outcome, Outcome::Unguarded);
    assert_eq!(t, ["00."]);
}

#[test]
fn a_long_reply_after_a_history_is_joined_by_its_head_and_still_checked_whole() {
    let long = "Check the offsets per partition. ".repeat(200);
    // Completed at the head of a long reply: withheld.
    assert_eq!(
        after(&["The answer is 51"], &format!("00. {long}")).0,
        ["total_lag"]
    );
    // A value at the end of a long reply is the reply's own: withheld as ever.
    assert_eq!(
        after(&["Hello."], &format!("{long} It is 5100.")).0,
        ["total_lag"]
    );
    // Nothing joins: untouched.
    assert!(
        after(&["The answer is 51"], &format!("000. {long}"))
            .0
            .is_empty()
    );
}
