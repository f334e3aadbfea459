"""The pieces of one RL step's metrics record that are pure functions of tensors: combining
micro-batch and minibatch metrics, the on-policy minibatch's view, and the engine/trainer
log-prob gap."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gspo.model import moe


def combine_micro(acc: dict) -> dict:
    """One minibatch's metrics from its micro-batches' (value, weight) pairs."""
    return {
        k: (
            min(x for x, _ in v)
            if k == "ratio_min"
            else max(x for x, _ in v)
            if k == "ratio_max"
            else sum(x * w for x, w in v)
        )
        for k, v in acc.items()
    }


def reduce_over_ranks(rec: dict, world) -> dict:
    """A minibatch's combined metrics (weighted sums, ratio_min / ratio_max) over the ranks:
    sums added, extremes taken; a rank without rows contributes nothing."""
    from gspo.infra import distributed as dist

    if not world.distributed:
        return rec
    keys = sorted(set(dist.gather_objects(sorted(rec), world)))
    ops = {"ratio_min": ("min", float("inf")), "ratio_max": ("max", float("-inf"))}
    out: dict[str, float] = {}
    for op in ("sum", "min", "max"):
        ks = [k for k in keys if ops.get(k, ("sum", 0.0))[0] == op]
        if ks:
            vals = torch.tensor(
                [rec.get(k, ops.get(k, ("sum", 0.0))[1]) for k in ks], dtype=torch.float64
            )
            out.update(zip(ks, dist.all_reduce(vals, world, op).tolist()))
    return out


def update_summary(per_mb: list[dict], first: dict) -> dict:
    """The step's update metrics: the mean over its minibatches (min / max for the ratio
    extremes), the on-policy minibatch's clip fraction and the off-policy ones' alone."""
    if not per_mb:
        return {}
    out = {}
    for k in per_mb[0]:
        vals = [r[k] for r in per_mb]
        out[k] = (
            min(vals)
            if k == "ratio_min"
            else max(vals)
            if k == "ratio_max"
            else sum(vals) / len(vals)
        )
    if "clip_frac_onpolicy" in first:
        out["clip_frac_tokens_onpolicy"] = first["clip_frac_onpolicy"]
    if len(per_mb) > 1:  # the off-policy updates alone: where clipping can engage
        out["clip_frac_tokens_offpolicy"] = sum(r["clip_frac_tokens"] for r in per_mb[1:]) / (
            len(per_mb) - 1
        )
    return out


def first_minibatch(first: dict) -> dict:
    """The on-policy minibatch's pieces joined: idx, logp, entropy (and MoE routing)."""
    routing = first.pop("routing", None)
    first.pop("clip_frac_onpolicy", None)
    out = {k: torch.cat(v) for k, v in first.items()}
    if routing:
        out["routing"] = moe.Routing.cat(routing)
    return out


def engine_logprobs(prompts, comps, mask: torch.Tensor) -> torch.Tensor:
    """The engine's sampled-token log-probs laid out like the trainer's (B, T) targets."""
    engine_logp = torch.zeros_like(mask)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        engine_logp[i, len(p) - 1 : len(p) - 1 + len(c.logprobs)] = torch.tensor(c.logprobs)
    return engine_logp


def gap_sums(engine_logp, trainer_logp, ent, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's (sums (5,), maxes (2,)) of the engine/trainer log-prob gap, float64 on the
    rows' device (a collective's tensors must be on the training device, and a CPU constant
    stacked with CUDA sums is a device error): sums of entropy, tokens, |token gap|,
    |sequence gap| and sequences; maxes of |token gap| and |sequence gap| (0 without rows:
    gaps are >= 0, so an empty rank adds nothing to a max)."""
    gap = (engine_logp - trainer_logp) * mask  # (b, T)
    seq_gap = gap.sum(1).abs() / mask.sum(1).clamp(min=1)  # (b,)
    n_seq = torch.full((), float(len(seq_gap)), device=mask.device)
    sums = torch.stack([(ent * mask).sum(), mask.sum(), gap.abs().sum(), seq_gap.sum(), n_seq])
    zero = torch.zeros((), device=mask.device)
    maxes = torch.stack(
        [gap.abs().max() if gap.numel() else zero, seq_gap.max() if seq_gap.numel() else zero]
    )
    return sums.double(), maxes.double()


def gap_metrics(engine_logp, old_logp, entropy, mask, first, world) -> dict:
    """Entropy and the engine/trainer log-prob gap per token and per sequence, over the whole
    step (sums and extremes reduced over the ranks). Without a recompute pass (entropy None)
    both come from the on-policy minibatch's forward pass (its rows on this rank, maybe none)."""
    from gspo.infra import distributed as dist

    if entropy is None:
        idx = first.get("idx", torch.zeros(0, dtype=torch.long, device=mask.device))
        trainer_logp = first.get("logp", mask[idx])
        ent, m_gap = first.get("entropy", mask[idx]), mask[idx]
    else:
        idx, trainer_logp, ent, m_gap = slice(None), old_logp, entropy, mask
    sums, maxes = gap_sums(engine_logp[idx], trainer_logp, ent, m_gap)
    sums, maxes = dist.all_reduce(sums, world), dist.all_reduce(maxes, world, "max")
    ent_sum, tokens, gap_sum, seq_sum, seqs = sums.tolist()
    return {
        "entropy": ent_sum / tokens,
        "logprob_gap_token_mean": gap_sum / tokens,
        "logprob_gap_token_max": float(maxes[0]),
        "logprob_gap_seq_mean": seq_sum / seqs,
        "logprob_gap_seq_max": float(maxes[1]),
    }


def behaviour_spread(old_logp, mask, first: dict, rows: torch.Tensor, world) -> dict:
    """How far the policy being updated sits from the behaviour policy (the one that sampled:
    staleness k steps older, gspo.native.staleness): the mean, standard deviation and largest
    |.| of the sequence log-ratio mean_t log pi(y_t) / pi_b(y_t) over the step's first
    minibatch, before its update (`first`: its rows of this rank, their log-probs (b, T);
    `old_logp` (B, T): the behaviour policy's, which its update left as they were unless it
    was on-policy, ratio 1). `rows`: this rank's rows' global indices; each rank writes its
    sequences at theirs and a sum gathers them, so the numbers are one process's whatever the
    world size. 0 on-policy with recomputed old log-probs; the engine/trainer gap with
    old_logprobs: rollout."""
    from gspo.infra import distributed as dist

    N = int(dist.all_reduce(torch.tensor(len(rows)), world))
    vals = torch.zeros(N, dtype=torch.float64)  # (N,) each sequence's log-ratio, 0 elsewhere
    have = torch.zeros(N, dtype=torch.float64)  # (N,) 1 where a first-minibatch row sits
    if "idx" in first:
        idx = first["idx"]
        m = mask[idx]  # (b, T)
        seq = ((first["logp"] - old_logp[idx]) * m).sum(1) / m.sum(1).clamp(min=1)  # (b,)
        vals[rows[idx.cpu()]] = seq.double().cpu()
        have[rows[idx.cpu()]] = 1.0
    vals, have = dist.all_reduce(vals, world), dist.all_reduce(have, world)
    seq = vals[have > 0]
    if not len(seq):  # no first minibatch anywhere (a guard: every step has one)
        return {}
    return {
        "behaviour_log_ratio_mean": seq.mean().item(),
        "behaviour_log_ratio_std": seq.std(correction=0).item(),
        "behaviour_log_ratio_max": seq.abs().max().item(),
    }


def old_or_first(routing, first: dict):
    """(MoE routing, its batch rows): the old-log-prob pass's over all rows, or in 'rollout'
    mode (no such pass) the on-policy first minibatch's own routing over its rows."""
    if routing is None and "routing" in first:
        return first["routing"], first["idx"]
    return routing, slice(None)


def engine_routing_mismatch(engine_routing, own_old_routing, batch, first: dict) -> dict:
    """Share of (response token, MoE layer) top-k expert sets on which the rollout engine's
    routers and the old policy's own routers (the old-log-prob pass, or in 'rollout' mode the
    on-policy first minibatch) disagree on the same samples: the train-inference routing
    mismatch, e.g. from a bf16 engine beside an fp32 trainer."""
    own, rows = old_or_first(own_old_routing, first)
    if own is None:
        return {}
    v = moe.volatility(engine_routing.rows(rows), own, moe.response_positions(batch)[rows])
    return {"moe/engine_routing_mismatch": v["moe/volatility"]} if v else {}


def mfu(forward_flops: float, phases: Mapping[str, tuple[float, float]], peak: float) -> dict:
    """Model FLOPs utilisation of each phase: {phase: (passes, seconds)} where a phase costs
    `passes` forward passes' worth of `forward_flops` (the step's F(L) summed over every rank's
    sequences; gspo.model.flops), against `peak`, the FLOP/s of all the job's devices together. A
    phase that did not run (no passes or no time) gets no value."""
    return {
        f"mfu_{name}": forward_flops * passes / (seconds * peak)
        for name, (passes, seconds) in phases.items()
        if passes and seconds > 0
    }


def moe_pass(policy, forward, old_routing, batch, first) -> dict:
    """MoE, after the step's updates: one no-grad pass of the updated `policy` (`forward(batch)`:
    the trainer's micro-batched pass) over the rollout batch with recording on. Its routing
    against the old policy's (the old-log-prob pass, or in 'rollout' mode the on-policy first
    minibatch's rows) gives moe/volatility; plus load balance over the real tokens and the aux
    (load-balancing) loss value."""
    policy.eval()
    with torch.no_grad(), moe.routing_hooks(policy, record=True, keep_logits=True) as h:
        forward(batch)
    new = h.routing()
    rec = moe.load_balance(new, batch["attention_mask"])
    rec["moe/aux_loss"] = float(h.aux_loss(batch["attention_mask"]))
    old, rows = old_or_first(old_routing, first)
    if old is not None:
        rec.update(moe.volatility(old, new.rows(rows), moe.response_positions(batch)[rows]))
    return rec
