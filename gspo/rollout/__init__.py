"""Rollout engines: one small interface for sampling completions with their log-probs.

    engine = make_engine("torch", model_path, device="cpu")
    groups = engine.generate(prompts, n=8, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=0)
    groups[i][j].token_ids, groups[i][j].logprobs      # prompt i, sample j
    engine.update_weights(policy.state_dict())         # after each RL update

`logprobs[t]` is the log-probability of the sampled token under the distribution it was sampled
from: logits / temperature, then (when top_p < 1) restricted to the nucleus and renormalised. With
top_p = 1 this is exactly log_softmax(logits / temperature), which is what the trainer recomputes;
with top_p < 1 the engine's value is >= the trainer's (the nucleus mass is < 1).

`seed` is one seed for the call, or a list of one seed per prompt: then the samples of a prompt
depend only on the model, the prompt, the settings and its own seed, not on which prompts it was
batched with (so RL rollouts do not depend on how many ranks drew them). Both engines seed each
sample alike (prompt i: (seed * len(prompts) + i) * n, or seeds[i] * n; its j-th sample + j),
and each draws a sample's tokens from that sample's own stream, so two checkpoints sampled with
the same seeds share their sampling noise (common random numbers): their scores are paired
sample by sample, which makes a GSPO - GRPO difference on the same problems less noisy.

With `return_routing=True` a MoE model's completions also carry the experts its routers chose
(`Completion.routing`; the torch engine only, see gspo.model.moe).

Engines: "torch" (gspo.rollout.torch_engine, batched KV-cached sampling in plain torch, any device)
and "vllm" (gspo.rollout.vllm_engine, the vLLM engine; an optional install).
"""

from __future__ import annotations

from gspo.rollout.base import ENGINES, Completion, Engine, nothing_to_generate

__all__ = ["ENGINES", "Completion", "Engine", "make_engine", "nothing_to_generate"]


def make_engine(name: str, model_path, **options) -> Engine:
    """Build the rollout engine `name` ("torch" or "vllm") over the model at `model_path`."""
    if name == "torch":
        from gspo.rollout.torch_engine import TorchEngine

        return TorchEngine(model_path, **options)
    if name == "vllm":
        from gspo.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(model_path, **options)
    raise ValueError(f"unknown rollout engine {name!r}; expected one of {list(ENGINES)}")
