"""The one report value: everything the figures, tables, summary.json and the page show, computed
once from an experiment's MLflow store (`compute`)."""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile

from gspo.config.fields import ConfigError
from pipeline.report import claims, curves, offpolicy, scaling, stats

DEFAULTS = {
    "bootstrap_iters": 2000,
    "confidence": 0.95,
    "collapse": {"window": 5, "ratio": 0.5, "tail": 0.2, "min_best": 0.05},
}

# the columns of the report's tables (CSV files and the page)
TABLE_COLS = [
    "variant",
    "algorithm",
    "benchmark",
    "budget",
    "step",
    "seeds",
    "pass_at_1",
    "ci_low",
    "ci_high",
    "var_share_runs",
    "seed_min",
    "seed_max",
    "vs_sft",
    "vs_sft_ci_low",
    "vs_sft_ci_high",
    "vs_sft_var_share_runs",
    "n_problems",
    "k",
    "pass_at_k",
    "pass_at_k_ci_low",
    "pass_at_k_ci_high",
    "maj_at_k",
    "maj_at_k_ci_low",
    "maj_at_k_ci_high",
    "elo",
    "elo_low",
    "elo_high",
    "elo_percentile",
]
# the page's final-scores table adds each run's own pass@1 (a list: summary.json, not the CSV)
_AFTER_CI = TABLE_COLS.index("ci_high") + 1
PAGE_TABLE_COLS = TABLE_COLS[:_AFTER_CI] + ["per_seed"] + TABLE_COLS[_AFTER_CI:]
STABILITY_COLS = [
    "variant",
    "algorithm",
    "seed",
    "status",
    "steps",
    "best_smoothed_reward",
    "best_step",
    "final_smoothed_reward",
    "collapsed",
    "skipped_updates",
    "run_id",
]
VARIANT_COLS = [
    "variant",
    "baseline",
    "algorithm",
    "benchmark",
    "seeds",
    "pass_at_1",
    "baseline_pass_at_1",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
    "runs",
    "paired",
    "var_share_runs",
    "n_problems",
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
]
FIT_COLS = [
    "variant",
    "algorithm",
    "benchmark",
    "status",
    "n_points",
    "seeds",
    "n_problems",
    "samples",
    "asymptote",
    "asymptote_ci_low",
    "asymptote_ci_high",
    "asymptote_var_share_runs",
    "efficiency",
    "efficiency_ci_low",
    "efficiency_ci_high",
    "efficiency_var_share_runs",
    "c_mid",
    "c_mid_ci_low",
    "c_mid_ci_high",
    "c_mid_var_share_runs",
]
MOE_COLS = [
    "variant",
    "algorithm",
    "routing_replay",
    "replay_source",
    "seeds",
    "volatility",
    "volatility_seed_min",
    "volatility_seed_max",
    "engine_routing_mismatch",
    "load_entropy",
    "max_expert_share",
    "routing_cache_mb",
    "collapsed",
    "benchmark",
    "pass_at_1",
    "ci_low",
    "ci_high",
    "var_share_runs",
    "vs_sft",
    "vs_sft_ci_low",
    "vs_sft_ci_high",
]


@dataclasses.dataclass
class Report:
    """One experiment's report. `data` is pipeline.aggregate.collect's; `rule` the collapse
    rule's settings; `table` the final scores (stats.final_scores), `stability` one row per run,
    `comparisons` the variants against their baselines, `moe` the MoE ablation (None for dense
    experiments); `curve` every point of the score-against-compute curves and `draws` what the
    shared evaluation draw contributes to them, per benchmark, both on one population per
    benchmark (pipeline.report.curves); `fits` the ScaleRL compute-score fit per variant and
    benchmark through the same points (pipeline.report.scaling); `clips`/`clips_off` the mean clipped-token fraction per variant (all and
    off-policy minibatches), `clips_seq` the clipped-sequence fraction (the convention TRL logs for
    GSPO, so a TRL run has that one alone), `ratios` each variant's against GRPO's; `provenance` what the runs
    were made with (workflow_config: the master config's text, or None); `claims` one row per
    claim of the paper with its measured number, interval and verdict (pipeline.report.claims);
    `side_by_side` two variants' completions on the problems they differ most on
    (pipeline.report.sidebyside)."""

    experiment: str
    data: dict
    settings: dict
    rule: dict
    benches: list[str]
    table: list[dict]
    stability: list[dict]
    comparisons: list[dict]
    moe: dict | None
    curve: list[dict]
    draws: list[dict]
    fits: list[dict]
    clips: dict
    clips_off: dict
    clips_seq: dict
    ratios: dict
    provenance: dict
    claims: list[dict] = dataclasses.field(default_factory=list)
    # the fair protocol's learning-rate choice and its rows (pipeline.report.selection)
    selection: dict | None = None
    selection_rows: list[dict] = dataclasses.field(default_factory=list)
    side_by_side: list[dict] = dataclasses.field(default_factory=list)
    # the off-policy experiment's (objective, staleness) rows (pipeline.report.offpolicy)
    offpolicy: list[dict] = dataclasses.field(default_factory=list)

    @property
    def by_variant(self) -> dict[str, list]:
        return stats.by_variant(self.data["rl"])


def provenance(data: dict, workflow_yaml: str | None) -> dict:
    """The command, git commits, seeds, package versions and data hashes of the runs."""
    tags = [r["tags"] for r in data["rl"] + data["sft"]]

    def uniq(key):
        return sorted({t[key] for t in tags if t.get(key)})

    versions = sorted(
        {
            f"{k[len('version.') :]} {v}"
            for t in tags
            for k, v in t.items()
            if k.startswith("version.")
        }
    )
    data_hashes = sorted(
        {
            f"{k[len('data_hash.') :]}: {v}"
            for t in tags
            for k, v in t.items()
            if k.startswith("data_hash.")
        }
    )
    return {
        "workflow_command": uniq("workflow_command"),
        "git_commit": uniq("git_commit"),
        "seeds": sorted({r["seed"] for r in data["rl"]}),
        "versions": versions,
        "data_hashes": data_hashes,
        "stage_commands": uniq("command"),
        "workflow_config": workflow_yaml,
    }


def workflow_yaml(data: dict) -> str | None:
    """The master config the aggregate run attached, if any."""
    from gspo.tracking import runs as tracking

    cl = tracking.client(data["tracking_uri"])
    for run in tracking.stage_runs(cl, data["experiment_id"], "aggregate"):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                p = tracking.retry(cl.download_artifacts, run.info.run_id, "workflow.yaml", tmp)
                return pathlib.Path(p).read_text()
            except Exception:  # noqa: BLE001
                continue
    return None


def from_data(
    experiment: str,
    data: dict,
    settings: dict | None = None,
    workflow_config: str | None = None,
    selection: dict | None = None,
) -> Report:
    """The report of collected `data` (settings: the report config, over DEFAULTS;
    workflow_config: the master config's text, for the provenance; selection: the fair
    protocol's learning-rate choice, pipeline.select's, whose chosen variants are compared
    under their algorithms' names)."""
    from evaluators.tasks import BENCHMARKS
    from pipeline.report import selection as lr_choice

    data = lr_choice.apply(data, selection)

    s = {**DEFAULTS, **(settings or {})}
    rule = {**DEFAULTS["collapse"], **(s.get("collapse") or {})}
    ci = {"iters": s["bootstrap_iters"], "confidence": s["confidence"]}
    groups = stats.by_variant(data["rl"])
    clips = {a: stats.mean_metric(runs) for a, runs in groups.items()}
    table = stats.final_scores(data, **ci)
    stab = stats.stability(data, rule)
    nested, pops = curves.nested_evals(data)
    points = curves.curve_points(nested, pops, **ci)
    report = Report(
        experiment=experiment,
        data=data,
        settings=s,
        rule=rule,
        benches=[b for b in BENCHMARKS if any(b in r["eval"] for r in data["rl"])],
        table=table,
        stability=stab,
        comparisons=stats.variant_comparisons(data, table, **ci),
        moe=stats.moe_summary(data, table, stab, **ci),
        curve=points,
        draws=curves.draw_summary(points),
        fits=scaling.scaling_fits({**data, "evals": nested}, **ci),
        clips=clips,
        clips_off={
            a: stats.mean_metric(runs, "clip_frac_tokens_offpolicy") for a, runs in groups.items()
        },
        clips_seq={a: stats.mean_metric(runs, "clip_frac_seqs") for a, runs in groups.items()},
        ratios={
            f"{a}/grpo": clips[a] / clips["grpo"]
            for a in clips
            if a != "grpo" and clips.get("grpo") and clips[a] is not None
        },
        provenance=provenance(data, workflow_config),
    )
    report.offpolicy = offpolicy.points(report)
    report.claims = claims.claims(report)
    report.selection = selection
    report.selection_rows = lr_choice.rows(selection, table)
    return report


def compute(
    experiment: str,
    uri: str | None = None,
    settings: dict | None = None,
    selection: dict | None = None,
) -> Report:
    """The report of `experiment`, read from the MLflow store at `uri` (pipeline.aggregate)."""
    from gspo.tracking import runs as tracking
    from pipeline.aggregate import collect, download_results
    from pipeline.report import sidebyside

    data = collect(experiment, uri)
    if not data["rl"]:
        raise ConfigError(f"experiment {experiment!r} has no RL runs (tag stage=rl)")
    report = from_data(experiment, data, settings, workflow_yaml(data), selection)
    cl = tracking.client(data["tracking_uri"])
    report.side_by_side = sidebyside.side_by_side(report, lambda rid: download_results(cl, rid))
    return report
