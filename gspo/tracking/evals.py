"""Evaluations in MLflow: each evaluated checkpoint of a run as a run of its own (tags variant,
seed, budget, benchmark, the eval config's hash) and its scores logged into the training run at
the checkpoint's step and compute, once (pipeline.track calls `record_evaluations`).

The curve's population. A run's checkpoints may be evaluated on sets of different sizes (the
workflow's `eval.<bench>.intermediate`); their draws nest (evaluators.evaluation), so the
problems all of them scored with each one's first k samples, k the fewest any drew, is one
population (`population`, `nested`). Beside each evaluation's own pass@1 the training run gets
eval/<bench>/curve_pass_at_1 on that population, the curve MLflow's charts should draw; the
report does the same over every run of a benchmark (pipeline.report.curves)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

from gspo.tracking.runs import RUN_FILE, Tracking
from gspo.tracking.store import create_run, flatten, log_metrics, log_params, replace_metrics, retry


def eval_metrics(bench: str, summary: dict, prefix: str) -> dict[str, float]:
    """Flat MLflow metrics of one benchmark's summary: <prefix>pass_at_1 (= avg@n), its CI,
    pass_at_<k> for each k, maj_at_k (k = the samples, where the benchmark extracts answers) and
    its CI, cf's rating."""
    s = summary["benchmarks"][bench]
    m = {
        f"{prefix}pass_at_1": s["avg@n"],
        f"{prefix}pass_at_1_ci_low": s["avg@n_ci"][0],
        f"{prefix}pass_at_1_ci_high": s["avg@n_ci"][1],
        f"{prefix}n_problems": s["n_problems"],
    }
    for k, v in s.items():
        if k.startswith("pass@") and not k.endswith("_ci") and k not in ("pass@k", "pass@1"):
            m[f"{prefix}pass_at_{k[5:]}"] = v
    if "maj@k" in s:
        m.update(
            {
                f"{prefix}maj_at_k": s["maj@k"],
                f"{prefix}maj_at_k_ci_low": s["maj@k_ci"][0],
                f"{prefix}maj_at_k_ci_high": s["maj@k_ci"][1],
            }
        )
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
            raise FileNotFoundError(
                f"{folder}: no <benchmark>/checkpoint.json (was the model a training checkpoint?)"
            )
        meta = json.loads(metas[0].read_text())
        return cls(budget, int(meta["step"]), float(meta["compute_flops"]), folder)

    def summaries(self) -> list[tuple[str, dict, pathlib.Path]]:
        out = []
        for p in sorted(self.folder.glob("*/summary.json")):
            summary = json.loads(p.read_text())
            out.append((next(iter(summary["benchmarks"])), summary, p.parent))
        return out


def population(evals: list[dict]) -> tuple[list[str], int]:
    """(problem ids, samples k) that every evaluation in `evals` holds: the problems all of them
    scored and the fewest samples any of them drew, from each one's "samples" ({problem id:
    [score of each sample]}). k = 0 where one lacks per-sample scores (a store made before they
    were kept): the problems common to every "problems" ({id: mean score}) alone."""
    per = [e.get("samples") or {} for e in evals]
    if per and all(per):
        ids = sorted(set.intersection(*[set(p) for p in per]))
        return ids, min((len(p[i]) for p in per for i in ids), default=0)
    probs = [set(e.get("problems") or {}) for e in evals]
    return (sorted(set.intersection(*probs)) if probs and all(probs) else []), 0


def nested(e: dict, ids: list[str], k: int) -> dict[str, float]:
    """Evaluation `e`'s score of each problem of `ids`: the mean of its first k samples (k = 0:
    its own per-problem mean)."""
    if not k:
        return {i: e["problems"][i] for i in ids}
    return {i: sum(e["samples"][i][:k]) / k for i in ids}


def _log_curve(cl, run_id: str, points: list[EvalPoint]) -> None:
    """eval/<bench>/curve_pass_at_1 (and the population's size, curve_n_problems and
    curve_samples) at each point's step of the training run: every point on the population all
    of the run's points hold (module doc)."""
    by_bench: dict[str, list] = {}
    for point in points:
        for bench, _, src in point.summaries():
            rows = (
                [
                    json.loads(line)
                    for line in (src / "results.jsonl").read_text().splitlines()
                    if line.strip()
                ]
                if (src / "results.jsonl").is_file()
                else []
            )
            by_bench.setdefault(bench, []).append(
                (point, {"samples": {r["id"]: r["scores"] for r in rows if "scores" in r}})
            )
    for bench, items in by_bench.items():
        ids, k = population([e for _, e in items])
        if not ids or not k:
            continue
        for point, e in items:
            replace_metrics(
                cl,
                run_id,
                point.step,
                {
                    f"eval/{bench}/curve_pass_at_1": sum(nested(e, ids, k).values()) / len(ids),
                    f"eval/{bench}/curve_n_problems": len(ids),
                    f"eval/{bench}/curve_samples": k,
                },
            )


def _sha_text(obj) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _log_eval_run(
    cl, exp: str, tags: dict, point: EvalPoint, bench: str, summary: dict, src: pathlib.Path
) -> str:
    """One MLflow run (stage=eval) for one evaluated model and benchmark, nested under the run
    that trained it (tags carry mlflow.parentRunId), with summary.json and results.jsonl."""
    cfg = summary.get("config", {})
    tags = {
        **tags,
        "budget": str(point.budget),
        "benchmark": bench,
        "step": str(point.step),
        "model": summary["settings"]["model"],
        "eval_config_sha": _sha_text(cfg),
    }
    if cfg.get("protocol"):  # a named evaluation protocol (e.g. the paper's), for filtering
        tags["protocol"] = cfg["protocol"]
    code = summary.get("provenance") or {}  # the code that evaluated (gspo.infra.provenance)
    tags.update(
        {
            k: str(code[key])
            for k, key in (("version.gspo-bench", "version"), ("git_commit", "git_commit"))
            if key in code
        }
    )
    name = f"eval-{tags['variant']}-seed{tags['seed']}-b{point.budget}-{bench}"
    rid = create_run(cl, exp, tags=tags, run_name=name)
    log_params(cl, rid, flatten(cfg))
    log_metrics(
        cl,
        rid,
        [
            (
                point.step,
                {
                    **eval_metrics(bench, summary, ""),
                    "compute_flops": point.compute_flops,
                    "step": point.step,
                },
            )
        ],
    )
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
    replace_metrics(
        cl,
        run_id,
        int(round(point.compute_flops / 1e9)),
        {f"eval_by_gflops/{bench}/pass_at_1": m[f"eval/{bench}/pass_at_1"]},
    )


def record_evaluations(
    run_dir, points: list[EvalPoint], *, tracking: Tracking, variant: str, seed: int
) -> dict:
    """Record the evaluations of the run in `run_dir` (SFT or RL) in MLflow: an eval run per
    (point, benchmark) nested under the run, which replace the eval runs recorded earlier for
    (variant, seed); for an RL run also the scores as its own metrics at each point's step, and
    the curve on the points' common population (_log_curve).
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
    tags = {
        "stage": "eval",
        "algorithm": str(info.get("algorithm") or stage),
        "variant": variant,
        "seed": str(seed),
        "mlflow.parentRunId": rid,
        "trained_by_run": rid,
        **{k: str(v) for k, v in tracking.tags.items()},
    }
    for point in points:
        for bench, summary, src in point.summaries():
            record["eval_runs"][f"b{point.budget}/{bench}"] = _log_eval_run(
                cl, exp, tags, point, bench, summary, src
            )
            if stage == "rl":
                _log_into_training_run(cl, rid, bench, summary, point)
    if stage == "rl":
        _log_curve(cl, rid, points)
    return record
