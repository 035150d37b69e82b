//! Call metrics in Prometheus text format: calls by op and outcome, and a latency histogram.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default)]
struct Inner {
    /// op -> outcome -> count.
    calls: BTreeMap<String, BTreeMap<&'static str, u64>>,
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Counters and a histogram, rendered on `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// Records one call. `op` must be a known op id (callers pass `unknown` otherwise, so a
    /// caller cannot grow the label set).
    pub fn record(&self, op: &str, outcome: &'static str, took: Duration) {
        let Ok(mut m) = self.inner.lock() else { return };
        // No allocation once an op has been seen (the hot path).
        match m.calls.get_mut(op) {
            Some(by_outcome) => *by_outcome.entry(outcome).or_insert(0) += 1,
            None => {
                m.calls
                    .insert(op.to_owned(), BTreeMap::from([(outcome, 1)]));
            }
        }
        if m.buckets.is_empty() {
            m.buckets = vec![0; BUCKETS.len()];
        }
        let secs = took.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                m.buckets[i] += 1;
            }
        }
        m.sum += secs;
        m.count += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let Ok(m) = self.inner.lock() else { return out };
        let _ = writeln!(
            out,
            "# HELP corral_calls_total Calls decided, by op and outcome."
        );
        let _ = writeln!(out, "# TYPE corral_calls_total counter");
        for (op, by_outcome) in &m.calls {
            for (outcome, n) in by_outcome {
                let _ = writeln!(
                    out,
                    "corral_calls_total{{op=\"{op}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP corral_call_duration_seconds Time from receipt to response."
        );
        let _ = writeln!(out, "# TYPE corral_call_duration_seconds histogram");
        for (i, le) in BUCKETS.iter().enumerate() {
            let n = m.buckets.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "corral_call_duration_seconds_bucket{{le=\"{le}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "corral_call_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            m.count
        );
        let _ = writeln!(out, "corral_call_duration_seconds_sum {}", m.sum);
        let _ = writeln!(out, "corral_call_duration_seconds_count {}", m.count);
        out
    }
}
