"""Where the code benchmarks' real records come from: a local .json/.jsonl/.parquet file (or a
folder of them), or a hub dataset read by the benchmark's own loader. Each row comes with a
`where` string (file and line or row, or dataset and row) that the benchmark's checks put in their
error messages.

Parquet files are read with pyarrow, one record batch at a time, and every row comes out as plain
Python values (nested lists and structs as lists and dicts), so records can be written as JSON
lines; `plain` does the same for rows a hub loader returns (numpy arrays and scalars become lists
and numbers). A file pyarrow cannot read as parquet raises DataError naming it.
"""

from __future__ import annotations

import glob
import json
import pathlib
from typing import Callable, Iterable, Iterator

from gspo.io import DataError, jsonl_rows

# The keys under which a JSON file may hold its list of records.
LIST_KEYS = ("data", "records", "rows", "test")
# The file types read here; a folder is read as all such files in it, sorted by path.
SUFFIXES = (".json", ".jsonl", ".parquet")


def plain(value):
    """`value` with numpy arrays / scalars (anything with `tolist`) turned into Python lists and
    numbers, recursively through dicts, lists and tuples."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return plain(value.tolist())
    return value


def parquet_batches(path, columns=None, filters=None) -> Iterator[list[dict]]:
    """The rows of the parquet file `path` (only `columns` when given; `filters` as pyarrow's
    read_table takes them), one list of plain dicts per record batch; a file that is not
    readable parquet raises DataError naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if filters is not None:
            yield pq.read_table(path, columns=columns, filters=filters).to_pylist()
            return
        pf = pq.ParquetFile(path)
        for batch in pf.iter_batches(batch_size=256, columns=columns):
            yield batch.to_pylist()
    except (pa.ArrowException, OSError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{path}: not a readable parquet file ({msg})") from None


def parquet_schema(path):
    """The pyarrow schema of the parquet file `path` (DataError when it is not readable parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{path}: not a readable parquet file ({msg})") from None


def file_rows(path) -> Iterator[tuple[str, object]]:
    """(where, row) pairs of one file, lazily: a .jsonl file (one object a line, where = file:line),
    a .parquet file (where = 'file: row N', 1-based) or a .json file (a list, or an object holding
    one under LIST_KEYS); malformed JSON raises DataError naming file and line."""
    path = pathlib.Path(path)
    if path.suffix == ".jsonl":
        for lineno, row in jsonl_rows(path):
            yield f"{path}:{lineno}", row
        return
    if path.suffix == ".parquet":
        n = 0
        for batch in parquet_batches(path):
            for row in batch:
                n += 1
                yield f"{path}: row {n}", row
        return
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
    for i, r in enumerate(data):
        yield f"{path}: record {i}", r


def data_files(path) -> list[pathlib.Path]:
    """`path` itself when it is a file, else the .json/.jsonl/.parquet files under the folder."""
    path = pathlib.Path(path)
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise DataError(f"{path}: no {'/'.join(SUFFIXES)} files in this folder")
    return files


def records_from_file(path) -> list[tuple[str, dict]]:
    """(where, row) pairs of a .jsonl, .json or .parquet file (see file_rows)."""
    return list(file_rows(path))


def iter_rows(source, load_hub: Callable[[str], Iterable]) -> Iterator[tuple[str, dict]]:
    """(where, row) pairs of `source`, lazily: an existing file or folder, or a glob pattern of
    files, through file_rows, else a hub dataset through `load_hub(name)` (only called then, so
    `datasets` stays unimported for local files; its rows pass through `plain`). A
    .json/.jsonl/.parquet name that does not exist raises DataError rather than going to the
    hub."""
    path = pathlib.Path(source)
    if "*" in str(source):  # a pattern picks one split's shards: data/train-*.parquet
        matches = sorted(glob.glob(str(source)))
        if not matches:
            raise DataError(f"{source}: no files match")
        for f in matches:
            yield from file_rows(f)
        return
    if path.exists():
        for f in data_files(path):
            yield from file_rows(f)
        return
    if str(source).endswith(SUFFIXES):
        raise DataError(f"{source}: file not found")
    for i, r in enumerate(load_hub(str(source))):
        yield f"{source}: row {i}", plain(dict(r))


def read_rows(source, load_hub: Callable[[str], Iterable]) -> list[tuple[str, dict]]:
    """All of iter_rows(source, load_hub) as a list."""
    return list(iter_rows(source, load_hub))


def looks_offline(err: BaseException) -> bool:
    """Whether a `datasets` failure means the hub could not be reached."""
    text = f"{type(err).__name__} {err}"
    return any(
        s in text
        for s in (
            "ConnectionError",
            "Couldn't reach",
            "LocalEntryNotFound",
            "OfflineModeIsEnabled",
            "Name or service not known",
            "offline mode",
        )
    )
