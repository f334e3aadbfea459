"""SFT on TRL's SFTTrainer (`engine: trl`, gspo.engines.trl.sft): every SFTConfig field mapped, refused or
honoured by the harness (and the docs table the same), TRL's own config accepting the mapping,
and real TRL runs: 12 steps equal to the native stage's step for step, on one process and on 2
gloo ranks (FSDP2, as on GPUs), with the native stage's files and metric names."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import subprocess
import sys

import pytest

from gspo.config.fields import ConfigError
from gspo.config.train import DataSource, SFTConfig
from gspo.engines.trl import sft as trl_sft

ROOT = pathlib.Path(__file__).resolve().parents[1]

# field -> a value that changes TRL's arguments
ARGS = {
    "steps": 7,
    "batch_size": 8,
    "micro_batch_size": 4,
    "grad_clip": 0.5,
    "activation_checkpointing": True,
    "precision": "bfloat16",
    "seed": 3,
    "device": "cuda",
    "max_tokens_per_micro_batch": 64,
}
# fields that reach TRL through the tokenized records (rows) or the native optimizer, schedule
# and greedy check the harness hands it: the equal-runs test below holds them
THROUGH_HARNESS = {
    "train_data",
    "max_len",
    "prompt",
    "lr",
    "warmup_steps",
    "min_lr_ratio",
    "weight_decay",
    "eval_data",
    "eval_problems",
    "eval_every",
    "log_every",
    "engine",
    "model",
    "init_seed",
    "out_dir",
    "threads",
}
REFUSED = {"logprob_chunk": 16}


def cfg_of(**kw) -> SFTConfig:
    return SFTConfig(**{"train_data": [DataSource("x.jsonl")], "batch_size": 16, **kw})


def test_every_sftconfig_field_is_mapped_refused_or_honoured_by_the_harness():
    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    assert set(trl_sft.FIELDS) == fields
    assert set(ARGS) | THROUGH_HARNESS | set(REFUSED) == fields
    base = trl_sft.sft_args(cfg_of())
    for field, value in ARGS.items():
        assert trl_sft.sft_args(cfg_of(**{field: value})) != base, field


@pytest.mark.parametrize("field", list(REFUSED))
def test_a_value_trl_cannot_honour_is_a_one_line_error_naming_the_field(field):
    with pytest.raises(ConfigError) as e:
        trl_sft.check(cfg_of(**{field: REFUSED[field]}))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{field}: not supported with engine: trl")


def test_trls_own_sftconfig_accepts_the_mapping(tmp_path):
    from gspo.engines.trl.rl import _trl

    args = _trl().SFTConfig(
        output_dir=str(tmp_path), **trl_sft.sft_args(cfg_of(batch_size=16, micro_batch_size=4), 2)
    )
    # a step: 2 ranks x 4 sequences x 2 accumulated micro-batches = the batch of 16
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 2)
    assert args.completion_only_loss and args.train_sampling_strategy == "sequential"


def test_the_docs_table_is_the_codes_mapping():
    text = (ROOT / "docs" / "ENGINES.md").read_text().split("## SFT on TRL's SFTTrainer")[1]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|$", text.split("\n## ")[0], re.M))
    assert rows == trl_sft.FIELDS


def test_the_native_stage_refuses_a_trl_config_rather_than_train_it_natively(tmp_path):
    from gspo.native.sft import run_sft

    with pytest.raises(ConfigError, match="gspo.engines.trl.sft.run_sft"):
        run_sft(cfg_of(engine="trl", out_dir=str(tmp_path / "sft")))
    assert not (tmp_path / "sft").exists()


def test_a_refused_field_stops_the_stage_before_anything_is_written(tmp_path, toy_data):
    from evaluators.tasks import reward
    from gspo.engines.trl.sft import run_sft

    cfg = cfg_of(
        engine="trl",
        out_dir=str(tmp_path / "sft"),
        logprob_chunk=16,
        train_data=[DataSource(str(toy_data / "train.jsonl"))],
    )
    with pytest.raises(ConfigError, match="^logprob_chunk: not supported with engine: trl"):
        run_sft(cfg, reward)
    assert not (tmp_path / "sft").exists()


# -- real TRL runs -----------------------------------------------------------------------------


def _sft(tmp_path, toy_data, engine, **kw) -> SFTConfig:
    return SFTConfig(
        engine=engine,
        model="tiny",
        out_dir=str(tmp_path / engine),
        steps=12,
        batch_size=16,
        lr=1e-2,
        warmup_steps=3,
        log_every=2,
        eval_every=5,
        eval_problems=8,
        threads=1,
        train_data=[DataSource(str(toy_data / "train.jsonl"))],
        eval_data=str(toy_data / "train.jsonl"),
        **kw,
    )


def _records(out) -> list[dict]:
    return [
        json.loads(line) for line in (pathlib.Path(out) / "metrics.jsonl").read_text().splitlines()
    ]


EXACT = ("step", "lr", "tokens_trained", "compute_flops")


def _same_numbers(native: list[dict], trl: list[dict]) -> None:
    assert [r["step"] for r in trl] == [r["step"] for r in native]
    for a, b in zip(native, trl):
        assert {k: a[k] for k in EXACT} == {k: b[k] for k in EXACT}
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert ("greedy_accuracy" in a) == ("greedy_accuracy" in b)
        assert b.get("greedy_accuracy") == a.get("greedy_accuracy")
    assert trl[0]["loss"] == native[0]["loss"]  # step 1: the same model and records


@pytest.fixture(scope="module")
def both(tmp_path_factory, toy_data):
    """The same 12 SFT steps on the native stage and on TRL."""
    from evaluators.tasks import reward
    from gspo.engines.trl import sft as trl_sft
    from gspo.native import sft

    tmp = tmp_path_factory.mktemp("trl_sft")
    sft.run_sft(_sft(tmp, toy_data, "native"), reward)
    trl_sft.run_sft(_sft(tmp, toy_data, "trl"), reward)
    return tmp


@pytest.mark.slow
def test_trl_sft_equals_the_native_stage_step_for_step(both):
    native, trl = _records(both / "native"), _records(both / "trl")
    assert [r["step"] for r in native] == [1, 3, 5, 7, 9, 11, 12]
    _same_numbers(native, trl)
    # the greedy check at the native stage's steps: a logged step past eval_every, and the last
    assert [r["step"] for r in trl if "greedy_accuracy" in r] == [11, 12]
    assert any(k.startswith("trl/") for k in trl[0])


@pytest.mark.slow
def test_trl_sft_writes_the_files_the_workflow_reads(both):
    from gspo.model.models import load_model

    summary = json.loads((both / "trl" / "summary.json").read_text())
    native = json.loads((both / "native" / "summary.json").read_text())
    assert set(native) <= set(summary) and summary["engine"] == "trl"
    assert summary["compute_flops"] == native["compute_flops"]
    meta = json.loads(
        (both / "trl" / "checkpoints" / "step_000012" / "checkpoint.json").read_text()
    )
    assert meta["step"] == 12 and meta["compute_flops"] == native["compute_flops"]
    info = json.loads((both / "trl" / "run_info.json").read_text())
    assert info["engine"] == "trl" and info["trl_version"]
    # the final weights: the native stage's up to float rounding
    a, _ = load_model(both / "native" / "model")
    b, _ = load_model(both / "trl" / "model")
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert (p - q).abs().max() < 1e-4, name
    assert not list(both.glob("trl/trl/checkpoint-*"))  # SFT starts over: none kept


@pytest.mark.slow
def test_trl_sft_on_two_ranks_equals_one_process(tmp_path, both, toy_data):
    import yaml

    from gspo.config.fields import to_dict

    cfg = to_dict(_sft(tmp_path, toy_data, "trl"))
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "pipeline.sft",
            "--config",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    _same_numbers(_records(both / "trl"), _records(tmp_path / "trl"))
    summary = json.loads((tmp_path / "trl" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["sharding"] == "fsdp2"  # as on GPUs, not DDP
    from gspo.model.models import load_model

    # the model gathered from the shards: one process's up to float rounding
    a, _ = load_model(both / "trl" / "model")
    b, _ = load_model(tmp_path / "trl" / "model")
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert (p - q).abs().max() < 1e-4, name  # Adam over 12 steps
