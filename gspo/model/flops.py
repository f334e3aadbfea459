"""Compute accounting, in FLOPs, for the compute-versus-score curves.

A forward pass over a sequence of L tokens costs

    F(L) = 2 * N * L  +  2 * n_layers * d_attn * L * (L + 1)

where N counts the parameters a token is multiplied by (every Linear weight, the LM head included,
the embedding lookup excluded; for MoE only the k routed experts: see gspo.model.models.count_params) and
the second term is attention's QK^T and AV products (4 * d_attn * c FLOPs per layer for a token at
context length c, summed over c = 1..L). d_attn = n_heads * head_dim. A backward pass costs twice
a forward, so a training pass costs 3 * F(L) (the familiar 6N per token).

The RL trainer charges, per sampled sequence: one F(L) for generation (the KV cache makes
generation one forward pass over the sequence), one F(L) when old log-probs are recomputed (not
for the sequences of the step's first minibatch on a dense model, whose update forward, taken
before any update, gives their old log-probs: gspo.native.policy_update), and 3 * F(L) per update
epoch. SFT charges 3 * F(L) per trained sequence.
"""

from __future__ import annotations

from gspo.model.models import count_params


class FlopCounter:
    def __init__(self, model):
        cfg = model.config
        self.N = count_params(model)["matmul"]
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.attn = 2 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim

    def forward(self, lengths) -> float:
        """F(L) summed over sequence lengths."""
        return float(sum(2 * self.N * L + self.attn * L * (L + 1) for L in lengths))
