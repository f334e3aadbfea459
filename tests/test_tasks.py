import pytest

from evaluators import aime, codeforces, livecodebench
from evaluators.tasks import reward, rewards


def test_batched_rewards_equal_one_by_one_rewards_across_tasks():
    recs = (aime.generate(2, split="test", seed=0, difficulty=aime.Difficulty(1, 9))
            + livecodebench.generate(2, split="test", seed=0)
            + codeforces.generate(2, split="test", seed=0))
    comps = []
    for i, r in enumerate(recs):
        comps.append(r["solution"] if i % 2 == 0 else "no answer here")
    got = rewards(recs, comps, workers=2)
    assert got == [reward(r, c) for r, c in zip(recs, comps)]
    assert got == [1.0, 0.0] * 3


def test_an_unknown_task_is_named():
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        rewards([{"task": "chess"}], ["x"])
