"""benchmarks/gpu_check.py's own code path, run for real on CPU (`--smoke`: the tiny preset, the
torch engine) in a fresh interpreter as a user would: through benchmarks/device_check.sh as on the
lent GPU image (no vLLM, MLflow or Snakemake importable; tests/image_site), torchrun's world of one
with its collectives, every phase reported in the table and the JSON line with plausible numbers;
plain `python benchmarks/gpu_check.py`, a failing phase named in one line, a non-zero exit, and the
phases after it still run."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
PHASES = ("build", "sft", "rl_trl", "rl", "resume", "eval")
sys.path.insert(0, str(ROOT / "benchmarks"))
import device_image  # noqa: E402


def smoke(tmp_path, *flags):
    r = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--smoke",
            "--work",
            str(tmp_path / "work"),
            "--json",
            str(tmp_path / "report.json"),
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = r.stdout.strip().splitlines()
    assert lines, r.stderr[-3000:]
    report = json.loads(lines[-1])
    assert json.loads((tmp_path / "report.json").read_text()) == report
    return r, report


def row(stdout: str, phase: str) -> str:
    rows = [ln for ln in stdout.splitlines() if re.match(rf"{phase}\s+(ok|failed)\s+\d+\.\d\s", ln)]
    assert len(rows) == 1, stdout[-3000:]
    return rows[0]


def image_env(tmp_path) -> dict:
    """This machine as the lent image: the modules it lacks unfindable (tests/image_site), no
    wheels folder (the carried ones are installed here at the same versions: checked below)."""
    return dict(
        os.environ,
        PYTHON=sys.executable,
        GSPO_WHEELS=str(tmp_path / "no-wheels"),
        PYTHONPATH=str(ROOT / "tests" / "image_site"),
        GSPO_IMAGE_BLOCKED=",".join(device_image.BLOCKED),
        OMP_NUM_THREADS="1",
        GSPO_CHECK_LIMIT_S="900",
    )  # a shared 2-core machine: its 330 s is a GPU's


def test_the_simulated_image_lacks_what_the_lent_one_lacks(tmp_path):
    probe = (
        "import importlib.util as u, importlib.metadata as m\n"
        "print([u.find_spec(n) is None for n in ('vllm', 'mlflow', 'trl', 'torch')])\n"
        "import vllm"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe],
        env=image_env(tmp_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.strip() == "[True, True, False, False]"
    assert "ModuleNotFoundError: No module named 'vllm'" in r.stderr
    # the GPU size there samples and evaluates with the torch engine, not vLLM
    probe = "import gpu_check; print(gpu_check.parse_args([]).engine)"
    r = subprocess.run(
        [sys.executable, "-c", probe],
        env=image_env(tmp_path),
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.strip() == "torch", r.stderr[-2000:]
    # what the check carries stands in for its wheels here: the same versions
    for name, version in device_image.WHEELS.items():
        assert importlib.metadata.version(name) == version, name


@pytest.mark.slow
def test_the_device_check_runs_every_phase_under_the_images_limits(tmp_path):
    """benchmarks/device_check.sh --smoke: torchrun, a world of one with its collectives on
    gloo (GSPO_COLLECTIVES=1: FSDP2 and every collective as on several ranks), the torch engine
    where vLLM is absent, TRL, the bit-exact resume; every number plausible."""
    r = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "device_check.sh"), "--smoke"],
        env=image_env(tmp_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1000,
    )
    lines = r.stdout.strip().splitlines()
    assert lines, r.stderr[-3000:]
    report = json.loads(lines[-1])
    assert r.returncode == 0, (report.get("failures"), r.stderr[-4000:])
    assert "FAILED" not in r.stderr
    assert report["ok"] and report["failures"] == [] and report["world_size"] == 1
    assert report["collectives"] is True and report["backend"] == "gloo"
    assert report["engine"] == "torch" and report["versions"]["vllm"] is None
    ph = report["phases"]
    for p in PHASES:
        assert row(r.stdout, p).split()[1] == "ok"
        assert ph[p]["status"] == "ok" and ph[p]["wall_s"] > 0 and ph[p]["peak_used_gib"] > 0
    assert ph["build"]["params"] == 312_064 == report["params"]  # the tiny preset
    sft = ph["sft"]
    assert sft["steps"] == 3 and math.isfinite(sft["loss_last"])
    assert sft["tokens_per_s"] > 0 and 0 < sft["mfu"] < 1
    assert 0 <= sft["greedy_accuracy"] <= 1  # the greedy check
    rl = ph["rl"]
    assert rl["steps"] == 2 and rl["tokens_per_s"] > 0
    assert 0 <= rl["sync_s"] < 5 and 0 <= rl["sync_first_s"] < 5
    assert all(0 < rl[k] < 1 for k in ("mfu_rollout", "mfu_old_logprob", "mfu_update"))
    assert rl["logprob_gap_token_mean"] < 1e-3  # fp32 torch engine: the trainer's own numbers
    # the checkpoint's fp32 masters and AdamW state (2 moments + step per parameter) equal
    assert ph["resume"]["tensors_equal"] == 4 * 24 and ph["resume"]["resumed_step_s"] > 0
    trl = ph["rl_trl"]  # --trl: the same RL on TRL, from the SFT model
    assert trl["steps"] == 2 and trl["tokens_per_s"] > 0 and "mfu_old_logprob" not in trl
    assert all(0 < trl[k] < 1 for k in ("mfu_rollout", "mfu_update"))
    ev = ph["eval"]
    assert ev["problems"] == 8 and ev["samples"] == 16 and ev["tokens"] > 0
    assert ev["tokens_per_s"] > 0 and 0 < ev["mfu"] < 1


def test_the_resume_check_finds_a_single_changed_bit():
    import torch

    from gpu_check_phases import differences

    a = {"w": torch.randn(5), "step": torch.tensor(3.0)}
    b = {k: v.clone() for k, v in a.items()}
    assert differences(a, b) == []
    b["w"].view(torch.int32)[2] ^= 1  # one bit of one element
    b["extra"] = torch.zeros(1)
    assert differences(a, b) == ["extra", "w"]


def test_the_carried_wheels_are_the_projects_pins_and_a_killed_check_still_prints_json(tmp_path):
    pins = dict(re.findall(r'"([a-z-]+)==([^"]+)"', (ROOT / "pyproject.toml").read_text()))
    for name in ("trl", "datasets", "transformers"):
        assert device_image.WHEELS[name] == pins[name]
    partial = tmp_path / "report.partial.json"
    partial.write_text(json.dumps({"check": "gpu_check", "phases": {"build": {"status": "ok"}}}))
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "device_image.py"),
            "--partial",
            str(partial),
            "124",
        ],
        capture_output=True,
        text=True,
    )
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 1 and report["timed_out"] and not report["ok"]
    assert report["failures"] == ["check: timed out (phases finished: build)"]


@pytest.mark.slow
def test_a_failing_phase_is_named_in_one_line_and_the_others_still_run(tmp_path):
    # SFT's max_len shorter than every prompt: gspo.native.sft refuses it once the model is loaded
    r, report = smoke(tmp_path, "--sft-max-len", "8", "--rl-steps", "1", "--eval-problems", "4")
    assert r.returncode == 1
    failed = [ln for ln in r.stderr.splitlines() if ln.startswith("gpu_check: FAILED")]
    assert len(failed) == 1, r.stderr[-3000:]
    assert failed[0].startswith("gpu_check: FAILED sft: ConfigError: max_len: 8 leaves no room")
    assert row(r.stdout, "sft").split()[1] == "failed"
    assert not report["ok"] and report["failures"] == [failed[0][len("gpu_check: FAILED ") :]]
    ph = report["phases"]
    assert ph["sft"]["status"] == "failed"
    # RL started from the built model instead, and the evaluation from RL's
    assert ph["rl"]["status"] == "ok" and ph["rl"]["steps"] == 1
    assert ph["resume"]["status"] == "ok" and ph["eval"]["status"] == "ok"
    assert report["world_size"] == 1 and report["collectives"] is False  # plain python
