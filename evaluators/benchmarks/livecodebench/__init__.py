"""LiveCodeBench-style code generation: the record layout, a loader, a tiny-problem generator
(evaluators.benchmarks.livecodebench.generator, re-exported here) and scoring through the shared code judge
(evaluators.benchmarks.judge, whose extract_code / run_tests / verdicts this module uses).

Records use LiveCodeBench's `code_generation_lite` layout: question_title, question_content,
platform, question_id, contest_id, contest_date (ISO), starter_code, difficulty,
public_test_cases (a JSON string: a list of {input, output, testtype}), private_test_cases
(base64 of zlib of pickle of such a JSON string) and metadata (a JSON string; `func_name` for
call-based problems), plus the project's `id`, `task` ("lcb"), `prompt` and, for generated
problems, `solution`.

Tests are "stdin" (the program reads the input and prints; its output is compared line by line
after stripping, with LiveCodeBench's numeric fallback: lines that differ as text still match
when they parse as the same list of Decimals, so `1.0` matches `1` and `2.50` matches `2.5`;
`outputs_match`) or "functional" (`Solution().<func_name>(*args)`; see evaluators.benchmarks.judge). A
problem passes only when every test passes. Programs run after LiveCodeBench's IMPORT_HEADER
unless the record carries its own `import_header` (generated records carry an empty one).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import functools
import io
import json
import pickle
import zlib
from typing import Iterable, Sequence

from evaluators.benchmarks import judge as _judge
from evaluators.benchmarks.judge import VERDICTS, extract_code  # noqa: F401 - part of this module's API
from evaluators.benchmarks.livecodebench.generator import (  # noqa: F401 - the generator is part of this module's API
    DATE_RANGE,
    GENERATED_MEMORY_MB,
    GENERATED_TIMEOUT_S,
    TASK,
    TEMPLATE_NAMES,
    TEMPLATES,
    Template,
    draw_round_robin,
    encode_private_tests,
    generate,
    make_problem,
    release_date,
)
from evaluators.benchmarks.sources import looks_offline, read_rows
from evaluators.benchmarks.splits import split_of  # noqa: F401 - re-exported as this module's own
from gspo.io import DataError

DEFAULT_TIMEOUT_S = 6.0  # LiveCodeBench's per-test timeout
DEFAULT_MEMORY_MB = 1024
REQUIRED_FIELDS = (
    "question_id",
    "question_content",
    "contest_date",
    "public_test_cases",
    "private_test_cases",
    "metadata",
)
RECORD_FIELDS = ("id", "task", "prompt")

# What LiveCodeBench's runner puts before every program (a subset of its `import_string`).
IMPORT_HEADER = (
    "from typing import *\nfrom collections import *\nfrom math import *\n"
    "from itertools import *\nfrom functools import *\nfrom heapq import *\nfrom bisect import *\n"
    "import collections, math, itertools, functools, heapq, bisect, string, re, sys\n"
)


# ---------------------------------------------------------------------------------------------
# Tests of a record: public ones as JSON, private ones as base64(zlib(pickle(json)))
# (lcb_generator.encode_private_tests writes them)


class _PlainDataUnpickler(pickle.Unpickler):
    """Admits only what pickle encodes without globals: str, bytes, numbers, bool, None, lists,
    tuples, dicts, sets. Any class, function or reducer is refused before it is looked up."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"refusing to load global {module}.{name}: only plain data is allowed in test cases"
        )

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing persistent id: only plain data is allowed")


@functools.lru_cache(maxsize=512)
def _decode_private_cached(blob: str) -> tuple:
    text = blob.strip()
    if not text:
        return ()
    if text[0] in "[{":  # some copies store the JSON itself
        value = json.loads(text)
    else:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
        value = _PlainDataUnpickler(io.BytesIO(raw)).load()
        if isinstance(value, (bytes, bytearray)):
            value = value.decode("utf-8")
        if isinstance(value, str):
            value = json.loads(value)
    return tuple(_check_tests(value, "private_test_cases"))


def decode_private_tests(blob: str, where: str = "private_test_cases") -> list[dict]:
    """The private tests of a record; anything undecodable or not plain data raises DataError
    naming `where`."""
    if not isinstance(blob, str):
        raise DataError(f"{where}: expected a string, got {type(blob).__name__}")
    try:
        return [dict(t) for t in _decode_private_cached(blob)]
    except DataError as e:
        raise DataError(f"{where}: {e}") from None
    except (
        pickle.UnpicklingError,
        zlib.error,
        ValueError,
        EOFError,
        TypeError,
        UnicodeError,
        IndexError,
        KeyError,
        AttributeError,
        MemoryError,
        RecursionError,
    ) as e:
        raise DataError(f"{where}: undecodable private tests ({type(e).__name__}: {e})") from None


def _check_tests(value, field: str) -> list[dict]:
    if not isinstance(value, list):
        raise DataError(f"{field} is not a list of tests (got {type(value).__name__})")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, dict):
            raise DataError(f"{field}[{i}] is not an object")
        for k in ("input", "output"):
            if not isinstance(t.get(k), str):
                raise DataError(f"{field}[{i}] is missing string field {k!r}")
        testtype = t.get("testtype", "stdin")
        if testtype not in ("stdin", "functional"):
            raise DataError(
                f"{field}[{i}].testtype must be 'stdin' or 'functional', got {testtype!r}"
            )
        out.append({"input": t["input"], "output": t["output"], "testtype": testtype})
    return out


def public_tests(record: dict, where: str = "public_test_cases") -> list[dict]:
    value = record.get("public_test_cases", "[]")
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: malformed JSON ({e.msg})") from None
    try:
        return _check_tests(value, "public_test_cases")
    except DataError as e:
        raise DataError(f"{_where(record)}: {e}") from None


def metadata(record: dict) -> dict:
    value = record.get("metadata", {})
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as e:
            raise DataError(f"{_where(record)}: metadata: malformed JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise DataError(f"{_where(record)}: metadata is not a JSON object")
    return value


def tests_of(record: dict) -> list[dict]:
    """Public then private tests of a record."""
    where = _where(record)
    tests = public_tests(record, f"{where}: public_test_cases")
    tests += decode_private_tests(
        record.get("private_test_cases", ""), f"{where}: private_test_cases"
    )
    if not tests:
        raise DataError(f"{where}: record has no tests")
    if any(t["testtype"] == "functional" for t in tests) and not metadata(record).get("func_name"):
        raise DataError(f"{where}: functional tests need metadata.func_name")
    return tests


def _where(record: dict) -> str:
    return f"record {record.get('id', record.get('question_id', '?'))!r}"


# ---------------------------------------------------------------------------------------------
# Dates and the contamination window


def _as_date(value, what: str) -> _dt.date:
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, _dt.date):
        return value
    try:
        text = str(value).strip().replace("Z", "+00:00")
        return (
            _dt.datetime.fromisoformat(text).date()
            if "T" in text or " " in text
            else _dt.date.fromisoformat(text[:10])
        )
    except ValueError:
        raise DataError(f"{what}: not an ISO date: {value!r}") from None


def filter_by_date(records: Iterable[dict], start_date=None, end_date=None) -> list[dict]:
    """Records whose contest_date falls in [start_date, end_date] (calendar dates, both ends
    inclusive, either may be None): the contamination window after a model's cut-off."""
    lo = None if start_date in (None, "") else _as_date(start_date, "start_date")
    hi = None if end_date in (None, "") else _as_date(end_date, "end_date")
    if lo and hi and lo > hi:
        raise ValueError(f"start_date {lo} is after end_date {hi}")
    out = []
    for r in records:
        if "contest_date" not in r:
            raise DataError(f"{_where(r)}: missing field 'contest_date'")
        d = _as_date(r["contest_date"], f"{_where(r)}: contest_date")
        if (lo is None or d >= lo) and (hi is None or d <= hi):
            out.append(r)
    return out


# ---------------------------------------------------------------------------------------------
# Loading real LiveCodeBench records


def format_prompt(record: dict) -> str:
    """LiveCodeBench's code-generation instruction for a real record."""
    q = record.get("question_content", "")
    starter = record.get("starter_code") or ""
    text = (
        "You will be given a question (problem specification) and will generate a correct "
        "Python program that matches the specification and passes all tests.\n\n"
        f"### Question:\n{q}\n\n"
    )
    if starter:
        text += (
            "### Format: You will use the following starter code to write the solution to "
            f"the problem and enclose your code within delimiters.\n```python\n{starter}\n```\n\n"
        )
    else:
        text += (
            "### Format: Read the inputs from stdin solve the problem and write the answer to "
            "stdout (do not directly test on the sample inputs). Enclose your code within "
            "delimiters as follows.\n```python\n# YOUR CODE HERE\n```\n\n"
        )
    return text + "### Answer: (use the provided format with backticks)\n\n"


def normalize(record: dict, where: str = "record") -> dict:
    """Check a LiveCodeBench record (naming `where` and the field on error) and add the project's
    id / task / prompt. Private tests are decoded once here so bad blobs fail at load time."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for k in REQUIRED_FIELDS:
        if k not in record:
            raise DataError(f"{where}: record is missing field {k!r}")
    _as_date(record["contest_date"], f"{where}: contest_date")
    rec = dict(record)
    rec.setdefault("id", str(rec["question_id"]))
    rec["task"] = TASK
    try:
        pub = public_tests(rec, f"{where}: public_test_cases")
        priv = decode_private_tests(rec["private_test_cases"], f"{where}: private_test_cases")
        meta = metadata(rec)
    except DataError as e:
        msg = str(e)
        raise DataError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    if not pub and not priv:
        raise DataError(f"{where}: record has no tests")
    if any(t["testtype"] == "functional" for t in pub + priv) and not meta.get("func_name"):
        raise DataError(f"{where}: functional tests need metadata.func_name")
    rec.setdefault("prompt", format_prompt(rec))
    return rec


HUB_FILES = [
    "test.jsonl",
    "test2.jsonl",
    "test3.jsonl",
    "test4.jsonl",
    "test5.jsonl",
    "test6.jsonl",
]


def hub_data_files(version: str | None) -> list[str]:
    """LiveCodeBench's release tags: 'release_vN' = the first N files, 'vN' = file N alone,
    None / 'release_latest' = all."""
    if version in (None, "", "release_latest"):
        return list(HUB_FILES)
    try:
        if version.startswith("release_v"):
            return HUB_FILES[: int(version[len("release_v") :])]
        if version.startswith("v"):
            return [HUB_FILES[int(version[1:]) - 1]]
    except (ValueError, IndexError):
        pass
    raise ValueError(f"unknown LiveCodeBench version {version!r}")


def _hub_dataset(name: str, split: str, version: str | None):
    import datasets  # heavy; only for hub names

    # The hub copy is a set of JSONL release files; loaded through `data_files` they form one
    # split named "train" whatever LiveCodeBench calls it (`split` is kept for datasets that
    # define their own splits).
    kwargs = {"data_files": hub_data_files(version)} if "code_generation" in name else {}
    try:
        return datasets.load_dataset(name, split="train" if kwargs else split, **kwargs)
    except Exception as e:  # noqa: BLE001 - one line naming the dataset, whatever went wrong
        files = f" (files {', '.join(kwargs['data_files'])})" if kwargs else f" (split {split})"
        if looks_offline(e):
            raise DataError(
                f"{name}{files}: not in the local Hugging Face cache and no network; "
                f"download it with `huggingface-cli download {name} --repo-type "
                "dataset` or point data.files.lcb at local files"
            ) from None
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"{name}{files}: cannot load it ({type(e).__name__}: {msg})") from None


def load(
    source,
    *,
    split: str = "test",
    version: str | None = None,
    start_date=None,
    end_date=None,
    limit: int | None = None,
) -> list[dict]:
    """Real LiveCodeBench records from a local .json/.jsonl file, or a hub dataset name (e.g.
    livecodebench/code_generation_lite, via `datasets`, `version` picking release files),
    checked, given id/task/prompt and filtered to the contest-date window."""
    rows = read_rows(source, lambda name: _hub_dataset(name, split, version))
    recs = [normalize(r, where) for where, r in rows]
    recs = filter_by_date(recs, start_date, end_date)
    return recs[:limit] if limit is not None else recs


SFT_FIELDS = ("question_content", "solution")


def fenced(solution: str) -> str:
    """A worked solution as the completion SFT trains on: kept as written when it has a ```
    block (reasoning before the code stays), else the bare program put in a ```python block, so
    that the judge's extract_code finds exactly it."""
    return solution if "```" in solution else f"```python\n{solution.strip()}\n```"


def load_sft(source, *, limit: int | None = None) -> list[dict]:
    """SFT records {id, task, prompt, solution} from a LiveCodeBench-style set with worked
    solutions: a .json/.jsonl/.parquet file (or hub name) whose rows carry LiveCodeBench's
    problem fields (`question_content`; `starter_code`, `question_id` when present) and a
    `solution` (a completion or a bare program; see `fenced`). The prompt is `format_prompt`'s,
    the one evaluation gives, unless the row has its own. Tests are not needed (SFT runs no
    code); a row without a question or solution raises DataError naming row and field."""
    rows = read_rows(source, lambda name: _hub_dataset(name, "train", None))
    out, seen = [], set()
    for where, row in rows:
        if limit is not None and len(out) >= limit:
            break
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        for k in SFT_FIELDS:
            if not isinstance(row.get(k), str) or not row[k].strip():
                raise DataError(
                    f"{where}: missing field {k!r} (a string; an SFT set needs the "
                    "problem and a worked solution)"
                )
        rid = str(row.get("id") or row.get("question_id") or f"lcb-sft-{len(out)}")
        if rid in seen:
            raise DataError(f"{where}: duplicate problem id {rid!r}")
        seen.add(rid)
        out.append(
            {
                "id": rid,
                "task": TASK,
                "prompt": row.get("prompt") or format_prompt(row),
                "solution": fenced(row["solution"]),
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# Scoring


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str):
    try:
        return [decimal.Decimal(tok) for tok in line.split()]
    except (decimal.InvalidOperation, ValueError):
        return None


def outputs_match(got: str, want: str) -> bool:
    """LiveCodeBench's stdin comparison: stripped lines equal, or equal as lists of Decimals."""
    a, b = _stripped_lines(got), _stripped_lines(want)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        dx, dy = _decimals(x), _decimals(y)
        if dx is None or dy is None or dx != dy:
            return False
    return True


def score(
    record: dict,
    completion: str,
    *,
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    stop_at_first_failure: bool = False,
    workers: int = 1,
    unsafe: bool | None = None,
) -> dict:
    """Judge `completion` on every test of the LiveCodeBench `record`: {passed, verdicts,
    n_tests, n_passed}. Time / memory limits: the arguments, else the record's time_limit /
    memory_limit, else LiveCodeBench's 6 s and 1 GiB."""
    tests = tests_of(record)
    meta = metadata(record)
    timeout = float(timeout_s or record.get("time_limit") or DEFAULT_TIMEOUT_S)
    memory = int(memory_mb or record.get("memory_limit") or DEFAULT_MEMORY_MB)
    header = record.get("import_header", IMPORT_HEADER)
    return _judge.run_tests(
        extract_code(completion),
        tests,
        compare=outputs_match,
        func_name=meta.get("func_name", ""),
        header=header,
        timeout_s=timeout,
        memory_mb=memory,
        stop_at_first_failure=stop_at_first_failure,
        workers=workers,
        unsafe=unsafe,
    )


def score_many(
    records: Sequence[dict], completions: Sequence[str], workers: int = 2, **kwargs
) -> list[dict]:
    """score() of each (record, completion) pair, `workers` sandboxes at a time, in order."""
    return _judge.score_many(score, records, completions, workers, **kwargs)
