"""Hooks of the gspo_* lm-eval tasks (loaded by lm-eval through `!function utils.<name>`).

The tasks read the project's own JSONL files, `<data_dir>/<bench>_test.jsonl` (bench = aime, lcb,
cf), where `data_dir` is, first found:

1. the task metadata key `data_dir`: `lm_eval ... --metadata '{"data_dir": "DIR"}'` on the CLI,
   `TaskManager(include_path=..., metadata={"data_dir": "DIR"})` in Python, or baked into the YAML
   by `evaluators.lm_eval_tasks.write_tasks(out_dir, data_dir="DIR")`;
2. the environment variable GSPO_EVAL_DATA_DIR;
3. `data` (relative to the working directory).

A single file can be named instead with the metadata key `<bench>_file` (e.g. `aime_file`).

Each document keeps the whole record as JSON (`record`) next to its `id` and `prompt`, so scoring
sees exactly what the harness's own evaluation sees whatever the record's nested fields. Scoring is
`evaluators.tasks.reward`, the same function the RL rewards and `pipeline.evaluate` use.
"""

from __future__ import annotations

import json
import os
import pathlib

from evaluators.metrics import avg_at_n, pass_at_k
from evaluators.tasks import reward
from gspo.io import DataError, read_jsonl

DATA_DIR_ENV = "GSPO_EVAL_DATA_DIR"
DEFAULT_DATA_DIR = "data"


def data_file(bench: str, metadata: dict | None = None) -> pathlib.Path:
    """Where the `bench` task reads its records (see module doc for the order of precedence)."""
    meta = metadata or {}
    if meta.get(f"{bench}_file"):
        return pathlib.Path(meta[f"{bench}_file"])
    data_dir = meta.get("data_dir") or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return pathlib.Path(data_dir) / f"{bench}_test.jsonl"


def _dataset(bench: str, metadata: dict):
    import datasets  # heavy; only when lm-eval builds the dataset

    path = data_file(bench, metadata)
    if not path.is_file():
        raise DataError(
            f"{path}: file not found (point the task at its data with --metadata "
            f'\'{{"data_dir": "DIR"}}\' or {DATA_DIR_ENV}=DIR)'
        )
    records = read_jsonl(path, required=("id", "task", "prompt"))
    rows = []
    for rec in records:
        if rec["task"] != bench:
            raise DataError(
                f"{path}: record {rec['id']!r} has task {rec['task']!r}, expected {bench!r}"
            )
        target = rec.get("answer", rec.get("solution", ""))
        rows.append(
            {
                "id": str(rec["id"]),
                "prompt": rec["prompt"],
                "target": str(target),
                "record": json.dumps(rec, sort_keys=True),
            }
        )
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


# custom_dataset hooks: lm-eval calls them with the task's metadata (and dataset_kwargs) as kwargs.
def aime_dataset(**metadata):
    return _dataset("aime", metadata)


def lcb_dataset(**metadata):
    return _dataset("lcb", metadata)


def cf_dataset(**metadata):
    return _dataset("cf", metadata)


def doc_to_text(doc: dict) -> str:
    """The record's exact prompt, unchanged (no template, no stripping)."""
    return doc["prompt"]


def doc_to_target(doc: dict) -> str:
    return doc["target"]


def keep_all_samples(resps, docs):
    """Filter keeping every one of the `repeats` samples (lm-eval's default keeps only the first)."""
    return [list(r) if isinstance(r, (list, tuple)) else [r] for r in resps]


def samples_of(results) -> list[str]:
    """The completions of one document from process_results' `results` argument."""
    out: list[str] = []
    for r in results:
        out.extend(r if isinstance(r, (list, tuple)) else [r])
    return out


def process_results(doc: dict, results) -> dict:
    """avg@n and pass@n of one document's n samples, scored by the harness's own reward."""
    record = json.loads(doc["record"])
    samples = samples_of(results)
    n = len(samples)
    c = sum(1 for s in samples if reward(record, s) >= 0.5)
    return {"avg_at_n": avg_at_n(n, c), "pass_at_n": pass_at_k(n, c, n)}
