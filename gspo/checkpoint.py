"""Checkpoints that are complete or absent, and the record of what produced a run."""

from __future__ import annotations

import hashlib
import json
import pathlib
import platform
import shutil
import subprocess
import sys

import torch

from gspo.io import atomic_dir, write_json

STATE = "trainer_state.pt"


def save_checkpoint(ckpt_root, step: int, model, tokenizer, state: dict) -> pathlib.Path:
    """Write `ckpt_root/step_{step:06d}/` (HF model dir + trainer state) via a temp dir + rename."""
    final = pathlib.Path(ckpt_root) / f"step_{step:06d}"
    with atomic_dir(final) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        torch.save(state, tmp / STATE)
    return final


def list_checkpoints(ckpt_root) -> list[pathlib.Path]:
    """Complete checkpoints, oldest first (temp dirs start with '.' and are never listed)."""
    root = pathlib.Path(ckpt_root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step_*") if (p / STATE).is_file())


def latest_checkpoint(ckpt_root) -> pathlib.Path | None:
    ckpts = list_checkpoints(ckpt_root)
    return ckpts[-1] if ckpts else None


def publish_model(src_dir, dest) -> None:
    """Copy a checkpoint's model files to `dest` atomically (the stage's final output)."""
    with atomic_dir(dest) as tmp:
        for f in pathlib.Path(src_dir).iterdir():
            if f.name != STATE:
                shutil.copy2(f, tmp / f.name)


def git_commit() -> str:
    here = pathlib.Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + ("-dirty" if dirty else "")


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
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "command": " ".join(sys.argv),
        **extra,
    }


def write_run_info(out_dir, info: dict) -> None:
    write_json(pathlib.Path(out_dir) / "run_info.json", info)
