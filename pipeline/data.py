"""Stage: generate the task data. `python -m pipeline.data --config FILE`."""

from __future__ import annotations

import pathlib

from evaluators import aime
from gspo.config import DataGenConfig
from pipeline._cli import parse_config, run


def aime_set(n: int, steps: list[int], *, split: str, seed: int, cfg: DataGenConfig) -> list[dict]:
    """`n` problems spread evenly over the step counts; a tier whose problem space is small (one
    step has only 9*9*18 problems) contributes at most half of its space, the rest go to the
    other tiers."""
    a = cfg.aime
    share = cfg.test_fraction if split == "test" else 1 - cfg.test_fraction
    space = {s: int(0.5 * share * a.max_operand ** (2 + s) * 2 ** s) for s in steps}
    counts = {s: 0 for s in steps}
    for i in range(n):
        open_tiers = [s for s in steps if counts[s] < space[s]] or steps
        counts[min(open_tiers, key=lambda s: (counts[s], s))] += 1
    recs = []
    for k, s in enumerate(steps):
        recs += aime.generate(counts[s], split=split, seed=seed * 100 + k,
                              difficulty=aime.Difficulty(s, a.max_operand),
                              test_fraction=cfg.test_fraction)
    return recs


def generate(cfg: DataGenConfig) -> dict[str, pathlib.Path]:
    out = pathlib.Path(cfg.out_dir)
    a = cfg.aime
    files = {
        "aime_sft": aime_set(a.sft_n, a.sft_steps, split="train", seed=cfg.seed, cfg=cfg),
        "aime_rl": aime_set(a.rl_n, a.rl_steps, split="train", seed=cfg.seed + 1, cfg=cfg),
        "aime_test": aime_set(a.test_n, a.test_steps, split="test", seed=cfg.seed, cfg=cfg),
    }
    paths = {}
    for name, recs in files.items():
        paths[name] = out / f"{name}.jsonl"
        aime.write_jsonl(recs, paths[name])
    return paths


def main(argv=None):
    cfg = parse_config(DataGenConfig, "Generate the procedural task data.", argv)
    for name, path in generate(cfg).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    run(main)
