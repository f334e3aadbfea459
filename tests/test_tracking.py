"""MLflow tracking of real stages (gspo.tracking): a real sqlite store, real SFT / RL
subprocesses, real crashes and SIGTERMs."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from gspo.tracking import MetricsLog, read_metrics

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_a_resumed_metrics_log_keeps_only_records_up_to_the_resume_step(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for s in range(1, 6):
        log.log(s, {"x": float(s)})
    MetricsLog(tmp_path / "m.jsonl", resume_step=3).log(4, {"x": 40.0})
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path / "m.jsonl")] == \
        [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_without_a_tracking_uri_a_stage_run_logs_nothing_and_writes_no_run_file(tmp_path, monkeypatch):
    from gspo.tracking import stage_run

    # the library never reads the environment: MLflow's own variable changes nothing
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'db.sqlite'}")
    with stage_run("rl", tmp_path) as run:
        MetricsLog(tmp_path / "metrics.jsonl").log(1, {"reward_mean": 0.5})
    assert not run.enabled
    assert not (tmp_path / "mlflow_run.json").exists()
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["reward_mean"] == 0.5


def _env(db: pathlib.Path, experiment: str = "t") -> dict:
    env = dict(os.environ)
    # MLflow's own variables are the commands' defaults for --tracking-uri / --experiment
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{db}", MLFLOW_EXPERIMENT_NAME=experiment,
               OMP_NUM_THREADS="1")
    return env


TAGS = ["--tag", "suite=tests"]


def _client(db):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{db}")


def _run_of(out_dir: pathlib.Path, db):
    run_id = json.loads((out_dir / "mlflow_run.json").read_text())["run_id"]
    return _client(db).get_run(run_id)


def _history(db, run_id, key):
    return [(m.step, m.value) for m in sorted(_client(db).get_metric_history(run_id, key),
                                              key=lambda m: (m.step, m.timestamp))]


def _write_rl_config(tmp_path, model, data, *, steps, ckpt_every, out="rl", extra=""):
    cfg = tmp_path / f"{out}.yaml"
    cfg.write_text(
        f"algorithm: gspo\nmodel: {model}\nout_dir: {tmp_path / out}\n"
        f"train_data: [{{path: {data}, weight: 1.0}}]\nsteps: {steps}\nprompts_per_step: 2\n"
        f"group_size: 2\nminibatches: 2\nmax_new_tokens: 8\nckpt_every: {ckpt_every}\n"
        f"threads: 1\n{extra}")
    return cfg


@pytest.fixture
def aime_prompts(tmp_path):
    from evaluators import aime
    from gspo.io import write_jsonl

    path = tmp_path / "prompts.jsonl"
    write_jsonl(aime.generate(8, split="train", seed=0, difficulty=aime.Difficulty(1, 9)), path)
    return path


@pytest.mark.slow
def test_an_sft_stage_becomes_one_finished_run_with_config_params_tags_and_stepped_metrics(
        tmp_path, aime_prompts):
    db = tmp_path / "mlflow.db"
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(f"model: tiny\nout_dir: {tmp_path / 'sft'}\n"
                   f"train_data: [{{path: {aime_prompts}, weight: 1.0}}]\nsteps: 12\n"
                   "batch_size: 4\nlog_every: 5\nwarmup_steps: 2\nthreads: 1\n")
    r = subprocess.run([sys.executable, "-m", "pipeline.sft", "--config", str(cfg), *TAGS], cwd=ROOT,
                       env=_env(db), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = _run_of(tmp_path / "sft", db)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["stage"] == "sft" and tags["seed"] == "0" and tags["suite"] == "tests"
    assert len(tags["config_hash"]) == 16 and tags["git_commit"]
    assert tags["data_hash.prompts.jsonl"] == json.loads(
        (tmp_path / "sft" / "run_info.json").read_text())["data_hashes"][str(aime_prompts)]
    assert run.data.params["steps"] == "12" and run.data.params["lr"] == "0.005"
    assert run.data.params["train_data.0.weight"] == "1.0"
    file_steps = [rec["step"] for rec in read_metrics(tmp_path / "sft" / "metrics.jsonl")]
    assert [s for s, _ in _history(db, run.info.run_id, "loss")] == file_steps == [1, 6, 11, 12]
    flops = [v for _, v in _history(db, run.info.run_id, "compute_flops")]
    assert flops == sorted(flops) and flops[0] > 0
    arts = {a.path for a in _client(db).list_artifacts(run.info.run_id)}
    assert {"run_info.json", "summary.json", "metrics.jsonl"} <= arts


@pytest.mark.slow
def test_a_crashing_rl_run_is_marked_failed_with_its_error(tmp_path, tiny_model_dir):
    db = tmp_path / "mlflow.db"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "task": "bogus", "prompt": "1+1="}) + "\n")
    cfg = _write_rl_config(tmp_path, tiny_model_dir, bad, steps=3, ckpt_every=1)
    r = subprocess.run([sys.executable, "-m", "pipeline.train", "--config", str(cfg), *TAGS], cwd=ROOT,
                       env=_env(db), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    run = _run_of(tmp_path / "rl", db)
    assert run.info.status == "FAILED"
    assert "unknown task 'bogus'" in run.data.tags["error"]
    assert run.data.tags["stage"] == "rl" and run.data.tags["algorithm"] == "gspo"


@pytest.mark.slow
def test_a_run_killed_by_sigterm_is_marked_killed_and_its_resume_continues_the_same_run(
        tmp_path, tiny_model_dir, aime_prompts):
    db = tmp_path / "mlflow.db"
    cfg = _write_rl_config(tmp_path, tiny_model_dir, aime_prompts, steps=10, ckpt_every=2)
    cmd = [sys.executable, "-m", "pipeline.train", "--config", str(cfg),
           "--set", "steps=400"]           # long enough to be killed mid-way
    # stderr goes to a file, not a pipe nobody reads while waiting (a full pipe blocks the
    # child); faulthandler lets a hung child show where it hangs (SIGABRT dumps its stacks)
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**_env(db), "PYTHONFAULTHANDLER": "1"},
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    ckpts = tmp_path / "rl" / "checkpoints"
    deadline = time.time() + 240
    while not (ckpts / "step_000004").is_dir():
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.time() < deadline, "no checkpoint at step 4 within 4 minutes"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=30)
        raise AssertionError("still running 120 s after SIGTERM:\n" + log.read_text()[-6000:])
    assert code == 128 + signal.SIGTERM, log.read_text()[-2000:]
    run = _run_of(tmp_path / "rl", db)
    assert run.info.status == "KILLED"
    latest = max(int(p.name.split("_")[1]) for p in ckpts.glob("step_*"))
    steps = [s for s, _ in _history(db, run.info.run_id, "reward_mean")]
    # only what a complete checkpoint covers was sent to MLflow
    assert steps == list(range(1, latest + 1))

    # resume with the real step budget: the same run continues, one value per step
    r = subprocess.run([sys.executable, "-m", "pipeline.train", "--config", str(cfg),
                        "--set", f"steps={latest + 2}"], cwd=ROOT, env=_env(db),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    again = _run_of(tmp_path / "rl", db)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    hist = _history(db, run.info.run_id, "reward_mean")
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    assert hist == [(rec["step"], rec["reward_mean"]) for rec in rows]
    assert [s for s, _ in hist] == list(range(1, latest + 3))
    assert again.data.tags["resumed_at_step"] == str(latest)


def test_experiments_are_created_as_model_training_experiments(tmp_path):
    # MLflow 3's UI opens an experiment on the view its kind tag names (training runs here)
    from gspo import tracking

    cl = _client(tmp_path / "db.sqlite")
    exp = cl.get_experiment(tracking.experiment_id(cl, "e"))
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_replacing_an_evaluation_metric_leaves_one_value_at_its_step(tmp_path):
    from gspo import tracking

    cl = _client(tmp_path / "db.sqlite")
    exp = tracking.experiment_id(cl, "e")
    run = cl.create_run(exp)
    tracking.log_metrics(cl, run.info.run_id, [(0, {"eval/aime/pass_at_1": 0.1}),
                                                (8, {"eval/aime/pass_at_1": 0.2})])
    tracking.replace_metrics(cl, run.info.run_id, 8, {"eval/aime/pass_at_1": 0.3})
    assert _history(tmp_path / "db.sqlite", run.info.run_id, "eval/aime/pass_at_1") == \
        [(0, 0.1), (8, 0.3)]
    assert cl.get_run(run.info.run_id).data.metrics["eval/aime/pass_at_1"] == 0.3


def test_a_fresh_summary_run_replaces_the_previous_one_and_carries_the_workflow_tags(tmp_path):
    from gspo import tracking

    cl = _client(tmp_path / "db.sqlite")
    exp = tracking.experiment_id(cl, "e")
    cl.create_run(exp, tags={"stage": "rl"})
    first = tracking.fresh_summary_run(cl, exp, "report", {"suite": "tests"})
    second = tracking.fresh_summary_run(cl, exp, "report", {"suite": "tests"})
    assert first != second
    assert [r.info.run_id for r in tracking.stage_runs(cl, exp, "report")] == [second]
    assert cl.get_run(first).info.lifecycle_stage == "deleted"
    tags = cl.get_run(second).data.tags
    assert (tags["stage"], tags["algorithm"], tags["suite"]) == ("report", "all", "tests")
    assert len(tracking.stage_runs(cl, exp, "rl")) == 1


def test_truncating_a_resumed_run_drops_training_metrics_past_the_step_but_keeps_eval_scores(tmp_path):
    from gspo import tracking

    cl = _client(tmp_path / "db.sqlite")
    run = cl.create_run(tracking.experiment_id(cl, "e"))
    rid = run.info.run_id
    tracking.log_metrics(cl, rid, [(s, {"reward_mean": s / 10, "eval/aime/pass_at_1": s / 100})
                                   for s in range(1, 6)])
    assert tracking.truncate_metrics(cl, rid, 3) == 2
    assert [s for s, _ in _history(tmp_path / "db.sqlite", rid, "reward_mean")] == [1, 2, 3]
    assert len(_history(tmp_path / "db.sqlite", rid, "eval/aime/pass_at_1")) == 5
    assert cl.get_run(rid).data.metrics["reward_mean"] == pytest.approx(0.3)


def test_config_params_are_flattened_with_dotted_keys():
    from gspo.tracking import flatten

    flat = flatten({"lr": 5e-5, "rollout": {"engine": "torch"}, "eps_low": None,
                    "train_data": [{"path": "a.jsonl", "weight": 1.0}], "sft_steps": [1, 2]})
    assert flat == {"lr": "5e-05", "rollout.engine": "torch", "eps_low": "null",
                    "train_data.0.path": "a.jsonl", "train_data.0.weight": "1.0",
                    "sft_steps": "[1, 2]"}


def test_a_stop_signal_during_a_checkpoint_write_takes_effect_after_it():
    import os

    from gspo.checkpoint import signals_deferred
    from gspo.tracking import Terminated, terminate_as_exception

    done = []
    with pytest.raises(Terminated) as e, terminate_as_exception():
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)            # the handler would have run here
            done.append("written")     # ... yet the write completes
    assert done == ["written"] and e.value.code == 128 + signal.SIGTERM
    with signals_deferred():           # nothing received: nothing re-sent
        pass
