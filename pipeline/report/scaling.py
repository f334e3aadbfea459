"""The scaling-curve fit ScaleRL (Khatri et al. 2025, arXiv 2510.13786) compares RL recipes by:
score against training compute, R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), where R0 is the
starting model's score, A the asymptote, B the efficiency exponent and C_mid the compute at half
the gain. Fitted per variant and benchmark on the evaluation points (mean over seeds of the
problems' scores at each budget; R0 = the SFT model's score), with bootstrap intervals that
resample problems and seeds together.

The fit is least squares over a grid of (B, C_mid), with A in closed form at each grid point
(the model is linear in A - R0 given B and C_mid): deterministic, no optimiser to stall, and the
grid spans C_mid from a tenth of the smallest to ten times the largest compute; A is kept in the
score range [0, 1]. With fewer than MIN_POINTS budgets above 0 it does not fit (three free
parameters would fit noise) and says so; when the bootstrap interval of the asymptote or of the
efficiency reaches a bound of its range ([0, 1]; the B grid), the status says that parameter is
not identified at this sample size.
"""

from __future__ import annotations

import random
import statistics

import numpy as np

MIN_POINTS = 4                    # budgets with compute > 0: three parameters and one to spare
SCORE_RANGE = (0.0, 1.0)          # pass@1: the asymptote is fitted inside it
B_GRID = np.geomspace(0.25, 8.0, 48)
C_STEPS = 96


def curve_values(c, r0: float, a: float, b: float, c_mid: float):
    """R(C) of the fitted curve at compute `c` (array-like, > 0)."""
    c = np.asarray(c, dtype=float)
    return r0 + (a - r0) / (1.0 + (c_mid / c) ** b)


def fit(compute, scores, r0: float) -> dict:
    """Least-squares (A, B, C_mid) of R(C) through the points (compute > 0, scores), R0 fixed:
    {asymptote, efficiency, c_mid, sse}."""
    c = np.asarray(compute, dtype=float)                                    # (P,)
    y = np.asarray(scores, dtype=float) - r0                                # (P,)
    c_mids = np.geomspace(c.min() / 10, c.max() * 10, C_STEPS)              # (M,)
    g = 1.0 / (1.0 + (c_mids[None, :, None] / c[None, None, :]) ** B_GRID[:, None, None])
    # A - R0 = <g, y> / <g, g> for each (B, C_mid): g is (Bn, M, P)
    gain = (g * y).sum(-1) / np.maximum((g * g).sum(-1), 1e-300)           # (Bn, M)
    # pass@1 lies in [0, 1], so A does too; the loss is quadratic in A, so clipping the free
    # optimum gives the constrained one at each grid point.
    gain = np.clip(gain, SCORE_RANGE[0] - r0, SCORE_RANGE[1] - r0)
    sse = ((gain[..., None] * g - y) ** 2).sum(-1)                          # (Bn, M)
    i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return {"asymptote": float(r0 + gain[i, j]), "efficiency": float(B_GRID[i]),
            "c_mid": float(c_mids[j]), "sse": float(sse[i, j])}


def _points(evals: list[dict], ids: list[str], seeds: list[int]) -> tuple[list, list]:
    """(compute, score) per budget > 0: the mean over `seeds` (with repeats) of the mean over
    `ids` (with repeats) of each problem's score, and the seeds' mean compute."""
    by = {(e["seed"], e["budget"]): e for e in evals}
    out_c, out_y = [], []
    for budget in sorted({e["budget"] for e in evals if e["budget"] > 0}):
        es = [by[s, budget] for s in seeds if (s, budget) in by]
        if len(es) != len(seeds):
            continue
        out_c.append(statistics.mean(e["compute_flops"] for e in es))
        out_y.append(statistics.mean(statistics.mean(e["problems"][i] for i in ids) for e in es))
    return out_c, out_y


def _common_ids(evals: list[dict]) -> list[str]:
    sets = [set(e.get("problems") or {}) for e in evals]
    return sorted(set.intersection(*sets)) if sets and all(sets) else []


def fit_variant(evals: list[dict], base: list[dict], *, iters: int, confidence: float) -> dict:
    """The fit of one variant on one benchmark: its eval records (budgets > 0, with compute and
    per-problem scores) and the SFT model's (`base`, budget 0): {status, n_points, asymptote,
    efficiency, c_mid, *_ci_low/high, fitted: [(compute, score) of the curve]}."""
    evals = [e for e in evals if e["budget"] > 0 and e.get("compute_flops")]
    ids = _common_ids(evals + base)
    seeds = sorted({e["seed"] for e in evals})
    c, y = _points(evals, ids, seeds) if ids else ([], [])
    out = {"n_points": len(c), "seeds": len(seeds), "n_problems": len(ids)}
    if len(c) < MIN_POINTS or not base:
        return {**out, "status": f"too few points to fit ({len(c)} budgets above 0 with "
                                 f"per-problem scores; the fit needs {MIN_POINTS})"}
    r0 = statistics.mean(statistics.mean(e["problems"][i] for i in ids) for e in base)
    best = fit(c, y, r0)
    rng = random.Random(0)
    draws = {"asymptote": [], "efficiency": [], "c_mid": []}
    for _ in range(iters):
        rid = [rng.choice(ids) for _ in ids]
        rseeds = [rng.choice(seeds) for _ in seeds]
        bc, by = _points(evals, rid, rseeds)
        br0 = statistics.mean(statistics.mean(e["problems"][i] for i in rid) for e in base)
        f = fit(bc, by, br0)
        for k in draws:
            draws[k].append(f[k])
    alpha = (1 - confidence) / 2
    for k, v in draws.items():
        lo, hi = np.quantile(v, [alpha, 1 - alpha])
        out[f"{k}_ci_low"], out[f"{k}_ci_high"] = float(lo), float(hi)
    grid = np.geomspace(min(c), max(c), 50)
    edge = 1e-6
    loose = [name for name, lo, hi, (a, b) in (
        ("asymptote", out["asymptote_ci_low"], out["asymptote_ci_high"], SCORE_RANGE),
        ("efficiency", out["efficiency_ci_low"], out["efficiency_ci_high"],
         (B_GRID[0], B_GRID[-1]))) if lo <= a + edge or hi >= b - edge]
    status = f"fitted; {' and '.join(loose)} not identified" if loose else "fitted"
    return {**out, **best, "r0": r0, "status": status,
            "fitted": list(zip(grid.tolist(),
                               curve_values(grid, r0, best["asymptote"], best["efficiency"],
                                            best["c_mid"]).tolist()))}


def scaling_fits(data: dict, *, iters: int, confidence: float) -> list[dict]:
    """One fit (fit_variant) per variant and benchmark of collected `data`."""
    evals = data["evals"]
    rows = []
    for var in sorted({e["variant"] for e in evals if e["variant"] != "sft"}):
        for bench in sorted({e["benchmark"] for e in evals if e["variant"] == var}):
            mine = [e for e in evals if e["variant"] == var and e["benchmark"] == bench]
            base = [e for e in evals if e["variant"] == "sft" and e["benchmark"] == bench]
            row = fit_variant(mine, base, iters=iters, confidence=confidence)
            rows.append({"variant": var, "algorithm": mine[0]["algorithm"], "benchmark": bench,
                         **row})
    return rows
