"""Staleness (rl.staleness: k, issue 45): the rollout engine samples from the policy k steps
back, its old log-probs are that policy's, staleness 0 is the on-policy trainer bit for bit,
a resumed run goes on as the uninterrupted one, and two ranks train as one."""

import hashlib

import pytest
import torch

from evaluators.tasks import rewards
from gspo.config.train import ConfigError, DataSource, RLConfig
from gspo.native import trainer as trainer_mod
from gspo.native.staleness import Lag
from gspo.tracking.runs import read_metrics

TIMING = ("time_", "wall_s")
NEW = {"staleness", "behaviour_log_ratio_mean", "behaviour_log_ratio_std"}
NEW |= {"behaviour_log_ratio_max"}


def rl_cfg(data, sft_model, out, **kw):
    base = dict(
        model=str(sft_model),
        out_dir=str(out),
        train_data=[DataSource(str(data / "train.jsonl"))],
        steps=5,
        prompts_per_step=4,
        group_size=4,
        minibatches=2,
        lr=1e-3,
        max_new_tokens=32,
        ckpt_every=2,
        threads=1,
        log_samples_every=0,
    )
    base.update(kw)
    return RLConfig(**base)


def digest(state_dict) -> str:
    h = hashlib.sha256()
    for name in sorted(state_dict):
        h.update(name.encode())
        h.update(state_dict[name].detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


class Watched(trainer_mod.Trainer):
    """The trainer, noting the digest of the engine's weights as each step samples and of the
    live policy (version t: before step t's update)."""

    def rollout(self, step):
        self.seen = getattr(self, "seen", {})
        self.live = getattr(self, "live", {})
        self.seen[step] = digest(self.engine.model.state_dict())
        self.live[step] = digest(self.policy.state_dict())
        return super().rollout(step)


def test_a_negative_staleness_is_a_one_line_error(toy_data, toy_sft_model, tmp_path):
    with pytest.raises(ConfigError) as e:
        rl_cfg(toy_data, toy_sft_model, tmp_path, staleness=-1)
    assert str(e.value) == "staleness: must be >= 0 (0: on-policy rollouts), got -1"


def test_lag_versions_and_what_it_keeps():
    lag = Lag(2, torch.nn.Linear(2, 2))
    assert [lag.version(t) for t in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [lag.stale(t) for t in range(4)] == [False, True, True, True]
    for t in range(6):  # as the trainer calls it: keep, the pass, forget
        lag.keep(t)
        lag.forget(lag.version(t + 1))
        assert lag.versions() == list(range(lag.version(t + 1), t + 1))  # at most k
    assert Lag(0, torch.nn.Linear(2, 2)).stale(5) is False


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_staleness_k_samples_from_exactly_the_policy_k_steps_back(
    toy_data, toy_sft_model, tmp_path, k
):
    t = Watched(rl_cfg(toy_data, toy_sft_model, tmp_path, staleness=k), rewards)
    t.train()
    assert len(set(t.live.values())) == 5  # the policy moved at every step
    for step in range(5):
        assert t.seen[step] == t.live[max(0, step - k)], step
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["staleness"] for r in rows] == [min(s, k) for s in range(5)]
    # the first minibatch is on-policy only at step 0: ratio exactly 1 there, spread after
    assert rows[0]["behaviour_log_ratio_max"] == 0.0
    assert all(r["behaviour_log_ratio_std"] > 0 for r in rows[1:])


@pytest.mark.slow
def test_staleness_0_is_the_on_policy_trainer_bit_for_bit(toy_data, toy_sft_model, tmp_path):
    """The same config without the field (today's trainer) and with staleness: 0 give the
    same metrics and weights; the engine samples from the live policy at every step."""
    base = rl_cfg(toy_data, toy_sft_model, tmp_path / "a", steps=3)
    assert base.staleness == 0
    today = trainer_mod.run_rl(base, rewards)
    t = Watched(rl_cfg(toy_data, toy_sft_model, tmp_path / "b", steps=3, staleness=0), rewards)
    zero = t.train()
    assert all(t.seen[s] == t.live[s] for s in range(3))
    a, b = (
        read_metrics(tmp_path / "a" / "metrics.jsonl"),
        read_metrics(tmp_path / "b" / "metrics.jsonl"),
    )
    for ra, rb in zip(a, b):
        assert {k for k in ra if not k.startswith(TIMING)} == {
            k for k in rb if not k.startswith(TIMING)
        }
        for key in ra:
            if not key.startswith(TIMING):
                assert ra[key] == rb[key], (ra["step"], key)
    assert [r["staleness"] for r in a] == [0, 0, 0]
    assert all(r["behaviour_log_ratio_max"] == 0.0 for r in a)  # recomputed: on-policy
    from safetensors.torch import load_file

    wa, wb = load_file(str(today / "model.safetensors")), load_file(str(zero / "model.safetensors"))
    assert all(torch.equal(wa[n], wb[n]) for n in wa)


@pytest.mark.slow
def test_a_stale_run_resumed_mid_way_ends_where_the_uninterrupted_one_does(
    toy_data, toy_sft_model, tmp_path
):
    """k = 2, cut after step 3: the checkpoint holds the policies of versions 1 and 2, which
    steps 4 and 5 sample from."""
    from safetensors.torch import load_file

    full = trainer_mod.run_rl(
        rl_cfg(toy_data, toy_sft_model, tmp_path / "full", staleness=2), rewards
    )
    cut = tmp_path / "cut"
    trainer_mod.run_rl(rl_cfg(toy_data, toy_sft_model, cut, staleness=2, steps=3), rewards)
    st = torch.load(cut / "checkpoints" / "step_000003" / "trainer_state.pt", weights_only=False)
    assert st["behaviour_versions"] == [1, 2]  # what steps 4 and 5 sample from
    resumed = trainer_mod.run_rl(rl_cfg(toy_data, toy_sft_model, cut, staleness=2), rewards)
    a, b = load_file(str(full / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert all(torch.equal(a[n], b[n]) for n in a)
    ra, rb = read_metrics(tmp_path / "full" / "metrics.jsonl"), read_metrics(cut / "metrics.jsonl")
    assert [r["step"] for r in rb] == [1, 2, 3, 4, 5]
    for x, y in zip(ra, rb):
        for key in x:
            if not key.startswith(TIMING) and key != "wall_s":
                assert x[key] == y[key], (x["step"], key)


@pytest.mark.slow
def test_a_stale_run_on_two_ranks_trains_as_one_rank(toy_sft_model, toy_data, tmp_path):
    """k = 1 under torchrun (FSDP2, gloo): the kept policies are each rank's shards, swapped
    in for the old-log-prob pass and the engine's sync; the numbers are one process's."""
    import json

    from safetensors.torch import load_file

    from test_distributed import TIMING as DIST_TIMING
    from test_distributed import _metrics, _rl_config, torchrun

    rows = {}
    for n in (1, 2):
        cfg = _rl_config(tmp_path, toy_sft_model, toy_data / "train.jsonl", f"s{n}", minibatches=1)
        with open(cfg, "a") as f:
            f.write("staleness: 1\n")
        torchrun(n, "-m", "pipeline.train", "--config", cfg)
        rows[n] = _metrics(tmp_path / f"s{n}")
    assert [r["staleness"] for r in rows[2]] == [0, 1, 1]
    assert rows[1][-1]["behaviour_log_ratio_std"] > 0  # off-policy: the staleness is there
    for one, two in zip(rows[1], rows[2]):
        keys = {k for k in one if not k.startswith(DIST_TIMING)}
        assert keys == {k for k in two if not k.startswith(DIST_TIMING)}
        for k in keys:
            if k.startswith("logprob_gap"):  # engine vs trainer: rounding itself
                assert max(one[k], two[k]) < 1e-4, (one["step"], k)
                continue
            # token means weighted by tokens, sequence shares by sequences (not by the loss's
            # aggregation): the minibatch's own, however the ranks split it
            assert two[k] == pytest.approx(one[k], rel=1e-4, abs=1e-6), (one["step"], k)
    a = load_file(str(tmp_path / "s1" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "s2" / "model" / "model.safetensors"))
    for k in a:
        assert (b[k] - a[k]).norm() <= 1e-5 * a[k].norm(), k
    st = torch.load(tmp_path / "s2" / "checkpoints" / "step_000003" / "trainer_state.pt")
    assert (
        st["behaviour_versions"] == [2]
        and json.loads((tmp_path / "s2" / "summary.json").read_text())["world_size"] == 2
    )


@pytest.mark.slow
def test_the_vllm_engine_syncs_k_steps_late_too(toy_data, toy_sft_model, tmp_path):
    """rollout.engine: vllm with staleness 2: the engine's log-probs are the behaviour policy's
    (the trainer's pass with those weights swapped in) within rounding, while the policy being
    updated has moved away from it by far more: the engine got the late weights."""
    from gspo.config.train import RolloutConfig

    cfg = rl_cfg(
        toy_data,
        toy_sft_model,
        tmp_path,
        steps=4,
        staleness=2,
        rollout=RolloutConfig(engine="vllm"),
    )
    trainer_mod.run_rl(cfg, rewards)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["staleness"] for r in rows] == [0, 1, 2, 2]
    for r in rows:
        assert r["logprob_gap_seq_max"] < 1e-4, r["step"]
    assert all(r["behaviour_log_ratio_max"] > 1e-2 for r in rows[1:])
