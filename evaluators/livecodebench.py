"""LiveCodeBench-style code generation: records, a tiny-problem generator, a loader and scoring.

Records use LiveCodeBench's `code_generation_lite` layout: question_title, question_content,
platform, question_id, contest_id, contest_date (ISO), starter_code, difficulty,
public_test_cases (a JSON string: a list of {input, output, testtype}), private_test_cases
(base64 of zlib of pickle of such a JSON string) and metadata (a JSON string; `func_name` for
call-based problems), plus the project's `id`, `task` ("lcb"), `prompt` and, for generated
problems, `solution`.

Tests are "stdin" (the program reads the input and prints; its output is compared line by line
after stripping, with LiveCodeBench's numeric fallback: lines that differ as text still match
when they parse as the same list of Decimals, so `1.0` matches `1` and `2.50` matches `2.5`) or
"functional" (`Solution().<func_name>(*args)` with one JSON value per input line, or a top-level
function of that name when there is no `Solution` class; the return value, tuples as lists, is
serialised to JSON inside the sandbox, sent back over a separate pipe, parsed and compared with
== in the harness). A problem passes only when every test passes.

Code extraction (`extract_code`): the content of the last ```-fenced block (a language tag on the
opening line is dropped); when the last fence is opened and never closed (generation stopped),
the text after it; with no fence at all, the whole completion.

Verdicts, one per test: "passed", "wrong answer", "time limit", "runtime error", "compile error"
(the program does not parse), "memory limit", "output limit", and "skipped" (tests not run after
a failure with stop_at_first_failure=True). Syntax is checked in the harness with `ast.parse`
(parsing, never executing) when the sandbox runs the same Python minor version; programs run in
evaluators.sandbox only.

The generator makes problems the `tiny` character-level model can learn: a few templates (read
input, compute, print; or a one-line Solution method) with varying constants, prompts under 120
characters and solutions of 15-70 characters. Every problem has 2 public and 3 private tests and
a release date (a hash of its text, spread over 2023-05-01..2025-04-30), so the contamination
window (`filter_by_date`, `--start-date/--end-date` on contest_date) selects a real subset.
"""

from __future__ import annotations

import ast
import base64
import collections
import concurrent.futures
import dataclasses
import datetime as _dt
import decimal
import functools
import hashlib
import io
import itertools
import json
import pathlib
import pickle
import random
import sys
import zlib
from typing import Iterable, Sequence

from evaluators import sandbox
from gspo.io import DataError

TASK = "lcb"
DEFAULT_TIMEOUT_S = 6.0      # LiveCodeBench's per-test timeout
DEFAULT_MEMORY_MB = 1024
GENERATED_TIMEOUT_S = 2.0
GENERATED_MEMORY_MB = 256
DATE_RANGE = ("2023-05-01", "2025-04-30")   # release dates of generated problems
REQUIRED_FIELDS = ("question_id", "question_content", "contest_date", "public_test_cases",
                   "private_test_cases", "metadata")
VERDICTS = ("passed", "wrong answer", "time limit", "runtime error", "compile error",
            "memory limit", "output limit", "skipped")

# What LiveCodeBench's runner puts before every program (a subset of its `import_string`).
IMPORT_HEADER = (
    "from typing import *\nfrom collections import *\nfrom math import *\n"
    "from itertools import *\nfrom functools import *\nfrom heapq import *\nfrom bisect import *\n"
    "import collections, math, itertools, functools, heapq, bisect, string, re, sys\n")


# ---------------------------------------------------------------------------------------------
# Private tests: base64(zlib(pickle(json)))

class _PlainDataUnpickler(pickle.Unpickler):
    """Admits only what pickle encodes without globals: str, bytes, numbers, bool, None, lists,
    tuples, dicts, sets. Any class, function or reducer is refused before it is looked up."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}: only plain data "
                                     "is allowed in test cases")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing persistent id: only plain data is allowed")


def encode_private_tests(tests: Sequence[dict]) -> str:
    """LiveCodeBench's encoding: base64 of zlib of pickle of the JSON text of the tests."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(list(tests))))).decode("ascii")


@functools.lru_cache(maxsize=512)
def _decode_private_cached(blob: str) -> tuple:
    text = blob.strip()
    if not text:
        return ()
    if text[0] in "[{":                  # some copies store the JSON itself
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
    except (pickle.UnpicklingError, zlib.error, ValueError, EOFError, TypeError, UnicodeError,
            IndexError, KeyError, AttributeError, MemoryError, RecursionError) as e:
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
            raise DataError(f"{field}[{i}].testtype must be 'stdin' or 'functional', got {testtype!r}")
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
    tests += decode_private_tests(record.get("private_test_cases", ""), f"{where}: private_test_cases")
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
        return _dt.datetime.fromisoformat(text).date() if "T" in text or " " in text \
            else _dt.date.fromisoformat(text[:10])
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
# Generator

@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    testtype: str            # "stdin" or "functional"
    difficulty: str          # LiveCodeBench's easy / medium / hard
    statement: str           # format string over the constants
    code: str                # format string: the worked solution
    consts: tuple            # (name, lo, hi) ranges
    inputs: str              # kind of test input
    func: str = ""           # func_name of functional templates
    starter: str = ""
    near: str = ""           # a threshold constant the tests must probe on both sides

    def space(self) -> int:
        n = 1
        for _, lo, hi in self.consts:
            n *= hi - lo + 1
        return n


TEMPLATES: tuple[Template, ...] = (
    Template("linear", "stdin", "easy", "Read an integer n. Print n*{a}+{b}.",
             "n=int(input())\nprint(n*{a}+{b})", (("a", 2, 9), ("b", 1, 60)), "int"),
    Template("mod", "stdin", "easy", "Read an integer n. Print n mod {m}.",
             "print(int(input())%{m})", (("m", 2, 99),), "bigint"),
    Template("repeat", "stdin", "easy", "Read a word s. Print s repeated {k} times.",
             "s=input()\nprint(s*{k})", (("k", 2, 9),), "word"),
    Template("pair", "stdin", "medium", "Read integers a and b. Print a*{k}+b.",
             "a,b=map(int,input().split())\nprint(a*{k}+b)", (("k", 2, 60),), "pair"),
    Template("sum", "stdin", "medium", "Read integers on one line. Print their sum plus {k}.",
             "print(sum(map(int,input().split()))+{k})", (("k", 1, 60),), "list"),
    Template("max", "stdin", "medium", "Read integers on one line. Print the largest times {k}.",
             "print(max(map(int,input().split()))*{k})", (("k", 2, 60),), "list"),
    Template("count", "stdin", "hard", "Read an integer n. Print i*{k} for i=1..n, one per line.",
             "for i in range(1,int(input())+1):print(i*{k})", (("k", 2, 60),), "small"),
    Template("flinear", "functional", "easy", "Write Solution().f(x) returning x*{a}+{b}.",
             "class Solution:\n def f(self,x):return x*{a}+{b}", (("a", 2, 9), ("b", 1, 60)),
             "int", "f", "class Solution:\n    def f(self, x: int) -> int:\n        "),
    Template("frepeat", "functional", "medium", "Write Solution().g(s) returning s reversed, {k} times.",
             "class Solution:\n def g(self,s):return s[::-1]*{k}", (("k", 1, 9),),
             "word", "g", "class Solution:\n    def g(self, s: str) -> str:\n        "),
    Template("fsum", "functional", "medium", "Write Solution().h(a) returning sum(a) minus {k}.",
             "class Solution:\n def h(self,a):return sum(a)-{k}", (("k", 1, 60),),
             "list", "h", "class Solution:\n    def h(self, a: List[int]) -> int:\n        "),
    Template("fcount", "functional", "hard", "Write Solution().c(a) returning how many items of a exceed {k}.",
             "class Solution:\n def c(self,a):return sum(x>{k} for x in a)", (("k", 0, 60),),
             "list", "c", "class Solution:\n    def c(self, a: List[int]) -> int:\n        ", "k"),
)
TEMPLATE_NAMES = tuple(t.name for t in TEMPLATES)


def split_of(problem: str, test_fraction: float = 0.1) -> str:
    """'test' or 'train', decided by a hash of the problem text alone."""
    h = int.from_bytes(hashlib.sha256(problem.encode()).digest()[:8], "big")
    return "test" if (h % 10_000) < test_fraction * 10_000 else "train"


def _problem_rng(statement: str) -> random.Random:
    return random.Random(hashlib.sha256(f"{TASK}:tests:{statement}".encode()).hexdigest())


def release_date(statement: str) -> str:
    lo, hi = (_dt.date.fromisoformat(d) for d in DATE_RANGE)
    h = int.from_bytes(hashlib.sha256(f"{TASK}:date:{statement}".encode()).digest()[:8], "big")
    return (lo + _dt.timedelta(days=h % ((hi - lo).days + 1))).isoformat() + "T00:00:00"


def _draw_input(kind: str, rng: random.Random):
    """A test input as (python value or tuple of values)."""
    if kind == "int":
        return rng.randint(0, 99)
    if kind == "bigint":
        return rng.randint(100, 9999)
    if kind == "small":
        return rng.randint(1, 6)
    if kind == "word":
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 5)))
    if kind == "pair":
        return (rng.randint(0, 99), rng.randint(0, 99))
    if kind == "list":
        return [rng.randint(0, 99) for _ in range(rng.randint(1, 6))]
    raise ValueError(f"unknown input kind {kind!r}")


def _reference(t: Template, c: dict, x):
    """The expected result of template `t` with constants `c` on input `x` (harness side)."""
    n = t.name
    if n in ("linear", "flinear"):
        return x * c["a"] + c["b"]
    if n == "mod":
        return x % c["m"]
    if n == "repeat":
        return x * c["k"]
    if n == "pair":
        return x[0] * c["k"] + x[1]
    if n == "sum":
        return sum(x) + c["k"]
    if n == "max":
        return max(x) * c["k"]
    if n == "count":
        return [(i + 1) * c["k"] for i in range(x)]
    if n == "frepeat":
        return x[::-1] * c["k"]
    if n == "fsum":
        return sum(x) - c["k"]
    if n == "fcount":
        return sum(v > c["k"] for v in x)
    raise ValueError(f"no reference for template {n!r}")


def _make_test(t: Template, c: dict, x) -> dict:
    want = _reference(t, c, x)
    if t.testtype == "functional":
        return {"input": json.dumps(x), "output": json.dumps(want), "testtype": "functional"}
    if isinstance(x, tuple):
        inp = " ".join(map(str, x))
    elif isinstance(x, list):
        inp = " ".join(map(str, x))
    else:
        inp = str(x)
    out = "\n".join(map(str, want)) if isinstance(want, list) else str(want)
    return {"input": inp + "\n", "output": out + "\n", "testtype": "stdin"}


def make_problem(t: Template, consts: dict) -> dict:
    """The LiveCodeBench-layout record (without id) for template `t` with `consts`."""
    statement = t.statement.format(**consts)
    code = t.code.format(**consts)
    rng = _problem_rng(statement)
    tests, seen = [], set()
    for _ in range(50):
        if len(tests) == 5:
            break
        x = _draw_input(t.inputs, rng)
        if t.near and len(tests) == 2:     # one private test straddles the threshold
            k = consts[t.near]
            x = [k + 1, k, max(k - 1, 0)] + x[:2]
            rng.shuffle(x)
        key = json.dumps(x)
        if key in seen:
            continue
        seen.add(key)
        tests.append(_make_test(t, consts, x))
    while len(tests) < 5:     # tiny input spaces: repeat rather than fail
        tests.append(tests[len(tests) % max(1, len(tests))])
    date = release_date(statement)
    qid = "gen" + hashlib.sha256(statement.encode()).hexdigest()[:10]
    return {
        "question_title": f"{t.name} " + " ".join(f"{k}={v}" for k, v in consts.items()),
        "question_content": statement,
        "platform": "leetcode" if t.testtype == "functional" else "atcoder",
        "question_id": qid,
        "contest_id": "gen-" + date[:7],
        "contest_date": date,
        "starter_code": t.starter,
        "difficulty": t.difficulty,
        "public_test_cases": json.dumps(tests[:2]),
        "private_test_cases": encode_private_tests(tests[2:]),
        "metadata": json.dumps({"func_name": t.func} if t.func else {}),
        "prompt": statement + "\n",
        "solution": f"```python\n{code}\n```",
        "template": t.name,
        "time_limit": GENERATED_TIMEOUT_S,
        "memory_limit": GENERATED_MEMORY_MB,
        "import_header": "",
    }


def generate(n: int, *, split: str, seed: int, templates: Iterable[str] | None = None,
             test_fraction: float = 0.1) -> list[dict]:
    """`n` distinct generated problems of `split` ('train' or 'test'), deterministic in `seed`.

    Templates (default: all of TEMPLATE_NAMES) are mixed round-robin, each drawing its constants
    without replacement; a template whose problems run out drops out of the rotation. A
    problem's split, tests and release date depend on its text alone, so splits are disjoint
    whatever the seeds. Raises if fewer than `n` problems of the split exist.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    names = list(TEMPLATE_NAMES if templates is None else templates)
    by_name = {t.name: t for t in TEMPLATES}
    unknown = [x for x in names if x not in by_name]
    if unknown or not names:
        raise ValueError(f"unknown templates {unknown}; expected some of {list(TEMPLATE_NAMES)}")
    chosen = [by_name[name] for name in dict.fromkeys(names)]
    return [{"id": f"{TASK}-{split}-{seed}-{i:05d}", "task": TASK, **make_problem(t, consts)}
            for i, (t, consts) in enumerate(draw_round_robin(chosen, n, task=TASK, split=split, seed=seed,
                                                             test_fraction=test_fraction))]


def draw_round_robin(templates: Sequence, n: int, *, task: str, split: str, seed: int,
                     test_fraction: float) -> list[tuple]:
    """`n` (template, constants) pairs whose statements fall in `split`, templates taken in turn.

    Each template's constant combinations (its `consts`: (name, lo, hi) ranges) are shuffled once
    by a generator seeded with (task, split, seed) and drawn without replacement, so no statement
    repeats; a template that runs out drops out of the rotation. Raises ValueError when fewer than
    `n` exist. Shared by the LiveCodeBench- and CodeForces-style generators.
    """
    rng = random.Random(f"{task}:{split}:{seed}")
    pools = []
    for t in templates:
        keys = [k for k, _, _ in t.consts]
        combos = [dict(zip(keys, vals)) for vals in
                  itertools.product(*[range(lo, hi + 1) for _, lo, hi in t.consts])]
        combos = [c for c in combos if split_of(t.statement.format(**c), test_fraction) == split]
        rng.shuffle(combos)
        pools.append((t, collections.deque(combos)))
    out: list[tuple] = []
    while len(out) < n:
        live = [(t, pool) for t, pool in pools if pool]
        if not live:
            raise ValueError(f"only {len(out)} distinct {split} problems exist for templates "
                             f"{[t.name for t in templates]}; asked for {n}")
        for t, pool in live:
            if len(out) == n:
                break
            out.append((t, pool.popleft()))
    return out


# ---------------------------------------------------------------------------------------------
# Loading real LiveCodeBench records

def format_prompt(record: dict) -> str:
    """LiveCodeBench's code-generation instruction for a real record."""
    q = record.get("question_content", "")
    starter = record.get("starter_code") or ""
    text = ("You will be given a question (problem specification) and will generate a correct "
            "Python program that matches the specification and passes all tests.\n\n"
            f"### Question:\n{q}\n\n")
    if starter:
        text += ("### Format: You will use the following starter code to write the solution to "
                 f"the problem and enclose your code within delimiters.\n```python\n{starter}\n```\n\n")
    else:
        text += ("### Format: Read the inputs from stdin solve the problem and write the answer to "
                 "stdout (do not directly test on the sample inputs). Enclose your code within "
                 "delimiters as follows.\n```python\n# YOUR CODE HERE\n```\n\n")
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


def _records_from_file(path: pathlib.Path) -> list[tuple[str, dict]]:
    if path.suffix == ".jsonl":
        out = []
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    out.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{lineno}: malformed JSON ({e.msg})") from None
        return out
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    if isinstance(data, dict):
        for key in ("data", "records", "rows", "test"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records")
    return [(f"{path}: record {i}", r) for i, r in enumerate(data)]


HUB_FILES = ["test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl"]


def hub_data_files(version: str | None) -> list[str]:
    """LiveCodeBench's release tags: 'release_vN' = the first N files, 'vN' = file N alone,
    None / 'release_latest' = all."""
    if version in (None, "", "release_latest"):
        return list(HUB_FILES)
    try:
        if version.startswith("release_v"):
            return HUB_FILES[:int(version[len("release_v"):])]
        if version.startswith("v"):
            return [HUB_FILES[int(version[1:]) - 1]]
    except (ValueError, IndexError):
        pass
    raise ValueError(f"unknown LiveCodeBench version {version!r}")


def load(source, *, split: str = "test", version: str | None = None, start_date=None,
         end_date=None, limit: int | None = None) -> list[dict]:
    """Real LiveCodeBench records from a local .json/.jsonl file, or a hub dataset name (e.g.
    livecodebench/code_generation_lite, via `datasets`, `version` picking release files),
    checked, given id/task/prompt and filtered to the contest-date window."""
    path = pathlib.Path(source)
    if path.exists():
        rows = _records_from_file(path)
    elif str(source).endswith((".json", ".jsonl")):
        raise DataError(f"{source}: file not found")
    else:
        import datasets  # heavy; only for hub names

        # The hub copy is a set of JSONL release files; loaded through `data_files` they form
        # one split named "train" whatever LiveCodeBench calls it (`split` is kept for
        # datasets that define their own splits).
        kwargs = {"data_files": hub_data_files(version)} if "code_generation" in str(source) else {}
        ds = datasets.load_dataset(str(source), split="train" if kwargs else split, **kwargs)
        rows = [(f"{source}: row {i}", dict(r)) for i, r in enumerate(ds)]
    recs = [normalize(r, where) for where, r in rows]
    recs = filter_by_date(recs, start_date, end_date)
    return recs[:limit] if limit is not None else recs


# ---------------------------------------------------------------------------------------------
# Scoring

def extract_code(completion: str) -> str:
    """The last fenced code block (see the module doc for the fallbacks)."""
    parts = completion.split("```")
    if len(parts) == 1:
        return completion
    block = parts[-1] if len(parts) % 2 == 0 else parts[-2]
    first, nl, rest = block.partition("\n")
    if nl and (first.strip() == "" or first.strip().replace("-", "").replace("+", "").isalnum()):
        block = rest
    return block


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


def syntax_ok(code: str) -> bool | None:
    """True / False when the harness can tell (same Python as the sandbox); None otherwise."""
    ver = sandbox.sandbox_python_version() or (sys.version_info[:2] if sandbox.unsafe_requested()
                                                else None)
    if ver != sys.version_info[:2] or len(code) > 1_000_000:
        return None
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False
    except (RecursionError, MemoryError):
        return None


# The child side of functional tests. Reads the arguments from stdin before any user code runs,
# executes solution.py in its own namespace, calls the function and writes one JSON line to the
# side channel, then leaves without running user atexit handlers. It decides nothing: the harness
# compares the value it reads with the expected output, which the child never sees.
_DRIVER = r'''
import json as _json, os as _os, sys as _sys
def _gspo_main():
    dumps, write, exit_ = _json.dumps, _os.write, _os._exit
    fd = _os.dup(int(_os.environ.pop("GSPO_CHANNEL_FD")))
    args = [_json.loads(line) for line in _sys.stdin.read().split("\n") if line.strip()]
    func_name = _sys.argv[1]
    with open("solution.py") as f:
        src = f.read()
    try:
        code = compile(src, "solution.py", "exec")
    except (SyntaxError, ValueError) as e:
        write(fd, (dumps({"error": "compile", "detail": repr(e)}) + "\n").encode())
        exit_(0)
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    exec(code, ns)
    if "Solution" in ns:
        target = getattr(ns["Solution"](), func_name)
    else:
        target = ns[func_name]
    result = target(*args)
    if isinstance(result, tuple):
        result = list(result)
    try:
        payload = dumps({"result": result})
    except (TypeError, ValueError, RecursionError) as e:
        write(fd, (dumps({"error": "unserializable", "detail": type(result).__name__}) + "\n").encode())
        exit_(0)
    _sys.stdout.flush()
    write(fd, (payload + "\n").encode())
    exit_(0)
_gspo_main()
'''


def _verdict_of_status(r: sandbox.Result) -> str | None:
    if r.status == "timeout":
        return "time limit"
    if r.status == "memory":
        return "memory limit"
    if r.status == "output_limit":
        return "output limit"
    if r.status == "runtime_error":
        tail = r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else [""]
        if tail[0].startswith(("SyntaxError", "IndentationError", "TabError")) and \
                r.stderr.count('File "') == 1:   # raised while compiling the program itself
            return "compile error"
        return "runtime error"
    return None


def _functional_verdict(r: sandbox.Result, want_text: str) -> str:
    v = _verdict_of_status(r)
    if v is not None:
        return v
    lines = r.channel.decode("utf-8", "replace").splitlines()
    if len(lines) != 1:
        return "runtime error"       # no value (exited early) or more than one claim
    try:
        msg = json.loads(lines[0])
    except json.JSONDecodeError:
        return "runtime error"
    if not isinstance(msg, dict):
        return "runtime error"
    if msg.get("error") == "compile":
        return "compile error"
    if set(msg) != {"result"}:
        return "runtime error"
    try:
        want = json.loads(want_text)
    except json.JSONDecodeError:
        raise DataError(f"expected output is not JSON: {want_text[:80]!r}") from None
    if isinstance(want, tuple):
        want = list(want)
    return "passed" if msg["result"] == want else "wrong answer"


def _stdin_verdict(r: sandbox.Result, want_text: str) -> str:
    v = _verdict_of_status(r)
    if v is not None:
        return v
    return "passed" if outputs_match(r.stdout, want_text) else "wrong answer"


def make_job(code: str, test: dict, *, func_name: str = "", header: str = "",
             timeout_s: float, memory_mb: int) -> dict:
    """The sandbox.run keywords that execute `code` on one test (see judge)."""
    cap = max(1 << 20, 4 * len(test["output"]) + 4096)
    if test["testtype"] == "functional":
        return dict(code=_DRIVER, stdin=test["input"], timeout_s=timeout_s, memory_mb=memory_mb,
                    files={"solution.py": header + code}, args=(func_name,), channel=True,
                    max_output=cap)
    return dict(code=header + code, stdin=test["input"], timeout_s=timeout_s, memory_mb=memory_mb,
                max_output=cap)


def judge(test: dict, result: sandbox.Result, compare=None) -> str:
    """The verdict of one test from what the harness captured of its run. `compare(stdout,
    expected) -> bool` overrides the stdin comparison (outputs_match)."""
    if test["testtype"] == "functional":
        return _functional_verdict(result, test["output"])
    if compare is None:
        return _stdin_verdict(result, test["output"])
    return _verdict_of_status(result) or (
        "passed" if compare(result.stdout, test["output"]) else "wrong answer")


def run_tests(code: str, tests: Sequence[dict], *, func_name: str = "", header: str = "",
              timeout_s: float, memory_mb: int, stop_at_first_failure: bool = False,
              workers: int = 1, unsafe: bool | None = None, compare=None) -> dict:
    """Run `code` on every test and judge each; shared by LiveCodeBench and CodeForces scoring."""
    sandbox.check_available(unsafe)
    n = len(tests)
    if syntax_ok(header + code) is False:
        verdicts = ["compile error"] * n
    else:
        jobs = [make_job(code, t, func_name=func_name, header=header, timeout_s=timeout_s,
                         memory_mb=memory_mb) for t in tests]
        if stop_at_first_failure or workers <= 1:
            verdicts = []
            for t, job in zip(tests, jobs):
                if stop_at_first_failure and verdicts and verdicts[-1] != "passed":
                    verdicts.append("skipped")
                    continue
                result = sandbox.run_many([job], workers=1, unsafe=unsafe)[0]
                verdicts.append(judge(t, result, compare))
        else:
            results = sandbox.run_many(jobs, workers=workers, unsafe=unsafe)
            verdicts = [judge(t, r, compare) for t, r in zip(tests, results)]
    n_passed = sum(v == "passed" for v in verdicts)
    return {"passed": n > 0 and n_passed == n, "verdicts": verdicts, "n_tests": n,
            "n_passed": n_passed}


def score(record: dict, completion: str, *, timeout_s: float | None = None,
          memory_mb: int | None = None, stop_at_first_failure: bool = False, workers: int = 1,
          unsafe: bool | None = None) -> dict:
    """Judge `completion` on every test of the LiveCodeBench `record`: {passed, verdicts,
    n_tests, n_passed}. Time / memory limits: the arguments, else the record's time_limit /
    memory_limit, else LiveCodeBench's 6 s and 1 GiB."""
    tests = tests_of(record)
    meta = metadata(record)
    timeout = float(timeout_s or record.get("time_limit") or DEFAULT_TIMEOUT_S)
    memory = int(memory_mb or record.get("memory_limit") or DEFAULT_MEMORY_MB)
    header = record.get("import_header", IMPORT_HEADER)
    return run_tests(extract_code(completion), tests, func_name=meta.get("func_name", ""),
                     header=header, timeout_s=timeout, memory_mb=memory,
                     stop_at_first_failure=stop_at_first_failure, workers=workers, unsafe=unsafe)


def score_many(records: Sequence[dict], completions: Sequence[str], workers: int = 2,
               **kwargs) -> list[dict]:
    """score() of each (record, completion) pair, `workers` sandboxes at a time, in order."""
    return _score_many(score, records, completions, workers, **kwargs)


def _score_many(score_fn, records, completions, workers, **kwargs) -> list[dict]:
    records, completions = list(records), list(completions)
    if len(records) != len(completions):
        raise ValueError(f"{len(records)} records but {len(completions)} completions")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    sandbox.check_available(kwargs.get("unsafe"))
    if workers == 1 or len(records) <= 1:
        return [score_fn(r, c, **kwargs) for r, c in zip(records, completions)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(records))) as pool:
        return list(pool.map(lambda rc: score_fn(rc[0], rc[1], **kwargs), zip(records, completions)))
