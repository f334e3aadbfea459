"""DAPO's dynamic sampling on in-memory toy draws (gspo.native.shaping.dynamic_sampling)."""

import pytest
import torch

from gspo.errors import TrainingError
from gspo.infra import distributed as dist
from gspo.native.shaping import dynamic_sampling


def draws(*groups_per_draw):
    """draw(k) -> the k-th draw: 2 samples a group; a group is its two rewards. Prompts and
    completions name their draw, group and sample, so the test sees which were kept."""

    def draw(k):
        rewards = [r for g in groups_per_draw[k] for r in g]
        names = [f"d{k}g{i // 2}s{i % 2}" for i in range(len(rewards))]
        return names, [n.upper() for n in names], torch.tensor(rewards)

    return draw


def test_groups_with_equal_rewards_are_dropped_and_more_prompts_drawn_until_full():
    # draw 0: one group of equal rewards, one informative; draw 1: one informative, one equal
    (p, c, r), m, waste = dynamic_sampling(draws([(1, 1), (1, 0)], [(0, 1), (0, 0)]), 2, 3)
    assert p == ["d0g1s0", "d0g1s1", "d1g0s0", "d1g0s1"] and c == [x.upper() for x in p]
    assert r.tolist() == [1, 0, 0, 1]
    assert m == {"groups_dropped": 0.5, "sampling_rounds": 2, "groups_unfilled": 0.0}
    # the two dropped groups were generated all the same: their compute is the caller's to count
    assert sorted(x for x, _ in waste) == ["d0g0s0", "d0g0s1", "d1g1s0", "d1g1s1"]


def test_past_its_cap_dropped_groups_fill_the_batch():
    (p, _, r), m, waste = dynamic_sampling(draws([(1, 1), (1, 0)], [(0, 1), (1, 0)]), 2, 1)
    assert p == ["d0g1s0", "d0g1s1", "d0g0s0", "d0g0s1"] and r.tolist() == [1, 0, 1, 1]
    assert m == {"groups_dropped": 0.5, "sampling_rounds": 1, "groups_unfilled": 0.5}
    assert waste == []


def test_dynamic_sampling_on_several_ranks_is_refused_in_one_line():
    with pytest.raises(TrainingError, match="dynamic_sampling: runs in a world of one"):
        dynamic_sampling(draws([(1, 0)]), 2, 3, dist.World(rank=0, size=2))
