//! Hostile input: whatever a model writes or a file holds, nothing panics, and after the guard
//! no text part below level 3 states a value.

use corral_learn::guard::{self, TurnState};
use corral_learn::levels::Level;
use corral_learn::manifest;
use corral_learn::watch::Snapshot;
use proptest::prelude::*;

use crate::manifest::good;

fn snapshot() -> Snapshot {
    Snapshot::new(manifest::parse(good().to_string().as_bytes()).unwrap()).unwrap()
}

/// Pieces a reply is made of: the values in several forms, near misses, separators, Unicode.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("5100".to_owned()),
        Just("5,100".to_owned()),
        Just("5.1k".to_owned()),
        Just("five thousand one hundred".to_owned()),
        Just("fifty-one hundred".to_owned()),
        Just("ORDERS-7".to_owned()),
        Just("51000".to_owned()),
        Just("510".to_owned()),
        Just("5.100.2".to_owned()),
        Just("\u{200b}".to_owned()),
        Just("\u{ff15}".to_owned()),
        Just(" ".to_owned()),
        Just("-".to_owned()),
        Just(".".to_owned()),
        Just(",".to_owned()),
        "[a-z0-9 ,.\\-_']{0,6}",
        any::<String>().prop_map(|s| s.chars().take(6).collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn after_the_guard_no_text_part_states_a_value(
        parts in proptest::collection::vec(proptest::collection::vec(piece(), 0..8), 0..4),
        level in 0u8..3,
        tools in proptest::bool::ANY,
        nudged_before in proptest::bool::ANY,
    ) {
        let snap = snapshot();
        let mut turn = TurnState::new();
        if nudged_before {
            let mut first = vec!["5100".to_owned()];
            guard::check(&snap, Level::new(level).unwrap(), &mut turn, &mut first, false);
        }
        let mut texts: Vec<String> = parts.iter().map(|p| p.concat()).collect();
        let _ = guard::check(&snap, Level::new(level).unwrap(), &mut turn, &mut texts, tools);
        for t in &texts {
            prop_assert!(!snap.matcher().is_match(t), "{:?}", t);
        }
        if texts.len() > 1 {
            prop_assert!(!snap.matcher().is_match(&texts.concat()));
        }
    }

    #[test]
    fn any_text_is_matched_without_panicking_and_the_same_way_twice(text in any::<String>()) {
        let snap = snapshot();
        let first = snap.matcher().find(&text);
        prop_assert_eq!(first, snap.matcher().find(&text));
    }

    #[test]
    fn any_bytes_are_refused_or_parsed_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = manifest::parse(&bytes);
    }

    #[test]
    fn a_mutated_manifest_is_refused_or_parsed_without_panicking(
        at in 0usize..400,
        with in "[\\[\\]{}\",:0-9a-z .eE+-]{0,4}",
        cut in 0usize..4,
    ) {
        let doc = good().to_string();
        let at = at.min(doc.len());
        let end = (at + cut).min(doc.len());
        let mutated = format!("{}{}{}", &doc[..at], with, &doc[end..]);
        let _ = manifest::parse(mutated.as_bytes());
    }
}
