"""The per-GPU memory plan (gspo.infra.memory_plan, pipeline.memory_plan): parameter counts against real
models, the arithmetic by hand, and the shipped real-scale settings fitting where the settings
before issue 23 did not."""

import json
import pathlib
import subprocess
import sys

import pytest

from gspo.infra.memory_plan import GIB, PRESETS, RESERVE_GIB, Settings, Shape, plan

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preset", ["tiny", "tiny-moe"])
def test_the_parameter_count_is_the_models_own(preset, tmp_path):
    from transformers import AutoModelForCausalLM

    from gspo.model.models import build_tiny

    d = build_tiny(preset, tmp_path / preset, seed=0)
    model = AutoModelForCausalLM.from_pretrained(d)
    shape = Shape.of(json.loads((d / "config.json").read_text()))
    assert shape.params() == sum(p.numel() for p in model.parameters())
    layer = model.model.layers[0]
    assert shape.layer_params() == sum(p.numel() for p in layer.parameters())


def test_the_public_checkpoints_counts():
    # Qwen3-1.7B: 1.7B with tied embeddings (1.4B without them); Qwen3-8B: 8.2B
    small, large = Shape.of(PRESETS["Qwen3-1.7B"]), Shape.of(PRESETS["Qwen3-8B"])
    assert small.params() == 1_720_574_976
    assert small.params() - small.root_params() == pytest.approx(1.41e9, rel=0.01)
    assert large.params() == pytest.approx(8.19e9, rel=0.005)
    # K and V: 2 x 36 layers x 8 heads x 128 x 2 bytes
    assert large.kv_bytes_per_token() == 147_456


def test_the_phases_by_hand():
    shape = Shape(
        vocab=1000,
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=16,
        intermediate=128,
        tied=True,
    )
    s = Settings(
        gpus=2,
        gpu_gib=1.0,
        micro_tokens=100,
        logprob_chunk=10,
        engine_share=0.5,
        sleep=True,
        seq_len=50,
        sequences_per_rank=4,
        sync="streamed",
    )
    p = plan(shape, s)
    P, layer = shape.params(), shape.layer_params()
    assert layer == 64 * 64 + 2 * 64 * 32 + 64 * 64 + 32 + 3 * 64 * 128 + 128
    persistent = 12 * P / 2 / GIB
    act = (100 * 64 * 2 * 2 + 2 * 100 * 2 * (4 * 64 + 2 * 64 + 2 * 32 + 4 * 128)) / GIB
    head = 3 * 10 * 1000 * 4 / GIB
    gathered = 2 * (1000 * 64 + 64 + 2 * layer) / GIB
    want = persistent + 4 * P / 2 / GIB + gathered + 6 * layer / GIB + act + head + RESERVE_GIB
    assert p["phases"]["update"] == pytest.approx(want)
    assert p["phases"]["rollout"] == pytest.approx(persistent + 0.5 + RESERVE_GIB)
    assert p["items"]["sync buffer"] == pytest.approx(6 * 1000 * 64 / GIB)  # the embeddings
    assert not p["fits"]  # 3 GiB of reserve on a 1 GiB GPU


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "pipeline.memory_plan", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("model", ["Qwen3-1.7B", "Qwen3-8B"])
def test_the_shipped_real_scale_settings_fit_on_8_h100s(model):
    r = _cli("--config", "config/real-scale.yaml", "--model", model)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fits: True" in r.stdout and "| weight sync |" in r.stdout
    assert "| host, weight sync |" in r.stdout


def test_the_settings_before_issue_23_did_not_fit_8b(tmp_path):
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / "real-scale.yaml").read_text())
    cfg["rl"]["rollout"] = {"engine": "vllm", "device": "cuda", "dtype": "bfloat16"}
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(cfg))
    r = _cli("--config", str(old), "--model", "Qwen3-8B", "--sync", "full")
    assert r.returncode == 1 and "fits: False" in r.stdout
    # ~6 concurrent 9K-token rollouts in a 30% share, the whole model in fp32 + bf16 to sync
    assert "6.0 sequences" in r.stdout and "| sync buffer | 45.8 |" in r.stdout


def test_the_host_memory_of_a_node_counts_one_sync_file_and_one_model_read():
    """Issue 43 #1 and #3: the vLLM sync's file written once per node, not by each of its 8
    ranks (8 x 2 bytes a parameter: ~131 GB at 8B), and the fp32 model read by rank 0 alone."""
    shape = Shape.of(PRESETS["Qwen3-8B"])
    P = shape.params()
    now = plan(shape, Settings())["host"]
    assert now["items"]["sync: files in /dev/shm"] == pytest.approx(2 * P / GIB)
    assert now["items"]["model read at load (fp32)"] == pytest.approx(4 * P / GIB)
    assert now["fits"]
    before = plan(shape, Settings(sync_writers="rank", load="every", shm_gib=64.0))
    assert (
        before["host"]["items"]["sync: files in /dev/shm"] * GIB / 1e9
        == pytest.approx(8 * 2 * P / 1e9)
        == pytest.approx(131, abs=1)
    )
    assert before["host"]["items"]["model read at load (fp32)"] == pytest.approx(32 * P / GIB)
    assert not before["host"]["fits"] and not before["fits"]  # 122 GiB of files, 64 of shm
    assert plan(shape, Settings(shm_gib=64.0))["fits"]  # one file: 15 GiB


def test_a_bad_model_or_config_is_one_line(tmp_path):
    r = _cli("--config", "config/real-scale.yaml", "--model", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nowhere" in r.stderr
    r = _cli("--config", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "missing.yaml does not exist" in r.stderr
