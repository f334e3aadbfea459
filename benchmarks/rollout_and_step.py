"""Rollout throughput (torch engine vs `transformers.generate`) and the RL step's phase split.

    python benchmarks/rollout_and_step.py [--model DIR] [--prompts 32] [--n 8] [--new 64]

Both generators run on the same model, the same prompts and the same batch, in this one process,
alternating, so machine-speed drift hits both alike (see shared measurements: speed here varies
~2x within an hour). Reports median tokens/s over repeats and the ratio. Then a few RL steps
(GSPO, default shapes) report where the step's time goes.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import tempfile
import time

import torch

from evaluators.benchmarks import aime
from evaluators.tasks import rewards
from gspo.config.train import DataSource, RLConfig, RolloutConfig
from gspo.io import write_jsonl
from gspo.model.models import build_tiny, load_model
from gspo.native.trainer import Trainer
from gspo.rollout import make_engine
from gspo.tracking.runs import read_metrics


def hf_generate(model, prompts, n, new, eos, pad):
    rows = [p for p in prompts for _ in range(n)]
    L = max(map(len, rows))
    ids = torch.tensor([[pad] * (L - len(p)) + p for p in rows])
    att = (ids != pad).long()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=att,
            do_sample=True,
            top_k=0,
            top_p=1.0,
            temperature=1.0,
            max_new_tokens=new,
            eos_token_id=eos,
            pad_token_id=pad,
        )
    gen = out[:, L:]
    # tokens up to and including the first eos
    lengths = [(int((r == eos).nonzero()[0]) + 1) if (r == eos).any() else r.numel() for r in gen]
    return sum(lengths)


def workload_parser(doc: str) -> argparse.ArgumentParser:
    """The rollout workload every engine benchmark measures: model, prompts x samples x new tokens."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", help="model dir (default: a fresh random `tiny` preset)")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per generate call")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--new", type=int, default=64, help="most new tokens per sample")
    ap.add_argument(
        "--repeats", type=int, default=3, help="timed calls per engine (after a warm-up)"
    )
    return ap


def main():
    ap = workload_parser(__doc__)
    ap.add_argument("--rl-steps", type=int, default=4, help="RL steps per mode")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = pathlib.Path(tempfile.mkdtemp(prefix="gspo-bench-"))
    path = pathlib.Path(args.model) if args.model else build_tiny("tiny", work / "tiny", seed=0)
    model, tok = load_model(path)
    model.eval()
    engine = make_engine("torch", path)
    probs = aime.generate(args.prompts, split="train", seed=0, difficulty=aime.Difficulty(3, 9))
    prompts = [tok(r["prompt"], add_special_tokens=False).input_ids for r in probs]

    rates = {"torch engine": [], "transformers generate": []}
    for rep in range(args.repeats + 1):  # the first round warms up, not counted
        t = time.perf_counter()
        out = engine.generate(
            prompts, n=args.n, temperature=1.0, top_p=1.0, max_new_tokens=args.new, seed=rep
        )
        ntok = sum(len(c.token_ids) for g in out for c in g)
        dt_e = time.perf_counter() - t
        t = time.perf_counter()
        ntok_hf = hf_generate(model, prompts, args.n, args.new, tok.eos_token_id, tok.pad_token_id)
        dt_h = time.perf_counter() - t
        if rep:
            rates["torch engine"].append(ntok / dt_e)
            rates["transformers generate"].append(ntok_hf / dt_h)
    print(
        f"\n== rollout: {args.prompts} prompts x {args.n} samples, <= {args.new} new tokens, "
        f"{args.threads} threads, model {path.name} =="
    )
    base = statistics.median(rates["transformers generate"])
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"{name:24s} {med:10.0f} tokens/s   x{med / base:.2f} vs transformers")

    compare_old_logprobs(path, work, steps=args.rl_steps, threads=args.threads)


def compare_old_logprobs(
    path, work: pathlib.Path, *, steps: int, threads: int, dtype: str = "float32"
) -> dict:
    """The same GSPO run twice, step by step in alternation: old log-probs recomputed by the
    trainer vs taken from the (torch, `dtype`) rollout engine (old_logprobs: rollout), so the
    saving is measured side by side. Prints the phase split of each; returns the mean step time
    per mode (steps after the first)."""
    data = work / "rl.jsonl"
    write_jsonl(aime.generate(500, split="train", seed=1, difficulty=aime.Difficulty(3, 9)), data)
    trainers = {}
    for mode in ("recompute", "rollout"):
        cfg = RLConfig(
            algorithm="gspo",
            model=str(path),
            out_dir=str(work / f"rl-{mode}"),
            train_data=[DataSource(str(data))],
            steps=1,
            ckpt_every=10**6,
            threads=threads,
            old_logprobs=mode,
            resume=False,
            rollout=RolloutConfig(dtype=dtype),
        )
        trainers[mode] = cfg
    for step in range(1, steps + 1):
        for cfg in trainers.values():
            cfg.steps, cfg.resume = step, True
            Trainer(cfg, rewards).train()
    step_time = {}
    for mode, cfg in trainers.items():
        rows = read_metrics(pathlib.Path(cfg.out_dir) / "metrics.jsonl")
        rows = rows[1:] or rows
        phases = {
            k: statistics.mean(r[f"time_{k}_s"] for r in rows)
            for k in ("rollout", "old_logprob", "update")
        }
        total = step_time[mode] = sum(phases.values())
        print(
            f"\n== RL step, old_logprobs={mode} (gspo, {cfg.prompts_per_step}x{cfg.group_size}, "
            f"{cfg.minibatches} minibatches, engine torch/{dtype}, mean of {len(rows)} steps "
            "after the first) =="
        )
        for k, v in phases.items():
            print(f"{k:12s} {v:7.3f} s  {100 * v / total:5.1f}%")
        print(f"{'total':12s} {total:7.3f} s")
    saving = 1 - step_time["rollout"] / step_time["recompute"]
    print(
        f"\nold_logprobs=rollout vs recompute: step time x{step_time['rollout'] / step_time['recompute']:.2f}"
        f" ({100 * saving:.1f}% saved)"
    )
    return step_time


if __name__ == "__main__":
    main()
