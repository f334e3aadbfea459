"""GRPO, GSPO and GSPO-token as pure tensor functions.

Shapes: B sequences (prompt-major groups: the G samples of a prompt are adjacent), T response
positions. `mask` is 1.0 on real response tokens, 0.0 on padding.

    GRPO        w_it = exp(logp_it - old_it)                         clipped per token
    GSPO        s_i  = exp(mean_t(logp_it - old_it))                 clipped per sequence
    GSPO-token  s_it = sg[s_i] * exp(logp_it - sg[logp_it])          value s_i, gradient per token

The objective per term is min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A); the loss is its
negation aggregated over tokens and sequences (see `policy_loss`'s `agg`).
"""

from __future__ import annotations

import torch

LEVELS = ("token", "sequence", "sequence_token")
AGGS = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum")

# The paper's clip ranges (GSPO: Zheng et al. 2025, section 5.1; GRPO: its tuned baseline).
DEFAULT_EPS = {"sequence": (3e-4, 4e-4), "sequence_token": (3e-4, 4e-4), "token": (0.2, 0.27)}

# exp() of a log ratio above ~88 overflows float32. Clamping the (token or sequence) log ratio to
# +-20 keeps every ratio below e^20 ~ 4.9e8, finite in fp32 and bf16, while any ratio that large is
# far outside every clip band anyway. Outside the clamp the ratio's gradient is zero.
DEFAULT_LOG_RATIO_CLAMP = 20.0


def group_advantages(rewards: torch.Tensor, group_size: int, *, scale: str = "std",
                     eps: float = 1e-6) -> torch.Tensor:
    """(r - group mean) / (group std + eps), per group of `group_size` adjacent rewards.

    rewards: (B,) with B = num_groups * group_size. `scale="std"` uses the unbiased std (as verl);
    `scale="none"` only centres. A group whose rewards are all equal gets advantage 0.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be (B,) with B a multiple of group_size={group_size}, "
                         f"got shape {tuple(rewards.shape)}")
    r = rewards.float().view(-1, group_size)              # (num_groups, G)
    centred = r - r.mean(dim=1, keepdim=True)
    if scale == "none":
        return centred.view(-1)
    if scale != "std":
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    if group_size < 2:
        raise ValueError("scale='std' needs group_size >= 2 (the std of one sample is undefined)")
    std = r.std(dim=1, keepdim=True)                       # unbiased
    # An all-equal group is exactly 0 (not 0/eps noise), whatever eps is.
    return torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred)).view(-1)


def zero_variance_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Fraction of groups whose rewards are all equal (they carry no learning signal)."""
    r = rewards.float().view(-1, group_size)
    return (r.max(dim=1).values == r.min(dim=1).values).float().mean().item()


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, *, level: str, eps_low: float, eps_high: float,
                agg: str = "seq-mean-token-mean",
                log_ratio_clamp: float = DEFAULT_LOG_RATIO_CLAMP,
                ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0
                ) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped policy-gradient loss for GRPO (`level="token"`), GSPO (`"sequence"`) or GSPO-token.

    logp, old_logp, mask: (B, T); advantages: (B,) per sequence or (B, T) per token (GSPO-token and
    GRPO accept both; GSPO needs (B,)). Gradient flows through `logp` only.

    agg: "seq-mean-token-mean" (mean over each sequence's tokens, then over sequences: the paper's
    form, no length weighting), "token-mean" (mean over all tokens of the batch: weights sequences
    by length) or "seq-mean-token-sum" (sum over tokens, mean over sequences).

    Returns (loss, metrics). Metrics: clip_frac_tokens (share of response tokens whose term is
    clipped; at sequence level a token counts when its sequence is), clip_frac_seqs (sequences with
    a clipped term), ratio_mean/min/max (token ratios for GRPO, s_i otherwise), approx_kl (k3
    estimate of KL(pi_old || pi_theta) per token), and kl_ref when a reference is given. A term is
    clipped when the clipped branch is the one min() selects and differs from the unclipped one.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if agg not in AGGS:
        raise ValueError(f"agg must be one of {AGGS}, got {agg!r}")
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(f"logp, old_logp and mask must share a (B, T) shape, got "
                         f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}")
    B, T = logp.shape
    valid = mask > 0                                               # (B, T)
    m = valid.to(logp.dtype)
    lengths = m.sum(dim=1).clamp(min=1)                            # (B,)
    # where() rather than multiply: whatever sits in padding (even inf/nan) never leaks in.
    log_ratio = torch.where(valid, logp - old_logp, torch.zeros_like(logp))   # (B, T)
    c = log_ratio_clamp

    if advantages.dim() == 2 and level == "sequence":
        raise ValueError("level='sequence' needs per-sequence advantages of shape (B,)")
    adv = (advantages[:, None].expand(B, T) if advantages.dim() == 1       # (B, T)
           else advantages).to(logp.dtype)

    ratio, seq_log_ratio = _ratio(logp, log_ratio, valid, lengths, level, c)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    objective = torch.minimum(unclipped, clipped)
    per_token = -objective                                         # (B, T)

    kl_ref = None
    if ref_logp is not None and kl_coef != 0.0:
        d = torch.where(valid, ref_logp - logp, torch.zeros_like(logp)).clamp(-c, c)
        kl_ref = torch.exp(d) - d - 1.0                            # (B, T), k3, >= 0
        per_token = per_token + kl_coef * kl_ref
    per_token = torch.where(valid, per_token, torch.zeros_like(per_token))

    loss = _aggregate(per_token, m, lengths, agg)
    with torch.no_grad():
        ratios = ratio.detach()[valid] if level == "token" else \
            torch.exp(seq_log_ratio.detach())[valid.any(dim=1)]
        metrics = _loss_metrics((clipped < unclipped) & valid, m, log_ratio, ratios, c, kl_ref)
    return loss, metrics


def _aggregate(per_token, m, lengths, agg: str) -> torch.Tensor:
    """per_token (B, T), zero on padding -> the scalar loss (see policy_loss's `agg`)."""
    if agg == "seq-mean-token-mean":
        return (per_token.sum(dim=1) / lengths).mean()
    if agg == "token-mean":
        return per_token.sum() / m.sum().clamp(min=1)
    return per_token.sum(dim=1).mean()


def _ratio(logp, log_ratio, valid, lengths, level: str, c: float):
    """The importance ratio per token, (B, T), and the sequence log-ratio, (B,) (None at token
    level). GSPO: s_i = exp(mean_t log ratio) on every token of sequence i; GSPO-token: the same
    value, with the gradient of each token's own log-prob (a stop-gradient on s_i)."""
    B, T = logp.shape
    if level == "token":
        return torch.exp(log_ratio.clamp(-c, c)), None              # (B, T)
    seq_log_ratio = (log_ratio.sum(dim=1) / lengths).clamp(-c, c)   # (B,)
    if level == "sequence":
        return torch.exp(seq_log_ratio)[:, None].expand(B, T), seq_log_ratio   # s_i per token
    tok = torch.where(valid, logp - logp.detach(), torch.zeros_like(logp))
    return torch.exp(seq_log_ratio.detach()[:, None] + tok), seq_log_ratio     # value s_i


def _loss_metrics(is_clipped, m, log_ratio, ratios, c: float, kl_ref) -> dict[str, float]:
    """The policy_loss metrics (see its docstring); is_clipped: (B, T) bool over valid tokens,
    ratios: the token ratios (GRPO) or s_i of the non-empty sequences."""
    lr = log_ratio.detach().clamp(-c, c)
    approx_kl = _masked_mean(torch.exp(lr) - 1.0 - lr, m)
    r = ratios if ratios.numel() else torch.ones(1)
    metrics = {
        "clip_frac_tokens": _masked_mean(is_clipped.to(m.dtype), m).item(),
        "clip_frac_seqs": is_clipped.any(dim=1).float().mean().item(),
        "ratio_mean": r.mean().item(),
        "ratio_min": r.min().item(),
        "ratio_max": r.max().item(),
        "approx_kl": approx_kl.item(),
    }
    if kl_ref is not None:
        metrics["kl_ref"] = _masked_mean(kl_ref.detach(), m).item()
    return metrics


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of `tokens` under softmax(logits / temperature), and the distribution's entropy.

    logits: (B, T, V) predicting tokens: (B, T). Returns (logp, entropy), both (B, T).
    """
    logits = logits.float() / temperature
    logz = torch.logsumexp(logits, dim=-1)                          # (B, T)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - logz
    probs = torch.softmax(logits, dim=-1)
    entropy = logz - (probs * logits).sum(dim=-1)
    return logp, entropy


def chunked_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor,
                           temperature: float = 1.0, *, chunk: int,
                           bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
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
    h = hidden.reshape(B * T, H)                                    # (N, H)
    t = tokens.reshape(B * T)                                       # (N,)
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    lps, ents = [], []
    for i in range(0, B * T, chunk):
        args = (h[i:i + chunk], weight, bias, t[i:i + chunk], temperature)
        lp, ent = (checkpoint(_chunk_logprobs, *args, use_reentrant=False) if grad
                   else _chunk_logprobs(*args))
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps).view(B, T), torch.cat(ents).view(B, T)


def _chunk_logprobs(h, weight, bias, t, temperature: float):
    logits = torch.nn.functional.linear(h, weight, bias)            # (n, V)
    lp, ent = token_logprobs(logits[None], t[None], temperature)     # (1, n) each
    return lp[0], ent[0]
