"""This project's records and scoring in the form verl reads them (issue 24: `engine: verl`).

- `write_parquet(records, path)`: the RL records as the parquet verl's RLHFDataset reads: a
  chat-format `prompt` (one user message: the record's prompt text, which verl renders with the
  model's chat template), `data_source` (the benchmark), `reward_model.ground_truth` (the whole
  record as JSON: all its benchmark needs to score, tests included) and `extra_info` (the
  record's id and its row).
- `compute_score(data_source, solution_str, ground_truth, extra_info)`: the reward verl's reward
  managers call (`custom_reward_function.path` = this file, `name: compute_score`): the
  benchmark's own score of the completion, code run in the pooled sandboxes. It needs nothing
  but the project on the path, so Ray workers can import it. Math answers are scored in worker
  processes with a limit per answer (evaluators.timed: verl calls it from threads, where
  math-verify has no timeouts of its own): past SCORE_TIMEOUT_S (env GSPO_SCORE_TIMEOUT_S) an
  answer scores 0 and its worker is replaced. Code answers run in sandboxes with limits of their
  own.
"""

from __future__ import annotations

import atexit
import json
import os
import pathlib
import sys

from gspo.io import DataError

SCORE_TIMEOUT_S = 30.0  # one answer's scoring; math-verify's own limits are 5 s a call
TIMED_TASKS = ("aime",)  # scored by math-verify (sympy): no limit of its own off the main thread
_pool = None


def close() -> None:
    """Stop compute_score's scoring workers (also at exit: a Ray worker, or a test, leaves none
    behind)."""
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None


atexit.register(close)


def row(record: dict, index: int, system: str = "") -> dict:
    """One record as a row of verl's RL dataset (`system`: a system turn before the prompt)."""
    for field in ("id", "task", "prompt"):
        if field not in record:
            raise DataError(
                f"record {index}: no {field!r} (a benchmark record has id, task, "
                "prompt and what its benchmark scores with)"
            )
    return {
        "data_source": record["task"],
        "prompt": ([{"role": "system", "content": system}] if system else [])
        + [{"role": "user", "content": record["prompt"]}],
        "ability": record["task"],
        "reward_model": {"style": "rule", "ground_truth": json.dumps(record)},
        "extra_info": {"id": str(record["id"]), "index": index},
    }


def write_parquet(records: list[dict], path, system: str = "") -> pathlib.Path:
    """`records` as verl's RL parquet at `path`, in order, written whole or not at all (a temp
    file beside it, then a rename)."""
    import os
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([row(r, i, system) for i, r in enumerate(records)])
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None
) -> float:
    """verl's reward function: 1.0 when the benchmark's own scoring passes the completion, else
    0.0 (evaluators.tasks.reward)."""
    from evaluators.tasks import reward

    global _pool
    record = json.loads(ground_truth)
    if record.get("task") != data_source:
        raise DataError(
            f"data_source {data_source!r} is not the record's task "
            f"{record.get('task')!r} (record {record.get('id')!r})"
        )
    if data_source not in TIMED_TASKS:
        return reward(record, solution_str)
    from evaluators.timed import TimedPool, warm_math_scoring

    if _pool is None:
        _pool = TimedPool(int(os.environ.get("GSPO_SCORE_WORKERS", "4")), warm=warm_math_scoring)
    limit = float(os.environ.get("GSPO_SCORE_TIMEOUT_S", SCORE_TIMEOUT_S))
    got = _pool.call(reward, (record, solution_str), limit)
    if got is None:
        print(
            f"for_verl: record {record.get('id')!r}: scoring took over {limit:g} s; reward 0",
            file=sys.stderr,
        )
        return 0.0
    return got
