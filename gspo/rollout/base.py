"""What every rollout engine shares (gspo.rollout's docstring says what they do): the completion
they return, the interface they implement and the argument checks. The engines import this, and
gspo.rollout re-exports it beside make_engine, which imports the engines."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Protocol


@dataclasses.dataclass
class Completion:
    token_ids: list[int]  # sampled tokens, including the stop token when one was hit
    logprobs: list[float]  # one per token in token_ids (see module doc)
    finish_reason: str = "length"  # "stop" (hit a stop token) or "length"
    # MoE, when asked (generate(..., return_routing=True)): per MoE layer, the top-k experts the
    # engine's routers picked for every token it fed, (len(prompt) + len(token_ids) - 1, k)
    routing: dict | None = None


class Engine(Protocol):
    def generate(
        self,
        prompts: list[list[int]],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int | list[int],
        stop_token_ids: list[int] | None = None,
        return_routing: bool = False,
    ) -> list[list[Completion]]: ...

    # world: the torchrun world, where ranks share the sync's file per node (vLLM)
    def update_weights(self, state_dict, world=None) -> None: ...

    def close(self) -> None: ...  # release processes and memory (vLLM); idempotent


ENGINES = ("torch", "vllm")

# Samples a problem's seed leaves room for: its j-th sample is problem_seed + j (sample_seeds).
SAMPLE_SLOTS = 1 << 20


def problem_seed(seed: int, problem_id: str) -> int:
    """The seed of a problem's first sample in an evaluation seeded `seed`: a function of the
    seed and the problem's id alone, so a problem's j-th sample (seed + j) is the same draw
    whatever else the evaluation holds (limit, samples, batch, ranks, order): the first k
    samples of an n-sample evaluation are its k-sample evaluation, and a subset of problems is
    that subset's evaluation. SAMPLE_SLOTS apart (40 hash bits above 20 free ones, < 2**63
    as vLLM's and torch's generators take), so no two problems' samples share a stream."""
    h = hashlib.sha256(f"eval:{int(seed)}:{problem_id}".encode()).digest()
    return (int.from_bytes(h[:5], "big")) * SAMPLE_SLOTS


def nothing_to_generate(prompts: list[list[int]], n: int) -> bool:
    """The argument checks every engine shares: True when there is nothing to sample."""
    if not prompts or n < 1:
        return True
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    return False
