"""The scaling-curve fit ScaleRL (Khatri et al. 2025, arXiv 2510.13786) compares RL recipes by:
score against training compute, R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), where R0 is the
starting model's score, A the asymptote, B the efficiency exponent and C_mid the compute at half
the gain. Fitted per variant and benchmark on the evaluation points (mean over seeds of the
problems' scores at each budget; R0 = the SFT model's score), with intervals over training runs
and problems: pipeline.report.resample's two-level bootstrap (each draw takes the seeds with
replacement, then the problems, one problem draw for every budget and for R0; the budgets' compute
stays at its mean over the seeds) and its few-run widening. Each parameter's variance is split
into run-to-run (the draws' variance with problems fixed) and problem sampling (with seeds fixed);
`<parameter>_var_share_runs` is the run-to-run share (c_mid on the log scale).

The fit is least squares over a grid of (B, C_mid), with A in closed form at each grid point
(the model is linear in A - R0 given B and C_mid): deterministic, no optimiser to stall, and the
grid spans C_mid from a tenth of the smallest to ten times the largest compute; A is kept in the
score range [0, 1]. With fewer than MIN_POINTS budgets above 0 it does not fit (three free
parameters would fit noise) and says so; when the bootstrap interval of the asymptote or of the
efficiency reaches a bound of its range ([0, 1]; the B grid), the status says that parameter is
not identified at this sample size.
"""

from __future__ import annotations

import statistics

import numpy as np

from pipeline.report import resample

MIN_POINTS = 4  # budgets with compute > 0: three parameters and one to spare
SCORE_RANGE = (0.0, 1.0)  # pass@1: the asymptote is fitted inside it
B_GRID = np.geomspace(0.25, 8.0, 48)
C_STEPS = 96


def curve_values(c, r0: float, a: float, b: float, c_mid: float):
    """R(C) of the fitted curve at compute `c` (array-like, > 0)."""
    c = np.asarray(c, dtype=float)
    return r0 + (a - r0) / (1.0 + (c_mid / c) ** b)


def fit(compute, scores, r0: float) -> dict:
    """Least-squares (A, B, C_mid) of R(C) through the points (compute > 0, scores), R0 fixed:
    {asymptote, efficiency, c_mid, sse}."""
    f = fit_many(compute, np.asarray(scores, dtype=float)[None, :], np.array([r0]))
    return {k: float(v[0]) for k, v in f.items()}


def fit_many(compute, scores, r0, chunk: int = 64) -> dict:
    """fit() of many score vectors at the same compute: `scores` (D, P), `r0` (D,); each key of
    the result an array (D,). The grid search of every row at once (in chunks of `chunk` rows,
    to bound memory)."""
    c = np.asarray(compute, dtype=float)  # (P,)
    c_mids = np.geomspace(c.min() / 10, c.max() * 10, C_STEPS)  # (M,)
    g = 1.0 / (1.0 + (c_mids[None, :, None] / c[None, None, :]) ** B_GRID[:, None, None])
    gg = np.maximum((g * g).sum(-1), 1e-300)  # (Bn, M)
    out = {k: np.empty(len(r0)) for k in ("asymptote", "efficiency", "c_mid", "sse")}
    for lo in range(0, len(r0), chunk):
        rr = np.asarray(r0[lo : lo + chunk], dtype=float)[:, None, None]  # (D, 1, 1)
        y = scores[lo : lo + chunk] - rr[:, :, 0]  # (D, P)
        # A - R0 = <g, y> / <g, g> for each (B, C_mid): g is (Bn, M, P)
        gain = np.einsum("nmp,dp->dnm", g, y) / gg  # (D, Bn, M)
        # pass@1 lies in [0, 1], so A does too; the loss is quadratic in A, so clipping the
        # free optimum gives the constrained one at each grid point.
        gain = np.clip(gain, SCORE_RANGE[0] - rr, SCORE_RANGE[1] - rr)
        sse = ((gain[..., None] * g[None] - y[:, None, None, :]) ** 2).sum(-1)  # (D, Bn, M)
        best = sse.reshape(len(y), -1).argmin(axis=1)
        i, j = np.unravel_index(best, sse.shape[1:])
        rows = np.arange(len(y))
        out["asymptote"][lo : lo + chunk] = rr[:, 0, 0] + gain[rows, i, j]
        out["efficiency"][lo : lo + chunk] = B_GRID[i]
        out["c_mid"][lo : lo + chunk] = c_mids[j]
        out["sse"][lo : lo + chunk] = sse[rows, i, j]
    return out


def _matrices(evals: list[dict], ids: list[str], seeds: list[int]) -> tuple:
    """(compute (K,), scores (K, S, P)) at the K budgets > 0 every seed reached: each budget's
    compute is the mean over the seeds (the design points: resampling moves scores, not
    budgets), scores[k, s, i] seed s's score on problem ids[i]."""
    by = {(e["seed"], e["budget"]): e for e in evals}
    budgets = [
        b
        for b in sorted({e["budget"] for e in evals if e["budget"] > 0})
        if all((s, b) in by for s in seeds)
    ]
    comp = np.array([statistics.mean(by[s, b]["compute_flops"] for s in seeds) for b in budgets])
    y = np.array(
        [[[by[s, b]["problems"][i] for i in ids] for s in seeds] for b in budgets], dtype=float
    ).reshape(len(budgets), len(seeds), len(ids))
    return comp, y


def _common_ids(evals: list[dict]) -> list[str]:
    sets = [set(e.get("problems") or {}) for e in evals]
    return sorted(set.intersection(*sets)) if sets and all(sets) else []


def _bootstrap(comp, y, r0_problems, *, iters: int) -> dict:
    """The two-level bootstrap of the fit (pipeline.report.resample: seeds with replacement,
    their deviations scaled for the few runs, one problem draw for every budget and for R0),
    per parameter: the percentile interval widened by t_dof / z, and the variance split from
    the same draws with problems fixed (var_runs) and with seeds fixed (var_problems)."""
    k, s, p = y.shape
    rng = np.random.default_rng(0)
    v = resample.counts(rng, p, iters)  # (D, P)
    w = resample.counts(rng, s, iters) if s > 1 else np.ones((iters, 1))  # (D, S)
    yi = np.stack([resample.inflate(y[b]) for b in range(k)])  # (K, S, P)
    fits = {}
    for mode, ws, vs in (
        ("both", w, v),
        ("runs", w, np.full_like(v, 1 / p)),
        ("problems", np.full_like(w, 1 / s), v),
    ):
        pts = np.einsum("ds,ksp,dp->dk", ws, yi, vs, optimize=True)
        fits[mode] = fit_many(comp, pts, vs @ r0_problems)
    out = {}
    for name in ("asymptote", "efficiency", "c_mid"):
        # c_mid spans decades: its interval and variance are taken on the log scale
        tf = np.log if name == "c_mid" else (lambda a: a)
        vr, vp = (float(np.var(tf(fits[m][name]))) for m in ("runs", "problems"))
        dof = resample.satterthwaite([(vr, s - 1), (vp, p - 1)])
        out[name] = {
            "draws": tf(fits["both"][name]),
            "dof": dof,
            "share": vr / (vr + vp) if vr + vp > 0 else None,
        }
    return out


def fit_variant(evals: list[dict], base: list[dict], *, iters: int, confidence: float) -> dict:
    """The fit of one variant on one benchmark: its eval records (budgets > 0, with compute and
    per-problem scores) and the SFT model's (`base`, budget 0; one fixed run, its evaluations
    averaged): {status, n_points, asymptote, efficiency, c_mid, *_ci_low/high,
    *_var_share_runs, fitted: [(compute, score) of the curve]}."""
    evals = [e for e in evals if e["budget"] > 0 and e.get("compute_flops")]
    ids = _common_ids(evals + base)
    seeds = sorted({e["seed"] for e in evals})
    comp, y = _matrices(evals, ids, seeds) if ids else (np.zeros(0), np.zeros((0, 0, 0)))
    out = {
        "n_points": len(comp),
        "seeds": len(seeds),
        "n_problems": len(ids),
        "samples": evals[0].get("n_samples") if evals else None,
    }
    if len(comp) < MIN_POINTS or not base:
        return {
            **out,
            "status": f"too few points to fit ({len(comp)} budgets above 0 with "
            f"per-problem scores; the fit needs {MIN_POINTS})",
        }
    r0_problems = np.array([[e["problems"][i] for i in ids] for e in base]).mean(axis=0)
    r0 = float(r0_problems.mean())
    best = fit(comp, y.mean(axis=(1, 2)), r0)
    boot = _bootstrap(comp, y, r0_problems, iters=iters)
    alpha = (1 - confidence) / 2
    ranges = {
        "asymptote": SCORE_RANGE,
        "efficiency": (B_GRID[0], B_GRID[-1]),
        "c_mid": (-np.inf, np.inf),
    }
    for k, b in boot.items():
        est = np.log(best[k]) if k == "c_mid" else best[k]
        q_lo, q_hi = np.quantile(b["draws"], [alpha, 1 - alpha])
        lo, hi = resample.widen(est, q_lo, q_hi, b["dof"], confidence, ranges[k])
        if k == "c_mid":  # back from the log scale (exactly c_mid where the bound is it)
            lo, hi = best[k] * np.exp(lo - est), best[k] * np.exp(hi - est)
        out[f"{k}_ci_low"], out[f"{k}_ci_high"] = float(lo), float(hi)
        out[f"{k}_var_share_runs"] = b["share"]
    grid = np.geomspace(comp.min(), comp.max(), 50)
    edge = 1e-6
    loose = [
        name
        for name, lo, hi, (a, b) in (
            ("asymptote", out["asymptote_ci_low"], out["asymptote_ci_high"], SCORE_RANGE),
            (
                "efficiency",
                out["efficiency_ci_low"],
                out["efficiency_ci_high"],
                (B_GRID[0], B_GRID[-1]),
            ),
        )
        if lo <= a + edge or hi >= b - edge
    ]
    status = f"fitted; {' and '.join(loose)} not identified" if loose else "fitted"
    return {
        **out,
        **best,
        "r0": r0,
        "status": status,
        "fitted": list(
            zip(
                grid.tolist(),
                curve_values(
                    grid, r0, best["asymptote"], best["efficiency"], best["c_mid"]
                ).tolist(),
            )
        ),
    }


def scaling_fits(data: dict, *, iters: int, confidence: float) -> list[dict]:
    """One fit (fit_variant) per variant and benchmark of collected `data`."""
    evals = data["evals"]
    rows = []
    for var in sorted({e["variant"] for e in evals if e["variant"] != "sft"}):
        for bench in sorted({e["benchmark"] for e in evals if e["variant"] == var}):
            mine = [e for e in evals if e["variant"] == var and e["benchmark"] == bench]
            base = [e for e in evals if e["variant"] == "sft" and e["benchmark"] == bench]
            row = fit_variant(mine, base, iters=iters, confidence=confidence)
            rows.append(
                {"variant": var, "algorithm": mine[0]["algorithm"], "benchmark": bench, **row}
            )
    return rows
