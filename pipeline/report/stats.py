"""The report's numbers: smoothing and the collapse rule, curves over seeds, final scores with
intervals over training runs and problems, paired differences, run stability, variants against
their baselines and the mixture-of-experts ablation. Plain data in, plain data out (no figures,
no HTML, no MLflow). Every interval about an algorithm is pipeline.report.resample's two-level
bootstrap (seeds, then problems); each row keeps its runs' own numbers (per_seed, per_seed_diff)
and how much of its variance is run-to-run (var_share_runs)."""

from __future__ import annotations

import math
import statistics

from evaluators.tasks import BENCHMARKS
from pipeline.report import kscores, resample
from pipeline.report.verdicts import moe_verdict


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving mean (the first points average what exists so far)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def collapse_check(
    rewards: list[float], *, window: int, ratio: float, tail: float, min_best: float
) -> dict:
    """The collapse rule (see pipeline.report) on one run's per-step rewards."""
    if not rewards:
        return {"best": None, "final": None, "collapsed": False}
    r = smooth(rewards, window)
    best = max(r)
    n_tail = max(1, math.ceil(tail * len(r)))
    collapsed = (
        len(r) >= 2 * window and best >= min_best and all(v < ratio * best for v in r[-n_tail:])
    )
    return {"best": best, "final": r[-1], "best_step": r.index(best) + 1, "collapsed": collapsed}


def by_variant(runs) -> dict[str, list]:
    """Runs grouped by their variant, in the order they come."""
    out: dict[str, list] = {}
    for r in runs:
        out.setdefault(r["variant"], []).append(r)
    return out


def curve(runs, key: str, window: int = 1, metric: str = "pass_at_1") -> list[tuple]:
    """One series over seeds at the steps every run has: [(x = mean compute at the step, mean,
    lowest seed, highest seed)].

    `key` is a training metric (smoothed by a trailing moving mean over `window` steps when
    window > 1) or "eval/<bench>": that benchmark's `metric` (pass@1, or cf's Elo "rating") at
    each checkpoint, where step 0 (the SFT model) sits at compute 0 and each point also carries
    its step as a fifth element."""
    bench = key[len("eval/") :] if key.startswith("eval/") else None
    per_run, comp = [], []
    for run in runs:
        if bench is None:
            hist = run["train"].get(key, [])
        else:
            hist = run["eval"].get(bench, {}).get(metric, [])
        vals = [v for _, v in hist]
        per_run.append(
            dict(zip([s for s, _ in hist], smooth(vals, window) if window > 1 else vals))
        )
        c = dict(run["train"].get("compute_flops", []))
        if bench is not None:
            c.setdefault(0, 0.0)
        comp.append(c)
    steps = sorted(set.intersection(*[set(p) for p in per_run])) if per_run else []
    out = []
    for s in steps:
        ys = [p[s] for p in per_run]
        xs = [c.get(s, float("nan")) for c in comp]
        point = (statistics.mean(xs), statistics.mean(ys), min(ys), max(ys))
        out.append(point + (s,) if bench is not None else point)
    return out


def mean_metric(runs, key: str = "clip_frac_tokens") -> float | None:
    """A training metric's mean over every logged step of `runs` (None: none logged it)."""
    vals = [v for run in runs for _, v in run["train"].get(key, [])]
    return statistics.mean(vals) if vals else None


def _split(ci: dict) -> dict:
    """The variance split of an interval (pipeline.report.resample.variance_split) as row
    fields; infinite degrees of freedom (nothing varies between runs) as None."""
    dof = ci["dof"]
    return {
        "var_runs": ci["var_runs"],
        "var_problems": ci["var_problems"],
        "var_share_runs": ci["var_share_runs"],
        "dof": None if math.isinf(dof) else dof,
    }


def paired_diff(row: dict, base: dict, *, iters: int, confidence: float) -> dict:
    """Mean difference row - base on the problems every run of both scored, with the two-level
    bootstrap interval over training runs and problems (pipeline.report.resample): paired by
    seed when both have the same seeds (and are not the SFT model), else each side's seeds drawn
    on their own; one problem draw for both. {} when either lacks per-problem scores.

    Also: n_problems; runs (the fewest runs of a side that is not the SFT model, None when both
    are); paired; per_seed_diff (the per-seed differences, paired or against a one-run side,
    else None) and the variance split (var_runs, var_problems, var_share_runs, dof)."""
    ra, rb = row.get("_runs") or [], base.get("_runs") or []
    ids = sorted(set.intersection(*[set(p) for _, p in ra + rb])) if ra and rb else []
    if not ids:
        return {}
    xa, xb = resample.run_matrix(ra, ids), resample.run_matrix(rb, ids)
    fa, fb = bool(row.get("_fixed")), bool(base.get("_fixed"))
    # same seeds from the same SFT checkpoint: seed s of one against seed s of the other
    paired = not fa and not fb and [s for s, _ in ra] == [s for s, _ in rb]
    arms = (
        [resample.Arm(1.0, xa - xb)]
        if paired
        else [resample.Arm(1.0, xa, fa), resample.Arm(-1.0, xb, fb)]
    )
    ci = resample.interval(arms, iters=iters, confidence=confidence, bounds=(-1.0, 1.0))
    if paired:
        per_seed = (xa - xb).mean(axis=1)
    elif len(rb) == 1 or len(ra) == 1:
        per_seed = xa.mean(axis=1) - xb.mean(axis=1)  # broadcasts against the one run
    else:
        per_seed = None
    sides = [len(r) for r, f in ((ra, fa), (rb, fb)) if not f]
    return {
        "diff": ci["estimate"],
        "diff_ci_low": ci["ci_low"],
        "diff_ci_high": ci["ci_high"],
        "n_problems": len(ids),
        "runs": min(sides) if sides else None,
        "paired": paired,
        "per_seed_diff": per_seed.tolist() if per_seed is not None else None,
        **_split(ci),
    }


def _score_row(es: list[dict], *, iters: int, confidence: float, fixed: bool = False) -> dict:
    """pass@1 of one variant on one benchmark over its seeds' eval runs `es` (seed order): the
    mean over runs and problems with the two-level bootstrap interval over training runs and
    problems (pipeline.report.resample) and its variance split; `fixed` for the SFT model, one
    run by design (its evaluations averaged, no seed variance). Without per-problem artifacts,
    the mean of the runs' own intervals (over problems only; var_share_runs None).

    `per_seed` keeps each run's own pass@1 (seed order, `seed_ids`); the private `_runs`
    [(seed, {problem: score})] and `_fixed` feed paired_diff."""
    per_seed = [e["pass_at_1"] for e in es]
    probs = [e.get("problems") or {} for e in es]
    common = sorted(set.intersection(*[set(p) for p in probs])) if all(probs) else []
    runs = [(e["seed"], p) for e, p in zip(es, probs)]
    if common and fixed:
        runs = [("sft", {i: statistics.mean(p[i] for p in probs) for i in common})]
    if common:
        x = resample.run_matrix(runs, common)
        ci = resample.interval(
            [resample.Arm(1.0, x, fixed)], iters=iters, confidence=confidence, bounds=(0.0, 1.0)
        )
        mean, lo, hi, split = ci["estimate"], ci["ci_low"], ci["ci_high"], _split(ci)
        per_problem = x.mean(axis=0).tolist()
    else:
        mean = statistics.mean(per_seed)
        lo = statistics.mean(e["ci_low"] for e in es)
        hi = statistics.mean(e["ci_high"] for e in es)
        split = {"var_runs": None, "var_problems": None, "var_share_runs": None, "dof": None}
        per_problem = []
    return {
        "step": es[0]["step"],
        "seeds": len(es),
        "pass_at_1": mean,
        "ci_low": lo,
        "ci_high": hi,
        "seed_min": min(per_seed),
        "seed_max": max(per_seed),
        "per_seed": per_seed,
        "seed_ids": [e["seed"] for e in es],
        "n_problems": len(common) or es[0].get("n_problems"),
        **split,
        **elo(
            es,
            common,
            per_problem,
            confidence=confidence,
            per_run=x.tolist() if common and not fixed else None,
        ),
        "_runs": runs if common else [],
        "_fixed": fixed,
    }


def elo(
    es: list[dict],
    ids: list[str],
    scores: list[float],
    *,
    confidence: float,
    per_run: list[list[float]] | None = None,
) -> dict:
    """CodeForces-style Elo of one variant (evaluators.benchmarks.codeforces.estimate_rating): a problem
    counts as solved when its score, averaged over seeds, is at least 0.5 (as one run's
    summary counts it); percentile among the reference ratings. {} for benchmarks whose
    problems carry no rating.

    The interval: the likelihood-ratio interval over problems, and with `per_run` (each
    training run's scores on `ids`, two or more runs) the run-to-run variance of the runs' own
    Elos added to it, side by side, widened by t / z at the Welch-Satterthwaite degrees of
    freedom, as resample does for pass@1 (each run's Elo also carries its own problem noise, so
    this errs wide). elo_per_seed and elo_var_share_runs say what the runs contributed."""
    from statistics import NormalDist

    from evaluators.benchmarks.codeforces import RATING_RANGE, estimate_rating

    ratings = es[0].get("ratings") or {}

    def outcomes(run_scores):
        return [(ratings[i], s >= 0.5) for i, s in zip(ids, run_scores) if i in ratings]

    if not outcomes(scores):
        return {}
    r = estimate_rating(outcomes(scores), confidence=confidence)
    out = {
        "elo": r["rating"],
        "elo_low": r["low"],
        "elo_high": r["high"],
        "elo_percentile": r["percentile"],
        "elo_bounded": r["bounded"],
    }
    if not per_run or len(per_run) < 2:
        return out
    own = [estimate_rating(outcomes(run), confidence=confidence)["rating"] for run in per_run]
    var_runs = statistics.variance(own) / len(own)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    var_problems = [((r["rating"] - r["low"]) / z) ** 2, ((r["high"] - r["rating"]) / z) ** 2]
    low, high = (
        resample.widening(
            resample.satterthwaite([(var_runs, len(own) - 1), (v, math.inf)]), confidence
        )
        * z
        * math.sqrt(v + var_runs)
        for v in var_problems
    )
    total = var_runs + ((r["high"] - r["low"]) / (2 * z)) ** 2
    return {
        **out,
        "elo_low": max(r["rating"] - low, RATING_RANGE[0]),
        "elo_high": min(r["rating"] + high, RATING_RANGE[1]),
        "elo_per_seed": own,
        "elo_var_share_runs": var_runs / total if total else 0.0,
    }


def final_scores(data: dict, *, iters: int, confidence: float) -> list[dict]:
    """Per variant (and the SFT model) and benchmark: pass@1 at the largest budget (_score_row),
    pass@k and maj@k beside it (kscores), with the difference to the SFT model (vs_sft, its interval, vs_sft_per_seed and
    vs_sft_var_share_runs; paired_diff) on the problems both scored."""
    evals = data["evals"]
    last_budget = max((e["budget"] for e in evals if e["variant"] != "sft"), default=None)
    algorithm_of = {e["variant"]: e["algorithm"] for e in evals}
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in evals:
        if e["variant"] == "sft" or e["budget"] == last_budget:
            groups.setdefault((e["variant"], e["benchmark"]), []).append(e)
    rows, base = [], {}
    for var in ["sft"] + sorted({v for v, _ in groups if v != "sft"}):
        for bench in BENCHMARKS:
            es = sorted(groups.get((var, bench), []), key=lambda e: e["seed"])
            if not es:
                continue
            row = {
                "variant": var,
                "algorithm": algorithm_of.get(var, var),
                "benchmark": bench,
                "budget": 0 if var == "sft" else last_budget,
                **_score_row(es, iters=iters, confidence=confidence, fixed=var == "sft"),
                **kscores.k_columns(es, iters=iters, confidence=confidence, fixed=var == "sft"),
            }
            if var == "sft":
                base[bench] = row
            elif bench in base:
                d = paired_diff(row, base[bench], iters=iters, confidence=confidence)
                if d:
                    row.update(
                        vs_sft=d["diff"],
                        vs_sft_ci_low=d["diff_ci_low"],
                        vs_sft_ci_high=d["diff_ci_high"],
                        vs_sft_per_seed=d["per_seed_diff"],
                        vs_sft_var_share_runs=d["var_share_runs"],
                    )
            rows.append(row)
    return rows


def stability(data: dict, rule: dict) -> list[dict]:
    """Per run: best and final smoothed reward, whether it collapsed (`rule`: collapse_check's
    settings), its MLflow status and skipped non-finite updates."""
    out = []
    for run in data["rl"]:
        rewards = [v for _, v in run["train"].get("reward_mean", [])]
        c = collapse_check(rewards, **rule)
        skipped = sum(v for _, v in run["train"].get("skipped_updates", []))
        out.append(
            {
                "variant": run["variant"],
                "algorithm": run["algorithm"],
                "seed": run["seed"],
                "status": run["status"],
                "steps": len(rewards),
                "best_smoothed_reward": c["best"],
                "best_step": c.get("best_step"),
                "final_smoothed_reward": c["final"],
                "collapsed": c["collapsed"],
                "skipped_updates": skipped,
                "run_id": run["run_id"],
            }
        )
    return out


def _median_of(run, key: str) -> float | None:
    vals = [v for _, v in run["train"].get(key, [])]
    return statistics.median(vals) if vals else None


def mean_of(runs, key: str) -> float | None:
    """Mean over steps, then over seeds (runs without the metric are left out)."""
    per = [statistics.mean(v for _, v in r["train"][key]) for r in runs if r["train"].get(key)]
    return statistics.mean(per) if per else None


def step_seconds(run) -> float | None:
    """Median seconds of one RL step (rollout + old log-prob pass + updates; engine: trl logs
    the step's time whole, as time_step_s)."""
    if run["train"].get("time_step_s"):
        return statistics.median(v for _, v in run["train"]["time_step_s"])
    parts = [
        dict(run["train"].get(k, []))
        for k in ("time_rollout_s", "time_old_logprob_s", "time_update_s")
    ]
    steps = set(parts[0]) & set(parts[1]) & set(parts[2])
    return statistics.median(sum(p[s] for p in parts) for s in steps) if steps else None


def _timing(runs) -> tuple:
    """(step seconds, old-log-prob pass seconds, final compute), each a mean over seeds."""
    st = [t for t in map(step_seconds, runs) if t is not None]
    ol = [t for t in (_median_of(r, "time_old_logprob_s") for r in runs) if t is not None]
    fl = [r["train"]["compute_flops"][-1][1] for r in runs if r["train"].get("compute_flops")]
    return (
        statistics.mean(st) if st else None,
        statistics.mean(ol) if ol else None,
        statistics.mean(fl) if fl else None,
    )


def _cost(var: str, base: str, runs, bruns) -> dict:
    """A variant's cost and log-prob gap beside its baseline's (one row's shared columns)."""
    (vs, vo, vf), (bs, bo, bf) = _timing(runs), _timing(bruns)
    return {
        "variant": var,
        "baseline": base,
        "algorithm": runs[0]["algorithm"],
        "seeds": len(runs),
        "step_s": vs,
        "baseline_step_s": bs,
        "step_time_saving": (1 - vs / bs) if vs and bs else None,
        "old_logprob_s": vo,
        "baseline_old_logprob_s": bo,
        "compute_ratio": (vf / bf) if vf and bf else None,
        # what skipping the pass can save at most: its share of the baseline's step
        "old_logprob_share": (bo - (vo or 0.0)) / bs if bo is not None and bs else None,
        "clip_onpolicy": mean_of(runs, "clip_frac_tokens_onpolicy"),
        "baseline_clip_onpolicy": mean_of(bruns, "clip_frac_tokens_onpolicy"),
        "logprob_gap_token": mean_of(runs, "logprob_gap_token_mean"),
        "baseline_logprob_gap_token": mean_of(bruns, "logprob_gap_token_mean"),
        "logprob_gap_seq": mean_of(runs, "logprob_gap_seq_mean"),
        "baseline_logprob_gap_seq": mean_of(bruns, "logprob_gap_seq_mean"),
    }


def variant_comparisons(
    data: dict, table: list[dict], *, iters: int, confidence: float
) -> list[dict]:
    """Each variant against its baseline (the `baseline` tag of its runs), per benchmark: the
    paired score difference at the final budget, the step time and old-log-prob pass time
    (median per step, mean over seeds; saving = 1 - variant / baseline), the compute ratio and
    the engine/trainer log-prob gap of both."""
    groups = by_variant(data["rl"])
    rows_of = {(r["variant"], r["benchmark"]): r for r in table}
    out = []
    for var, runs in sorted(groups.items()):
        base = runs[0].get("baseline") or ""
        if not base or base not in groups:
            continue
        common = _cost(var, base, runs, groups[base])
        for bench in BENCHMARKS:
            r, b = rows_of.get((var, bench)), rows_of.get((base, bench))
            if r is None or b is None:
                continue
            out.append(
                {
                    **common,
                    "benchmark": bench,
                    "pass_at_1": r["pass_at_1"],
                    "baseline_pass_at_1": b["pass_at_1"],
                    **paired_diff(r, b, iters=iters, confidence=confidence),
                }
            )
    return out


def _moe_row(var: str, runs, stab: list[dict], fin: dict, bench: str | None) -> dict:
    """One MoE variant: volatility over seeds, load balance, Routing Replay and its source,
    collapses and its final score on `bench` (`fin`: its final_scores row, or {})."""
    vol = [
        statistics.mean(x for _, x in r["train"]["moe/volatility"])
        for r in runs
        if r["train"].get("moe/volatility")
    ]
    params = runs[0]["params"]
    # params are flattened JSON values ("true"), older stores may hold "True"
    replay = str(params.get("routing_replay", "")).lower() == "true"
    return {
        "variant": var,
        "algorithm": runs[0]["algorithm"],
        "routing_replay": replay,
        "replay_source": params.get("routing_replay_source", "trainer") if replay else "",
        "seeds": len(runs),
        "volatility": statistics.mean(vol) if vol else None,
        "volatility_seed_min": min(vol) if vol else None,
        "volatility_seed_max": max(vol) if vol else None,
        "engine_routing_mismatch": mean_of(runs, "moe/engine_routing_mismatch"),
        "load_entropy": mean_of(runs, "moe/load_entropy"),
        "max_expert_share": mean_of(runs, "moe/max_expert_share"),
        "routing_cache_mb": (mean_of(runs, "moe/routing_cache_bytes") or 0) / 2**20,
        "collapsed": sum(x["collapsed"] for x in stab if x["variant"] == var),
        "benchmark": bench,
        "pass_at_1": fin.get("pass_at_1"),
        "ci_low": fin.get("ci_low"),
        "ci_high": fin.get("ci_high"),
        "per_seed": fin.get("per_seed"),
        "var_share_runs": fin.get("var_share_runs"),
        "vs_sft": fin.get("vs_sft"),
        "vs_sft_ci_low": fin.get("vs_sft_ci_low"),
        "vs_sft_ci_high": fin.get("vs_sft_ci_high"),
    }


def _moe_pairs(
    rows: list[dict], rows_of: dict, bench: str | None, *, iters: int, confidence: float
) -> list[dict]:
    """The paper's comparisons among the MoE variants, as paired differences on `bench`."""

    def find(alg, source):  # source: "" (no replay), "trainer" (the paper's) or "engine"
        return next(
            (r for r in rows if r["algorithm"] == alg and r["replay_source"] == source), None
        )

    pairs = []
    for a, b, what in (
        (find("grpo", ""), find("grpo", "trainer"), "GRPO without vs with Routing Replay"),
        (find("gspo", ""), find("grpo", ""), "GSPO vs GRPO, both without replay"),
        (find("gspo", ""), find("grpo", "trainer"), "GSPO without replay vs GRPO with it"),
        (find("gspo", ""), find("gspo", "trainer"), "GSPO without vs with Routing Replay"),
        (
            find("grpo", "engine"),
            find("grpo", ""),
            "GRPO replaying the rollout engine's routing vs without replay",
        ),
    ):
        if a and b and (a["variant"], bench) in rows_of and (b["variant"], bench) in rows_of:
            d = paired_diff(
                rows_of[(a["variant"], bench)],
                rows_of[(b["variant"], bench)],
                iters=iters,
                confidence=confidence,
            )
            if d:
                pairs.append(
                    {
                        "comparison": what,
                        "variant": a["variant"],
                        "against": b["variant"],
                        "benchmark": bench,
                        **d,
                    }
                )
    return pairs


def moe_summary(
    data: dict, table: list[dict], stab: list[dict], *, iters: int, confidence: float
) -> dict | None:
    """The MoE ablation: per variant, expert-activation volatility, load balance, Routing Replay
    on/off, collapses and final scores; the paper's comparisons as paired differences; and a
    plain verdict. The MoE runs: those that logged moe/volatility, or every run of an experiment
    with a Routing Replay run (engine: verl logs no drift: config/moe-30b.yaml). None when
    there are none."""
    ablation = any(str(r["params"].get("routing_replay", "")).lower() == "true" for r in data["rl"])
    moe_vars = {
        v: rs
        for v, rs in by_variant(data["rl"]).items()
        if ablation or any(r["train"].get("moe/volatility") for r in rs)
    }
    if not moe_vars:
        return None
    rows_of = {(r["variant"], r["benchmark"]): r for r in table}
    bench = next((b for b in BENCHMARKS if any((v, b) in rows_of for v in moe_vars)), None)
    rows = [
        _moe_row(var, runs, stab, rows_of.get((var, bench), {}), bench)
        for var, runs in sorted(moe_vars.items())
    ]
    pairs = _moe_pairs(rows, rows_of, bench, iters=iters, confidence=confidence)
    lines = moe_verdict(rows, pairs, confidence)
    return {
        "rows": rows,
        "pairs": pairs,
        "benchmark": bench,
        "verdict": " ".join(lines),
        "verdict_lines": lines,
    }
