"""The objectives and the mask the field built for off-policy and asynchronous RL, where rollouts
come from a policy some updates old: pure tensor functions with the surrogate signature of
gspo.core.objectives (which registers them in OBJECTIVES), their parameters in `Params`, each its
source's default (RLConfig's fields of the same names).

    VESPO   sg[phi(W_i)] A logp_it, phi(w) = e^lam w^k e^(-lam w) of the sequence ratio
            W_i = exp(sum_t log w_it) (k, lam by the advantage's sign; phi(1) = 1): a smooth
            weight, largest on-policy, in place of the clip
    DPPO-TV sg[min(w_it, cap)] A logp_it on the tokens inside the trust region, outside it
            nothing: p - p_old (p the sampled token's probability) at most hi for A > 0, at
            least -lo otherwise
    DPPO-KL the same, the region bounded by the binary KL of (p_old, 1 - p_old) to (p, 1 - p)
            where p moves in the advantage's direction
    ClipCov GRPO's clip; of the unclipped tokens whose centred product (A - mean A)(logp -
            mean logp) lies in (lb, ub), a random `clip_cov_ratio` share of the batch's tokens
            drops out of the update (entropy preservation)
    KL-Cov  w A unclipped; on the `kl_cov_ratio` share of tokens with the largest such product,
            a penalty coef |log w|
    OPSM    a mask over any objective: a sequence with A < 0 whose mean log pi_old - log pi_theta
            exceeds a threshold drops out of the update

LUSPO is GSPO's surrogate with each sequence's token terms summed (agg seq-mean-token-sum), so
it is registered with GSPO's surrogate. Shapes as in gspo.core.objectives: B sequences, T
response positions, `valid` (B, T) bool; `hp` is gspo.core.objectives.Hyper (its `off` these
objectives' Params).
"""

from __future__ import annotations

import dataclasses
import math

import torch


@dataclasses.dataclass(frozen=True)
class Params:
    """The parameters of the objectives here, each its source's default."""

    # VESPO (arXiv 2602.10693), TRL 1.16's GRPOConfig defaults: phi's power k and decay lambda,
    # for A >= 0 and A < 0
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    # DPPO (arXiv 2602.04879): the cap of its truncated importance weight; verl's code's own
    # default (its "large threshold", section 5.4), where verl's config passes clip_ratio_c
    dppo_is_cap: float = 20.0
    # Clip-Cov / KL-Cov (arXiv 2505.22617), verl 0.9.1's actor.policy_loss defaults: the share of
    # tokens acted on, Clip-Cov's band of the centred product, KL-Cov's penalty coefficient
    clip_cov_ratio: float = 2e-4
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 2e-4
    kl_cov_coef: float = 0.1
    # Clip-Cov's random choice of tokens (None: torch's global generator, as verl's)
    generator: torch.Generator | None = dataclasses.field(default=None, compare=False)


# RLConfig's fields of the same names
FIELDS = tuple(f.name for f in dataclasses.fields(Params) if f.name != "generator")
# the objectives each parameter belongs to (RLConfig refuses one set for another objective)
_BY_PREFIX = {
    "vespo": ("vespo",),
    "dppo": ("dppo_tv", "dppo_kl"),
    "clip_cov": ("clip_cov",),
    "kl_cov": ("kl_cov",),
}
OWNERS = {f: next(o for p, o in _BY_PREFIX.items() if f.startswith(p)) for f in FIELDS}
DEFAULTS = Params()
# VESPO's floor of the sequence log ratio: log(1e-8), TRL's (its ratio's floor 1e-8)
VESPO_LOG_FLOOR = math.log(1e-8)


def _by_sign(adv: torch.Tensor, pos: float, neg: float) -> torch.Tensor:
    """(B, T): `pos` where A >= 0, `neg` elsewhere, in the advantages' dtype."""
    return torch.where(
        adv >= 0, torch.tensor(pos, dtype=adv.dtype), torch.tensor(neg, dtype=adv.dtype)
    )


def vespo(log_ratio, logp, adv, valid, lengths, hp):
    """VESPO (arXiv 2602.10693; TRL 1.16 loss_type="vespo"): phi(W_i) A logp_it with phi(w) =
    exp(lam + k log w - lam w) of the sequence ratio W_i = exp(sum_t log w_it) (a sum, not
    GSPO's mean), no gradient through phi: the gradient phi A grad logp fades smoothly as W
    leaves 1 on either side. Token log ratios clamped at +-clamp, log W to [log 1e-8, clamp];
    k, lam by the sign of each token's advantage (A >= 0: the _pos pair). Nothing is clipped;
    the ratios for the metrics are W_i."""
    p = hp.off
    tok = torch.where(valid, log_ratio.clamp(-hp.clamp, hp.clamp), 0.0)  # (B, T)
    log_w = tok.sum(dim=1, keepdim=True).clamp(VESPO_LOG_FLOOR, hp.clamp).detach()  # (B, 1)
    k = _by_sign(adv, p.vespo_k_pos, p.vespo_k_neg)  # (B, T)
    lam = _by_sign(adv, p.vespo_lambda_pos, p.vespo_lambda_neg)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(0.0, 0.0, 0.0)  # (B, T)
    return phi * adv * logp, torch.zeros_like(valid), torch.exp(log_w[:, 0])[valid.any(dim=1)]


def opsm_keep(
    adv: torch.Tensor,
    logp: torch.Tensor,
    sampling_logp: torch.Tensor,
    valid: torch.Tensor,
    threshold: float,
) -> torch.Tensor:
    """Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556, eq. 9; TRL 1.16
    off_policy_mask_threshold): 1.0 where a token's loss is kept, 0.0 where its sequence drops
    out, (B, T), no gradient. A sequence drops where its advantage is negative and its mean
    log pi_sampling - log pi_theta over its tokens (the drift from the policy that sampled it)
    exceeds `threshold`. adv (B, T); logp, sampling_logp (B, T). A token the engine could not
    score (NaN) adds no drift."""
    drift = torch.where(valid, sampling_logp - logp.detach(), 0.0).nan_to_num(0.0)  # (B, T)
    mean = drift.sum(dim=1, keepdim=True) / valid.sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1)
    return ((adv >= 0) | (mean <= threshold)).to(logp.dtype)  # (B, T)


def masked_share(dropped: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
    """The share of response tokens, and of non-empty sequences with at least one, where
    `dropped` (B, T) bool holds."""
    d = dropped & valid
    rows = valid.any(dim=1)
    return {
        "tokens": d.sum().item() / max(valid.sum().item(), 1),
        "seqs": d.any(dim=1).sum().item() / max(rows.sum().item(), 1),
    }


def _dppo(log_ratio, logp, adv, valid, hp, inside):
    """DPPO's term sg[min(w, cap)] A logp on the tokens `inside` (B, T) bool its trust region, 0
    elsewhere (no gradient either); clipped: the valid tokens outside it."""
    ratio = torch.exp(log_ratio.clamp(-hp.clamp, hp.clamp))  # (B, T)
    weight = ratio.clamp(max=hp.off.dppo_is_cap).detach()
    kept = inside.detach() & valid
    return torch.where(kept, weight * adv * logp, 0.0), valid & ~kept, ratio.detach()[valid]


def _probs(log_ratio, logp):
    """(p, p_old, log p, log p_old) of the sampled tokens, (B, T) each, no gradient."""
    lp = logp.detach()
    lo = lp - log_ratio.detach()  # log p_old on valid tokens (log_ratio = logp - old there)
    return torch.exp(lp), torch.exp(lo), lp, lo


def dppo_tv(log_ratio, logp, adv, valid, lengths, hp):
    """DPPO-Binary-TV (arXiv 2602.04879; verl 0.9.1 dppo_tv): the trust region is the change of
    the sampled token's probability, p - p_old <= eps_high where A > 0, >= -eps_low elsewhere
    (eps_* the thresholds, not a ratio band), rather than the ratio's: a rare token may rise
    from 1e-5 to 1e-3 (ratio 100), a likely one may not fall from 0.99 to 0.8 (ratio 0.81)."""
    p, p_old, _, _ = _probs(log_ratio, logp)
    inside = torch.where(adv > 0, p - p_old <= hp.eps_high, p - p_old >= -hp.eps_low)
    return _dppo(log_ratio, logp, adv, valid, hp, inside)


def dppo_kl(log_ratio, logp, adv, valid, lengths, hp):
    """DPPO-Binary-KL (arXiv 2602.04879; verl 0.9.1 dppo_kl): the trust region bounds the KL of
    the binary distribution (p_old, 1 - p_old) to (p, 1 - p) by eps_high where A > 0 and p has
    risen, eps_low where A <= 0 and p has fallen; a move against the advantage stays inside.
    1e-8 guards log(1 - p) at p = 1 (verl's guard)."""
    p, p_old, lp, lo = _probs(log_ratio, logp)
    kl = p_old * (lo - lp) + (1 - p_old) * torch.log((1 - p_old + 1e-8) / (1 - p + 1e-8))
    inside = torch.where(
        adv > 0, (kl <= hp.eps_high) | (p <= p_old), (kl <= hp.eps_low) | (p >= p_old)
    )
    return _dppo(log_ratio, logp, adv, valid, hp, inside)


def _centred_product(adv, logp, valid) -> torch.Tensor:
    """(A - mean A)(logp - mean logp), (B, T), the means over the valid tokens, no gradient:
    each token's share of the covariance of log-prob and advantage."""
    m = valid.to(adv.dtype)
    n = m.sum().clamp(min=1)
    a, lp = adv.detach(), logp.detach()
    return (a - (a * m).sum() / n) * (lp - (lp * m).sum() / n)


def clip_cov(log_ratio, logp, adv, valid, lengths, hp):
    """Clip-Cov (Cui et al. 2025, arXiv 2505.22617; verl 0.9.1 clip_cov): GRPO's clipped term,
    but a random max(1, floor(clip_cov_ratio x tokens)) of the tokens the clip left alone whose
    centred product lies in (clip_cov_lb, clip_cov_ub) drop out (value and gradient 0): the
    updates that drive entropy down fastest. Clipped: either. Own metric: clip_cov_selected,
    the share of tokens dropped."""
    p = hp.off
    ratio = torch.exp(log_ratio.clamp(-hp.clamp, hp.clamp))  # (B, T)
    unclipped = ratio * adv
    bounded = ratio.clamp(1.0 - hp.eps_low, 1.0 + hp.eps_high) * adv
    clipped = (bounded < unclipped) & valid
    cov = _centred_product(adv, logp, valid)
    cand = (valid & ~clipped & (cov > p.clip_cov_lb) & (cov < p.clip_cov_ub)).nonzero()  # (K, 2)
    n = max(int(p.clip_cov_ratio * int(valid.sum())), 1)
    if len(cand):
        cand = cand[torch.randperm(len(cand), generator=p.generator)[:n]]
    dropped = torch.zeros_like(valid)
    dropped[cand[:, 0], cand[:, 1]] = True
    obj = torch.where(dropped, 0.0, torch.minimum(unclipped, bounded))
    own = {"clip_cov_selected": masked_share(dropped, valid)["tokens"]}
    return obj, clipped | dropped, ratio.detach()[valid], own


def kl_cov(log_ratio, logp, adv, valid, lengths, hp):
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617; verl 0.9.1 kl_cov): w A with no clip, minus
    kl_cov_coef |log w| on the max(1, floor(kl_cov_ratio x tokens)) tokens with the largest
    centred product. Clipped: the penalised tokens; own metric kl_cov_selected, their share."""
    p = hp.off
    lr = log_ratio.clamp(-hp.clamp, hp.clamp)
    ratio = torch.exp(lr)  # (B, T)
    cov = torch.where(valid, _centred_product(adv, logp, valid), -torch.inf).flatten()
    n = min(max(int(int(valid.sum()) * p.kl_cov_ratio), 1), int(valid.sum()))
    chosen = torch.zeros_like(cov, dtype=torch.bool)
    chosen[torch.topk(cov, n).indices] = True
    chosen = chosen.view_as(valid)
    obj = ratio * adv - torch.where(chosen, p.kl_cov_coef * lr.abs(), 0.0)
    own = {"kl_cov_selected": masked_share(chosen, valid)["tokens"]}
    return obj, chosen, ratio.detach()[valid], own
