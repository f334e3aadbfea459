"""Score-against-compute curves over one population: every point of a benchmark's curve (the SFT
model, the intermediate budgets and the last), the ScaleRL fit through them and the curve table
are computed on the same problems with the same number of samples.

Why. The workflow evaluates the SFT model and the last budget on the full test set and the
budgets between on a smaller one (`eval.<bench>.intermediate`: fewer problems, fewer samples).
Plotting each evaluation's own pass@1 puts other problems and other random draws at other
budgets, so the curve jumps where the evaluation changes, not where the model does. The
evaluations nest (evaluators.evaluation: the first m problems of the test set, a problem's
j-th sample seeded from the evaluation seed, its id and j alone), so the population every
evaluation of a curve holds is the smallest one's problems and its first k samples; each point
is its evaluations' scores there (gspo.tracking.evals's `population` and `nested`, which also
give each training run's curve in MLflow, eval/<bench>/curve_pass_at_1), and larger evaluations keep their full sets for
the final scores and the claims (pipeline.report.stats).

A point: the mean over the variant's runs (seeds) and the population's problems of each
problem's mean over its first k samples, with the two-level bootstrap interval over training
runs and problems (pipeline.report.resample; the SFT model is one fixed run).

What the draw contributes. The checkpoints of a curve share their sampling draw (common random
numbers: one seed, so two checkpoints that nearly agree sample alike), and every run does too:
more seeds do not average it out, and it moves a curve's level, not much its shape. Its part of
a point's variance is estimated from the spread of each problem's own samples: for 0/1 scores
the unbiased variance of a problem's k-sample mean is p(1 - p) / (k - 1), p its pass rate over
the k samples; summed over the P problems / P^2 and averaged over the runs (counted once, as a
draw every run shares: an upper bound, since two runs share a draw only where they agree), it
is `var_draw`; `draw_share` = var_draw / (var_runs + var_problems), capped at 1, the share of
the point's variance as the interval sees it (the draw is part of the problem term there: a
problem's score includes its samples' noise). None with k = 1 (a single sample has no spread).

A store made before per-sample scores were kept (results.jsonl without `scores`) still gets one
problem set per curve, each evaluation's own per-problem mean (samples shown as unknown).
"""

from __future__ import annotations

import statistics

import numpy as np

from gspo.tracking.evals import nested, population
from pipeline.report import resample

CURVE_COLS = [
    "variant",
    "algorithm",
    "benchmark",
    "budget",
    "step",
    "compute_flops",
    "seeds",
    "n_problems",
    "samples",
    "pass_at_1",
    "ci_low",
    "ci_high",
    "seed_min",
    "seed_max",
    "var_runs",
    "var_problems",
    "var_draw",
    "draw_share",
    "elo",
    "elo_low",
    "elo_high",
]


def nested_evals(data: dict) -> tuple[list[dict], dict]:
    """Every curve evaluation of `data` (the SFT model and every RL budget) with its "problems"
    replaced by its scores on its benchmark's population, and {benchmark: (ids, k)}. Benchmarks
    whose evaluations share no problem are left out."""
    out, pops = [], {}
    for bench in sorted({e["benchmark"] for e in data["evals"]}):
        mine = [e for e in data["evals"] if e["benchmark"] == bench]
        ids, k = population(mine)
        if not ids:
            continue
        pops[bench] = (ids, k)
        out += [{**e, "problems": nested(e, ids, k), "n_samples": k or None} for e in mine]
    return out, pops


def _draw_variance(es: list[dict], ids: list[str], k: int) -> float | None:
    """var_draw of a point over evaluations `es` (module doc)."""
    if k < 2:  # one sample (or unknown: k = 0) has no spread to measure
        return None
    per_run = []
    for e in es:  # e["problems"]: the first k samples' mean (nested_evals)
        p = np.array([e["problems"][i] for i in ids])
        per_run.append(float((p * (1 - p) / (k - 1)).sum()) / len(ids) ** 2)
    return statistics.mean(per_run)


def _point(
    es: list[dict], ids: list[str], k: int, *, fixed: bool, iters: int, confidence: float
) -> dict:
    """One point: evaluations `es` (one per seed, or the SFT model's) on the population."""
    from pipeline.report.stats import elo

    runs = [(e["seed"], e["problems"]) for e in es]
    if fixed:  # the SFT model: one run by design, its evaluations averaged
        runs = [("sft", {i: statistics.mean(e["problems"][i] for e in es) for i in ids})]
    x = resample.run_matrix(runs, ids)
    ci = resample.interval(
        [resample.Arm(1.0, x, fixed)], iters=iters, confidence=confidence, bounds=(0.0, 1.0)
    )
    per_seed = [statistics.mean(e["problems"][i] for i in ids) for e in es]
    var_draw = _draw_variance(es, ids, k)
    total = (ci["var_runs"] or 0.0) + ci["var_problems"]
    comp = [e.get("compute_flops") or 0.0 for e in es]
    return {
        "step": es[0]["step"],
        "compute_flops": 0.0 if fixed else statistics.mean(comp),
        "seeds": len(es),
        "n_problems": len(ids),
        "samples": k or None,
        "pass_at_1": ci["estimate"],
        "ci_low": ci["ci_low"],
        "ci_high": ci["ci_high"],
        "seed_min": min(per_seed),
        "seed_max": max(per_seed),
        "var_runs": ci["var_runs"],
        "var_problems": ci["var_problems"],
        "var_draw": var_draw,
        # an upper bound (the draw counted as shared by every run), so capped at the whole
        "draw_share": min(1.0, var_draw / total) if var_draw is not None and total > 0 else None,
        **elo(es, ids, x.mean(axis=0).tolist(), confidence=confidence),
    }


def curve_points(evals: list[dict], pops: dict, *, iters: int, confidence: float) -> list[dict]:
    """Every curve point of `evals` on their benchmarks' populations `pops` (both as
    `nested_evals` returns them), per variant and benchmark, budget order: the SFT model first
    (budget 0, repeated for each variant so each curve starts there), then each budget every
    seed of the variant reached."""
    rows = []
    for bench, (ids, k) in pops.items():
        mine = [e for e in evals if e["benchmark"] == bench]
        sft = [e for e in mine if e["variant"] == "sft"]
        base = _point(sft, ids, k, fixed=True, iters=iters, confidence=confidence) if sft else None
        for var in sorted({e["variant"] for e in mine if e["variant"] != "sft"}):
            es = [e for e in mine if e["variant"] == var and e["budget"] > 0]
            seeds = sorted({e["seed"] for e in es})
            alg = es[0]["algorithm"]
            if base is not None:
                rows.append(
                    {"variant": var, "algorithm": alg, "benchmark": bench, "budget": 0, **base}
                )
            for b in sorted({e["budget"] for e in es}):
                at = sorted((e for e in es if e["budget"] == b), key=lambda e: e["seed"])
                if [e["seed"] for e in at] != seeds:
                    continue  # a budget some run has not reached yet
                rows.append(
                    {
                        "variant": var,
                        "algorithm": alg,
                        "benchmark": bench,
                        "budget": b,
                        **_point(at, ids, k, fixed=False, iters=iters, confidence=confidence),
                    }
                )
    return rows


def _mean_sd(points: list[dict], key: str) -> float | None:
    """The mean standard deviation over `points` whose variance `key` is known (None: none)."""
    vals = [p[key] for p in points if p[key] is not None]
    return statistics.mean(v**0.5 for v in vals) if vals else None


def draw_summary(points: list[dict]) -> list[dict]:
    """Per benchmark: its population and, over the points of the curves (SFT model left out:
    it has no runs), the mean standard deviation of a point and its parts (runs, problems, and
    of the problems' part the shared draw), with the draw's mean share."""
    out = []
    for bench in sorted({p["benchmark"] for p in points}):
        ps = [p for p in points if p["benchmark"] == bench and p["budget"] > 0]
        if not ps:
            continue
        shares = [p["draw_share"] for p in ps if p["draw_share"] is not None]
        out.append(
            {
                "benchmark": bench,
                "n_problems": ps[0]["n_problems"],
                "samples": ps[0]["samples"],
                "points": len(ps),
                "sd_point": statistics.mean(
                    (p["var_problems"] + (p["var_runs"] or 0)) ** 0.5 for p in ps
                ),
                "sd_runs": _mean_sd(ps, "var_runs"),
                "sd_problems": _mean_sd(ps, "var_problems"),
                "sd_draw": _mean_sd(ps, "var_draw"),
                "draw_share": statistics.mean(shares) if shares else None,
            }
        )
    return out
