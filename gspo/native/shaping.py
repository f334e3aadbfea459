"""What a step does to its rollouts between sampling and the update, beyond the group advantages:
DAPO's dynamic sampling (only groups whose rewards differ), soft overlong punishment (added to the
rewards) and overlong filtering (no loss on truncated responses), and the rollout correction's
importance weights (gspo.core.objectives). Each is off unless the config (or the objective's
defaults, gspo.core.objectives.Objective) turns it on."""

from __future__ import annotations

import dataclasses

import torch

from gspo.core import objectives
from gspo.errors import TrainingError
from gspo.infra import distributed as dist


@dataclasses.dataclass
class Shaped:
    train: dict  # the batch the update trains on: target_mask without truncated rows
    advantages: torch.Tensor  # (B,)
    is_weights: torch.Tensor | None  # (B, T) rollout-correction weights, or None
    metrics: dict


def shape(
    batch: dict,
    truncated: torch.Tensor,
    rewards: torch.Tensor,
    old_logp: torch.Tensor,
    engine_logp: torch.Tensor,
    cfg,
    world: dist.World = dist.World(),
) -> Shaped:
    """The step's advantages, training batch and correction weights from its padded `batch`,
    `truncated` (B,) bool (cut at max_new_tokens), task `rewards` (B,) and the trainer's and the
    engine's log-probs (B, T); metrics reduced over the ranks."""
    rec = {}
    if cfg.overlong_buffer:
        lengths = batch["target_mask"].sum(dim=1).cpu()  # response tokens, (B,)
        pen = objectives.overlong_penalty(lengths, cfg.max_new_tokens, cfg.overlong_buffer)
        rewards = rewards + pen.to(rewards.dtype)
        rec["overlong_penalty_mean"] = dist.all_gather_cat(pen, world).mean().item()
    adv = objectives.group_advantages(rewards, cfg.group_size, scale=cfg.adv_scale)
    mask = batch["target_mask"]
    train = batch
    if cfg.mask_truncated:
        keep = (~truncated).to(mask.device, mask.dtype)
        train = {**batch, "target_mask": mask * keep[:, None]}
        rec["truncated_masked"] = dist.all_gather_cat(truncated.float(), world).mean().item()
    w = None
    if cfg.rollout_correction != "none":
        w = objectives.rollout_correction(
            old_logp,
            engine_logp,
            train["target_mask"],
            cfg.rollout_correction,
            *cfg.correction_band(),
        )
        valid = train["target_mask"] > 0
        sums = dist.all_reduce(
            torch.stack([w.sum(), ((w == 0) & valid).sum(), valid.sum()]).double(), world
        )
        rec["rollout_is_mean"] = (sums[0] / sums[2].clamp(min=1)).item()
        rec["rollout_is_zeroed"] = (sums[1] / sums[2].clamp(min=1)).item()
        if cfg.rollout_correction == "icepop":  # the tokens IcePop masked, by that name
            rec["icepop_masked"] = rec["rollout_is_zeroed"]
    return Shaped(train, adv.to(mask.device), w, rec)


def dynamic_sampling(draw, group_size: int, max_rounds: int, world: dist.World = dist.World()):
    """DAPO's dynamic sampling (Yu et al. 2025, section 3.2): of the groups `draw(k)` gives
    (prompts, completions, rewards, flat, group-major; draw 0 the step's own prompts, 1, 2, ...
    fresh ones) keep those whose rewards are not all equal, which alone carry a gradient, and
    draw again until as many are kept as one draw makes, at most `max_rounds` draws. Short of
    that, dropped groups fill the batch (advantage 0: its size kept, no gradient).

    Returns ((prompts, completions, rewards) of the kept groups, metrics, the discarded
    (prompt, completion) pairs, whose generation still cost compute). A world of one only: the
    kept groups would differ with the ranks' shares of each draw."""
    if world.distributed:
        raise TrainingError(
            "dynamic_sampling: runs in a world of one for now (which groups "
            "are kept would depend on the number of ranks); set it to false "
            "or run without torchrun"
        )
    kept: list[tuple] = []
    dropped: list[tuple] = []
    n = rounds = 0
    for k in range(max_rounds):
        p, c, r = draw(k)
        rounds, n = k + 1, n or len(r) // group_size
        for g in range(0, len(r), group_size):
            rows = slice(g, g + group_size)
            group = (p[rows], c[rows], r[rows])
            (kept if r[rows].max() > r[rows].min() else dropped).append(group)
        if len(kept) >= n:
            break
    chosen = (kept + dropped)[:n]
    waste = [(x, y) for gp, gc, _ in (kept + dropped)[n:] for x, y in zip(gp, gc)]
    metrics = {
        "groups_dropped": len(dropped) / (len(kept) + len(dropped)),
        "sampling_rounds": rounds,
        "groups_unfilled": max(n - len(kept), 0) / n,
    }
    return (
        (
            [x for gp, _, _ in chosen for x in gp],
            [y for _, gc, _ in chosen for y in gc],
            torch.cat([gr for _, _, gr in chosen]),
        ),
        metrics,
        waste,
    )
