"""Sandbox throughput: test executions per second, serial vs parallel.

    python benchmarks/sandbox_throughput.py [--problems 300] [--tests 1] [--workers N] [--json]

Runs the worked solutions of generated LiveCodeBench-style problems (stdin and call-based; one
program per problem) on `--tests` of their tests each, once with one sandbox at a time and once
with `--workers` sandboxes in parallel (default: all cores), checks every verdict is "passed",
and prints both rates (test executions per second) side by side with their ratio. Every
execution is a fresh bwrap sandbox; the numbers include its start-up and the interpreter's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


from evaluators import judge
from evaluators import livecodebench as lcb
from evaluators import sandbox


def build_jobs(n_problems: int, n_tests: int, seed: int):
    recs = lcb.generate(n_problems, split="train", seed=seed)
    jobs, tests = [], []
    for rec in recs:
        code = judge.extract_code(rec["solution"])
        func = lcb.metadata(rec).get("func_name", "")
        for t in lcb.tests_of(rec)[:n_tests]:
            jobs.append(judge.make_job(code, t, func_name=func, timeout_s=rec["time_limit"],
                                       memory_mb=rec["memory_limit"]))
            tests.append(t)
    return jobs, tests


def measure(jobs, tests, workers: int) -> dict:
    t0 = time.perf_counter()
    results = sandbox.run_many(jobs, workers=workers)
    seconds = time.perf_counter() - t0
    verdicts = [judge.judge(t, r, lcb.outputs_match) for t, r in zip(tests, results)]
    bad = [v for v in verdicts if v != "passed"]
    return {"workers": workers, "executions": len(jobs), "seconds": seconds,
            "per_second": len(jobs) / seconds, "not_passed": len(bad)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=300, help="generated problems (programs)")
    ap.add_argument("--tests", type=int, default=1, help="tests run per problem (1..5)")
    ap.add_argument("--workers", type=int, default=sandbox.default_workers(),
                    help="parallel sandboxes (default: CPU count)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    args = ap.parse_args(argv)

    mode = sandbox.check_available()   # refuses without isolation unless GSPO_UNSAFE_SANDBOX=1
    if not 1 <= args.tests <= 5:
        ap.error("--tests must be in 1..5")
    jobs, tests = build_jobs(args.problems, args.tests, args.seed)
    sandbox.run_many(jobs[:4], workers=1)          # warm the probe and the page cache
    serial = measure(jobs, tests, 1)
    parallel = measure(jobs, tests, args.workers)
    ratio = parallel["per_second"] / serial["per_second"]
    print(f"sandbox throughput: {len(jobs)} test executions of {args.problems} generated problems, "
          f"isolation={mode}, {os.cpu_count()} CPUs")
    print(f"{'':10}{'workers':>8}{'seconds':>10}{'exec/s':>10}{'not passed':>12}")
    for name, m in (("serial", serial), ("parallel", parallel)):
        print(f"{name:10}{m['workers']:>8}{m['seconds']:>10.2f}{m['per_second']:>10.1f}"
              f"{m['not_passed']:>12}")
    print(f"parallel / serial: {ratio:.2f}x")
    if args.json:
        print(json.dumps({"isolation": mode, "serial": serial, "parallel": parallel,
                          "ratio": ratio}))
    return 0 if serial["not_passed"] == parallel["not_passed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
