"""SFT and RL end to end on a toy problem set: resume, non-finite handling, one-switch methods."""

import functools
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from evaluators.tasks import reward, rewards
from gspo.config.train import DataSource, RLConfig, SFTConfig
from gspo.core.objectives import OBJECTIVES
from gspo.infra.checkpoint import list_checkpoints
from gspo.native import trainer as trainer_mod
from gspo.native.sft import run_sft
from gspo.tracking.runs import read_metrics

TIMING = {"wall_s", "time_rollout_s", "time_old_logprob_s", "time_update_s"}


@pytest.fixture(scope="module")
def data(toy_data):
    return toy_data


@pytest.fixture(scope="module")
def sft_model(toy_sft_model):
    return toy_sft_model


def rl_cfg(data, sft_model, out, **kw):
    base = dict(
        model=str(sft_model),
        out_dir=str(out),
        train_data=[DataSource(str(data / "train.jsonl"))],
        steps=4,
        prompts_per_step=4,
        group_size=4,
        minibatches=4,
        lr=1e-3,
        max_new_tokens=32,
        ckpt_every=2,
        threads=1,
        temperature=1.0,
    )
    base.update(kw)
    return RLConfig(**base)


def weights(model_dir):
    return load_file(str(model_dir / "model.safetensors"))


def test_sft_lowers_the_loss_and_writes_a_loadable_model(sft_model):
    metrics = read_metrics(sft_model.parent / "metrics.jsonl")
    assert metrics[-1]["loss"] < metrics[0]["loss"] * 0.6
    assert "greedy_accuracy" in metrics[-1]
    info = json.loads((sft_model.parent / "run_info.json").read_text())
    assert info["seed"] == 0 and info["git_commit"] and len(info["data_hashes"]) == 1
    assert (sft_model / "config.json").is_file() and (sft_model / "tokenizer.json").is_file()


@pytest.mark.parametrize("algorithm", list(OBJECTIVES))
def test_each_algorithm_trains_and_logs_the_step_metrics(data, sft_model, tmp_path, algorithm):
    cfg = rl_cfg(data, sft_model, tmp_path, algorithm=algorithm, log_samples_every=2)
    out = trainer_mod.run_rl(cfg, rewards)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # the samples of every 2nd step, to read: the step's rewards, what the update made of each
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == [
        "step_000002.jsonl",
        "step_000004.jsonl",
    ]
    samples = [json.loads(line) for line in (tmp_path / "samples" / "step_000004.jsonl").open()]
    assert len(samples) == 16 and {s["step"] for s in samples} == {4}
    assert sum(s["reward"] for s in samples) / 16 == pytest.approx(rows[3]["reward_mean"])
    prompts = {json.loads(line)["prompt"] for line in (data / "train.jsonl").open()}
    assert {s["prompt"] for s in samples} <= prompts and len({s["prompt"] for s in samples}) == 4
    assert all(0 <= s["clip_frac"] <= 1 and s["ratio"] > 0 for s in samples)
    # the on-policy first minibatch's 4 samples: ratio exactly 1, the later ones moved off it
    assert sum(s["ratio"] == 1.0 for s in samples) == 4 and len({s["ratio"] for s in samples}) > 2
    for key in (
        "reward_mean",
        "reward_std",
        "zero_variance_groups",
        "clip_frac_tokens",
        "clip_frac_seqs",
        "ratio_mean",
        "ratio_min",
        "ratio_max",
        "approx_kl",
        "entropy",
        "response_length",
        "grad_norm",
        "lr",
        "tokens_generated",
        "tokens_trained",
        "time_rollout_s",
        "time_old_logprob_s",
        "time_update_s",
        "compute_flops",
    ):
        assert key in rows[-1], key
    assert rows[-1]["compute_flops"] > rows[0]["compute_flops"] > 0
    assert any(r["zero_variance_groups"] < 1 for r in rows)  # the toy gives a learning signal
    assert max(r["approx_kl"] for r in rows) > 0  # 4 minibatches: later ones are off-policy
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == [
        "step_000002",
        "step_000004",
    ]
    assert not torch.equal(
        weights(out)["model.norm.weight"], weights(sft_model)["model.norm.weight"]
    )


def test_gspo_clips_far_more_tokens_than_grpo_under_the_papers_clip_ranges(
    data, sft_model, tmp_path
):
    fracs = {}
    for alg in ("gspo", "grpo"):
        trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path / alg, algorithm=alg, lr=2e-4), rewards)
        rows = read_metrics(tmp_path / alg / "metrics.jsonl")
        fracs[alg] = sum(r["clip_frac_tokens"] for r in rows) / len(rows)
    print(fracs)
    assert fracs["gspo"] > 5 * fracs["grpo"]


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_stopped_run_resumes_to_bit_identical_weights_and_metrics(
    data, sft_model, tmp_path, monkeypatch, precision
):
    # bf16: the model files hold bf16 weights, the checkpoint's Distributed Checkpoint the fp32
    # masters; resuming from the files alone would round the masters and change every number
    cfg = functools.partial(rl_cfg, precision=precision)
    full = trainer_mod.run_rl(cfg(data, sft_model, tmp_path / "full", steps=5), rewards)

    original = trainer_mod.Trainer.rollout

    def crash_at_step_4(self, step):
        if step == 3:
            raise KeyboardInterrupt("simulated stop")
        return original(self, step)

    monkeypatch.setattr(trainer_mod.Trainer, "rollout", crash_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        trainer_mod.run_rl(cfg(data, sft_model, tmp_path / "cut", steps=5), rewards)
    assert len(read_metrics(tmp_path / "cut" / "metrics.jsonl")) == 3  # steps 1-3 logged
    assert list_checkpoints(tmp_path / "cut" / "checkpoints")[-1].name == "step_000002"
    monkeypatch.setattr(trainer_mod.Trainer, "rollout", original)
    resumed = trainer_mod.run_rl(cfg(data, sft_model, tmp_path / "cut", steps=5), rewards)

    a, b = weights(full), weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[precision]
    assert {t.dtype for t in a.values()} == {dtype}
    assert json.loads((full / "config.json").read_text())["dtype"] == str(dtype).split(".")[1]
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]  # noqa: E731
    assert strip(read_metrics(tmp_path / "full" / "metrics.jsonl")) == strip(
        read_metrics(tmp_path / "cut" / "metrics.jsonl")
    )


def _nan_loss_on(calls_to_poison):
    real = trainer_mod.objectives.policy_loss
    count = {"n": 0}

    def poisoned(*args, **kw):
        loss, m = real(*args, **kw)
        count["n"] += 1
        if count["n"] in calls_to_poison:
            loss = loss * float("nan")
        return loss, m

    return poisoned


def test_a_single_nan_update_is_skipped_counted_and_logged(data, sft_model, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_mod.objectives, "policy_loss", _nan_loss_on({2}))
    out = trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path, steps=2), rewards)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[0]["skipped_updates"] == 1 and rows[1]["skipped_updates"] == 0
    assert rows[-1]["nonfinite_skips"] == 1
    assert all(torch.isfinite(v).all() for v in weights(out).values())


def test_repeated_nan_updates_stop_the_run_with_a_clear_message(
    data, sft_model, tmp_path, monkeypatch
):
    monkeypatch.setattr(trainer_mod.objectives, "policy_loss", _nan_loss_on(set(range(1, 100))))
    with pytest.raises(trainer_mod.TrainingError, match="3 non-finite updates in a row"):
        trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path, steps=2), rewards)


def test_a_missing_config_file_is_a_one_line_error():
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "--config", "nope.yaml"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "error: nope.yaml: config file not found"


def test_a_bad_field_in_the_config_names_the_field_and_the_fix(tmp_path, data):
    cfg = tmp_path / "rl.yaml"
    cfg.write_text(
        f"algorithm: gspo\ntrain_data: [{{path: {data}/train.jsonl}}]\n"
        "prompts_per_step: 3\ngroup_size: 5\nminibatches: 4\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "--config", str(cfg)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "minibatches: 4 does not divide the rollout batch of 15" in r.stderr


def test_rollout_logprobs_skip_the_recompute_pass_and_still_log_the_gap(data, sft_model, tmp_path):
    rec = trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path / "rec", steps=2), rewards)
    roll = trainer_mod.run_rl(
        rl_cfg(data, sft_model, tmp_path / "roll", steps=2, old_logprobs="rollout"), rewards
    )
    rows_rec = read_metrics(tmp_path / "rec" / "metrics.jsonl")
    rows_roll = read_metrics(tmp_path / "roll" / "metrics.jsonl")
    assert [r["old_logprob_passes"] for r in rows_rec] == [1, 2]
    assert [r["old_logprob_passes"] for r in rows_roll] == [0, 0]
    # Same engine, same float32 weights: the engine's log-probs equal the trainer's closely.
    for r in rows_rec + rows_roll:
        assert r["logprob_gap_token_max"] < 1e-3 and r["logprob_gap_seq_max"] < 1e-4
    assert rec.exists() and roll.exists()
    # recomputed old log-probs: the first minibatch's ratios are exactly 1, nothing is clipped
    assert all(r["clip_frac_tokens_onpolicy"] == 0.0 for r in rows_rec)


def test_bfloat16_rollout_logprobs_make_gspo_clip_even_its_on_policy_minibatch(
    data, sft_model, tmp_path
):
    # GSPO's band is 3e-4 / 4e-4 around 1; a bf16 engine's sequence-level log-prob gap is ~1e-3,
    # so with its log-probs as old ones some sequences sit outside the band before any update.
    # Whether the clip removes a gradient also depends on the advantage's sign, so one minibatch
    # (every sequence on-policy) and four steps give it sequences of both signs to act on.
    from gspo.config.train import RolloutConfig

    trainer_mod.run_rl(
        rl_cfg(
            data,
            sft_model,
            tmp_path,
            steps=4,
            minibatches=1,
            algorithm="gspo",
            old_logprobs="rollout",
            rollout=RolloutConfig(dtype="bfloat16"),
        ),
        rewards,
    )
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert all(r["logprob_gap_seq_max"] > 4e-4 for r in rows)  # outside the band
    assert max(r["clip_frac_tokens_onpolicy"] for r in rows) > 0.0


def test_a_bfloat16_rollout_engine_shows_a_visible_logprob_gap(data, sft_model, tmp_path):
    from gspo.config.train import RolloutConfig

    trainer_mod.run_rl(
        rl_cfg(data, sft_model, tmp_path, steps=1, rollout=RolloutConfig(dtype="bfloat16")), rewards
    )
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert row["logprob_gap_token_mean"] > 1e-3


def test_resuming_checkpoints_of_a_different_config_is_refused(data, sft_model, tmp_path):
    trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path, steps=2), rewards)
    trainer_mod.run_rl(
        rl_cfg(data, sft_model, tmp_path, steps=3), rewards
    )  # extending a run is fine
    with pytest.raises(trainer_mod.TrainingError, match="field 'lr' differs"):
        trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path, steps=4, lr=5e-4), rewards)


def test_activation_checkpointing_changes_no_number_of_a_step(data, sft_model, tmp_path):
    on = trainer_mod.Trainer(
        rl_cfg(data, sft_model, tmp_path / "probe", activation_checkpointing=True), rewards
    )
    assert on.policy.is_gradient_checkpointing  # the switch reaches the model
    runs = {}
    for ac in (False, True):
        out = trainer_mod.run_rl(
            rl_cfg(data, sft_model, tmp_path / str(ac), steps=1, activation_checkpointing=ac),
            rewards,
        )
        rows = [
            {k: v for k, v in r.items() if k not in TIMING}
            for r in read_metrics(tmp_path / str(ac) / "metrics.jsonl")
        ]
        runs[ac] = (rows, weights(out))
    assert len(runs[True][0]) == len(runs[False][0]) == 1
    assert runs[True][0][0] == pytest.approx(runs[False][0][0], rel=1e-5, abs=1e-9)
    for name, w in runs[False][1].items():
        torch.testing.assert_close(runs[True][1][name], w, rtol=1e-5, atol=1e-7)


def test_activation_checkpointing_is_refused_for_moe_models(data, tmp_path):
    from gspo.config.fields import ConfigError
    from gspo.model.models import build_tiny

    moe_dir = build_tiny("tiny-moe", tmp_path / "moe", seed=0)
    with pytest.raises(ConfigError, match="activation_checkpointing: not supported for Mixture"):
        trainer_mod.Trainer(
            rl_cfg(data, moe_dir, tmp_path / "rl", activation_checkpointing=True), rewards
        )


def test_keep_last_keeps_exactly_the_newest_complete_checkpoints_and_the_kept_steps(tmp_path):
    from gspo.infra.checkpoint import list_checkpoints, prune_checkpoints
    from gspo.io import atomic_dir

    root = tmp_path / "checkpoints"
    for step in (2, 4, 6, 8, 10):
        with atomic_dir(root / f"step_{step:06d}") as d:
            (d / "trainer_state.pt").write_text("x")
    (root / "step_000012").mkdir()  # incomplete: no trainer state
    half = root / ".step_000012.abc"  # a killed writer's temp folder
    half.mkdir()
    removed = prune_checkpoints(root, keep_last=2, keep_steps=[4])
    assert [p.name for p in list_checkpoints(root)] == ["step_000004", "step_000008", "step_000010"]
    assert not half.exists() and (root / "step_000012").exists()
    assert sorted(p.name for p in removed) == [".step_000012.abc", "step_000002", "step_000006"]
    assert prune_checkpoints(root, keep_last=0) == []  # 0 keeps every checkpoint


def test_a_run_with_keep_last_prunes_as_it_goes(data, sft_model, tmp_path):
    from gspo.infra.checkpoint import list_checkpoints

    trainer_mod.run_rl(
        rl_cfg(data, sft_model, tmp_path, steps=4, ckpt_every=1, keep_last=1, keep_steps=[2]),
        rewards,
    )
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == [
        "step_000002",
        "step_000004",
    ]
    assert (tmp_path / "model" / "model.safetensors").is_file()


def test_token_budget_micro_batches_pack_longest_first_within_the_budget():
    from gspo.native.data import micro_batches

    lengths = torch.tensor([5, 9, 3, 9, 4, 20])
    rows = torch.tensor([0, 1, 2, 3, 4, 5])
    packed = [m.tolist() for m in micro_batches(rows, lengths, 0, max_tokens=20)]
    assert packed == [[5], [1, 3], [0, 4, 2]]  # 20 alone; 2 x 9; 3 x 5
    assert all(len(m) * max(int(lengths[r]) for r in m) <= 20 for m in packed)
    assert sorted(r for m in packed for r in m) == rows.tolist()
    assert [m.tolist() for m in micro_batches(rows, lengths, 4, 0)] == [[0, 1, 2, 3], [4, 5]]
    # by length: the rows longest first (ties in row order), then `size` at a time
    assert [m.tolist() for m in micro_batches(rows, lengths, 4, 0, by_length=True)] == [
        [5, 1, 3, 0],
        [4, 2],
    ]


def test_a_right_padded_batch_needs_no_padding_mask_bit_for_bit(sft_model):
    from gspo.model.logprobs import causal_only, sequence_logprobs, token_logprobs
    from gspo.model.models import load_model
    from gspo.native.data import pad_batch

    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 60, (n,), generator=g).tolist() for n in (4, 9, 6, 12)]
    comps = [torch.randint(10, 60, (n,), generator=g).tolist() for n in (20, 3, 11, 7)]
    batch = pad_batch(prompts, comps, 0)
    assert causal_only(batch["attention_mask"]) is None
    left = batch["attention_mask"].flip(1)
    assert causal_only(left) is left  # left padding keeps its mask
    model, _ = load_model(sft_model)
    with torch.no_grad():
        fast = sequence_logprobs(model, batch, with_entropy=True)
        out = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
        )
    masked = token_logprobs(out.logits[:, :-1], batch["input_ids"][:, 1:])
    real = batch["attention_mask"][:, 1:].bool()
    for a, b in zip(fast, masked):
        assert torch.equal(a[real], b[real])


@pytest.mark.parametrize("minibatches", [4, 1])
def test_the_on_policy_minibatch_gives_its_rows_old_logprobs_and_the_pass_skips_them(
    data, sft_model, tmp_path, monkeypatch, minibatches
):
    """Before the step's first optimizer step the policy is the old one, so the first
    minibatch's forward gives its rows' old log-probs: the pass skips them (with one minibatch
    there is no pass) and the run is the one a full pass gives, bit for bit, over 2 epochs
    whose second reads those old log-probs again; the pass's compute is counted over the rows
    it ran."""
    kw = dict(steps=2, epochs=2, ckpt_every=2, minibatches=minibatches)
    trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path / "skip", **kw), rewards)
    monkeypatch.setattr(trainer_mod.Trainer, "_pass_rows", lambda self, step, rows: None)
    trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path / "full", **kw), rewards)
    skip, full = (read_metrics(tmp_path / r / "metrics.jsonl") for r in ("skip", "full"))
    for a, b in zip(skip, full):
        for k in ("reward_mean", "loss", "grad_norm", "clip_frac_tokens", "ratio_max", "ratio_min"):
            assert a[k] == b[k], k
        assert a["clip_frac_tokens_onpolicy"] == 0.0
        assert a["entropy"] == pytest.approx(b["entropy"], rel=1e-5)
    assert [r["old_logprob_passes"] for r in full] == [1, 2]
    assert [r["old_logprob_passes"] for r in skip] == ([1, 2] if minibatches > 1 else [0, 0])
    fs, ff = skip[0]["compute_flops"], full[0]["compute_flops"]
    # generation 1 + the pass 1 + 2 epochs x 3: a full pass is 1/8 of the full run's count;
    # skipping the first of 4 minibatches saves about a quarter of it, of 1 all of it
    if minibatches > 1:
        assert 0.1 * ff / 8 < ff - fs < 0.5 * ff / 8
    else:
        assert ff - fs == pytest.approx(ff / 8, rel=1e-9)
    for k, w in weights(tmp_path / "full" / "model").items():
        assert torch.equal(weights(tmp_path / "skip" / "model")[k], w), k


def test_a_token_budget_changes_the_update_only_by_float_rounding(data, sft_model, tmp_path):
    # One minibatch, so the update is on-policy and its ratios are 1 within rounding. Clipping
    # is a step function of the ratio: off-policy, where ratios spread over [0.002, 4] at this
    # learning rate, some sit within rounding of a clip edge and flip with the micro-batch
    # shapes, and the update then differs by more than rounding.
    runs = {}
    for budget in (0, 40):
        out = trainer_mod.run_rl(
            rl_cfg(
                data,
                sft_model,
                tmp_path / str(budget),
                steps=1,
                minibatches=1,
                max_tokens_per_micro_batch=budget,
            ),
            rewards,
        )
        rows = [
            {k: v for k, v in r.items() if k not in TIMING}
            for r in read_metrics(tmp_path / str(budget) / "metrics.jsonl")
        ]
        runs[budget] = (rows[0], weights(out))
    assert runs[40][0] == pytest.approx(runs[0][0], rel=1e-4, abs=1e-6)
    for name, w in runs[0][1].items():
        assert (runs[40][1][name] - w).norm() <= 1e-5 * w.norm(), name


@pytest.mark.parametrize("split", [{"micro_batch_size": 3}, {"max_tokens_per_micro_batch": 64}])
def test_sft_gradient_accumulation_changes_only_float_rounding(data, tmp_path, split):
    runs = {}
    for name, extra in (("whole", {}), ("split", split)):
        cfg = SFTConfig(
            model="tiny",
            out_dir=str(tmp_path / name),
            steps=3,
            batch_size=8,
            train_data=[DataSource(str(data / "train.jsonl"))],
            threads=1,
            log_every=1,
            **extra,
        )
        runs[name] = (read_metrics_of(run_sft(cfg, reward)), weights(tmp_path / name / "model"))
    assert [r["loss"] for r in runs["split"][0]] == pytest.approx(
        [r["loss"] for r in runs["whole"][0]], rel=1e-5
    )
    for k, w in runs["whole"][1].items():
        assert (runs["split"][1][k] - w).norm() <= 1e-5 * w.norm(), k


def read_metrics_of(model_dir):
    return read_metrics(model_dir.parent / "metrics.jsonl")


def test_mfu_is_each_phases_model_flops_over_its_time_and_the_devices_peak():
    from gspo.native.step_metrics import mfu

    # 3 forward passes of 1e12 FLOPs in 2 s on 1e12 FLOP/s: 1.5; phases that did not run: none
    assert mfu(1e12, {"update": (3, 2.0), "old_logprob": (0, 1.0), "rollout": (1, 0.0)}, 1e12) == {
        "mfu_update": 1.5
    }


def test_a_run_given_the_peak_flops_logs_mfu_per_phase(data, sft_model, tmp_path):
    peak = 1e9
    trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path, steps=2, peak_flops=peak), rewards)
    first, r = read_metrics(tmp_path / "metrics.jsonl")
    # a dense step charges 1 (generation) + 3 per epoch forward passes over the step's F(L),
    # plus the old-log-prob pass over the rows outside the on-policy first minibatch
    f = r["mfu_rollout"] * r["time_rollout_s"] * peak
    f_pass = r["compute_flops"] - first["compute_flops"] - (1 + 3 * 1) * f
    assert 0.5 * f < f_pass < 0.9 * f  # 3 of 4 minibatches' rows, lengths differing
    assert r["mfu_update"] == pytest.approx(3 * f / (r["time_update_s"] * peak), rel=1e-6)
    assert r["mfu_old_logprob"] == pytest.approx(
        f_pass / (r["time_old_logprob_s"] * peak), rel=1e-6
    )
    trainer_mod.run_rl(rl_cfg(data, sft_model, tmp_path / "plain", steps=1), rewards)
    assert not any(
        k.startswith("mfu") for k in read_metrics(tmp_path / "plain" / "metrics.jsonl")[0]
    )


def test_the_old_logprob_pass_keeps_to_the_token_budget_and_computes_the_same_logprobs(
    data, sft_model, tmp_path
):
    """Issue 23 #3: the no-grad pass over the whole rollout batch ran as one forward whatever
    the budget (real-scale: 256 sequences x ~8.5K tokens, out of memory at step 1)."""
    from gspo.native.data import pad_batch

    g = torch.Generator().manual_seed(0)
    lengths = [3, 30, 7, 18, 25, 4, 11, 29]
    prompts = [[5, 6, 7]] * len(lengths)
    comps = [torch.randint(10, 60, (n,), generator=g).tolist() for n in lengths]
    batch = pad_batch(prompts, comps, 0)
    out = {}
    for budget in (0, 64):
        tr = trainer_mod.Trainer(
            rl_cfg(data, sft_model, tmp_path / str(budget), max_tokens_per_micro_batch=budget),
            rewards,
        )
        shapes = []
        hook = tr.policy.register_forward_pre_hook(
            lambda m, args, kw, into=shapes: into.append(tuple(kw["input_ids"].shape)),
            with_kwargs=True,
        )
        out[budget] = tr.old_logprobs(batch)
        hook.remove()
        out[budget] += (shapes,)
    # no budget: a minibatch's share of the rows (8 / 4 minibatches) a forward, longest first,
    # each forward cut to its longest row
    full = sorted((3 + n for n in lengths), reverse=True)
    assert out[0][2] == [(2, full[j]) for j in range(0, 8, 2)]
    assert len(out[64][2]) > 1 and all(b * t <= 64 or b == 1 for b, t in out[64][2])
    mask = batch["target_mask"].bool()
    for whole, split in zip(out[0][:2], out[64][:2]):
        assert whole.shape == split.shape
        torch.testing.assert_close(split[mask], whole[mask], rtol=1e-5, atol=1e-6)


def test_the_greedy_check_decodes_what_the_rollout_engine_decodes_greedily(data, sft_model):
    # gspo.native.sft.greedy_decode runs the model's own forward (what FSDP shards); the torch engine
    # its own loop over the layers: the same model must give the same completions
    import copy

    from gspo.config.train import PromptConfig
    from gspo.io import read_jsonl
    from gspo.model import tokens
    from gspo.model.models import load_model
    from gspo.native.sft import greedy_decode
    from gspo.rollout.torch_engine import TorchEngine

    model, tok = load_model(sft_model)
    codec = tokens.codec(tok, sft_model, PromptConfig())
    prompts = [codec.prompt(r["prompt"]) for r in read_jsonl(data / "train.jsonl")[:8]]
    ours = greedy_decode(model.eval(), prompts, 24, codec.stop_ids)
    theirs = TorchEngine(None, model=copy.deepcopy(model)).generate(
        prompts, n=1, temperature=0.0, max_new_tokens=24, seed=0, stop_token_ids=codec.stop_ids
    )
    assert ours == [g[0].token_ids for g in theirs]
    assert any(t[-1] in codec.stop_ids for t in ours)  # rows stopped on their own


def test_dapo_masks_truncated_responses_and_punishes_overlong_ones(data, sft_model, tmp_path):
    # 8 new tokens: most toy answers are cut, so the shaping has something to act on
    trainer_mod.run_rl(
        rl_cfg(data, sft_model, tmp_path, algorithm="dapo", steps=1, max_new_tokens=8), rewards
    )
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert 0 < row["truncated_masked"] <= 1
    assert -1 <= row["overlong_penalty_mean"] < 0  # buffer 8 / 5 = 1 token: -1 when cut
    # dynamic sampling: 8 tokens solve nothing, every group's rewards are equal, so all three
    # draws (the cap) run and dropped groups fill the batch
    assert (row["groups_dropped"], row["groups_unfilled"], row["sampling_rounds"]) == (1.0, 1.0, 3)
    cfg = rl_cfg(data, sft_model, tmp_path / "g", algorithm="grpo", steps=1)
    assert (cfg.mask_truncated, cfg.overlong_buffer) == (False, 0)


def test_rollout_correction_weighs_a_bfloat16_engine_against_the_trainer(data, sft_model, tmp_path):
    from gspo.config.train import RolloutConfig

    trainer_mod.run_rl(
        rl_cfg(
            data,
            sft_model,
            tmp_path,
            steps=1,
            rollout=RolloutConfig(dtype="bfloat16"),
            rollout_correction="token_mask",
            rollout_correction_min=0.99,
            rollout_correction_max=1.01,
        ),
        rewards,
    )
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    # bf16 rounding moves some token weights past 1 +- 1%: those tokens drop out of the loss
    assert 0 < row["rollout_is_zeroed"] < 0.5 and row["rollout_is_mean"] != 1.0
    with pytest.raises(Exception, match="rollout_correction: weighs the trainer's old"):
        rl_cfg(data, sft_model, tmp_path, rollout_correction="token_mask", old_logprobs="rollout")


def test_off_policy_sequence_masking_drops_drifted_negative_sequences_in_a_step(
    data, sft_model, tmp_path
):
    # threshold 0: a negative-advantage sequence whose log-probs the earlier minibatches' updates
    # lowered at all drops out; the on-policy first minibatch has no drift and keeps every one
    trainer_mod.run_rl(
        rl_cfg(data, sft_model, tmp_path, algorithm="grpo", steps=1, opsm_threshold=0.0), rewards
    )
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert 0 < row["opsm_masked_seqs"] < 0.5  # minibatch mean; positive advantages are kept


def test_icepop_masks_the_tokens_whose_engine_weight_leaves_its_band(data, sft_model, tmp_path):
    from gspo.config.train import RolloutConfig

    # a bfloat16 engine beside the float32 trainer, a band of +-1%: some tokens drop out
    trainer_mod.run_rl(
        rl_cfg(
            data,
            sft_model,
            tmp_path,
            steps=1,
            rollout=RolloutConfig(dtype="bfloat16"),
            rollout_correction="icepop",
            icepop_min=0.99,
            icepop_max=1.01,
        ),
        rewards,
    )
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert 0 < row["icepop_masked"] < 0.5 and row["icepop_masked"] == row["rollout_is_zeroed"]
