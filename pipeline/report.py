"""The comparison report, built from an MLflow store alone.

    python -m pipeline.report --experiment NAME [--tracking-uri URI] [--out DIR]

writes DIR (default results/<experiment>/report/):

- score_vs_compute.png: each benchmark's pass@1 (mean over samples per problem, mean over
  problems) against cumulative RL training compute in FLOPs (gspo.flops: generation, old
  log-prob pass and updates; the SFT compute every run shares is left out, so the SFT model is
  x = 0). One curve per variant (an algorithm, or an algorithm with other settings): the mean over seeds, with a band from the lowest to the highest
  seed;
- reward_vs_compute.png: the training reward (mean over each rollout batch, moving mean over
  `collapse.window` steps) against compute, mean over seeds with the same band;
- clip_fraction.png: the fraction of response tokens whose gradient the clip removed, per step
  and per algorithm (log scale), and its mean per algorithm with the GSPO/GRPO ratio;
- final_scores.csv: per algorithm and benchmark, pass@1 at the largest budget: the mean over
  seeds with a bootstrap confidence interval over problems (each problem's score averaged over
  seeds first, so the interval reflects problem sampling; the seed range is given beside it),
  and the SFT model's score as the baseline;
- stability.csv: per run, best and final smoothed reward and whether it collapsed (the rule
  below), its MLflow status and skipped non-finite updates;
- variants.csv: each configured variant against its baseline (config `variants`, e.g. GSPO with
  the rollout engine's bf16 log-probs as old log-probs against GSPO recomputing them): paired
  score difference at the final budget with its interval, step time and old-log-prob pass time
  with the saving, compute ratio, and the engine/trainer log-prob gap (header only when there are
  no variants);
- moe.csv, moe.png: for MoE runs (those that logged moe/volatility), per variant the
  expert-activation volatility, router load balance, Routing Replay on/off and its source
  (trainer or rollout engine), the engine/trainer routing mismatch, collapses and final
  score; the paper's comparisons (GRPO with/without replay, GSPO vs GRPO) as paired differences
  and a plain verdict on whether the tiny model reproduces the paper's claim (header only, and no
  figure, for dense experiments);
- index.html: all of the above with the provenance: the command, config, seeds, git commit,
  package versions and data hashes the runs were made with.

Collapse rule: with r_t the training reward smoothed by a trailing moving mean over `window`
steps and best = max_t r_t, a run has collapsed when best >= `min_best` and every r_t of the last
`tail` fraction of its steps is below `ratio` x best (defaults 5, 0.2, 0.5, 0.05: the reward fell
to under half its best and stayed there for the final fifth of the run). Runs shorter than
2 x `window` steps are never flagged (too short to tell).

Where the numbers come from: the RL runs' metric histories (reward_mean, clip_frac_tokens,
compute_flops, eval/<bench>/pass_at_1 at each checkpoint's step) and the eval runs' results.jsonl
artifacts; see pipeline.aggregate. The report is logged back to MLflow as the artifacts of a run
tagged stage=report.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import math
import pathlib
import statistics
import sys
import tempfile

COLORS = {"grpo": "#d62728", "gspo": "#1f77b4", "gspo_token": "#2ca02c", "sft": "#555555"}
BENCH_NAMES = {"aime": "AIME-style math", "lcb": "LiveCodeBench-style", "cf": "CodeForces-style"}
DEFAULTS = {"bootstrap_iters": 2000, "confidence": 0.95,
            "collapse": {"window": 5, "ratio": 0.5, "tail": 0.2, "min_best": 0.05}}


# -- the numbers ------------------------------------------------------------------------------------

def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving mean (the first points average what exists so far)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def collapse_check(rewards: list[float], *, window: int, ratio: float, tail: float,
                   min_best: float) -> dict:
    """The collapse rule of the module doc on one run's per-step rewards."""
    if not rewards:
        return {"best": None, "final": None, "collapsed": False}
    r = smooth(rewards, window)
    best = max(r)
    n_tail = max(1, math.ceil(tail * len(r)))
    collapsed = (len(r) >= 2 * window and best >= min_best
                 and all(v < ratio * best for v in r[-n_tail:]))
    return {"best": best, "final": r[-1], "best_step": r.index(best) + 1, "collapsed": collapsed}


def _by_variant(runs):
    out: dict[str, list] = {}
    for r in runs:
        out.setdefault(r["variant"], []).append(r)
    return out


def _style(variant: str, runs) -> dict:
    """Colour by algorithm; a variant other than the plain algorithm gets its own dash and
    marker, so 'gspo' and 'gspo-bf16-rollout' read as the same method, differently run."""
    alg = runs[0]["algorithm"] if runs else variant
    if variant == alg:
        return {"color": COLORS.get(alg), "linestyle": "-", "marker": "o"}
    k = sum(map(ord, variant))
    return {"color": COLORS.get(alg), "linestyle": ("--", ":", "-.")[k % 3],
            "marker": ("s", "^", "D", "v")[k % 4]}


def curve_over_seeds(runs, key: str, window: int = 1):
    """[(x=mean compute at step, mean, low, high)] over the steps every run has."""
    per_run = []
    for run in runs:
        hist = run["train"].get(key, [])
        vals = smooth([v for _, v in hist], window) if window > 1 else [v for _, v in hist]
        per_run.append(dict(zip([s for s, _ in hist], vals)))
    comp = [dict(run["train"].get("compute_flops", [])) for run in runs]
    steps = sorted(set.intersection(*[set(p) for p in per_run])) if per_run else []
    out = []
    for s in steps:
        ys = [p[s] for p in per_run]
        xs = [c.get(s, float("nan")) for c in comp]
        out.append((statistics.mean(xs), statistics.mean(ys), min(ys), max(ys)))
    return out


def eval_curve(runs, bench: str):
    """[(x=mean compute, mean pass@1, low seed, high seed, step)] at the steps every run has."""
    per_run, comp = [], []
    for run in runs:
        h = run["eval"].get(bench, {}).get("pass_at_1", [])
        per_run.append(dict(h))
        c = dict(run["train"].get("compute_flops", []))
        c.setdefault(0, 0.0)
        comp.append(c)
    if not per_run or not all(per_run):
        return []
    steps = sorted(set.intersection(*[set(p) for p in per_run]))
    out = []
    for s in steps:
        ys = [p[s] for p in per_run]
        xs = [c.get(s, float("nan")) for c in comp]
        out.append((statistics.mean(xs), statistics.mean(ys), min(ys), max(ys), s))
    return out


def mean_clip(runs, key: str = "clip_frac_tokens") -> float | None:
    vals = [v for run in runs for _, v in run["train"].get(key, [])]
    return statistics.mean(vals) if vals else None


def final_scores(data: dict, *, iters: int, confidence: float) -> list[dict]:
    """Per variant (and the SFT model) and benchmark: pass@1 at the largest budget."""
    from evaluators.metrics import bootstrap_ci

    rows = []
    evals = data["evals"]
    groups: dict[tuple[str, str], list[dict]] = {}
    last_budget = max((e["budget"] for e in evals if e["variant"] != "sft"), default=None)
    algorithm_of = {e["variant"]: e["algorithm"] for e in evals}
    for e in evals:
        if e["variant"] == "sft" or e["budget"] == last_budget:
            groups.setdefault((e["variant"], e["benchmark"]), []).append(e)
    base: dict[str, dict] = {}
    order = ["sft"] + sorted({a for a, _ in groups if a != "sft"})
    for alg in order:
        for bench in BENCHMARKS_ORDER:
            es = sorted(groups.get((alg, bench), []), key=lambda e: e["seed"])
            if not es:
                continue
            per_seed = [e["pass_at_1"] for e in es]
            probs = [e.get("problems") or {} for e in es]
            common = sorted(set.intersection(*[set(p) for p in probs])) if all(probs) else []
            if common:
                per_problem = [statistics.mean(p[i] for p in probs) for i in common]
                lo, hi = bootstrap_ci(per_problem, iters=iters, confidence=confidence, seed=0)
                mean = statistics.mean(per_problem)
            else:   # no per-problem artifacts: the mean of the seeds' own intervals
                mean = statistics.mean(per_seed)
                lo = statistics.mean(e["ci_low"] for e in es)
                hi = statistics.mean(e["ci_high"] for e in es)
            row = {"variant": alg, "algorithm": algorithm_of.get(alg, alg), "benchmark": bench, "budget": 0 if alg == "sft" else last_budget,
                   "step": es[0]["step"], "seeds": len(es), "pass_at_1": mean, "ci_low": lo,
                   "ci_high": hi, "seed_min": min(per_seed), "seed_max": max(per_seed),
                   "per_seed": per_seed, "n_problems": len(common) or es[0].get("n_problems"),
                   "_problems": dict(zip(common, per_problem)) if common else {}}
            if alg == "sft":
                base[bench] = row
            elif bench in base and row["_problems"] and base[bench]["_problems"]:
                ids = sorted(set(row["_problems"]) & set(base[bench]["_problems"]))
                diff = [row["_problems"][i] - base[bench]["_problems"][i] for i in ids]
                if diff:
                    dlo, dhi = bootstrap_ci(diff, iters=iters, confidence=confidence, seed=0)
                    row.update(vs_sft=statistics.mean(diff), vs_sft_ci_low=dlo, vs_sft_ci_high=dhi)
            rows.append(row)
    return rows


BENCHMARKS_ORDER = ("aime", "lcb", "cf")


def stability(data: dict, rule: dict) -> list[dict]:
    out = []
    for run in data["rl"]:
        rewards = [v for _, v in run["train"].get("reward_mean", [])]
        c = collapse_check(rewards, **rule)
        skipped = sum(v for _, v in run["train"].get("skipped_updates", []))
        out.append({"variant": run["variant"], "algorithm": run["algorithm"],
                    "seed": run["seed"], "status": run["status"],
                    "steps": len(rewards), "best_smoothed_reward": c["best"],
                    "best_step": c.get("best_step"), "final_smoothed_reward": c["final"],
                    "collapsed": c["collapsed"], "skipped_updates": skipped,
                    "run_id": run["run_id"]})
    return out


def _median_of(run, key: str) -> float | None:
    vals = [v for _, v in run["train"].get(key, [])]
    return statistics.median(vals) if vals else None


def _mean_of(runs, key: str) -> float | None:
    """Mean over steps, then over seeds (runs without the metric are left out)."""
    per = [statistics.mean(v for _, v in r["train"][key]) for r in runs if r["train"].get(key)]
    return statistics.mean(per) if per else None


def step_seconds(run) -> float | None:
    """Median seconds of one RL step (rollout + old log-prob pass + updates)."""
    parts = [dict(run["train"].get(k, [])) for k in
             ("time_rollout_s", "time_old_logprob_s", "time_update_s")]
    steps = set(parts[0]) & set(parts[1]) & set(parts[2])
    return statistics.median(sum(p[s] for p in parts) for s in steps) if steps else None


def paired_diff(row: dict, base: dict, *, iters: int, confidence: float) -> dict:
    """Mean per-problem difference row - base on the problems both scored, with a bootstrap
    interval; {} when either lacks per-problem scores."""
    from evaluators.metrics import bootstrap_ci

    ids = sorted(set(row.get("_problems") or {}) & set(base.get("_problems") or {}))
    if not ids:
        return {}
    d = [row["_problems"][i] - base["_problems"][i] for i in ids]
    lo, hi = bootstrap_ci(d, iters=iters, confidence=confidence, seed=0)
    return {"diff": statistics.mean(d), "diff_ci_low": lo, "diff_ci_high": hi,
            "n_problems": len(ids)}


def variant_comparisons(data: dict, table: list[dict], *, iters: int,
                        confidence: float) -> list[dict]:
    """Each variant against its baseline (the `baseline` tag of its runs), per benchmark: the
    paired score difference at the final budget, the step time and old-log-prob pass time
    (median per step, mean over seeds; saving = 1 - variant / baseline), the compute ratio and
    the engine/trainer log-prob gap of both."""
    by_var = _by_variant(data["rl"])
    rows_of = {(r["variant"], r["benchmark"]): r for r in table}
    out = []
    for var, runs in sorted(by_var.items()):
        base = runs[0].get("baseline") or ""
        if not base or base not in by_var:
            continue
        bruns = by_var[base]

        def timing(rs):
            st = [t for t in map(step_seconds, rs) if t is not None]
            ol = [t for t in (_median_of(r, "time_old_logprob_s") for r in rs) if t is not None]
            fl = [r["train"]["compute_flops"][-1][1] for r in rs if r["train"].get("compute_flops")]
            return (statistics.mean(st) if st else None, statistics.mean(ol) if ol else None,
                    statistics.mean(fl) if fl else None)

        (vs, vo, vf), (bs, bo, bf) = timing(runs), timing(bruns)
        common = {"variant": var, "baseline": base, "algorithm": runs[0]["algorithm"],
                  "seeds": len(runs), "step_s": vs, "baseline_step_s": bs,
                  "step_time_saving": (1 - vs / bs) if vs and bs else None,
                  "old_logprob_s": vo, "baseline_old_logprob_s": bo,
                  "compute_ratio": (vf / bf) if vf and bf else None,
                  # what skipping the pass can save at most: its share of the baseline's step
                  "old_logprob_share": (bo - (vo or 0.0)) / bs if bo is not None and bs else None,
                  "clip_onpolicy": _mean_of(runs, "clip_frac_tokens_onpolicy"),
                  "baseline_clip_onpolicy": _mean_of(bruns, "clip_frac_tokens_onpolicy"),
                  "logprob_gap_token": _mean_of(runs, "logprob_gap_token_mean"),
                  "baseline_logprob_gap_token": _mean_of(bruns, "logprob_gap_token_mean"),
                  "logprob_gap_seq": _mean_of(runs, "logprob_gap_seq_mean"),
                  "baseline_logprob_gap_seq": _mean_of(bruns, "logprob_gap_seq_mean")}
        for bench in BENCHMARKS_ORDER:
            r, b = rows_of.get((var, bench)), rows_of.get((base, bench))
            if r is None or b is None:
                continue
            out.append({**common, "benchmark": bench, "pass_at_1": r["pass_at_1"],
                        "baseline_pass_at_1": b["pass_at_1"],
                        **paired_diff(r, b, iters=iters, confidence=confidence)})
    return out


MOE_CLAIM = ("The paper's claim: GRPO on a mixture-of-experts model needs Routing Replay to "
             "converge (about 10% of the experts a token activates change after one update in a "
             "48-layer Qwen3-30B-A3B, which makes token-level ratios fluctuate), while GSPO, whose "
             "sequence-level ratio depends only on the sequence likelihood, trains stably "
             "without it.")


def moe_summary(data: dict, table: list[dict], stab: list[dict], *, iters: int,
                confidence: float) -> dict | None:
    """The MoE ablation: per variant, expert-activation volatility, load balance, Routing Replay
    on/off, collapses and final scores; the paper's comparisons as paired differences; and a
    plain verdict. None when no run logged moe/volatility."""
    by_var = _by_variant(data["rl"])
    moe_vars = {v: rs for v, rs in by_var.items() if any(r["train"].get("moe/volatility") for r in rs)}
    if not moe_vars:
        return None
    rows_of = {(r["variant"], r["benchmark"]): r for r in table}
    bench = next((b for b in BENCHMARKS_ORDER if any((v, b) in rows_of for v in moe_vars)), None)
    rows = []
    for var, runs in sorted(moe_vars.items()):
        vol = [statistics.mean(x for _, x in r["train"]["moe/volatility"]) for r in runs
               if r["train"].get("moe/volatility")]
        st = [x for x in stab if x["variant"] == var]
        fin = rows_of.get((var, bench), {})
        params = runs[0]["params"]
        # params are flattened JSON values ("true"), older stores may hold "True"
        replay = str(params.get("routing_replay", "")).lower() == "true"
        rows.append({
            "variant": var, "algorithm": runs[0]["algorithm"], "routing_replay": replay,
            "replay_source": params.get("routing_replay_source", "trainer") if replay else "",
            "seeds": len(runs), "volatility": statistics.mean(vol) if vol else None,
            "volatility_seed_min": min(vol) if vol else None,
            "volatility_seed_max": max(vol) if vol else None,
            "engine_routing_mismatch": _mean_of(runs, "moe/engine_routing_mismatch"),
            "load_entropy": _mean_of(runs, "moe/load_entropy"),
            "max_expert_share": _mean_of(runs, "moe/max_expert_share"),
            "routing_cache_mb": (_mean_of(runs, "moe/routing_cache_bytes") or 0) / 2**20,
            "collapsed": sum(x["collapsed"] for x in st), "benchmark": bench,
            "pass_at_1": fin.get("pass_at_1"), "ci_low": fin.get("ci_low"),
            "ci_high": fin.get("ci_high"), "vs_sft": fin.get("vs_sft"),
            "vs_sft_ci_low": fin.get("vs_sft_ci_low"), "vs_sft_ci_high": fin.get("vs_sft_ci_high")})

    def find(alg, source):     # source: "" (no replay), "trainer" (the paper's) or "engine"
        return next((r for r in rows if r["algorithm"] == alg and r["replay_source"] == source), None)

    pairs = []
    for a, b, what in ((find("grpo", ""), find("grpo", "trainer"), "GRPO without vs with Routing Replay"),
                       (find("gspo", ""), find("grpo", ""), "GSPO vs GRPO, both without replay"),
                       (find("gspo", ""), find("grpo", "trainer"), "GSPO without replay vs GRPO with it"),
                       (find("gspo", ""), find("gspo", "trainer"), "GSPO without vs with Routing Replay"),
                       (find("grpo", "engine"), find("grpo", ""),
                        "GRPO replaying the rollout engine's routing vs without replay")):
        if a and b and (a["variant"], bench) in rows_of and (b["variant"], bench) in rows_of:
            d = paired_diff(rows_of[(a["variant"], bench)], rows_of[(b["variant"], bench)],
                            iters=iters, confidence=confidence)
            if d:
                pairs.append({"comparison": what, "variant": a["variant"], "against": b["variant"],
                              "benchmark": bench, **d})
    lines = moe_verdict(rows, pairs, confidence)
    return {"rows": rows, "pairs": pairs, "benchmark": bench, "verdict": " ".join(lines),
            "verdict_lines": lines}


def moe_verdict(rows: list[dict], pairs: list[dict], confidence: float) -> list[str]:
    """A plain statement, sentence by sentence, of what the ablation shows against the paper's
    claim."""
    grpo_plain = [r for r in rows if r["algorithm"] == "grpo" and not r["routing_replay"]]
    others = [r for r in rows if r not in grpo_plain]
    seeds = sorted({r["seeds"] for r in rows})
    vol = [r["volatility"] for r in rows if r["volatility"] is not None]
    lines = [f"Seeds per variant: {', '.join(map(str, seeds))}; intervals are {confidence:.0%} "
             "bootstrap intervals over problems."]
    if vol:
        lines.append(f"Expert-activation volatility here: {min(vol):.1%} to {max(vol):.1%} of "
                     "(token, layer) top-k sets change per step (the paper: about 10% after one "
                     "update in a 48-layer model).")
    vs = [r for r in rows if r.get("vs_sft") is not None]
    if vs:
        up = [r["variant"] for r in vs if r["vs_sft_ci_low"] > 0]
        down = [r["variant"] for r in vs if r["vs_sft_ci_high"] < 0]
        lines.append(f"Against the SFT model ({rows[0]['benchmark']} pass@1, paired): "
                     f"significantly better: {', '.join(up) or 'none'}; significantly worse: "
                     f"{', '.join(down) or 'none'}; the rest within the noise"
                     + (" (RL did not improve on the SFT model at this budget, so the "
                        "comparison says little about learning speed)." if not up else "."))
    mism = [r for r in rows if r.get("engine_routing_mismatch") is not None]
    if mism:
        lines.append("Rollout engine vs trainer routing (share of (token, layer) top-k sets the "
                     "two pick differently on the same samples): "
                     + ", ".join(f"{r['variant']} {r['engine_routing_mismatch']:.2%}" for r in mism)
                     + ".")
    coll = {r["variant"]: f"{r['collapsed']}/{r['seeds']}" for r in rows}
    lines.append("Collapsed runs: " + ", ".join(f"{k} {v}" for k, v in coll.items()) + ".")
    sig = []
    for p in pairs:
        s = "above" if p["diff_ci_low"] > 0 else "below" if p["diff_ci_high"] < 0 else None
        lines.append(f"{p['comparison']} ({p['variant']} - {p['against']}, {p['benchmark']} "
                     f"pass@1): {p['diff']:+.3f} [{p['diff_ci_low']:+.3f}, "
                     f"{p['diff_ci_high']:+.3f}]" + (f", significantly {s}." if s else
                                                     ", within the noise."))
        if s:
            sig.append((p, s))
    grpo_collapses = sum(r["collapsed"] for r in grpo_plain)
    other_collapses = sum(r["collapsed"] for r in others)
    replay_helps = any(p["comparison"].startswith("GRPO without") and s == "below" for p, s in sig)
    gspo_better = any(p["comparison"].startswith("GSPO vs GRPO") and s == "above" for p, s in sig)
    if (grpo_collapses and not other_collapses) or replay_helps or gspo_better:
        lines.append("Verdict: consistent with the paper's claim at this scale "
                     + ("(GRPO without replay collapsed where the others did not)."
                        if grpo_collapses and not other_collapses else
                        "(replay or GSPO made a significant difference for GRPO's failure mode)."))
    else:
        opposite = [p["comparison"] for p, s in sig
                    if (p["comparison"].startswith("GRPO without") and s == "above")
                    or (p["comparison"].startswith("GSPO vs GRPO") and s == "below")]
        lines.append(
            "Verdict: the paper's effect is NOT reproduced at this scale: GRPO without Routing "
            "Replay neither collapsed more often nor scored significantly lower than with it or "
            "than GSPO" + (f" (significant in the opposite direction: {'; '.join(opposite)})"
                           if opposite else "") + ". A tiny random-initialised MoE changes too few routing decisions per "
            "update for token-level ratios to go wild. What would be needed: a deeper model "
            "with more experts (volatility compounds over layers; the paper's 48 layers x 128 "
            "experts, top-8), longer runs at a learning rate where volatility reaches ~10% per "
            "update, and more seeds to narrow the intervals (config/moe.yaml documents the knobs; "
            "config/real-scale.yaml shows a real Qwen3-MoE checkpoint).")
    return lines


# -- figures ---------------------------------------------------------------------------------------

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 110, "font.size": 9,
                         "svg.hashsalt": "gspo", "path.simplify": False})
    return plt


def _save(fig, path: pathlib.Path):
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)


def fig_score(data: dict, benches: list[str], path: pathlib.Path):
    plt = _plt()
    fig, axes = plt.subplots(1, max(1, len(benches)), figsize=(4.2 * max(1, len(benches)), 3.4),
                             squeeze=False)
    for ax, bench in zip(axes[0], benches):
        for var, runs in sorted(_by_variant(data["rl"]).items()):
            cur = eval_curve(runs, bench)
            if not cur:
                continue
            xs, ys, lo, hi, _ = zip(*cur)
            st = _style(var, runs)
            ax.plot(xs, ys, label=f"{var} (n={len(runs)})", **st)
            ax.fill_between(xs, lo, hi, color=st["color"], alpha=0.18, linewidth=0)
        ax.set_title(BENCH_NAMES.get(bench, bench))
        ax.set_xlabel("RL training compute (FLOPs)")
        ax.set_ylabel("pass@1")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, path)


def fig_reward(data: dict, window: int, path: pathlib.Path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for var, runs in sorted(_by_variant(data["rl"]).items()):
        cur = curve_over_seeds(runs, "reward_mean", window)
        if not cur:
            continue
        xs, ys, lo, hi = zip(*cur)
        st = {**_style(var, runs), "marker": None}
        ax.plot(xs, ys, label=f"{var} (n={len(runs)})", **st)
        ax.fill_between(xs, lo, hi, color=st["color"], alpha=0.18, linewidth=0)
    ax.set_xlabel("RL training compute (FLOPs)")
    ax.set_ylabel(f"training reward (moving mean, {window} steps)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def fig_clip(data: dict, clips: dict, path: pathlib.Path):
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    by_var = _by_variant(data["rl"])
    for var, runs in sorted(by_var.items()):
        cur = curve_over_seeds(runs, "clip_frac_tokens")
        if cur:
            steps = list(range(1, len(cur) + 1))
            a1.plot(steps, [max(y, 1e-6) for _, y, _, _ in cur], label=var,
                    **{**_style(var, runs), "marker": None})
    a1.set_yscale("log")
    a1.set_xlabel("RL step")
    a1.set_ylabel("clipped token fraction (mean over seeds)")
    a1.grid(alpha=0.3)
    a1.legend(fontsize=8)
    algs = sorted(clips)
    a2.bar(algs, [clips[a] or 0 for a in algs],
           color=[_style(a, by_var.get(a, []))["color"] or "#888" for a in algs])
    a2.tick_params(axis="x", labelrotation=20)
    a2.set_ylabel("mean clipped token fraction")
    if "grpo" in clips and clips["grpo"]:
        for i, a in enumerate(algs):
            if a != "grpo" and clips[a] is not None:
                a2.annotate(f"{clips[a] / clips['grpo']:.0f}x GRPO", (i, clips[a]),
                            ha="center", va="bottom", fontsize=8)
    a2.grid(alpha=0.3, axis="y")
    _save(fig, path)


def fig_moe(data: dict, variants: list[str], path: pathlib.Path):
    """Expert-activation volatility and router load entropy per step (mean over seeds, band =
    seed range) for the MoE variants."""
    plt = _plt()
    by_var = _by_variant(data["rl"])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for var in variants:
        runs = by_var[var]
        st = {**_style(var, runs), "marker": None}
        for ax, key in ((a1, "moe/volatility"), (a2, "moe/load_entropy")):
            cur = curve_over_seeds(runs, key)
            if cur:
                steps = list(range(1, len(cur) + 1))
                ax.plot(steps, [y for _, y, _, _ in cur], label=var, **st)
                ax.fill_between(steps, [lo for *_, lo, _ in cur], [hi for *_, hi in cur],
                                color=st["color"], alpha=0.15, linewidth=0)
    a1.set_ylabel("expert-activation volatility")
    a2.set_ylabel("router load entropy (1 = uniform)")
    for ax in (a1, a2):
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, path)


# -- html ------------------------------------------------------------------------------------------

def _fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return html.escape(str(v))


def _table(rows: list[dict], cols: list[str], digits: int = 3) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c), digits)}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def _provenance(data: dict, workflow_yaml: str | None) -> dict:
    tags = [r["tags"] for r in data["rl"] + data["sft"]]
    def uniq(key):
        return sorted({t[key] for t in tags if t.get(key)})
    versions = sorted({f"{k[len('version.'):]} {v}" for t in tags for k, v in t.items()
                       if k.startswith("version.")})
    data_hashes = sorted({f"{k[len('data_hash.'):]}: {v}" for t in tags for k, v in t.items()
                          if k.startswith("data_hash.")})
    return {"workflow_command": uniq("workflow_command"), "git_commit": uniq("git_commit"),
            "seeds": sorted({r["seed"] for r in data["rl"]}), "versions": versions,
            "data_hashes": data_hashes, "stage_commands": uniq("command"),
            "workflow_config": workflow_yaml}


def _workflow_yaml(data: dict) -> str | None:
    """The master config the aggregate run attached, if any."""
    from gspo import tracking

    cl = tracking.client(data["tracking_uri"])
    for run in tracking.stage_runs(cl, data["experiment_id"], "aggregate"):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                p = tracking.retry(cl.download_artifacts, run.info.run_id, "workflow.yaml", tmp)
                return pathlib.Path(p).read_text()
            except Exception:  # noqa: BLE001
                continue
    return None


def build(experiment: str, out: pathlib.Path, *, uri: str | None = None,
          settings: dict | None = None, log_to_mlflow: bool = True) -> dict:
    """Build the report of `experiment` into `out`; returns its headline numbers."""
    from gspo.io import atomic_write_text, write_json
    from pipeline.aggregate import collect

    s = {**DEFAULTS, **(settings or {})}
    rule = {**DEFAULTS["collapse"], **(s.get("collapse") or {})}
    data = collect(experiment, uri)
    if not data["rl"]:
        raise SystemExit(f"error: experiment {experiment!r} has no RL runs (tag stage=rl)")
    out.mkdir(parents=True, exist_ok=True)
    benches = [b for b in BENCHMARKS_ORDER if any(b in r["eval"] for r in data["rl"])]
    by_var = _by_variant(data["rl"])
    clips = {a: mean_clip(runs) for a, runs in by_var.items()}
    clips_off = {a: mean_clip(runs, "clip_frac_tokens_offpolicy") for a, runs in by_var.items()}
    ratios = {f"{a}/grpo": clips[a] / clips["grpo"] for a in clips
              if a != "grpo" and clips.get("grpo") and clips[a] is not None}

    fig_score(data, benches, out / "score_vs_compute.png")
    fig_reward(data, rule["window"], out / "reward_vs_compute.png")
    fig_clip(data, clips, out / "clip_fraction.png")

    table = final_scores(data, iters=s["bootstrap_iters"], confidence=s["confidence"])
    tcols = ["variant", "algorithm", "benchmark", "budget", "step", "seeds", "pass_at_1", "ci_low", "ci_high",
             "seed_min", "seed_max", "vs_sft", "vs_sft_ci_low", "vs_sft_ci_high", "n_problems"]
    _write_csv(out / "final_scores.csv", table, tcols)
    stab = stability(data, rule)
    scols = ["variant", "algorithm", "seed", "status", "steps", "best_smoothed_reward", "best_step",
             "final_smoothed_reward", "collapsed", "skipped_updates", "run_id"]
    _write_csv(out / "stability.csv", stab, scols)
    comps = variant_comparisons(data, table, iters=s["bootstrap_iters"], confidence=s["confidence"])
    _write_csv(out / "variants.csv", comps, VCOLS)
    moe = moe_summary(data, table, stab, iters=s["bootstrap_iters"], confidence=s["confidence"])
    _write_csv(out / "moe.csv", moe["rows"] if moe else [], MOE_COLS)
    if moe:
        fig_moe(data, [r["variant"] for r in moe["rows"]], out / "moe.png")

    wyaml = _workflow_yaml(data)
    prov = _provenance(data, wyaml)
    headline = {"experiment": experiment, "tracking_uri": data["tracking_uri"],
                "final_scores": [{k: v for k, v in r.items() if not k.startswith("_")}
                                 for r in table],
                "clip_frac_tokens": clips, "clip_frac_tokens_offpolicy": clips_off,
                "clip_ratio": ratios, "collapsed_runs": [f"{r['variant']}-seed{r['seed']}"
                                                          for r in stab if r["collapsed"]],
                "variants": comps,
                "moe": {k: v for k, v in moe.items()} if moe else None,
                "provenance": {k: v for k, v in prov.items() if k != "workflow_config"},
                "rebuild_command": f"python -m pipeline.report --experiment {experiment}"}
    write_json(out / "summary.json", headline)
    atomic_write_text(out / "index.html", _html(experiment, data, table, tcols, stab, scols,
                                                 clips, clips_off, ratios, prov, rule, benches,
                                                 comps, moe))
    if log_to_mlflow:
        _log_report(data, out)
    return headline


def _write_csv(path: pathlib.Path, rows: list[dict], cols: list[str]):
    from gspo.io import atomic_write_text

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


VCOLS = ["variant", "baseline", "algorithm", "benchmark", "seeds", "pass_at_1",
         "baseline_pass_at_1", "diff", "diff_ci_low", "diff_ci_high", "n_problems", "step_s",
         "baseline_step_s", "step_time_saving", "old_logprob_s", "baseline_old_logprob_s",
         "old_logprob_share", "compute_ratio", "logprob_gap_token", "baseline_logprob_gap_token",
         "logprob_gap_seq", "baseline_logprob_gap_seq", "clip_onpolicy", "baseline_clip_onpolicy"]
MOE_COLS = ["variant", "algorithm", "routing_replay", "replay_source", "seeds", "volatility",
            "volatility_seed_min", "volatility_seed_max", "engine_routing_mismatch",
            "load_entropy", "max_expert_share",
            "routing_cache_mb", "collapsed", "benchmark", "pass_at_1", "ci_low", "ci_high",
            "vs_sft", "vs_sft_ci_low", "vs_sft_ci_high"]


def _variants_html(comps: list[dict]) -> list[str]:
    if not comps:
        return []
    return [
        "<h2>Variants against their baselines</h2>",
        "<p>Each variant (an algorithm run with other settings, e.g. the rollout engine's own "
        "log-probs in lower precision as old log-probs) against the run it is measured against: "
        "<code>diff</code> = paired pass@1 difference at the final budget on the same problems "
        "(per-problem scores averaged over seeds, bootstrap interval); step times are the median "
        "seconds per RL step (rollout + old-log-prob pass + updates), mean over seeds, with "
        "<code>step_time_saving</code> = 1 - variant / baseline. Runs that ran side by side on a "
        "shared machine make wall times noisy; the old-log-prob pass time and the compute ratio "
        "(cumulative FLOPs) show the saving directly, and <code>old_logprob_share</code> (the "
        "pass's time as a share of the baseline's step) bounds it. <code>logprob_gap_*</code>: "
        "mean |engine log-prob - trainer log-prob| per token and per sequence "
        "(length-normalised: what GSPO's sequence ratio sees). <code>clip_onpolicy</code>: the "
        "share of response tokens whose gradient the clip removed in each step's first, "
        "on-policy minibatch, where recomputed old log-probs make every ratio exactly 1: "
        "anything above 0 there is clipping caused by the engine/trainer mismatch alone "
        "(compare the sequence gap with GSPO's clip band, 3e-4 / 4e-4).</p>",
        "<h3>Scores</h3>",
        _table(comps, ["variant", "baseline", "benchmark", "seeds", "pass_at_1",
                       "baseline_pass_at_1", "diff", "diff_ci_low", "diff_ci_high", "n_problems"]),
        "<h3>Cost and likelihood gap</h3>",
        _table(list({c["variant"]: c for c in comps}.values()),
               ["variant", "baseline", "step_s", "baseline_step_s", "step_time_saving",
                "old_logprob_s", "baseline_old_logprob_s", "old_logprob_share", "compute_ratio",
                "logprob_gap_token", "baseline_logprob_gap_token", "logprob_gap_seq",
                "baseline_logprob_gap_seq", "clip_onpolicy", "baseline_clip_onpolicy"],
               digits=4)]


def _moe_html(moe: dict | None) -> list[str]:
    if not moe:
        return []
    pcols = ["comparison", "variant", "against", "benchmark", "diff", "diff_ci_low",
             "diff_ci_high", "n_problems"]
    return [
        "<h2>Mixture of experts: Routing Replay and expert-activation volatility</h2>",
        f"<p>{html.escape(MOE_CLAIM)}</p>",
        "<img src='moe.png'>",
        "<p>Volatility: the fraction of (response token, layer) top-k expert sets of the updated "
        "policy that differ from the old policy's on the same rollouts, after each step's "
        "updates; with Routing Replay the update itself uses the old selection, but the "
        "updated router may still choose otherwise. <code>replay_source</code>: trainer (the "
        "old policy's experts, recorded in the old-log-prob pass: the paper's Routing Replay) or "
        "engine (the rollout engine's own experts, recorded while it sampled). "
        "<code>engine_routing_mismatch</code>: the share of (response token, layer) top-k sets "
        "on which the rollout engine's routers and the trainer's old policy disagree on the same "
        "samples (e.g. a bf16 engine beside the fp32 trainer). Load entropy: normalised entropy of the "
        "per-expert token share (1 = balanced). Final scores on "
        f"{html.escape(str(moe['benchmark']))}.</p>",
        _table(moe["rows"], MOE_COLS),
        _table(moe["pairs"], pcols) if moe["pairs"] else "",
        "<div class='verdict'><ul>" + "".join(f"<li>{html.escape(x)}</li>"
                                               for x in moe["verdict_lines"]) + "</ul></div>"]


def _html(experiment, data, table, tcols, stab, scols, clips, clips_off, ratios, prov, rule,
          benches, comps=(), moe=None) -> str:
    esc = html.escape
    ratio_txt = ", ".join(f"{k}: {v:.1f}x" for k, v in ratios.items()) or "-"
    clip_rows = [{"variant": a, "clip_frac_tokens": clips[a],
                  "clip_frac_tokens_offpolicy": clips_off.get(a)} for a in sorted(clips)]
    cfg = prov.get("workflow_config")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>gspo-bench report: {esc(experiment)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
        "font-size:90%;text-align:right}th{background:#eee}img{max-width:100%}"
        "pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:85%}"
        ".wide{overflow-x:auto}.verdict{background:#f4f8ff;border-left:4px solid #1f77b4;"
        "padding:.5em 1em}</style></head><body>",
        f"<h1>GSPO vs GRPO: {esc(experiment)}</h1>",
        f"<p>{len(data['rl'])} RL runs ({', '.join(sorted(_by_variant(data['rl'])))}; seeds "
        f"{prov['seeds']}), benchmarks {', '.join(benches)}. Built from the MLflow store "
        f"<code>{esc(data['tracking_uri'])}</code>, experiment id {esc(data['experiment_id'])}."
        " Compute is cumulative RL training FLOPs (generation + old log-prob pass + updates; "
        "the shared SFT compute is left out, so the SFT model sits at 0).</p>",
        "<h2>Score against training compute</h2><img src='score_vs_compute.png'>",
        "<p>pass@1 = mean over samples and problems; curve = mean over seeds, band = lowest to "
        "highest seed.</p>",
        "<h2>Final scores</h2>",
        "<p>pass@1 at the largest budget, mean over seeds, with a bootstrap interval over "
        "problems (per-problem scores averaged over seeds); <code>vs_sft</code> is the paired "
        "difference to the SFT model on the same problems.</p>",
        _table(table, tcols),
        *_variants_html(list(comps)),
        *_moe_html(moe),
        "<h2>Training reward against compute</h2><img src='reward_vs_compute.png'>",
        "<h2>Clipping</h2><img src='clip_fraction.png'>",
        f"<p>Clip-fraction ratio (mean clipped-token fraction over all steps and seeds): "
        f"<b>{esc(ratio_txt)}</b>.</p>",
        _table(clip_rows, ["variant", "clip_frac_tokens", "clip_frac_tokens_offpolicy"]),
        "<h2>Stability</h2>",
        f"<p>Collapse rule: with the training reward smoothed by a trailing moving mean over "
        f"{rule['window']} steps, a run has collapsed when its best smoothed reward is at least "
        f"{rule['min_best']} and every smoothed value in the last {rule['tail']:.0%} of its steps "
        f"is below {rule['ratio']} x that best (runs shorter than {2 * rule['window']} steps are not "
        "judged). Runs that crashed show MLflow status FAILED, killed ones KILLED.</p>",
        _table(stab, scols),
        "<h2>Provenance</h2><ul>",
        f"<li>Workflow command: <code>{esc('; '.join(prov['workflow_command']) or '-')}</code></li>",
        f"<li>Rebuild this report: <code>python -m pipeline.report --experiment "
        f"{esc(experiment)}</code> (with MLFLOW_TRACKING_URI={esc(data['tracking_uri'])})</li>",
        f"<li>Seeds: {prov['seeds']}</li>",
        f"<li>Git commit: {esc(', '.join(prov['git_commit']) or '-')}</li>",
        f"<li>Versions: {esc(', '.join(prov['versions']) or '-')} | python "
        f"{esc(sys.version.split()[0])} (report)</li>",
        f"<li>Data (sha256): {esc('; '.join(prov['data_hashes']) or '-')}</li>",
        "<li>Stage commands: <pre>" + esc("\n".join(prov["stage_commands"])) + "</pre></li></ul>",
        "<h3>Config</h3>",
        f"<pre>{esc(cfg)}</pre>" if cfg else
        "<p>(no workflow config in the store; each run's resolved config is in its MLflow params)</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _log_report(data: dict, out: pathlib.Path):
    from gspo import tracking

    cl = tracking.client(data["tracking_uri"])
    run_id = tracking.fresh_summary_run(cl, data["experiment_id"], "report")
    tracking.retry(cl.log_artifacts, run_id, str(out), "report")
    tracking.retry(cl.set_terminated, run_id, "FINISHED")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.report", description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", required=True, help="MLflow experiment (the config's experiment)")
    ap.add_argument("--tracking-uri", default=None,
                    help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db)")
    ap.add_argument("--out", default=None, help="output folder (default results/<experiment>/report)")
    ap.add_argument("--report-config", default=None, help="YAML of report settings (the workflow's)")
    ap.add_argument("--no-mlflow-log", action="store_true", help="do not log the report back to MLflow")
    args = ap.parse_args(argv)
    settings = {}
    if args.report_config:
        import yaml

        settings = yaml.safe_load(pathlib.Path(args.report_config).read_text()) or {}
    out = pathlib.Path(args.out or f"results/{args.experiment}/report")
    head = build(args.experiment, out, uri=args.tracking_uri, settings=settings,
                 log_to_mlflow=not args.no_mlflow_log)
    for r in head["final_scores"]:
        print(f"{r['variant']:18s} {r['benchmark']:5s} pass@1 {r['pass_at_1']:.4f} "
              f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] seeds {r['seeds']}")
    for k, v in head["clip_ratio"].items():
        print(f"clip-fraction ratio {k}: {v:.1f}x")
    for c in head["variants"]:
        if "diff" in c:
            sv = c["step_time_saving"]
            print(f"{c['variant']} vs {c['baseline']} {c['benchmark']}: {c['diff']:+.4f} "
                  f"[{c['diff_ci_low']:+.4f}, {c['diff_ci_high']:+.4f}], step time saving "
                  + (f"{sv:.0%}" if sv is not None else "-"))
    if head["moe"]:
        print(head["moe"]["verdict"])
    if head["collapsed_runs"]:
        print(f"collapsed: {', '.join(head['collapsed_runs'])}")
    print(f"report: {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
