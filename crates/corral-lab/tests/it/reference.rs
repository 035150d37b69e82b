//! The comparison statistics against a reference: scipy's `bootstrap` (paired, percentile) and
//! statsmodels' exact `mcnemar` and Wilson `proportion_confint`, run on the same data by
//! `tests/reference/check_stats.py` with the Python in `CORRAL_TEST_PYTHON` (`.ci/run` makes a
//! venv with `.ci/requirements.txt` and sets it). Under `CI=true` a missing Python or module is
//! a failure; elsewhere the test says why it skipped.
//!
//! Tolerances:
//! - delta, McNemar p-values and Wilson bounds are deterministic formulas: 1e-9 (McNemar) and
//!   1e-12 (the rest).
//! - The bootstrap bounds come from two different random streams (corral's ChaCha20, numpy's
//!   PCG64), so they differ by Monte Carlo error. For the 2.5% quantile of B = 10,000 resampled
//!   means with a near-normal spread sigma (the bootstrap standard error scipy reports), that
//!   error has a standard deviation of about sigma * sqrt(0.025 * 0.975 / B) / phi(1.96) =
//!   0.027 sigma, so the difference of two independent estimates has about 0.038 sigma; the test
//!   allows 0.2 sigma (over 5 standard deviations). A method error is larger: a 90% interval in
//!   place of the 95% one moves each bound by about 0.31 sigma, and the "basic" (reverse)
//!   interval on the skewed case by more. When the scores take few values the resampled means
//!   sit on a lattice of step 1/n and a quantile can land on the neighbouring point, so the
//!   allowance is at least one step then. The standard errors must agree within 5% (the relative
//!   error of one is about 1/sqrt(2B) = 0.7%).

use std::path::PathBuf;
use std::process::Command;

use corral_lab::verdict::{self, Input, Observed, ScoredTrials};
use serde_json::{Value, json};

pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The reference's Python, or `None` (after saying why) when it is missing outside CI.
pub(crate) fn python() -> Option<PathBuf> {
    match std::env::var_os("CORRAL_TEST_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ if in_ci() => panic!(
            "CORRAL_TEST_PYTHON is not set under CI=true: .ci/run makes the venv (.ci/requirements.txt) and sets it"
        ),
        _ => {
            eprintln!(
                "skipped: CORRAL_TEST_PYTHON is not set (a Python with scipy and statsmodels: `python3 -m venv target/ci-venv && target/ci-venv/bin/pip install -r .ci/requirements.txt`)"
            );
            None
        }
    }
}

/// A small deterministic generator for the test data (xorshift64*), uniform in [0, 1).
struct Data(u64);

impl Data {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A named case: the two sides' scores per scenario, and the trials behind each score.
struct Case {
    name: &'static str,
    baseline: Vec<f64>,
    candidate: Vec<f64>,
    trials: u32,
    seed: u64,
}

fn cases() -> Vec<Case> {
    let mut d = Data(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    // 40 scenarios, continuous scores (means over 4 trials), a small improvement.
    let baseline: Vec<f64> = (0..40).map(|_| 0.2 + 0.6 * d.next()).collect();
    let candidate = baseline
        .iter()
        .map(|b| (b + 0.04 + 0.3 * (d.next() - 0.5)).clamp(0.0, 1.0))
        .collect();
    out.push(Case {
        name: "continuous_40",
        baseline,
        candidate,
        trials: 4,
        seed: 11,
    });
    // 30 scenarios, skewed differences: mostly a little worse, a few much better.
    let baseline: Vec<f64> = (0..30).map(|_| 0.5 + 0.2 * d.next()).collect();
    let candidate = baseline
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if i % 7 == 0 {
                (b + 0.45).min(1.0)
            } else {
                b - 0.05 * d.next()
            }
        })
        .collect();
    out.push(Case {
        name: "skewed_30",
        baseline,
        candidate,
        trials: 4,
        seed: 12,
    });
    // 60 scenarios, single-trial pass/fail.
    let baseline: Vec<f64> = (0..60)
        .map(|_| f64::from(u8::from(d.next() < 0.5)))
        .collect();
    let candidate = baseline
        .iter()
        .map(|b| if d.next() < 0.3 { 1.0 - b } else { *b })
        .collect();
    out.push(Case {
        name: "passfail_60",
        baseline,
        candidate,
        trials: 1,
        seed: 13,
    });
    out
}

fn observed(scores: &[f64], trials: u32) -> Vec<Observed> {
    scores
        .iter()
        .enumerate()
        .map(|(i, s)| Observed {
            scenario: format!("s{i:03}"),
            trials,
            infra_errors: 0,
            scored: Some(ScoredTrials {
                score: *s,
                passes: (s * f64::from(trials)).round() as u32,
            }),
        })
        .collect()
}

const MCNEMAR: &[(u64, u64)] = &[
    (0, 0),
    (0, 6),
    (1, 5),
    (6, 0),
    (3, 12),
    (10, 25),
    (40, 60),
    (100, 150),
    (500, 560),
    (1000, 1200),
    (7, 7),
];
const WILSON: &[(u64, u64)] = &[(0, 10), (5, 10), (10, 10), (1, 30), (17, 40), (999, 1000)];

#[test]
fn the_verdicts_statistics_match_scipy_and_statsmodels_on_the_same_data() {
    let Some(python) = python() else { return };
    let cases = cases();
    let data = json!({
        "bootstrap": cases.iter().map(|c| json!({
            "name": c.name, "baseline": c.baseline, "candidate": c.candidate,
            "resamples": verdict::DEFAULT_RESAMPLES, "seed": c.seed,
        })).collect::<Vec<_>>(),
        "mcnemar": MCNEMAR.iter().map(|(b, c)| json!([b, c])).collect::<Vec<_>>(),
        "wilson": WILSON.iter().map(|(k, n)| json!([k, n])).collect::<Vec<_>>(),
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    std::fs::write(&file, serde_json::to_vec(&data).unwrap()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/reference/check_stats.py");
    let out = Command::new(&python).arg(&script).arg(&file).output();
    let out = match out {
        Ok(o) => o,
        Err(e) if !in_ci() => {
            eprintln!("skipped: cannot run {} ({e})", python.display());
            return;
        }
        Err(e) => panic!("cannot run {} under CI=true: {e}", python.display()),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) && !in_ci() {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert!(
        out.status.success(),
        "check_stats.py failed ({}): {stderr}",
        out.status
    );
    let reference: Value = serde_json::from_slice(&out.stdout).unwrap();

    for (case, r) in cases.iter().zip(reference["bootstrap"].as_array().unwrap()) {
        assert_eq!(r["name"], case.name);
        let input = Input::new(
            "baseline",
            observed(&case.baseline, case.trials),
            "candidate",
            observed(&case.candidate, case.trials),
            case.seed,
        );
        let ours = verdict::compare(&input).unwrap();
        let (delta, interval) = (ours.delta.unwrap(), ours.interval.unwrap());
        let f = |k: &str| r[k].as_f64().unwrap();
        assert!(
            (delta - f("delta")).abs() < 1e-12,
            "{}: delta {delta} vs {}",
            case.name,
            f("delta")
        );
        let sigma = f("standard_error");
        let lattice = if case.trials == 1 {
            1.0 / case.baseline.len() as f64 + 1e-12
        } else {
            0.0
        };
        let tol = (0.2 * sigma).max(lattice);
        for (bound, ours, theirs) in [
            ("lower", interval.lower, f("lower")),
            ("upper", interval.upper, f("upper")),
        ] {
            assert!(
                (ours - theirs).abs() <= tol,
                "{}: the {bound} bound {ours} vs scipy's {theirs} (sigma {sigma}, allowed {tol})",
                case.name
            );
        }
        // Our own bootstrap standard error, from the same resamples' spread, within 5%.
        let se = bootstrap_se(&case.baseline, &case.candidate, case.seed);
        assert!(
            (se / sigma - 1.0).abs() < 0.05,
            "{}: se {se} vs scipy's {sigma}",
            case.name
        );
    }

    for r in reference["mcnemar"].as_array().unwrap() {
        let (b, c) = (r["b"].as_u64().unwrap(), r["c"].as_u64().unwrap());
        let theirs = r["p_value"].as_f64().unwrap();
        let ours = verdict::mcnemar_exact(b, c);
        assert!(
            (ours - theirs).abs() < 1e-9,
            "McNemar ({b}, {c}): {ours} vs statsmodels' {theirs}"
        );
    }
    // The McNemar a comparison reports is the same function on its discordant pairs.
    let pf = &cases[2];
    let c = verdict::compare(&Input::new(
        "b",
        observed(&pf.baseline, 1),
        "c",
        observed(&pf.candidate, 1),
        1,
    ))
    .unwrap();
    let m = c.mcnemar.unwrap();
    let (b_only, c_only) = pf
        .baseline
        .iter()
        .zip(&pf.candidate)
        .fold((0, 0), |(x, y), (b, c)| {
            (x + u64::from(*b > *c), y + u64::from(*c > *b))
        });
    assert_eq!((m.baseline_only, m.candidate_only), (b_only, c_only));

    for r in reference["wilson"].as_array().unwrap() {
        let (k, n) = (r["k"].as_u64().unwrap(), r["n"].as_u64().unwrap());
        let ours = verdict::wilson(k, n).unwrap();
        let (lo, hi) = (r["lower"].as_f64().unwrap(), r["upper"].as_f64().unwrap());
        assert!(
            (ours.lower - lo).abs() < 1e-12 && (ours.upper - hi).abs() < 1e-12,
            "Wilson {k}/{n}: {ours:?} vs statsmodels' ({lo}, {hi})"
        );
    }
}

/// The standard deviation (ddof 1, as scipy) of our resampled means, from the documented stream.
fn bootstrap_se(baseline: &[f64], candidate: &[f64], seed: u64) -> f64 {
    let d: Vec<f64> = candidate.iter().zip(baseline).map(|(c, b)| c - b).collect();
    let n = d.len() as u64;
    let mut s = verdict::Stream::new(seed);
    let means: Vec<f64> = (0..verdict::DEFAULT_RESAMPLES)
        .map(|_| (0..n).map(|_| d[s.below(n) as usize]).sum::<f64>() / n as f64)
        .collect();
    let m = means.iter().sum::<f64>() / means.len() as f64;
    (means.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (means.len() - 1) as f64).sqrt()
}
