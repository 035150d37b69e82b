//! The before/after verdict: baseline and candidate run on the same scenarios; per scenario the
//! paired difference (candidate - baseline score), delta = their mean, a 95% paired-bootstrap
//! interval, exact McNemar for single-trial pass/fail, Wilson intervals per variant, and the
//! verdict `regressed | improved | unchanged | inconclusive` with the rule that forced an
//! `inconclusive`, if one did.
//!
//! The statistics, decided (and cross-checked against scipy/statsmodels by
//! `tests/reference/check_stats.py`):
//! - Interval: the percentile bootstrap over scenarios, the pairs resampled with replacement
//!   (scipy `stats.bootstrap((base, cand), mean-difference, paired=True, method='percentile')`):
//!   10,000 resamples by default, the 2.5% and 97.5% quantiles of the resampled means by linear
//!   interpolation (Hyndman and Fan type 7: numpy's and `scipy.stats.quantile`'s default).
//!   Percentile rather than BCa: the differences are bounded in [-1, 1] and often take few
//!   values (pass/fail scores), where BCa's acceleration estimate is unstable (scipy warns it can
//!   be NaN on degenerate data), and a verdict must always be computable and explainable.
//! - The random stream, portable and documented so any language can replay it: ChaCha20
//!   (`rand_chacha::ChaCha20Rng`, stream 0) keyed by the seed's 8 little-endian bytes followed
//!   by 24 zero bytes; each resample draws its n indices in order, each index from one or more
//!   `next_u64` words by Lemire's multiply-and-reject method (unbiased): `m = x * n` as 128
//!   bits, accept when `low64(m) >= (2^64 - n) mod n`, the index is `high64(m)`. The seed is
//!   stored in the result.
//! - McNemar: exact, two-sided: `p = min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)])` over the
//!   discordant pairs b (baseline passed, candidate failed) and c (the reverse), as statsmodels'
//!   `mcnemar(table, exact=True)`. Computed only when every pair is a single trial with a
//!   pass/fail on both sides ("pass/fail data is used"); then fewer than 6 discordant pairs
//!   force `inconclusive`.
//! - Wilson 95% score interval (z = 1.959963984540054) for each variant's pass rate over all
//!   its scored trials.
//! - Verdict, in this order: `regressed` if upper < 0; `improved` if lower > 0; `unchanged` if
//!   -margin <= lower and upper <= margin (margin 0.05 by default); else `inconclusive`.
//! - Forced `inconclusive`, every rule that applies listed in [`Comparison::forced_rules`] and
//!   the first of them in [`Comparison::forced_by`], in this order: infrastructure errors above
//!   5% of all trials (both sides); any run executed but not scored; fewer than 10 usable pairs;
//!   fewer than 6 discordant pairs (pass/fail data). A pair is usable when both sides have a
//!   score; a side whose every trial hit an infrastructure error has none, and counts only
//!   toward the infrastructure rule.

use corral_policy::codes;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The default margin of `unchanged`.
pub const DEFAULT_MARGIN: f64 = 0.05;
/// The default number of bootstrap resamples.
pub const DEFAULT_RESAMPLES: u32 = 10_000;
/// The most bootstrap resamples a comparison may ask for (the resampled means are kept in
/// memory: 8 bytes each).
pub const MAX_RESAMPLES: u32 = 1_000_000;
/// The confidence level of every interval.
pub const CONFIDENCE: f64 = 0.95;
/// The normal quantile of 0.975 (scipy `norm.ppf(0.975)`).
pub const Z_975: f64 = 1.959_963_984_540_054;
/// Fewer usable pairs than this force `inconclusive`.
pub const MIN_SCENARIOS: usize = 10;
/// Fewer discordant pairs than this force `inconclusive` (pass/fail data).
pub const MIN_DISCORDANT: u64 = 6;
/// An infrastructure-error rate above this forces `inconclusive`.
pub const MAX_INFRA_ERROR_RATE: f64 = 0.05;

/// One variant's result on one scenario (over its trials).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// The scenario, the key that pairs the two sides.
    pub scenario: String,
    /// Trials run (at least 1).
    pub trials: u32,
    /// Trials that hit an infrastructure error (server, audit, store): not the agent's doing.
    #[serde(default)]
    pub infra_errors: u32,
    /// The score over the trials without an infrastructure error; `None` when any of them was
    /// executed but not scored (or, when every trial hit an infrastructure error, no trial is
    /// left to score).
    pub scored: Option<ScoredTrials>,
}

/// The scored part of an [`Observed`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoredTrials {
    /// The mean score over the scored trials, in [0, 1].
    pub score: f64,
    /// How many scored trials passed.
    pub passes: u32,
}

/// What to compare: the two sides' results, and the knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// The baseline's name (a variant).
    pub baseline: String,
    /// The candidate's name.
    pub candidate: String,
    /// The baseline's result per scenario.
    pub baseline_results: Vec<Observed>,
    /// The candidate's result per scenario (the same scenarios).
    pub candidate_results: Vec<Observed>,
    /// The margin of `unchanged`.
    pub margin: f64,
    /// The bootstrap's seed.
    pub seed: u64,
    /// The bootstrap's resamples.
    pub resamples: u32,
}

impl Input {
    /// An input with the default margin and resamples.
    pub fn new(
        baseline: impl Into<String>,
        baseline_results: Vec<Observed>,
        candidate: impl Into<String>,
        candidate_results: Vec<Observed>,
        seed: u64,
    ) -> Input {
        Input {
            baseline: baseline.into(),
            candidate: candidate.into(),
            baseline_results,
            candidate_results,
            margin: DEFAULT_MARGIN,
            seed,
            resamples: DEFAULT_RESAMPLES,
        }
    }
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The interval lies below 0.
    Regressed,
    /// The interval lies above 0.
    Improved,
    /// The interval lies inside +/- margin.
    Unchanged,
    /// None of the above, or a rule forced it.
    Inconclusive,
}

impl Verdict {
    /// The verdict's name (`regressed`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::Unchanged => "unchanged",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// A rule that forces `inconclusive` whatever the interval says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forced {
    /// Infrastructure errors on more than 5% of the trials.
    InfraErrors,
    /// A run was executed but not scored.
    UnscoredRun,
    /// Fewer than 10 usable scenarios.
    TooFewScenarios,
    /// Fewer than 6 discordant pairs (single-trial pass/fail data).
    TooFewDiscordant,
}

impl Forced {
    /// The rule's name (`infra_errors`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Forced::InfraErrors => "infra_errors",
            Forced::UnscoredRun => "unscored_run",
            Forced::TooFewScenarios => "too_few_scenarios",
            Forced::TooFewDiscordant => "too_few_discordant",
        }
    }
}

/// A two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The lower bound.
    pub lower: f64,
    /// The upper bound.
    pub upper: f64,
}

/// The exact McNemar test on the discordant pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct McNemar {
    /// Pairs where the baseline passed and the candidate failed.
    pub baseline_only: u64,
    /// Pairs where the candidate passed and the baseline failed.
    pub candidate_only: u64,
    /// The two-sided exact p-value.
    pub p_value: f64,
}

/// One variant's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantSummary {
    /// The variant.
    pub name: String,
    /// Scenarios with a score.
    pub scenarios_scored: usize,
    /// The mean score over them; `None` when there is none.
    pub mean_score: Option<f64>,
    /// Scored trials.
    pub trials_scored: u64,
    /// Scored trials that passed.
    pub passes: u64,
    /// passes / trials_scored; `None` when nothing was scored.
    pub pass_rate: Option<f64>,
    /// The Wilson 95% interval of the pass rate.
    pub wilson: Option<Interval>,
    /// Trials that hit an infrastructure error.
    pub infra_errors: u64,
    /// Scenarios executed but not scored.
    pub unscored: Vec<String>,
}

/// One scenario's paired difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairDiff {
    /// The scenario.
    pub scenario: String,
    /// The baseline's score.
    pub baseline: f64,
    /// The candidate's score.
    pub candidate: f64,
    /// candidate - baseline.
    pub difference: f64,
}

/// The comparison's result: what a store keeps and `--format json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The verdict.
    pub verdict: Verdict,
    /// The first rule that forced `inconclusive` (order: infra_errors, unscored_run,
    /// too_few_scenarios, too_few_discordant), if any.
    pub forced_by: Option<Forced>,
    /// Every rule that applies, in that order.
    pub forced_rules: Vec<Forced>,
    /// The mean paired difference (candidate - baseline) over the usable pairs.
    pub delta: Option<f64>,
    /// Its 95% paired-bootstrap percentile interval.
    pub interval: Option<Interval>,
    /// The margin of `unchanged`.
    pub margin: f64,
    /// The confidence level (0.95).
    pub confidence: f64,
    /// `paired_bootstrap_percentile`.
    pub method: String,
    /// The bootstrap's resamples.
    pub resamples: u32,
    /// The bootstrap's seed: the same input and seed give the same interval.
    pub seed: u64,
    /// `chacha20-lemire`: the random stream (see the module doc).
    pub rng: String,
    /// Usable pairs.
    pub scenarios: usize,
    /// The exact McNemar test, when every pair is single-trial pass/fail.
    pub mcnemar: Option<McNemar>,
    /// Infrastructure errors over all trials, both sides.
    pub infra_error_rate: f64,
    /// The baseline's summary.
    pub baseline: VariantSummary,
    /// The candidate's summary.
    pub candidate: VariantSummary,
    /// The usable pairs, in scenario order.
    pub pairs: Vec<PairDiff>,
}

/// Why two sides cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    /// The input is malformed.
    #[error(
        "the comparison's input is invalid: {0}; compare runs of the same scenarios, one result per scenario and side"
    )]
    Invalid(String),
}

impl CompareError {
    /// The stable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            CompareError::Invalid(_) => codes::LAB_COMPARE_INVALID,
        }
    }
}

/// Compares the two sides.
pub fn compare(input: &Input) -> Result<Comparison, CompareError> {
    let (base, cand) = paired_sides(input)?;
    let facts = Facts::of(&base, &cand);
    let baseline = summary(&input.baseline, &base);
    let candidate = summary(&input.candidate, &cand);
    let mcnemar = (facts.single_trial_passfail && !facts.pairs.is_empty()).then(|| McNemar {
        baseline_only: facts.baseline_only,
        candidate_only: facts.candidate_only,
        p_value: mcnemar_exact(facts.baseline_only, facts.candidate_only),
    });
    let diffs: Vec<f64> = facts.pairs.iter().map(|p| p.difference).collect();
    let delta = mean(&diffs);
    let interval = delta.map(|_| bootstrap_interval(&diffs, input.resamples, input.seed));

    // Decide.
    let mut forced_rules = Vec::new();
    if facts.infra_error_rate > MAX_INFRA_ERROR_RATE {
        forced_rules.push(Forced::InfraErrors);
    }
    if !baseline.unscored.is_empty() || !candidate.unscored.is_empty() {
        forced_rules.push(Forced::UnscoredRun);
    }
    if facts.pairs.len() < MIN_SCENARIOS {
        forced_rules.push(Forced::TooFewScenarios);
    }
    if let Some(m) = &mcnemar
        && m.baseline_only + m.candidate_only < MIN_DISCORDANT
    {
        forced_rules.push(Forced::TooFewDiscordant);
    }
    let verdict = match (forced_rules.first(), interval) {
        (Some(_), _) | (None, None) => Verdict::Inconclusive,
        (None, Some(i)) => by_interval(i, input.margin),
    };
    Ok(Comparison {
        verdict,
        forced_by: forced_rules.first().copied(),
        forced_rules,
        delta,
        interval,
        margin: input.margin,
        confidence: CONFIDENCE,
        method: "paired_bootstrap_percentile".into(),
        resamples: input.resamples,
        seed: input.seed,
        rng: "chacha20-lemire".into(),
        scenarios: facts.pairs.len(),
        mcnemar,
        infra_error_rate: facts.infra_error_rate,
        baseline,
        candidate,
        pairs: facts.pairs,
    })
}

/// Both sides' results by scenario, checked: a usable margin and resample count, at least one
/// scenario, and every scenario on both sides.
fn paired_sides(input: &Input) -> Result<(Indexed<'_>, Indexed<'_>), CompareError> {
    let bad = |s: String| Err(CompareError::Invalid(s));
    if !(input.margin.is_finite() && input.margin >= 0.0) {
        return bad(format!("the margin {} is not a number >= 0", input.margin));
    }
    if input.resamples == 0 || input.resamples > MAX_RESAMPLES {
        return bad(format!(
            "the resamples ({}) must be 1 to {MAX_RESAMPLES}",
            input.resamples
        ));
    }
    let base = index(&input.baseline, &input.baseline_results)?;
    let cand = index(&input.candidate, &input.candidate_results)?;
    if base.is_empty() {
        return bad("there are no scenarios".into());
    }
    if let Some(s) = base.keys().find(|s| !cand.contains_key(*s)) {
        return bad(format!(
            "scenario `{s}` has no result for `{}`",
            input.candidate
        ));
    }
    if let Some(s) = cand.keys().find(|s| !base.contains_key(*s)) {
        return bad(format!(
            "scenario `{s}` has no result for `{}`",
            input.baseline
        ));
    }
    Ok((base, cand))
}

/// What the verdict is decided from: the scored pairs, the discordant counts of single-trial
/// pass/fail data, and the share of trials that failed for corral's own reasons.
struct Facts {
    pairs: Vec<PairDiff>,
    single_trial_passfail: bool,
    baseline_only: u64,
    candidate_only: u64,
    infra_error_rate: f64,
}

impl Facts {
    fn of(base: &Indexed<'_>, cand: &Indexed<'_>) -> Self {
        let mut pairs = Vec::new();
        let mut single_trial_passfail = true;
        let (mut b_only, mut c_only) = (0u64, 0u64);
        for (scenario, b) in base {
            let Some(c) = cand.get(scenario) else {
                continue;
            };
            let (Some(bs), Some(cs)) = (b.scored, c.scored) else {
                continue;
            };
            pairs.push(PairDiff {
                scenario: (*scenario).to_owned(),
                baseline: bs.score,
                candidate: cs.score,
                difference: cs.score - bs.score,
            });
            if usable_trials(b) != 1 || usable_trials(c) != 1 {
                single_trial_passfail = false;
            } else {
                match (bs.passes == 1, cs.passes == 1) {
                    (true, false) => b_only += 1,
                    (false, true) => c_only += 1,
                    (true, true) | (false, false) => {}
                }
            }
        }
        let trials: u64 = base
            .values()
            .chain(cand.values())
            .map(|o| u64::from(o.trials))
            .sum();
        let infra: u64 = base
            .values()
            .chain(cand.values())
            .map(|o| u64::from(o.infra_errors))
            .sum();
        let infra_error_rate = if trials == 0 {
            0.0
        } else {
            infra as f64 / trials as f64
        };
        Facts {
            pairs,
            single_trial_passfail,
            baseline_only: b_only,
            candidate_only: c_only,
            infra_error_rate,
        }
    }
}

/// The verdict an interval gives, before the forcing rules.
pub fn by_interval(i: Interval, margin: f64) -> Verdict {
    if i.upper < 0.0 {
        Verdict::Regressed
    } else if i.lower > 0.0 {
        Verdict::Improved
    } else if -margin <= i.lower && i.upper <= margin {
        Verdict::Unchanged
    } else {
        Verdict::Inconclusive
    }
}

/// Checks one side and indexes it by scenario (sorted, so everything after is in one order).
/// One side's results by scenario id.
type Indexed<'a> = BTreeMap<&'a str, &'a Observed>;

fn index<'a>(side: &str, results: &'a [Observed]) -> Result<Indexed<'a>, CompareError> {
    let mut out = BTreeMap::new();
    for o in results {
        let at = format!("scenario `{}` of `{side}`", o.scenario);
        if o.trials == 0 {
            return Err(CompareError::Invalid(format!("{at} has 0 trials")));
        }
        if o.infra_errors > o.trials {
            return Err(CompareError::Invalid(format!(
                "{at} has more infrastructure errors ({}) than trials ({})",
                o.infra_errors, o.trials
            )));
        }
        if let Some(s) = o.scored {
            if !(s.score.is_finite() && (0.0..=1.0).contains(&s.score)) {
                return Err(CompareError::Invalid(format!(
                    "{at} has the score {}, outside [0, 1]",
                    s.score
                )));
            }
            if s.passes > usable_trials(o) {
                return Err(CompareError::Invalid(format!(
                    "{at} has more passes ({}) than scored trials ({})",
                    s.passes,
                    usable_trials(o)
                )));
            }
            if usable_trials(o) == 0 {
                return Err(CompareError::Invalid(format!(
                    "{at} has a score but every trial hit an infrastructure error"
                )));
            }
        }
        if out.insert(o.scenario.as_str(), o).is_some() {
            return Err(CompareError::Invalid(format!("{at} appears twice")));
        }
    }
    Ok(out)
}

/// Trials without an infrastructure error.
fn usable_trials(o: &Observed) -> u32 {
    o.trials - o.infra_errors.min(o.trials)
}

/// One side's summary.
fn summary(name: &str, side: &BTreeMap<&str, &Observed>) -> VariantSummary {
    let mut scores = Vec::new();
    let (mut trials, mut passes, mut infra) = (0u64, 0u64, 0u64);
    let mut unscored = Vec::new();
    for (scenario, o) in side {
        infra += u64::from(o.infra_errors);
        match o.scored {
            Some(s) => {
                scores.push(s.score);
                trials += u64::from(usable_trials(o));
                passes += u64::from(s.passes);
            }
            None if usable_trials(o) > 0 => unscored.push((*scenario).to_owned()),
            None => {}
        }
    }
    VariantSummary {
        name: name.to_owned(),
        scenarios_scored: scores.len(),
        mean_score: mean(&scores),
        trials_scored: trials,
        passes,
        pass_rate: (trials > 0).then(|| passes as f64 / trials as f64),
        wilson: wilson(passes, trials),
        infra_errors: infra,
        unscored,
    }
}

/// The mean, `None` of nothing.
fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The Wilson 95% score interval of `passes` out of `n`; `None` when n is 0.
pub fn wilson(passes: u64, n: u64) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let n = n as f64;
    let p = passes as f64 / n;
    let z2 = Z_975 * Z_975;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z_975 / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(Interval {
        lower: (centre - half).max(0.0),
        upper: (centre + half).min(1.0),
    })
}

/// The exact two-sided McNemar p-value: `min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)])`.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    let k = b.min(c);
    // Sum the binomial terms in log space (n can be large enough for 2^-n to underflow), then
    // add them from the largest (the term at k) down, relative to it.
    let ln2 = std::f64::consts::LN_2;
    let mut ln_terms = Vec::with_capacity(usize::try_from(k + 1).unwrap_or(0));
    let mut ln_c = 0.0; // ln C(n, 0)
    for i in 0..=k {
        ln_terms.push(ln_c - n as f64 * ln2);
        ln_c += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let top = ln_terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = ln_terms.iter().rev().map(|t| (t - top).exp()).sum();
    (2.0 * (top + sum.ln()).exp()).min(1.0)
}

/// The random stream of the bootstrap (see the module doc).
#[derive(Debug)]
pub struct Stream(rand_chacha::ChaCha20Rng);

impl Stream {
    /// The stream of `seed`: ChaCha20 keyed by its 8 little-endian bytes and 24 zero bytes.
    pub fn new(seed: u64) -> Stream {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        Stream(rand_chacha::ChaCha20Rng::from_seed(key))
    }

    /// An index in [0, n), unbiased (Lemire's multiply-and-reject); n must be at least 1.
    pub fn below(&mut self, n: u64) -> u64 {
        let n = n.max(1);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.0.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

/// The 95% percentile interval of the mean of `diffs` over `resamples` bootstrap resamples.
pub fn bootstrap_interval(diffs: &[f64], resamples: u32, seed: u64) -> Interval {
    let n = diffs.len();
    let mut stream = Stream::new(seed);
    let mut means = Vec::with_capacity(resamples as usize);
    for _ in 0..resamples {
        let mut sum = 0.0;
        for _ in 0..n {
            let i = stream.below(n as u64) as usize;
            sum += diffs.get(i).copied().unwrap_or(0.0);
        }
        means.push(sum / n.max(1) as f64);
    }
    means.sort_by(f64::total_cmp);
    let alpha = (1.0 - CONFIDENCE) / 2.0;
    Interval {
        lower: quantile_sorted(&means, alpha),
        upper: quantile_sorted(&means, 1.0 - alpha),
    }
}

/// The q-quantile of sorted data by linear interpolation (Hyndman and Fan type 7).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return f64::NAN;
    };
    let h = last as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(last);
    let (a, b) = (sorted[lo.min(last)], sorted[hi]);
    a + (h - h.floor()) * (b - a)
}
