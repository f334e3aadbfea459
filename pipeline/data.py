"""Stage: generate the task data. `python -m pipeline.data --config FILE`.

For every task in `cfg.tasks` (a benchmark of evaluators.tasks) writes `<out_dir>/<task>_sft.jsonl` (worked problems
for SFT, train split), `<task>_rl.jsonl` (RL prompts, train split) and `<task>_test.jsonl` (the
held-out evaluation set, test split). Splits are disjoint by construction (each generator decides
a problem's split by a hash of its text); everything is deterministic in `cfg.seed`.
"""

from __future__ import annotations

import pathlib
import random

from evaluators.benchmarks import aime, codeforces, livecodebench
from evaluators.tasks import module
from gspo.config.data import DataGenConfig
from gspo.io import DataError, write_jsonl
from pipeline._cli import config_parser, load_config, run


def aime_set(n: int, steps: list[int], *, split: str, seed: int, cfg: DataGenConfig) -> list[dict]:
    """`n` problems spread evenly over the step counts; a tier whose problem space is small (one
    step has only 9*9*18 problems) contributes at most half of its space, the rest go to the
    other tiers."""
    a = cfg.aime
    share = cfg.test_fraction if split == "test" else 1 - cfg.test_fraction
    space = {s: int(0.5 * share * a.max_operand ** (2 + s) * 2**s) for s in steps}
    counts = {s: 0 for s in steps}
    for _ in range(n):
        open_tiers = [s for s in steps if counts[s] < space[s]] or steps
        counts[min(open_tiers, key=lambda s: (counts[s], s))] += 1
    recs = []
    for k, s in enumerate(steps):
        recs += aime.generate(
            counts[s],
            split=split,
            seed=seed * 100 + k,
            difficulty=aime.Difficulty(s, a.max_operand),
            test_fraction=cfg.test_fraction,
        )
    return recs


def code_set(task: str, n: int, *, split: str, seed: int, cfg: DataGenConfig) -> list[dict]:
    """`n` generated problems of the code benchmark `task` ('lcb' or 'cf')."""
    c = getattr(cfg, task)
    templates = c.templates or None
    if task == "lcb":
        return livecodebench.generate(
            n, split=split, seed=seed, templates=templates, test_fraction=cfg.test_fraction
        )
    return codeforces.generate(
        n,
        split=split,
        seed=seed,
        templates=templates,
        max_rating=c.max_rating,
        test_fraction=cfg.test_fraction,
    )


def generated(task: str, part: str, cfg: DataGenConfig) -> list[dict]:
    """The generated records of `task` (a benchmark name) for `part` ('sft', 'rl', 'test'). A
    test set comes in a seeded random order: the generators write it tier by tier (AIME-style
    steps, code templates), and an evaluation's `limit` takes its first N, which must be a
    random sample of it, not its first tier, for a smaller evaluation to estimate what the whole
    set measures (pipeline.report.curves compares them)."""
    split = "test" if part == "test" else "train"
    seed = cfg.seed + (1 if part == "rl" else 0)
    section = getattr(cfg, task)  # the task's section of DataGenConfig
    n = getattr(section, f"{part}_n")
    if task == "aime":
        recs = aime_set(n, getattr(section, f"{part}_steps"), split=split, seed=seed, cfg=cfg)
        if part == "sft" and section.sft_unboxed:
            pick = random.Random(f"sft-unboxed:{cfg.seed}")
            recs = [aime.without_box(r) if pick.random() < section.sft_unboxed else r for r in recs]
    elif task in ("lcb", "cf"):
        recs = code_set(task, n, split=split, seed=seed, cfg=cfg)
    else:  # a GeneratedDataConfig: the split's size alone
        recs = module(task).generate(n, split=split, seed=seed, test_fraction=cfg.test_fraction)
    if part == "test":
        random.Random(f"test-order:{cfg.seed}:{task}").shuffle(recs)
    return recs


def loaded(
    task: str, source: str, limit: int, kwargs: dict | None = None, part: str = "test"
) -> list[dict]:
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


def held_out(rl: list[dict], sft: list[dict], n: int, task: str) -> tuple[list[dict], list[dict]]:
    """(RL prompts, validation problems): the last `n` RL prompts whose problem is no SFT
    problem become the validation split, the rest stay RL prompts. Disjoint from the test split
    by construction (the RL prompts are), from the SFT problems by the check, from what RL
    trains on by the split: a learning rate chosen on it is chosen on no test or training
    problem."""

    def key(r: dict) -> str:
        return r.get("problem") or r["prompt"]

    seen = {key(r) for r in sft}
    val: list[int] = []
    for i in range(len(rl) - 1, -1, -1):
        if len(val) == n:
            break
        if key(rl[i]) not in seen:
            val.append(i)
    if len(val) < n:
        raise DataError(
            f"{task}: val_n={n} asks for more validation problems than the "
            f"{len(rl)} RL prompts outside the SFT set give ({len(val)}); lower it "
            "or raise rl_n"
        )
    out = set(val)
    return ([r for i, r in enumerate(rl) if i not in out], [rl[i] for i in sorted(val)])


def generate(cfg: DataGenConfig) -> dict[str, pathlib.Path]:
    out = pathlib.Path(cfg.out_dir)
    files = {}
    for task in cfg.tasks:
        real = getattr(cfg.files, task)
        for part in ("sft", "rl", "test"):
            source = getattr(real, part)
            files[f"{task}_{part}"] = (
                loaded(task, source, real.limit, real.load_kwargs(part), part)
                if source
                else generated(task, part, cfg)
            )
        if cfg.val_n and task in cfg.val_tasks:
            files[f"{task}_rl"], files[f"{task}_val"] = held_out(
                files[f"{task}_rl"], files[f"{task}_sft"], cfg.val_n, task
            )
    paths = {}
    for name, recs in files.items():
        paths[name] = out / f"{name}.jsonl"
        write_jsonl(recs, paths[name])
    return paths


def parser():
    return config_parser(
        "Write the task data: generated problems, or real files read by each benchmark's loader.",
        "python -m pipeline.data",
        DataGenConfig,
    )


def main(argv=None):
    cfg = load_config(DataGenConfig, parser().parse_args(argv))
    for name, path in generate(cfg).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    run(main)
