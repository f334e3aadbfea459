"""Staleness (`rl.staleness: k`, issue 45): the rollout engine lags the trainer by k steps, as an
asynchronous trainer's engine does, deterministically.

Versions: the policy before step t's update is version t (the starting model: 0). With staleness
k, step t samples from version max(0, t - k), the behaviour policy, and its old log-probs are
that policy's (recompute: the trainer's pass with the behaviour weights swapped in; rollout:
the engine's own); the update still moves the live policy, version t. So the update's ratio is
pi_t / pi_{t-k}: the off-policy gap an asynchronous trainer's clipping or masking must absorb.

The trainer keeps the versions a later step reads: after step t's old-log-prob pass, versions
max(0, t + 1 - k) .. t, at most k copies of its own parameters (each rank its shards: 1/world
of the model each), and a checkpoint saves them (Distributed Checkpoint, resharded on load) so
a resumed run goes on as the uninterrupted one. Staleness 0 keeps no copy and swaps nothing:
the trainer's path is the on-policy one, unchanged.
"""

from __future__ import annotations

import contextlib
import pathlib

import torch

from gspo.errors import TrainingError

KEY = "behaviour"  # the snapshots' key in a checkpoint's Distributed Checkpoint folder


def reshard(policy: torch.nn.Module) -> None:
    """Put every FSDP2 module back on its sharded parameters. The root keeps its gathered
    parameters after a forward (FSDP2 skips the root's reshard for the backward that usually
    follows) and the next forward reuses them: weights written into the shards meanwhile
    would go unseen. A world of one has no FSDP module: nothing happens."""
    from torch.distributed.fsdp import FSDPModule

    for m in policy.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def _params(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    reshard(policy)  # the registered parameters are the shards the optimizer steps
    return dict(policy.named_parameters())


class Lag:
    """The policy versions a run with staleness `k` still needs, and the weight swaps that put
    one of them in the live policy's place for a while."""

    def __init__(self, k: int, policy: torch.nn.Module):
        self.k = k
        self.policy = policy
        self.snaps: dict[int, dict[str, torch.Tensor]] = {}  # version -> parameters (shards)

    def version(self, step: int) -> int:
        """The policy version step `step`'s rollouts come from."""
        return max(0, step - self.k)

    def stale(self, step: int) -> bool:
        """Whether step `step` samples from an older policy than the one it updates."""
        return self.version(step) != step

    def keep(self, step: int) -> None:
        """At step `step`, before its update: remember the live weights (version `step`) for
        the steps that will sample from them, forget the versions no step reads any more."""
        if not self.k:
            return
        self.forget(self.version(step))
        with torch.no_grad():
            self.snaps[step] = {n: p.detach().clone() for n, p in _params(self.policy).items()}

    def forget(self, before: int) -> None:
        for v in [v for v in self.snaps if v < before]:
            del self.snaps[v]

    @contextlib.contextmanager
    def weights(self, version: int, live: int):
        """The policy holds version `version`'s weights inside, its live ones (version `live`)
        again after; nothing moves when they are the same. Every rank calls it (a reshard is
        collective-free, but the pass inside is not)."""
        if version == live:
            yield
            return
        if version not in self.snaps:
            raise TrainingError(f"staleness: policy version {version} was not kept (a bug)")
        params = _params(self.policy)
        with torch.no_grad():
            # the live weights back from their own snapshot where the step kept one
            back = self.snaps.get(live)
            if back is None:
                back = {n: p.detach().clone() for n, p in params.items()}
            for n, p in params.items():
                p.detach().copy_(self.snaps[version][n])
        try:
            yield
        finally:
            params = _params(self.policy)
            with torch.no_grad():
                for n, p in params.items():
                    p.detach().copy_(back[n])

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> dict:
        """What a checkpoint's Distributed Checkpoint folder gets: {KEY: {version: params}}
        (sharded tensors are saved shard by shard, resharded on load); {} at staleness 0."""
        return {KEY: {str(v): s for v, s in self.snaps.items()}} if self.snaps else {}

    def versions(self) -> list[int]:
        return sorted(self.snaps)

    def load(self, folder: pathlib.Path, versions: list[int] | None, step: int) -> None:
        """The snapshots a checkpoint at `step` saved (`versions`, from its trainer state) out
        of its Distributed Checkpoint folder, into tensors laid out like this world's shards.
        A checkpoint of a run with staleness that kept none (written before issue 45) cannot
        give the behaviour policies back: refused."""
        need = list(range(self.version(step), step))
        if not need:
            return
        if versions is None or not set(need) <= set(versions):
            raise TrainingError(
                f"staleness: checkpoint {folder.parent.name} holds no copy of the policy "
                f"versions {need} its next steps sample from; start the run over (resume: false)"
            )
        import warnings

        import torch.distributed.checkpoint as dcp

        params = _params(self.policy)
        state = {KEY: {str(v): {n: torch.empty_like(p) for n, p in params.items()} for v in need}}
        with warnings.catch_warnings():  # Distributed Checkpoint in a world of one: intended
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(state, checkpoint_id=folder, no_dist=not torch.distributed.is_initialized())
        self.snaps = {int(v): s for v, s in state[KEY].items()}
