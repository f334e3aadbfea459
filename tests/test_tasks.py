import inspect

import pytest

from evaluators import tasks
from evaluators.benchmarks import aime, codeforces, livecodebench
from evaluators.benchmarks.base import Benchmark
from evaluators.tasks import reward, rewards


def _mixed():
    recs = (
        aime.generate(2, split="test", seed=0, difficulty=aime.Difficulty(1, 9))
        + livecodebench.generate(2, split="test", seed=0)
        + codeforces.generate(2, split="test", seed=0)
    )
    comps = [r["solution"] if i % 2 == 0 else "no answer here" for i, r in enumerate(recs)]
    return recs, comps


def test_batched_rewards_equal_one_by_one_rewards_across_tasks():
    recs, comps = _mixed()
    got = rewards(recs, comps, workers=2)
    assert got == [reward(r, c) for r, c in zip(recs, comps)]
    assert got == [1.0, 0.0] * 3


def test_batched_scores_are_each_benchmark_s_own_score_in_order():
    recs, comps = _mixed()
    got = tasks.score_many(recs, comps, workers=2)
    assert got == [tasks.module(r["task"]).score(r, c) for r, c in zip(recs, comps)]
    assert got[0] == {"passed": True, "answer": str(recs[0]["answer"])}
    with pytest.raises(ValueError, match="completions"):
        tasks.score_many(recs, comps[:-1])


def _params(fn, drop_self=False):
    """(name, kind) of `fn`'s parameters without a default (**options aside)."""
    ps = list(inspect.signature(fn).parameters.values())[1 if drop_self else 0 :]
    return [(p.name, p.kind) for p in ps if p.default is p.empty and p.kind != p.VAR_KEYWORD]


@pytest.mark.parametrize("name", tasks.BENCHMARKS)
def test_every_benchmark_module_offers_the_shared_interface(name):
    """Each registered module has every member of the Benchmark protocol, its functions taking
    the protocol's required parameters, in order and of the same kind; a further required one is
    a benchmark's own option, given by name (aime's `difficulty`)."""
    mod = tasks.module(name)
    members = [m for m in vars(Benchmark) if not m.startswith("_")]
    assert {"generate", "load", "load_sft", "format_prompt", "score", "score_many"} <= set(members)
    for m in members:
        proto = vars(Benchmark)[m]
        ours = vars(mod)[m]
        assert callable(ours), m
        want = _params(proto, drop_self=True)
        got = _params(ours)
        assert got[: len(want)] == want, f"{name}.{m}{inspect.signature(ours)}"
        assert all(kind == inspect.Parameter.KEYWORD_ONLY for _, kind in got[len(want) :]), m
    assert set(Benchmark.__annotations__) == {"TASK", "RECORD_FIELDS"}
    assert isinstance(mod.TASK, str) and mod.TASK.startswith(name)
    assert all(isinstance(f, str) for f in mod.RECORD_FIELDS)
    assert {"id", "task", "prompt"} <= set(mod.RECORD_FIELDS)
    for rec in mod.generate(
        3, split="test", seed=0, **({"difficulty": "easy"} if name == "aime" else {})
    ):
        assert rec["task"] == name and all(k in rec for k in mod.RECORD_FIELDS)
        assert isinstance(mod.format_prompt(rec), str) and mod.format_prompt(rec)


def test_benchmark_names_are_parsed_in_order_without_repeats():
    assert tasks.parse("cf, aime,cf") == ["cf", "aime"]
    assert set(tasks.TITLES) == set(tasks.BENCHMARKS) == set(tasks.MODULES)
    with pytest.raises(ValueError, match="'chess'"):
        tasks.parse("aime,chess")
    with pytest.raises(ValueError, match="no benchmark"):
        tasks.parse(" , ")


def test_an_unknown_task_is_named():
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        rewards([{"task": "chess"}], ["x"])
