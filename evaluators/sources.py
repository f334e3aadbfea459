"""Where the code benchmarks' real records come from: a local .json/.jsonl file, or a hub dataset
read by the benchmark's own loader. Each row comes with a `where` string (file and line, or
dataset and row) that the benchmark's checks put in their error messages.
"""

from __future__ import annotations

import json
import pathlib
from typing import Callable, Iterable

from gspo.io import DataError, jsonl_rows

# The keys under which a JSON file may hold its list of records.
LIST_KEYS = ("data", "records", "rows", "test")


def records_from_file(path) -> list[tuple[str, dict]]:
    """(where, row) pairs of a .jsonl file (one object a line) or a .json file (a list, or an
    object holding one under LIST_KEYS); malformed JSON raises DataError naming file and line."""
    path = pathlib.Path(path)
    if path.suffix == ".jsonl":
        return [(f"{path}:{lineno}", row) for lineno, row in jsonl_rows(path)]
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    if isinstance(data, dict):
        for key in LIST_KEYS:
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records")
    return [(f"{path}: record {i}", r) for i, r in enumerate(data)]


def read_rows(source, load_hub: Callable[[str], Iterable]) -> list[tuple[str, dict]]:
    """(where, row) pairs of `source`: an existing file through records_from_file, else a hub
    dataset through `load_hub(name)` (only called then, so `datasets` stays unimported for local
    files). A .json/.jsonl name that does not exist raises DataError rather than going to the hub.
    """
    path = pathlib.Path(source)
    if path.exists():
        return records_from_file(path)
    if str(source).endswith((".json", ".jsonl")):
        raise DataError(f"{source}: file not found")
    return [(f"{source}: row {i}", dict(r)) for i, r in enumerate(load_hub(str(source)))]
