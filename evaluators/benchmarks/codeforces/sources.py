"""CodeForces data as open-r1 publishes it, turned into the records evaluators.benchmarks.codeforces scores
(`load`, for RL and test) and trains on (`load_sft`). Rows come through evaluators.benchmarks.sources: a local
.parquet/.jsonl/.json file or a folder of them, or a hub name read with `datasets` (config and
split; without network and cache, one DataError line naming the dataset and what to download).

Layouts (the dataset cards'):

* open-r1/codeforces (configs default / verifiable, splits train / test): id ("<contest>/<index>"),
  aliases, contest_id, contest_name, contest_type, contest_start, contest_start_year, index,
  time_limit (float, s), memory_limit (float, MB), title, description, input_format,
  output_format, interaction_format (non-null: interactive), note, examples [{input, output}],
  editorial, rating (int, may be null), tags, testset_size, official_tests [{input, output}] (may
  be empty), official_tests_complete, input_mode ('stdio' or 'file': read input.txt, write
  output.txt), generated_checker (a Python checker, may be null), executable, generated_tests (how
  many generated tests the problem has). The generated tests are a separate folder
  `generated_tests/` of parquet files with columns problem_id (the row's id), input, output,
  test_case_i; `load(..., generated_tests=FOLDER)` reads only the loaded problems' rows of it
  (a pyarrow filter) and appends them, in test_case_i order, after the official tests.
* open-r1/codeforces-cots (configs solutions, solutions_py, ...; `load_sft` reads solutions_py of
  the hub name by default): the problem fields above (no rating, no tests), prompt (theirs, not
  used), generation, finish_reason, api_metadata, messages [{content, role}] (the user prompt and
  the assistant's reasoning and final code).

A loaded record is the row with: task "cf"; prompt = `format_prompt` (always ours, so SFT and
evaluation see the same text); rating int, time_limit float, memory_limit int; input_mode;
generated_checker (None when absent); tests = official tests then generated ones, each {input,
output} (`official_tests` is dropped: it is the head of `tests`). Unusable rows (interactive, no
rating, no time or memory limit, no test at all) are skipped and counted, one line on stderr;
a row missing a field or with a field of the wrong type raises DataError naming file, row and
field.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections import Counter
from typing import Iterable, Iterator

from evaluators.benchmarks.sources import iter_rows, looks_offline, parquet_batches, parquet_schema
from gspo.io import DataError

TASK = "cf"
REQUIRED_FIELDS = ("id", "rating", "time_limit", "memory_limit")
INPUT_MODES = ("stdio", "file")
GENERATED_TEST_COLUMNS = ("problem_id", "input", "output", "test_case_i")
SFT_FIELDS = ("id", "title", "description")
# The config `load_sft` reads when it is given a hub name and no config.
SFT_DEFAULT_CONFIG = {"open-r1/codeforces-cots": "solutions_py"}
_TRACE_FIELDS = ("messages", "generation")


# ---------------------------------------------------------------------------------------------
# Prompt, tests and the checked record


def format_prompt(record: dict) -> str:
    """The model input for a problem: title, statement, input and output formats, the examples,
    the limits and how to answer (stdin/stdout, or input.txt/output.txt for input_mode 'file')."""
    parts = [record.get("title", ""), record.get("description", "")]
    if record.get("input_format"):
        parts.append("Input\n" + record["input_format"])
    if record.get("output_format"):
        parts.append("Output\n" + record["output_format"])
    for ex in record.get("examples") or []:
        parts.append(
            f"Example input\n{ex.get('input', '')}\nExample output\n{ex.get('output', '')}"
        )
    limits = []
    if record.get("time_limit") is not None:
        limits.append(f"Time limit: {record['time_limit']} s.")
    if record.get("memory_limit") is not None:
        limits.append(f"Memory limit: {record['memory_limit']} MB.")
    io = (
        "Read input.txt, write output.txt."
        if record.get("input_mode") == "file"
        else "Read stdin, write stdout."
    )
    parts.append(" ".join(limits + [io, "Answer with Python code in a ```python block."]))
    return "\n\n".join(p for p in parts if p) + "\n"


def _raw_tests(record: dict, where: str):
    tests = record.get("tests")
    if tests is None:
        tests = record.get("official_tests")
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: tests: malformed JSON ({e.msg})") from None
    return tests


def tests_of(record: dict, where: str | None = None) -> list[dict]:
    """The record's tests ({input, output, testtype}; testtype 'file' for input_mode 'file', else
    'stdin'), from `tests` or else `official_tests` (a list, or its JSON text)."""
    where = where or f"record {record.get('id', '?')!r}"
    if record.get("tests") is None and record.get("official_tests") is None:
        raise DataError(f"{where}: record is missing field 'tests'")
    tests = _raw_tests(record, where)
    if not isinstance(tests, list) or not tests:
        raise DataError(f"{where}: tests must be a non-empty list of {{input, output}}")
    kind = "file" if record.get("input_mode") == "file" else "stdin"
    out = []
    for i, t in enumerate(tests):
        if (
            not isinstance(t, dict)
            or not isinstance(t.get("input"), str)
            or not isinstance(t.get("output"), str)
        ):
            raise DataError(f"{where}: tests[{i}] needs string fields 'input' and 'output'")
        out.append({"input": t["input"], "output": t["output"], "testtype": kind})
    return out


def _number(record: dict, field: str, where: str, kind):
    value = record.get(field)
    if isinstance(value, bool):
        value = None
    try:
        return kind(value) if kind is float else int(float(value))
    except (TypeError, ValueError):
        raise DataError(f"{where}: field {field!r} must be a number, got {value!r}") from None


def normalize(record: dict, where: str = "record") -> dict:
    """The checked record (see the module doc); DataError naming `where` and the field."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for k in REQUIRED_FIELDS:
        if k not in record:
            raise DataError(f"{where}: record is missing field {k!r}")
    rec = dict(record)
    rec.pop("checker", None)
    rec["rating"] = _number(rec, "rating", where, int)
    rec["time_limit"] = _number(rec, "time_limit", where, float)
    rec["memory_limit"] = _number(rec, "memory_limit", where, int)
    if rec["time_limit"] <= 0 or rec["memory_limit"] < 16:
        raise DataError(f"{where}: time_limit must be > 0 and memory_limit >= 16 MB")
    rec["input_mode"] = rec.get("input_mode") or "stdio"
    if rec["input_mode"] not in INPUT_MODES:
        raise DataError(
            f"{where}: field 'input_mode' must be one of {list(INPUT_MODES)}, "
            f"got {rec['input_mode']!r}"
        )
    checker = rec.get("generated_checker")
    if checker is not None and not isinstance(checker, str):
        raise DataError(
            f"{where}: field 'generated_checker' must be a string (Python source) or "
            f"null, got {type(checker).__name__}"
        )
    rec["generated_checker"] = checker if checker and checker.strip() else None
    if interactive(rec):
        raise DataError(f"{where}: interactive problems (interaction_format) are not supported")
    tests_of(rec, where)
    rec["task"] = TASK
    rec.setdefault("prompt", format_prompt(rec))
    return rec


def interactive(row: dict) -> bool:
    fmt = row.get("interaction_format")
    return fmt is not None and not (isinstance(fmt, str) and not fmt.strip())


# ---------------------------------------------------------------------------------------------
# Hub datasets


def offline_message(name: str, config: str | None, split: str) -> str:
    """The one line for a hub dataset that is neither cached nor reachable."""
    what = f" (config {config}, split {split})" if config else f" (split {split})"
    return (
        f"{name}{what}: not in the local Hugging Face cache and no network; download it with "
        f"`huggingface-cli download {name} --repo-type dataset` (for open-r1/codeforces also "
        "its generated_tests/ folder, passed as generated_tests) or point data.files.cf at "
        "local parquet files"
    )


def hub_dataset(name: str, config: str | None, split: str):
    """`datasets.load_dataset(name, config, split=split)`; any failure is one DataError line."""
    import datasets  # heavy; only for hub names

    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - one line naming the dataset, whatever went wrong
        if looks_offline(e):
            raise DataError(offline_message(name, config, split)) from None
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(
            f"{name} (config {config}, split {split}): cannot load it ({type(e).__name__}: {msg})"
        ) from None


# ---------------------------------------------------------------------------------------------
# Generated tests


def _test_files(path: pathlib.Path) -> list[pathlib.Path]:
    if not path.exists():
        raise DataError(f"{path}: generated tests folder not found")
    files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
    if not files:
        raise DataError(f"{path}: no .parquet files of generated tests in this folder")
    return files


def _check_test_schema(path: pathlib.Path) -> None:
    import pyarrow as pa

    schema = parquet_schema(path)
    for col in GENERATED_TEST_COLUMNS:
        if col not in schema.names:
            raise DataError(
                f"{path}: missing column {col!r} (generated tests have columns "
                f"{', '.join(GENERATED_TEST_COLUMNS)})"
            )
        t = schema.field(col).type
        ok = (
            pa.types.is_integer(t)
            if col == "test_case_i"
            else (pa.types.is_string(t) or pa.types.is_large_string(t))
        )
        if not ok:
            raise DataError(
                f"{path}: column {col!r} must be "
                f"{'an integer' if col == 'test_case_i' else 'a string'}, got {t}"
            )


def read_generated_tests(path, ids: Iterable[str]) -> dict[str, list[dict]]:
    """{problem_id: [{input, output}, ...] in test_case_i order} of the generated tests of the
    problems `ids` in `path` (a parquet file or a folder of them), read with a pyarrow filter so
    the other problems' tests are never loaded."""
    ids = sorted(set(ids))
    found: dict[str, list[tuple[int, dict]]] = {}
    if not ids:
        return {}
    for f in _test_files(pathlib.Path(path)):
        _check_test_schema(f)
        for batch in parquet_batches(
            f, columns=list(GENERATED_TEST_COLUMNS), filters=[("problem_id", "in", ids)]
        ):
            for row in batch:
                pid, k = row["problem_id"], row["test_case_i"]
                for col in ("input", "output"):
                    if not isinstance(row[col], str):
                        raise DataError(
                            f"{f}: problem {pid!r} test {k}: field {col!r} must be "
                            f"a string, got {type(row[col]).__name__}"
                        )
                found.setdefault(pid, []).append(
                    (k if k is not None else -1, {"input": row["input"], "output": row["output"]})
                )
    return {
        pid: [t for _, t in sorted(tests, key=lambda kt: kt[0])] for pid, tests in found.items()
    }


# ---------------------------------------------------------------------------------------------
# Loading problems (RL and test)


def _sft_layout(row: dict) -> bool:
    return (
        row.get("tests") is None
        and "official_tests" not in row
        and any(k in row for k in _TRACE_FIELDS)
    )


def _has_tests(row: dict, where: str) -> bool:
    tests = _raw_tests(row, where)
    if isinstance(tests, list):
        return bool(tests)
    return tests is not None  # a value of the wrong type: normalize names it


def skip_reason(row: dict, where: str, folder: bool) -> str | None:
    """Why a published row gives no usable record (None: it does, or it is malformed and
    normalize will say so); `folder` says whether a generated tests folder was given."""

    def null(field):  # present but null (a missing field is normalize's to name)
        return field in row and row[field] is None

    if interactive(row):
        return "interactive"
    if null("rating"):
        return "without a rating"
    if null("time_limit") or null("memory_limit"):
        return "without a time or memory limit"
    if row.get("tests") is None and "official_tests" not in row:
        return None  # normalize names the missing field
    if _has_tests(row, where):
        return None
    n_generated = row.get("generated_tests")  # how many the published row says it has
    counted = isinstance(n_generated, int) and not isinstance(n_generated, bool)
    if not folder and counted and n_generated > 0:
        return "without official tests (their generated tests need generated_tests=FOLDER)"
    if folder and (not counted or n_generated > 0):
        return None  # decided once the folder is read
    return "without tests"


def _pick(
    rows: Iterator[tuple[str, object]],
    src: str,
    *,
    skip_unusable: bool,
    folder: bool,
    min_rating,
    max_rating,
    limit,
    skipped: Counter,
) -> list[tuple[str, dict]]:
    picked = []
    for where, row in rows:
        if limit is not None and len(picked) >= limit:
            break
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        if _sft_layout(row):
            raise DataError(
                f"{src}: an SFT set (open-r1/codeforces-cots layout: worked "
                "solutions, no tests); read it with codeforces.load_sft "
                "(data.files.cf.sft)"
            )
        why = skip_reason(row, where, folder) if skip_unusable else None
        if why:
            skipped[why] += 1
            continue
        if "rating" in row and (min_rating is not None or max_rating is not None):
            rating = _number(row, "rating", where, int)
            if (min_rating is not None and rating < min_rating) or (
                max_rating is not None and rating > max_rating
            ):
                continue
        picked.append((where, row))
    return picked


def _with_tests(row: dict, where: str, extra: list[dict]) -> dict:
    """The row with `tests` = its official tests then `extra`, and n_official_tests; a published
    row (with official_tests) loses its own prompt, if any, for ours."""
    rec = dict(row)
    if rec.get("tests") is None and "official_tests" not in rec:
        return rec  # normalize names the missing field
    official = _raw_tests(rec, where)
    official = [] if official is None else official
    if not isinstance(official, list):
        return rec  # normalize names the wrong type
    if "official_tests" in rec:
        rec.pop("official_tests")
        rec.pop("prompt", None)
    official = [
        {"input": t.get("input"), "output": t.get("output")} if isinstance(t, dict) else t
        for t in official
    ]
    rec["tests"] = official + extra
    rec["n_official_tests"] = len(official)
    return rec


def load(
    source,
    *,
    split: str = "train",
    config: str | None = None,
    min_rating: int | None = None,
    max_rating: int | None = None,
    limit: int | None = None,
    skip_unusable: bool = True,
    generated_tests=None,
) -> list[dict]:
    """See evaluators.benchmarks.codeforces.load."""
    src = str(source)
    folder = pathlib.Path(generated_tests) if generated_tests is not None else None
    if folder is not None and not folder.exists():
        raise DataError(f"{folder}: generated tests folder not found")
    skipped: Counter = Counter()
    rows = iter_rows(source, lambda name: hub_dataset(name, config, split))
    picked = _pick(
        rows,
        src,
        skip_unusable=skip_unusable,
        folder=folder is not None,
        min_rating=min_rating,
        max_rating=max_rating,
        limit=limit,
        skipped=skipped,
    )
    extra = read_generated_tests(folder, [str(r.get("id")) for _, r in picked]) if folder else {}
    out = []
    for where, row in picked:
        rec = _with_tests(row, where, extra.get(str(row.get("id")), []))
        if skip_unusable and rec.get("tests") == []:
            skipped["without tests"] += 1
            continue
        out.append(normalize(rec, where))
    report_skipped(src, skipped)
    return out


def report_skipped(src: str, skipped: Counter) -> None:
    """One line on stderr with how many rows were skipped, per reason."""
    if skipped:
        print(
            f"{src}: skipped " + "; ".join(f"{n} rows {why}" for why, n in skipped.items()),
            file=sys.stderr,
        )


# ---------------------------------------------------------------------------------------------
# Loading worked solutions (SFT)


def _trace(row: dict, where: str) -> str:
    """The assistant's answer: the last assistant message's content, else `generation`."""
    messages = row.get("messages")
    if isinstance(messages, list):
        said = [
            m.get("content")
            for m in messages
            if isinstance(m, dict) and m.get("role") == "assistant"
        ]
        if said and isinstance(said[-1], str) and said[-1].strip():
            return said[-1]
    generation = row.get("generation")
    if isinstance(generation, str) and generation.strip():
        return generation
    raise DataError(
        f"{where}: record is missing field 'messages[role=assistant].content' (or 'generation')"
    )


def _sft_prompt(row: dict, where: str) -> str:
    fields = dict(row)
    for k in SFT_FIELDS:
        if not isinstance(row.get(k), str) or not row[k].strip():
            raise DataError(f"{where}: record is missing field {k!r} (a non-empty string)")
    if fields.get("time_limit") is not None:
        fields["time_limit"] = _number(fields, "time_limit", where, float)
    if fields.get("memory_limit") is not None:
        fields["memory_limit"] = _number(fields, "memory_limit", where, int)
    return format_prompt(fields)


def load_sft(
    source, *, limit: int | None = None, config: str | None = None, split: str = "train"
) -> list[dict]:
    """See evaluators.benchmarks.codeforces.load_sft."""
    src = str(source)
    rows = iter_rows(
        source, lambda name: hub_dataset(name, config or SFT_DEFAULT_CONFIG.get(name), split)
    )
    out, seen, skipped = [], Counter(), Counter()
    for where, row in rows:
        if limit is not None and len(out) >= limit:
            break
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        if not any(k in row for k in _TRACE_FIELDS):
            raise DataError(
                f"{src}: SFT needs worked solutions (messages or generation, as in "
                "open-r1/codeforces-cots); this is a problem set without them "
                "(open-r1/codeforces layout: read it with codeforces.load)"
            )
        if "finish_reason" in row and row["finish_reason"] != "stop":
            skipped["not finished (finish_reason is not 'stop')"] += 1
            continue
        solution = _trace(row, where)
        if "```python" not in solution.lower():
            skipped["without a ```python block"] += 1
            continue
        prompt = _sft_prompt(row, where)
        rid = str(row["id"])
        seen[rid] += 1
        out.append(
            {
                "id": rid if seen[rid] == 1 else f"{rid}#{seen[rid]}",
                "task": TASK,
                "prompt": prompt,
                "solution": solution,
            }
        )
    report_skipped(src, skipped)
    return out
