"""The comparison report, built from an MLflow store alone.

    python -m pipeline.report --experiment NAME [--tracking-uri URI] [--out DIR]

writes DIR (default results/<experiment>/report/):

- score_vs_compute.png, curve.csv: each benchmark's pass@1 (mean over samples per problem, mean
  over problems) against cumulative RL training compute in FLOPs (gspo.model.flops: generation, old
  log-prob pass and updates; the SFT compute every run shares is left out, so the SFT model is
  x = 0). One curve per variant (an algorithm, or an algorithm with other settings): the mean
  over seeds, with a band that is its interval over training runs and problems. Every point of a
  benchmark, the SFT model's, the intermediate budgets' and the last's, is on one population:
  the problems every evaluation scored and their first k samples (pipeline.report.curves: the
  evaluations nest), said in the panel's title; the page adds what the shared evaluation draw
  contributes to a point;
- reward_vs_compute.png: the training reward (mean over each rollout batch, moving mean over
  `collapse.window` steps) against compute, mean over seeds with the same band;
- clip_fraction.png: the fraction of response tokens whose gradient the clip removed, per step
  and per algorithm (log scale), and its mean per algorithm with the GSPO/GRPO ratio;
- final_scores.csv (and final_scores.md / .tex, the same scores formatted for a paper:
  Markdown and LaTeX booktabs, `mean [low, high]`), final_scores.png: per algorithm and
  benchmark, pass@1 at the largest budget, with pass@k and, for benchmarks whose scoring
  extracts answers (aime), maj@k beside it (pipeline.report.kscores):
  the mean over seeds and problems with its confidence interval over training runs and problems
  (pipeline.report.resample: a two-level bootstrap drawing the seeds, then the problems, so the
  interval carries the run-to-run variance as well as the problem sampling; var_share_runs is
  the run-to-run share of its variance; the seed range beside it, each run's pass@1 in
  summary.json's per_seed and as dots in the figure), and the SFT model's score as the baseline
  (one fixed run) with the difference to it; CodeForces rows add the Elo of the problems solved
  (elo, elo_low, elo_high, elo_percentile: the scores averaged over seeds; the interval is the
  likelihood-ratio one over problems with the run-to-run variance of each run's own Elo added,
  stats.elo; also in summary.json, and against compute in score_vs_compute.png);
- stability.csv: per run, best and final smoothed reward and whether it collapsed (the rule
  below), its MLflow status and skipped non-finite updates;
- variants.csv: each configured variant against its baseline (config `variants`, e.g. GSPO with
  the rollout engine's bf16 log-probs as old log-probs against GSPO recomputing them): score
  difference at the final budget with its interval over training runs and problems (paired by
  seed), its run-to-run share, step time and old-log-prob pass time with the saving, compute
  ratio, and the engine/trainer log-prob gap (header only when there are no variants);
- moe.csv, moe.png: for MoE runs (those that logged moe/volatility, or a Routing Replay
  ablation's), per variant the
  expert-activation volatility, router load balance, Routing Replay on/off and its source
  (trainer or rollout engine), the engine/trainer routing mismatch, collapses and final
  score; the paper's comparisons (GRPO with/without replay, GSPO vs GRPO) as differences with
  intervals over training runs and problems and a plain verdict on whether the tiny model reproduces the paper's claim (header only, and no
  figure, for dense experiments);
- the claims table, first in index.html and in summary.json (`claims`): one row per claim of the
  paper, (a) clipping vs learning, (b) score at matched compute, (c) stability, (d) MoE without
  Routing Replay, (e) engine likelihoods, each with the measured number, its interval and a
  verdict (reproduced / not reproduced / inconclusive at this sample size / too few training
  runs, below resample.MIN_RUNS = 3 runs of a compared variant / not measured here, linking the
  MoE or precision experiment's report when it exists); pipeline.report.claims gives each rule;
- side_by_side.json and its section of index.html: for GSPO against GRPO and each variant
  against its baseline, the completions of both on the final-budget problems where they differ
  most (pipeline.report.sidebyside; from the eval runs' results.jsonl);
- claims.md / claims.tex: the claims table for a paper; every figure also as .svg beside its
  .png (vector);
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

The modules, one way: `model.compute` reads the store once into a `Report` (the one report
value; `stats` computes its numbers, `resample` its intervals over training runs and problems,
`verdicts` words the MoE ablation); `figures.draw(report,
out)`, `html.render(report)` and `files.write(report, out)` only present it; `__main__` is the
command line.
"""

from __future__ import annotations

import pathlib

from pipeline.report.model import DEFAULTS, Report, compute, from_data  # noqa: F401
from pipeline.report.stats import (  # noqa: F401
    by_variant,
    collapse_check,
    curve,
    final_scores,
    mean_metric,
    moe_summary,
    paired_diff,
    smooth,
    stability,
    step_seconds,
    variant_comparisons,
)
from pipeline.report.verdicts import MOE_CLAIM, moe_verdict  # noqa: F401


def build(
    experiment: str,
    out: pathlib.Path,
    *,
    uri: str | None = None,
    settings: dict | None = None,
    log_to_mlflow: bool = True,
    tags: dict | None = None,
    selection: dict | None = None,
) -> dict:
    """Build the report of `experiment` into `out`; returns its headline numbers. With
    log_to_mlflow, `out` becomes the artifacts of a fresh run tagged stage=report plus `tags`."""
    from pipeline.report import claims, figures, files

    report = compute(experiment, uri, settings, selection)
    claims.link_related(report.claims, out)
    out.mkdir(parents=True, exist_ok=True)
    figures.draw(report, out)
    head = files.write(report, out)
    if log_to_mlflow:
        files.log_to_mlflow(report, out, tags)
    return head
