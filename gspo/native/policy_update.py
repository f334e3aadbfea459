"""The update phase of one RL step: `epochs` x `minibatches` optimizer steps over the step's
rollouts, each minibatch's gradients accumulated micro-batch by micro-batch, and the stop on
non-finite updates (gspo.native.trainer runs it once per step).

A minibatch is the same set of sequences on one rank or many: every rank draws one permutation
of the global batch and trains on its own rows of each chunk; losses are divided by the global
minibatch's sequence or token count and gradients summed over ranks, so an update equals the
single-process one. The first minibatch of a step is on-policy: with recomputed old log-probs
its own forward gives them (ratio exactly 1; the trainer's no-grad pass skips those rows); what
it saw is returned for the engine/trainer gap metrics (gspo.native.step_metrics).
"""

from __future__ import annotations

import dataclasses
import math
import typing

import torch

from gspo.config.train import RLConfig
from gspo.core import objectives, offpolicy
from gspo.errors import TrainingError
from gspo.infra import distributed as dist
from gspo.model import moe
from gspo.model.logprobs import sequence_logprobs
from gspo.native import step_metrics
from gspo.native.data import micro_batches, pad_to, step_seed, trim_padding


@dataclasses.dataclass(frozen=True)
class Learner:
    """What an update reads and moves: the (sharded) policy and its optimizer, the frozen
    reference for the KL penalty (None without kl_coef), the run's config and world."""

    cfg: RLConfig
    world: dist.World
    policy: torch.nn.Module
    opt: torch.optim.Optimizer
    ref: torch.nn.Module | None
    is_moe: bool


@dataclasses.dataclass(frozen=True)
class OldPolicy:
    """What the sampling policy left, fixed over all of the step's updates; rows are the rows of
    this rank's batch."""

    logp: torch.Tensor  # (B, T) old log-probs (recomputed or the engine's)
    adv: torch.Tensor  # (B,) advantages
    routing: moe.Routing | None  # MoE: the old top-k experts to replay, or None
    is_weights: torch.Tensor | None  # (B, T) rollout-correction weights, or None
    # (B, 2) on a step whose samples are logged (gspo.tracking.samples): each row's sequence ratio and
    # clipped-token share, written at each of its updates (the last one stays), else None
    samples: torch.Tensor | None = None
    # whether the old policy is the one being updated (False under staleness, whose behaviour
    # policy is older: no update forward gives its log-probs, no minibatch is on-policy)
    fresh: bool = True


@dataclasses.dataclass
class NonfiniteStreak:
    """Non-finite updates in a row: a finite one resets it, `limit` of them stop the run. It
    spans steps, so the trainer keeps one for the whole run."""

    limit: int
    count: int = 0

    def skip(self, step: int, loss_sum: float, gnorm) -> None:
        self.count += 1
        if self.count >= self.limit:
            raise TrainingError(
                f"step {step + 1}: {self.count} non-finite updates in "
                f"a row (loss={loss_sum}, grad_norm={float(gnorm)}); stopping. Lower "
                "lr, check the rewards and data, or raise max_consecutive_nonfinite"
            )


def _finite(*xs) -> bool:
    return all(math.isfinite(float(x)) for x in xs)


def _compute(lrn: Learner):
    """bf16 or fp32 compute for a training forward (gspo.infra.distributed.compute_precision)."""
    return dist.compute_precision(lrn.cfg.precision, lrn.cfg.device, lrn.world)


def permutations(cfg: RLConfig, step: int, N: int) -> list[torch.Tensor]:
    """Each epoch's permutation of the step's global batch of N rollouts, whatever the world
    size: minibatch j holds the same sequences on one rank or many, each rank updating with its
    own rows."""
    gen = torch.Generator().manual_seed(step_seed(cfg.seed, step, 2))
    return [torch.randperm(N, generator=gen) for _ in range(cfg.epochs)]


def on_policy_rows(cfg: RLConfig, step: int, N: int) -> torch.Tensor:
    """The global rows of the step's first minibatch: trained before any update, so their
    forward is the old policy's own and the old-log-prob pass can skip them (_micro_loss)."""
    return permutations(cfg, step, N)[0].chunk(cfg.minibatches)[0]


def update(
    lrn: Learner,
    batch: dict,
    old: OldPolicy,
    step: int,
    rows: torch.Tensor | None,
    streak: NonfiniteStreak,
) -> tuple[dict, int, dict]:
    """epochs x minibatches optimizer steps.

    `batch` is this rank's share of the step's rollouts and `rows` the index of each of its rows
    in the global batch (None: all of it, in order).

    Returns averaged metrics, the number of skipped updates, and what the first (on-policy)
    minibatch saw: its indices, the trainer's log-probs and entropy, so the engine/trainer
    log-prob gap is measurable even when old log-probs are not recomputed.
    """
    cfg, world = lrn.cfg, lrn.world
    n_local = batch["input_ids"].shape[0]
    rows = torch.arange(n_local) if rows is None else rows
    N = int(dist.all_reduce(torch.tensor(n_local), world))  # the global batch
    local_of = {int(g): i for i, g in enumerate(rows)}
    first: dict = {}
    per_mb: list[dict] = []
    skipped = 0
    lrn.policy.train()
    # the optimizer's parameters: under FSDP2 the module may hold unsharded stand-ins for
    # some of them between a forward and the next reshard, which never receive gradients
    params = [p for g in lrn.opt.param_groups for p in g["params"] if p.requires_grad]
    gen = torch.Generator().manual_seed(step_seed(cfg.seed, step, 3))  # Clip-Cov's choices
    for perm in permutations(cfg, step, N):
        for mb in perm.chunk(cfg.minibatches):
            on_policy = not per_mb and not skipped  # still on-policy: the first minibatch
            local = torch.tensor(
                [local_of[int(g)] for g in mb if int(g) in local_of], dtype=torch.long
            )
            loss_sum, acc = _accumulate(
                lrn, batch, local, len(mb), old, first if on_policy else None, gen
            )
            gnorm = dist.clip_grad_norm(params, cfg.grad_clip, world)
            if not _finite(loss_sum, gnorm):
                lrn.opt.zero_grad(set_to_none=True)
                skipped += 1
                streak.skip(step, loss_sum, gnorm)
                continue
            streak.count = 0
            lrn.opt.step()
            rec = acc
            rec["loss"] = loss_sum
            rec["grad_norm"] = float(gnorm)
            if on_policy and old.fresh:
                # On-policy: with recomputed old log-probs every ratio is exactly 1 here, so
                # whatever this minibatch clips comes from the engine/trainer mismatch alone.
                first["clip_frac_onpolicy"] = rec.get("clip_frac_tokens", 0.0)
            per_mb.append(rec)
    # the gradients' memory goes back before the rollout engine wakes (gspo.infra.memory_plan)
    lrn.opt.zero_grad(set_to_none=True)
    return (
        step_metrics.update_summary(per_mb, first),
        skipped,
        step_metrics.first_minibatch(first),
    )


def _accumulate(
    lrn: Learner,
    batch: dict,
    local: torch.Tensor,
    mb_size: int,
    old: OldPolicy,
    first: dict | None,
    gen: torch.Generator | None = None,
) -> tuple[float, dict]:
    """Gradients of one minibatch (this rank's rows `local` of its `mb_size` sequences),
    micro-batch by micro-batch; (the minibatch's loss, {metric: (weighted sum or extreme)})
    reduced over the ranks. `gen`: the step's generator for the objective's random choices."""
    cfg, world = lrn.cfg, lrn.world
    lrn.opt.zero_grad(set_to_none=True)
    micros = micro_batches(
        local,
        batch["attention_mask"].sum(1),
        cfg.micro_batch_size,
        cfg.max_tokens_per_micro_batch,
        by_length=not lrn.is_moe,
    )
    tot_tokens = dist.all_reduce(batch["target_mask"][local].sum(), world).clamp(min=1)
    # every rank runs as many forward/backward passes as the busiest one: FSDP's
    # collectives need them all (a rank short of rows runs one at weight 0)
    n_micro = int(dist.all_reduce(torch.tensor(len(micros)), world, "max"))
    loss_sum = 0.0
    acc: dict[str, list] = {}
    for j in range(n_micro):
        real = j < len(micros)
        idx = micros[j] if real else torch.zeros(1, dtype=torch.long)
        sub = {k: v[idx] for k, v in batch.items()}
        if not lrn.is_moe:  # padding costs arithmetic (MoE replays full-width routing)
            sub = trim_padding(sub)
        loss, m = _micro_loss(lrn, sub, idx, old, first if real else None, gen)
        # Weight micro-batches so their sum over ranks is the minibatch's own aggregate.
        w_tok = sub["target_mask"].sum() / tot_tokens if real else torch.tensor(0.0)
        w_seq = torch.tensor(len(idx) / mb_size if real else 0.0)
        w = w_tok if cfg.agg == "token-mean" else w_seq
        # (world of one: a factor 1.0, the single-process update itself)
        (loss * w * dist.grad_scale(world)).backward()
        loss_sum += loss.item() * float(w)
        for k, v in m.items() if real else ():
            mw = (
                w_tok
                if k in objectives.TOKEN_MEAN_METRICS
                else w_seq
                if k in objectives.SEQUENCE_MEAN_METRICS
                else w
            )
            acc.setdefault(k, []).append((v, float(mw)))
    loss_sum = float(dist.all_reduce(torch.tensor(loss_sum, dtype=torch.float64), world))
    return loss_sum, step_metrics.reduce_over_ranks(step_metrics.combine_micro(acc), world)


def params(cfg: RLConfig, generator: torch.Generator | None = None) -> offpolicy.Params:
    """The off-policy objectives' parameters, RLConfig's fields of the same names; Clip-Cov's
    random choices from `generator` (the step's, so that a run's choices are its seed's)."""
    return offpolicy.Params(**{f: getattr(cfg, f) for f in offpolicy.FIELDS}, generator=generator)


def _surrogate_args(cfg: RLConfig) -> dict[str, typing.Any]:
    """The objective and its clip / gate settings, as policy_loss and sample_stats take them."""
    return dict(
        objective=cfg.algorithm,
        eps_low=cfg.eps_low,
        eps_high=cfg.eps_high,
        log_ratio_clamp=cfg.log_ratio_clamp,
        tau_pos=cfg.sapo_tau_pos,
        tau_neg=cfg.sapo_tau_neg,
    )


def _replayed(lrn: Learner, old: OldPolicy, idx: torch.Tensor) -> moe.Routing | None:
    """The old routing of rows `idx`, to replay (routing_replay), else None."""
    if not lrn.cfg.routing_replay:
        return None
    assert old.routing is not None, "routing_replay: the step recorded no old routing"
    return old.routing.rows(idx)


def _micro_loss(
    lrn: Learner,
    sub: dict,
    idx: torch.Tensor,
    old: OldPolicy,
    first: dict | None,
    gen: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict]:
    """The policy loss of one micro-batch (rows `idx` of the rank's batch); `first` collects
    the on-policy minibatch's view."""
    cfg = lrn.cfg
    # MoE: replay the old routing of these rows; in 'rollout' mode record the on-policy
    # minibatch's routing as the old one (for the volatility metric).
    with (
        moe.routing_hooks(
            lrn.policy,
            replay=_replayed(lrn, old, idx),
            record=(
                lrn.is_moe
                and first is not None
                and cfg.moe_metrics
                and cfg.old_logprobs == "rollout"
            ),
            keep_logits=lrn.is_moe and cfg.router_aux_loss_coef > 0,
        ) as hooks,
        _compute(lrn),
    ):
        logp, ent = sequence_logprobs(
            lrn.policy, sub, cfg.temperature, with_entropy=True, chunk=cfg.logprob_chunk
        )  # (b, t)
    width = old.logp.shape[1]  # a trimmed micro-batch is padded back
    if first is not None:
        first.setdefault("idx", []).append(idx)
        first.setdefault("logp", []).append(pad_to(logp.detach(), width))
        first.setdefault("entropy", []).append(pad_to(ent.detach(), width))
        if hooks.record:
            first.setdefault("routing", []).append(hooks.routing(own=True))
    # Before the step's first optimizer step the policy is the old policy: its own log-probs
    # are the recomputed old ones (ratio exactly 1), kept for the later epochs and metrics;
    # the old-log-prob pass skips these rows (gspo.native.trainer).
    if first is not None and cfg.old_logprobs == "recompute" and old.fresh:
        old.logp[idx.to(old.logp.device), : logp.shape[1]] = logp.detach()
    old_logp = old.logp[idx][:, : logp.shape[1]]
    ref_logp = None
    if lrn.ref is not None:
        with torch.no_grad(), _compute(lrn):
            ref_logp = sequence_logprobs(lrn.ref, sub, cfg.temperature, chunk=cfg.logprob_chunk)
    assert cfg.eps_low is not None and cfg.eps_high is not None and cfg.agg is not None  # set
    loss, m = objectives.policy_loss(
        logp,
        old_logp,
        old.adv[idx],
        sub["target_mask"],
        **_surrogate_args(cfg),
        agg=cfg.agg,
        norm_len=cfg.max_new_tokens,
        ref_logp=ref_logp,
        kl_coef=cfg.kl_coef,
        is_weights=None if old.is_weights is None else old.is_weights[idx][:, : logp.shape[1]],
        params=params(cfg, gen),
        opsm_threshold=cfg.opsm_threshold,
    )
    if old.samples is not None:  # what the update made of each sample, to read
        ratio, clip = objectives.sample_stats(
            logp.detach(),
            old_logp,
            old.adv[idx],
            sub["target_mask"],
            **_surrogate_args(cfg),
            params=params(cfg, torch.Generator().manual_seed(0)),  # not the step's draws
        )
        old.samples[idx.to(old.samples.device)] = torch.stack([ratio, clip], 1).to(old.samples)
    if lrn.is_moe and cfg.router_aux_loss_coef > 0:  # load-balancing loss
        aux = hooks.aux_loss(sub["attention_mask"])
        loss = loss + cfg.router_aux_loss_coef * aux
        m["moe/aux_loss_train"] = aux.item()
    return loss, m
