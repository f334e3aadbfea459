"""One entry point from a task record to its reward, shared by the RL trainer and evaluation.

Every record, whatever its benchmark, carries `id`, `task` ("aime", "lcb" or "cf"), `prompt` (the
exact text the model is given) and, for generated training problems, `solution` (the worked
completion SFT trains on). The rest of the fields are the benchmark's own.
"""

from __future__ import annotations

import importlib

TASKS = {"aime": "evaluators.aime", "lcb": "evaluators.livecodebench", "cf": "evaluators.codeforces"}


def module(task: str):
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASKS)}")
    return importlib.import_module(TASKS[task])


def reward(record: dict, completion: str) -> float:
    """The benchmark's own scoring turned into a 0/1 reward."""
    task = record.get("task")
    mod = module(task)
    if task == "aime":
        return mod.score(completion, record["answer"])
    return float(mod.score(record, completion)["passed"])


def rewards(records: list[dict], completions: list[str], *, workers: int = 2) -> list[float]:
    """`reward` of each pair, in order; code tasks are scored in parallel sandboxes.

    For RL the code benchmarks stop at a problem's first failing test (the reward is pass/fail,
    so the remaining tests cannot change it), which bounds the cost of a looping program.
    """
    out: list[float | None] = [None] * len(records)
    code: dict[str, list[int]] = {}
    for i, (rec, comp) in enumerate(zip(records, completions)):
        if rec.get("task") == "aime":
            out[i] = reward(rec, comp)
        else:
            module(rec.get("task"))  # unknown task names fail here, by name
            code.setdefault(rec["task"], []).append(i)
    for task, idx in code.items():
        res = module(task).score_many([records[i] for i in idx], [completions[i] for i in idx],
                                      workers=workers, stop_at_first_failure=True)
        for i, r in zip(idx, res):
            out[i] = float(r["passed"])
    return out  # type: ignore[return-value]
