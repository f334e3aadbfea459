"""The code judge shared by the code benchmarks (LiveCodeBench- and CodeForces-style): extract the
program from a completion, run it on all its tests in one sandbox (evaluators.execution.batch: a fresh
forked child per test, see there), and give each test a verdict.

Code extraction (`extract_code`): the content of the last ```-fenced block (a language tag on the
opening line is dropped); when the last fence is opened and never closed (generation stopped),
the text after it; with no fence at all, the whole completion.

Tests are dicts {input, output, testtype}. "stdin" tests feed `input` to the program and compare
what it prints with `output` through the benchmark's own `compare(stdout, expected) -> bool`
(each benchmark passes its checker explicitly). "file" tests (Codeforces' input_mode 'file') run
FILE_DRIVER, which starts the program as its child in the same sandbox with `input` as
input.txt in the working directory (stdin empty), waits, sends back output.txt's bytes over the
side channel (or that there is none: wrong answer) and exits the way the child did (its exit
status, or the same signal), so time, memory and runtime verdicts are the program's (the
driver's own start-up counts against the wall-clock limit); the child does not inherit the
channel, and the driver makes itself non-dumpable first, so the child cannot reach the channel
through /proc either. "functional" tests call `Solution().<func_name>(*args)` with one JSON
value per input line, or a top-level function of that name when there is no `Solution` class
(see DRIVER); the return value, tuples as lists, is serialised to JSON inside the sandbox, sent
back over a separate pipe, parsed and compared with == in the harness. A problem passes only
when every test passes.

A problem's own checker (`checker=`, the Python source of Codeforces' generated_checker) replaces
`compare` for stdin and file tests, on tests where the program ran ok: it runs in a fresh sandbox
run of its own (the program's run is over and its /tmp gone, so nothing the program wrote can
reach it), as `python checker.py input.txt correct_output.txt solution_output.txt` in its working
directory, with fixed limits CHECKER_TIMEOUT_S (10 s) and CHECKER_MEMORY_MB (1024 MB), whatever the
problem's. It accepts when it exits 0 with "1" as the last token of its stdout and rejects with
"0"; anything else (it does not compile, crashes, times out, runs out of memory, prints something
else) is the verdict "checker error", never a pass.

Verdicts, one per test (VERDICTS): "passed", "wrong answer", "time limit", "runtime error",
"compile error" (the program does not parse), "memory limit", "output limit", "checker error"
(the problem's checker failed; see above), and "skipped" (tests not run after a failure with
stop_at_first_failure=True). Syntax is checked in the harness with `ast.parse` (parsing, never
executing) when the sandbox runs the same Python minor version; programs run in
evaluators.execution.sandbox only.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import sys
from typing import Callable, Sequence

from evaluators.execution import batch, sandbox
from evaluators.execution.sandboxed import source
from gspo.io import DataError

VERDICTS = (
    "passed",
    "wrong answer",
    "time limit",
    "runtime error",
    "compile error",
    "memory limit",
    "output limit",
    "checker error",
    "skipped",
)
CHECKER_TIMEOUT_S = 10.0
CHECKER_MEMORY_MB = 1024
CHECKER_FILES = ("input.txt", "correct_output.txt", "solution_output.txt")
# Runs checker.py as its own script (sys.argv[0] and __file__ are checker.py), the contract's call.
CHECKER_STUB = (
    "import runpy, sys\nsys.argv[0] = 'checker.py'\n"
    "runpy.run_path('checker.py', run_name='__main__')\n"
)

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
    ver = sandbox.sandbox_python_version() or (
        sys.version_info[:2] if sandbox.unsafe_requested() else None
    )
    if ver != sys.version_info[:2] or len(code) > 1_000_000:
        return None
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False
    except (RecursionError, MemoryError):
        return None


# the child side of functional tests (evaluators/execution/sandboxed/functional.py says what it does)
DRIVER = source("functional")


# the child side of file tests (evaluators/execution/sandboxed/file_mode.py)
FILE_DRIVER = source("file_mode")


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
        if (
            tail[0].startswith(("SyntaxError", "IndentationError", "TabError"))
            and r.stderr.count('File "') == 1
        ):  # raised while compiling the program itself
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
        return "runtime error"  # no value (exited early) or more than one claim
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


def program_output(test: dict, r: sandbox.Result) -> tuple[str | None, str]:
    """(the verdict the run alone decides, or None; the program's answer) of a stdin or file test:
    its stdout, or output.txt as FILE_DRIVER sent it (none: wrong answer)."""
    v = status_verdict(r)
    if v is not None:
        return v, ""
    if test["testtype"] != "file":
        return None, r.stdout
    if r.channel[:1] == b"F":
        return None, r.channel[1:].decode("utf-8", "replace")
    return ("wrong answer" if r.channel == b"N" else "runtime error"), ""


def checker_verdict(r: sandbox.Result) -> str:
    """The verdict a checker run gives: its last stdout token "1" (passed) or "0" (wrong answer)
    after exiting 0; anything else is "checker error"."""
    if r.status != "ok":
        return "checker error"
    tokens = r.stdout.split()
    return {"1": "passed", "0": "wrong answer"}.get(tokens[-1] if tokens else "", "checker error")


def run_checker(checker: str, test: dict, output: str, *, unsafe: bool | None = None) -> str:
    """Run the problem's checker on one test's answer in a fresh sandbox of its own (see the
    module doc for the contract and limits): "passed", "wrong answer" or "checker error"."""
    files = dict(zip(CHECKER_FILES, (test["input"], test["output"], output)))
    size = sum(len(x.encode("utf-8", "replace")) for x in files.values()) + len(checker)
    files["checker.py"] = checker
    r = sandbox.run(
        CHECKER_STUB,
        "",
        timeout_s=CHECKER_TIMEOUT_S,
        memory_mb=CHECKER_MEMORY_MB,
        files=files,
        args=CHECKER_FILES,
        max_output=1 << 20,
        tmp_mb=sandbox.DEFAULT_TMP_MB + (size >> 20) + 1,
        unsafe=unsafe,
    )
    return checker_verdict(r)


def make_job(
    code: str,
    test: dict,
    *,
    func_name: str = "",
    header: str = "",
    timeout_s: float,
    memory_mb: int,
) -> dict:
    """The sandbox.run keywords that execute `code` (after `header`) on one test."""
    cap = max(1 << 20, 4 * len(test["output"]) + 4096)
    if test["testtype"] == "functional":
        return dict(
            code=DRIVER,
            stdin=test["input"],
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            files={"solution.py": header + code},
            args=(func_name,),
            channel=True,
            max_output=cap,
        )
    if test["testtype"] == "file":
        room = (len(test["input"].encode("utf-8", "replace")) + cap) >> 20
        return dict(
            code=FILE_DRIVER,
            stdin="",
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            files={"solution.py": header + code, "input.txt": test["input"]},
            args=(str(cap),),
            channel=True,
            max_output=cap + 1,
            tmp_mb=sandbox.DEFAULT_TMP_MB + room + 1,
            max_file_mb=max(sandbox.DEFAULT_MAX_FILE_MB, (cap >> 20) + 1),
        )
    return dict(
        code=header + code,
        stdin=test["input"],
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_output=cap,
    )


def judge(
    test: dict,
    result: sandbox.Result,
    compare: Compare,
    *,
    checker: str | None = None,
    unsafe: bool | None = None,
) -> str:
    """The verdict of one test from what the harness captured of its run; `compare` is the
    benchmark's stdin checker (functional tests compare values with ==), replaced by the
    problem's own `checker` program (run in its own sandbox) when one is given."""
    if test["testtype"] == "functional":
        return functional_verdict(result, test["output"])
    v, output = program_output(test, result)
    if v is not None:
        return v
    if checker is not None:
        return run_checker(checker, test, output, unsafe=unsafe)
    return "passed" if compare(output, test["output"]) else "wrong answer"


def run_tests(
    code: str,
    tests: Sequence[dict],
    *,
    compare: Compare,
    func_name: str = "",
    header: str = "",
    timeout_s: float,
    memory_mb: int,
    stop_at_first_failure: bool = False,
    workers: int = 1,
    unsafe: bool | None = None,
    checker: str | None = None,
) -> dict:
    """Run `code` on every test and judge each (with the problem's `checker` program instead of
    `compare` when given): {passed, verdicts, n_tests, n_passed}."""
    sandbox.check_available(unsafe)
    n = len(tests)
    if syntax_ok(header + code) is False:
        verdicts = ["compile error"] * n
    else:
        jobs = [
            make_job(
                code,
                t,
                func_name=func_name,
                header=header,
                timeout_s=timeout_s,
                memory_mb=memory_mb,
            )
            for t in tests
        ]
        if stop_at_first_failure or workers <= 1 or n <= 1:
            results = batch.run_program(jobs, stop_on_failure=stop_at_first_failure, unsafe=unsafe)
        else:  # the program's tests split over `workers` sandboxes of its own
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, n)) as pool:
                parts = pool.map(
                    lambda r: batch.run_program([jobs[i] for i in r], unsafe=unsafe),
                    batch.workers_split(n, workers),
                )
                results = [res for part in parts for res in part]
        verdicts = []
        for t, r in zip(tests, results):
            if stop_at_first_failure and verdicts and verdicts[-1] != "passed":
                break
            verdicts.append(judge(t, r, compare, checker=checker, unsafe=unsafe))
        verdicts += ["skipped"] * (n - len(verdicts))
    n_passed = sum(v == "passed" for v in verdicts)
    return {
        "passed": n > 0 and n_passed == n,
        "verdicts": verdicts,
        "n_tests": n,
        "n_passed": n_passed,
    }


def score_many(
    score_fn, records: Sequence[dict], completions: Sequence[str], workers: int, **kwargs
) -> list[dict]:
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
        return list(
            pool.map(lambda rc: score_fn(rc[0], rc[1], **kwargs), zip(records, completions))
        )
