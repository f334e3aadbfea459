"""The off-policy experiment's part of the report (config/offpolicy.yaml, issue 45): score and
stability against staleness per objective, and the GSPO authors' follow-up claims (arXiv
2512.01374) as rows of the claims table.

Runs are grouped by (objective, staleness): a run's staleness is its `staleness` parameter
(rl.staleness, 0 when absent) and its objective the on-policy run it is measured against (its
baseline, gspo_workflow.offpolicy names them so) or, at staleness 0, its own variant.

(f) "on-policy training (with importance sampling) is the most stable": for each objective with
    stale runs, each staleness against staleness 0 on the paired final-score interval
    (pipeline.report.stats.variant_comparisons) and the collapse count. Reproduced when no
    stale run does better (no interval wholly above 0, no fewer collapses where the on-policy
    runs collapsed) and some does worse (an interval wholly below 0, or more collapses); not
    reproduced when some stale run does better; otherwise inconclusive.
(g) "off-policy training needs clipping": at each staleness > 0, an unclipped objective (a clip
    range no ratio the log-ratio clamp allows can leave: eps_low >= 1 and 1 + eps_high >=
    exp(log_ratio_clamp)) against the plain clipped run of its algorithm at that staleness, on
    the paired final-score interval and the collapse count. Reproduced when the unclipped arm
    does worse (an interval wholly below 0, or more collapses) at some staleness and better at
    none; not reproduced when it does better somewhere and worse nowhere; otherwise
    inconclusive; not measured here without an unclipped arm (config/offpolicy.yaml has one to
    switch on).
Both need resample.MIN_RUNS runs per compared arm, as the paper's claims do.
"""

from __future__ import annotations

import math
import pathlib
import statistics

from pipeline.report import stats
from pipeline.report.resample import MIN_RUNS, TOO_FEW_RUNS

CLAIMS = {
    "onpolicy": "(f) follow-up: on-policy training with importance sampling is the most stable",
    "offpolicy_clip": "(g) follow-up: off-policy (stale) training needs clipping",
}
COLS = [
    "objective",
    "algorithm",
    "staleness",
    "variant",
    "seeds",
    "collapsed",
    "reward_drop",
    "clip_frac_tokens",
    "clip_frac_seqs",
    "ratio_spread",
    "benchmark",
    "pass_at_1",
    "ci_low",
    "ci_high",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
]


def staleness_of(run) -> int:
    return int(float((run.get("params") or {}).get("staleness", 0) or 0))


def objective_of(run) -> str:
    return (run.get("baseline") or run["variant"]) if staleness_of(run) else run["variant"]


def _unclipped(run) -> bool:
    p = run.get("params") or {}
    try:
        low, high = float(p.get("eps_low")), float(p.get("eps_high"))
    except (TypeError, ValueError):
        return False
    clamp = float(p.get("log_ratio_clamp", 20.0))
    return low >= 1.0 and 1.0 + high >= math.exp(clamp)


def points(report) -> list[dict]:
    """One row per (objective, staleness, benchmark) with its variant's runs' stability, mean
    clip fractions and ratio spread (behaviour_log_ratio_std), final pass@1 and its paired
    difference against the objective's on-policy run; [] without stale runs."""
    groups = stats.by_variant(report.data["rl"])
    if not any(staleness_of(r[0]) for r in groups.values()):
        return []
    rows_of = {(r["variant"], r["benchmark"]): r for r in report.table}
    diffs = {(c["variant"], c["benchmark"]): c for c in report.comparisons}
    out = []
    for var, runs in groups.items():
        stab = [s for s in report.stability if s["variant"] == var]
        drops = [
            s["best_smoothed_reward"] - s["final_smoothed_reward"]
            for s in stab
            if s["best_smoothed_reward"] is not None and s["final_smoothed_reward"] is not None
        ]
        common = {
            "objective": objective_of(runs[0]),
            "algorithm": runs[0]["algorithm"],
            "staleness": staleness_of(runs[0]),
            "variant": var,
            "seeds": len(runs),
            "unclipped": _unclipped(runs[0]),
            "collapsed": sum(bool(s["collapsed"]) for s in stab),
            "reward_drop": statistics.mean(drops) if drops else None,
            "clip_frac_tokens": stats.mean_metric(runs),
            "clip_frac_seqs": stats.mean_metric(runs, "clip_frac_seqs"),
            "ratio_spread": stats.mean_metric(runs, "behaviour_log_ratio_std"),
        }
        for bench in _benches(report):
            fin, d = rows_of.get((var, bench)) or {}, diffs.get((var, bench)) or {}
            out.append(
                {
                    **common,
                    "benchmark": bench,
                    **{k: fin.get(k) for k in ("pass_at_1", "ci_low", "ci_high")},
                    **{k: d.get(k) for k in ("diff", "diff_ci_low", "diff_ci_high")},
                }
            )
    return sorted(out, key=lambda r: (r["objective"], r["staleness"], str(r["benchmark"])))


def _benches(report) -> list:
    """The benchmarks with final scores (None alone without any: stability is still shown)."""
    return list(dict.fromkeys(r["benchmark"] for r in report.table)) or [None]


def _row(key: str, measured: str, verdict: str, why: str, runs: int | None = None) -> dict:
    if runs is not None and runs < MIN_RUNS and verdict != "not measured here":
        verdict = TOO_FEW_RUNS
        why = f"{runs} training run(s) of a compared arm; a verdict needs at least {MIN_RUNS}"
    row = {"claim": CLAIMS[key], "key": key, "measured": measured, "verdict": verdict}
    return {**row, "why": why, "experiment": "offpolicy"}


def _fmt(p: dict) -> str:
    d = (
        f"{p['diff']:+.3f} [{p['diff_ci_low']:+.3f}, {p['diff_ci_high']:+.3f}]"
        if p.get("diff") is not None
        else "-"
    )
    return f"{p['objective']} k={p['staleness']}: {d}, collapsed {p['collapsed']}/{p['seeds']}"


def onpolicy(pts: list[dict]) -> dict:
    """(f): each stale arm against its objective's on-policy one (module doc)."""
    base = {(p["objective"], p["benchmark"]): p for p in pts if p["staleness"] == 0}
    stale = [p for p in pts if p["staleness"] and (p["objective"], p["benchmark"]) in base]
    if not stale:
        return _row("onpolicy", "-", "not measured here", "no stale runs beside on-policy ones")
    better, worse = [], []
    for p in stale:
        b = base[p["objective"], p["benchmark"]]
        if (p.get("diff_ci_low") or 0) > 0 or p["collapsed"] < b["collapsed"]:
            better.append(p)
        elif (p.get("diff_ci_high") if p.get("diff") is not None else 1) < 0 or (
            p["collapsed"] > b["collapsed"]
        ):
            worse.append(p)
    measured = "; ".join(_fmt(p) for p in stale)
    if better:
        verdict, why = (
            "not reproduced",
            "stale training did better: "
            + ", ".join(f"{p['objective']} k={p['staleness']}" for p in better),
        )
    elif worse:
        verdict, why = (
            "reproduced",
            "no stale run did better, and some did worse: "
            + ", ".join(f"{p['objective']} k={p['staleness']}" for p in worse),
        )
    else:
        verdict = "inconclusive at this sample size"
        why = "every interval contains 0 and collapses are as many: nothing to tell apart"
    return _row("onpolicy", measured, verdict, why, min(p["seeds"] for p in pts))


def clipping(report, pts: list[dict]) -> dict:
    """(g): the unclipped arm against the clipped run of its algorithm, staleness by staleness,
    on the paired final-score interval and the collapse count."""
    by = {(p["variant"], p["benchmark"]): p for p in pts}
    rows_of = {(r["variant"], r["benchmark"]): r for r in report.table}
    pairs = []
    for p in pts:
        if not (p["unclipped"] and p["staleness"]):
            continue
        clipped = next(
            (
                q
                for q in pts
                if q["objective"] == q["algorithm"] == p["algorithm"]
                and q["staleness"] == p["staleness"]
                and q["benchmark"] == p["benchmark"]
            ),
            None,
        )
        if clipped is None:
            continue
        a, b = (
            rows_of.get((p["variant"], p["benchmark"])),
            rows_of.get((clipped["variant"], p["benchmark"])),
        )
        s = report.settings
        d = (
            stats.paired_diff(a, b, iters=s["bootstrap_iters"], confidence=s["confidence"])
            if a and b
            else {}
        )
        pairs.append((p, by[clipped["variant"], p["benchmark"]], d))
    if not pairs:
        return _row(
            "offpolicy_clip",
            "-",
            "not measured here",
            "needs an unclipped arm at staleness > 0 (config/offpolicy.yaml's gspo-noclip "
            "entry); clip fractions against staleness are in the off-policy figure",
        )
    worse = [
        p for p, q, d in pairs if d.get("diff_ci_high", 0) < 0 or p["collapsed"] > q["collapsed"]
    ]
    better = [
        p for p, q, d in pairs if d.get("diff_ci_low", 0) > 0 or p["collapsed"] < q["collapsed"]
    ]
    measured = "; ".join(
        f"{p['variant']} - {q['variant']}: "
        + (f"{d['diff']:+.3f} [{d['diff_ci_low']:+.3f}, {d['diff_ci_high']:+.3f}]" if d else "-")
        + f", collapsed {p['collapsed']} vs {q['collapsed']}"
        for p, q, d in pairs
    )
    if worse and not better:
        verdict, why = "reproduced", f"without the clip, stale training did worse at {_ks(worse)}"
    elif better and not worse:
        verdict, why = "not reproduced", f"without the clip it did better at {_ks(better)}"
    else:
        verdict = "inconclusive at this sample size"
        why = "mixed" if worse else "every interval contains 0 and collapses are as many"
    return _row("offpolicy_clip", measured, verdict, why, min(p["seeds"] for p in pts))


def _ks(pts: list[dict]) -> str:
    return ", ".join(f"{p['variant']} (k={p['staleness']})" for p in pts)


def claim_rows(report) -> list[dict]:
    """(f) and (g) of report.offpolicy (points), or "not measured here" without stale runs."""
    pts = report.offpolicy
    if not pts:
        why = "no stale runs here; config/offpolicy.yaml runs the staleness experiment"
        return [_row(k, "-", "not measured here", why) for k in CLAIMS]
    return [onpolicy(pts), clipping(report, pts)]


def figure(report, path: pathlib.Path, plt) -> None:
    """Score (final pass@1 with its interval), collapses and reward drop, and the clipped-token
    fraction against staleness, one line per objective."""
    pts = [p for p in report.offpolicy if p["benchmark"] == _benches(report)[0]]
    panels = [
        ("pass_at_1", f"final pass@1 ({pts[0]['benchmark']})"),
        ("collapsed", "collapsed runs"),
        ("reward_drop", "reward drop (best - final)"),
        ("clip_frac_tokens", "clipped-token fraction"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        for obj in dict.fromkeys(p["objective"] for p in pts):
            line = sorted((p for p in pts if p["objective"] == obj), key=lambda p: p["staleness"])
            line = [p for p in line if p.get(key) is not None]
            xs, ys = [p["staleness"] for p in line], [p[key] for p in line]
            ax.plot(xs, ys, marker="o", label=obj)
            if key == "pass_at_1" and all(p.get("ci_low") is not None for p in line):
                ax.fill_between(
                    xs, [p["ci_low"] for p in line], [p["ci_high"] for p in line], alpha=0.15
                )
        ax.set_title(title)
        ax.set_xlabel("staleness k (steps)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
    plt.close(fig)


def section(report, table) -> list[str]:
    """The page's off-policy section (none without stale runs); `table(rows, cols)`: the
    page's table renderer (pipeline.report.html.table)."""
    if not report.offpolicy:
        return []
    cols = [c for c in COLS if c not in ("ci_low", "ci_high")]
    return [
        "<h2>Score and stability against staleness</h2><img src='offpolicy.png'>",
        "<p>Each objective trained with rollouts from the policy k steps back (rl.staleness); "
        "diff is the paired final-score difference against its on-policy runs with its "
        "interval over training runs and problems; ratio_spread the mean per-step standard "
        "deviation of the sequence log-ratio against the behaviour policy.</p>",
        table(report.offpolicy, cols),
    ]
