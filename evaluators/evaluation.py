"""The evaluation core: sample completions with a rollout engine, score them with each
benchmark's own scoring, and summarise per problem and per benchmark.

`evaluate(model, configs, out)` is what `python -m pipeline.evaluate` runs, by hand or in the
workflow: for each benchmark config it writes, each atomically,

- `<out>/<bench>/results.jsonl`: one line per problem: id, task, n, c, pass@1, pass@k (k = n),
  avg@n, pass@j for j = 1, 2, 4, ..., scores (one per sample), finish_reasons, n_tokens, for a
  benchmark whose scoring extracts answers (aime) each sample's `answers` and the problem's
  maj@k (evaluators.metrics.majority_correct), and (keep_completions) the completions with the
  prompt and, where the record has one, the reference `answer`;
- `<out>/<bench>/summary.json`: n_problems, n_samples, avg@n, pass@k and pass@j, each with a
  seeded bootstrap confidence interval over problems (evaluators.metrics.aggregate), maj@k
  beside them where the benchmark extracts answers, for cf the rating estimated from the
  problems' ratings; the settings and the whole EvalConfig; the code
  that made it (`provenance`: gspo.infra.provenance's version and git commit);

While a benchmark runs, a line per chunk on stderr says the problems done of this process's
share, the rate and the time left (`Progress`).
- `<out>/<bench>/checkpoint.json` when the model is a training checkpoint: the step and the
  cumulative training FLOPs it was saved at (gspo.infra.checkpoint.checkpoint_meta).

Nested draws. A problem's j-th sample is seeded from (seed, problem id, j) alone
(gspo.rollout.base.problem_seed), never from `limit`, `samples`, `batch_prompts`, the ranks or
the order the problems come in: the first k samples of each problem of an n-sample evaluation
are exactly the k-sample evaluation, and the first m problems of a larger evaluation are exactly
the evaluation of those m. Checkpoints evaluated with one seed share their draws (common random
numbers: gspo.rollout.torch_engine.sample_next), so a curve over budgets compares models, not
draws (pipeline.report.curves).

Resume. The records are sampled and scored in chunks of `batch_prompts` (under torchrun rank r
takes chunks r, r + N, ...). While a benchmark runs, each finished chunk's
results are written atomically to `<out>/<bench>.partial/chunk_<j>.jsonl` (evaluators.partial),
beside the benchmark's folder, not in it: Snakemake deletes a failed job's declared outputs,
never this. A re-run after a kill or a time limit reads the chunks found there instead of
sampling them, and gives what an uninterrupted run gives; the folder's key.json names the
model, data and settings it was made with, and a folder made with others is discarded (one line
says so). The partial folders are removed once every benchmark's files are written.

Why the rollout engine rather than lm-eval: it is the sampler the RL loop itself uses (the same
prompts token for token, the same stop rule, the same decoding), it batches all samples of a
prompt over one prefill, and it is deterministic in the seed. lm-eval (evaluators/lm_eval_tasks)
runs the same benchmarks through Hugging Face generation as an independent cross-check.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from dataclasses import dataclass

from evaluators import partial, tasks
from evaluators.metrics import aggregate, bootstrap_ci, majority_correct, problem_metrics
from gspo.config.fields import check, option
from gspo.config.train import PromptConfig
from gspo.infra import distributed as dist
from gspo.infra import provenance
from gspo.io import DataError, atomic_write_text, read_jsonl, write_json
from gspo.model import tokens
from gspo.model.tokens import Codec
from gspo.rollout.base import problem_seed


@dataclass
class EvalConfig:
    """Evaluation of one model on one benchmark (`pipeline.evaluate --config FILE`; the
    workflow's `eval` section, whose defaults these are)."""

    benchmark: str = option("aime", f"the benchmark: one of {', '.join(tasks.BENCHMARKS)}")
    data: str = option(
        "",
        "JSONL of the benchmark's test records (the workflow: "
        "results/<experiment>/data/<benchmark>_test.jsonl)",
    )
    engine: str = option("torch", "rollout engine: torch or vllm")
    device: str = option("cpu", "engine device (cpu, cuda)")
    dtype: str = option("float32", "engine precision: float32, bfloat16 or float16")
    tensor_parallel_size: int = option(
        1, "vllm only: GPUs one engine spans (a model too large for one GPU)"
    )
    gpu_memory_utilization: float = option(
        0.0,
        "vllm only: share of GPU memory the engine may "
        "take (0: 0.9 on a GPU, which evaluation has to itself)",
    )
    max_model_len: int = option(0, "vllm only: longest prompt + completion (0: the model's)")
    samples: int = option(8, "completions per problem (pass@1 = mean over them; n = k)")
    temperature: float = option(1.0, "sampling temperature (0: greedy)")
    top_p: float = option(1.0, "nucleus mass")
    max_new_tokens: int = option(64, "longest completion, in tokens")
    seed: int = option(1234, "sampling seed (the same for every checkpoint)")
    limit: int = option(0, "first N problems of the test set (0: all)")
    batch_prompts: int = option(
        64,
        "prompts per generation batch (changes no result: each "
        "problem's samples are seeded from seed and its id)",
    )
    workers: int = option(1, "parallel sandboxes scoring code")
    bootstrap_iters: int = option(1000, "bootstrap resamples of the confidence intervals")
    keep_completions: bool = option(
        True,
        "keep the completions (with their prompt) in "
        "results.jsonl: the report's side-by-side view reads them; "
        "false at a scale where they weigh too much",
    )
    protocol: str = option(
        "",
        "the name of the evaluation protocol these settings follow, "
        "recorded with every evaluation ('': none; config/paper-protocol.yaml)",
    )
    prompt: PromptConfig = option(
        PromptConfig(),
        "how a record's prompt becomes the model's "
        "input (gspo.model.tokens); the same as the model was trained with",
    )

    def __post_init__(self):
        check(
            self.benchmark in tasks.BENCHMARKS,
            "benchmark",
            f"must be one of {', '.join(tasks.BENCHMARKS)}, got {self.benchmark!r}",
        )
        for name in ("samples", "max_new_tokens", "batch_prompts", "workers"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        check(self.limit >= 0, "limit", f"must be >= 0 (0: all), got {self.limit}")
        check(self.bootstrap_iters >= 0, "bootstrap_iters", "must be >= 0")
        check(self.temperature >= 0, "temperature", f"must be >= 0, got {self.temperature}")
        check(0 < self.top_p <= 1, "top_p", f"must lie in (0, 1], got {self.top_p}")
        check(
            self.engine in ("torch", "vllm"),
            "engine",
            f"must be 'torch' or 'vllm', got {self.engine!r}",
        )
        check(
            self.dtype in ("float32", "bfloat16", "float16"),
            "dtype",
            f"must be float32, bfloat16 or float16, got {self.dtype!r}",
        )
        check(self.tensor_parallel_size >= 1, "tensor_parallel_size", "must be >= 1")
        check(
            0 <= self.gpu_memory_utilization < 1,
            "gpu_memory_utilization",
            f"must be in [0, 1) (0: the default), got {self.gpu_memory_utilization}",
        )
        check(self.max_model_len >= 0, "max_model_len", "must be >= 0 (0: the model's)")
        check(
            self.engine == "vllm"
            or (
                self.tensor_parallel_size == 1
                and not self.gpu_memory_utilization
                and not self.max_model_len
            ),
            "tensor_parallel_size",
            "and gpu_memory_utilization, max_model_len are vllm "
            "settings; set engine: vllm or leave them at their defaults",
        )


def load_records(path, bench: str, limit: int | None = None) -> list[dict]:
    """The test records of `bench` in JSONL file `path` (DataError on a bad file or record)."""
    path = pathlib.Path(path)
    records = read_jsonl(path, required=tasks.module(bench).RECORD_FIELDS)
    ids = set()
    for rec in records:
        if rec["task"] != bench:
            raise DataError(
                f"{path}: record {rec['id']!r} has task {rec['task']!r}, expected {bench!r}"
            )
        if rec["id"] in ids:
            raise DataError(f"{path}: duplicate record id {rec['id']!r}")
        ids.add(rec["id"])
    if not records:
        raise DataError(f"{path}: no records")
    return records[:limit] if limit else records


def score_completions(
    records: list[dict], completions: list[list[str]], workers: int
) -> list[list[float]]:
    """0/1 scores, one per completion of each record, by each benchmark's own scoring."""
    return scored(records, completions, workers)[0]


def scored(
    records: list[dict], completions: list[list[str]], workers: int
) -> tuple[list[list[float]], list[list | None]]:
    """(0/1 scores, extracted answers) per record, one per completion, by each benchmark's own
    scoring; a record's answers are None when its scoring extracts none (no "answer" key)."""
    flat_recs = [rec for rec, comps in zip(records, completions) for _ in comps]
    flat = tasks.score_many(flat_recs, [c for comps in completions for c in comps], workers=workers)
    scores, answers, pos = [], [], 0
    for comps in completions:
        mine = flat[pos : pos + len(comps)]
        scores.append([float(r["passed"]) for r in mine])
        answers.append([r["answer"] for r in mine] if all("answer" in r for r in mine) else None)
        pos += len(comps)
    return scores, answers


def _sample_chunk(
    engine, codec: Codec, chunk: list[dict], *, samples, temperature, top_p, max_new_tokens, seed
):
    """(texts, finish reasons, token counts) per record of `chunk`, sampled with `seed` (each
    record's samples from its own problem_seed)."""
    prompts = [codec.prompt(r["prompt"]) for r in chunk]
    groups = engine.generate(
        prompts,
        n=samples,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=[problem_seed(seed, r["id"]) for r in chunk],
        stop_token_ids=codec.stop_ids,
    )
    return (
        [[codec.decode(c.token_ids) for c in group] for group in groups],
        [[c.finish_reason for c in group] for group in groups],
        [[len(c.token_ids) for c in group] for group in groups],
    )


def _result(
    rec: dict,
    comps: list[str],
    scores: list[float],
    answers: list | None,
    finish: list[str],
    lengths: list[int],
    keep_completions: bool,
) -> dict:
    """One record's line of results.jsonl (see the module doc)."""
    m = problem_metrics(scores)
    res = {
        "id": rec["id"],
        "task": rec["task"],
        "n": m["n"],
        "c": m["c"],
        "avg@n": m["avg@n"],
        "pass@k": m["pass@k"],
        "k": m["k"],
        **{key: v for key, v in m.items() if key.startswith("pass@") and key != "pass@k"},
        "scores": scores,
        "finish_reasons": finish,
        "n_tokens": lengths,
    }
    if answers is not None:
        res.update(answers=answers, **{"maj@k": majority_correct(answers, scores)})
    if rec["task"] == "cf" and rec.get("rating") is not None:
        res["rating"] = rec["rating"]
    if keep_completions:
        res.update(
            completions=comps,
            prompt=rec["prompt"],
            **({"answer": str(rec["answer"])} if "answer" in rec else {}),
        )
    return res


class Progress:
    """One line on stderr per chunk: the problems this process has done of its share, the rate
    of those it sampled (chunks read back from a resumed run are done at once) and the time
    left at that rate. Plain lines, so job logs keep them."""

    def __init__(self, label: str, total: int, stream=None, clock=time.monotonic):
        self.label, self.total, self.clock = label, total, clock
        self.stream = stream if stream is not None else sys.stderr
        self.t0, self.done, self.sampled = clock(), 0, 0

    def advance(self, n: int, *, sampled: bool = True) -> str:
        self.done += n
        self.sampled += n if sampled else 0
        dt = self.clock() - self.t0
        rate = self.sampled / dt if dt > 0 and self.sampled else 0.0
        left = (self.total - self.done) / rate if rate else None
        eta = "-" if left is None else f"{int(left // 60)}m{int(left % 60):02d}s"
        line = (
            f"{self.label}: {self.done}/{self.total} problems "
            f"({self.done / max(self.total, 1):.0%}), {rate:.2f} problems/s, ETA {eta}"
        )
        print(line, file=self.stream, flush=True)
        return line


def evaluate_records(
    engine,
    codec: Codec,
    records: list[dict],
    *,
    samples: int = 8,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    batch_prompts: int = 64,
    workers: int = 1,
    keep_completions: bool = True,
    world: dist.World = dist.World(),
    store: partial.ChunkStore | None = None,
    label: str = "",
) -> list[dict]:
    """Sample `samples` completions per record with `engine` and score them; one dict per record
    (see the module doc for its fields). `codec` (gspo.model.tokens) encodes the prompts, names the
    stop ids and decodes the completions without special tokens.

    The records go in chunks of `batch_prompts`; each record's samples are seeded from (seed,
    its id, the sample's index) alone (problem_seed), so the results are deterministic in
    (records, seed) whichever chunk or process samples a record, and nest in `samples`.
    Data-parallel under torchrun: rank r samples and scores the chunks j = r, r + N, ... and
    every rank gets all the results, in record order: the same as one process. With a `store`
    (evaluators.partial; made with settings that give these results) each chunk's results are
    saved once scored, and a chunk already there is read back instead of sampled. With a
    `label`, a Progress line on stderr after each chunk."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if batch_prompts < 1:
        raise ValueError(f"batch_prompts must be >= 1, got {batch_prompts}")
    if store is not None:
        store.open(world)
    n_chunks, out = -(-len(records) // batch_prompts), []
    mine = range(world.rank, n_chunks, world.size)
    progress = (
        Progress(
            label, sum(len(records[j * batch_prompts : (j + 1) * batch_prompts]) for j in mine)
        )
        if label
        else None
    )
    for j in mine:
        chunk = records[j * batch_prompts : (j + 1) * batch_prompts]
        rows = store.load(j, [r["id"] for r in chunk]) if store is not None else None
        resumed = rows is not None
        if rows is None:
            texts, finish, lengths = _sample_chunk(
                engine,
                codec,
                chunk,
                samples=samples,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                seed=seed,
            )
            scores, answers = scored(chunk, texts, workers)
            rows = [
                _result(*x, keep_completions)
                for x in zip(chunk, texts, scores, answers, finish, lengths)
            ]
            if store is not None:
                store.save(j, rows)
        if progress is not None:
            progress.advance(len(chunk), sampled=not resumed)
        out += [(j * batch_prompts + i, row) for i, row in enumerate(rows)]
    if store is not None and world.distributed:
        store.wait(n_chunks)  # not in the gather: it would time out on a slow rank
    return [res for _, res in sorted(dist.gather_objects(out, world), key=lambda x: x[0])]


def summarize(
    results: list[dict], *, iters: int = 1000, confidence: float = 0.95, seed: int = 0
) -> dict:
    """Per-benchmark aggregate metrics (evaluators.metrics.aggregate) of evaluate_records' output."""
    by_task: dict[str, list[dict]] = {}
    for r in results:
        by_task.setdefault(r["task"], []).append(r)
    out = {}
    for task, rs in by_task.items():
        summary = aggregate(
            [(r["n"], r["c"]) for r in rs], iters=iters, confidence=confidence, seed=seed
        )
        if all("maj@k" in r for r in rs):  # a benchmark whose scoring extracts answers
            maj = [r["maj@k"] for r in rs]
            summary["maj@k"] = sum(maj) / len(maj)
            summary["maj@k_ci"] = list(
                bootstrap_ci(maj, iters=iters, confidence=confidence, seed=seed)
            )
        if task in tasks.RATINGS:
            summary["rating"] = tasks.rating(task, rs)
        out[task] = summary
    return out


def make_engine(cfg: EvalConfig, model_path, world: dist.World = dist.World()):
    """(engine, tokenizer) for evaluating the model directory `model_path` as `cfg` says: its
    engine, device, dtype and, for vLLM, tensor parallelism, memory share and length. Under
    torchrun, `cuda` means the rank's own GPU (one engine per GPU)."""
    from gspo.rollout import make_engine as make

    if cfg.device == "cuda" and world.distributed:
        cfg = dataclasses.replace(cfg, device=f"cuda:{world.local_rank}")

    if cfg.engine == "torch":
        import torch

        from gspo.model.models import load_model

        model, tokenizer = load_model(model_path, dtype=getattr(torch, cfg.dtype))
        return make(
            "torch", str(model_path), device=cfg.device, dtype=cfg.dtype, model=model
        ), tokenizer
    from transformers import AutoTokenizer

    engine = make(
        "vllm",
        str(model_path),
        device=cfg.device,
        dtype=cfg.dtype,
        seed=cfg.seed,
        tensor_parallel_size=cfg.tensor_parallel_size,
        # evaluation has the GPU to itself (the trainer's engines share theirs)
        gpu_memory_utilization=cfg.gpu_memory_utilization
        or (0.9 if cfg.device.startswith("cuda") else None),
        max_model_len=cfg.max_model_len or None,
    )
    return engine, AutoTokenizer.from_pretrained(model_path)


def settings_of(cfg: EvalConfig, model) -> dict:
    """What summary.json records of how the evaluation was made."""
    return {
        "model": str(model),
        "engine": cfg.engine,
        "dtype": cfg.dtype,
        "samples": cfg.samples,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
        "seed": cfg.seed,
        "limit": cfg.limit or None,
        "data_dir": str(pathlib.Path(cfg.data).parent),
        "batch_prompts": cfg.batch_prompts,
        "protocol": cfg.protocol or None,
    }


def load_all(configs: list[EvalConfig]) -> dict[str, list[dict]]:
    """{benchmark: its test records} of each config (DataError on a bad file or record)."""
    return {c.benchmark: load_records(c.data, c.benchmark, c.limit or None) for c in configs}


def _write(
    d: pathlib.Path, results: list[dict], summary: dict, checkpoint: dict | None, bench: str
) -> None:
    atomic_write_text(
        d / "results.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in results)
    )
    if checkpoint is not None:
        write_json(d / "checkpoint.json", {**checkpoint, "benchmark": bench})
    write_json(d / "summary.json", summary)  # last: its presence says the folder is whole


def evaluate(
    model,
    configs: list[EvalConfig],
    out,
    *,
    records: dict | None = None,
    checkpoint: dict | None = None,
    world: dist.World = dist.World(),
) -> dict:
    """Evaluate `model` on each benchmark config (the model and the engine are loaded once per
    process), writing <out>/<bench>/ as the module doc says; `records` as load_all returns them
    (loaded here when None). Under torchrun the ranks share the sampling (evaluate_records) and
    rank 0 writes. Each benchmark's chunks are kept in <out>/<bench>.partial/ as they are done
    (a re-run resumes there) and removed once every benchmark is written. Returns {bench:
    summary}."""
    records = records if records is not None else load_all(configs)
    engines: dict = {}
    result, stores = {}, []
    for cfg in configs:
        t0 = time.time()
        key = (
            cfg.engine,
            cfg.device,
            cfg.dtype,
            cfg.tensor_parallel_size,
            cfg.gpu_memory_utilization,
            cfg.max_model_len,
        )
        if key not in engines:
            engines[key] = make_engine(cfg, model, world)
        engine, tokenizer = engines[key]
        recs = records[cfg.benchmark]
        stores.append(
            partial.ChunkStore(
                pathlib.Path(out) / f"{cfg.benchmark}.partial", partial.store_key(cfg, model, recs)
            )
        )
        results = evaluate_records(
            engine,
            tokens.codec(tokenizer, model, cfg.prompt),
            recs,
            samples=cfg.samples,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            seed=cfg.seed,
            batch_prompts=cfg.batch_prompts,
            workers=cfg.workers,
            keep_completions=cfg.keep_completions,
            world=world,
            store=stores[-1],
            label=cfg.benchmark + (f" rank {world.rank}" if world.distributed else ""),
        )
        summary = {
            "benchmarks": summarize(results, iters=cfg.bootstrap_iters, seed=cfg.seed),
            "settings": settings_of(cfg, model),
            "config": dataclasses.asdict(cfg),
            "provenance": provenance.record(),
            "seconds": round(time.time() - t0, 3),
        }
        result[cfg.benchmark] = summary
        if world.main:
            _write(pathlib.Path(out) / cfg.benchmark, results, summary, checkpoint, cfg.benchmark)
    for engine, _ in engines.values():
        engine.close()
    if world.main:
        # only now: Snakemake deletes every benchmark's files when a later one fails
        for store in stores:
            store.remove()
    dist.barrier(world)
    return result
