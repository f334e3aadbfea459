"""The paper's claims, one row each, with what this experiment measured and a verdict no stronger
than its intervals allow: "reproduced", "not reproduced", "inconclusive at this sample size",
"too few training runs" or "not measured here" (with where it is measured).

The rows compare the variants named `gspo` and `grpo` (the plain algorithms) at the final budget
on every evaluated benchmark, each with the interval over training runs and problems of
pipeline.report.stats.paired_diff (paired by seed; pipeline.report.resample). A verdict is about
the algorithm, so every claim measured here reads "too few training runs" when a compared
variant has fewer than resample.MIN_RUNS runs (there the interval cannot measure the run-to-run
variance, and another machine's rounding, in effect another seed, could flip the verdict); the
measured numbers are still shown. The rules, given enough runs:

(a) clipping vs learning: GSPO clips many more tokens (ratio of mean clipped-token fractions,
    GSPO/GRPO, > 1 in every seed) and learns at least as well: reproduced when every
    benchmark's interval lies above -margin; not reproduced when GSPO clips no more or some
    benchmark's interval lies wholly below -margin; otherwise inconclusive. The margin is that
    of a non-inferiority trial against an active control (FDA, "Non-Inferiority Clinical
    Trials to Establish Effectiveness", 2016: M2 a fraction of M1, the control's effect over
    placebo taken at the conservative end of its interval): a loss of at most
    NONINFERIORITY_FRACTION of the gain GRPO demonstrably makes over the SFT model, i.e. of the
    lower end of GRPO - SFT's interval on that benchmark, and 0 where GRPO shows no gain. A fixed
    margin (0.03 pass@1 here before) measured nothing on a benchmark where RL itself gains less
    than that, and a verdict decided by where a noisy interval ends against it flipped between
    seed sets (docs/EXPERIMENTS.md); with a margin of 0 "at least as well" needs GSPO higher;
(b) score at matched training compute: both take the same steps, so the final budget is matched
    compute when the FLOPs agree within COMPUTE_TOLERANCE; reproduced when some benchmark's
    interval lies above 0 and none below, not reproduced when some lies below 0 and none above,
    else (mixed, or every interval around 0) inconclusive;
(c) stability: collapsed runs (the report's collapse rule) and the drop from the best to the
    final smoothed reward, per algorithm; reproduced when GRPO collapses in some runs and GSPO
    in none, not reproduced when GSPO collapses at least as often as GRPO and does so at all,
    otherwise inconclusive (no run collapsed: nothing to tell apart);
(d) MoE without Routing Replay, (e) engine likelihoods: from this experiment's MoE ablation
    (pipeline.report.verdicts, under the same MIN_RUNS) or engine-likelihood variants when it
    has them, else "not measured here", naming the experiment (config/moe.yaml,
    config/precision.yaml) and linking its report when it has been built.
"""

from __future__ import annotations

import statistics

from pipeline.report import stats
from pipeline.report.resample import MIN_RUNS, TOO_FEW_RUNS

NONINFERIORITY_FRACTION = 0.2  # "at least as well": GSPO keeps >= 80% of GRPO's gain over SFT
COMPUTE_TOLERANCE = 0.10  # relative FLOPs difference still counted as matched compute
CLAIMS = {
    "clipping": "(a) GSPO clips far more tokens (~100x) yet learns at least as well as GRPO",
    "compute": "(b) GSPO scores higher than GRPO at matched training compute",
    "stability": "(c) GSPO trains stably; GRPO's reward can collapse",
    "moe": "(d) GSPO needs no Routing Replay on MoE models",
    "engine": "(e) GSPO tolerates the inference engine's likelihoods in place of recomputed ones",
}
RELATED = {"moe": "moe", "engine": "precision"}  # the experiments that measure (d) and (e)


def _interval(d: dict) -> str:
    """A difference with its interval, the runs behind it and its run-to-run share."""
    notes = ([f"{d['runs']} runs"] if d.get("runs") is not None else []) + (
        [f"{d['var_share_runs']:.0%} of its variance run-to-run"]
        if d.get("var_share_runs") is not None
        else []
    )
    return f"{d['diff']:+.3f} [{d['diff_ci_low']:+.3f}, {d['diff_ci_high']:+.3f}]" + (
        f" ({'; '.join(notes)})" if notes else ""
    )


def _row(key: str, measured: str, verdict: str, why: str, **extra) -> dict:
    return {
        "claim": CLAIMS[key],
        "key": key,
        "measured": measured,
        "verdict": verdict,
        "why": why,
        **extra,
    }


def _enough_runs(row: dict, runs: int | None) -> dict:
    """`row`, or with too few training runs of an arm (fewer than MIN_RUNS) the verdict "too few
    training runs" in place of its verdict; what was measured stays."""
    if runs is None or runs >= MIN_RUNS or row["verdict"] == "not measured here":
        return row
    return {
        **row,
        "verdict": TOO_FEW_RUNS,
        "runs": runs,
        "why": (
            f"{runs} training run(s) of a compared variant; a verdict about the algorithm "
            f"needs at least {MIN_RUNS} (fewer cannot measure the run-to-run variance)"
        ),
    }


def _seed_clip_ratios(runs_a, runs_b) -> list[float]:
    clip_b = {r["seed"]: stats.mean_metric([r]) for r in runs_b}
    out = []
    for r in runs_a:
        a, b = stats.mean_metric([r]), clip_b.get(r["seed"])
        if a is not None and b:
            out.append(a / b)
    return out


def _diffs_text(diffs: dict) -> str:
    return "; ".join(f"{b} {_interval(d)}" for b, d in diffs.items())


def margin(control_vs_sft_low) -> float:
    """The non-inferiority margin on a benchmark: NONINFERIORITY_FRACTION of the control's
    demonstrated gain over the SFT model (the lower end of its interval), 0 without one."""
    if control_vs_sft_low is None:
        return 0.0
    return NONINFERIORITY_FRACTION * max(0.0, control_vs_sft_low)


def _margins_text(margins: dict) -> str:
    return ", ".join(f"{b} {m:.3f}" for b, m in margins.items())


def clipping(groups: dict, diffs: dict, conf: float, margins: dict) -> dict:
    """(a): more clipping in every seed, and no benchmark worse beyond its margin (`margins`:
    benchmark -> margin())."""
    ratios = _seed_clip_ratios(groups["gspo"], groups["grpo"])
    if not ratios or not diffs:
        return _row("clipping", "-", "not measured here", "no clip fractions or scores of both")
    mean_ratio = statistics.mean(ratios)
    measured = (
        f"clip ratio GSPO/GRPO {mean_ratio:.1f}x (seeds {min(ratios):.1f}-"
        f"{max(ratios):.1f}x); pass@1 GSPO - GRPO: {_diffs_text(diffs)}; margins "
        f"({NONINFERIORITY_FRACTION:.0%} of GRPO's gain over SFT): "
        f"{_margins_text(margins)}"
    )
    worse = [b for b, d in diffs.items() if d["diff_ci_high"] < -margins[b]]
    unsure = [b for b, d in diffs.items() if d["diff_ci_low"] <= -margins[b]]
    if min(ratios) <= 1 or worse:
        verdict = "not reproduced"
        why = (
            "GSPO clipped no more tokens than GRPO in some seed"
            if min(ratios) <= 1
            else f"GSPO scored lower by more than its margin on {', '.join(worse)} (the whole "
            f"{conf:.0%} interval)"
        )
    elif not unsure:
        verdict = "reproduced"
        why = (
            "GSPO clipped more in every seed and every benchmark's interval lies above "
            "minus its margin"
        )
    else:
        flat = [b for b in unsure if margins[b] == 0]
        verdict = "inconclusive at this sample size"
        why = (
            f"the interval on {', '.join(unsure)} reaches below minus its margin: a loss "
            "cannot be ruled out"
            + (
                f" (on {', '.join(flat)} GRPO shows no gain over the SFT model to keep, so "
                "only a higher score would show GSPO learns at least as well)"
                if flat
                else ""
            )
        )
    return _row("clipping", measured, verdict, why, clip_ratio=mean_ratio, margins=margins)


def compute(groups: dict, diffs: dict, conf: float) -> dict:
    """(b): at matched compute, higher on some benchmark and lower on none."""
    flops = [stats._timing(groups[a])[2] for a in ("gspo", "grpo")]
    if not diffs or not all(flops):
        return _row("compute", "-", "not measured here", "no final scores or compute of both")
    ratio = flops[0] / flops[1]
    measured = (
        f"pass@1 GSPO - GRPO at the final budget: {_diffs_text(diffs)}; training "
        f"compute GSPO/GRPO {ratio:.2f}"
    )
    if abs(ratio - 1) > COMPUTE_TOLERANCE:
        return _row(
            "compute",
            measured,
            "inconclusive at this sample size",
            f"compute differs by more than {COMPUTE_TOLERANCE:.0%}: not matched",
            compute_ratio=ratio,
        )
    above = [b for b, d in diffs.items() if d["diff_ci_low"] > 0]
    below = [b for b, d in diffs.items() if d["diff_ci_high"] < 0]
    if above and not below:
        verdict = "reproduced"
        why = f"higher on {', '.join(above)} (whole {conf:.0%} interval above 0), lower on none"
    elif below and not above:
        verdict = "not reproduced"
        why = f"lower on {', '.join(below)} (whole {conf:.0%} interval below 0), higher on none"
    else:
        verdict = "inconclusive at this sample size"
        why = (
            f"mixed: higher on {', '.join(above)}, lower on {', '.join(below)}"
            if above
            else "every interval contains 0"
        )
    return _row("compute", measured, verdict, why, compute_ratio=ratio)


def stability(stab: list[dict]) -> dict:
    per = {}
    for alg in ("gspo", "grpo"):
        rows = [r for r in stab if r["variant"] == alg]
        drops = [
            r["best_smoothed_reward"] - r["final_smoothed_reward"]
            for r in rows
            if r["best_smoothed_reward"] is not None and r["final_smoothed_reward"] is not None
        ]
        per[alg] = (
            sum(bool(r["collapsed"]) for r in rows),
            len(rows),
            statistics.mean(drops) if drops else None,
        )
    if not per["gspo"][1] or not per["grpo"][1]:
        return _row("stability", "-", "not measured here", "needs runs of both")
    measured = "; ".join(
        f"{a.upper()} collapsed {c}/{n}, reward drop best-final "
        + (f"{d:.3f}" if d is not None else "-")
        for a, (c, n, d) in per.items()
    )
    (gc, gn, _), (rc, rn, _) = per["gspo"], per["grpo"]
    if rc > 0 and gc == 0:
        verdict, why = "reproduced", "GRPO collapsed in some runs, GSPO in none"
    elif gc > 0 and gc / gn >= rc / rn:
        verdict, why = "not reproduced", "GSPO collapsed at least as often as GRPO"
    else:
        verdict = "inconclusive at this sample size"
        why = (
            "no run collapsed, so these runs cannot tell the two apart"
            if gc == rc == 0
            else "both collapsed, GSPO less often: too few runs to tell"
        )
    return _enough_runs(_row("stability", measured, verdict, why), min(gn, rn))


def moe(report) -> dict:
    if not report.moe:
        return _row(
            "moe",
            "-",
            "not measured here",
            "this experiment trains a dense model; config/moe.yaml runs the ablation",
            experiment=RELATED["moe"],
        )
    lines = report.moe.get("verdict_lines") or []
    last = lines[-1] if lines else ""
    verdict = (
        "reproduced"
        if "consistent with the paper" in last.lower()
        else "not reproduced"
        if "not reproduced" in last.lower()
        else TOO_FEW_RUNS
        if TOO_FEW_RUNS in last.lower()
        else "inconclusive at this sample size"
    )
    return _row(
        "moe",
        "; ".join(
            f"{p['variant']} - {p['against']} {_interval(p)}" for p in report.moe.get("pairs") or []
        )
        or "-",
        verdict,
        last or "see the MoE section",
    )


def engine(report, rows_of: dict) -> dict:
    """(e): the GSPO variant on the engine's likelihoods against its baseline, non-inferior
    within the margin of the baseline's gain over the SFT model (`rows_of`: (variant,
    benchmark) -> final-score row)."""
    rows = [
        c
        for c in report.comparisons
        if c.get("logprob_gap_token") is not None
        and c.get("baseline_logprob_gap_token") is None
        and c.get("diff") is not None
        and c["algorithm"] == "gspo"
    ]
    if not rows:
        return _row(
            "engine",
            "-",
            "not measured here",
            "no GSPO variant here takes the engine's log-probs; config/precision.yaml "
            "runs that comparison",
            experiment=RELATED["engine"],
        )
    c = rows[0]
    measured = (
        f"{c['variant']} - {c['baseline']} ({c['benchmark']} pass@1) {_interval(c)}, "
        f"log-prob gap per token {c['logprob_gap_token']:.2e}"
    )
    m = margin((rows_of.get((c["baseline"], c["benchmark"])) or {}).get("vs_sft_ci_low"))
    if c["diff_ci_high"] < -m:
        verdict, why = "not reproduced", "the engine's likelihoods made GSPO score lower"
    elif c["diff_ci_low"] > -m:
        verdict, why = "reproduced", f"the interval lies above -{m:.3f} (its margin)"
    else:
        verdict, why = (
            "inconclusive at this sample size",
            f"the interval reaches below -{m:.3f} (its margin)",
        )
    return _enough_runs(_row("engine", measured, verdict, why), c.get("runs"))


def claims(report) -> list[dict]:
    """One row per claim (see the module doc), in the paper's order."""
    groups = report.by_variant
    rows_of = {(r["variant"], r["benchmark"]): r for r in report.table}
    conf = report.settings["confidence"]
    diffs = {}
    for bench in dict.fromkeys(r["benchmark"] for r in report.table):
        pair = rows_of.get(("gspo", bench)), rows_of.get(("grpo", bench))
        d = (
            stats.paired_diff(*pair, iters=report.settings["bootstrap_iters"], confidence=conf)
            if all(pair)
            else {}
        )
        if d:
            diffs[bench] = d
    both = "gspo" in groups and "grpo" in groups
    # the fewest training runs behind a number of (a) and (b): each algorithm's, each interval's
    runs = min(
        [len(groups[a]) for a in ("gspo", "grpo") if a in groups]
        + [d["runs"] for d in diffs.values() if d.get("runs") is not None],
        default=None,
    )
    margins = {b: margin((rows_of.get(("grpo", b)) or {}).get("vs_sft_ci_low")) for b in diffs}
    out = [
        _enough_runs(clipping(groups, diffs, conf, margins), runs)
        if both
        else _row("clipping", "-", "not measured here", "needs the variants gspo and grpo"),
        _enough_runs(compute(groups, diffs, conf), runs)
        if both
        else _row("compute", "-", "not measured here", "needs the variants gspo and grpo"),
    ]
    out += [stability(report.stability), moe(report), engine(report, rows_of)]
    from pipeline.report import offpolicy  # the follow-up's (f), (g): staleness

    return out + offpolicy.claim_rows(report)


def link_related(rows: list[dict], out) -> None:
    """Point each "not measured here" row at its experiment's report beside `out`
    (results/<experiment>/report/index.html), when that report has been built."""
    import pathlib

    for row in rows:
        exp = row.get("experiment")
        if (
            exp
            and (
                pathlib.Path(out).resolve().parent.parent / exp / "report" / "index.html"
            ).is_file()
        ):
            row["link"] = f"../../{exp}/report/index.html"
