"""One RL step on the native trainer and on TRL's GRPOTrainer (engine: trl), side by side.

    python benchmarks/engines.py [--model DIR] [--rounds 3] [--steps 4] [--threads 0]

The workload of issue 22: 16 prompts x 8 samples, at most 64 new tokens, 4 minibatches, GSPO,
AIME-style prompts. Each round trains `steps` steps on each engine, the engines alternating
(native, trl, native, trl, ...) in this one process so that machine-speed drift hits both alike;
each run's first step is a warm-up and is dropped. Prints the median seconds per step and its
split (native: rollout / old-log-prob pass / update; TRL: rollout with its old-log-prob pass /
update), and TRL / native: the native trainer's speed-up.

--model: the default workflow's SFT model (results/default/sft/model) gives responses of
realistic length; without it a fresh random `tiny` preset (responses run to the limit).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import tempfile

from evaluators.benchmarks import aime
from evaluators.tasks import rewards
from gspo.config.train import DataSource, RLConfig
from gspo.engines.trl import rl as trl_engine
from gspo.io import write_jsonl
from gspo.model.models import build_tiny
from gspo.native.trainer import Trainer
from gspo.tracking.runs import read_metrics

PHASES = {
    "native": ("time_rollout_s", "time_old_logprob_s", "time_update_s"),
    "trl": ("time_rollout_s", "time_update_s"),
}


def run(
    engine: str, model: str, data: pathlib.Path, out: pathlib.Path, steps: int, threads: int
) -> list[dict]:
    cfg = RLConfig(
        engine=engine,
        algorithm="gspo",
        model=model,
        out_dir=str(out),
        train_data=[DataSource(path=str(data))],
        steps=steps,
        prompts_per_step=16,
        group_size=8,
        minibatches=4,
        max_new_tokens=64,
        ckpt_every=steps,
        threads=threads,
    )
    if engine == "trl":
        trl_engine.train(cfg, rewards)
    else:
        Trainer(cfg, rewards).train()
    return read_metrics(out / "metrics.jsonl")[1:]  # the first step warms up


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="model dir (default: a fresh random `tiny` preset)")
    ap.add_argument("--rounds", type=int, default=3, help="runs per engine, alternating")
    ap.add_argument("--steps", type=int, default=4, help="RL steps per run (the first dropped)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        model = args.model or str(build_tiny("tiny", tmp / "tiny", seed=0))
        data = tmp / "prompts.jsonl"
        write_jsonl(aime.generate(256, split="train", seed=0, difficulty=aime.Difficulty()), data)
        recs: dict[str, list[dict]] = {"native": [], "trl": []}
        for r in range(args.rounds):
            for engine in ("native", "trl"):
                recs[engine] += run(
                    engine, model, data, tmp / f"{engine}{r}", args.steps, args.threads
                )
    step = {}
    for engine, rows in recs.items():
        parts = {k: statistics.median(x[k] for x in rows) for k in PHASES[engine]}
        step[engine] = statistics.median(sum(x[k] for k in PHASES[engine]) for x in rows)
        split = ", ".join(f"{k[5:-2]} {v:.3f}" for k, v in parts.items())
        print(
            f"{engine:>6}: {step[engine]:.3f} s/step (median of {len(rows)}; {split}); "
            f"response length {statistics.mean(x['response_length'] for x in rows):.1f}"
        )
    print(f"TRL / native: {step['trl'] / step['native']:.2f}x")


if __name__ == "__main__":
    main()
