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
