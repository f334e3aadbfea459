"""A finished verl run collected into this project's run (`engine: verl`, step 3 of
gspo.engines.verl.job's module doc): verl's checkpoints at this run's checkpoint steps become
checkpoints/step_S (the layout evaluation loads), verl's metrics become metrics.jsonl under this
project's names (METRICS; verl's own kept under `verl/`), mirrored into the stage's MLflow run
exactly once (gspo.tracking.runs).

verl saves a step's checkpoint before it logs the step: a run stopped between the two resumes
after that checkpoint and never logs the step. Such a step is still exported (a budget's
checkpoint is not skipped); its compute is the mean of the logged steps', and its row in
metrics.jsonl holds the counters and `verl/row_missing` only.
"""

from __future__ import annotations

import json
import math
import pathlib

from gspo.config.fields import to_dict
from gspo.config.train import RLConfig
from gspo.engines.verl.job import DONE, JOB, check
from gspo.infra import checkpoint as ckpt
from gspo.io import write_json
from gspo.native.data import Mix

# verl's logged name -> this project's (the report's curves, fit and claims read these). verl's
# pg_clipfrac is a token-weighted mean for every loss mode, GSPO's included: it is
# clip_frac_tokens; verl logs no sequence-level clip fraction, so clip_frac_seqs stays absent.
METRICS = {
    "critic/score/mean": "reward_mean",
    "actor/pg_clipfrac": "clip_frac_tokens",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/grad_norm": "grad_norm",
    "actor/pg_loss": "loss",
    "actor/lr": "lr",
    "response_length/mean": "response_length",
    "timing_s/step": "time_step_s",
    "timing_s/gen": "time_rollout_s",
    "timing_s/update_actor": "time_update_s",
}


def verl_metrics(job_dir) -> list[tuple[int, dict]]:
    """verl's per-step metrics from its file logger, one file per attempt (metrics.<k>.jsonl,
    the launcher numbers them: verl's logger truncates its file when a run resumes); a step an
    attempt logged again after a resume takes the later attempt's record."""
    by_step: dict[int, dict] = {}
    files = sorted(
        pathlib.Path(job_dir).glob("metrics.*.jsonl"), key=lambda p: int(p.name.split(".")[1])
    )
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                by_step[int(rec["step"])] = rec["data"]
    return sorted(by_step.items())


def record(data: dict, cfg: RLConfig, forward_flops) -> tuple[dict, float]:
    """This project's record of one verl step (METRICS; verl's own under verl/) and the step's
    compute: prompts x group_size sequences of verl's mean prompt + response length, charged
    as gspo.model.flops charges the native trainer (generation, the old-log-prob pass, a reference
    pass with a KL term, 3 per update epoch)."""
    rec = {ours: data[k] for k, ours in METRICS.items() if k in data}
    n = cfg.prompts_per_step * cfg.group_size
    length = round(data.get("prompt_length/mean", 0) + data.get("response_length/mean", 0))
    passes = 2 + (cfg.kl_coef > 0) + 3 * cfg.epochs
    flops = passes * forward_flops([length] * n)
    rec["tokens_generated"] = n * data.get("response_length/mean", 0)
    rec.update({f"verl/{k}": v for k, v in data.items() if isinstance(v, (int, float))})
    return rec, flops


def _hf_files(step_dir: pathlib.Path) -> pathlib.Path:
    """The Hugging Face folder of one of verl's checkpoints (fsdp: actor/huggingface; megatron
    layout v2: actor/model/huggingface)."""
    for sub in ("actor/huggingface", "actor/model/huggingface"):
        p = step_dir / sub
        if (p / "config.json").is_file() and any(p.glob("*.safetensors")):
            return p
    raise FileNotFoundError(
        f"{step_dir}: no Hugging Face model files (actor/huggingface or "
        "actor/model/huggingface with config.json and *.safetensors); "
        "verl saves them with checkpoint.save_contents: [..., hf_model]"
    )


def export(job_dir, ckpt_root, step: int, counters: dict) -> pathlib.Path:
    """verl's global_step_<step> -> ckpt_root/step_<step>: its model files, the META record
    evaluation reads and the state file that marks it complete."""
    dest = pathlib.Path(ckpt_root) / f"step_{step:06d}"
    ckpt.export_model_files(
        _hf_files(pathlib.Path(job_dir) / "checkpoints" / f"global_step_{step}"),
        dest,
        {"step": step, "stage": "rl", "engine": "verl", "compute_flops": counters["compute_flops"]},
        {"step": step, "counters": dict(counters)},
    )
    return dest


def saved_steps(job_dir) -> list[int]:
    """The steps of verl's complete checkpoints: those up to the one its tracker file names
    (written after each save)."""
    root = pathlib.Path(job_dir) / "checkpoints"
    tracker = root / "latest_checkpointed_iteration.txt"
    if not tracker.is_file():
        return []
    last = int(tracker.read_text().strip())
    return sorted(
        s for s in (int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*")) if s <= last
    )


def steps_to_collect(rows: dict, saved: set, steps: int) -> list[int]:
    """Steps 1..steps, each logged or saved; a step neither logged nor saved, or a final step
    that was not saved, is a run that did not finish (module doc: only a saved step can lack
    its row)."""
    from gspo.errors import TrainingError

    gaps = [s for s in range(1, steps + 1) if s not in rows and s not in saved]
    if gaps or steps not in saved:
        raise TrainingError(
            f"verl's run logged steps {_spans(rows)} and saved {sorted(saved)}; "
            f"this config trains {steps} steps, saved at the last "
            f"(missing: {_spans(gaps) or steps})"
        )
    return list(range(1, steps + 1))


def _spans(steps) -> str:
    """1-3,5 for [1, 2, 3, 5]."""
    out: list[list[int]] = []
    steps = sorted(steps)
    for s in steps:
        if out and out[-1][1] == s - 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in out)


def collect(cfg: RLConfig) -> pathlib.Path:
    """Turn the finished verl run in out_dir/verl into this project's run (module doc), inside
    the caller's stage run; returns out_dir/model."""
    from gspo.errors import TrainingError
    from gspo.model.flops import FlopCounter
    from gspo.model.models import load_model
    from gspo.tracking.runs import MetricsLog

    check(cfg)
    out = pathlib.Path(cfg.out_dir)
    job = out / JOB
    if not (job / DONE).is_file():
        raise TrainingError(
            f"{job}: no finished verl run (no {DONE}); verl's trainer runs "
            "first, in its own environment (the workflow's verl_train rule)"
        )
    done = json.loads((job / DONE).read_text())
    rows, saved = dict(verl_metrics(job)), set(saved_steps(job))
    try:
        steps = steps_to_collect(rows, saved, cfg.steps)
    except TrainingError as e:
        raise TrainingError(f"{job}: {e}") from None
    ckpt.write_run_info(
        out,
        ckpt.run_info(
            to_dict(cfg),
            Mix(cfg.train_data).hashes(),
            stage="rl",
            algorithm=cfg.algorithm,
            engine="verl",
            verl_version=done.get("verl_version"),
            world_size=done.get("world_size"),
        ),
    )
    forward = FlopCounter(load_model(cfg.model, weights=False)[0]).forward
    log = MetricsLog(out / "metrics.jsonl")
    counters = {"compute_flops": 0.0, "tokens_generated": 0.0, "tokens_trained": 0.0, "wall_s": 0.0}
    logged = {s: record(d, cfg, forward) for s, d in rows.items() if s <= cfg.steps}
    # a step without its row (saved, then stopped before its log): the logged steps' mean
    mean_flops = sum(f for _, f in logged.values()) / max(1, len(logged))
    mean_tokens = sum(r["tokens_generated"] for r, _ in logged.values()) / max(1, len(logged))
    bad = 0
    for step in steps:
        rec, flops = logged.get(
            step, ({"tokens_generated": mean_tokens, "verl/row_missing": 1}, mean_flops)
        )
        rec = dict(rec)
        tokens = rec.pop("tokens_generated")
        counters["compute_flops"] += flops
        counters["tokens_generated"] += tokens
        counters["tokens_trained"] += tokens * cfg.epochs
        counters["wall_s"] += rec.get("time_step_s", 0.0)
        finite = all(math.isfinite(rec.get(k, 0.0)) for k in ("loss", "grad_norm"))
        bad = 0 if finite else bad + 1
        if bad >= cfg.max_consecutive_nonfinite:
            raise TrainingError(
                f"step {step}: {bad} non-finite losses or gradient norms in a "
                f"row in verl's log (max_consecutive_nonfinite)"
            )
        if step in saved:
            export(job, out / "checkpoints", step, counters)
        log.log(step, {**rec, **counters})
    ckpt.prune_checkpoints(out / "checkpoints", cfg.keep_last, cfg.keep_steps)
    ckpt.publish_model(ckpt.latest_checkpoint(out / "checkpoints"), out / "model")
    write_json(
        out / "summary.json",
        {
            "steps": cfg.steps,
            "algorithm": cfg.algorithm,
            "engine": "verl",
            "world_size": done.get("world_size"),
            **counters,
        },
    )
    return out / "model"


def run_rl(
    cfg: RLConfig, reward_fn=None, *, tracking=None, restart_if_changed: bool = False, world=None
):
    """gspo.native.trainer.run_rl's counterpart for pipeline.train: the collected run in its MLflow
    stage run. verl scored the rewards itself (evaluators.for_verl), so `reward_fn` is unused."""
    from gspo.native.trainer import prepare_out_dir
    from gspo.tracking.runs import stage_run

    check(cfg)
    tracking = prepare_out_dir(cfg, tracking, restart_if_changed)
    with stage_run("rl", cfg.out_dir, commit="checkpoint", tracking=tracking):
        return collect(cfg)
