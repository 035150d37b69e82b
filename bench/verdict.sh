#!/usr/bin/env bash
# The cost of one comparison verdict: corral's `verdict::compare` (paired percentile bootstrap,
# 10,000 resamples, exact McNemar, Wilson) beside scipy's `stats.bootstrap` (paired,
# percentile, 10,000 resamples, vectorized) on N scenarios, medians of RUNS runs each.
# Usage: bench/verdict.sh [N] [RUNS]   (needs the venv of .ci/run: target/ci-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100}"; runs="${2:-21}"
cargo run --quiet --release -p corral-lab --example verdict_cost -- "$n" "$runs"
target/ci-venv/bin/python - "$n" "$runs" <<'PY'
import sys, time
import numpy as np
from scipy import stats
n, runs = int(sys.argv[1]), int(sys.argv[2])
i = np.arange(n)
base = np.clip((i * 37 % 101) / 100 * 0.8, 0, 1)
cand = np.clip(base + 0.05, 0, 1)
diff = lambda b, c, axis=-1: np.mean(c - b, axis=axis)
times = []
for _ in range(runs):
    t = time.perf_counter()
    stats.bootstrap((base, cand), diff, paired=True, vectorized=True, method="percentile",
                    n_resamples=10_000, rng=np.random.default_rng(42))
    times.append(time.perf_counter() - t)
times.sort()
print(f"scipy stats.bootstrap: {n} scenarios, 10000 resamples, median of {runs}: {times[len(times)//2]*1e3:.2f} ms")
PY
