"""What the plan checks before any job starts, beyond each stage's typed config, and the compute it
tells the user the run will spend.

- Engines (`engine_check`, `sft_engine_check`, called by the Plan for every RL variant and the
  SFT stage): a variant's settings are ones its engine honours, by the engine's own validation
  (gspo.engines.trl.rl.check, gspo.engines.verl.job.check, gspo.engines.trl.sft.check), so a refusal stops the
  plan with one line naming the key, not a GPU job hours later.
- `report(plan, executor)`, once per Snakemake invocation (its main process):
  - the sandbox (evaluators.execution.sandbox) works here when the config evaluates or
    rewards a benchmark that runs programs (evaluators.tasks.SANDBOXED): a local run of jobs
    stops with one line; a dry run, a lint or a report, or a cluster's run (whose jobs run on
    other machines) warns;
  - the MLflow store suits the executor: SQLite with a cluster executor warns, naming the
    tracking server command (docs/MLFLOW.md);
  - the compute: GPU-hours by stage on GPUs, CPU job-minutes on a CPU (gspo.infra.compute_plan).
"""

from __future__ import annotations

import glob
import json
import pathlib
import sys

from evaluators.tasks import SANDBOXED
from gspo.config.fields import ConfigError
from gspo.infra import compute_plan as cp
from gspo.infra.memory_plan import PRESETS, Shape

LOCAL_EXECUTORS = ("local", "dryrun", "touch")
ASSUMED_TEST_PROBLEMS = 300  # a real test set without a limit whose files are not here
SERVER = "python -m pipeline.mlflow_server --host 0.0.0.0"


def engine_check(cfg, key: str) -> None:
    """The RL config `cfg` (the plan's `key`) checked by its engine's own validation."""
    try:
        if cfg.engine == "verl":
            from gspo.engines.verl import job as verl_engine

            verl_engine.check(cfg)
        elif cfg.engine == "trl":
            from gspo.engines.trl import rl as trl_engine

            trl_engine.check(cfg)
    except ConfigError as e:
        raise ConfigError(f"config: {key}.{e}") from None


def sft_engine_check(cfg) -> None:
    if cfg.engine == "trl":
        from gspo.engines.trl import sft as trl_sft

        try:
            trl_sft.check(cfg)
        except ConfigError as e:
            raise ConfigError(f"config: sft.{e}") from None


def sandbox_problem(plan) -> str | None:
    """Why the benchmarks of `plan` that run programs cannot run here, None when they can (or
    there are none)."""
    need = [b for b in (*plan.benchmarks, *plan.rl_tasks) if b in SANDBOXED]
    if not need:
        return None
    from evaluators.execution import sandbox

    try:
        sandbox.check_available()
    except sandbox.SandboxUnavailable as e:
        names = ", ".join(dict.fromkeys(need))
        return (
            f"config: benchmarks / rl_tasks: {names} run programs in the sandbox, which does "
            f"not work here ({' '.join(str(e).split())}); see docs/SANDBOX.md, or leave "
            f"{names} out of benchmarks and RL (rl_tasks: {{aime: 1.0}})"
        )
    return None


def store_warning(uri: str, executor: str) -> str | None:
    if uri.startswith("sqlite:") and executor not in LOCAL_EXECUTORS:
        return (
            f"warning: the MLflow store is SQLite ({uri}) and the jobs run on the {executor} "
            "executor: concurrent jobs on a shared file system are the wrong store for it "
            f"(docs/MLFLOW.md); start a tracking server ({SERVER}) and set tracking.uri or "
            "MLFLOW_TRACKING_URI to the URI it prints"
        )
    return None


def report(plan, executor: str = "local", out=sys.stderr, runs_jobs: bool | None = None) -> None:
    """The checks and the compute estimate of the module doc, as lines on `out`; raises
    ConfigError when the sandbox is missing from a local run of jobs (`runs_jobs`, default: not
    the plan's dry run)."""
    runs_jobs = not plan.dry_run if runs_jobs is None else runs_jobs
    problem = sandbox_problem(plan)
    if problem and runs_jobs and executor in LOCAL_EXECUTORS:
        raise ConfigError(problem)
    lines = []
    if problem:
        where = "checked here; the jobs run elsewhere" if runs_jobs else "no job runs now"
        lines.append(f"warning: {problem} ({where})")
    lines.append(store_warning(plan.tracking_uri, executor))
    lines += compute_lines(plan)
    for line in filter(None, lines):
        print(line, file=out)


# -- the compute --------------------------------------------------------------------------------


def shape_of(model: str) -> Shape | None:
    """A model's shapes: its directory's config.json, else a gspo.infra.memory_plan preset its name
    contains (/models/Qwen3-1.7B-Base: Qwen3-1.7B); None when neither."""
    p = pathlib.Path(model) / "config.json"
    if p.is_file():
        return Shape.of(json.loads(p.read_text()))
    name = pathlib.Path(model).name
    hits = sorted((k for k in PRESETS if k.lower() in name.lower()), key=len)
    return Shape.of(PRESETS[hits[-1]]) if hits else None


def test_problems(plan, bench: str, limit: int) -> tuple[int, bool]:
    """(problems a `bench` evaluation scores, whether the number is assumed)."""
    files = getattr(plan.data_cfg.files, bench)
    if not files.test:
        n, assumed = getattr(plan.data_cfg, bench).test_n, False
    elif files.limit:
        n, assumed = files.limit, False
    else:
        n, assumed = _rows(files.test), False
        if n is None:
            n, assumed = ASSUMED_TEST_PROBLEMS, True
    return (min(n, limit) if limit else n), assumed


def _rows(pattern: str) -> int | None:
    """Records in the local .jsonl / .parquet files `pattern` names, None when not countable."""
    paths = sorted(glob.glob(pattern))
    if not paths or not all(p.endswith((".jsonl", ".parquet")) for p in paths):
        return None
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(p).metadata.num_rows
        if p.endswith(".parquet")
        else sum(1 for line in open(p) if line.strip())
        for p in paths
    )


def evaluations(plan) -> list[tuple[dict, int]]:
    """(eval config, how many models it evaluates): the SFT model and each run's last budget
    get the full config, the budgets between the intermediate one."""
    runs = len(plan.variants) * len(plan.seeds)
    mids = len([b for b in plan.nonzero_budgets() if b != plan.budgets[-1]])
    full = runs + (1 if 0 in plan.budgets else 0)
    return [
        pair
        for b in plan.benchmarks
        for pair in (
            (plan.eval_cfgs[b], full),
            (plan.mid_eval_cfgs.get(b, plan.eval_cfgs[b]), runs * mids),
        )
        if pair[1]
    ]


def _gpu_hours(plan, shape: Shape, gpu: cp.GPU) -> dict[str, float]:
    s, hours = plan.sft_cfg, {}
    if s.device.startswith("cuda"):
        hours["sft"] = (
            cp.sft_gpu_seconds(
                shape, gpu, steps=s.steps, batch_size=s.batch_size, max_len=s.max_len
            )
            / 3600
        )
    rl = [c for c in plan.rl_cfgs.values() if c.device.startswith("cuda")]
    if rl:
        hours["rl"] = (
            sum(
                sum(
                    cp.rl_gpu_seconds(
                        shape,
                        gpu,
                        steps=c.steps,
                        prompts=c.prompts_per_step,
                        group=c.group_size,
                        max_new=c.max_new_tokens,
                        minibatches=c.minibatches,
                        epochs=c.epochs,
                        recompute=c.old_logprobs == "recompute",
                        share=c.rollout.gpu_memory_utilization or 0.3,
                    ).values()
                )
                for c in rl
            )
            / 3600
        )
    ev = [(c, n) for c, n in evaluations(plan) if c["device"].startswith("cuda")]
    if ev:
        hours["eval"] = (
            sum(
                n
                * cp.eval_gpu_seconds(
                    shape,
                    gpu,
                    samples=c["samples"] * test_problems(plan, c["benchmark"], c["limit"])[0],
                    max_new=c["max_new_tokens"],
                    share=c["gpu_memory_utilization"] or 0.9,
                )
                for c, n in ev
            )
            / 3600
        )
    return hours


def _cpu_seconds(plan) -> dict[str, float]:
    r, s = cp.CPU_RATES, plan.sft_cfg
    out = {"data": r["start"]}
    if not s.device.startswith("cuda"):
        out["sft"] = r["start"] + s.steps * s.batch_size * r["sft"]
    out["rl"] = sum(
        r["start"] + c.steps * c.prompts_per_step * c.group_size * c.max_new_tokens * r["rl"]
        for c in plan.rl_cfgs.values()
        if not c.device.startswith("cuda")
    )
    ev = [(c, n) for c, n in evaluations(plan) if not c["device"].startswith("cuda")]
    if ev:  # one job evaluates one model on every benchmark
        jobs = (0 in plan.budgets) + len(plan.rl_cfgs) * len(plan.nonzero_budgets())
        out["eval"] = jobs * r["start"] + sum(
            n
            * c["samples"]
            * test_problems(plan, c["benchmark"], c["limit"])[0]
            * c["max_new_tokens"]
            * r["eval_sandboxed" if c["benchmark"] in SANDBOXED else "eval"]
            for c, n in ev
        )
    out["track+report"] = (len(plan.rl_cfgs) + 1) * r["track"] + r["aggregate"] + r["report"]
    return {k: v for k, v in out.items() if v}


def compute_lines(plan, gpu: cp.GPU | None = None) -> list[str]:
    """The plan's compute estimate: GPU-hours by stage (on `gpu`, an H100 by default), CPU
    job-minutes for the rest."""
    gpu = gpu or cp.GPU()
    gpu_stages = plan.sft_cfg.device.startswith("cuda") or any(
        c.device.startswith("cuda") for c in plan.rl_cfgs.values()
    )
    shape = shape_of(plan.sft_cfg.model) if gpu_stages else None
    hours = _gpu_hours(plan, shape, gpu) if shape else {}
    cpu = {k: v for k, v in _cpu_seconds(plan).items() if k not in hours}
    evals = sum(n for _, n in evaluations(plan))
    what = {
        "rl": f" in {len(plan.rl_cfgs)} runs",
        "eval": f" in {evals} model x benchmark evaluations",
    }
    parts = [f"{k} {v:,.0f}{what.get(k, '')}" for k, v in hours.items()]
    minutes = [f"{k} {v / 60:,.1f}{what.get(k, '')}" for k, v in cpu.items()]
    if hours:
        head = (
            f"plan: compute, estimated: ~{sum(hours.values()):,.0f} {gpu.name} GPU-hours ("
            f"{', '.join(parts)}) and ~{sum(cpu.values()) / 60:,.0f} CPU job-minutes "
            f"({', '.join(minutes)})"
        )
    else:
        head = (
            f"plan: compute, estimated: ~{sum(cpu.values()) / 60:,.0f} CPU job-minutes "
            f"({', '.join(minutes)})"
        )
    notes = []
    if gpu_stages and not shape:
        notes.append(
            f"GPU stages not estimated: sft.model {plan.sft_cfg.model!r} is neither a "
            f"model directory nor named like a preset ({', '.join(PRESETS)})"
        )
    if hours:
        notes.append(
            f"assumed: responses {cp.RESPONSE_FILL:.0%} of max_new_tokens, prompts "
            f"{cp.PROMPT_TOKENS} tokens, SFT records {cp.SFT_FILL:.0%} of max_len, "
            f"training at {cp.TRAIN_MFU:.0%} MFU, decoding bound by memory bandwidth"
        )
    assumed = [
        b
        for b in plan.benchmarks
        if any(
            test_problems(plan, b, c["limit"])[1]
            for c, _ in evaluations(plan)
            if c["benchmark"] == b
        )
    ]
    if assumed:
        notes.append(
            f"{', '.join(assumed)}: {ASSUMED_TEST_PROBLEMS} test problems assumed (no "
            "limit, files not here)"
        )
    notes.append("CPU rates measured on the default run, 2-core AMD EPYC")
    return [head, f"plan: ({'; '.join(notes)}; gspo.infra.compute_plan)"]
