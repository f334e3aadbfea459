"""The RL objectives as pure tensor functions, registered by name in OBJECTIVES: the config's
`algorithm` picks one, and its paper's clip range, aggregation and advantage scaling are the
defaults (and the names TRL and verl give it, if any). Adding an objective: write its surrogate
below and register it; the config, the trainer, the engines' maps, the report and the tests
reach it by name (docs/EXTENDING.md walks through one).

Shapes: B sequences (prompt-major groups: the G samples of a prompt are adjacent), T response
positions. `mask` is 1.0 on real response tokens, 0.0 on padding. w_it = exp(logp_it - old_it).

    GRPO        min(w_it A, clip(w_it, 1 - lo, 1 + hi) A)               clipped per token
    GSPO        the same with s_i = exp(mean_t log w_it)                 clipped per sequence
    GSPO-token  s_it = sg[s_i] * exp(logp_it - sg[logp_it])             value s_i, gradient per token
    DAPO        GRPO's clip with the higher upper bound 0.28, token-mean aggregation
    Dr. GRPO    GRPO's clip, advantages only centred, token sums over a constant length
    CISPO       sg[clip(w_it, 1 - lo, 1 + hi)] A logp_it: the clip scales the gradient, never zeroes it
    GMPO        A exp(mean_t clip(log w_it, -lo, hi)): the geometric mean of the token ratios,
                clipped in log space (on the side the advantage's sign makes pessimistic)
    SAPO        f(w_it) A, f(w) = 4 / tau sigmoid(tau (w - 1)): a smooth gate in place of the clip
    LUSPO       GSPO's with each sequence's token terms summed (agg seq-mean-token-sum)
    VESPO, DPPO-TV, DPPO-KL, Clip-Cov, KL-Cov: the objectives built for off-policy training, in
                gspo.core.offpolicy, with OPSM, a mask over any objective (policy_loss's
                opsm_threshold)

The loss is the objective's negation, aggregated over tokens and sequences (`policy_loss`'s
`agg`). Conformance with TRL's and verl's own code: docs/OBJECTIVES.md.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from gspo.core import offpolicy

AGGS = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

# exp() of a log ratio above ~88 overflows float32. Clamping the (token or sequence) log ratio to
# +-20 keeps every ratio below e^20 ~ 4.9e8, finite in fp32 and bf16, while any ratio that large is
# far outside every clip band anyway. Outside the clamp the ratio's gradient is zero.
DEFAULT_LOG_RATIO_CLAMP = 20.0


@dataclasses.dataclass(frozen=True)
class Hyper:
    """What a surrogate may read: the clip range and the log-ratio clamp; SAPO's temperatures
    for positive and negative advantages; the off-policy objectives' parameters."""

    eps_low: float
    eps_high: float
    clamp: float = DEFAULT_LOG_RATIO_CLAMP
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    off: offpolicy.Params = offpolicy.DEFAULTS


def group_advantages(
    rewards: torch.Tensor, group_size: int, *, scale: str = "std", eps: float = 1e-6
) -> torch.Tensor:
    """(r - group mean) / (group std + eps), per group of `group_size` adjacent rewards.

    rewards: (B,) with B = num_groups * group_size. `scale="std"` uses the unbiased std (as verl);
    `scale="none"` only centres. A group whose rewards are all equal gets advantage 0.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be (B,) with B a multiple of group_size={group_size}, "
            f"got shape {tuple(rewards.shape)}"
        )
    r = rewards.float().view(-1, group_size)  # (num_groups, G)
    centred = r - r.mean(dim=1, keepdim=True)
    if scale == "none":
        return centred.view(-1)
    if scale != "std":
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    if group_size < 2:
        raise ValueError("scale='std' needs group_size >= 2 (the std of one sample is undefined)")
    std = r.std(dim=1, keepdim=True)  # unbiased
    # An all-equal group is exactly 0 (not 0/eps noise), whatever eps is.
    return torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred)).view(-1)


def zero_variance_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Fraction of groups whose rewards are all equal (they carry no learning signal)."""
    r = rewards.float().view(-1, group_size)
    return (r.max(dim=1).values == r.min(dim=1).values).float().mean().item()


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


# -- the surrogates ----------------------------------------------------------------------------
# Each takes the token log ratios (B, T) (zero on padding), logp (B, T), the advantages (B, T),
# valid (B, T) bool, lengths (B,) and Hyper, and returns (objective (B, T) to maximise, clipped
# (B, T) bool: where the clip acted on the term, the ratios for the metrics: per token, or per
# non-empty sequence; optionally a fourth, {metric: value} of its own).


def _clip(ratio, adv, valid, hp: Hyper):
    """PPO's pessimistic clip; a term is clipped where the clipped branch is the one min()
    selects and differs from the unclipped one."""
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - hp.eps_low, 1.0 + hp.eps_high) * adv
    return torch.minimum(unclipped, clipped), (clipped < unclipped) & valid


def token_clip(log_ratio, logp, adv, valid, lengths, hp: Hyper):
    """GRPO (Shao et al. 2024), DAPO, Dr. GRPO: the token ratio w_it, clipped per token."""
    ratio = torch.exp(log_ratio.clamp(-hp.clamp, hp.clamp))  # (B, T)
    obj, clipped = _clip(ratio, adv, valid, hp)
    return obj, clipped, ratio.detach()[valid]


def _sequence_log_ratio(log_ratio, lengths, hp: Hyper) -> torch.Tensor:
    return (log_ratio.sum(dim=1) / lengths).clamp(-hp.clamp, hp.clamp)  # (B,)


def sequence_clip(log_ratio, logp, adv, valid, lengths, hp: Hyper):
    """GSPO (Zheng et al. 2025, eq. 5): s_i = exp(mean_t log w_it), clipped per sequence."""
    B, T = log_ratio.shape
    seq = _sequence_log_ratio(log_ratio, lengths, hp)
    obj, clipped = _clip(torch.exp(seq)[:, None].expand(B, T), adv, valid, hp)
    return obj, clipped, torch.exp(seq.detach())[valid.any(dim=1)]


def sequence_token_clip(log_ratio, logp, adv, valid, lengths, hp: Hyper):
    """GSPO-token (Zheng et al. 2025, eq. 13): the value s_i with each token's own gradient
    (a stop-gradient on s_i), so advantages may differ per token."""
    seq = _sequence_log_ratio(log_ratio, lengths, hp)
    tok = torch.where(valid, logp - logp.detach(), torch.zeros_like(logp))
    obj, clipped = _clip(torch.exp(seq.detach()[:, None] + tok), adv, valid, hp)
    return obj, clipped, torch.exp(seq.detach())[valid.any(dim=1)]


def cispo(log_ratio, logp, adv, valid, lengths, hp: Hyper):
    """CISPO (MiniMax-M1, arXiv 2506.13585, eq. 4): sg[clip(w_it, 1 - lo, 1 + hi)] A logp_it.
    The clipped weight only scales each token's gradient: no token drops out of the update, as
    the ones PPO's clip zeroes do. Clipped: where the weight differs from the ratio."""
    ratio = torch.exp(log_ratio.clamp(-hp.clamp, hp.clamp))  # (B, T)
    weight = ratio.clamp(1.0 - hp.eps_low, 1.0 + hp.eps_high).detach()
    return weight * adv * logp, (weight != ratio.detach()) & valid, ratio.detach()[valid]


def gmpo(log_ratio, logp, adv, valid, lengths, hp: Hyper):
    """GMPO (Zhao et al. 2025, arXiv 2507.20673, eq. 6): A_i exp(mean_t sgn(A) min(sgn(A) log
    w_it, sgn(A) clip(log w_it, -lo, hi))): the geometric mean of the token ratios, each clipped
    in log space where the clip is pessimistic, on every token of sequence i. Per-token
    advantages are averaged over the sequence first."""
    B, T = log_ratio.shape
    sgn = torch.sign(adv)
    bounded = log_ratio.clamp(-hp.eps_low, hp.eps_high)
    pessimistic = sgn * torch.minimum(sgn * log_ratio, sgn * bounded)  # (B, T)
    rho = torch.exp(_sequence_log_ratio(torch.where(valid, pessimistic, 0.0), lengths, hp))
    a = torch.where(valid, adv, 0.0).sum(dim=1) / lengths  # (B,)
    clipped = (sgn * bounded < sgn * log_ratio) & valid
    return (a * rho)[:, None].expand(B, T), clipped, rho.detach()[valid.any(dim=1)]


def sapo(log_ratio, logp, adv, valid, lengths, hp: Hyper):
    """SAPO (Gao et al. 2025, arXiv 2511.20347): f(w_it) A with the gate f(w) = 4 / tau
    sigmoid(tau (w - 1)), tau_pos for A > 0, tau_neg otherwise: the gradient 4 s (1 - s) fades
    smoothly off-policy (1 at w = 1) instead of dropping to 0 at a clip edge. Nothing is
    clipped."""
    ratio = torch.exp(log_ratio.clamp(-hp.clamp, hp.clamp))  # (B, T)
    tau = torch.where(
        adv > 0,
        torch.tensor(hp.tau_pos, dtype=ratio.dtype),
        torch.tensor(hp.tau_neg, dtype=ratio.dtype),
    )  # (B, T)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
    return gate * adv, torch.zeros_like(valid), ratio.detach()[valid]


@dataclasses.dataclass(frozen=True)
class Objective:
    """One objective: its surrogate and its paper's defaults (the config's when unset)."""

    surrogate: Callable
    eps: tuple[float, float]  # (eps_low, eps_high); GMPO's in log space
    agg: str = "seq-mean-token-mean"
    adv_scale: str = "std"
    clipped: bool = True  # False: eps_low / eps_high do not apply (SAPO, VESPO, KL-Cov)
    per_token_adv: bool = True  # False: the surrogate needs one advantage per sequence
    mask_truncated: bool = False  # DAPO's overlong filtering: no loss on truncated responses
    overlong_fraction: float = 0.0  # DAPO's soft overlong punishment over this share of the
    # longest response (its paper: 4096 of 20480)
    dynamic_sampling: bool = False  # DAPO's: only groups whose rewards differ (gspo.native.shaping)
    # The engines' names for it ("": that engine has none, and refuses it):
    trl: str = ""  # TRL 1.16: "token" / "sequence" (its importance_sampling_level, the
    # loss_type from `agg`) or a loss_type of its own ("cispo", "sapo", "vespo"; "luspo" at its
    # sequence level)
    verl: str = ""  # verl 0.9.1: its actor.policy_loss.loss_mode


OBJECTIVES: dict[str, Objective] = {
    # GRPO's clip range as the GSPO paper's tuned baseline (section 5.1)
    "grpo": Objective(token_clip, (0.2, 0.27), trl="token", verl="vanilla"),
    "gspo": Objective(
        sequence_clip, (3e-4, 4e-4), per_token_adv=False, trl="sequence", verl="gspo"
    ),
    # verl's gspo is written as GSPO-token (equal to GSPO with one advantage per sequence)
    "gspo_token": Objective(sequence_token_clip, (3e-4, 4e-4), verl="gspo"),
    # DAPO (Yu et al. 2025, arXiv 2503.14476, section 3.1 clip-higher, 3.3 token-level loss)
    "dapo": Objective(
        token_clip,
        (0.2, 0.28),
        agg="token-mean",
        mask_truncated=True,
        overlong_fraction=0.2,
        dynamic_sampling=True,
        trl="token",
        verl="vanilla",
    ),
    # Dr. GRPO (Liu et al. 2025, arXiv 2503.20783, section 3.1): no std scaling, no per-sequence
    # length normalisation (a constant, the longest response, in its place)
    "dr_grpo": Objective(
        token_clip,
        (0.2, 0.2),
        agg="seq-mean-token-sum-norm",
        adv_scale="none",
        trl="token",
        verl="vanilla",
    ),
    # CISPO: no lower bound; the upper one ScaleRL's (arXiv 2510.13786) eps_max = 5, i.e. 1 + 4
    "cispo": Objective(cispo, (1.0, 4.0), agg="token-mean", trl="cispo", verl="cispo"),
    # GMPO: clip range (e^-0.4, e^0.4) on the token ratio (section 4)
    "gmpo": Objective(gmpo, (0.4, 0.4), verl="geo_mean"),
    "sapo": Objective(sapo, (0.0, 0.0), clipped=False, trl="sapo", verl="sapo"),
    # LUSPO (arXiv 2602.05261): GSPO's clip range (it changes the aggregation only); verl's gspo
    # with loss_agg_mode seq-mean-token-sum is the same loss
    "luspo": Objective(
        sequence_clip,
        (3e-4, 4e-4),
        agg="seq-mean-token-sum",
        per_token_adv=False,
        trl="luspo",
        verl="gspo",
    ),
    # VESPO (arXiv 2602.10693): TRL's aggregation, a token mean over the batch
    "vespo": Objective(offpolicy.vespo, (0.0, 0.0), agg="token-mean", clipped=False, trl="vespo"),
    # DPPO (arXiv 2602.04879): eps_low / eps_high are the divergence thresholds, verl's DPPO
    # recipe's (TV 0.15, binary KL 0.05)
    "dppo_tv": Objective(offpolicy.dppo_tv, (0.15, 0.15), verl="dppo_tv"),
    "dppo_kl": Objective(offpolicy.dppo_kl, (0.05, 0.05), verl="dppo_kl"),
    # Clip-Cov: verl's default PPO clip (clip_ratio 0.2); KL-Cov has no clip
    "clip_cov": Objective(offpolicy.clip_cov, (0.2, 0.2), verl="clip_cov"),
    "kl_cov": Objective(offpolicy.kl_cov, (0.0, 0.0), clipped=False, verl="kl_cov"),
}
DEFAULT_EPS = {name: o.eps for name, o in OBJECTIVES.items()}


CORRECTIONS = (
    "none",
    "token_truncate",
    "token_mask",
    "sequence_truncate",
    "sequence_mask",
    "icepop",
)
# IcePop's band [a, b] of the token weight (Ring-1T, arXiv 2510.18855: a = 0.5, b = 5)
ICEPOP_BAND = (0.5, 5.0)


def rollout_correction(
    old_logp: torch.Tensor,
    engine_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    c_min: float = 0.0,
    c_max: float = 3.0,
) -> torch.Tensor:
    """Rollout correction: the importance weight pi_old / pi_engine of each token, (B, T), no
    gradient, that multiplies each token's loss, since the engine that sampled computes the
    policy a little differently from the trainer (Yao et al. 2025, "Your efficient RL framework
    secretly brings you off-policy RL training"; TRL's vllm_importance_sampling_*, verl's
    rollout_correction). Per token, or per sequence (the product of its token weights, on every
    token); truncated to [c_min, c_max] (TIS), or set to 0 outside it (MIS). "icepop" is MIS per
    token (IcePop, arXiv 2510.18855: a token whose weight leaves [a, b] drops out of the
    update, the others keep their weight), its band ICEPOP_BAND unless given."""
    if mode not in CORRECTIONS[1:]:
        raise ValueError(f"mode must be one of {CORRECTIONS[1:]}, got {mode!r}")
    valid = mask > 0
    diff = torch.where(valid, old_logp - engine_logp, torch.zeros_like(old_logp))  # (B, T)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=1, keepdim=True).expand_as(diff)
    w = torch.exp(diff)
    w = (
        w.clamp(min=c_min, max=c_max)
        if mode.endswith("truncate")
        else w.masked_fill((w < c_min) | (w > c_max), 0.0)
    )
    return torch.where(valid, w, torch.zeros_like(w)).detach()


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), (B,): 0 up to max_len - buffer
    tokens, then falling linearly to -1 at max_len, added to the task reward."""
    return ((max_len - buffer - lengths.double()) / buffer).clamp(-1.0, 0.0)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    objective: str,
    eps_low: float = 0.0,
    eps_high: float = 0.0,
    agg: str = "seq-mean-token-mean",
    log_ratio_clamp: float = DEFAULT_LOG_RATIO_CLAMP,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    norm_len: int = 0,
    is_weights: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    params: offpolicy.Params = offpolicy.DEFAULTS,
    opsm_threshold: float | None = None,
    sampling_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of `objective` (a name in OBJECTIVES) on one batch.

    logp, old_logp, mask: (B, T); advantages: (B,) per sequence or (B, T) per token (not for
    GSPO). Gradient flows through `logp` only. is_weights: (B, T) rollout_correction's weights,
    multiplying each token's loss (the KL penalty's term excepted). params: the off-policy
    objectives' (gspo.core.offpolicy). opsm_threshold: off-policy sequence masking over any
    objective (offpolicy.opsm_keep; None: off), its drift against `sampling_logp` (B, T), the
    sampling policy's log-probs (None: old_logp), on each token's loss as is_weights.

    agg: "seq-mean-token-mean" (mean over each sequence's tokens, then over sequences: no length
    weighting), "token-mean" (mean over all tokens of the batch: weights sequences by length),
    "seq-mean-token-sum" (sum over tokens, mean over sequences) or "seq-mean-token-sum-norm"
    (that divided by the constant `norm_len`: Dr. GRPO).

    Returns (loss, metrics). Metrics: clip_frac_tokens (share of response tokens whose term the
    clip acted on; where the ratio is per sequence a token counts when its sequence does),
    clip_frac_seqs (sequences with such a term), ratio_mean/min/max (token ratios, or s_i /
    GMPO's rho_i per sequence), approx_kl (k3 estimate of KL(pi_old || pi_theta) per token),
    kl_ref when a reference is given, opsm_masked_seqs (the share of sequences OPSM dropped)
    when it is on, and what the surrogate adds of its own."""
    _check(logp, old_logp, mask, objective, agg, norm_len)
    obj = OBJECTIVES[objective]
    if advantages.dim() == 2 and not obj.per_token_adv:
        raise ValueError(f"{objective} needs per-sequence advantages of shape (B,)")
    B, T = logp.shape
    valid = mask > 0  # (B, T)
    m = valid.to(logp.dtype)
    lengths = m.sum(dim=1).clamp(min=1)  # (B,)
    # where() rather than multiply: whatever sits in padding (even inf/nan) never leaks in.
    log_ratio = torch.where(valid, logp - old_logp, torch.zeros_like(logp))  # (B, T)
    adv = (
        advantages[:, None].expand(B, T)
        if advantages.dim() == 1  # (B, T)
        else advantages
    ).to(logp.dtype)
    hp = Hyper(eps_low, eps_high, log_ratio_clamp, tau_pos, tau_neg, params)
    objective_t, is_clipped, ratios, *own = obj.surrogate(
        log_ratio, torch.where(valid, logp, 0.0), adv, valid, lengths, hp
    )
    per_token = -objective_t
    if opsm_threshold is not None:
        src = old_logp if sampling_logp is None else sampling_logp
        keep = offpolicy.opsm_keep(adv, logp, src, valid, opsm_threshold)  # (B, T)
        per_token = per_token * keep
        own = [{**(own[0] if own else {}), "opsm_masked_seqs": _share(keep == 0, valid, "seqs")}]
    if is_weights is not None:
        per_token = per_token * is_weights

    kl_ref = None
    if ref_logp is not None and kl_coef != 0.0:
        d = torch.where(valid, ref_logp - logp, torch.zeros_like(logp)).clamp(-hp.clamp, hp.clamp)
        kl_ref = torch.exp(d) - d - 1.0  # (B, T), k3, >= 0
        per_token = per_token + kl_coef * kl_ref
    per_token = torch.where(valid, per_token, torch.zeros_like(per_token))

    loss = _aggregate(per_token, m, lengths, agg, norm_len)
    with torch.no_grad():
        metrics = _loss_metrics(is_clipped, m, log_ratio, ratios, hp.clamp, kl_ref)
    return loss, {**metrics, **(own[0] if own else {})}


def _share(dropped: torch.Tensor, valid: torch.Tensor, of: str) -> float:
    """offpolicy.masked_share's share of `of` (tokens or seqs), without gradient."""
    with torch.no_grad():
        return offpolicy.masked_share(dropped, valid)[of]


def sample_stats(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    objective: str,
    eps_low: float = 0.0,
    eps_high: float = 0.0,
    log_ratio_clamp: float = DEFAULT_LOG_RATIO_CLAMP,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    params: offpolicy.Params = offpolicy.DEFAULTS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What `objective`'s surrogate makes of each sequence, for reading samples (no gradient):
    its sequence ratio s_i = exp(mean_t log w_it) (B,), and the share of its tokens whose term
    the clip acted on (B,). logp, old_logp, mask: (B, T); advantages (B,) or (B, T)."""
    with torch.no_grad():
        B, T = logp.shape
        valid = mask > 0  # (B, T)
        lengths = valid.to(logp.dtype).sum(dim=1).clamp(min=1)  # (B,)
        log_ratio = torch.where(valid, logp - old_logp, torch.zeros_like(logp))
        adv = (advantages[:, None].expand(B, T) if advantages.dim() == 1 else advantages).to(
            logp.dtype
        )  # (B, T)
        hp = Hyper(eps_low, eps_high, log_ratio_clamp, tau_pos, tau_neg, params)
        _, clipped, *_ = OBJECTIVES[objective].surrogate(
            log_ratio, torch.where(valid, logp, 0.0), adv, valid, lengths, hp
        )
        ratio = torch.exp(_sequence_log_ratio(log_ratio, lengths, hp))  # (B,)
        return ratio, clipped.to(logp.dtype).sum(dim=1) / lengths


def _check(logp, old_logp, mask, objective: str, agg: str, norm_len: int) -> None:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    if agg not in AGGS:
        raise ValueError(f"agg must be one of {AGGS}, got {agg!r}")
    if agg == "seq-mean-token-sum-norm" and norm_len < 1:
        raise ValueError("agg 'seq-mean-token-sum-norm' needs norm_len >= 1 (the constant length)")
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp, old_logp and mask must share a (B, T) shape, got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )


def _aggregate(per_token, m, lengths, agg: str, norm_len: int = 0) -> torch.Tensor:
    """per_token (B, T), zero on padding -> the scalar loss (see policy_loss's `agg`)."""
    if agg == "seq-mean-token-mean":
        return (per_token.sum(dim=1) / lengths).mean()
    if agg == "token-mean":
        return per_token.sum() / m.sum().clamp(min=1)
    if agg == "seq-mean-token-sum-norm":
        return per_token.sum(dim=1).mean() / norm_len
    return per_token.sum(dim=1).mean()


# How policy_loss's metrics combine over micro-batches and ranks: the token means weigh each
# micro-batch by its share of the minibatch's response tokens, the sequence shares by its share
# of the sequences, whatever the loss's aggregation, so a metric is the minibatch's own and not
# a function of how it was split (ranks, micro-batch sizes). The rest (ratio_mean) weigh as the
# loss does; ratio_min / ratio_max are extremes.
TOKEN_MEAN_METRICS = frozenset(
    {"clip_frac_tokens", "approx_kl", "kl_ref", "clip_cov_selected", "kl_cov_selected"}
)
SEQUENCE_MEAN_METRICS = frozenset({"clip_frac_seqs", "opsm_masked_seqs"})


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
