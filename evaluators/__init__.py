"""Benchmarks and their scoring, shared by RL rewards and evaluation: the registry (`tasks`),
sampling a model and scoring it (`evaluation`, `metrics`, `partial`), lm-eval's task files
(`lm_eval_tasks`), verl's reward entry (`for_verl`), and two wings: `benchmarks/` (the
benchmarks' content) and `execution/` (running untrusted programs)."""
