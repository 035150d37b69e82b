//! The before/after verdict on constructed data: all four verdicts, every forced-inconclusive
//! rule, McNemar, Wilson, the seeded bootstrap, and the JSON a store keeps.

use corral_lab::verdict::{self, Forced, Input, Observed, ScoredTrials, Verdict};

/// A side of `n` scenarios `s01`.. with the scores `f(i)` over `trials` trials each.
fn side(n: usize, trials: u32, f: impl Fn(usize) -> f64) -> Vec<Observed> {
    (0..n)
        .map(|i| {
            let score = f(i);
            Observed {
                scenario: format!("s{i:02}"),
                trials,
                infra_errors: 0,
                scored: Some(ScoredTrials {
                    score,
                    passes: (score * f64::from(trials)).round() as u32,
                }),
            }
        })
        .collect()
}

fn compare(base: Vec<Observed>, cand: Vec<Observed>) -> verdict::Comparison {
    verdict::compare(&Input::new("baseline", base, "candidate", cand, 7)).unwrap()
}

/// A spread of scores in [0.2, 0.8] that is not all one value.
fn spread(i: usize) -> f64 {
    0.2 + 0.6 * ((i * 7 % 12) as f64 / 11.0)
}

#[test]
fn a_candidate_better_on_every_scenario_is_improved() {
    let c = compare(
        side(12, 3, spread),
        side(12, 3, |i| spread(i) + 0.15 + 0.01 * (i % 3) as f64),
    );
    assert_eq!(c.verdict, Verdict::Improved);
    assert_eq!(c.forced_by, None);
    let i = c.interval.unwrap();
    assert!(
        i.lower > 0.0 && i.lower <= c.delta.unwrap() && c.delta.unwrap() <= i.upper,
        "{c:?}"
    );
    assert!((c.delta.unwrap() - 0.16).abs() < 1e-9);
    assert_eq!(c.scenarios, 12);
    assert_eq!(c.mcnemar, None, "three trials: no McNemar");
}

#[test]
fn a_candidate_worse_on_every_scenario_is_regressed() {
    let c = compare(
        side(12, 3, spread),
        side(12, 3, |i| spread(i) - 0.1 - 0.02 * (i % 2) as f64),
    );
    assert_eq!(c.verdict, Verdict::Regressed);
    assert!(c.interval.unwrap().upper < 0.0);
    assert!(c.delta.unwrap() < 0.0);
}

#[test]
fn differences_within_the_margin_are_unchanged() {
    let c = compare(
        side(20, 3, spread),
        side(20, 3, |i| spread(i) + if i % 2 == 0 { 0.02 } else { -0.02 }),
    );
    assert_eq!(c.verdict, Verdict::Unchanged);
    let i = c.interval.unwrap();
    assert!(i.lower >= -0.05 && i.upper <= 0.05, "{i:?}");
    assert_eq!(c.margin, verdict::DEFAULT_MARGIN);
}

#[test]
fn wide_differences_either_way_are_inconclusive_without_a_forcing_rule() {
    let c = compare(
        side(20, 3, spread),
        side(20, 3, |i| spread(i) + if i % 2 == 0 { 0.2 } else { -0.2 }),
    );
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert_eq!(c.forced_by, None);
    assert!(c.forced_rules.is_empty());
    let i = c.interval.unwrap();
    assert!(i.lower < -0.05 && i.upper > 0.05, "{i:?}");
}

#[test]
fn a_wider_margin_turns_the_same_data_unchanged() {
    let mut input = Input::new(
        "b",
        side(20, 3, spread),
        "c",
        side(20, 3, |i| spread(i) + if i % 2 == 0 { 0.2 } else { -0.2 }),
        7,
    );
    input.margin = 0.5;
    assert_eq!(
        verdict::compare(&input).unwrap().verdict,
        Verdict::Unchanged
    );
}

#[test]
fn fewer_than_ten_scenarios_force_inconclusive_however_clear() {
    let c = compare(side(9, 3, spread), side(9, 3, |i| spread(i) + 0.2));
    assert!(
        c.interval.unwrap().lower > 0.0,
        "the interval alone says improved"
    );
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert_eq!(c.forced_by, Some(Forced::TooFewScenarios));
    assert_eq!(c.forced_rules, vec![Forced::TooFewScenarios]);
    // Ten is enough.
    assert_eq!(
        compare(side(10, 3, spread), side(10, 3, |i| spread(i) + 0.2)).verdict,
        Verdict::Improved
    );
}

/// Single-trial pass/fail sides of `n` scenarios: on the first `fixed` the baseline fails and
/// the candidate passes; on the rest both pass (odd) or both fail (even).
fn passfail(n: usize, fixed: usize) -> (Vec<Observed>, Vec<Observed>) {
    let rest = |i: usize| if i % 2 == 1 { 1.0 } else { 0.0 };
    let base = side(n, 1, |i| if i < fixed { 0.0 } else { rest(i) });
    let cand = side(n, 1, |i| if i < fixed { 1.0 } else { rest(i) });
    (base, cand)
}

#[test]
fn fewer_than_six_discordant_pairs_force_inconclusive_with_pass_fail_data() {
    let (b, c) = passfail(30, 5);
    let r = compare(b, c);
    let m = r.mcnemar.unwrap();
    assert_eq!((m.baseline_only, m.candidate_only), (0, 5));
    assert!(
        r.interval.unwrap().lower > 0.0,
        "the interval alone says improved"
    );
    assert_eq!(r.verdict, Verdict::Inconclusive);
    assert_eq!(r.forced_by, Some(Forced::TooFewDiscordant));
    // Six discordant pairs are enough.
    let (b, c) = passfail(30, 6);
    let r = compare(b, c);
    assert_eq!(r.mcnemar.unwrap().candidate_only, 6);
    assert_eq!(r.verdict, Verdict::Improved);
    assert!((r.mcnemar.unwrap().p_value - 0.03125).abs() < 1e-15);
}

#[test]
fn infrastructure_errors_above_five_percent_force_inconclusive() {
    let base = side(20, 1, |_| 0.2);
    let mut cand = side(20, 1, |i| 0.6 + 0.01 * i as f64);
    // 2 of 40 trials (5%): not above.
    for o in cand.iter_mut().take(2) {
        o.infra_errors = 1;
        o.scored = None;
    }
    let at_five = compare(base.clone(), cand.clone());
    assert_eq!(at_five.forced_by, None, "{at_five:?}");
    assert_eq!(at_five.verdict, Verdict::Improved);
    assert_eq!(
        at_five.scenarios, 18,
        "a side with only infrastructure errors has no pair"
    );
    assert!((at_five.infra_error_rate - 0.05).abs() < 1e-12);
    // 3 of 40 (7.5%): forced.
    cand[2].infra_errors = 1;
    cand[2].scored = None;
    let above = compare(base, cand);
    assert_eq!(above.verdict, Verdict::Inconclusive);
    assert_eq!(above.forced_by, Some(Forced::InfraErrors));
    assert_eq!(above.candidate.infra_errors, 3);
}

#[test]
fn any_unscored_run_forces_inconclusive_and_is_named() {
    let base = side(20, 3, spread);
    let mut cand = side(20, 3, |i| spread(i) + 0.2);
    cand[4].scored = None;
    let c = compare(base, cand);
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert_eq!(c.forced_by, Some(Forced::UnscoredRun));
    assert_eq!(c.candidate.unscored, vec!["s04".to_owned()]);
    assert_eq!(c.scenarios, 19);
}

#[test]
fn every_rule_that_applies_is_listed_in_order() {
    let base = side(5, 1, |_| 1.0);
    let mut cand = side(5, 1, |_| 1.0);
    cand[0].infra_errors = 1;
    cand[0].scored = None;
    cand[1].scored = None;
    let c = compare(base, cand);
    assert_eq!(
        c.forced_rules,
        vec![
            Forced::InfraErrors,
            Forced::UnscoredRun,
            Forced::TooFewScenarios,
            Forced::TooFewDiscordant
        ]
    );
    assert_eq!(c.forced_by, Some(Forced::InfraErrors));
}

#[test]
fn the_same_seed_gives_the_same_interval_and_the_seed_is_kept() {
    let make = |seed| {
        let mut i = Input::new(
            "b",
            side(15, 3, spread),
            "c",
            side(15, 3, |i| spread(i) + 0.1 * (i % 4) as f64 - 0.1),
            seed,
        );
        i.resamples = 2000;
        verdict::compare(&i).unwrap()
    };
    let (a, b, other) = (make(42), make(42), make(43));
    assert_eq!(a.interval, b.interval);
    assert_ne!(a.interval, other.interval);
    assert_eq!(a.seed, 42);
    assert_eq!(a.resamples, 2000);
}

#[test]
fn the_bootstrap_stream_is_chacha20_with_lemire_indices() {
    // The first words of ChaCha20 keyed by seed 0 (all-zero key, nonce 0): RFC 7539's test
    // vector `76 b8 e0 ad a0 f1 3d 90 ...` read as little-endian u64.
    let mut s = verdict::Stream::new(0);
    let x = s.below(u64::MAX);
    let first = u64::from_le_bytes([0x76, 0xb8, 0xe0, 0xad, 0xa0, 0xf1, 0x3d, 0x90]);
    let expected = ((u128::from(first) * u128::from(u64::MAX)) >> 64) as u64;
    assert_eq!(x, expected);
    // Indices stay below n.
    let mut s = verdict::Stream::new(9);
    assert!((0..1000).all(|_| s.below(7) < 7));
}

#[test]
fn mcnemar_is_the_exact_two_sided_binomial_on_discordant_pairs() {
    assert_eq!(verdict::mcnemar_exact(0, 0), 1.0);
    assert!((verdict::mcnemar_exact(1, 5) - 2.0 * 7.0 / 64.0).abs() < 1e-15);
    assert!((verdict::mcnemar_exact(5, 1) - 2.0 * 7.0 / 64.0).abs() < 1e-15);
    assert_eq!(verdict::mcnemar_exact(4, 4), 1.0);
    // Large counts do not underflow to 0 or NaN.
    let p = verdict::mcnemar_exact(1000, 1200);
    assert!(p > 0.0 && p < 1e-4, "{p}");
}

#[test]
fn wilson_intervals_are_reported_per_variant() {
    let w = verdict::wilson(5, 10).unwrap();
    assert!((w.lower - 0.236_593_090_512_564_3).abs() < 1e-12, "{w:?}");
    assert!((w.upper - 0.763_406_909_487_435_7).abs() < 1e-12, "{w:?}");
    assert_eq!(verdict::wilson(0, 0), None);
    let (b, c) = passfail(30, 6);
    let r = compare(b, c);
    assert_eq!((r.baseline.passes, r.baseline.trials_scored), (12, 30));
    assert_eq!((r.candidate.passes, r.candidate.trials_scored), (18, 30));
    assert_eq!(r.candidate.wilson, verdict::wilson(18, 30));
}

#[test]
fn sides_that_do_not_pair_up_are_refused_with_a_code() {
    let err = |b: Vec<Observed>, c: Vec<Observed>| {
        let e = verdict::compare(&Input::new("b", b, "c", c, 1)).unwrap_err();
        assert_eq!(e.code(), "lab.compare_invalid");
        e.to_string()
    };
    assert!(
        err(side(3, 1, |_| 1.0), side(2, 1, |_| 1.0))
            .contains("scenario `s02` has no result for `c`")
    );
    assert!(err(vec![], vec![]).contains("no scenarios"));
    let mut twice = side(2, 1, |_| 1.0);
    twice[1].scenario = "s00".into();
    assert!(err(twice, side(2, 1, |_| 1.0)).contains("appears twice"));
    let mut too_many = Input::new("b", side(2, 1, |_| 1.0), "c", side(2, 1, |_| 1.0), 1);
    too_many.resamples = verdict::MAX_RESAMPLES + 1;
    let e = verdict::compare(&too_many).unwrap_err();
    assert!(e.to_string().contains("must be 1 to 1000000"), "{e}");
    let mut bad = side(2, 1, |_| 1.0);
    bad[0].scored = Some(ScoredTrials {
        score: 1.5,
        passes: 1,
    });
    assert!(err(bad, side(2, 1, |_| 1.0)).contains("outside [0, 1]"));
}

#[test]
fn the_comparison_serializes_to_json_with_its_verdict_and_forcing_rule() {
    let c = compare(side(9, 3, spread), side(9, 3, |i| spread(i) + 0.2));
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["verdict"], "inconclusive");
    assert_eq!(v["forced_by"], "too_few_scenarios");
    assert_eq!(v["seed"], 7);
    assert_eq!(v["resamples"], 10_000);
    assert_eq!(v["method"], "paired_bootstrap_percentile");
    assert_eq!(v["baseline"]["name"], "baseline");
    assert!(v["interval"]["lower"].is_f64());
    let back: verdict::Comparison = serde_json::from_value(v).unwrap();
    assert_eq!(back, c);
}

#[test]
fn quantiles_interpolate_linearly_as_numpy_and_scipy_do() {
    // numpy.percentile([1, 2, 3, 4], [2.5, 25, 97.5]) = 1.075, 1.75, 3.925 (type 7).
    let xs = [1.0, 2.0, 3.0, 4.0];
    assert!((verdict::quantile_sorted(&xs, 0.025) - 1.075).abs() < 1e-12);
    assert!((verdict::quantile_sorted(&xs, 0.25) - 1.75).abs() < 1e-12);
    assert!((verdict::quantile_sorted(&xs, 0.975) - 3.925).abs() < 1e-12);
    assert_eq!(verdict::quantile_sorted(&[5.0], 0.975), 5.0);
}
