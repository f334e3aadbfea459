"""Peak memory of one policy update at Qwen3's 152K vocabulary: plain vs chunked log-probs, with
and without activation checkpointing.

    python benchmarks/memory.py [--tokens 1024,4096,16384] [--chunk 1024] [--hidden 128]

A Qwen3-shaped model (the real vocabulary, 151,936; small hidden size and depth so that the
full-vocabulary logits dominate, as they do for long sequences at real scale) takes one GSPO
update (forward with log-probs and entropy, policy loss, backward) on one sequence of T tokens.
Each configuration runs in a fresh process; the figure is the process's peak resident memory
during the update minus its resident memory just before it (the model and optimizer are already
there). The plain computation holds at least three (T, V) float32 tensors at once (the model's
logits, their temperature-scaled copy and the softmax; measured: about five), so where five
would not fit in the memory free now it is not run, and its peak and ratio are printed as lower
bounds from three copies.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

VOCAB = 151_936


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(tokens: int, chunk: int, ckpt: bool, hidden: int) -> dict:
    """One update in this process; {peak_mb, seconds}."""
    import time

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from gspo.core.objectives import policy_loss
    from gspo.model.logprobs import sequence_logprobs

    torch.manual_seed(0)
    torch.set_num_threads(2)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        max_position_embeddings=tokens + 1,
        tie_word_embeddings=False,
    )
    model = Qwen3ForCausalLM(cfg).float().train()
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def update(n: int) -> float:
        ids = torch.randint(0, VOCAB, (1, n + 1))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        mask = torch.ones(1, n)
        t0 = time.perf_counter()
        logp, ent = sequence_logprobs(model, batch, with_entropy=True, chunk=chunk)
        loss, _ = policy_loss(
            logp, logp.detach(), torch.ones(1), mask, objective="gspo", eps_low=3e-4, eps_high=4e-4
        )
        (loss - 1e-3 * (ent * mask).mean()).backward()
        return time.perf_counter() - t0

    # A short update first: lazily loaded kernels and the gradient buffers are then resident
    # before the measurement starts, so the figure is the long sequence's own cost.
    update(16)
    before = rss_mb()
    seconds = update(tokens)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"peak_mb": peak - before, "seconds": seconds}


def measure(tokens: int, chunk: int, ckpt: bool, hidden: int) -> dict | None:
    """child() in a fresh process, or None when it died (out of memory)."""
    cmd = [sys.executable, __file__, "--child", f"{tokens},{chunk},{int(ckpt)},{hidden}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  (T={tokens}, chunk={chunk}, ckpt={ckpt}) failed: {r.stderr.strip()[-300:]}")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def free_mb() -> float:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) for line in f}
    return info["MemAvailable"] / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="1024,4096,16384", help="sequence lengths to measure")
    ap.add_argument("--chunk", type=int, default=1024, help="positions per log-prob chunk")
    ap.add_argument("--hidden", type=int, default=128, help="hidden size of the model")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        t, c, k, h = map(int, args.child.split(","))
        print(json.dumps(child(t, c, bool(k), h)))
        return
    print(
        f"== one GSPO update, Qwen3-shaped model (vocab {VOCAB}, hidden {args.hidden}, 2 layers), "
        f"1 sequence; peak RSS increase in MB =="
    )
    print(
        f"{'tokens':>7} {'plain':>10} {'chunked':>10} {'ratio':>8} {'chunked+AC':>11} "
        f"{'plain+AC':>10}   seconds plain / chunked"
    )
    for T in map(int, args.tokens.split(",")):
        logits_mb = T * VOCAB * 4 / 2**20
        runnable = 5 * logits_mb < free_mb()
        bound = 3 * logits_mb
        plain = measure(T, 0, False, args.hidden) if runnable else None
        chunked = measure(T, args.chunk, False, args.hidden)
        chunked_ac = measure(T, args.chunk, True, args.hidden)
        plain_ac = measure(T, 0, True, args.hidden) if runnable else None
        if plain and chunked:
            ratio = f"{plain['peak_mb'] / chunked['peak_mb']:.1f}x"
        elif chunked:  # plain not run: its logits alone bound its peak from below
            ratio = f">={bound / chunked['peak_mb']:.1f}x"
        else:
            ratio = "-"

        def mb(r, bound=None):
            return f"{r['peak_mb']:.0f}" if r else (f">{bound:.0f}" if bound else "-")

        secs = f"{plain['seconds']:.1f}" if plain else "-"
        secs += f" / {chunked['seconds']:.1f}" if chunked else " / -"
        print(
            f"{T:>7} {mb(plain, bound):>10} {mb(chunked):>10} {ratio:>8} "
            f"{mb(chunked_ac):>11} {mb(plain_ac, bound):>10}   {secs}"
        )


if __name__ == "__main__":
    main()
