"""The benchmarks' content: one package per benchmark (aime, livecodebench, codeforces), each
offering the interface `base.Benchmark` types, and what the code benchmarks share: the judge
(a program's tests run in evaluators.execution) and the split rule of generated problems.
Reached from the rest of evaluators through the registry, evaluators.tasks."""
