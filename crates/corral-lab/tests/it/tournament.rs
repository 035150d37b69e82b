//! Tournament grading's math: Bradley-Terry strengths by MM, bootstrap intervals, and the
//! judge's position bias, on judges whose answers are known.

use corral_lab::tournament::{self, Judgment, Prefer, rank, strengths};

/// Every (task, pair) judged in both orders by `judge(first output, second output)`.
fn judged(outputs: &[Vec<&str>], judge: impl Fn(&str, &str) -> Prefer) -> Vec<Judgment> {
    let mut out = Vec::new();
    let tasks = outputs[0].len();
    for t in 0..tasks {
        for a in 0..outputs.len() {
            for b in (a + 1)..outputs.len() {
                for (first, second) in [(a, b), (b, a)] {
                    out.push(Judgment {
                        task: t as u32 + 1,
                        first,
                        second,
                        prefer: judge(outputs[first][t], outputs[second][t]),
                    });
                }
            }
        }
    }
    out
}

fn longer(first: &str, second: &str) -> Prefer {
    match first.len().cmp(&second.len()) {
        std::cmp::Ordering::Greater => Prefer::First,
        std::cmp::Ordering::Less => Prefer::Second,
        std::cmp::Ordering::Equal => Prefer::Tie,
    }
}

/// Three variants on four tasks: variant 1 always longest, then 0, then 2.
fn outputs() -> Vec<Vec<&'static str>> {
    vec![
        vec!["medium", "mid", "middling", "in between"],
        vec![
            "the longest answer",
            "longest of all",
            "much the longest",
            "the longest one, by far",
        ],
        vec!["s", "t", "u", "v"],
    ]
}

#[test]
fn a_judge_that_prefers_the_longer_output_ranks_the_variants_by_length() {
    let judgments = judged(&outputs(), longer);
    let r = rank(3, &judgments, 200, 7);
    let order: Vec<usize> = r.ranked.iter().map(|x| x.index).collect();
    assert_eq!(order, [1, 0, 2]);
    assert!(r.ranked[0].strength > r.ranked[1].strength);
    assert!(r.ranked[1].strength > r.ranked[2].strength);
    // Every strength is finite and positive, even that of the variant that never won.
    assert!(
        r.ranked
            .iter()
            .all(|x| x.strength.is_finite() && x.strength > 0.0)
    );
    assert_eq!(r.ranked[2].wins, 0.0);
    // The strengths' geometric mean is 1.
    let log_sum: f64 = r.ranked.iter().map(|x| x.strength.ln()).sum();
    assert!(log_sum.abs() < 1e-9, "{log_sum}");
    assert_eq!(r.judgments, 24);
    // This judge reads the outputs, not the slots: the orders always agree.
    assert_eq!(r.position_bias.first_share, Some(0.5));
    assert_eq!(r.position_bias.order_disagreement, Some(0.0));
    assert_eq!(r.position_bias.pairs_both_orders, 12);
}

#[test]
fn a_judge_that_always_says_first_shows_position_bias_one_and_equal_strengths() {
    let judgments = judged(&outputs(), |_, _| Prefer::First);
    let r = rank(3, &judgments, 200, 7);
    let bias = r.position_bias;
    assert_eq!(bias.first_share, Some(1.0));
    assert_eq!((bias.first_preferred, bias.decisive), (24, 24));
    assert_eq!(bias.order_disagreement, Some(1.0));
    assert_eq!((bias.pairs_disagreeing, bias.pairs_both_orders), (12, 12));
    for x in &r.ranked {
        assert!((x.strength - 1.0).abs() < 1e-9, "{x:?}");
        assert_eq!(x.wins, 8.0);
    }
}

#[test]
fn every_bootstrap_interval_contains_its_point_estimate() {
    for judge in [longer as fn(&str, &str) -> Prefer, |_: &str, _: &str| {
        Prefer::Second
    }] {
        let r = rank(3, &judged(&outputs(), judge), 1000, 42);
        assert_eq!(r.bootstrap, 1000);
        for x in &r.ranked {
            assert!(
                x.interval.lower <= x.strength && x.strength <= x.interval.upper,
                "{x:?}"
            );
            assert!(
                x.interval.lower > 0.0 && x.interval.upper.is_finite(),
                "{x:?}"
            );
        }
    }
    // A lopsided judge gives separated intervals: the longest variant's is above the shortest's.
    let r = rank(3, &judged(&outputs(), longer), 1000, 42);
    assert!(
        r.ranked[0].interval.lower > r.ranked[2].interval.upper,
        "{r:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_intervals_and_another_seed_other_ones() {
    // A judge with some noise: it prefers the longer output, but says `first` on task 2.
    let judgments = judged(&outputs(), longer)
        .into_iter()
        .map(|mut j| {
            if j.task == 2 {
                j.prefer = Prefer::First;
            }
            j
        })
        .collect::<Vec<_>>();
    let a = rank(3, &judgments, 500, 9);
    let b = rank(3, &judgments, 500, 9);
    assert_eq!(a, b);
    let c = rank(3, &judgments, 500, 10);
    assert_eq!(
        a.ranked.iter().map(|x| x.strength).collect::<Vec<_>>(),
        c.ranked.iter().map(|x| x.strength).collect::<Vec<_>>()
    );
    assert_ne!(
        a.ranked.iter().map(|x| x.interval).collect::<Vec<_>>(),
        c.ranked.iter().map(|x| x.interval).collect::<Vec<_>>()
    );
}

#[test]
fn ties_count_half_a_win_each_and_no_judgment_at_all_leaves_every_strength_at_one() {
    let all_ties = judged(&outputs(), |_, _| Prefer::Tie);
    let r = rank(3, &all_ties, 100, 1);
    assert!(
        r.ranked
            .iter()
            .all(|x| (x.strength - 1.0).abs() < 1e-9 && x.wins == 8.0)
    );
    assert_eq!(r.position_bias.first_share, None);
    assert_eq!(r.position_bias.order_disagreement, Some(0.0));
    let none = rank(2, &[], 100, 1);
    for x in &none.ranked {
        assert_eq!(
            (x.strength, x.interval.lower, x.interval.upper),
            (1.0, 1.0, 1.0)
        );
    }
    assert_eq!(none.position_bias.first_share, None);
    assert_eq!(none.position_bias.order_disagreement, None);
}

#[test]
fn the_mm_fit_matches_the_closed_form_of_two_variants() {
    // Two variants: p0 / p1 = w01 / w10 at the maximum, the prior's half win included.
    let mut judgments = Vec::new();
    for (t, prefer) in [Prefer::First, Prefer::First, Prefer::First, Prefer::Second]
        .into_iter()
        .enumerate()
    {
        judgments.push(Judgment {
            task: t as u32 + 1,
            first: 0,
            second: 1,
            prefer,
        });
    }
    let s = strengths(2, &judgments);
    let expected = (3.0 + tournament::PRIOR_TIES / 2.0) / (1.0 + tournament::PRIOR_TIES / 2.0);
    assert!((s[0] / s[1] - expected).abs() < 1e-6, "{s:?}");
    assert!((s[0] * s[1] - 1.0).abs() < 1e-9, "{s:?}");
}
