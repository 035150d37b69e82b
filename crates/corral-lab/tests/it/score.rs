//! The scoring port: the built-in scorers, "executed, not scored", and pass@k / pass^k.

use corral_lab::score::{self, NotScored, RunScore, Scored, StepScore, TrialStats};
use serde_json::{Value, json};

/// Scores one step with a built-in scorer: `Some(pass)`, or `None` when the expectation is
/// malformed (with the code checked).
fn check(scorer: &str, output: &str, expected: Value) -> Option<bool> {
    let s = score::builtin(scorer).unwrap();
    match score::score_step(Some(s.as_ref()), "the input", output, Some(&expected)) {
        Ok(StepScore::Scored(x)) => {
            assert_eq!(x.score(), if x.pass() { 1.0 } else { 0.0 });
            Some(x.pass())
        }
        Ok(other) => panic!("{other:?}"),
        Err(e) => {
            assert_eq!(e.code(), "lab.expected_invalid", "{e}");
            None
        }
    }
}

#[test]
fn exact_compares_the_output_byte_for_byte() {
    assert_eq!(
        check(
            "exact",
            "first synthetic account",
            json!("first synthetic account")
        ),
        Some(true)
    );
    assert_eq!(
        check(
            "exact",
            "first synthetic account\n",
            json!("first synthetic account")
        ),
        Some(false)
    );
    assert_eq!(
        check(
            "exact",
            "First synthetic account",
            json!("first synthetic account")
        ),
        Some(false)
    );
}

#[test]
fn exact_with_a_json_expectation_compares_the_parsed_output() {
    assert_eq!(
        check(
            "exact",
            r#"{ "b": [1, 2], "a": true }"#,
            json!({"a": true, "b": [1, 2]})
        ),
        Some(true)
    );
    assert_eq!(
        check("exact", r#"{"a": false}"#, json!({"a": true})),
        Some(false)
    );
    assert_eq!(check("exact", "not json", json!({"a": true})), Some(false));
}

#[test]
fn regex_must_match_the_whole_output() {
    assert_eq!(check("regex", "yes", json!("yes|no")), Some(true));
    assert_eq!(check("regex", "no", json!("yes|no")), Some(true));
    // Anchored at both ends: a match inside the output is not enough.
    assert_eq!(
        check("regex", "yes, and also maybe", json!("yes|no")),
        Some(false)
    );
    assert_eq!(check("regex", "well, yes", json!("yes")), Some(false));
    // A search is spelled out; `(?s)` lets `.` cross newlines.
    assert_eq!(
        check("regex", "line 1\nyes\n", json!("(?s).*yes.*")),
        Some(true)
    );
    assert_eq!(
        check("regex", "account 42", json!(r"account \d+")),
        Some(true)
    );
}

#[test]
fn a_regex_that_does_not_compile_is_the_scenarios_error_not_a_fail() {
    assert_eq!(check("regex", "x", json!("(unclosed")), None);
    assert_eq!(check("regex", "x", json!(42)), None);
    let err = score::builtin("regex")
        .unwrap()
        .score("in", "x", &json!("a{1000000}"))
        .unwrap_err();
    assert!(err.to_string().contains("does not compile"), "{err}");
}

#[test]
fn json_path_compares_the_value_at_a_singular_query() {
    let out = r#"{"user": {"id": "u1", "tags": ["a", "b"], "odd key": 3}, "ok": true}"#;
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "$.user.id", "value": "u1"})
        ),
        Some(true)
    );
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "$.user.tags[1]", "value": "b"})
        ),
        Some(true)
    );
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "$.user.tags[-1]", "value": "b"})
        ),
        Some(true)
    );
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "$['user']['odd key']", "value": 3})
        ),
        Some(true)
    );
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "$", "value": serde_json::from_str::<Value>(out).unwrap()})
        ),
        Some(true)
    );
    assert_eq!(
        check("json_path", out, json!({"path": "$.ok", "value": false})),
        Some(false)
    );
    // Nothing at the path, or an output that is not JSON: a fail.
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "$.user.tags[2]", "value": null})
        ),
        Some(false)
    );
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "$.missing", "value": null})
        ),
        Some(false)
    );
    assert_eq!(
        check(
            "json_path",
            "[[mock-miss:x]]",
            json!({"path": "$.ok", "value": true})
        ),
        Some(false)
    );
}

#[test]
fn json_path_takes_a_json_pointer_too() {
    let out = r#"{"a/b": {"c~d": [10, 20]}}"#;
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "/a~1b/c~0d/1", "value": 20})
        ),
        Some(true)
    );
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "", "value": {"a/b": {"c~d": [10, 20]}}})
        ),
        Some(true)
    );
    assert_eq!(
        check(
            "json_path",
            out,
            json!({"path": "/a~1b/c~0d/01", "value": 20})
        ),
        Some(false)
    );
}

#[test]
fn json_path_refuses_paths_that_select_more_than_one_value_and_malformed_expectations() {
    for path in [
        "$.*", "$..a", "$[?@.a]", "$[0:2]", "$.a[*]", "a.b", "$.", "$['a'", "$[01]", "/a~2",
    ] {
        assert_eq!(
            check("json_path", "{}", json!({"path": path, "value": 1})),
            None,
            "{path}"
        );
    }
    assert_eq!(check("json_path", "{}", json!({"value": 1})), None);
    assert_eq!(check("json_path", "{}", json!({"path": "$.a"})), None);
    assert_eq!(
        check(
            "json_path",
            "{}",
            json!({"path": "$.a", "value": 1, "extra": 2})
        ),
        None
    );
    assert_eq!(check("json_path", "{}", json!("$.a")), None);
}

#[test]
fn an_unknown_scorer_is_refused_with_its_code() {
    let err = score::builtin("fuzzy").unwrap_err();
    assert_eq!(err.code(), "lab.scorer_unknown");
    assert!(err.to_string().contains("`fuzzy`"));
}

#[test]
fn a_step_without_expected_output_or_without_a_scorer_is_executed_not_scored() {
    let exact = score::builtin("exact").unwrap();
    let no_expected = score::score_step(Some(exact.as_ref()), "in", "out", None).unwrap();
    assert_eq!(
        no_expected,
        StepScore::NotScored {
            reason: NotScored::NoExpected
        }
    );
    let no_scorer = score::score_step(None, "in", "out", Some(&json!("out"))).unwrap();
    assert_eq!(
        no_scorer,
        StepScore::NotScored {
            reason: NotScored::NoScorer
        }
    );
    assert_eq!(
        serde_json::to_value(no_scorer).unwrap(),
        json!({"status": "not_scored", "reason": "no_scorer"})
    );
}

#[test]
fn a_run_with_any_unscored_step_is_not_scored_never_a_pass() {
    let pass = StepScore::Scored(Scored::binary(true));
    let unscored = StepScore::NotScored {
        reason: NotScored::NoExpected,
    };
    let run = RunScore::of_steps(&[pass, unscored, pass]);
    assert_eq!(
        run,
        RunScore::NotScored {
            steps_not_scored: 1
        }
    );
    assert_eq!(run.verdict(), "not_scored");
    assert_eq!(RunScore::of_steps(&[]).verdict(), "not_scored");
    let fail = StepScore::Scored(Scored::binary(false));
    let run = RunScore::of_steps(&[pass, fail]);
    assert_eq!(run, RunScore::Scored(Scored::new(0.5, false).unwrap()));
    assert_eq!(run.verdict(), "failed");
    assert_eq!(RunScore::of_steps(&[pass, pass]).verdict(), "passed");
}

#[test]
fn a_score_outside_zero_to_one_is_not_a_score() {
    assert!(Scored::new(1.5, true).is_none());
    assert!(Scored::new(-0.1, false).is_none());
    assert!(Scored::new(f64::NAN, true).is_none());
    assert!(Scored::new(0.25, false).is_some());
    // Nor can one be read from JSON.
    let err = serde_json::from_str::<Scored>(r#"{"score": 2.0, "pass": true}"#).unwrap_err();
    assert!(err.to_string().contains("outside [0, 1]"), "{err}");
    let ok: Scored = serde_json::from_str(r#"{"score": 0.5, "pass": false}"#).unwrap();
    assert_eq!(ok, Scored::new(0.5, false).unwrap());
    let step = StepScore::Scored(Scored::binary(true));
    let v = serde_json::to_value(step).unwrap();
    assert_eq!(v, json!({"status": "scored", "score": 1.0, "pass": true}));
    assert_eq!(serde_json::from_value::<StepScore>(v).unwrap(), step);
    assert!(
        serde_json::from_value::<StepScore>(
            json!({"status": "scored", "score": -1.0, "pass": false})
        )
        .is_err()
    );
}

#[test]
fn pass_at_k_and_pass_hat_k_with_k_trials_are_any_and_all() {
    let some = TrialStats::of(&[false, true, false]);
    assert_eq!(some.pass_at_k(3), Some(1.0));
    assert_eq!(some.pass_hat_k(3), Some(0.0));
    let all = TrialStats::of(&[true, true, true]);
    assert_eq!(all.pass_at_k(3), Some(1.0));
    assert_eq!(all.pass_hat_k(3), Some(1.0));
    let none = TrialStats::of(&[false, false, false]);
    assert_eq!(none.pass_at_k(3), Some(0.0));
    assert_eq!(none.pass_hat_k(3), Some(0.0));
    assert_eq!(none.pass_at_k(4), None);
    assert_eq!(none.pass_at_k(0), None);
}

#[test]
fn pass_at_k_with_more_trials_is_chens_unbiased_estimator() {
    // n = 10, c = 3, k = 2: 1 - C(7, 2) / C(10, 2) = 1 - 21/45.
    let s = TrialStats {
        trials: 10,
        passes: 3,
    };
    assert!((s.pass_at_k(2).unwrap() - (1.0 - 21.0 / 45.0)).abs() < 1e-12);
    // pass^k: C(3, 2) / C(10, 2) = 3/45.
    assert!((s.pass_hat_k(2).unwrap() - 3.0 / 45.0).abs() < 1e-12);
    // k = 1: both are the pass rate.
    assert!((s.pass_at_k(1).unwrap() - 0.3).abs() < 1e-12);
    assert!((s.pass_hat_k(1).unwrap() - 0.3).abs() < 1e-12);
    let suite = score::SuiteStats::of(
        2,
        &[
            s,
            TrialStats {
                trials: 10,
                passes: 10,
            },
        ],
    );
    assert!((suite.pass_at_k.unwrap() - (1.0 - 21.0 / 45.0 + 1.0) / 2.0).abs() < 1e-12);
    assert_eq!(score::SuiteStats::of(11, &[s]).pass_at_k, None);
}

#[test]
fn a_trial_passes_only_when_scored_and_passed_and_one_not_judged_counts_as_not_passed() {
    let pass = Some(RunScore::Scored(Scored::binary(true)));
    let fail = Some(RunScore::Scored(Scored::binary(false)));
    let unscored = Some(RunScore::NotScored {
        steps_not_scored: 1,
    });
    // An infrastructure error (or a trial the run stopped before): `None`.
    let s = TrialStats::of_scores(&[pass, fail, unscored, None, pass]);
    assert_eq!(
        s,
        TrialStats {
            trials: 5,
            passes: 2
        }
    );
    assert_eq!(s.pass_at_k(5), Some(1.0));
    assert_eq!(s.pass_hat_k(5), Some(0.0));
    let all = TrialStats::of_scores(&[pass, pass, pass]);
    assert_eq!(
        (all.pass_at_k(3), all.pass_hat_k(3)),
        (Some(1.0), Some(1.0))
    );
    let none = TrialStats::of_scores(&[unscored, None]);
    assert_eq!((none.passes, none.pass_at_k(2)), (0, Some(0.0)));
}
