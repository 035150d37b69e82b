//! Tournament grading, the math (pure): a group of variants' outputs on the same tasks, judged
//! pairwise in both orders, gives a Bradley-Terry ranking with bootstrap intervals and the
//! judge's position bias.
//!
//! Decided:
//! - **Strengths**: Bradley-Terry (`P(i beats j) = p_i / (p_i + p_j)`) fitted by the MM
//!   algorithm of Hunter 2004 (*MM algorithms for generalized Bradley-Terry models*, Ann. Stat.
//!   32(1)): `p_i <- W_i / sum_{j != i} n_ij / (p_i + p_j)`, where `W_i` is i's wins and `n_ij`
//!   the comparisons of i and j. A tie counts as half a win for each side.
//! - **Prior**: one virtual tie between every two variants ([`PRIOR_TIES`]: half a win each
//!   way), added to the counts before fitting. Without it a variant that never wins has
//!   strength 0 (and one that never loses, infinity: the maximum-likelihood estimate does not
//!   exist); with it every strength is finite and positive, and the comparison graph is always
//!   connected. It pulls strengths toward each other a little, less as judgments accumulate.
//! - **Normalization**: the strengths' geometric mean is 1 (their logs sum to 0), after every
//!   iteration; the fit stops when no log-strength moves by more than [`TOLERANCE`], or after
//!   [`MAX_ITERATIONS`].
//! - **Intervals**: the percentile bootstrap: the judgments are resampled with replacement
//!   ([`DEFAULT_BOOTSTRAP`] = 1000 resamples by default), the strengths refitted on each, and
//!   each variant's 2.5% and 97.5% quantiles taken by linear interpolation (type 7, as the
//!   comparison verdict's). The random stream is the verdict's ([`crate::verdict::Stream`]:
//!   ChaCha20 keyed by the seed, Lemire's unbiased draws), so the same seed gives the same
//!   intervals.
//! - **Position bias**: of the judgments that were not a tie, the share that preferred the
//!   first slot (0.5 for an unbiased judge), with its counts; and, of the (task, pair) judged in
//!   both orders, the share where the two orders named different winners (a tie counts as its
//!   own answer). A judge that always answers `first` has a first-slot share of 1.0 and
//!   disagrees with itself on every pair; its judgments cancel out, so the strengths are equal.

use serde::{Deserialize, Serialize};

use crate::verdict::{CONFIDENCE, Interval, Stream, quantile_sorted};

/// The bootstrap resamples of a tournament that names none.
pub const DEFAULT_BOOTSTRAP: u32 = 1000;
/// The most bootstrap resamples a tournament may ask for (each refits every strength).
pub const MAX_BOOTSTRAP: u32 = 10_000;
/// The virtual ties added between every two variants (half a win each way per tie).
pub const PRIOR_TIES: f64 = 1.0;
/// The fit stops when no log-strength moves by more than this.
pub const TOLERANCE: f64 = 1e-9;
/// The most MM iterations of one fit.
pub const MAX_ITERATIONS: usize = 5000;

/// A judge's answer: which slot's output it prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prefer {
    /// The output in the first slot.
    First,
    /// The output in the second slot.
    Second,
    /// Neither.
    Tie,
}

/// One judge call's answer: on `task`, variant `first` in the first slot and `second` in the
/// second (indices into the tournament's variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgment {
    /// The task (a scenario's step), from 1.
    pub task: u32,
    /// The variant in the first slot.
    pub first: usize,
    /// The variant in the second slot.
    pub second: usize,
    /// The answer.
    pub prefer: Prefer,
}

impl Judgment {
    /// The variant preferred, `None` for a tie.
    pub fn winner(&self) -> Option<usize> {
        match self.prefer {
            Prefer::First => Some(self.first),
            Prefer::Second => Some(self.second),
            Prefer::Tie => None,
        }
    }
}

/// How much the judge favours a slot.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PositionBias {
    /// Of the judgments that were not a tie, the share that preferred the first slot; `None`
    /// when every judgment was a tie (or there was none).
    pub first_share: Option<f64>,
    /// Judgments that preferred the first slot.
    pub first_preferred: u64,
    /// Judgments that were not a tie.
    pub decisive: u64,
    /// Of the (task, pair) judged in both orders, the share where the two orders named
    /// different winners; `None` when none was judged in both orders.
    pub order_disagreement: Option<f64>,
    /// (task, pair) judged in both orders.
    pub pairs_both_orders: u64,
    /// Of those, the ones whose two orders disagreed.
    pub pairs_disagreeing: u64,
}

/// One variant's place in the ranking.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// The variant (its index in the tournament).
    pub index: usize,
    /// Its Bradley-Terry strength (the strengths' geometric mean is 1).
    pub strength: f64,
    /// The bootstrap's 95% percentile interval of its strength.
    pub interval: Interval,
    /// Its wins in the judgments (a tie is half), the prior left out.
    pub wins: f64,
    /// The judgments it took part in.
    pub judgments: u64,
}

/// The ranking of a tournament: strongest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// The variants, strongest first (equal strengths in index order).
    pub ranked: Vec<Ranked>,
    /// The judgments the ranking rests on.
    pub judgments: u64,
    /// The bootstrap's resamples.
    pub bootstrap: u32,
    /// The bootstrap's seed.
    pub seed: u64,
    /// The judge's position bias.
    pub position_bias: PositionBias,
}

/// The prior's win counts of `players` variants: `w[i][j]` is i's wins over j, half a win each
/// way per virtual tie.
fn prior(players: usize) -> Vec<Vec<f64>> {
    let mut w = vec![vec![0.0; players]; players];
    for (i, row) in w.iter_mut().enumerate() {
        for (j, x) in row.iter_mut().enumerate() {
            if i != j {
                *x = PRIOR_TIES / 2.0;
            }
        }
    }
    w
}

/// Adds one judgment to the win counts `w` (a tie half a win each); a judgment that names a
/// variant out of range, or the same one twice, is left out.
fn count(w: &mut [Vec<f64>], j: &Judgment) {
    let players = w.len();
    if j.first >= players || j.second >= players || j.first == j.second {
        return;
    }
    let mut add = |x: usize, y: usize, v: f64| {
        if let Some(c) = w.get_mut(x).and_then(|r| r.get_mut(y)) {
            *c += v;
        }
    };
    match j.prefer {
        Prefer::First => add(j.first, j.second, 1.0),
        Prefer::Second => add(j.second, j.first, 1.0),
        Prefer::Tie => {
            add(j.first, j.second, 0.5);
            add(j.second, j.first, 0.5);
        }
    }
}

/// The win counts of `players` variants from `judgments`, with the prior.
fn wins<'a>(players: usize, judgments: impl Iterator<Item = &'a Judgment>) -> Vec<Vec<f64>> {
    let mut w = prior(players);
    for j in judgments {
        count(&mut w, j);
    }
    w
}

/// The Bradley-Terry strengths of the win counts `w` by MM from equal strengths, geometric
/// mean 1.
fn fit(w: &[Vec<f64>]) -> Vec<f64> {
    fit_from(w, &vec![1.0; w.len()])
}

/// The same from `start` (the bootstrap starts each refit at the point estimate: the same
/// maximum, reached in fewer iterations).
fn fit_from(w: &[Vec<f64>], start: &[f64]) -> Vec<f64> {
    let n = w.len();
    let mut p = start.to_vec();
    if n < 2 || p.len() != n {
        return vec![1.0; n];
    }
    let total: Vec<f64> = w.iter().map(|row| row.iter().sum()).collect();
    let games: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| if i == j { 0.0 } else { w[i][j] + w[j][i] })
                .collect()
        })
        .collect();
    let mut next = vec![0.0; n];
    for _ in 0..MAX_ITERATIONS {
        for i in 0..n {
            let mut denom = 0.0;
            for j in 0..n {
                if i != j {
                    denom += games[i][j] / (p[i] + p[j]);
                }
            }
            next[i] = if denom > 0.0 { total[i] / denom } else { p[i] };
        }
        let mean_log = next.iter().map(|x| x.ln()).sum::<f64>() / n as f64;
        let scale = mean_log.exp();
        let mut moved: f64 = 0.0;
        for (x, old) in next.iter_mut().zip(p.iter_mut()) {
            *x /= scale;
            moved = moved.max((x.ln() - old.ln()).abs());
            *old = *x;
        }
        if moved <= TOLERANCE {
            break;
        }
    }
    p
}

/// The Bradley-Terry strengths of `players` variants from `judgments` (with the prior),
/// geometric mean 1.
pub fn strengths(players: usize, judgments: &[Judgment]) -> Vec<f64> {
    fit(&wins(players, judgments.iter()))
}

/// One order's answer on a (task, pair): not judged yet, or the winner (`None`: a tie).
type Answer = Option<Option<usize>>;

/// The judge's position bias over `judgments`.
pub fn position_bias(judgments: &[Judgment]) -> PositionBias {
    let decisive = judgments.iter().filter(|j| j.prefer != Prefer::Tie).count() as u64;
    let first_preferred = judgments
        .iter()
        .filter(|j| j.prefer == Prefer::First)
        .count() as u64;
    // Per (task, unordered pair): the first answer of each order.
    let mut orders: std::collections::BTreeMap<(u32, usize, usize), [Answer; 2]> =
        std::collections::BTreeMap::new();
    for j in judgments {
        let (lo, hi) = (j.first.min(j.second), j.first.max(j.second));
        let slot = usize::from(j.first != lo);
        let e = orders.entry((j.task, lo, hi)).or_default();
        if let Some(s) = e.get_mut(slot)
            && s.is_none()
        {
            *s = Some(j.winner());
        }
    }
    let both: Vec<(Option<usize>, Option<usize>)> = orders
        .values()
        .filter_map(|[a, b]| Some(((*a)?, (*b)?)))
        .collect();
    let disagreeing = both.iter().filter(|(a, b)| a != b).count() as u64;
    let share = |k: u64, n: u64| (n > 0).then(|| k as f64 / n as f64);
    PositionBias {
        first_share: share(first_preferred, decisive),
        first_preferred,
        decisive,
        order_disagreement: share(disagreeing, both.len() as u64),
        pairs_both_orders: both.len() as u64,
        pairs_disagreeing: disagreeing,
    }
}

/// Ranks `players` variants from `judgments`: strengths, `bootstrap` resamples' 95% intervals
/// drawn from `seed`'s stream, and the position bias.
pub fn rank(players: usize, judgments: &[Judgment], bootstrap: u32, seed: u64) -> Ranking {
    let point = strengths(players, judgments);
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(bootstrap as usize); players];
    let m = judgments.len();
    let mut stream = Stream::new(seed);
    for _ in 0..bootstrap {
        let mut w = prior(players);
        for _ in 0..m {
            if let Some(j) = judgments.get(stream.below(m as u64) as usize) {
                count(&mut w, j);
            }
        }
        let s = fit_from(&w, &point);
        for (col, x) in samples.iter_mut().zip(s) {
            col.push(x);
        }
    }
    let alpha = (1.0 - CONFIDENCE) / 2.0;
    let mut ranked: Vec<Ranked> = point
        .iter()
        .enumerate()
        .map(|(i, &strength)| {
            let mut col = samples.get(i).cloned().unwrap_or_default();
            col.sort_by(f64::total_cmp);
            let interval = if col.is_empty() {
                Interval {
                    lower: strength,
                    upper: strength,
                }
            } else {
                Interval {
                    lower: quantile_sorted(&col, alpha),
                    upper: quantile_sorted(&col, 1.0 - alpha),
                }
            };
            let mine = judgments.iter().filter(|j| j.first == i || j.second == i);
            let (mut won, mut took) = (0.0, 0);
            for j in mine {
                took += 1;
                won += match j.winner() {
                    Some(w) if w == i => 1.0,
                    Some(_) => 0.0,
                    None => 0.5,
                };
            }
            Ranked {
                index: i,
                strength,
                interval,
                wins: won,
                judgments: took,
            }
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.strength
            .total_cmp(&a.strength)
            .then(a.index.cmp(&b.index))
    });
    Ranking {
        ranked,
        judgments: m as u64,
        bootstrap,
        seed,
        position_bias: position_bias(judgments),
    }
}
