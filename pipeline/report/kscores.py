"""pass@k and maj@k beside pass@1 in the final scores (k: the samples per problem): each the
mean over a variant's runs and problems with its interval over training runs and problems
(pipeline.report.resample, as pass@1's), from the eval runs' per-problem values; maj@k only where
the benchmark's scoring extracts answers (evaluators.metrics.majority_correct)."""

from __future__ import annotations

import statistics

from pipeline.report import resample

# an eval record's per-problem values -> the final-scores column
COLUMNS = {"pass_k": "pass_at_k", "maj": "maj_at_k"}


def k_columns(es: list[dict], *, iters: int, confidence: float, fixed: bool = False) -> dict:
    """k, pass_at_k and maj_at_k with their intervals (<col>_ci_low / _ci_high) of one variant on
    one benchmark over its seeds' eval runs `es` ({} for a column its runs lack); `fixed` for
    the SFT model (one run by design: its evaluations averaged)."""
    out: dict = {}
    ks = [e["k"] for e in es if e.get("k")]
    if ks:
        out["k"] = min(ks)
    for key, col in COLUMNS.items():
        per = [e.get(key) or {} for e in es]
        common = sorted(set.intersection(*[set(p) for p in per])) if all(per) else []
        if not common:
            continue
        runs = (
            [("sft", {i: statistics.mean(p[i] for p in per) for i in common})]
            if fixed
            else [(e["seed"], p) for e, p in zip(es, per)]
        )
        ci = resample.interval(
            [resample.Arm(1.0, resample.run_matrix(runs, common), fixed)],
            iters=iters,
            confidence=confidence,
            bounds=(0.0, 1.0),
        )
        out.update(
            {col: ci["estimate"], f"{col}_ci_low": ci["ci_low"], f"{col}_ci_high": ci["ci_high"]}
        )
    return out
