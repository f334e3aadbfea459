"""Routing Replay, expert-activation volatility, load balance and the aux loss on tiny-moe."""

import pytest
import torch

from evaluators.benchmarks import aime
from evaluators.tasks import rewards
from gspo.config.fields import ConfigError
from gspo.config.train import DataSource, RLConfig
from gspo.infra.checkpoint import list_checkpoints
from gspo.io import write_jsonl
from gspo.model import moe
from gspo.model.logprobs import sequence_logprobs
from gspo.model.models import load_model
from gspo.native import trainer as trainer_mod
from gspo.native.data import pad_batch
from gspo.tracking.runs import read_metrics

TIMING = {"wall_s", "time_rollout_s", "time_old_logprob_s", "time_update_s", "time_moe_s"}


@pytest.fixture
def model(tiny_moe_model_dir):
    m, _ = load_model(tiny_moe_model_dir)
    return m.eval()


def toy_batch(n=4, prompt=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 100, (prompt,), generator=g).tolist() for _ in range(n)]
    responses = [torch.randint(3, 100, (3 + 2 * i,), generator=g).tolist() for i in range(n)]
    return pad_batch(prompts, responses, pad_id=0)  # rows of different lengths: padding


def record(model, batch, **kw):
    with moe.routing_hooks(model, record=True, **kw) as h:
        logp = sequence_logprobs(model, batch)
    return h.routing(), logp


def perturb_routers(model, std=0.05, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, _, gate in moe.routers(model):
            gate.weight.add_(torch.randn(gate.weight.shape, generator=g) * std)


def test_routers_are_found_on_every_sparse_layer_and_none_on_a_dense_model(model, tiny_model_dir):
    assert [i for i, _, _ in moe.routers(model)] == [0, 1]
    dense, _ = load_model(tiny_model_dir)
    assert not moe.is_moe(dense) and moe.routers(dense) == []
    with moe.routing_hooks(dense, record=True) as h:
        sequence_logprobs(dense, toy_batch())
    assert h.routing() is None


def test_recording_keeps_one_b_t_k_tensor_per_layer_whose_rows_follow_the_batch_rows(model):
    batch = toy_batch()
    B, L = batch["input_ids"].shape
    with torch.no_grad():
        full, _ = record(model, batch)
        idx = torch.tensor([2, 0])
        part, _ = record(model, {k: v[idx] for k, v in batch.items()})
    assert set(full.layers) == {0, 1} and full.shape == (B, L, 2)
    assert all(t.dtype == torch.uint8 for t in full.layers.values())
    assert full.nbytes == 2 * B * L * 2  # layers * tokens * k * one byte
    real = batch["attention_mask"][idx].bool()
    for i in full.layers:
        assert torch.equal(full.rows(idx).layers[i][real], part.layers[i][real])
    # the two experts of a token are distinct ids < E
    t = full.layers[0].long()
    assert (t[..., 0] != t[..., 1]).all() and t.max() < 8


def test_replay_fixes_the_selection_that_perturbed_routers_would_change(model):
    batch = toy_batch()
    pos = moe.response_positions(batch)
    with torch.no_grad():
        old, old_logp = record(model, batch)
        perturb_routers(model)
        free, _ = record(model, batch)
        replayed, _ = record(model, batch, replay=old)
    v_free = moe.volatility(old, free, pos)["moe/volatility"]
    assert 0 < v_free < 1
    assert moe.volatility(old, replayed, pos)["moe/volatility"] == 0
    for i in old.layers:  # identical selection everywhere, padding included
        assert torch.equal(old.layers[i], replayed.layers[i])


def test_replaying_a_models_own_routing_leaves_its_log_probs_unchanged(model):
    """The replayed weights are the current router's renormalised probs: with the same routers
    they equal what the model computes itself."""
    batch = toy_batch()
    with torch.no_grad():
        own, logp = record(model, batch)
        with moe.routing_hooks(model, replay=own):
            logp_replayed = sequence_logprobs(model, batch)
    assert torch.allclose(logp, logp_replayed, atol=1e-6)


def test_gradients_reach_the_router_weights_under_replay(model):
    batch = toy_batch()
    with torch.no_grad():
        old, _ = record(model, batch)
    perturb_routers(model)
    with moe.routing_hooks(model, replay=old):
        logp = sequence_logprobs(model, batch)
    (logp * batch["target_mask"]).sum().backward()
    for i, _, gate in moe.routers(model):
        g = gate.weight.grad
        assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0, i


def test_a_replay_cache_of_other_rows_is_refused_with_the_shapes(model):
    batch = toy_batch()
    with torch.no_grad():
        old, _ = record(model, batch)
        with pytest.raises(moe.RoutingError, match=r"replayed routing is \(2, .*Routing.rows"):
            with moe.routing_hooks(model, replay=old.rows(slice(0, 2))):
                sequence_logprobs(model, batch)
    assert all(not g._forward_hooks for _, _, g in moe.routers(model))  # hooks removed


def test_volatility_compares_expert_sets_not_their_order_and_only_masked_positions():
    old = moe.Routing(
        {0: torch.tensor([[[0, 1], [2, 3], [4, 5]]]), 3: torch.tensor([[[0, 1], [2, 3], [4, 5]]])},
        8,
    )
    new = moe.Routing(
        {
            0: torch.tensor([[[1, 0], [2, 7], [6, 7]]]),  # same set, one, two swapped
            3: torch.tensor([[[0, 1], [2, 3], [5, 4]]]),
        },
        8,
    )
    mask = torch.tensor([[True, True, False]])  # the last position is not a response target
    v = moe.volatility(old, new, mask)
    assert v["moe/volatility/layer_0"] == 0.5 and v["moe/volatility/layer_3"] == 0.0
    assert v["moe/volatility"] == 0.25
    assert v["moe/expert_overlap"] == pytest.approx((1 + 0.5 + 1 + 1) / 4)


def test_load_balance_is_one_for_uniform_routing_and_low_when_two_experts_take_all():
    uniform = moe.Routing({0: torch.arange(8).view(1, 4, 2)}, 8)
    lb = moe.load_balance(uniform, torch.ones(1, 4))
    assert lb["moe/load_entropy"] == pytest.approx(1.0)
    assert lb["moe/max_expert_share"] == pytest.approx(1 / 8)
    assert sum(lb[f"moe/expert_share/{e}"] for e in range(8)) == pytest.approx(1.0)
    skewed = moe.Routing({0: torch.tensor([[[0, 1], [0, 1], [6, 7]]])}, 8)
    lb = moe.load_balance(skewed, torch.tensor([[1, 1, 0]]))  # padding not counted
    assert lb["moe/load_entropy"] == pytest.approx(1 / 3)  # log 2 / log 8
    assert lb["moe/max_expert_share"] == 0.5 and lb["moe/expert_share/6"] == 0.0


def test_the_hooks_aux_loss_equals_the_models_own_load_balancing_loss(model):
    batch = toy_batch()
    with torch.no_grad(), moe.routing_hooks(model, keep_logits=True) as h:
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            output_router_logits=True,
            use_cache=False,
        )
    assert float(h.aux_loss(batch["attention_mask"])) == pytest.approx(
        float(out.aux_loss), rel=1e-6
    )


# -- the trainer ----------------------------------------------------------------------------


def engine_samples(model_dir, dtype="float32", n=3, seed=0):
    from gspo.rollout import make_engine

    eng = make_engine("torch", model_dir, dtype=dtype)
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]  # unequal: left padding in the engine
    groups = eng.generate(prompts, n=n, max_new_tokens=10, seed=seed, return_routing=True)
    flat_p = [p for p, g in zip(prompts, groups) for _ in g]
    flat_c = [c for g in groups for c in g]
    return flat_p, flat_c


def test_the_torch_engine_returns_the_experts_of_every_token_it_fed(model, tiny_moe_model_dir):
    prompts, comps = engine_samples(tiny_moe_model_dir)
    assert len({len(c.token_ids) for c in comps}) > 1  # rows stopped apart
    for p, c in zip(prompts, comps):
        assert set(c.routing) == {0, 1}
        assert all(t.shape == (len(p) + len(c.token_ids) - 1, 2) for t in c.routing.values())
    batch = pad_batch(prompts, [c.token_ids for c in comps], pad_id=0)
    B, L = batch["input_ids"].shape
    eng = moe.engine_routing(prompts, comps, L, num_experts=8)
    assert eng.shape == (B, L, 2)
    # the same fp32 weights: the engine's KV-cached forwards pick the trainer's experts
    with torch.no_grad():
        own, _ = record(model, batch)
    v = moe.volatility(eng, own, moe.response_positions(batch))
    assert v["moe/volatility"] <= 0.01 and v["moe/expert_overlap"] >= 0.99
    # and the picks are not trivial: they differ from the filler (experts 0, 1) somewhere
    assert any((t[:, :, 0] != 0).any() for t in eng.layers.values())


def test_engine_routing_refuses_a_completion_whose_routing_has_the_wrong_length(tiny_moe_model_dir):
    prompts, comps = engine_samples(tiny_moe_model_dir, n=1)
    comps[1].token_ids = comps[1].token_ids + [3]
    with pytest.raises(moe.RoutingError, match=r"sample 1: the engine routed \d+ tokens but fed"):
        moe.engine_routing(prompts, comps, 40, num_experts=8)


def test_a_dense_engine_or_an_unasked_one_returns_no_routing(tiny_model_dir, tiny_moe_model_dir):
    from gspo.rollout import make_engine

    _, comps = engine_samples(tiny_model_dir, n=1)
    assert all(c.routing is None for c in comps)
    assert moe.engine_routing([[1]], comps[:1], 8, num_experts=8) is None
    g = make_engine("torch", tiny_moe_model_dir).generate([[5, 6]], n=2, max_new_tokens=4, seed=0)
    assert all(c.routing is None for c in g[0])


def test_recording_under_replay_gives_both_the_used_and_the_routers_own_experts(model):
    batch = toy_batch()
    with torch.no_grad():
        old, _ = record(model, batch)
        perturb_routers(model)
        with moe.routing_hooks(model, record=True, replay=old) as h:
            sequence_logprobs(model, batch)
        free, _ = record(model, batch)
    assert all(torch.equal(h.routing().layers[i], old.layers[i]) for i in old.layers)
    own = h.routing(own=True)
    # the first layer sees the same input either way; later ones see the replayed layers' output
    assert torch.equal(own.layers[0], free.layers[0])
    assert not torch.equal(own.layers[0], old.layers[0])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe-data")
    write_jsonl(
        aime.generate(20, split="train", seed=0, difficulty=aime.Difficulty(1, 3)),
        d / "train.jsonl",
    )
    return d


@pytest.fixture
def text_rewards():
    """A random-initialised model never solves a problem; a deterministic reward of the text gives
    the groups reward variance so the updates move the routers (the trainer takes any reward
    function)."""
    return lambda recs, texts: [float(sum(map(ord, t)) % 2) for t in texts]


def moe_cfg(data, model_dir, out, **kw):
    base = dict(
        model=str(model_dir),
        out_dir=str(out),
        train_data=[DataSource(str(data / "train.jsonl"))],
        steps=2,
        prompts_per_step=2,
        group_size=4,
        minibatches=4,
        lr=3e-5,
        max_new_tokens=12,
        ckpt_every=2,
        threads=1,
    )
    base.update(kw)
    return RLConfig(**base)


def test_moe_only_options_on_a_dense_model_are_errors_naming_the_field(
    data, tiny_model_dir, tmp_path
):
    with pytest.raises(ConfigError, match=r"routing_replay: needs a Mixture-of-Experts policy"):
        trainer_mod.Trainer(
            moe_cfg(data, tiny_model_dir, tmp_path / "a", routing_replay=True), rewards
        )
    with pytest.raises(ConfigError, match=r"router_aux_loss_coef: needs a Mixture-of-Experts"):
        trainer_mod.Trainer(
            moe_cfg(data, tiny_model_dir, tmp_path / "b", router_aux_loss_coef=0.1), rewards
        )
    with pytest.raises(ConfigError, match=r"routing_replay: needs old_logprobs: recompute"):
        moe_cfg(data, tiny_model_dir, tmp_path, routing_replay=True, old_logprobs="rollout")


def test_a_dense_run_logs_no_moe_metrics(data, tiny_model_dir, tmp_path, text_rewards):
    trainer_mod.run_rl(moe_cfg(data, tiny_model_dir, tmp_path, steps=1), text_rewards)
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert not [k for k in row if k.startswith("moe/")] and "time_moe_s" not in row


def test_an_aux_loss_coefficient_adds_the_loss_and_changes_the_router_update(
    data, tiny_moe_model_dir, tmp_path, text_rewards
):
    gates = {}
    for coef in (0.0, 1.0):
        tr = trainer_mod.Trainer(
            moe_cfg(
                data,
                tiny_moe_model_dir,
                tmp_path / str(coef),
                router_aux_loss_coef=coef,
                minibatches=1,
            ),
            text_rewards,
        )
        batch = toy_batch(n=8)
        old_logp, _ = tr.old_logprobs(batch)
        adv = torch.tensor([1.0, -1.0] * 4)
        upd, skipped, _ = tr.update(batch, old_logp, adv, step=0)
        assert skipped == 0
        assert ("moe/aux_loss_train" in upd) == (coef > 0)
        gates[coef] = [g.weight.detach().clone() for _, _, g in moe.routers(tr.policy)]
        if coef:
            assert upd["moe/aux_loss_train"] > 0
    assert all(not torch.equal(a, b) for a, b in zip(gates[0.0], gates[1.0]))


@pytest.mark.parametrize("replay", [False, True])
def test_rl_on_tiny_moe_logs_volatility_load_balance_and_the_cache_size(
    data, tiny_moe_model_dir, tmp_path, text_rewards, replay
):
    trainer_mod.run_rl(
        moe_cfg(data, tiny_moe_model_dir, tmp_path, routing_replay=replay), text_rewards
    )
    rows = read_metrics(tmp_path / "metrics.jsonl")
    for r in rows:
        for key in (
            "moe/volatility",
            "moe/volatility/layer_0",
            "moe/volatility/layer_1",
            "moe/expert_overlap",
            "moe/load_entropy",
            "moe/load_entropy_min_layer",
            "moe/max_expert_share",
            "moe/expert_share/7",
            "moe/aux_loss",
            "moe/routing_cache_bytes",
            "time_moe_s",
        ):
            assert key in r, key
        assert 0 <= r["moe/volatility"] <= 1 and 0 < r["moe/load_entropy"] <= 1
        assert r["moe/routing_cache_bytes"] > 0
    # 4 updates per step move the near-uniform routers of a random model: some sets change
    assert any(0 < r["moe/volatility"] < 1 for r in rows)


def test_rollout_logprobs_measure_volatility_on_the_on_policy_minibatch(
    data, tiny_moe_model_dir, tmp_path, text_rewards
):
    trainer_mod.run_rl(
        moe_cfg(data, tiny_moe_model_dir, tmp_path, steps=1, old_logprobs="rollout"), text_rewards
    )
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert row["old_logprob_passes"] == 0
    assert 0 <= row["moe/volatility"] <= 1 and "moe/routing_cache_bytes" not in row


def test_engine_routing_replay_options_are_checked_with_a_fix(data, tiny_moe_model_dir, tmp_path):
    from gspo.config.train import RolloutConfig

    with pytest.raises(
        ConfigError, match=r"routing_replay_source: 'engine' says .* routing_replay: true"
    ):
        moe_cfg(data, tiny_moe_model_dir, tmp_path, routing_replay_source="engine")
    with pytest.raises(ConfigError, match=r"routing_replay_source: must be 'trainer' or 'engine'"):
        moe_cfg(
            data, tiny_moe_model_dir, tmp_path, routing_replay=True, routing_replay_source="vllm"
        )
    with pytest.raises(
        ConfigError, match=r"routing_replay_source: 'engine' needs rollout.engine: torch"
    ):
        moe_cfg(
            data,
            tiny_moe_model_dir,
            tmp_path,
            routing_replay=True,
            routing_replay_source="engine",
            rollout=RolloutConfig(engine="vllm"),
        )


@pytest.mark.parametrize("old_logprobs", ["recompute", "rollout"])
def test_rl_replaying_the_engines_routing_trains_and_logs_the_engine_trainer_mismatch(
    data, tiny_moe_model_dir, tmp_path, text_rewards, old_logprobs
):
    trainer_mod.run_rl(
        moe_cfg(
            data,
            tiny_moe_model_dir,
            tmp_path,
            routing_replay=True,
            routing_replay_source="engine",
            old_logprobs=old_logprobs,
        ),
        text_rewards,
    )
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["old_logprob_passes"] for r in rows] == (
        [1, 2] if old_logprobs == "recompute" else [0, 0]
    )
    for r in rows:
        assert 0 <= r["moe/engine_routing_mismatch"] <= 0.01  # fp32 engine: the same routers
        assert 0 <= r["moe/volatility"] <= 1 and r["moe/routing_cache_bytes"] > 0
        assert r["skipped_updates"] == 0


def test_a_bf16_engine_routes_some_tokens_unlike_the_fp32_trainer(
    data, tiny_moe_model_dir, tmp_path, text_rewards
):
    from gspo.config.train import RolloutConfig

    trainer_mod.run_rl(
        moe_cfg(
            data,
            tiny_moe_model_dir,
            tmp_path,
            steps=1,
            prompts_per_step=4,
            max_new_tokens=24,
            rollout=RolloutConfig(dtype="bfloat16"),
        ),
        text_rewards,
    )
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert 0 < row["moe/engine_routing_mismatch"] < 0.5


def test_a_stopped_replay_run_resumes_to_identical_weights_and_metrics(
    data, tiny_moe_model_dir, tmp_path, text_rewards, monkeypatch
):
    from safetensors.torch import load_file

    cfg = dict(steps=3, routing_replay=True, minibatches=2, prompts_per_step=1, max_new_tokens=8)
    full = trainer_mod.run_rl(
        moe_cfg(data, tiny_moe_model_dir, tmp_path / "full", **cfg), text_rewards
    )
    original = trainer_mod.Trainer.rollout

    def crash_at_step_3(self, step):
        if step == 2:
            raise KeyboardInterrupt("simulated stop")
        return original(self, step)

    monkeypatch.setattr(trainer_mod.Trainer, "rollout", crash_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        trainer_mod.run_rl(moe_cfg(data, tiny_moe_model_dir, tmp_path / "cut", **cfg), text_rewards)
    assert list_checkpoints(tmp_path / "cut" / "checkpoints")[-1].name == "step_000002"
    monkeypatch.setattr(trainer_mod.Trainer, "rollout", original)
    resumed = trainer_mod.run_rl(
        moe_cfg(data, tiny_moe_model_dir, tmp_path / "cut", **cfg), text_rewards
    )
    a, b = load_file(str(full / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]  # noqa: E731
    assert strip(read_metrics(tmp_path / "full" / "metrics.jsonl")) == strip(
        read_metrics(tmp_path / "cut" / "metrics.jsonl")
    )
