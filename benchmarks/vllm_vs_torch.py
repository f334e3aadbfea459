"""Rollout throughput of the vLLM engine vs the torch engine, and the cost of a vLLM weight sync.

    python benchmarks/vllm_vs_torch.py [--model DIR] [--prompts 32] [--n 8] [--new 64]

Both engines run in this one process's session on the same model, prompts and sampling arguments
(temperature 1, top-p 1, stop at EOS), alternating repeat by repeat so machine-speed drift hits
both alike; the first round warms up and is not counted. Reports median tokens/s (sampled tokens,
the stop token included) and the ratio, then the median time of `VLLMEngine.update_weights` with
the full state dict (what the trainer sends after every RL step), and how busy vLLM's processes
keep the CPU while the engine is idle (that time is taken from the trainer on a small machine),
and the torch engine once more after vLLM has shut down (not interleaved, so machine-speed drift
hits that row alone). Last, in the same run, the RL step time with old_logprobs: rollout (the
engine's log-probs stand in for the trainer's recompute pass) against recompute, the two runs
alternating step by step (benchmarks/rollout_and_step.py's compare_old_logprobs).

vLLM on CPU binds its model worker to one core and keeps one core for its engine-core process
(VLLM_CPU_OMP_THREADS_BIND=auto); the torch engine gets --threads intra-op threads.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import tempfile
import time

# a sibling script: running `python benchmarks/X.py` puts benchmarks/ first on sys.path
from rollout_and_step import workload_parser


def idle_cpu_share(seconds: float = 3.0) -> float:
    """CPU time used by this process's children during `seconds` of idling, in cores."""
    import psutil

    procs = psutil.Process().children(recursive=True)

    def used():
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    a = used()
    time.sleep(seconds)
    return (used() - a) / seconds


def measure(engines: dict, prompts, repeats: int, kw: dict):
    """({engine: [tokens/s per call]}, {engine: [tokens per call]}); round 0 warms up."""
    rates = {k: [] for k in engines}
    tokens = {k: [] for k in engines}
    for rep in range(repeats + 1):
        for name, eng in engines.items():
            t = time.perf_counter()
            out = eng.generate(prompts, seed=rep, **kw)
            dt = time.perf_counter() - t
            ntok = sum(len(c.token_ids) for g in out for c in g)
            if rep:
                rates[name].append(ntok / dt)
                tokens[name].append(ntok)
    return rates, tokens


def report(args, path, rates, tokens, *, start_s, sync, idle, nparams) -> None:
    print(
        f"\n== rollout: {args.prompts} prompts x {args.n} samples, <= {args.new} new tokens, "
        f"model {path.name}, {args.device}/{args.dtype}, torch threads {args.threads}, "
        f"{os.cpu_count()} cpus =="
    )
    base = statistics.median(rates["torch engine"])
    for name, r in rates.items():
        med = statistics.median(r)
        print(
            f"{name:26s} {med:10.0f} tokens/s   x{med / base:.2f} vs torch engine   "
            f"(median of {len(r)}; {statistics.mean(tokens[name]):.0f} tokens per call)"
        )
    print(f"\nvLLM engine start: {start_s:.1f} s")
    print(
        f"update_weights ({nparams / 1e6:.2f}M params): {1e3 * statistics.median(sync):.1f} ms "
        f"(median of {len(sync)})"
    )
    print(f"vLLM processes while idle: {idle:.2f} cores busy")


def main():
    ap = workload_parser(__doc__)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (torch engine)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument(
        "--rl-steps",
        type=int,
        default=4,
        help="RL steps per old_logprobs mode (0 = skip the step-time comparison)",
    )
    args = ap.parse_args()

    import torch

    from evaluators.benchmarks import aime
    from gspo.model.models import build_tiny, load_model
    from gspo.rollout import make_engine

    torch.set_num_threads(args.threads)
    work = pathlib.Path(tempfile.mkdtemp(prefix="gspo-bench-vllm-"))
    path = pathlib.Path(args.model) if args.model else build_tiny("tiny", work / "tiny", seed=0)
    model, tok = load_model(path)
    probs = aime.generate(args.prompts, split="train", seed=0, difficulty=aime.Difficulty(3, 9))
    prompts = [tok(r["prompt"], add_special_tokens=False).input_ids for r in probs]

    t = time.perf_counter()
    vllm_engine = make_engine("vllm", path, device=args.device, dtype=args.dtype)
    start_s = time.perf_counter() - t
    torch_engine = make_engine("torch", path, device=args.device, dtype=args.dtype)
    engines = {"vllm engine": vllm_engine, "torch engine": torch_engine}
    kw = dict(
        n=args.n,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=args.new,
        stop_token_ids=[tok.eos_token_id],
    )

    rates, tokens = measure(engines, prompts, args.repeats, kw)

    sd = model.state_dict()
    sync = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        vllm_engine.update_weights(sd)
        sync.append(time.perf_counter() - t)
    idle = idle_cpu_share()
    nparams = sum(v.numel() for v in sd.values())
    vllm_engine.close()
    # The torch engine once more, with vLLM's processes gone (they poll while idle).
    alone = []
    for rep in range(1, args.repeats + 1):
        t = time.perf_counter()
        out = torch_engine.generate(prompts, seed=rep, **kw)
        alone.append(sum(len(c.token_ids) for g in out for c in g) / (time.perf_counter() - t))
    rates["torch engine, vLLM closed"] = alone
    tokens["torch engine, vLLM closed"] = tokens["torch engine"]

    report(args, path, rates, tokens, start_s=start_s, sync=sync, idle=idle, nparams=nparams)
    if args.rl_steps:
        from rollout_and_step import compare_old_logprobs

        compare_old_logprobs(path, work, steps=args.rl_steps, threads=args.threads)


if __name__ == "__main__":
    main()
