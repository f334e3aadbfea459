"""The report's figures (matplotlib, Agg): score and training reward against compute, clipping,
and the MoE volatility; `draw(report, out)` writes them all."""

from __future__ import annotations

import pathlib

from evaluators.tasks import TITLES
from pipeline.report.stats import curve

COLORS = {
    "grpo": "#d62728",
    "gspo": "#1f77b4",
    "gspo_token": "#2ca02c",
    "dapo": "#ff7f0e",
    "dr_grpo": "#9467bd",
    "cispo": "#8c564b",
    "gmpo": "#e377c2",
    "sapo": "#17becf",
    "sft": "#555555",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 110,
            "font.size": 9,
            "svg.hashsalt": "gspo",
            "path.simplify": False,
        }
    )
    return plt


def _save(fig, path: pathlib.Path):
    """The figure as `path` (PNG, for the page) and beside it as SVG (vector, for a paper), both
    byte-stable: no software stamp, no date, fixed SVG ids (svg.hashsalt)."""
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
    import matplotlib.pyplot as plt

    plt.close(fig)


def style(variant: str, runs) -> dict:
    """Colour by algorithm; a variant other than the plain algorithm gets its own dash and
    marker, so 'gspo' and 'gspo-bf16-rollout' read as the same method, differently run."""
    alg = runs[0]["algorithm"] if runs else variant
    if variant == alg:
        return {"color": COLORS.get(alg), "linestyle": "-", "marker": "o"}
    k = sum(map(ord, variant))
    return {
        "color": COLORS.get(alg),
        "linestyle": ("--", ":", "-.")[k % 3],
        "marker": ("s", "^", "D", "v")[k % 4],
    }


def fig_score(report, path: pathlib.Path):
    """Each benchmark's pass@1 against RL compute on its curve population (pipeline.report.curves:
    the same problems and samples at every point, said in the panel's title), mean over seeds
    with its interval over training runs and problems as a band, the fitted scaling curve dashed
    (pipeline.report.scaling, through the same points), and CodeForces' Elo on the same
    population when its problems carry ratings."""
    plt = _plt()
    pops = {p["benchmark"]: (p["n_problems"], p["samples"]) for p in report.curve}
    panels = [(b, "pass_at_1", TITLES.get(b, b), "pass@1") for b in report.benches if b in pops]
    if any(p.get("elo") is not None for p in report.curve if p["benchmark"] == "cf"):
        panels.append(("cf", "elo", "CodeForces Elo", "Elo rating"))
    fits = {(f["variant"], f["benchmark"]): f["fitted"] for f in report.fits if f.get("fitted")}
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    for ax, (bench, metric, title, ylabel) in zip(axes[0], panels):
        band = ("ci_low", "ci_high") if metric == "pass_at_1" else ("elo_low", "elo_high")
        for var, runs in sorted(report.by_variant.items()):
            pts = [
                p
                for p in report.curve
                if p["variant"] == var and p["benchmark"] == bench and p.get(metric) is not None
            ]
            if not pts:
                continue
            xs = [p["compute_flops"] for p in pts]
            st = style(var, runs)
            ax.plot(xs, [p[metric] for p in pts], label=f"{var} (n={len(runs)})", **st)
            ax.fill_between(
                xs,
                [p[band[0]] for p in pts],
                [p[band[1]] for p in pts],
                color=st["color"],
                alpha=0.18,
                linewidth=0,
            )
            fitted = fits.get((var, bench)) if metric == "pass_at_1" else None
            if fitted:
                fx, fy = zip(*fitted)
                ax.plot(fx, fy, color=st["color"], linestyle="--", linewidth=1)
        n_probs, k = pops[bench]
        ax.set_title(
            f"{title}\nevery point: {n_probs} problems x "
            f"{f'{k} samples' if k else 'their samples'}",
            fontsize=9,
        )
        ax.set_xlabel("RL training compute (FLOPs)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, path)


def fig_final(report, path: pathlib.Path):
    """Each benchmark's final pass@1 per variant (and the SFT model): the mean with its interval
    over training runs and problems as a bar, and beside it one dot per run (seed), so the
    run-to-run spread is seen, not only summarised."""
    plt = _plt()
    benches = list(dict.fromkeys(r["benchmark"] for r in report.table))
    n = max(1, len(benches))
    fig, axes = plt.subplots(
        1, n, figsize=(max(4.2, 1.1 * len(report.by_variant) + 2) * n, 3.4), squeeze=False
    )
    for ax, bench in zip(axes[0], benches):
        rows = [r for r in report.table if r["benchmark"] == bench]
        for x, r in enumerate(rows):
            color = style(r["variant"], report.by_variant.get(r["variant"], []))["color"] or "#555"
            ax.errorbar(
                [x],
                [r["pass_at_1"]],
                yerr=[[r["pass_at_1"] - r["ci_low"]], [r["ci_high"] - r["pass_at_1"]]],
                fmt="s",
                color=color,
                capsize=4,
                markersize=6,
            )
            seeds = r.get("per_seed") or []
            # the runs beside the bar, spread a little so equal scores stay visible
            xs = [x + 0.18 + 0.04 * (k - (len(seeds) - 1) / 2) for k in range(len(seeds))]
            ax.plot(xs, seeds, "o", color=color, alpha=0.6, markersize=3.5, linestyle="none")
        ax.set_xticks(range(len(rows)), [r["variant"] for r in rows], rotation=20)
        ax.set_title(
            f"{TITLES.get(bench, bench)}\nbar: {report.settings['confidence']:.0%} "
            "interval over training runs and problems; dots: the runs",
            fontsize=8,
        )
        ax.set_ylabel("final pass@1")
        ax.grid(alpha=0.3, axis="y")
    _save(fig, path)


def fig_reward(report, path: pathlib.Path):
    """The smoothed training reward against compute, mean over seeds with the seed range."""
    plt = _plt()
    window = report.rule["window"]
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for var, runs in sorted(report.by_variant.items()):
        cur = curve(runs, "reward_mean", window)
        if not cur:
            continue
        xs, ys, lo, hi = zip(*cur)
        st = {**style(var, runs), "marker": None}
        ax.plot(xs, ys, label=f"{var} (n={len(runs)})", **st)
        ax.fill_between(xs, lo, hi, color=st["color"], alpha=0.18, linewidth=0)
    ax.set_xlabel("RL training compute (FLOPs)")
    ax.set_ylabel(f"training reward (moving mean, {window} steps)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def fig_clip(report, path: pathlib.Path):
    """The clipped token fraction per step (log scale) and its mean per variant against GRPO's."""
    plt = _plt()
    clips, groups = report.clips, report.by_variant
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for var, runs in sorted(groups.items()):
        cur = curve(runs, "clip_frac_tokens")
        if cur:
            steps = list(range(1, len(cur) + 1))
            a1.plot(
                steps,
                [max(y, 1e-6) for _, y, _, _ in cur],
                label=var,
                **{**style(var, runs), "marker": None},
            )
    a1.set_yscale("log")
    a1.set_xlabel("RL step")
    a1.set_ylabel("clipped token fraction (mean over seeds)")
    a1.grid(alpha=0.3)
    a1.legend(fontsize=8)
    algs = sorted(clips)
    a2.bar(
        algs,
        [clips[a] or 0 for a in algs],
        color=[style(a, groups.get(a, []))["color"] or "#888" for a in algs],
    )
    a2.tick_params(axis="x", labelrotation=20)
    a2.set_ylabel("mean clipped token fraction")
    if "grpo" in clips and clips["grpo"]:
        for i, a in enumerate(algs):
            if a != "grpo" and clips[a] is not None:
                a2.annotate(
                    f"{clips[a] / clips['grpo']:.0f}x GRPO",
                    (i, clips[a]),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
    a2.grid(alpha=0.3, axis="y")
    _save(fig, path)


def fig_moe(report, path: pathlib.Path):
    """Expert-activation volatility and router load entropy per step (mean over seeds, band =
    seed range) for the MoE variants."""
    plt = _plt()
    groups = report.by_variant
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for var in [r["variant"] for r in report.moe["rows"]]:
        runs = groups[var]
        st = {**style(var, runs), "marker": None}
        for ax, key in ((a1, "moe/volatility"), (a2, "moe/load_entropy")):
            cur = curve(runs, key)
            if cur:
                steps = list(range(1, len(cur) + 1))
                ax.plot(steps, [y for _, y, _, _ in cur], label=var, **st)
                ax.fill_between(
                    steps,
                    [lo for *_, lo, _ in cur],
                    [hi for *_, hi in cur],
                    color=st["color"],
                    alpha=0.15,
                    linewidth=0,
                )
    a1.set_ylabel("expert-activation volatility")
    a2.set_ylabel("router load entropy (1 = uniform)")
    for ax in (a1, a2):
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # verl's runs log no routing drift
            ax.legend(fontsize=8)
    _save(fig, path)


def draw(report, out: pathlib.Path):
    """score_vs_compute.png, final_scores.png, reward_vs_compute.png, clip_fraction.png and, for
    MoE experiments, moe.png into `out`, each with its .svg beside it."""
    fig_score(report, out / "score_vs_compute.png")
    fig_final(report, out / "final_scores.png")
    fig_reward(report, out / "reward_vs_compute.png")
    fig_clip(report, out / "clip_fraction.png")
    if report.moe:
        fig_moe(report, out / "moe.png")
    if report.offpolicy:  # score and stability against staleness (issue 45)
        from pipeline.report import offpolicy

        offpolicy.figure(report, out / "offpolicy.png", _plt())
    if report.selection_rows:  # the fair protocol's score against learning rate
        from pipeline.report import selection

        selection.figure(report.selection_rows, out / "lr.png", _plt())
