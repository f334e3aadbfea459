"""Checkpoints that are complete or absent, the record of what produced a run, and a run's
lineage (what it started from), so that a run whose config or starting model changed starts
over instead of resuming checkpoints that no longer belong to it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import platform
import shutil
import signal
import sys
import threading
import warnings

import torch

from gspo.errors import TrainingError
from gspo.infra.provenance import git_commit, version  # noqa: F401  (git_commit: part of this module's API)
from gspo.io import atomic_dir, write_json

STATE = "trainer_state.pt"  # written last: a checkpoint folder holding it is complete
OPTIM = "optimizer"  # the optimizer state, a Distributed Checkpoint folder
META = "checkpoint.json"  # {stage, step, compute_flops}: readable without loading the state
LINEAGE = "lineage.json"
# What a run leaves in its folder; wiped when its lineage changes (mlflow_run.json is not: the
# caller first supersedes the MLflow run it names).
RUN_STATE = (
    "checkpoints",
    "metrics.jsonl",
    "model",
    "summary.json",
    "run_info.json",
    "trl",
)  # trl: TRL's own checkpoints (gspo.engines.trl.rl)


def save_checkpoint(
    ckpt_root,
    step: int,
    model,
    tokenizer,
    state: dict,
    meta: dict | None = None,
    weights: dict | None = None,
    precision: str = "float32",
) -> pathlib.Path:
    """Write `ckpt_root/step_{step:06d}/` (HF model dir + trainer state + META) via a temp dir +
    rename. `weights`: the full state dict to write when `model` itself is sharded."""
    final = pathlib.Path(ckpt_root) / f"step_{step:06d}"
    with atomic_dir(final) as tmp:
        save_model_files(model, tmp, weights, precision)
        tokenizer.save_pretrained(tmp)
        torch.save(state, tmp / STATE)
        write_json(tmp / META, {"step": step, **(meta or {})})
    return final


def save_model_files(model, folder, weights: dict | None, precision: str) -> None:
    """The model as Hugging Face files in the precision it computes in (`weights`: its full
    state dict when `model` is sharded): bf16 training writes bf16 files, as published
    checkpoints are, half the size of its fp32 master weights (33 GB for an 8B model). The
    masters an exact resume needs go into the RL checkpoint's Distributed Checkpoint, sharded."""
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    if dtype != torch.float32:
        weights = {
            k: v.to(dtype) if v.is_floating_point() else v
            for k, v in (model.state_dict() if weights is None else weights).items()
        }
    model.save_pretrained(folder, safe_serialization=True, state_dict=untied(model, weights))
    conf = pathlib.Path(folder) / "config.json"  # save_pretrained names the parameters' dtype
    write_json(conf, {**json.loads(conf.read_text()), "dtype": str(dtype).split(".")[1]})


def untied(model, weights: dict | None) -> dict | None:
    """`weights` without the output head when it is tied to the input embedding: save_pretrained
    spots tied tensors by their shared storage, which gathered copies no longer have, and would
    write the head twice."""
    if weights is None or not model.config.tie_word_embeddings:
        return weights
    head = model.get_output_embeddings()
    name = next(n for n, m in model.named_modules() if m is head) + ".weight"
    return {k: v for k, v in weights.items() if k != name}


def checkpoint_meta(model_dir) -> dict | None:
    """The META record of a checkpoint or published model directory, None when it has none."""
    p = pathlib.Path(model_dir) / META
    return json.loads(p.read_text()) if p.is_file() else None


def list_checkpoints(ckpt_root) -> list[pathlib.Path]:
    """Complete checkpoints, oldest first (temp dirs start with '.' and are never listed)."""
    root = pathlib.Path(ckpt_root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step_*") if (p / STATE).is_file())


def prune_checkpoints(ckpt_root, keep_last: int, keep_steps=()) -> list[pathlib.Path]:
    """Remove all but the newest `keep_last` complete checkpoints (0: keep every one), never
    those at `keep_steps`, and any half-written temp folder a killed process left (their names
    start with '.'); returns what was removed. Call it only while no checkpoint is being
    written."""
    root = pathlib.Path(ckpt_root)
    removed = [p for p in root.glob(".step_*") if p.is_dir()] if root.is_dir() else []
    if keep_last > 0:
        kept = set(keep_steps)
        removed += [
            p for p in list_checkpoints(root)[:-keep_last] if int(p.name.split("_")[1]) not in kept
        ]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def latest_checkpoint(ckpt_root) -> pathlib.Path | None:
    ckpts = list_checkpoints(ckpt_root)
    return ckpts[-1] if ckpts else None


def publish_model(src_dir, dest) -> None:
    """Copy a checkpoint's model files (not the trainer or optimizer state) to `dest` atomically
    (the stage's final output: a Hugging Face folder that transformers and vLLM load)."""
    with atomic_dir(dest) as tmp:
        for f in pathlib.Path(src_dir).iterdir():
            if f.name not in (STATE, OPTIM):
                shutil.copy2(f, tmp / f.name)


def export_model_files(src_dir, dest, meta: dict, state: dict, skip=lambda name: False) -> None:
    """Another engine's saved model folder -> this project's checkpoint `dest`: its files (those
    `skip` does not name), META, then STATE last, which marks the folder complete."""
    with atomic_dir(dest) as tmp:
        for f in pathlib.Path(src_dir).iterdir():
            if f.is_file() and not skip(f.name):
                shutil.copy2(f, tmp / f.name)
        write_json(tmp / META, meta)
        torch.save(state, tmp / STATE)


def config_hash(cfg_dict: dict) -> str:
    return hashlib.sha256(json.dumps(cfg_dict, sort_keys=True).encode()).hexdigest()[:16]


def run_info(cfg_dict: dict, data_hashes: dict[str, str], **extra) -> dict:
    import transformers

    return {
        "config": cfg_dict,
        "config_hash": config_hash(cfg_dict),
        "seed": cfg_dict.get("seed"),
        "git_commit": git_commit(),
        "data_hashes": data_hashes,
        "versions": {
            "gspo-bench": version(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "command": " ".join(sys.argv),
        **extra,
    }


def write_run_info(out_dir, info: dict) -> None:
    write_json(pathlib.Path(out_dir) / "run_info.json", info)


def model_fingerprint(model: str) -> str:
    """Identifies a starting model: a preset's name, or a hash of the names, sizes and
    modification times of a model directory's files (cheap at any size; a rebuilt model counts
    as a new one even when its bytes happen to match)."""
    path = pathlib.Path(model)
    if not path.is_dir():
        return model
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def lineage(cfg_dict: dict) -> dict:
    """What a run is made from: its config (less the fields that may change on resume) and its
    starting model (`cfg_dict["model"]`)."""
    d = {k: v for k, v in cfg_dict.items() if k not in ("threads", "resume", "log_samples_every")}
    return {"config": config_hash(d), "model": model_fingerprint(cfg_dict["model"])}


def lineage_changed(out_dir, lineage: dict) -> bool:
    """Whether `out_dir` holds run state made from another lineage (or from an unknown one)."""
    out = pathlib.Path(out_dir)
    lfile = out / LINEAGE
    prev = json.loads(lfile.read_text()) if lfile.is_file() else None
    return prev != lineage and any((out / n).exists() for n in RUN_STATE)


def reset_run(out_dir) -> None:
    """Remove a run's state (RUN_STATE) so that it starts over."""
    out = pathlib.Path(out_dir)
    for n in RUN_STATE:
        p = out / n
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)


def write_lineage(out_dir, lineage: dict) -> None:
    write_json(pathlib.Path(out_dir) / LINEAGE, lineage)


def check_same_run(info_path: pathlib.Path, cfg_dict: dict) -> None:
    """Refuse to resume checkpoints that another config produced (only `steps` may grow)."""
    if not info_path.exists():
        return
    old = json.loads(info_path.read_text()).get("config", {})
    free = {"steps", "resume", "threads", "out_dir", "log_samples_every"}
    # A field the older run did not have yet counts as unchanged (it ran with the default).
    diff = sorted(k for k in set(old) & set(cfg_dict) if k not in free and old[k] != cfg_dict[k])
    if diff:
        raise TrainingError(
            f"{info_path.parent}: its checkpoints come from a different config (field "
            f"{diff[0]!r} differs); use another out_dir, delete the folder, or set resume: false"
        )


@contextlib.contextmanager
def _single_process_is_meant():
    """Distributed Checkpoint warns on every save and load in a world of one; that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        yield


@contextlib.contextmanager
def signals_deferred():
    """SIGTERM and SIGINT that arrive inside take effect when it ends (re-sent to this process,
    so whatever handler was installed runs then). A checkpoint being written finishes first,
    and no library sees the exception a handler raises: Distributed Checkpoint catches it
    inside its writer and re-raises a CheckpointException, which turned a KILLED run into a
    FAILED one with exit status 1."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {
        s: signal.signal(s, lambda signum, frame: got.append(signum))
        for s in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if got:
            signal.raise_signal(got[0])


def save_rl_checkpoint(
    ckpt_root,
    step: int,
    policy,
    tokenizer,
    opt,
    world,
    state: dict,
    meta: dict,
    precision: str = "float32",
    extra: dict | None = None,
) -> pathlib.Path:
    """An RL checkpoint `step_XXXXXX/`: the model as Hugging Face files in its compute precision
    (save_model_files; full tensors, sharded gathered on rank 0 in CPU memory: what evaluation
    and vLLM load), the optimizer state (and with bf16 files the fp32 master weights) as a
    Distributed Checkpoint (OPTIM) of which every rank writes its own shards (no rank holds all
    of it, and it loads into any number of ranks), and the trainer's `state`, written last by
    rank 0: the completion marker. Everything goes into one temp folder that rank 0 renames into
    place, so a checkpoint is complete or absent (a killed run's temp folder is pruned). A stop
    signal arriving meanwhile takes effect once it is written (signals_deferred). `extra`: more
    sharded state for the Distributed Checkpoint (gspo.native.staleness's kept policies)."""
    with signals_deferred():
        return _save_rl_checkpoint(
            ckpt_root,
            step,
            policy,
            tokenizer,
            opt,
            world,
            {**state, "masters": precision != "float32"},
            meta,
            precision,
            extra or {},
        )


def _save_rl_checkpoint(
    ckpt_root, step, policy, tokenizer, opt, world, state, meta, precision, extra
):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    from gspo.infra import distributed as dist

    final = pathlib.Path(ckpt_root) / f"step_{step:06d}"
    tmp = final.parent / f".{final.name}.partial"  # the same name on every rank
    if world.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier(world)
    with _single_process_is_meant():
        masters = {"model": get_model_state_dict(policy)} if state["masters"] else {}
        dcp.save(
            {"optimizer": get_optimizer_state_dict(policy, opt), **masters, **extra},
            checkpoint_id=tmp / OPTIM,
            no_dist=not world.distributed,
        )
    weights = dist.full_state_dict(policy, world, rank0_only=True) if world.distributed else None
    if world.main:
        save_model_files(policy, tmp, weights, precision)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / META, {"step": step, **meta})
        torch.save(state, tmp / STATE)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    dist.barrier(world)
    return final


def load_training_state(policy, opt, ckpt_dir: pathlib.Path, st: dict) -> None:
    """The optimizer state of checkpoint `ckpt_dir` (see save_rl_checkpoint), resharded to this
    world's ranks, and its fp32 master weights where its model files hold bf16 (`policy` was
    loaded from those); `st` is its trainer state (checkpoints written before the Distributed
    Checkpoint format hold the optimizer's own state dict there)."""
    if "optimizer" in st:
        opt.load_state_dict(st["optimizer"])
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    state = {"optimizer": get_optimizer_state_dict(policy, opt)}
    if st.get("masters"):
        state["model"] = get_model_state_dict(policy)
    with _single_process_is_meant():
        dcp.load(
            state, checkpoint_id=ckpt_dir / OPTIM, no_dist=not torch.distributed.is_initialized()
        )
    if st.get("masters"):
        set_model_state_dict(policy, state["model"])
    set_optimizer_state_dict(policy, opt, state["optimizer"])
