"""`engine: trl` at real scale (issue 43): TRL micro-batches by the token budget rather than
running a rank's whole minibatch in one forward (refused on CUDA without a budget), and only
rank 0 reads the model's weights (the other ranks get theirs from it through accelerate's
FSDP2 preparation; tests/test_trl_sft.py's 2-rank run equal to one process shows they do)."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

import pytest
import yaml

from gspo.config.fields import ConfigError, load
from gspo.config.train import DataSource, RLConfig, SFTConfig
from gspo.engines.trl import batch as trl_batch
from gspo.engines.trl import fsdp as trl_fsdp
from gspo.engines.trl import rl as trl_engine
from gspo.engines.trl import sft as trl_sft
from gspo.infra import distributed as dist

ROOT = pathlib.Path(__file__).resolve().parents[1]


def real_scale(tmp_path, section: str, cls, **kw):
    d = yaml.safe_load((ROOT / "config" / "real-scale.yaml").read_text())[section]
    d = {k: v for k, v in {**d, **kw}.items() if v is not None}
    path = tmp_path / f"{section}.yaml"
    path.write_text(yaml.safe_dump({**d, "train_data": [{"path": "x.jsonl"}]}))
    return load(cls, path)


def test_the_token_budget_sets_trls_micro_batch_the_largest_divisor_that_fits():
    # real-scale RL: a rank's minibatch 128 x 16 / 4 / 8 = 64 sequences of ~1K + 8K tokens
    assert trl_batch.micro_batch(0, 32768, 64, 1024 + 8192) == 2  # 32768 // 9216 = 3
    assert trl_batch.micro_batch(0, 32768, 48, 9216) == 3
    assert trl_batch.micro_batch(0, 100, 64, 9216) == 1  # one sequence at least
    assert trl_batch.micro_batch(0, 10**9, 64, 9216) == 64  # all of it fits
    assert trl_batch.micro_batch(8, 32768, 64, 9216) == 2  # the budget replaces it
    assert trl_batch.micro_batch(8, 0, 64, 9216) == 8
    assert trl_batch.micro_batch(0, 0, 64, 9216) == 64


def test_real_scale_rl_under_trl_micro_batches_by_its_budget_and_refuses_none(tmp_path):
    cfg = real_scale(tmp_path, "rl", RLConfig, engine="trl", logprob_chunk=0)
    world = dist.World(rank=0, size=8, device="cuda:0")
    trl_engine.check(cfg, world)  # what the config's comment says runs
    args = trl_engine.grpo_args(cfg, 8, prompt_len=1024)
    assert args["per_device_train_batch_size"] == 2
    assert args["gradient_accumulation_steps"] == 32  # 2 x 32 = a rank's 64
    assert args["steps_per_generation"] == 4 * 32
    # the comment's warning: without the budget a rank's 64 sequences would be one forward
    whole = dataclasses.replace(cfg, max_tokens_per_micro_batch=0)
    assert trl_engine.grpo_args(whole, 8)["per_device_train_batch_size"] == 64
    with pytest.raises(ConfigError) as e:
        trl_engine.check(whole, world)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(
        "max_tokens_per_micro_batch: 0 (and "
        "micro_batch_size 0) puts a rank's whole "
        "minibatch of 64 sequences in one forward"
    )
    trl_engine.check(dataclasses.replace(whole, micro_batch_size=4), world)  # or bounded so
    trl_engine.check(dataclasses.replace(whole, device="cpu"), world)  # CPU: tiny runs


def test_real_scale_sft_under_trl_micro_batches_by_its_budget(tmp_path):
    cfg = real_scale(tmp_path, "sft", SFTConfig, engine="trl", logprob_chunk=None)
    cfg = dataclasses.replace(cfg, logprob_chunk=0)
    world = dist.World(rank=0, size=8, device="cuda:0")
    trl_sft.check(cfg, world)
    share = cfg.batch_size // 8
    args = trl_sft.sft_args(cfg, 8, cfg.max_len)
    micro = args["per_device_train_batch_size"]
    assert micro * cfg.max_len <= cfg.max_tokens_per_micro_batch and share % micro == 0
    assert micro * args["gradient_accumulation_steps"] == share
    with pytest.raises(ConfigError, match=r"^max_tokens_per_micro_batch: 0 .* whole step of "):
        trl_sft.check(dataclasses.replace(cfg, max_tokens_per_micro_batch=0), world)


def test_only_rank_0_reads_the_weights_under_trl(tmp_path, toy_sft_model):
    """A rank other than 0 loads a model folder with no weight file at all: it reads none; rank
    0 and a world of one read them; several ranks ask accelerate for rank 0's (FSDP2's
    cpu_ram_efficient_loading)."""
    import torch

    bare = tmp_path / "bare"
    shutil.copytree(toy_sft_model, bare, ignore=shutil.ignore_patterns("*.safetensors"))
    model, _ = trl_fsdp.load(bare, dist.World(rank=1, size=2, local_rank=1))
    assert all(p.device == torch.device("cpu") for p in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    with pytest.raises(OSError):
        trl_fsdp.load(bare, dist.World(rank=0, size=2))
    with pytest.raises(OSError):
        trl_fsdp.load(bare, dist.World())
    full, _ = trl_fsdp.load(toy_sft_model, dist.World(rank=0, size=2))
    assert torch.count_nonzero(next(full.parameters())) > 0
    assert trl_fsdp.fsdp_args(2)["fsdp_config"]["cpu_ram_efficient_loading"] is True
    cfg = RLConfig(engine="trl", train_data=[DataSource("x.jsonl")])
    args = trl_engine._trl().GRPOConfig(
        output_dir=str(tmp_path / "o"), **trl_engine.grpo_args(cfg, world_size=2)
    )
    assert args.fsdp_plugin_args["cpu_ram_efficient_loading"] is True
