"""Run one program on all its tests in one sandbox: one bwrap start and one interpreter start per
program, a fresh forked child per test.

Starting a sandbox and a Python interpreter costs ~20 ms on an idle core, far more than a test of
a short program; a forked child of a warm interpreter costs ~1 ms. `run_program` starts one
evaluators.execution.sandbox run per program whose main script is RUNNER (evaluators/execution/sandboxed/runner.py, shipped
as text by evaluators.execution.frames). RUNNER takes the results channel,
makes itself non-dumpable (so no child can open /proc/<runner>/fd/* or its memory and forge a
result) and checks that it is PID 2 of its own PID namespace (bwrap's init is PID 1); then, for
each test:

* it kills every other process in the sandbox (`kill(-1, SIGKILL)`: all but init and itself),
  empties /tmp and /dev/shm and writes the test's files (main.py and the rest) afresh, so each
  test starts from the state a fresh sandbox would give it;
* it forks a child that takes the test's stdin (a memory file), stdout, stderr and, when asked,
  its own side-channel pipe, closes every other descriptor, sets the test's CPU, address-space
  and file-size limits, clears its environment to the sandbox's and runs main.py in a fresh
  `__main__` module, the way `python -I -B /tmp/main.py` would (tracebacks name /tmp/main.py, a
  SyntaxError prints as it does there, exit status and signal deaths are the program's);
* it reads the child's streams through the test's caps until EOF, its wall deadline or an
  overflow, kills whatever is left and sends one frame (a JSON header line, then stdout, stderr
  and channel bytes) to the harness over a channel no child holds.

Isolation between programs is exactly evaluators.execution.sandbox's: each program has its own bwrap
sandbox (namespaces, tmpfs, limits), and nothing it leaves behind survives it. Between the tests
of one program it is nearly as strong: files, processes and the environment are reset; what
could remain (SysV IPC objects, an abstract socket's name while nothing holds it is gone) is the
same program's and carries no expected output, which never enters the sandbox. A program that
stops or kills RUNNER loses its own remaining tests ("time limit" / "runtime error"), nobody
else's.

Without bwrap (the unsafe mode) there is no PID namespace to confine `kill(-1)`, so each test
runs as its own evaluators.execution.sandbox.run, as before.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

from evaluators.execution import pool, sandbox
from evaluators.execution.frames import RUNNER, parse_frames, request
from evaluators.execution.supervise import Result, _classify

_FRAME_SLACK = 512
_START_SLACK_S = 2.0
_PER_TEST_SLACK_S = 0.1


def _test_spec(job: dict) -> dict:
    """One job (sandbox.run keywords, as judge.make_job gives them) as RUNNER reads it."""
    return {
        "code": job["code"],
        "stdin": str(job.get("stdin", "")),
        "files": {
            k: v if isinstance(v, str) else v.decode("utf-8", "surrogateescape")
            for k, v in (job.get("files") or {}).items()
        },
        "args": [str(a) for a in job.get("args", ())],
        "channel": bool(job.get("channel")),
        "timeout_s": float(job["timeout_s"]),
        "memory_mb": int(job["memory_mb"]),
        "max_output": int(job.get("max_output", sandbox.DEFAULT_MAX_OUTPUT)),
        "max_stderr": int(job.get("max_stderr", sandbox.DEFAULT_MAX_STDERR)),
        "max_file_mb": int(job.get("max_file_mb", sandbox.DEFAULT_MAX_FILE_MB)),
        "max_procs": int(job.get("max_procs", sandbox.DEFAULT_MAX_PROCS)),
    }


def _result(head: dict, parts: list[bytes]) -> Result:
    stdout, stderr = (p.decode("utf-8", "replace") for p in parts[:2])
    chan = parts[2] if len(parts) > 2 else b""
    if head["killed"]:
        return Result(head["killed"], stdout, stderr, None, head["wall"], chan, True)
    return Result(
        _classify(head["rc"], stderr), stdout, stderr, head["rc"], head["wall"], chan, True
    )


def _time_limit(specs: list[dict]) -> float:
    """The whole program's wall-time limit: its tests' plus the runner's start and slack."""
    return sum(s["timeout_s"] for s in specs) + _START_SLACK_S + _PER_TEST_SLACK_S * len(specs)


def _one_shot(specs: list[dict], jobs: list[dict], stop: bool, unsafe) -> tuple[list, str, str]:
    """The program in a sandbox of its own: (frames, how it ended, its runner's stderr)."""
    largest = max(len(s["code"]) + sum(len(v) for v in s["files"].values()) for s in specs)
    cap = sum(2 * s["max_output"] + s["max_stderr"] + _FRAME_SLACK for s in specs)
    outer = sandbox.run(
        RUNNER,
        request(specs, stop),
        timeout_s=_time_limit(specs),
        memory_mb=max(s["memory_mb"] for s in specs),
        channel=True,
        max_output=cap,
        max_procs=max(int(j.get("max_procs", sandbox.DEFAULT_MAX_PROCS)) for j in jobs) + 1,
        max_file_mb=max(max(s["max_file_mb"] for s in specs), (largest >> 20) + 1),
        tmp_mb=max(int(j.get("tmp_mb", sandbox.DEFAULT_TMP_MB)) for j in jobs) + (largest >> 20),
        unsafe=unsafe,
    )
    return parse_frames(outer.channel, len(specs)), outer.status, outer.stderr


def _pooled(specs: list[dict], stop: bool, unsafe) -> tuple[list, str, str]:
    """The program in a warm worker (evaluators.execution.pool): (frames, how it ended, why)."""
    deadline = time.monotonic() + _time_limit(specs)
    frames, complete = pool.run(sandbox.backend(unsafe), request(specs, stop), deadline)
    if complete:
        return frames, "ok", ""
    status = "timeout" if time.monotonic() >= deadline else "runtime_error"
    return frames, status, "sandbox worker ended early"


def run_program(
    jobs: Sequence[dict],
    *,
    stop_on_failure: bool = False,
    unsafe: bool | None = None,
    pooled: bool = True,
) -> list[Result]:
    """Run the jobs of ONE program (sandbox.run keywords: code, stdin, timeout_s, memory_mb,
    files, args, channel, max_output, ...) in one sandbox, in order; a Result per job: in a warm
    worker of evaluators.execution.pool when `pooled` and the jobs fit its limits, else in a sandbox of
    its own. With `stop_on_failure`, the jobs after the first one whose run alone fails
    (non-zero exit, time, memory or output limit) are not run and get no Result."""
    jobs = list(jobs)
    if not jobs:
        return []
    if sandbox.check_available(unsafe) != "bwrap":
        results = []
        for job in jobs:
            kw = dict(job)
            results.append(sandbox.run(kw.pop("code"), kw.pop("stdin", ""), unsafe=unsafe, **kw))
            if stop_on_failure and not results[-1].ok:
                break
        return results
    specs = [_test_spec(j) for j in jobs]
    try:
        if not (pooled and pool.fits(specs, jobs)):
            raise pool.PoolUnavailable("not pooled")
        frames, status, why = _pooled(specs, stop_on_failure, unsafe)
    except pool.PoolUnavailable:
        frames, status, why = _one_shot(specs, jobs, stop_on_failure, unsafe)
    results = [_result(h, p) for h, p in frames]
    if len(results) == len(jobs) or (
        stop_on_failure and status == "ok" and results and not results[-1].ok
    ):
        return results
    # The runner did not finish: the program stopped or killed it (its own loss), or it ran
    # past the program's total time. The test it was on, and every later one, fail.
    status = "timeout" if status == "timeout" else "runtime_error"
    missing = len(jobs) - len(results)
    results += [
        Result(status, "", why or f"sandbox runner ended early ({status})", None, 0.0, b"", True)
    ] * missing
    return results if not stop_on_failure else results[: len(results) - missing + 1]


def workers_split(n: int, workers: int) -> list[range]:
    """Contiguous ranges of [0, n) for at most `workers` sandboxes of one program."""
    k = max(1, min(workers, n))
    size = math.ceil(n / k)
    return [range(i, min(i + size, n)) for i in range(0, n, size)]
