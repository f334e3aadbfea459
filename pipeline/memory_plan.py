"""Plan: the per-GPU memory of a workflow config's RL runs (gspo.infra.memory_plan), phase by phase.

    python -m pipeline.memory_plan --config config/real-scale.yaml --model Qwen3-8B [--gpus 8]
        [--gpu-gib 79.6] [--prompt-tokens 1024] [--sync streamed|full]

`--model` is a preset (gspo.infra.memory_plan.PRESETS: the public checkpoints' config.json fields) or
a model directory / config.json; without it, the config's sft.model. Prints one table; exits 1
when some phase leaves less than gspo.infra.memory_plan.MARGIN of the GPU free.
"""

from __future__ import annotations

import json
import pathlib

import yaml

from gspo.config.fields import ConfigError
from gspo.infra.memory_plan import MARGIN, PRESETS, Settings, Shape, plan
from pipeline._cli import Parser, run


def model_config(name: str) -> dict:
    if name in PRESETS:
        return PRESETS[name]
    p = pathlib.Path(name)
    p = p / "config.json" if p.is_dir() else p
    if not p.is_file():
        raise ConfigError(
            f"--model: {name!r} is neither a preset ({', '.join(PRESETS)}) nor a "
            "model directory or config.json"
        )
    return json.loads(p.read_text())


def settings_of(
    cfg: dict, *, gpus: int, gpu_gib: float, prompt_tokens: int, sync: str, **host
) -> Settings:
    """The plan's Settings from a workflow config's rl section (RLConfig's defaults where unset:
    no token budget means one micro-batch of a whole minibatch, planned as its tokens)."""
    rl = cfg.get("rl") or {}
    r = rl.get("rollout") or {}
    seq = prompt_tokens + int(rl.get("max_new_tokens", 64))
    per_rank = int(rl.get("prompts_per_step", 8)) * int(rl.get("group_size", 8)) // gpus
    micro = int(rl.get("max_tokens_per_micro_batch", 0)) or (
        seq * max(1, per_rank // int(rl.get("minibatches", 1)))
    )
    return Settings(
        gpus=gpus,
        gpu_gib=gpu_gib,
        micro_tokens=micro,
        logprob_chunk=int(rl.get("logprob_chunk", 0)) or seq,
        activation_checkpointing=bool(rl.get("activation_checkpointing", False)),
        engine_share=float(r.get("gpu_memory_utilization", 0)) or 0.3,
        sleep=bool(r.get("sleep", False)),
        seq_len=seq,
        sequences_per_rank=per_rank,
        sync=sync,
        **host,
    )


def table(p: dict, s: Settings) -> str:
    lines = [
        f"parameters: {p['params'] / 1e9:.2f}B; {s.gpus} x {s.gpu_gib} GiB; token budget "
        f"{s.micro_tokens}; engine share {s.engine_share} (sleep {s.sleep}); sync {s.sync}",
        "",
        "| item | GiB |",
        "| --- | --- |",
    ]
    lines += [f"| {k} | {v:.1f} |" for k, v in p["items"].items()]
    lines += [
        "",
        f"| phase | GiB per GPU (fits: <= {(1 - MARGIN) * s.gpu_gib:.1f}) |",
        "| --- | --- |",
    ]
    lines += [f"| {k} | {v:.1f} |" for k, v in p["phases"].items()]
    h = p["host"]
    lines += [
        "",
        f"| host memory, one node of {min(s.gpus_per_node, s.gpus)} ranks | GiB "
        f"(fits: <= {(1 - MARGIN) * s.host_gib:.0f}; /dev/shm {h['shm_gib']:.0f}) |",
        "| --- | --- |",
    ]
    lines += [f"| {k} | {v:.1f} |" for k, v in h["items"].items()]
    lines += [f"| host, {k} | {v:.1f} |" for k, v in h["phases"].items()]
    lines += [
        "",
        f"KV cache {p['kv_cache_gib']:.1f} GiB: {p['concurrent_sequences']:.1f} "
        f"sequences of {s.seq_len} tokens at once, {p['waves']:.1f} waves for a rank's "
        f"{s.sequences_per_rank}; fits: {p['fits']}",
    ]
    return "\n".join(lines)


def parser() -> Parser:
    ap = Parser(
        "python -m pipeline.memory_plan",
        "Per-GPU memory of a workflow config's RL runs; exit 1 when a phase does not fit.",
    )
    ap.add_argument("--config", required=True, help="a workflow config (config/*.yaml)")
    ap.add_argument("--model", help="a preset, model directory or config.json (default: sft.model)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--gpu-gib", type=float, default=79.6, help="usable memory of one GPU")
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="the longest prompt")
    ap.add_argument(
        "--sync",
        choices=("streamed", "full"),
        default="streamed",
        help="the weight sync: one tensor at a time (the code), or the whole state "
        "dict on the device (before issue 23)",
    )
    ap.add_argument("--host-gib", type=float, default=1000.0, help="a node's host memory")
    ap.add_argument(
        "--shm-gib",
        type=float,
        default=0.0,
        help="/dev/shm's size (default: half the host memory, tmpfs's default)",
    )
    ap.add_argument(
        "--sync-writers",
        choices=("node", "rank"),
        default="node",
        help="who writes the vLLM sync's file: one rank per node (the code), or "
        "every rank (before issue 43)",
    )
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    path = pathlib.Path(args.config)
    if not path.is_file():
        raise ConfigError(f"--config: {path} does not exist")
    cfg = yaml.safe_load(path.read_text()) or {}
    name = args.model or (cfg.get("sft") or {}).get("model")
    if not name:
        raise ConfigError(f"{path}: no sft.model; pass --model")
    s = settings_of(
        cfg,
        gpus=args.gpus,
        gpu_gib=args.gpu_gib,
        prompt_tokens=args.prompt_tokens,
        sync=args.sync,
        host_gib=args.host_gib,
        shm_gib=args.shm_gib,
        sync_writers=args.sync_writers,
    )
    p = plan(Shape.of(model_config(name)), s)
    print(table(p, s))
    return 0 if p["fits"] else 1


if __name__ == "__main__":
    run(main)
