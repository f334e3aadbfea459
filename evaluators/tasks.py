"""The benchmark registry: the one place that lists the benchmarks, and the entry point from a
task record to its score and reward, shared by the RL reward and evaluation.

Every record, whatever its benchmark, carries `id`, `task` (a name of BENCHMARKS), `prompt` (the
exact text the model is given) and, for generated training problems, `solution` (the worked
completion SFT trains on). The rest of the fields are the benchmark's own.

Every benchmark package (evaluators.benchmarks.<name>) offers the interface the Protocol
evaluators.benchmarks.base.Benchmark types: `generate(n, *, split, seed, ...)`, `load(source,
...)` (real problems for RL or evaluation), `load_sft(source, *, limit)` (real records with
worked solutions, for SFT), `format_prompt(record) -> str`, `score(record, completion) -> dict`
(at least {"passed": bool}), `score_many(records, completions, workers=...) -> list[dict]`,
`TASK` and `RECORD_FIELDS` (the fields an evaluation record must carry). A benchmark that rates a model (CodeForces-style: an Elo-like
rating from the problems' ratings) registers its estimator in RATINGS.
"""

from __future__ import annotations

from evaluators.benchmarks import aime, codeforces, livecodebench
from evaluators.benchmarks.base import Benchmark

MODULES: dict[str, Benchmark] = {"aime": aime, "lcb": livecodebench, "cf": codeforces}
BENCHMARKS: tuple[str, ...] = tuple(MODULES)
TITLES = {"aime": "AIME-style math", "lcb": "LiveCodeBench-style", "cf": "CodeForces-style"}
# benchmark -> its rating of a model from rated attempts [(problem rating, solved)]
RATINGS = {"cf": codeforces.estimate_rating}
# the benchmarks whose scoring runs sampled programs (evaluators.execution.sandbox): the
# workflow's plan checks the sandbox works before it runs one
SANDBOXED = ("lcb", "cf")


def rating(task: str, results: list[dict]):
    """Benchmark `task`'s rating of evaluated `results` (per-problem rows with `rating` and
    per-sample `scores`; every sample of every rated problem one attempt), None when no
    problem is rated."""
    attempts = [
        (r["rating"], bool(s >= 0.5))
        for r in results
        if r.get("rating") is not None
        for s in r["scores"]
    ]
    return RATINGS[task](attempts) if attempts else None


def module(task: str):
    """The module of benchmark `task` (a record's `task`); an unknown name raises ValueError
    naming the valid ones."""
    if task not in MODULES:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(BENCHMARKS)}")
    return MODULES[task]


def parse(spec: str) -> list[str]:
    """Benchmark names from a comma list, in the order given, without repeats; an unknown one
    raises ValueError naming it."""
    names = [b.strip() for b in spec.split(",") if b.strip()]
    if not names:
        raise ValueError(f"no benchmark given; valid: {', '.join(BENCHMARKS)}")
    for b in names:
        if b not in MODULES:
            raise ValueError(f"unknown benchmark {b!r}; valid: {', '.join(BENCHMARKS)}")
    return list(dict.fromkeys(names))


def score_many(
    records: list[dict],
    completions: list[str],
    *,
    workers: int = 2,
    stop_at_first_failure: bool = False,
) -> list[dict]:
    """Each benchmark's own `score` of each (record, completion) pair, in order; the records of
    one benchmark go to its `score_many` together (code runs in parallel sandboxes)."""
    if len(records) != len(completions):
        raise ValueError(f"{len(records)} records but {len(completions)} completions")
    out: list[dict | None] = [None] * len(records)
    by_task: dict[str, list[int]] = {}
    for i, rec in enumerate(records):
        module(rec.get("task"))  # unknown task names fail here, by name
        by_task.setdefault(rec["task"], []).append(i)
    for task, idx in by_task.items():
        kw = {"stop_at_first_failure": True} if stop_at_first_failure and task != "aime" else {}
        res = module(task).score_many(
            [records[i] for i in idx], [completions[i] for i in idx], workers=workers, **kw
        )
        for i, r in zip(idx, res):
            out[i] = r
    return out  # type: ignore[return-value]


def reward(record: dict, completion: str) -> float:
    """The benchmark's own scoring turned into a 0/1 reward."""
    return float(module(record.get("task")).score(record, completion)["passed"])


def rewards(records: list[dict], completions: list[str], *, workers: int = 2) -> list[float]:
    """`reward` of each pair, in order: the reward function RL is given.

    The code benchmarks stop at a problem's first failing test (the reward is pass/fail, so the
    remaining tests cannot change it), which bounds the cost of a looping program.
    """
    return [
        float(r["passed"])
        for r in score_many(records, completions, workers=workers, stop_at_first_failure=True)
    ]
