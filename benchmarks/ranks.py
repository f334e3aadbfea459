"""RL step time on 2 ranks against 1: the same run under torchrun with 1 and 2 processes.

    python benchmarks/ranks.py [--steps 6] [--prompts 8] [--group 8] [--new 48] [--nproc 2]

A fresh `tiny` model trains GSPO on generated AIME-style prompts (same config, same seed) once
per world size, one torch thread per rank; the figure is the median step time (rollout,
old-log-prob pass and update, from metrics.jsonl) after the first step, and the phases beside
it. On a 2-core CPU two ranks share the cores with nothing to gain: the ratio shows the
overhead of sharding (gloo collectives, the full-weight gather for the rollout engine), not a
speed-up; on GPUs each rank has its own device.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

PHASES = ("time_rollout_s", "time_old_logprob_s", "time_update_s")


def run(nproc: int, cfg: pathlib.Path, out: pathlib.Path) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "pipeline.train",
        "--config",
        str(cfg),
        "--set",
        f"out_dir={out}",
    ]
    subprocess.run(
        cmd,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt")
    ap.add_argument("--new", type=int, default=48, help="most new tokens per sample")
    ap.add_argument("--nproc", type=int, default=2, help="ranks compared with 1")
    args = ap.parse_args()

    from evaluators.benchmarks import aime
    from gspo.io import write_jsonl
    from gspo.model.models import build_tiny

    work = pathlib.Path(tempfile.mkdtemp(prefix="gspo-bench-ranks-"))
    model = build_tiny("tiny", work / "tiny", seed=0)
    data = work / "prompts.jsonl"
    write_jsonl(aime.generate(200, split="train", seed=0, difficulty="easy"), data)
    cfg = work / "rl.yaml"
    cfg.write_text(
        f"algorithm: gspo\nmodel: {model}\ntrain_data: [{{path: {data}, weight: 1}}]\n"
        f"steps: {args.steps}\nprompts_per_step: {args.prompts}\n"
        f"group_size: {args.group}\nminibatches: 4\nmax_new_tokens: {args.new}\n"
        f"ckpt_every: {args.steps}\nthreads: 1\n"
    )
    rows = {n: run(n, cfg, work / f"rl{n}")[1:] for n in (1, args.nproc)}
    print(
        f"== GSPO step time, tiny model, {args.prompts} prompts x {args.group} samples x <= "
        f"{args.new} tokens, {os.cpu_count()} cpus; median over {args.steps - 1} steps =="
    )
    base = statistics.median(sum(r[k] for k in PHASES) for r in rows[1])
    for n, rs in rows.items():
        med = statistics.median(sum(r[k] for k in PHASES) for r in rs)
        phases = "  ".join(f"{k[5:-2]} {statistics.median(r[k] for r in rs):.2f}s" for k in PHASES)
        print(f"{n} rank(s): {med:6.2f} s/step   x{med / base:.2f} vs 1 rank   ({phases})")
    gap = max(abs(a["reward_mean"] - b["reward_mean"]) for a, b in zip(rows[1], rows[args.nproc]))
    print(f"largest per-step reward difference between the two runs: {gap:.2e}")


if __name__ == "__main__":
    main()
