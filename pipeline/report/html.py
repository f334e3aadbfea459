"""The report's page: `render(report)` is index.html's text (the figures beside it by name)."""

from __future__ import annotations

import sys
from html import escape as esc

from gspo.tracking.store import ui_link
from pipeline.report import offpolicy
from pipeline.report.model import FIT_COLS, MOE_COLS, PAGE_TABLE_COLS, STABILITY_COLS
from pipeline.report.resample import MIN_RUNS
from pipeline.report.sidebyside import section as side_by_side
from pipeline.report.verdicts import MOE_CLAIM

STYLE = (
    "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
    "font-size:90%;text-align:right}th{background:#eee}img{max-width:100%}"
    "pre{background:#f6f6f6;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere;"
    "font-size:85%}"
    ".wide{overflow-x:auto}.verdict{background:#f4f8ff;border-left:4px solid #1f77b4;"
    "padding:.5em 1em}td.yes{background:#e6f4e6}td.no{background:#fbe6e6}"
    "td.open{background:#fff6e0}.claims td,.claims th{text-align:left}"
    ".sbs{width:100%;table-layout:fixed}.sbs td{text-align:left;vertical-align:top}"
    "</style></head><body>"
)


def _fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):  # compute (FLOPs) and the like in scientific notation
        return f"{v:.3e}" if abs(v) >= 1e5 else f"{v:.{digits}f}"
    if isinstance(v, list):  # per-run numbers (per_seed, per_seed_diff)
        return ", ".join(_fmt(x, digits) for x in v)
    return esc(str(v))


def _intervals(report) -> str:
    """What every interval about an algorithm is (pipeline.report.resample), in one paragraph."""
    return (
        f"<p>Intervals are {report.settings['confidence']:.0%} intervals over training runs "
        "and problems: a two-level bootstrap that draws the seeds (training runs) with "
        "replacement, then the problems, one problem draw shared by both sides of a "
        "difference; differences between variants with the same seeds are paired by seed, "
        "the SFT model is one fixed run. With few runs the interval is widened by the "
        "Student t factor of the run-to-run variance's degrees of freedom. "
        "<code>var_share_runs</code> is the share of an interval's variance that is "
        "run-to-run (the rest: which problems were drawn); <code>per_seed</code> / "
        "<code>per_seed_diff</code> are the runs' own numbers. A verdict about an algorithm "
        f"needs at least {MIN_RUNS} training runs per compared variant; with fewer it reads "
        "<i>too few training runs</i>.</p>"
    )


# The page is at most PAGE_PX wide (STYLE's max-width less its padding); a table whose columns
# need more is split into several, each repeating the row's key columns, so that at 1280 px no
# table is cut off or scrolls sideways (tests/test_mlflow_ui.py measures it in Chromium).
PAGE_PX = 1040
KEYS = ("variant", "comparison", "benchmark", "budget", "seed")


def _min_px(texts) -> float:
    """A column's narrowest width in px: its longest unbreakable run of text (headers break at
    underscores, lists after their commas) at ~8 px a character, plus the cell's padding."""
    return 8.0 * max((len(w) for t in texts for w in t.replace("_", " ").split()), default=1) + 20


def _groups(rows: list[dict], cols: list[str], digits: int) -> list[list[str]]:
    """`cols` in groups that each fit PAGE_PX, every group led by the key columns."""
    width = {c: _min_px([c] + [_fmt(r.get(c), digits) for r in rows]) for c in cols}
    keys = [c for c in cols if c in KEYS]
    room = PAGE_PX - sum(width[c] for c in keys)
    groups: list[list[str]] = [[]]
    for c in (c for c in cols if c not in keys):
        if groups[-1] and sum(width[x] for x in groups[-1]) + width[c] > room:
            groups.append([])
        groups[-1].append(c)
    return [keys + g for g in groups if g] or [keys]


def table(rows: list[dict], cols: list[str], digits: int = 3) -> str:
    """An HTML table of `rows` (dicts) with the columns `cols`; None shows as '-'. Split into
    several tables, each with the key columns, where one would not fit the page."""
    out = []
    for group in _groups(rows, cols, digits):
        head = "".join(f"<th>{esc(c).replace('_', '_<wbr>')}</th>" for c in group)
        body = "".join(
            "<tr>" + "".join(f"<td>{_fmt(r.get(c), digits)}</td>" for c in group) + "</tr>"
            for r in rows
        )
        out.append(f"<table><tr>{head}</tr>{body}</table>")
    return "<div class='wide'>" + "".join(out) + "</div>"


def _scores(report) -> list[str]:
    data, prov = report.data, report.provenance
    return [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>gspo-bench report: {esc(report.experiment)}</title>",
        STYLE,
        f"<h1>GSPO vs GRPO: {esc(report.experiment)}</h1>",
        f"<p>{len(data['rl'])} RL runs ({', '.join(sorted(report.by_variant))}; seeds "
        f"{prov['seeds']}), benchmarks {', '.join(report.benches)}. Built from the MLflow store "
        f"<code>{esc(data['tracking_uri'])}</code>, experiment id {esc(data['experiment_id'])}."
        " Compute is cumulative RL training FLOPs (generation + old log-prob pass + updates; "
        "the shared SFT compute is left out, so the SFT model sits at 0).</p>",
        *_claims(report),
        *_selection(report),
        *offpolicy.section(report, table),
        *_curve(report),
        "<h2>Final scores</h2><img src='final_scores.png'>",
        "<p>pass@1 at the largest budget, mean over seeds and problems, with its interval over "
        "training runs and problems (bars; the dots beside them are the runs, one per seed); "
        "<code>vs_sft</code> is the difference to the SFT model on the same problems "
        "(<code>vs_sft_var_share_runs</code>: its run-to-run share).</p>",
        _intervals(report),
        "<p>CodeForces rows also give the Elo of the problems solved at the final budget "
        "(scores averaged over seeds), with an interval over training runs and problems (the "
        "likelihood-ratio interval over problems widened by the spread of each run's own Elo) "
        "and its percentile among "
        "a reference distribution of human ratings (evaluators.benchmarks.codeforces; normal, mean 1400, "
        "sd 350: an approximation, not official data).</p>",
        table(report.table, PAGE_TABLE_COLS),
    ]


def _curve(report) -> list[str]:
    """The score-against-compute figure, its population, what the shared draw contributes and
    the points themselves (pipeline.report.curves)."""
    conf = f"{report.settings['confidence']:.0%}"
    pops = (
        "; ".join(
            f"{esc(d['benchmark'])}: {d['n_problems']} problems x {d['samples'] or 'their'} samples"
            for d in report.draws
        )
        or "-"
    )
    return [
        "<h2>Score against training compute</h2><img src='score_vs_compute.png'>",
        "<p>Every point of a benchmark's curves, the SFT model's (compute 0), each intermediate "
        "budget's and the last's, is computed on <b>one population</b>: the problems every "
        "evaluation of that benchmark scored and each problem's first k samples, k the fewest "
        f"any drew ({pops}). The evaluations nest (a problem's j-th sample is seeded by the "
        "evaluation seed, its id and j alone), so a larger evaluation's part on this population "
        "is exactly the smaller evaluation; the final scores and the claims use the full final "
        f"evaluation. pass@1 = mean over samples and problems; curve = mean over seeds, band = "
        f"its {conf} interval over training runs and problems. The dashed line is the ScaleRL "
        "fit through the same points. CodeForces Elo: the rating whose expected solves match "
        "the problems solved (a problem counts as solved when at least half its samples pass), "
        "on the same population.</p>",
        "<p>What the evaluation draw contributes: all checkpoints and runs are sampled with one "
        "evaluation seed (common random numbers), so the draw's luck is shared by every point "
        "of a curve and does not average out over seeds: it moves a curve's level more than "
        "its shape. Per benchmark, the standard deviation of a curve point (mean over the RL "
        "points) and its parts: run-to-run, problems (which problems, and their samples), and "
        "within the latter the draw (each problem's k-sample mean's own spread, p(1-p)/(k-1) "
        "per problem), with the draw's share of a point's variance (an upper bound: the draw "
        "counted as shared by every run, capped at 1; near 1, the problems' spread at this "
        "population is their samples' noise, and more samples, not more seeds, narrow it).</p>",
        table(
            report.draws,
            [
                "benchmark",
                "n_problems",
                "samples",
                "points",
                "sd_point",
                "sd_runs",
                "sd_problems",
                "sd_draw",
                "draw_share",
            ],
        ),
        "<details><summary>The curve points (also in <a href='curve.csv'>curve.csv</a>)</summary>",
        table(
            report.curve,
            [
                "variant",
                "benchmark",
                "budget",
                "step",
                "seeds",
                "pass_at_1",
                "ci_low",
                "ci_high",
                "seed_min",
                "seed_max",
                "draw_share",
            ],
        ),
        "</details>",
    ]


def _claims(report) -> list[str]:
    from pipeline.report.claims import NONINFERIORITY_FRACTION

    rows = []
    for c in report.claims:
        link = (
            f" <a href='{esc(c['link'])}'>the {esc(c['experiment'])} report</a>"
            if c.get("link")
            else ""
        )
        cls = {"reproduced": "yes", "not reproduced": "no"}.get(c["verdict"], "open")
        rows.append(
            f"<tr><td>{esc(c['claim'])}</td><td>{esc(c['measured'])}</td>"
            f"<td class='{cls}'><b>{esc(c['verdict'])}</b></td>"
            f"<td>{esc(c['why'])}{link}</td></tr>"
        )
    return [
        "<h2>The paper's claims: what this run found</h2>",
        f"<p>Differences at the final budget, with {report.settings['confidence']:.0%} "
        f"intervals over training runs and problems (paired by seed; see Final scores); "
        f'"at least as well" allows a loss of at most {NONINFERIORITY_FRACTION:.0%} of the gain '
        "the compared baseline demonstrably makes over the SFT model (the lower end of its "
        "interval; 0 where it shows none: a non-inferiority margin as trials set one). A verdict is "
        f"never stronger than its interval, and needs at least {MIN_RUNS} training runs of each "
        "compared variant.</p>",
        "<div class='wide claims'><table><tr><th>claim</th><th>measured</th><th>verdict</th>"
        "<th>why</th></tr>" + "".join(rows) + "</table></div>",
    ]


def _selection(report) -> list[str]:
    sel = report.selection
    if not sel:
        return []
    from pipeline.report.selection import SELECTION_COLS

    chosen = ", ".join(f"{a.upper()} lr {v['chosen_lr']:g}" for a, v in sel["algorithms"].items())
    return [
        "<h2>Learning rates chosen on validation (the fair protocol)</h2>",
        "<img src='lr.png'>",
        f"<p>Each algorithm trained at every rate of the grid; its rate was chosen on a "
        f"validation split of {esc(sel['benchmark'])} problems held out of the RL prompts (no "
        f"SFT or test problem among them), by the {esc(sel['rule'])}. Chosen: {esc(chosen)}. "
        "The claims and the rows named after an algorithm compare the algorithms at these "
        "rates on the test problems; the other rates keep their variant names. Intervals are "
        "over training runs and problems; <code>test_*</code> is shown for reading only: it "
        "chose nothing.</p>",
        table(report.selection_rows, SELECTION_COLS),
    ]


def _variants(comps: list[dict]) -> list[str]:
    if not comps:
        return []
    # a ranking: per benchmark and baseline, the largest paired difference first
    ranked = sorted(
        comps,
        key=lambda c: (
            c["benchmark"],
            c["baseline"],
            -(c["diff"] if c["diff"] is not None else -1e9),
        ),
    )
    return [
        "<h2>Variants against their baselines</h2>",
        "<p>Each variant (an algorithm run with other settings, e.g. the rollout engine's own "
        "log-probs in lower precision as old log-probs, or another objective) against the run "
        "it is measured against, ranked per benchmark and baseline by the difference: "
        "<code>diff</code> = pass@1 difference at the final budget on the same problems, with "
        "its interval over training runs and problems (paired by seed when both have the same "
        "seeds; <code>runs</code>: the fewer runs of the two, <code>per_seed_diff</code>: each "
        "seed's difference, <code>var_share_runs</code>: the run-to-run share); step times are "
        "the median "
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
        table(
            ranked,
            [
                "variant",
                "baseline",
                "benchmark",
                "seeds",
                "pass_at_1",
                "baseline_pass_at_1",
                "diff",
                "diff_ci_low",
                "diff_ci_high",
                "runs",
                "paired",
                "per_seed_diff",
                "var_share_runs",
                "n_problems",
            ],
        ),
        "<h3>Cost and likelihood gap</h3>",
        table(
            list({c["variant"]: c for c in comps}.values()),
            [
                "variant",
                "baseline",
                "step_s",
                "baseline_step_s",
                "step_time_saving",
                "old_logprob_s",
                "baseline_old_logprob_s",
                "old_logprob_share",
                "compute_ratio",
                "logprob_gap_token",
                "baseline_logprob_gap_token",
                "logprob_gap_seq",
                "baseline_logprob_gap_seq",
                "clip_onpolicy",
                "baseline_clip_onpolicy",
            ],
            digits=4,
        ),
    ]


def _fits(fits: list[dict]) -> list[str]:
    if not fits:
        return []
    return [
        "<h2>Scaling-curve fit (ScaleRL)</h2>",
        "<p>Per variant and benchmark, R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) fitted to "
        "pass@1 against RL training compute (Khatri et al. 2025): R0 is the SFT model's score, "
        "<code>asymptote</code> A the score the recipe tends to, <code>efficiency</code> B how "
        "fast it gets there, <code>c_mid</code> the compute at half the gain. Least squares on "
        "the mean over seeds at each budget; intervals over training runs and problems (the "
        "two-level bootstrap of the final scores, one problem draw for every budget and R0; "
        "<code>*_var_share_runs</code>: each parameter's run-to-run share, c_mid's on the log "
        "scale). "
        "Fewer than four budgets above 0 are not fitted (three free parameters would fit "
        "noise). A stays within the 0-1 score range; a parameter is <i>not identified</i> "
        "when its interval reaches the bound of its range (A: 0 or 1; B: 0.25 or 8): read it "
        "as unknown at this sample size (more budgets, seeds or problems would pin it). The "
        "fitted curves are the dashed lines in the first figure.</p>",
        table(fits, FIT_COLS, digits=4),
    ]


def _moe(moe: dict | None) -> list[str]:
    if not moe:
        return []
    pcols = [
        "comparison",
        "variant",
        "against",
        "benchmark",
        "diff",
        "diff_ci_low",
        "diff_ci_high",
        "runs",
        "per_seed_diff",
        "var_share_runs",
        "n_problems",
    ]
    return [
        "<h2>Mixture of experts: Routing Replay and expert-activation volatility</h2>",
        f"<p>{esc(MOE_CLAIM)}</p>",
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
        f"{esc(str(moe['benchmark']))}.</p>",
        table(moe["rows"], MOE_COLS),
        table(moe["pairs"], pcols) if moe["pairs"] else "",
        "<div class='verdict'><ul>"
        + "".join(f"<li>{esc(x)}</li>" for x in moe["verdict_lines"])
        + "</ul></div>",
    ]


def _training(report) -> list[str]:
    rule, clips = report.rule, report.clips
    ratio_txt = ", ".join(f"{k}: {v:.1f}x" for k, v in report.ratios.items()) or "-"
    clip_rows = [
        {
            "variant": a,
            "clip_frac_tokens": clips[a],
            "clip_frac_tokens_offpolicy": report.clips_off.get(a),
            "clip_frac_seqs": report.clips_seq.get(a),
        }
        for a in sorted(clips)
    ]
    return [
        "<h2>Training reward against compute</h2><img src='reward_vs_compute.png'>",
        "<h2>Clipping</h2><img src='clip_fraction.png'>",
        f"<p>Clip-fraction ratio (mean clipped-token fraction over all steps and seeds): "
        f"<b>{esc(ratio_txt)}</b>. <code>clip_frac_seqs</code>: the share of sequences with a "
        "clipped term, the convention TRL logs for GSPO (a run on <code>engine: trl</code> has "
        "that one alone).</p>",
        table(
            clip_rows,
            ["variant", "clip_frac_tokens", "clip_frac_tokens_offpolicy", "clip_frac_seqs"],
        ),
        "<h2>Stability</h2>",
        f"<p>Collapse rule: with the training reward smoothed by a trailing moving mean over "
        f"{rule['window']} steps, a run has collapsed when its best smoothed reward is at least "
        f"{rule['min_best']} and every smoothed value in the last {rule['tail']:.0%} of its steps "
        f"is below {rule['ratio']} x that best (runs shorter than {2 * rule['window']} steps are not "
        "judged). Runs that crashed show MLflow status FAILED, killed ones KILLED.</p>",
        table(report.stability, STABILITY_COLS),
    ]


def _provenance(report) -> list[str]:
    prov, uri = report.provenance, report.data["tracking_uri"]
    cfg = prov.get("workflow_config")
    return [
        "<h2>Provenance</h2><ul>",
        f"<li>Workflow command: <code>{esc('; '.join(prov['workflow_command']) or '-')}</code></li>",
        f"<li>Rebuild this report: <code>python -m pipeline.report --experiment "
        f"{esc(report.experiment)}</code> (with MLFLOW_TRACKING_URI={esc(uri)})</li>",
        f"<li>The runs in MLflow's UI: <code>mlflow ui --backend-store-uri {esc(uri)}</code>, "
        f"then <a href='{esc(ui_link(report.data['experiment_id']))}'>"
        f"{esc(ui_link(report.data['experiment_id']))}</a> (opens the training runs)</li>",
        f"<li>Seeds: {prov['seeds']}</li>",
        f"<li>Git commit: {esc(', '.join(prov['git_commit']) or '-')}</li>",
        f"<li>Versions: {esc(', '.join(prov['versions']) or '-')} | python "
        f"{esc(sys.version.split()[0])} (report)</li>",
        f"<li>Data (sha256): {esc('; '.join(prov['data_hashes']) or '-')}</li>",
        "<li>Stage commands: <pre>" + esc("\n".join(prov["stage_commands"])) + "</pre></li></ul>",
        "<h3>Config</h3>",
        f"<pre>{esc(cfg)}</pre>"
        if cfg
        else "<p>(no workflow config in the store; each run's resolved config is in its MLflow params)</p>",
        "</body></html>",
    ]


def render(report) -> str:
    """index.html's text."""
    return "\n".join(
        _scores(report)
        + _fits(report.fits)
        + _variants(list(report.comparisons))
        + side_by_side(report.side_by_side)
        + _moe(report.moe)
        + _training(report)
        + _provenance(report)
    )
