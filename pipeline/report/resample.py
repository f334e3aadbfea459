"""Intervals over training runs and problems: the resampling behind every interval the report
gives about an algorithm (final scores, differences against the SFT model and between variants,
the claims, the MoE pairs, the ScaleRL fit).

Why the training run is the unit. An evaluation scores S training runs (seeds) of a variant on
the same P problems: a (S, P) matrix of per-problem scores x[s, i]. Its mean varies from one
repetition of the experiment to the next for two reasons: other runs (another seed, or another
CPU's rounding, which is in effect another seed) and other problems. A bootstrap over problems
alone, each problem averaged over the seeds, sees only the second; with run-to-run variance it
is too narrow (tests/test_stats_runs.py measures how much) and a verdict can flip from one
machine to another.

The two-level bootstrap. Each draw takes S seeds with replacement (the top level: this is what
carries the between-run variance, Davison & Hinkley 1997, Bootstrap Methods and their
Application, section 3.8, for data sampled in stages) and P problems with replacement. Problems
are crossed with seeds, not nested in them (every run is scored on the same problems), so one
problem draw serves every seed, and every arm of a difference: drawing problems afresh per seed
would shrink the problem variance S-fold (Owen 2007, "The pigeonhole bootstrap", Ann. Appl.
Stat. 1(2), resamples rows and columns of a crossed table the same way). Differences:

- between two variants with the same seeds (they share the SFT checkpoint, so GSPO seed s and
  GRPO seed s start alike): paired by seed, the per-seed differences are resampled as one arm;
- between variants with different seed sets: each arm draws its own seeds, the problems shared;
- against the SFT model: the SFT model is one fixed run (no seed variance; several evaluations
  of it are averaged), so only the problem draw, shared with the other arm, moves it.

Two corrections make the interval honest with few runs. (1) Resampling S values with
replacement has variance (S-1)/S of the unbiased one (a fifth too small with 5 runs, a third
with 3), so each run's deviation from the mean over runs is scaled by sqrt(S/(S-1)) before
resampling. (2) With S runs the run-to-run variance is itself known only with S-1 degrees of
freedom, so a normal-theory width undercovers (the percentile bootstrap's "narrowness bias",
Hesterberg 2015, Am. Stat. 69(4)); the percentile interval is widened about the estimate by
t_nu / z, nu the Welch-Satterthwaite degrees of freedom of the two variance components below (nu
is about S-1 when runs dominate, and large, i.e. no widening, when problems do). Both are checked
by simulation in tests/test_stats_runs.py (coverage at the nominal rate). The bootstrap stays
mildly conservative: the seed-by-problem interaction, which includes the sampling noise of each
problem's score, is counted at both levels (Davison & Hinkley's known conservativeness of
resampling at every stage, and Owen's for the crossed table); with few runs and little
run-to-run variance the interval is a little wider than it needs to be.

The variance split. For a statistic sum_k sign_k * mean(x_k) over arms x_k (S_k, P):
var_runs = sum over arms of the unbiased variance of its per-seed means / S_k (S_k - 1 degrees of
freedom each; the SFT model contributes none), var_problems = the unbiased variance over problems
of sum_k sign_k * (problem i's mean over seeds) / P (P - 1 degrees of freedom). These are the
bootstrap's variance with problems fixed and with seeds fixed; var_share_runs = var_runs /
(var_runs + var_problems) says how much of an interval is run-to-run. A variant with one run has
var_runs None: its run-to-run variance cannot be measured, not zero.

MIN_RUNS = 3 training runs per arm before any verdict about an algorithm: with 2 runs the seed
draw has only 3 distinct outcomes ({a, a}, {a, b}, {b, b}), the run-to-run variance has 1 degree of
freedom (t_1 = 12.7 at 95%), and the interval says next to nothing; 3 runs give 10 distinct seed
draws and 2 degrees of freedom, the least where the interval starts to mean something. Below it
a verdict reads "too few training runs" (pipeline.report.claims, pipeline.report.verdicts).

Everything is deterministic: the draws come from numpy's PCG64 seeded with `seed` (0).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

MIN_RUNS = 3
TOO_FEW_RUNS = "too few training runs"


class Arm(NamedTuple):
    """One side of a statistic: `sign` (+1, or -1 for what is subtracted) times the mean of
    `scores`, a (seeds, problems) matrix; `fixed` for a model that is one run by design (the SFT
    model), whose seeds are not resampled and which has no run-to-run variance."""

    sign: float
    scores: np.ndarray
    fixed: bool = False


def run_matrix(runs: list[tuple], ids: list[str]) -> np.ndarray:
    """The (seeds, problems) matrix of `runs` [(seed, {problem id: score})] on `ids`."""
    return np.array([[p[i] for i in ids] for _, p in runs], dtype=float).reshape(
        len(runs), len(ids)
    )


def counts(rng, n: int, iters: int) -> np.ndarray:
    """(iters, n) weights of a draw of n items with replacement: each item's count / n."""
    draw = rng.integers(0, n, size=(iters, n))
    flat = (draw + n * np.arange(iters)[:, None]).ravel()
    return np.bincount(flat, minlength=iters * n).reshape(iters, n) / n


def inflate(x: np.ndarray) -> np.ndarray:
    """`x` with each run's deviation from the mean over runs (per problem) scaled by
    sqrt(S/(S-1)), so that resampling its S runs has the unbiased between-run variance."""
    s = x.shape[0]
    if s < 2:
        return x
    mean = x.mean(axis=0, keepdims=True)
    return mean + math.sqrt(s / (s - 1)) * (x - mean)


def draws(arms: list[Arm], *, iters: int, seed: int = 0) -> np.ndarray:
    """`iters` two-level bootstrap replicates of sum_k sign_k * mean(arm_k): each draws its arm's
    seeds with replacement (not a fixed arm's), and one problem draw serves every arm."""
    rng = np.random.default_rng(seed)
    p = arms[0].scores.shape[1]
    v = counts(rng, p, iters)  # (iters, P)
    total = np.zeros((iters, p))
    for arm in arms:
        x = arm.scores
        if arm.fixed or x.shape[0] < 2:
            total += arm.sign * x.mean(axis=0)[None, :]
        else:
            total += arm.sign * (counts(rng, x.shape[0], iters) @ inflate(x))
    return (total * v).sum(axis=1)


def variance_split(arms: list[Arm]) -> dict:
    """var_runs, var_problems, var_share_runs and the Welch-Satterthwaite degrees of freedom
    `dof` of the statistic sum_k sign_k * mean(arm_k) (see the module doc). var_runs (and the
    share) is None when an arm that is not fixed has a single run."""
    comps, unknown = [], False  # (variance, degrees of freedom)
    for arm in arms:
        s = arm.scores.shape[0]
        if arm.fixed:
            continue
        if s < 2:
            unknown = True
            continue
        comps.append((float(np.var(arm.scores.mean(axis=1), ddof=1)) / s, s - 1))
    p = arms[0].scores.shape[1]
    per_problem = sum(a.sign * a.scores.mean(axis=0) for a in arms)
    v_prob = float(np.var(per_problem, ddof=1)) / p if p > 1 else 0.0
    v_runs = sum(v for v, _ in comps)
    dof = satterthwaite(comps + [(v_prob, p - 1)])
    total = v_runs + v_prob
    return {
        "var_runs": None if unknown else v_runs,
        "var_problems": v_prob,
        "var_share_runs": None if unknown or total <= 0 else v_runs / total,
        "dof": dof,
    }


def interval(
    arms: list[Arm],
    *,
    iters: int,
    confidence: float,
    seed: int = 0,
    bounds: tuple[float, float] | None = None,
) -> dict:
    """The estimate sum_k sign_k * mean(arm_k) with its two-level bootstrap interval, widened by
    t_dof / z for the few runs (module doc), clipped to `bounds`: {estimate, ci_low, ci_high,
    var_runs, var_problems, var_share_runs, dof}."""
    est = float(sum(a.sign * a.scores.mean() for a in arms))
    split = variance_split(arms)
    if iters <= 0:
        return {"estimate": est, "ci_low": est, "ci_high": est, **split}
    alpha = (1 - confidence) / 2
    q_lo, q_hi = np.quantile(draws(arms, iters=iters, seed=seed), [alpha, 1 - alpha])
    lo, hi = widen(
        est, float(q_lo), float(q_hi), split["dof"], confidence, bounds or (-math.inf, math.inf)
    )
    return {"estimate": est, "ci_low": lo, "ci_high": hi, **split}


def satterthwaite(parts: list[tuple[float, float]]) -> float:
    """The Welch-Satterthwaite degrees of freedom of a sum of variance components [(variance,
    its degrees of freedom)]; infinite when none varies."""
    denom = sum(v * v / d for v, d in parts if v > 0 and d > 0)
    return sum(v for v, _ in parts) ** 2 / denom if denom > 0 else math.inf


def widen(
    est: float, q_lo: float, q_hi: float, dof: float, confidence: float, bounds: tuple[float, float]
) -> tuple[float, float]:
    """The percentile interval [q_lo, q_hi] widened about `est` by t_dof / z (module doc),
    holding `est` (where nothing varies, the draws' float rounding must not push a side past
    it), within `bounds`."""
    k = widening(dof, confidence)
    lo, hi = min(est - k * (est - q_lo), est), max(est + k * (q_hi - est), est)
    return max(lo, bounds[0]), min(hi, bounds[1])


def widening(dof: float, confidence: float) -> float:
    """t_dof / z at `confidence` (two-sided): how much wider a Student interval with `dof`
    degrees of freedom is than the normal one; 1 for infinite dof."""
    if math.isinf(dof):
        return 1.0
    p = 1 - (1 - confidence) / 2
    return t_quantile(p, dof) / NormalDist().inv_cdf(p)


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile (0.5 <= p < 1) of Student's t with `dof` > 0 degrees of freedom (real:
    Satterthwaite's are not integers), by bisection on its CDF."""
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, dof) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, dof) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


def _t_cdf(t: float, dof: float) -> float:
    """Student's t CDF at t >= 0: 1 - I_x(dof/2, 1/2) / 2 with x = dof / (dof + t^2)."""
    return 1 - 0.5 * _betainc(dof / 2, 0.5, dof / (dof + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction, Lentz's method,
    as in Numerical Recipes' betai/betacf)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only below this point
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h / a
