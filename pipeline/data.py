"""Stage: generate the task data. `python -m pipeline.data --config FILE`.

For every task in `cfg.tasks` (aime, lcb, cf) writes `<out_dir>/<task>_sft.jsonl` (worked problems
for SFT, train split), `<task>_rl.jsonl` (RL prompts, train split) and `<task>_test.jsonl` (the
held-out evaluation set, test split). Splits are disjoint by construction (each generator decides
a problem's split by a hash of its text); everything is deterministic in `cfg.seed`.
"""

from __future__ import annotations

import pathlib
import random

from evaluators.benchmarks import aime, codeforces, livecodebench
from evaluators.tasks import module
from gspo.data_config import DataGenConfig
from gspo.io import DataError, write_jsonl
from pipeline._cli import config_parser, load_config, run


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


def code_set(task: str, n: int, *, split: str, seed: int, cfg: DataGenConfig) -> list[dict]:
    """`n` generated problems of the code benchmark `task` ('lcb' or 'cf')."""
    c = getattr(cfg, task)
    templates = c.templates or None
    if task == "lcb":
        return livecodebench.generate(n, split=split, seed=seed, templates=templates,
                                      test_fraction=cfg.test_fraction)
    return codeforces.generate(n, split=split, seed=seed, templates=templates,
                               max_rating=c.max_rating, test_fraction=cfg.test_fraction)


def generated(task: str, part: str, cfg: DataGenConfig) -> list[dict]:
    """The generated records of `task` (a benchmark name) for `part` ('sft', 'rl', 'test'). A
    test set comes in a seeded random order: the generators write it tier by tier (AIME-style
    steps, code templates), and an evaluation's `limit` takes its first N, which must be a
    random sample of it, not its first tier, for a smaller evaluation to estimate what the whole
    set measures (pipeline.report.curves compares them)."""
    split = "test" if part == "test" else "train"
    seed = cfg.seed + (1 if part == "rl" else 0)
    if task == "aime":
        a = cfg.aime
        n, steps = {"sft": (a.sft_n, a.sft_steps), "rl": (a.rl_n, a.rl_steps),
                    "test": (a.test_n, a.test_steps)}[part]
        recs = aime_set(n, steps, split=split, seed=seed, cfg=cfg)
    else:
        recs = code_set(task, getattr(getattr(cfg, task), f"{part}_n"), split=split, seed=seed,
                        cfg=cfg)
    if part == "test":
        random.Random(f"test-order:{cfg.seed}:{task}").shuffle(recs)
    return recs


def loaded(task: str, source: str, limit: int, kwargs: dict | None = None,
           part: str = "test") -> list[dict]:
    """Real records of `task` from `source` through the benchmark's own loader: `load_sft`
    (worked solutions) for the sft part, `load` (problems with answers or tests) for rl and test,
    given `kwargs` (TaskFiles.load_kwargs: a LiveCodeBench test split's release-date window,
    CodeForces' generated tests)."""
    if part == "sft":
        recs = module(task).load_sft(source, limit=limit or None)
    else:
        recs = module(task).load(source, limit=limit or None, **(kwargs or {}))
    if not recs:
        raise DataError(f"{source}: no {task} records")
    return recs


def generate(cfg: DataGenConfig) -> dict[str, pathlib.Path]:
    out = pathlib.Path(cfg.out_dir)
    files = {}
    for task in cfg.tasks:
        real = getattr(cfg.files, task)
        for part in ("sft", "rl", "test"):
            source = getattr(real, part)
            files[f"{task}_{part}"] = (loaded(task, source, real.limit, real.load_kwargs(part),
                                              part) if source else generated(task, part, cfg))
    paths = {}
    for name, recs in files.items():
        paths[name] = out / f"{name}.jsonl"
        write_jsonl(recs, paths[name])
    return paths


def parser():
    return config_parser("Write the task data: generated problems, or real files read by each "
                         "benchmark's loader.", "python -m pipeline.data", DataGenConfig)


def main(argv=None):
    cfg = load_config(DataGenConfig, parser().parse_args(argv))
    for name, path in generate(cfg).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    run(main)
