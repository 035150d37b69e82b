"""The reference for corral-lab's comparison statistics (crates/corral-lab/src/verdict.rs).

Reads a JSON file of cases (argv[1]) that the Rust test `reference::...` wrote, computes each
with scipy and statsmodels, and prints the answers as JSON on stdout; the Rust test compares.

- bootstrap: scipy.stats.bootstrap((baseline, candidate), mean difference, paired=True,
  method='percentile', confidence_level=0.95, n_resamples=N), numpy's generator seeded by the
  case's seed (a different stream from corral's ChaCha20, so the bounds agree only within the
  Monte Carlo error the Rust test allows for).
- mcnemar: statsmodels.stats.contingency_tables.mcnemar([[0, b], [c, 0]], exact=True).
- wilson: statsmodels.stats.proportion.proportion_confint(k, n, alpha=0.05, method='wilson').

Exit 3 (with the reason on stderr) when scipy or statsmodels is missing: a missing prerequisite,
which the Rust test fails on under CI=true and skips otherwise.
"""

import json
import sys

try:
    import numpy as np
    from scipy import stats
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.proportion import proportion_confint
except ImportError as e:  # pragma: no cover - the prerequisite check
    print(f"missing python module: {e}", file=sys.stderr)
    sys.exit(3)


def mean_difference(baseline, candidate, axis=-1):
    return np.mean(candidate - baseline, axis=axis)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = {"bootstrap": [], "mcnemar": [], "wilson": []}
    for case in cases["bootstrap"]:
        base = np.asarray(case["baseline"], dtype=float)
        cand = np.asarray(case["candidate"], dtype=float)
        res = stats.bootstrap(
            (base, cand),
            mean_difference,
            paired=True,
            vectorized=True,
            method="percentile",
            confidence_level=0.95,
            n_resamples=case["resamples"],
            rng=np.random.default_rng(case["seed"]),
        )
        out["bootstrap"].append(
            {
                "name": case["name"],
                "delta": float(mean_difference(base, cand)),
                "lower": float(res.confidence_interval.low),
                "upper": float(res.confidence_interval.high),
                "standard_error": float(res.standard_error),
            }
        )
    for b, c in cases["mcnemar"]:
        r = mcnemar([[0, b], [c, 0]], exact=True)
        out["mcnemar"].append({"b": b, "c": c, "p_value": float(r.pvalue)})
    for k, n in cases["wilson"]:
        lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
        out["wilson"].append({"k": k, "n": n, "lower": float(lo), "upper": float(hi)})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
