"""The report: its stability rule on hand-made reward curves, and a rebuild from an MLflow store
alone (the smoke run's store, read from another folder by `python -m pipeline.report`)."""

from __future__ import annotations

import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from pipeline.report import collapse_check, smooth

ROOT = pathlib.Path(__file__).resolve().parents[1]
RULE = {"window": 5, "ratio": 0.5, "tail": 0.2, "min_best": 0.05}


def test_smoothing_is_a_trailing_moving_mean():
    assert smooth([0, 2, 4, 6, 8], 2) == [0, 1, 3, 5, 7]


def test_a_reward_that_falls_to_a_fraction_of_its_best_and_stays_there_is_a_collapse():
    rewards = [0.1] * 5 + [0.4] * 20 + [0.05] * 10
    c = collapse_check(rewards, **RULE)
    assert c["collapsed"] and c["best"] == pytest.approx(0.4)


def test_a_noisy_but_holding_reward_is_not_a_collapse():
    rewards = [0.3, 0.5, 0.2, 0.45, 0.35] * 8
    assert not collapse_check(rewards, **RULE)["collapsed"]


def test_a_dip_that_recovers_before_the_end_is_not_a_collapse():
    rewards = [0.4] * 20 + [0.0] * 10 + [0.4] * 10
    assert not collapse_check(rewards, **RULE)["collapsed"]


def test_a_run_that_never_learned_or_is_too_short_is_not_judged():
    assert not collapse_check([0.01] * 40, **RULE)["collapsed"]
    assert not collapse_check([0.5, 0.5, 0.0, 0.0], **RULE)["collapsed"]


@pytest.mark.slow
def test_the_report_is_rebuilt_from_a_copy_of_the_mlflow_store_alone(tmp_path_factory, tmp_path):
    from test_workflow import smoke_runs

    a, _ = smoke_runs(tmp_path_factory.getbasetemp() / "smoke")
    # a copy of the database, in a folder without any of the run's files
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(a / "results" / "mlflow.db", store / "mlflow.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    r = subprocess.run([sys.executable, "-m", "pipeline.report", "--experiment", "smoke",
                        "--tracking-uri", f"sqlite:///{store / 'mlflow.db'}", "--out", "rep",
                        "--no-mlflow-log"], cwd=elsewhere, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = elsewhere / "rep"
    for name in ("index.html", "score_vs_compute.png", "reward_vs_compute.png",
                 "clip_fraction.png", "final_scores.csv", "stability.csv"):
        assert (out / name).stat().st_size > 0
    rebuilt = list(csv.DictReader((out / "final_scores.csv").open()))
    original = list(csv.DictReader((a / "results" / "smoke" / "report" / "final_scores.csv").open()))
    assert rebuilt == original
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["clip_frac_tokens"]) == {"grpo", "gspo"}
    stab = list(csv.DictReader((out / "stability.csv").open()))
    assert {(s["algorithm"], s["seed"], s["status"]) for s in stab} == {
        ("grpo", "0", "FINISHED"), ("grpo", "1", "FINISHED"),
        ("gspo", "0", "FINISHED"), ("gspo", "1", "FINISHED")}
    assert "python -m pipeline.report --experiment smoke" in (out / "index.html").read_text()


def test_a_report_for_an_unknown_experiment_says_so(tmp_path):
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'db.sqlite'}").search_experiments()
    r = subprocess.run([sys.executable, "-m", "pipeline.report", "--experiment", "nope",
                        "--tracking-uri", f"sqlite:///{tmp_path / 'db.sqlite'}",
                        "--out", str(tmp_path / "rep")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "no MLflow experiment 'nope'" in r.stderr
