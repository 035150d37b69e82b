//! The cost of one comparison verdict (`bench/verdict.sh` runs it beside scipy's bootstrap on
//! the same data): `cargo run --release -p corral-lab --example verdict_cost -- N RUNS` prints
//! the median wall time of `verdict::compare` over N paired scenarios with 10,000 resamples.

use std::time::Instant;

use corral_lab::verdict::{self, Input, Observed, ScoredTrials};

fn side(n: usize, shift: f64) -> Vec<Observed> {
    (0..n)
        .map(|i| Observed {
            scenario: format!("s{i:05}"),
            trials: 2,
            infra_errors: 0,
            scored: Some(ScoredTrials {
                score: ((i * 37 % 101) as f64 / 100.0 * 0.8 + shift).clamp(0.0, 1.0),
                passes: 0,
            }),
        })
        .collect()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(100);
    let runs = args.get(1).copied().unwrap_or(21);
    let input = Input::new("b", side(n, 0.0), "c", side(n, 0.05), 42);
    let mut times = Vec::with_capacity(runs);
    let mut verdict = String::new();
    for _ in 0..runs {
        let t = Instant::now();
        let c = verdict::compare(&input);
        times.push(t.elapsed().as_secs_f64());
        verdict = match c {
            Ok(c) => c.verdict.as_str().to_owned(),
            Err(e) => e.to_string(),
        };
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "corral verdict::compare: {n} scenarios, {} resamples, median of {runs}: {:.2} ms ({verdict})",
        verdict::DEFAULT_RESAMPLES,
        median * 1e3
    );
}
