"""Train/test splits of generated problems, shared by the code benchmarks' generators: a
problem's split is a hash of its statement alone, so splits are disjoint whatever the seeds and
sizes, and templates are drawn in turn without repeating a statement."""

from __future__ import annotations

import collections
import hashlib
import itertools
import random
from typing import Sequence


def split_of(problem: str, test_fraction: float = 0.1) -> str:
    """'test' or 'train', decided by a hash of the problem text alone."""
    h = int.from_bytes(hashlib.sha256(problem.encode()).digest()[:8], "big")
    return "test" if (h % 10_000) < test_fraction * 10_000 else "train"


def draw_round_robin(
    templates: Sequence, n: int, *, task: str, split: str, seed: int, test_fraction: float
) -> list[tuple]:
    """`n` (template, constants) pairs whose statements fall in `split`, templates taken in turn.

    Each template's constant combinations (its `consts`: (name, lo, hi) ranges) are shuffled once
    by a generator seeded with (task, split, seed) and drawn without replacement, so no statement
    repeats; a template that runs out drops out of the rotation. Raises ValueError when fewer than
    `n` exist. Shared by the LiveCodeBench- and CodeForces-style generators.
    """
    rng = random.Random(f"{task}:{split}:{seed}")
    pools = []
    for t in templates:
        keys = [k for k, _, _ in t.consts]
        combos = [
            dict(zip(keys, vals))
            for vals in itertools.product(*[range(lo, hi + 1) for _, lo, hi in t.consts])
        ]
        combos = [c for c in combos if split_of(t.statement.format(**c), test_fraction) == split]
        rng.shuffle(combos)
        pools.append((t, collections.deque(combos)))
    out: list[tuple] = []
    while len(out) < n:
        live = [(t, pool) for t, pool in pools if pool]
        if not live:
            raise ValueError(
                f"only {len(out)} distinct {split} problems exist for templates "
                f"{[t.name for t in templates]}; asked for {n}"
            )
        for t, pool in live:
            if len(out) == n:
                break
            out.append((t, pool.popleft()))
    return out
