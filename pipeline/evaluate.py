"""Evaluate a checkpoint on the benchmarks with the rollout engine.

    python -m pipeline.evaluate --model MODEL_DIR --benchmarks aime,lcb,cf --samples 8 \\
        --data-dir data --out results/eval/MODEL

reads `<data-dir>/<bench>_test.jsonl` for each benchmark, samples `--samples` completions per
problem, scores each with the benchmark's own scoring function (`evaluators.tasks.reward`, the RL
reward itself; the code benchmarks' batched `score_many` where they have one) and writes, each
atomically:

- `<out>/results.jsonl`: one line per problem: id, task, n, c, pass@1, pass@k (k = n), avg@n,
  pass@j for j = 1, 2, 4, ..., scores (one per sample), finish_reasons and completions;
- `<out>/summary.json`: per benchmark: n_problems, n_samples, avg@n, pass@k and pass@j, each with a
  seeded bootstrap confidence interval over problems (evaluators.metrics.aggregate), plus for cf
  the rating estimated from the problems' ratings; and the run's settings.

Why the rollout engine rather than lm-eval: it is the sampler the RL loop itself uses (the same
prompts token for token, the same stop rule, the same decoding), it batches all samples of a prompt
over one prefill, and it is deterministic in `--seed`. lm-eval (evaluators/lm_eval_tasks) runs the
same benchmarks through Hugging Face generation as an independent cross-check.

`evaluate_records(engine, tokenizer, records, ...)` is the in-process core the RL trainer and the
workflow call; `summarize(results, ...)` turns its output into the summary.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

BENCHMARKS = ("aime", "lcb", "cf")
REQUIRED_FIELDS = {"aime": ("id", "task", "prompt", "answer"), "lcb": ("id", "task", "prompt"),
                   "cf": ("id", "task", "prompt")}
# Defaults shared with the shipped lm-eval tasks (evaluators.lm_eval_tasks; a test checks).
SAMPLES = 4
TEMPERATURE = 0.6
TOP_P = 0.95
MAX_NEW_TOKENS = 1024
BATCH_PROMPTS = 16


def parse_benchmarks(spec: str) -> list[str]:
    """Benchmark names from a comma list; an unknown one raises ValueError naming it."""
    names = [b.strip() for b in spec.split(",") if b.strip()]
    if not names:
        raise ValueError(f"no benchmark given; valid: {', '.join(BENCHMARKS)}")
    for b in names:
        if b not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {b!r}; valid: {', '.join(BENCHMARKS)}")
    return list(dict.fromkeys(names))


def load_records(data_dir, bench: str, limit: int | None = None) -> list[dict]:
    """Records of `<data_dir>/<bench>_test.jsonl` (gspo.io.DataError on a bad file or record)."""
    from gspo.io import DataError, read_jsonl

    path = pathlib.Path(data_dir) / f"{bench}_test.jsonl"
    records = read_jsonl(path, required=REQUIRED_FIELDS[bench])
    ids = set()
    for rec in records:
        if rec["task"] != bench:
            raise DataError(f"{path}: record {rec['id']!r} has task {rec['task']!r}, expected {bench!r}")
        if rec["id"] in ids:
            raise DataError(f"{path}: duplicate record id {rec['id']!r}")
        ids.add(rec["id"])
    if not records:
        raise DataError(f"{path}: no records")
    return records[:limit] if limit is not None else records


def _score_all(records: list[dict], completions: list[list[str]], workers: int) -> list[list[float]]:
    """0/1 scores, one per completion, by each benchmark's own scoring function."""
    from evaluators.tasks import module, reward

    scores: list[list[float] | None] = [None] * len(records)
    by_task: dict[str, list[int]] = {}
    for i, rec in enumerate(records):
        by_task.setdefault(rec["task"], []).append(i)
    for task, idx in by_task.items():
        mod = module(task)
        if task != "aime" and hasattr(mod, "score_many"):
            flat_recs = [records[i] for i in idx for _ in completions[i]]
            flat_comp = [c for i in idx for c in completions[i]]
            flat = mod.score_many(flat_recs, flat_comp, workers=workers)
            vals = [float(r["passed"]) if isinstance(r, dict) else float(r) for r in flat]
            pos = 0
            for i in idx:
                scores[i] = vals[pos:pos + len(completions[i])]
                pos += len(completions[i])
        else:
            for i in idx:
                scores[i] = [reward(records[i], c) for c in completions[i]]
    return scores  # type: ignore[return-value]


def evaluate_records(engine, tokenizer, records: list[dict], *, samples: int = SAMPLES,
                     temperature: float = TEMPERATURE, top_p: float = TOP_P,
                     max_new_tokens: int = MAX_NEW_TOKENS, seed: int = 0,
                     batch_prompts: int = BATCH_PROMPTS, workers: int = 1,
                     keep_completions: bool = True) -> list[dict]:
    """Sample `samples` completions per record with `engine` and score them; one dict per record.

    Prompts are encoded with `tokenizer(prompt, add_special_tokens=False)`, generation stops on
    tokenizer.eos_token_id, completions are decoded with skip_special_tokens=True. Records are
    sampled in chunks of `batch_prompts`; chunk j uses seed `seed + j`, so a run is deterministic
    in (records, seed, batch_prompts). Each result holds id, task, n, c, avg@n, pass@1, pass@k
    (k = n), pass@j for j = 1, 2, 4, ... < n, scores, finish_reasons, n_tokens and (unless
    keep_completions is False) completions.
    """
    from evaluators.metrics import problem_metrics

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if batch_prompts < 1:
        raise ValueError(f"batch_prompts must be >= 1, got {batch_prompts}")
    eos = tokenizer.eos_token_id
    stop = [eos] if eos is not None else None
    texts: list[list[str]] = []
    finish: list[list[str]] = []
    lengths: list[list[int]] = []
    for j, start in enumerate(range(0, len(records), batch_prompts)):
        chunk = records[start:start + batch_prompts]
        prompts = [tokenizer(r["prompt"], add_special_tokens=False).input_ids for r in chunk]
        groups = engine.generate(prompts, n=samples, temperature=temperature, top_p=top_p,
                                 max_new_tokens=max_new_tokens, seed=seed + j,
                                 stop_token_ids=stop)
        for group in groups:
            texts.append([tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in group])
            finish.append([c.finish_reason for c in group])
            lengths.append([len(c.token_ids) for c in group])
    scores = _score_all(records, texts, workers)
    out = []
    for rec, comp, sc, fin, ln in zip(records, texts, scores, finish, lengths):
        m = problem_metrics(sc)
        res = {"id": rec["id"], "task": rec["task"], "n": m["n"], "c": m["c"],
               "avg@n": m["avg@n"], "pass@k": m["pass@k"], "k": m["k"],
               **{key: v for key, v in m.items() if key.startswith("pass@") and key != "pass@k"},
               "scores": sc, "finish_reasons": fin, "n_tokens": ln}
        if rec["task"] == "cf" and rec.get("rating") is not None:
            res["rating"] = rec["rating"]
        if keep_completions:
            res["completions"] = comp
        out.append(res)
    return out


def _cf_rating(results: list[dict]):
    """Rating estimate from every sample of every rated problem as one attempt, or None."""
    attempts = [(r["rating"], bool(s >= 0.5)) for r in results if r.get("rating") is not None
                for s in r["scores"]]
    if not attempts:
        return None
    try:
        from evaluators.codeforces import estimate_rating
    except ImportError:
        return None
    return estimate_rating(attempts)


def summarize(results: list[dict], *, iters: int = 1000, confidence: float = 0.95,
              seed: int = 0) -> dict:
    """Per-benchmark aggregate metrics (evaluators.metrics.aggregate) of evaluate_records' output."""
    from evaluators.metrics import aggregate

    by_task: dict[str, list[dict]] = {}
    for r in results:
        by_task.setdefault(r["task"], []).append(r)
    out = {}
    for task, rs in by_task.items():
        summary = aggregate([(r["n"], r["c"]) for r in rs], iters=iters, confidence=confidence,
                            seed=seed)
        if task == "cf":
            summary["rating"] = _cf_rating(rs)
        out[task] = summary
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.evaluate",
                                description="Evaluate a checkpoint on aime / lcb / cf with the rollout engine.")
    p.add_argument("--model", required=True, help="model directory (config.json + tokenizer)")
    p.add_argument("--benchmarks", default=",".join(BENCHMARKS),
                   help=f"comma list of {', '.join(BENCHMARKS)} (default: all)")
    p.add_argument("--samples", type=int, default=SAMPLES, help="completions per problem (n = k)")
    p.add_argument("--data-dir", default="data", help="folder of <bench>_test.jsonl (default: data)")
    p.add_argument("--out", required=True, help="output folder for results.jsonl and summary.json")
    p.add_argument("--temperature", type=float, default=TEMPERATURE)
    p.add_argument("--top-p", type=float, default=TOP_P)
    p.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    p.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", default="torch", help="rollout engine: torch or vllm")
    p.add_argument("--device", default="cpu", help="torch engine device (default: cpu)")
    p.add_argument("--batch-prompts", type=int, default=BATCH_PROMPTS)
    p.add_argument("--workers", type=int, default=1, help="parallel scorers for the code benchmarks")
    p.add_argument("--bootstrap-iters", type=int, default=1000)
    p.add_argument("--no-completions", action="store_true",
                   help="leave the completions out of results.jsonl")
    return p


def _make_engine(name: str, model_path: str, device: str):
    from gspo.rollout import ENGINES, make_engine

    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}")
    if name == "torch":
        from gspo.models import load_model

        model, tokenizer = load_model(model_path)
        return make_engine("torch", model_path, device=device, model=model), tokenizer
    from transformers import AutoTokenizer

    return make_engine(name, model_path), AutoTokenizer.from_pretrained(model_path)


def main(argv=None) -> int:
    from gspo.io import DataError, atomic_write_text, write_json

    args = build_parser().parse_args(argv)
    try:
        benches = parse_benchmarks(args.benchmarks)
        for name, v, lo in (("--samples", args.samples, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                            ("--batch-prompts", args.batch_prompts, 1), ("--workers", args.workers, 1)):
            if v < lo:
                raise ValueError(f"{name} must be >= {lo}, got {v}")
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        if args.temperature < 0 or not 0 < args.top_p <= 1:
            raise ValueError("--temperature must be >= 0 and --top-p in (0, 1]")
        records = {b: load_records(args.data_dir, b, args.limit) for b in benches}
        if not (pathlib.Path(args.model) / "config.json").is_file():
            raise ValueError(f"{args.model}: not a model directory (no config.json)")
        engine, tokenizer = _make_engine(args.engine, args.model, args.device)
    except (ValueError, DataError, OSError, ImportError) as e:
        sys.exit(f"error: {e}")

    t0 = time.time()
    results = []
    for b in benches:
        results += evaluate_records(engine, tokenizer, records[b], samples=args.samples,
                                    temperature=args.temperature, top_p=args.top_p,
                                    max_new_tokens=args.max_new_tokens, seed=args.seed,
                                    batch_prompts=args.batch_prompts, workers=args.workers,
                                    keep_completions=not args.no_completions)
    summary = {
        "benchmarks": summarize(results, iters=args.bootstrap_iters, seed=args.seed),
        "settings": {"model": str(args.model), "engine": args.engine, "samples": args.samples,
                     "temperature": args.temperature, "top_p": args.top_p,
                     "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                     "limit": args.limit, "data_dir": str(args.data_dir),
                     "batch_prompts": args.batch_prompts},
        "seconds": round(time.time() - t0, 3),
    }
    import json

    out = pathlib.Path(args.out)
    atomic_write_text(out / "results.jsonl",
                      "".join(json.dumps(r, sort_keys=True) + "\n" for r in results))
    write_json(out / "summary.json", summary)
    for b, s in summary["benchmarks"].items():
        print(f"{b}: avg@{s['samples_per_problem']}={s['avg@n']:.4f} pass@{s['k']}={s['pass@k']:.4f} "
              f"({s['n_problems']} problems, {s['n_samples']} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
