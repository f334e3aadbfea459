"""Stage: gather one experiment's results from the MLflow store into plain tables.

    python -m pipeline.aggregate --experiment NAME [--tracking-uri URI] [--out scores.json]
        [--workflow-config YAML] [--tag KEY=VALUE ...]

Everything is read from MLflow (never from private files), so the same code serves the
workflow's aggregation step, `pipeline.report` and a store copied to another machine:

- RL runs (tag stage=rl): per-step training metrics (reward_mean, clip_frac_tokens,
  clip_frac_tokens_offpolicy, compute_flops, ...) and the evaluation scores the workflow logged
  into them (eval/<bench>/pass_at_1 and its CI at each checkpoint's step; step 0 = the SFT model);
- eval runs (tag stage=eval): one per checkpoint and benchmark, with their per-problem
  results.jsonl artifact (the basis of the final-score intervals: pass@1, pass@k and, where the
  benchmark extracts answers, maj@k);
- the SFT run (tag stage=sft) and every run's provenance tags (git commit, versions, data hashes,
  the command).

Runs are grouped by their `variant` tag (the compared run's name: the algorithm itself, or a
configured variant such as gspo-bf16-rollout); `algorithm` is kept beside it.

`--out` writes scores.json (every evaluation point: variant, algorithm, seed, budget, step, compute,
benchmark, pass@1 and CI) plus scores.csv beside it, and logs them (and the workflow config given
with `--workflow-config`) as artifacts of a run tagged stage=aggregate, which replaces the
previous one.
"""

from __future__ import annotations

import csv
import json
import os
import pathlib
import tempfile

from evaluators.tasks import BENCHMARKS
from gspo.config.fields import ConfigError
from gspo.tracking.store import DEFAULT_STORE

TRAIN_KEYS = (
    "reward_mean",
    "clip_frac_tokens",
    "clip_frac_tokens_offpolicy",
    "clip_frac_seqs",
    "clip_frac_tokens_onpolicy",
    "compute_flops",
    "entropy",
    "response_length",
    "zero_variance_groups",
    "skipped_updates",
    "wall_s",
    # where a step's time goes, and the engine/trainer log-prob gap (variants)
    "time_rollout_s",
    "time_old_logprob_s",
    "time_update_s",
    "time_step_s",
    "old_logprob_passes",
    "logprob_gap_token_mean",
    "logprob_gap_token_max",
    "logprob_gap_seq_mean",
    # staleness (issue 45, gspo.native.staleness): the lag and the policy drift it makes
    "staleness",
    "behaviour_log_ratio_std",
    "behaviour_log_ratio_max",
    # MoE models (gspo.model.moe)
    "moe/volatility",
    "moe/load_entropy",
    "moe/max_expert_share",
    "moe/aux_loss",
    "moe/routing_cache_bytes",
    "moe/engine_routing_mismatch",
)


def _history(cl, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of a metric, one value per step (the latest logged wins), step order."""
    from gspo.tracking.store import retry

    by_step: dict[int, tuple[int, float]] = {}
    for m in retry(cl.get_metric_history, run_id, key):
        prev = by_step.get(m.step)
        if prev is None or m.timestamp >= prev[0]:
            by_step[m.step] = (m.timestamp, m.value)
    return [(s, v) for s, (_, v) in sorted(by_step.items())]


def _run_record(run) -> dict:
    return {
        "run_id": run.info.run_id,
        "name": run.info.run_name,
        "status": run.info.status,
        "start_time": run.info.start_time,
        "end_time": run.info.end_time,
        "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
        "params": dict(run.data.params),
    }


def download_results(cl, run_id: str) -> list[dict]:
    """The eval run's results.jsonl artifact (per-problem scores), [] when absent."""
    from gspo.tracking.store import retry

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = retry(cl.download_artifacts, run_id, "results.jsonl", tmp)
        except Exception:  # noqa: BLE001 - no such artifact
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]


def collect(experiment: str, uri: str | None = None, *, with_problems: bool = True) -> dict:
    """Everything the report needs about `experiment`, read from the MLflow store at `uri`
    (default: MLFLOW_TRACKING_URI, else DEFAULT_STORE)."""
    from gspo.tracking import runs as tracking

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_STORE
    cl = tracking.client(uri)
    exp_id = tracking.experiment_id(cl, experiment, create=False)
    if exp_id is None:
        raise ConfigError(f"no MLflow experiment {experiment!r} in {uri}")
    data = {
        "experiment": experiment,
        "experiment_id": exp_id,
        "tracking_uri": uri,
        "rl": [],
        "sft": [],
        "evals": [],
    }
    for run in tracking.stage_runs(cl, exp_id, "rl"):
        rec = _run_record(run)
        rec["algorithm"] = rec["tags"].get("algorithm")
        # the compared run's name (older stores have no variant tag: the algorithm)
        rec["variant"] = rec["tags"].get("variant") or rec["algorithm"]
        rec["baseline"] = rec["tags"].get("baseline", "")
        rec["seed"] = int(rec["tags"].get("seed", 0))
        keys = set(run.data.metrics)
        rec["train"] = {k: _history(cl, rec["run_id"], k) for k in TRAIN_KEYS if k in keys}
        rec["eval"] = {}
        for b in BENCHMARKS:
            if f"eval/{b}/pass_at_1" in keys:
                rec["eval"][b] = {
                    suffix: _history(cl, rec["run_id"], f"eval/{b}/{suffix}")
                    for suffix in ("pass_at_1", "pass_at_1_ci_low", "pass_at_1_ci_high", "rating")
                    if f"eval/{b}/{suffix}" in keys
                }
        data["rl"].append(rec)
    data["rl"].sort(key=lambda r: (r["variant"] or "", r["seed"]))
    data["sft"] = [_run_record(r) for r in tracking.stage_runs(cl, exp_id, "sft")]
    for run in tracking.stage_runs(cl, exp_id, "eval"):
        t = run.data.tags
        m = run.data.metrics
        rec = {
            "run_id": run.info.run_id,
            "algorithm": t.get("algorithm"),
            "variant": t.get("variant") or t.get("algorithm"),
            "seed": int(t.get("seed", 0)),
            "budget": int(t.get("budget", 0)),
            "step": int(t.get("step", 0)),
            "benchmark": t.get("benchmark"),
            "pass_at_1": m.get("pass_at_1"),
            "ci_low": m.get("pass_at_1_ci_low"),
            "ci_high": m.get("pass_at_1_ci_high"),
            "compute_flops": m.get("compute_flops"),
            "rating": m.get("rating"),
            "n_problems": m.get("n_problems"),
        }
        if with_problems:
            results = download_results(cl, rec["run_id"])
            rec["problems"] = {r["id"]: r["avg@n"] for r in results}
            # each sample's score, in sample order: the curves take every evaluation's first k
            # (pipeline.report.curves; the draws nest: evaluators.evaluation)
            rec["samples"] = {r["id"]: r["scores"] for r in results if "scores" in r}
            # pass@k and maj@k (answer-type benchmarks) per problem, k its samples
            rec["pass_k"] = {r["id"]: r["pass@k"] for r in results if "pass@k" in r}
            rec["maj"] = {r["id"]: r["maj@k"] for r in results if "maj@k" in r}
            rec["k"] = min((r["n"] for r in results), default=None)
            if rec["benchmark"] == "cf":  # the problems' ratings, for the Elo estimate
                rec["ratings"] = {
                    r["id"]: r["rating"] for r in results if r.get("rating") is not None
                }
        data["evals"].append(rec)
    data["evals"].sort(
        key=lambda r: (r["variant"] or "", r["seed"], r["budget"], r["benchmark"] or "")
    )
    return data


def points(data: dict) -> list[dict]:
    """Every evaluation point of every RL run (budget 0 = the SFT model), with its compute."""
    out = []
    for run in data["rl"]:
        compute = dict(run["train"].get("compute_flops", []))
        compute.setdefault(0, 0.0)
        for bench, hist in run["eval"].items():
            lo = dict(hist.get("pass_at_1_ci_low", []))
            hi = dict(hist.get("pass_at_1_ci_high", []))
            for step, v in hist["pass_at_1"]:
                out.append(
                    {
                        "variant": run["variant"],
                        "algorithm": run["algorithm"],
                        "seed": run["seed"],
                        "step": step,
                        "compute_flops": compute.get(step),
                        "benchmark": bench,
                        "pass_at_1": v,
                        "ci_low": lo.get(step),
                        "ci_high": hi.get(step),
                        "run_id": run["run_id"],
                    }
                )
    return out


def parser():
    from pipeline._cli import Parser, add_tracking_flags

    ap = Parser("python -m pipeline.aggregate", __doc__.splitlines()[0])
    add_tracking_flags(ap, reads=True)
    ap.add_argument(
        "--out",
        default=None,
        help="scores.json to write (scores.csv beside it; default: print the points)",
    )
    ap.add_argument(
        "--workflow-config",
        default=None,
        help="the master config to attach to the aggregate run (the workflow's)",
    )
    return ap


def main(argv=None):
    from pipeline._cli import tracking_of

    args = parser().parse_args(argv)

    from gspo.io import atomic_write_text, write_json
    from gspo.tracking import runs as tracking

    data = collect(args.experiment, args.tracking_uri, with_problems=False)
    pts = points(data)
    print(
        f"{args.experiment}: {len(data['rl'])} RL runs, {len(data['evals'])} eval runs, "
        f"{len(pts)} evaluation points"
    )
    if not args.out:
        print(json.dumps(pts, indent=1))
        return
    out = pathlib.Path(args.out)
    write_json(
        out, {"experiment": args.experiment, "tracking_uri": data["tracking_uri"], "points": pts}
    )
    cols = [
        "variant",
        "algorithm",
        "seed",
        "step",
        "compute_flops",
        "benchmark",
        "pass_at_1",
        "ci_low",
        "ci_high",
        "run_id",
    ]
    with tempfile.NamedTemporaryFile("w", delete=False, newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(pts)
    atomic_write_text(out.with_suffix(".csv"), pathlib.Path(f.name).read_text())
    os.unlink(f.name)

    cl = tracking.client(data["tracking_uri"])
    run_id = tracking.fresh_summary_run(
        cl, data["experiment_id"], "aggregate", tracking_of(args).tags
    )
    for p in (out, out.with_suffix(".csv"), args.workflow_config):
        if p and pathlib.Path(p).is_file():
            tracking.retry(cl.log_artifact, run_id, str(p))
    tracking.retry(cl.set_terminated, run_id, "FINISHED")


if __name__ == "__main__":
    from pipeline._cli import run

    run(main)
