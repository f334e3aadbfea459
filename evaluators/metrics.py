"""Sample-based metrics shared by every benchmark: pass@k, avg@n and bootstrap confidence intervals.

Per problem, with `n` samples of which `c` are correct:

- avg@n = c / n, the mean score of the samples (= pass@1 under the unbiased estimator);
- maj@k (k = n), for benchmarks whose scoring extracts an answer: 1 when the answer most of the
  n samples give (compared as text; ties go to the one drawn first; a sample without an answer
  votes for nothing) is a correct one (`majority_correct`);
- pass@k = 1 - C(n-c, k) / C(n, k), the unbiased estimator of Chen et al. (2021) for the chance
  that at least one of k samples drawn without replacement from the n is correct. It is computed
  in the numerically stable product form 1 - prod_{i=n-c+1..n} (1 - k/i), and is 1 exactly when
  n - c < k (every k-subset then holds a correct sample).

Over a benchmark, both are averaged over problems (each problem weighs the same whatever its n),
and a percentile bootstrap over problems (resampling problems with replacement, seeded, so the same
inputs always give the same interval) gives the confidence interval.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

import numpy as np

DEFAULT_BOOTSTRAP_ITERS = 1000
DEFAULT_CONFIDENCE = 0.95


def _check_counts(n: int, c: int) -> None:
    if isinstance(n, bool) or isinstance(c, bool) or int(n) != n or int(c) != c:
        raise ValueError(f"n and c must be integers, got n={n!r}, c={c!r}")
    if n < 1:
        raise ValueError(f"n (samples) must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c (correct samples) must be in 0..n={n}, got {c}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem from `n` samples with `c` correct (requires 1 <= k <= n)."""
    _check_counts(n, c)
    if int(k) != k or not 1 <= k <= n:
        raise ValueError(f"k must be in 1..n={n}, got {k}")
    n, c, k = int(n), int(c), int(k)
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i); no huge binomials, no cancellation.
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def avg_at_n(n: int, c: int) -> float:
    """Mean sample score, c / n (the same as pass@1)."""
    _check_counts(n, c)
    return c / n


def majority_correct(answers: Sequence[str | None], scores: Sequence[float]) -> float:
    """maj@k of one problem: 1.0 when the most common extracted answer among its samples (ties:
    the one drawn first; None, no answer, votes for nothing) is that of a correct sample (score
    >= 0.5), else 0.0. answers and scores: one per sample, in sample order."""
    if len(answers) != len(scores):
        raise ValueError(f"{len(answers)} answers but {len(scores)} scores")
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winner = next(i for i, a in enumerate(answers) if a is not None and votes[a] == top)
    return float(scores[winner] >= 0.5)


def default_ks(n: int) -> list[int]:
    """The k reported for `n` samples: 1, the powers of two below n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    ks.append(n)
    return ks


def bootstrap_ci(
    values: Sequence[float],
    *,
    iters: int = DEFAULT_BOOTSTRAP_ITERS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (one value per problem).

    Deterministic: the resampling draws come from numpy's PCG64 seeded with `seed`. With a
    single value, or `iters` == 0, the interval collapses to the mean itself.
    """
    vals = np.asarray(list(values), dtype=float)
    if vals.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if iters < 0:
        raise ValueError(f"iters must be >= 0, got {iters}")
    mean = float(vals.mean())
    if vals.size == 1 or iters == 0:
        return mean, mean
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, vals.size, size=(iters, vals.size))
    means = vals[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    # Clamp into [min, max] of the data: float noise must not push the interval past it.
    return float(max(lo, vals.min())), float(min(hi, vals.max()))


def problem_metrics(scores: Iterable[float], ks: Sequence[int] | None = None) -> dict:
    """Per-problem metrics from its samples' 0/1 scores: n, c, avg@n and pass@k for each k.

    A sample counts as correct when its score is >= 0.5 (scores are 0/1 rewards).
    """
    scores = [float(s) for s in scores]
    n = len(scores)
    if n == 0:
        raise ValueError("a problem needs at least one sample")
    c = sum(1 for s in scores if s >= 0.5)
    ks = default_ks(n) if ks is None else [k for k in ks if k <= n]
    out = {"n": n, "c": c, "avg@n": avg_at_n(n, c)}
    for k in ks:
        out[f"pass@{k}"] = pass_at_k(n, c, k)
    out["pass@k"] = pass_at_k(n, c, n)  # k = n, the most this problem's samples can tell
    out["k"] = n
    return out


def aggregate(
    counts: Sequence[tuple[int, int]],
    *,
    ks: Sequence[int] | None = None,
    iters: int = DEFAULT_BOOTSTRAP_ITERS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict:
    """Benchmark-level metrics from per-problem (n, c) pairs.

    Returns n_problems, n_samples (total), samples_per_problem (the smallest n), k (the largest k
    every problem supports, i.e. that smallest n), avg@n and pass@k each with a bootstrap CI
    (`<metric>_ci` = [low, high]), pass@j for each j in `ks` (default: 1, 2, 4, ..., k), and the
    bootstrap settings.
    """
    counts = [(int(n), int(c)) for n, c in counts]
    if not counts:
        raise ValueError("aggregate needs at least one problem")
    for n, c in counts:
        _check_counts(n, c)
    n_min = min(n for n, _ in counts)
    ks = default_ks(n_min) if ks is None else sorted({int(k) for k in ks})
    if any(not 1 <= k <= n_min for k in ks):
        raise ValueError(
            f"every k must be in 1..{n_min} (the fewest samples of any problem), got {ks}"
        )
    boot = dict(iters=iters, confidence=confidence, seed=seed)
    avg = [avg_at_n(n, c) for n, c in counts]
    out = {
        "n_problems": len(counts),
        "n_samples": sum(n for n, _ in counts),
        "samples_per_problem": n_min,
        "k": n_min,
        "avg@n": float(np.mean(avg)),
        "avg@n_ci": list(bootstrap_ci(avg, **boot)),
    }
    for k in ks:
        vals = [pass_at_k(n, c, k) for n, c in counts]
        out[f"pass@{k}"] = float(np.mean(vals))
        out[f"pass@{k}_ci"] = list(bootstrap_ci(vals, **boot))
    vals = [pass_at_k(n, c, n_min) for n, c in counts]
    out["pass@k"] = float(np.mean(vals))
    out["pass@k_ci"] = list(bootstrap_ci(vals, **boot))
    out["bootstrap"] = {"iters": iters, "confidence": confidence, "seed": seed}
    return out
