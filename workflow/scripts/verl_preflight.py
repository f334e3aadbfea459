"""The check verl_launch.py runs first, on every node, in verl's environment (the image or the
conda env): everything the job will call imports, the reward scores, the sandbox and the GPUs
are there. Fails in one line naming all that is missing, exit 1; prints one line and exits 0
otherwise.

    python workflow/scripts/verl_preflight.py --config-name NAME [--gpus G]

A job that would stop minutes later, after Ray and vLLM have started (or, worse, would score
every AIME answer by integer comparison only), stops here in its first seconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import shutil
import socket
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERL_VERSION = "0.9.1"
# what verl's trainer, its vLLM rollout and this project's reward import (each import a literal,
# so tests/test_layers.py sees every arrow)
COMMON = {
    "verl.trainer.main_ppo": lambda: importlib.import_module("verl.trainer.main_ppo"),
    "ray": lambda: importlib.import_module("ray"),
    "vllm": lambda: importlib.import_module("vllm"),
    "math_verify": lambda: importlib.import_module("math_verify"),
    "pyarrow": lambda: importlib.import_module("pyarrow"),
    "evaluators.for_verl": lambda: importlib.import_module("evaluators.for_verl"),
}
# verl's Megatron engine: Megatron-Core, Megatron-Bridge (its default bridge), Transformer
# Engine (its checkpoints) and flash-attn's padding helpers (its sequence packing)
MEGATRON = {
    "verl.workers.engine.megatron.transformer_impl": lambda: importlib.import_module(
        "verl.workers.engine.megatron.transformer_impl"
    ),
    "megatron.core": lambda: importlib.import_module("megatron.core"),
    "megatron.bridge": lambda: importlib.import_module("megatron.bridge"),
    "transformer_engine": lambda: importlib.import_module("transformer_engine"),
    "flash_attn.bert_padding": lambda: importlib.import_module("flash_attn.bert_padding"),
}


def problems(config_name: str, gpus: int) -> list[str]:
    """What the job would miss, each as a short phrase; [] when nothing."""
    out = []
    mods = {**COMMON, **(MEGATRON if "megatron" in config_name else {})}
    for name, load in mods.items():
        try:
            load()
        except Exception as e:  # noqa: BLE001 - any import failure is the finding
            out.append(
                f"cannot import {name} ({type(e).__name__}: {str(e).splitlines()[0]})"
                if str(e)
                else f"cannot import {name} ({type(e).__name__})"
            )
    if "verl.trainer.main_ppo" in sys.modules:
        import verl

        if verl.__version__ != VERL_VERSION:
            out.append(f"verl {verl.__version__}, not {VERL_VERSION}")
    if "evaluators.for_verl" in sys.modules and "math_verify" in sys.modules:
        from evaluators.for_verl import compute_score

        # 6/3 is 2 only to math-verify: the integer fallback alone would score it 0
        rec = {"id": "preflight", "task": "aime", "prompt": "1+1?", "answer": 2}
        if compute_score("aime", "\\boxed{\\frac{6}{3}}", json.dumps(rec)) != 1.0:
            out.append("the reward does not score \\frac{6}{3} as 2 (math-verify not in use)")
    if shutil.which("bwrap") is None:
        out.append("no bwrap on PATH (the code sandboxes)")
    if gpus:
        try:
            import torch

            seen = torch.cuda.device_count()
        except Exception:  # noqa: BLE001
            seen = 0
        if seen < gpus:
            out.append(f"{seen} GPUs visible, {gpus} expected")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-name", required=True, help="verl's trainer config (job.json's)")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs this node must see (0: none)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    found = problems(args.config_name, args.gpus)
    host = socket.gethostname()
    if found:
        print(
            f"verl_preflight: {host}: verl's environment cannot run this job: " + "; ".join(found),
            file=sys.stderr,
        )
        return 1
    print(
        f"verl_preflight: {host}: verl {VERL_VERSION}, {args.config_name}'s imports, the "
        f"reward, bwrap and {args.gpus} GPUs: ok"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
