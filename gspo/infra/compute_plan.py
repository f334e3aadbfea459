"""The compute a run will spend, estimated before it starts (the workflow's plan prints it for a
whole config: workflow/gspo_workflow/preflight.py). Pure arithmetic, no measurement.

On GPUs, in GPU-hours, from the model's shapes (gspo.infra.memory_plan.Shape) and the run's settings:

- a training pass (SFT, the RL update) costs 3 F per token and the RL old-log-prob pass F, with
  F gspo.model.flops' forward cost (2 N per token for the N active matmul parameters, plus
  attention's 2 x layers x heads x head_dim x (L + 1) at length L); the old-log-prob pass skips
  the step's first minibatch, whose update forward gives its old log-probs, and is gone with
  `old_logprobs: rollout`. These run at TRAIN_MFU of the GPU's dense bf16 peak;
- sampling (RL rollouts, evaluation) is decoding, which memory bandwidth bounds: each decoded
  token reads its sequence's KV cache (the length it ends at, a conservative mean) and its share
  of the bf16 weights, read once per decoding step for all the sequences in flight, as many as
  the engine's share of the GPU holds in KV cache (as gspo.infra.memory_plan.plan counts them);
- responses are RESPONSE_FILL of max_new_tokens long on average, prompts PROMPT_TOKENS, SFT
  records SFT_FILL of max_len: assumptions, printed with the estimate.

For Qwen3-1.7B on an H100 this gives ~1.9K tokens/s per GPU decoding 16K-token samples, the
figure profiles/slurm/config.yaml sizes evaluation with.

On a CPU (the tiny presets), in CPU job-seconds, from CPU_RATES: each stage's seconds per unit
of work as measured on the default run (config/default.yaml, one 2-core AMD EPYC, one torch
thread per job beside another job), plus each job's start (imports, model load, sandboxes).
Another machine, or other model sizes, scale them only roughly.
"""

from __future__ import annotations

import dataclasses

from gspo.infra.memory_plan import GIB, Shape

TRAIN_MFU = 0.4  # model FLOPs utilisation of training passes (FSDP2, bf16): an assumption
RESPONSE_FILL = 0.5  # mean response length / max_new_tokens: an assumption
SFT_FILL = 0.5  # mean SFT record length / max_len: an assumption
PROMPT_TOKENS = 1024  # a prompt (pipeline.memory_plan's --prompt-tokens default)


@dataclasses.dataclass(frozen=True)
class GPU:
    name: str = "H100"
    peak_flops: float = 989e12  # dense bf16 FLOP/s
    mem_bw: float = 3.35e12  # HBM bytes/s
    gib: float = 79.6  # memory as torch reports it


# seconds per unit of work on a CPU (module doc): "start" per job, "sft" per trained sequence,
# "rl" per sampled token of max_new_tokens, "eval" / "eval_sandboxed" per sampled token of
# max_new_tokens (a benchmark whose answers run in the sandbox), "track" / "aggregate" /
# "report" per job. Measured on the default run: SFT 52 s for 400 x 32 sequences; RL 30 s for
# 32 x 64 responses of up to 128 tokens; an evaluation 9.6 s for 2400 math samples of up to 64
# tokens and 9.3 s for 480 code samples of up to 128; track 4-9 s, aggregate 4 s, report 17 s.
CPU_RATES = {
    "start": 8.0,
    "sft": 4.1e-3,
    "rl": 1.15e-4,
    "eval": 6.3e-5,
    "eval_sandboxed": 1.5e-4,
    "track": 6.0,
    "aggregate": 4.0,
    "report": 17.0,
}


def active_params(shape: Shape) -> int:
    """N, the parameters a token is multiplied by: every decoder layer's matmuls (MoE: the
    top-k experts and the router) and the LM head; not the embedding lookup."""
    h, d = shape.hidden, shape.head_dim
    attn = h * shape.heads * d + 2 * h * shape.kv_heads * d + shape.heads * d * h
    mlp = (
        shape.top_k * 3 * h * shape.moe_intermediate + h * shape.experts
        if shape.experts
        else 3 * h * shape.intermediate
    )
    return shape.layers * (attn + mlp) + shape.vocab * h


def flops_per_token(shape: Shape, length: float) -> float:
    """F(L) / L, a forward's FLOPs per token of a sequence of `length` (gspo.model.flops)."""
    return 2 * active_params(shape) + 2 * shape.layers * shape.heads * shape.head_dim * (length + 1)


def train_seconds(shape: Shape, gpu: GPU, tokens: float, length: float, passes: float) -> float:
    """GPU-seconds of `passes` forward-equivalents (a training pass is 3) over `tokens` tokens
    in sequences of `length`."""
    return passes * tokens * flops_per_token(shape, length) / (gpu.peak_flops * TRAIN_MFU)


def decode_seconds(shape: Shape, gpu: GPU, tokens: float, length: float, share: float) -> float:
    """GPU-seconds to decode `tokens` tokens of sequences ending at `length`, the engine holding
    `share` of the GPU (module doc)."""
    weights = 2 * shape.params()
    kv = share * gpu.gib * GIB - weights - GIB
    in_flight = max(1.0, kv / (shape.kv_bytes_per_token() * length))
    return tokens * (shape.kv_bytes_per_token() * length + weights / in_flight) / gpu.mem_bw


def sft_gpu_seconds(shape: Shape, gpu: GPU, *, steps: int, batch_size: int, max_len: int) -> float:
    length = SFT_FILL * max_len
    return train_seconds(shape, gpu, steps * batch_size * length, length, 3)


def rl_gpu_seconds(
    shape: Shape,
    gpu: GPU,
    *,
    steps: int,
    prompts: int,
    group: int,
    max_new: int,
    minibatches: int,
    epochs: int,
    recompute: bool,
    share: float,
) -> dict[str, float]:
    """{"rollout", "train"} GPU-seconds of one RL run."""
    sequences = steps * prompts * group
    response = RESPONSE_FILL * max_new
    length = PROMPT_TOKENS + response
    old_pass = (1 - 1 / minibatches) if recompute else 0.0
    return {
        "rollout": decode_seconds(shape, gpu, sequences * response, length, share),
        "train": train_seconds(shape, gpu, sequences * length, length, old_pass + 3 * epochs),
    }


def eval_gpu_seconds(shape: Shape, gpu: GPU, *, samples: int, max_new: int, share: float) -> float:
    """GPU-seconds of `samples` sampled answers of up to `max_new` tokens."""
    response = RESPONSE_FILL * max_new
    return decode_seconds(shape, gpu, samples * response, PROMPT_TOKENS + response, share)
