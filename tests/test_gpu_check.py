"""benchmarks/gpu_check.py's own code path, run for real on CPU (`--smoke`: the tiny preset, the
torch engine) in a fresh interpreter as a user would: every phase reported in the table and the
JSON line with plausible numbers; a failing phase named in one line, a non-zero exit, and the
phases after it still run."""

from __future__ import annotations

import json
import math
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
PHASES = ("build", "sft", "rl_trl", "rl", "eval")


def smoke(tmp_path, *flags):
    r = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--work", str(tmp_path / "work"),
                        "--json", str(tmp_path / "report.json"), *flags],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = r.stdout.strip().splitlines()
    assert lines, r.stderr[-3000:]
    report = json.loads(lines[-1])
    assert json.loads((tmp_path / "report.json").read_text()) == report
    return r, report


def row(stdout: str, phase: str) -> str:
    rows = [ln for ln in stdout.splitlines() if re.match(rf"{phase}\s+(ok|failed)\s+\d+\.\d\s", ln)]
    assert len(rows) == 1, stdout[-3000:]
    return rows[0]


@pytest.mark.slow
def test_smoke_runs_every_phase_and_reports_plausible_numbers(tmp_path):
    r, report = smoke(tmp_path, "--trl")
    assert r.returncode == 0, r.stderr[-4000:]
    assert "FAILED" not in r.stderr
    assert report["ok"] and report["failures"] == [] and report["world_size"] == 1
    ph = report["phases"]
    for p in PHASES:
        assert row(r.stdout, p).split()[1] == "ok"
        assert ph[p]["status"] == "ok" and ph[p]["wall_s"] > 0 and ph[p]["peak_used_gib"] > 0
    assert ph["build"]["params"] == 312_064 == report["params"]            # the tiny preset
    sft = ph["sft"]
    assert sft["steps"] == 3 and math.isfinite(sft["loss_last"])
    assert sft["tokens_per_s"] > 0 and 0 < sft["mfu"] < 1
    rl = ph["rl"]
    assert rl["steps"] == 2 and rl["tokens_per_s"] > 0
    assert 0 <= rl["sync_s"] < 5 and 0 <= rl["sync_first_s"] < 5
    assert all(0 < rl[k] < 1 for k in ("mfu_rollout", "mfu_old_logprob", "mfu_update"))
    assert rl["logprob_gap_token_mean"] < 1e-3     # fp32 torch engine: the trainer's own numbers
    trl = ph["rl_trl"]                             # --trl: the same RL on TRL, from the SFT model
    assert trl["steps"] == 2 and trl["tokens_per_s"] > 0 and "mfu_old_logprob" not in trl
    assert all(0 < trl[k] < 1 for k in ("mfu_rollout", "mfu_update"))
    ev = ph["eval"]
    assert ev["problems"] == 8 and ev["samples"] == 16 and ev["tokens"] > 0
    assert ev["tokens_per_s"] > 0 and 0 < ev["mfu"] < 1
    assert not (tmp_path / "work").exists()        # the work folder goes unless --keep


@pytest.mark.slow
def test_a_failing_phase_is_named_in_one_line_and_the_others_still_run(tmp_path):
    # SFT's max_len shorter than every prompt: gspo.sft refuses it once the model is loaded
    r, report = smoke(tmp_path, "--sft-max-len", "8", "--rl-steps", "1", "--eval-problems", "4")
    assert r.returncode == 1
    failed = [ln for ln in r.stderr.splitlines() if ln.startswith("gpu_check: FAILED")]
    assert len(failed) == 1, r.stderr[-3000:]
    assert failed[0].startswith("gpu_check: FAILED sft: ConfigError: max_len: 8 leaves no room")
    assert row(r.stdout, "sft").split()[1] == "failed"
    assert not report["ok"] and report["failures"] == [failed[0][len("gpu_check: FAILED "):]]
    ph = report["phases"]
    assert ph["sft"]["status"] == "failed"
    # RL started from the built model instead, and the evaluation from RL's
    assert ph["rl"]["status"] == "ok" and ph["rl"]["steps"] == 1
    assert ph["eval"]["status"] == "ok"
