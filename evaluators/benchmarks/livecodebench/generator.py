"""The LiveCodeBench-style problem generator: tiny problems in LiveCodeBench's record layout
(see evaluators.benchmarks.livecodebench), which re-exports everything here.

The problems are ones the `tiny` character-level model can learn: a few templates (read input,
compute, print; or a one-line Solution method) with varying constants, prompts under 120
characters and solutions of 15-70 characters. Every problem has 2 public and 3 private tests and
a release date (a hash of its text, spread over DATE_RANGE), so the contamination window
(`livecodebench.filter_by_date`, `--start-date/--end-date` on contest_date) selects a real subset.

A problem's split, tests and release date depend on its statement alone, so splits are disjoint
whatever the seeds (evaluators.benchmarks.splits, shared with the CodeForces-style generator).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import hashlib
import json
import pickle
import random
import zlib
from typing import Iterable, Sequence

from evaluators.benchmarks.splits import draw_round_robin

TASK = "lcb"
GENERATED_TIMEOUT_S = 2.0
GENERATED_MEMORY_MB = 256
DATE_RANGE = ("2023-05-01", "2025-04-30")  # release dates of generated problems


def encode_private_tests(tests: Sequence[dict]) -> str:
    """LiveCodeBench's encoding: base64 of zlib of pickle of the JSON text of the tests (read
    back by livecodebench.decode_private_tests)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(list(tests))))).decode("ascii")


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    testtype: str  # "stdin" or "functional"
    difficulty: str  # LiveCodeBench's easy / medium / hard
    statement: str  # format string over the constants
    code: str  # format string: the worked solution
    consts: tuple  # (name, lo, hi) ranges
    inputs: str  # kind of test input
    func: str = ""  # func_name of functional templates
    starter: str = ""
    near: str = ""  # a threshold constant the tests must probe on both sides

    def space(self) -> int:
        n = 1
        for _, lo, hi in self.consts:
            n *= hi - lo + 1
        return n


TEMPLATES: tuple[Template, ...] = (
    Template(
        "linear",
        "stdin",
        "easy",
        "Read an integer n. Print n*{a}+{b}.",
        "n=int(input())\nprint(n*{a}+{b})",
        (("a", 2, 9), ("b", 1, 60)),
        "int",
    ),
    Template(
        "mod",
        "stdin",
        "easy",
        "Read an integer n. Print n mod {m}.",
        "print(int(input())%{m})",
        (("m", 2, 99),),
        "bigint",
    ),
    Template(
        "repeat",
        "stdin",
        "easy",
        "Read a word s. Print s repeated {k} times.",
        "s=input()\nprint(s*{k})",
        (("k", 2, 9),),
        "word",
    ),
    Template(
        "pair",
        "stdin",
        "medium",
        "Read integers a and b. Print a*{k}+b.",
        "a,b=map(int,input().split())\nprint(a*{k}+b)",
        (("k", 2, 60),),
        "pair",
    ),
    Template(
        "sum",
        "stdin",
        "medium",
        "Read integers on one line. Print their sum plus {k}.",
        "print(sum(map(int,input().split()))+{k})",
        (("k", 1, 60),),
        "list",
    ),
    Template(
        "max",
        "stdin",
        "medium",
        "Read integers on one line. Print the largest times {k}.",
        "print(max(map(int,input().split()))*{k})",
        (("k", 2, 60),),
        "list",
    ),
    Template(
        "count",
        "stdin",
        "hard",
        "Read an integer n. Print i*{k} for i=1..n, one per line.",
        "for i in range(1,int(input())+1):print(i*{k})",
        (("k", 2, 60),),
        "small",
    ),
    Template(
        "flinear",
        "functional",
        "easy",
        "Write Solution().f(x) returning x*{a}+{b}.",
        "class Solution:\n def f(self,x):return x*{a}+{b}",
        (("a", 2, 9), ("b", 1, 60)),
        "int",
        "f",
        "class Solution:\n    def f(self, x: int) -> int:\n        ",
    ),
    Template(
        "frepeat",
        "functional",
        "medium",
        "Write Solution().g(s) returning s reversed, {k} times.",
        "class Solution:\n def g(self,s):return s[::-1]*{k}",
        (("k", 1, 9),),
        "word",
        "g",
        "class Solution:\n    def g(self, s: str) -> str:\n        ",
    ),
    Template(
        "fsum",
        "functional",
        "medium",
        "Write Solution().h(a) returning sum(a) minus {k}.",
        "class Solution:\n def h(self,a):return sum(a)-{k}",
        (("k", 1, 60),),
        "list",
        "h",
        "class Solution:\n    def h(self, a: List[int]) -> int:\n        ",
    ),
    Template(
        "fcount",
        "functional",
        "hard",
        "Write Solution().c(a) returning how many items of a exceed {k}.",
        "class Solution:\n def c(self,a):return sum(x>{k} for x in a)",
        (("k", 0, 60),),
        "list",
        "c",
        "class Solution:\n    def c(self, a: List[int]) -> int:\n        ",
        "k",
    ),
)
TEMPLATE_NAMES = tuple(t.name for t in TEMPLATES)


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
        if t.near and len(tests) == 2:  # one private test straddles the threshold
            k = consts[t.near]
            x = [k + 1, k, max(k - 1, 0)] + x[:2]
            rng.shuffle(x)
        key = json.dumps(x)
        if key in seen:
            continue
        seen.add(key)
        tests.append(_make_test(t, consts, x))
    while len(tests) < 5:  # tiny input spaces: repeat rather than fail
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


def generate(
    n: int,
    *,
    split: str,
    seed: int,
    templates: Iterable[str] | None = None,
    test_fraction: float = 0.1,
) -> list[dict]:
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
    return [
        {"id": f"{TASK}-{split}-{seed}-{i:05d}", "task": TASK, **make_problem(t, consts)}
        for i, (t, consts) in enumerate(
            draw_round_robin(
                chosen, n, task=TASK, split=split, seed=seed, test_fraction=test_fraction
            )
        )
    ]
