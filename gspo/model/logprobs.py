"""Log-probabilities of tokens under a causal LM: the one computation the trainers, the
rollout checks and the benchmarks share (the losses in gspo.core.objectives take its results).

`token_logprobs` from logits; `chunked_token_logprobs` from the final hidden states through the
LM head, a chunk of positions at a time (never the whole (B, T, V) logits, forward or backward);
`sequence_logprobs` a padded batch's per-target log-probs (and entropy) under a model, plain or
chunked; `head_logprobs` the chunked path as a forward of the model (gspo.infra.distributed
registers it on the root FSDP module); `causal_only` the padding mask a right-padded batch does
without.
"""

from __future__ import annotations

import torch


def token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of `tokens` under softmax(logits / temperature), and the distribution's entropy.

    logits: (B, T, V) predicting tokens: (B, T). Returns (logp, entropy), both (B, T).
    """
    logits = logits.float() / temperature
    logz = torch.logsumexp(logits, dim=-1)  # (B, T)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - logz
    probs = torch.softmax(logits, dim=-1)
    entropy = logz - (probs * logits).sum(dim=-1)
    return logp, entropy


def chunked_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    *,
    chunk: int,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """token_logprobs of the logits `hidden @ weight.T + bias`, `chunk` positions at a time.

    hidden: (B, T, H) final hidden states, weight: (V, H) the LM head, tokens: (B, T). Returns
    (logp, entropy), both (B, T), equal to the plain computation up to float rounding. Each chunk's
    (chunk, V) logits are recomputed in the backward pass (activation checkpointing) instead of
    being kept, so at most one chunk's full-vocabulary logits and softmax are alive at any time,
    forward or backward: at a 152K vocabulary that is what separates ~0.6 GB per 1K positions
    from ~5 GB per 8K. Gradients flow to `hidden`, `weight` and `bias` as in the plain path.
    """
    from torch.utils.checkpoint import checkpoint

    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    B, T, H = hidden.shape
    h = hidden.reshape(B * T, H)  # (N, H)
    t = tokens.reshape(B * T)  # (N,)
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    lps, ents = [], []
    for i in range(0, B * T, chunk):
        args = (h[i : i + chunk], weight, bias, t[i : i + chunk], temperature)
        lp, ent = (
            checkpoint(_chunk_logprobs, *args, use_reentrant=False)
            if grad
            else _chunk_logprobs(*args)
        )
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps).view(B, T), torch.cat(ents).view(B, T)


def _chunk_logprobs(h, weight, bias, t, temperature: float):
    logits = torch.nn.functional.linear(h, weight, bias)  # (n, V)
    lp, ent = token_logprobs(logits[None], t[None], temperature)  # (1, n) each
    return lp[0], ent[0]


def causal_only(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """None for a right-padded (B, L) mask, else the mask. Under a causal mask a real token
    never sees the padding after it, so its log-prob is the same bit for bit without the
    padding mask (checked in tests/test_trainer.py), and attention takes its causal kernel: a
    tenth off a tiny model's forward and backward. Padded positions' outputs then differ, and
    nothing reads them (target_mask)."""
    right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    return None if right_padded else attention_mask


def head_logprobs(model, input_ids, attention_mask, temperature: float, chunk: int):
    """(log-probs, entropy), each (B, L-1): the decoder's hidden states through the LM head,
    `chunk` positions at a time (chunked_token_logprobs)."""
    hidden = model.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False
    ).last_hidden_state[:, :-1]  # (B, L-1, H)
    head = model.get_output_embeddings()
    return chunked_token_logprobs(
        hidden, head.weight, input_ids[:, 1:], temperature, chunk=chunk, bias=head.bias
    )


def sequence_logprobs(
    model, batch: dict, temperature: float = 1.0, *, with_entropy: bool = False, chunk: int = 0
):
    """Per-target log-probs (B, L-1) under softmax(logits / temperature), optionally entropy.

    chunk > 0: from the decoder's hidden states through the LM head, `chunk` positions at a
    time (chunked_token_logprobs), never holding the whole (B, L-1, V) logits.
    """
    from torch.distributed.fsdp import FSDPModule

    att = causal_only(batch["attention_mask"])
    if chunk:
        # Sharded, this must run as a forward of the root FSDP module (gspo.infra.distributed.shard
        # registers it): called beside the model's forward, the embeddings, final norm and head
        # would stay sharded and their gradients never reduced.
        run = (
            model.head_logprobs
            if isinstance(model, FSDPModule)
            else (lambda *a: head_logprobs(model, *a))
        )
        logp, ent = run(batch["input_ids"], att, temperature, chunk)
        return (logp, ent) if with_entropy else logp
    out = model(input_ids=batch["input_ids"], attention_mask=att, use_cache=False)
    logits = out.logits[:, :-1]  # (B, L-1, V)
    logp, ent = token_logprobs(logits, batch["input_ids"][:, 1:], temperature)
    return (logp, ent) if with_entropy else logp
