"""The code judge shared by the code benchmarks (LiveCodeBench- and CodeForces-style): extract the
program from a completion, run it on each test in evaluators.sandbox, and give each test a verdict.

Code extraction (`extract_code`): the content of the last ```-fenced block (a language tag on the
opening line is dropped); when the last fence is opened and never closed (generation stopped),
the text after it; with no fence at all, the whole completion.

Tests are dicts {input, output, testtype}. "stdin" tests feed `input` to the program and compare
what it prints with `output` through the benchmark's own `compare(stdout, expected) -> bool`
(each benchmark passes its checker explicitly). "functional" tests call
`Solution().<func_name>(*args)` with one JSON value per input line, or a top-level function of
that name when there is no `Solution` class (see DRIVER); the return value, tuples as lists, is
serialised to JSON inside the sandbox, sent back over a separate pipe, parsed and compared with
== in the harness. A problem passes only when every test passes.

Verdicts, one per test (VERDICTS): "passed", "wrong answer", "time limit", "runtime error",
"compile error" (the program does not parse), "memory limit", "output limit", and "skipped"
(tests not run after a failure with stop_at_first_failure=True). Syntax is checked in the harness
with `ast.parse` (parsing, never executing) when the sandbox runs the same Python minor version;
programs run in evaluators.sandbox only.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import sys
from typing import Callable, Sequence

from evaluators import sandbox
from gspo.io import DataError

VERDICTS = ("passed", "wrong answer", "time limit", "runtime error", "compile error",
            "memory limit", "output limit", "skipped")

Compare = Callable[[str, str], bool]


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
DRIVER = r'''
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


def status_verdict(r: sandbox.Result) -> str | None:
    """The verdict the sandbox's exit status alone decides, or None when the output must."""
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


def functional_verdict(r: sandbox.Result, want_text: str) -> str:
    """The verdict of a functional test from DRIVER's one line on the side channel."""
    v = status_verdict(r)
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


def stdin_verdict(r: sandbox.Result, want_text: str, compare: Compare) -> str:
    """The verdict of a stdin test: its exit status, else `compare(stdout, want_text)`."""
    v = status_verdict(r)
    if v is not None:
        return v
    return "passed" if compare(r.stdout, want_text) else "wrong answer"


def make_job(code: str, test: dict, *, func_name: str = "", header: str = "",
             timeout_s: float, memory_mb: int) -> dict:
    """The sandbox.run keywords that execute `code` (after `header`) on one test."""
    cap = max(1 << 20, 4 * len(test["output"]) + 4096)
    if test["testtype"] == "functional":
        return dict(code=DRIVER, stdin=test["input"], timeout_s=timeout_s, memory_mb=memory_mb,
                    files={"solution.py": header + code}, args=(func_name,), channel=True,
                    max_output=cap)
    return dict(code=header + code, stdin=test["input"], timeout_s=timeout_s, memory_mb=memory_mb,
                max_output=cap)


def judge(test: dict, result: sandbox.Result, compare: Compare) -> str:
    """The verdict of one test from what the harness captured of its run; `compare` is the
    benchmark's stdin checker (functional tests compare values with ==)."""
    if test["testtype"] == "functional":
        return functional_verdict(result, test["output"])
    return stdin_verdict(result, test["output"], compare)


def run_tests(code: str, tests: Sequence[dict], *, compare: Compare, func_name: str = "",
              header: str = "", timeout_s: float, memory_mb: int,
              stop_at_first_failure: bool = False, workers: int = 1,
              unsafe: bool | None = None) -> dict:
    """Run `code` on every test and judge each: {passed, verdicts, n_tests, n_passed}."""
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


def score_many(score_fn, records: Sequence[dict], completions: Sequence[str], workers: int,
               **kwargs) -> list[dict]:
    """`score_fn(record, completion, **kwargs)` of each pair, `workers` sandboxes at a time, in
    order; the code benchmarks' `score_many`."""
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
