"""Sandbox throughput: test executions per second, one sandbox per test vs pooled sandboxes.

    python benchmarks/sandbox_throughput.py [--problems 200] [--tests 5] [--workers N] [--json]

Runs the worked solutions of generated LiveCodeBench-style problems (stdin and call-based; one
program per problem) on `--tests` of their tests each (5 = all of them), `--workers` sandboxes at
a time (default: all cores), two ways on the same programs and tests:

* per test   - every test execution is a fresh bwrap sandbox and interpreter (sandbox.run_many;
               how the judge ran tests before evaluators.execution.batch);
* per program - one sandbox per program runs all its tests, each in a fresh forked child
               (evaluators.execution.batch.run_program with pooled=False);
* pooled      - `--workers` warm sandboxes (evaluators.execution.pool) run program after program, each
               test in a fresh forked child, resetting the sandbox between programs (how the
               judge runs them now).

It checks that every verdict is "passed" each way and prints the rates side by side with their
ratio to the per-test baseline.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time

from evaluators.benchmarks import judge
from evaluators.benchmarks import livecodebench as lcb
from evaluators.execution import batch, sandbox


def build_programs(n_problems: int, n_tests: int, seed: int):
    """[(jobs, tests)] per program: its worked solution on its first `n_tests` tests."""
    programs = []
    for rec in lcb.generate(n_problems, split="train", seed=seed):
        code = judge.extract_code(rec["solution"])
        func = lcb.metadata(rec).get("func_name", "")
        tests = lcb.tests_of(rec)[:n_tests]
        jobs = [
            judge.make_job(
                code, t, func_name=func, timeout_s=rec["time_limit"], memory_mb=rec["memory_limit"]
            )
            for t in tests
        ]
        programs.append((jobs, tests))
    return programs


def per_test(programs, workers: int):
    jobs = [j for js, _ in programs for j in js]
    return sandbox.run_many(jobs, workers=workers)


def _each_program(programs, workers: int, pooled: bool):
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as threads:
        parts = threads.map(lambda p: batch.run_program(p[0], pooled=pooled), programs)
        return [r for part in parts for r in part]


def per_program(programs, workers: int):
    return _each_program(programs, workers, pooled=False)


def pooled(programs, workers: int):
    return _each_program(programs, workers, pooled=True)


def measure(name: str, fn, programs, workers: int) -> dict:
    t0 = time.perf_counter()
    results = fn(programs, workers)
    seconds = time.perf_counter() - t0
    tests = [t for _, ts in programs for t in ts]
    verdicts = [judge.judge(t, r, lcb.outputs_match) for t, r in zip(tests, results)]
    return {
        "mode": name,
        "workers": workers,
        "executions": len(results),
        "seconds": seconds,
        "per_second": len(results) / seconds,
        "not_passed": sum(v != "passed" for v in verdicts) + len(tests) - len(results),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=200, help="generated problems (programs)")
    ap.add_argument("--tests", type=int, default=5, help="tests run per program (1..5)")
    ap.add_argument(
        "--workers",
        type=int,
        default=sandbox.default_workers(),
        help="sandboxes at a time (default: CPU count)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    args = ap.parse_args(argv)

    mode = sandbox.check_available()  # refuses without isolation unless GSPO_UNSAFE_SANDBOX=1
    if not 1 <= args.tests <= 5:
        ap.error("--tests must be in 1..5")
    programs = build_programs(args.problems, args.tests, args.seed)
    per_program(programs[:4], 1)  # warm the probe and the page cache
    base = measure("per test", per_test, programs, args.workers)
    modes = [
        base,
        measure("per program", per_program, programs, args.workers),
        measure("pooled", pooled, programs, args.workers),
    ]
    for m in modes:
        m["ratio"] = m["per_second"] / base["per_second"]
    print(
        f"sandbox throughput: {base['executions']} test executions of {args.problems} programs "
        f"({args.tests} tests each), isolation={mode}, {args.workers} workers, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"{'sandbox':14}{'seconds':>10}{'exec/s':>10}{'vs per test':>13}{'not passed':>12}")
    for m in modes:
        print(
            f"{m['mode']:14}{m['seconds']:>10.2f}{m['per_second']:>10.1f}"
            f"{m['ratio']:>12.2f}x{m['not_passed']:>12}"
        )
    if args.json:
        print(json.dumps({"isolation": mode, "modes": modes}))
    return 0 if all(m["not_passed"] == 0 for m in modes) else 1


if __name__ == "__main__":
    sys.exit(main())
