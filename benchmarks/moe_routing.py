"""What Routing Replay's bookkeeping costs on a MoE model: rollouts that record the engine's
routing, and trainer forward passes that record or replay it, each against the plain pass.

    python benchmarks/moe_routing.py [--model DIR] [--prompts 32] [--n 8] [--new 64]

One process, one model (default: a fresh random `tiny-moe` preset), the same prompts; each pair
alternates repeat by repeat so machine-speed drift hits both sides alike, and the first round
warms up and is not counted. Reports medians and the ratio to the plain pass, and the size of
the recorded routing (what the trainer keeps per step for replay).
"""

from __future__ import annotations

import pathlib
import statistics
import tempfile
import time

import torch

from evaluators.benchmarks import aime
from gspo.model import moe
from gspo.model.logprobs import sequence_logprobs
from gspo.model.models import build_tiny, load_model
from gspo.native.data import pad_batch
from gspo.rollout import make_engine

# a sibling script: running `python benchmarks/X.py` puts benchmarks/ first on sys.path
from rollout_and_step import workload_parser


def timed(fn, *args, **kw):
    """(fn(*args, **kw), its seconds)."""
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def main():
    ap = workload_parser(__doc__)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = pathlib.Path(tempfile.mkdtemp(prefix="gspo-bench-moe-"))
    path = pathlib.Path(args.model) if args.model else build_tiny("tiny-moe", work / "m", seed=0)
    model, tok = load_model(path)
    model.eval()
    if not moe.is_moe(model):
        raise SystemExit(f"error: {path} is not a Mixture-of-Experts model")
    engine = make_engine("torch", path)
    probs = aime.generate(args.prompts, split="train", seed=0, difficulty=aime.Difficulty(3, 9))
    prompts = [tok(r["prompt"], add_special_tokens=False).input_ids for r in probs]

    gen = {"plain": [], "recording routing": []}
    fwd = {"plain": [], "recording": [], "replaying": []}
    cache_bytes = 0
    for rep in range(args.repeats + 1):
        timings = {}
        for name, ask in (("plain", False), ("recording routing", True)):
            groups, dt = timed(
                engine.generate,
                prompts,
                n=args.n,
                max_new_tokens=args.new,
                seed=rep,
                return_routing=ask,
            )
            timings[name] = (sum(len(c.token_ids) for g in groups for c in g), dt)
        flat_p = [p for p, g in zip(prompts, groups) for _ in g]
        comps = [c for g in groups for c in g]
        batch = pad_batch(flat_p, [c.token_ids for c in comps], tok.pad_token_id)
        routing = moe.engine_routing(
            flat_p, comps, batch["input_ids"].shape[1], moe.routers(model)[0][2].num_experts
        )
        cache_bytes = routing.nbytes
        with torch.no_grad():
            _, t_plain = timed(sequence_logprobs, model, batch)
            with moe.routing_hooks(model, record=True):
                _, t_rec = timed(sequence_logprobs, model, batch)
            with moe.routing_hooks(model, replay=routing):
                _, t_rep = timed(sequence_logprobs, model, batch)
        if rep:
            for name, (ntok, dt) in timings.items():
                gen[name].append(ntok / dt)
            fwd["plain"].append(t_plain)
            fwd["recording"].append(t_rec)
            fwd["replaying"].append(t_rep)

    print(
        f"\n== MoE routing bookkeeping: {args.prompts} prompts x {args.n} samples, <= {args.new} "
        f"new tokens, {args.threads} threads, model {path.name} =="
    )
    base = statistics.median(gen["plain"])
    for name, r in gen.items():
        med = statistics.median(r)
        print(f"rollout, {name:22s} {med:10.0f} tokens/s   x{med / base:.2f} vs plain")
    base = statistics.median(fwd["plain"])
    for name, r in fwd.items():
        med = statistics.median(r)
        print(f"trainer forward, {name:14s} {1e3 * med:10.1f} ms   x{med / base:.2f} vs plain")
    print(
        f"routing of one rollout batch: {cache_bytes / 1024:.1f} KiB "
        f"({routing.shape[0]} sequences x {routing.shape[1]} positions x top-{routing.shape[2]} "
        f"x {len(routing.layers)} layers, {routing.layers[next(iter(routing.layers))].dtype})"
    )


if __name__ == "__main__":
    main()
