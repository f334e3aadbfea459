"""Evaluations in MLflow: each evaluated checkpoint of a run as a run of its own (tags variant,
seed, budget, benchmark, the eval config's hash) and its scores logged into the training run at
the checkpoint's step and compute, once (pipeline.track calls `record_evaluations`)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

from gspo.mlflow_store import (create_run, flatten, log_metrics, log_params, replace_metrics,
                               retry)
from gspo.tracking import RUN_FILE, Tracking


def eval_metrics(bench: str, summary: dict, prefix: str) -> dict[str, float]:
    """Flat MLflow metrics of one benchmark's summary: <prefix>pass_at_1 (= avg@n), its CI,
    pass_at_<k> for each k, cf's rating."""
    s = summary["benchmarks"][bench]
    m = {f"{prefix}pass_at_1": s["avg@n"], f"{prefix}pass_at_1_ci_low": s["avg@n_ci"][0],
         f"{prefix}pass_at_1_ci_high": s["avg@n_ci"][1], f"{prefix}n_problems": s["n_problems"]}
    for k, v in s.items():
        if k.startswith("pass@") and not k.endswith("_ci") and k not in ("pass@k", "pass@1"):
            m[f"{prefix}pass_at_{k[5:]}"] = v
    rating = s.get("rating")
    if isinstance(rating, dict) and rating.get("rating") is not None:
        m[f"{prefix}rating"] = rating["rating"]
    elif isinstance(rating, (int, float)):
        m[f"{prefix}rating"] = rating
    return m


@dataclasses.dataclass(frozen=True)
class EvalPoint:
    """One evaluated model of a run: its budget (percent of the run's steps; 0 = the model the
    run started from), RL step, cumulative RL compute and the folder of <bench>/ results."""

    budget: int
    step: int
    compute_flops: float
    folder: pathlib.Path

    @classmethod
    def read(cls, budget: int, folder) -> "EvalPoint":
        """Budget 0 is step 0 at no compute; otherwise step and compute come from the
        checkpoint.json that evaluation wrote beside the results."""
        folder = pathlib.Path(folder)
        if budget == 0:
            return cls(0, 0, 0.0, folder)
        metas = sorted(folder.glob("*/checkpoint.json"))
        if not metas:
            raise FileNotFoundError(f"{folder}: no <benchmark>/checkpoint.json (was the model "
                                    "a training checkpoint?)")
        meta = json.loads(metas[0].read_text())
        return cls(budget, int(meta["step"]), float(meta["compute_flops"]), folder)

    def summaries(self) -> list[tuple[str, dict, pathlib.Path]]:
        out = []
        for p in sorted(self.folder.glob("*/summary.json")):
            summary = json.loads(p.read_text())
            out.append((next(iter(summary["benchmarks"])), summary, p.parent))
        return out


def _sha_text(obj) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _log_eval_run(cl, exp: str, tags: dict, point: EvalPoint, bench: str, summary: dict,
                  src: pathlib.Path) -> str:
    """One MLflow run (stage=eval) for one evaluated model and benchmark, nested under the run
    that trained it (tags carry mlflow.parentRunId), with summary.json and results.jsonl."""
    cfg = summary.get("config", {})
    tags = {**tags, "budget": str(point.budget), "benchmark": bench, "step": str(point.step),
            "model": summary["settings"]["model"], "eval_config_sha": _sha_text(cfg)}
    if cfg.get("protocol"):      # a named evaluation protocol (e.g. the paper's), for filtering
        tags["protocol"] = cfg["protocol"]
    name = f"eval-{tags['variant']}-seed{tags['seed']}-b{point.budget}-{bench}"
    rid = create_run(cl, exp, tags=tags, run_name=name)
    log_params(cl, rid, flatten(cfg))
    log_metrics(cl, rid, [(point.step, {**eval_metrics(bench, summary, ""),
                                        "compute_flops": point.compute_flops,
                                        "step": point.step})])
    for fname in ("summary.json", "results.jsonl"):
        if (src / fname).is_file():
            retry(cl.log_artifact, rid, str(src / fname))
    retry(cl.set_terminated, rid, "FINISHED")
    return rid


def _log_into_training_run(cl, run_id: str, bench: str, summary: dict, point: EvalPoint) -> None:
    """The model's scores as metrics of the run that trained it, at the model's step
    (eval/<bench>/pass_at_1, its CI, pass_at_<k>; step 0 also gets compute_flops 0), and keyed
    by compute (eval_by_gflops/<bench>/pass_at_1 at step = cumulative GFLOPs), replacing values
    logged earlier at those steps."""
    m = eval_metrics(bench, summary, f"eval/{bench}/")
    if point.step == 0:
        m["compute_flops"] = point.compute_flops
    replace_metrics(cl, run_id, point.step, m)
    replace_metrics(cl, run_id, int(round(point.compute_flops / 1e9)),
                    {f"eval_by_gflops/{bench}/pass_at_1": m[f"eval/{bench}/pass_at_1"]})


def record_evaluations(run_dir, points: list[EvalPoint], *, tracking: Tracking, variant: str,
                       seed: int) -> dict:
    """Record the evaluations of the run in `run_dir` (SFT or RL) in MLflow: an eval run per
    (point, benchmark) nested under the run, which replace the eval runs recorded earlier for
    (variant, seed); for an RL run also the scores as its own metrics at each point's step.
    Returns {run_id, eval_runs: {"b<budget>/<bench>": id}} ({} of ids when tracking is off or
    the run has no MLflow run)."""
    run_dir = pathlib.Path(run_dir)
    info = json.loads((run_dir / "run_info.json").read_text())
    stage = info.get("stage", "rl")
    run_file = run_dir / RUN_FILE
    rid = json.loads(run_file.read_text())["run_id"] if run_file.is_file() else None
    record: dict = {"run_id": rid, "eval_runs": {}}
    if not tracking.enabled:
        return record
    if rid is None:
        print(f"warning: {run_dir} has no MLflow run; evaluations not recorded", file=sys.stderr)
        return record
    cl, exp = tracking.client(), tracking.experiment_id()
    flt = f"tags.stage = 'eval' and tags.variant = '{variant}' and tags.seed = '{seed}'"
    for old in retry(cl.search_runs, [exp], flt, max_results=1000):
        retry(cl.delete_run, old.info.run_id)
    tags = {"stage": "eval", "algorithm": str(info.get("algorithm") or stage),
            "variant": variant, "seed": str(seed), "mlflow.parentRunId": rid,
            "trained_by_run": rid, **{k: str(v) for k, v in tracking.tags.items()}}
    for point in points:
        for bench, summary, src in point.summaries():
            record["eval_runs"][f"b{point.budget}/{bench}"] = _log_eval_run(
                cl, exp, tags, point, bench, summary, src)
            if stage == "rl":
                _log_into_training_run(cl, rid, bench, summary, point)
    return record
