"""MLflow tracking of real stages (gspo.tracking.runs): a real sqlite store, real SFT / RL
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

from gspo.infra import provenance
from gspo.tracking.runs import MetricsLog, read_metrics

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pyproject_version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_a_resumed_metrics_log_keeps_only_records_up_to_the_resume_step(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for s in range(1, 6):
        log.log(s, {"x": float(s)})
    MetricsLog(tmp_path / "m.jsonl", resume_step=3).log(4, {"x": 40.0})
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path / "m.jsonl")] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 40.0),
    ]


def test_without_a_tracking_uri_a_stage_run_logs_nothing_and_writes_no_run_file(
    tmp_path, monkeypatch
):
    from gspo.tracking.runs import stage_run

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
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{db}",
        MLFLOW_EXPERIMENT_NAME=experiment,
        OMP_NUM_THREADS="1",
    )
    return env


TAGS = ["--tag", "suite=tests"]


def _client(db):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{db}")


def _run_of(out_dir: pathlib.Path, db):
    run_id = json.loads((out_dir / "mlflow_run.json").read_text())["run_id"]
    return _client(db).get_run(run_id)


def _history(db, run_id, key):
    return [
        (m.step, m.value)
        for m in sorted(
            _client(db).get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp)
        )
    ]


def _write_rl_config(tmp_path, model, data, *, steps, ckpt_every, out="rl", extra=""):
    cfg = tmp_path / f"{out}.yaml"
    cfg.write_text(
        f"algorithm: gspo\nmodel: {model}\nout_dir: {tmp_path / out}\n"
        f"train_data: [{{path: {data}, weight: 1.0}}]\nsteps: {steps}\nprompts_per_step: 2\n"
        f"group_size: 2\nminibatches: 2\nmax_new_tokens: 8\nckpt_every: {ckpt_every}\n"
        f"threads: 1\n{extra}"
    )
    return cfg


@pytest.mark.slow
def test_an_sft_stage_becomes_one_finished_run_with_config_params_tags_and_stepped_metrics(
    tmp_path, aime_prompts
):
    db = tmp_path / "mlflow.db"
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(
        f"model: tiny\nout_dir: {tmp_path / 'sft'}\n"
        f"train_data: [{{path: {aime_prompts}, weight: 1.0}}]\nsteps: 12\n"
        "batch_size: 4\nlog_every: 5\nwarmup_steps: 2\nthreads: 1\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.sft", "--config", str(cfg), *TAGS],
        cwd=ROOT,
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    run = _run_of(tmp_path / "sft", db)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["stage"] == "sft" and tags["seed"] == "0" and tags["suite"] == "tests"
    assert len(tags["config_hash"]) == 16 and tags["git_commit"]
    assert tags["version.gspo-bench"] == provenance.version() == _pyproject_version()
    assert (
        tags["data_hash.prompts.jsonl"]
        == json.loads((tmp_path / "sft" / "run_info.json").read_text())["data_hashes"][
            str(aime_prompts)
        ]
    )
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
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "--config", str(cfg), *TAGS],
        cwd=ROOT,
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
    run = _run_of(tmp_path / "rl", db)
    assert run.info.status == "FAILED"
    assert "unknown task 'bogus'" in run.data.tags["error"]
    assert run.data.tags["stage"] == "rl" and run.data.tags["algorithm"] == "gspo"


@pytest.mark.slow
def test_a_run_killed_by_sigterm_is_marked_killed_and_its_resume_continues_the_same_run(
    tmp_path, tiny_model_dir, aime_prompts
):
    db = tmp_path / "mlflow.db"
    cfg = _write_rl_config(
        tmp_path,
        tiny_model_dir,
        aime_prompts,
        steps=10,
        ckpt_every=2,
        extra="log_samples_every: 2\n",
    )
    cmd = [
        sys.executable,
        "-m",
        "pipeline.train",
        "--config",
        str(cfg),
        "--set",
        "steps=400",
    ]  # long enough to be killed mid-way
    # stderr goes to a file, not a pipe nobody reads while waiting (a full pipe blocks the
    # child); faulthandler lets a hung child show where it hangs (SIGABRT dumps its stacks)
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**_env(db), "PYTHONFAULTHANDLER": "1"},
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
    ckpts = tmp_path / "rl" / "checkpoints"
    deadline = time.time() + 240
    while not (ckpts / "step_000004").is_dir():
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.time() < deadline, "no checkpoint at step 4 within 4 minutes"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired as e:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=30)
        raise AssertionError(
            "still running 120 s after SIGTERM:\n" + log.read_text()[-6000:]
        ) from e
    assert code == 128 + signal.SIGTERM, log.read_text()[-2000:]
    run = _run_of(tmp_path / "rl", db)
    assert run.info.status == "KILLED"
    latest = max(int(p.name.split("_")[1]) for p in ckpts.glob("step_*"))
    steps = [s for s, _ in _history(db, run.info.run_id, "reward_mean")]
    # only what a complete checkpoint covers was sent to MLflow
    assert steps == list(range(1, latest + 1))

    # resume with the real step budget: the same run continues, one value per step
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.train",
            "--config",
            str(cfg),
            "--set",
            f"steps={latest + 2}",
        ],
        cwd=ROOT,
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    again = _run_of(tmp_path / "rl", db)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    hist = _history(db, run.info.run_id, "reward_mean")
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    assert hist == [(rec["step"], rec["reward_mean"]) for rec in rows]
    assert [s for s, _ in hist] == list(range(1, latest + 3))
    assert again.data.tags["resumed_at_step"] == str(latest)
    # every 2nd step's samples in the run as they were made, those of the resumed steps too
    arts = {a.path for a in _client(db).list_artifacts(run.info.run_id, "samples")}
    assert {f"samples/step_{s:06d}.jsonl" for s in range(2, latest + 3, 2)} <= arts
    last = (tmp_path / "rl" / "samples" / f"step_{latest + 2:06d}.jsonl").read_text().splitlines()
    assert len(last) == 4 and json.loads(last[0])["step"] == latest + 2


def test_experiments_are_created_as_model_training_experiments(tmp_path):
    # MLflow 3's UI opens an experiment on the view its kind tag names (training runs here)
    from gspo.tracking import runs as tracking

    cl = _client(tmp_path / "db.sqlite")
    exp = cl.get_experiment(tracking.experiment_id(cl, "e"))
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_replacing_an_evaluation_metric_leaves_one_value_at_its_step(tmp_path):
    from gspo.tracking import runs as tracking

    cl = _client(tmp_path / "db.sqlite")
    exp = tracking.experiment_id(cl, "e")
    run = cl.create_run(exp)
    tracking.log_metrics(
        cl, run.info.run_id, [(0, {"eval/aime/pass_at_1": 0.1}), (8, {"eval/aime/pass_at_1": 0.2})]
    )
    tracking.replace_metrics(cl, run.info.run_id, 8, {"eval/aime/pass_at_1": 0.3})
    assert _history(tmp_path / "db.sqlite", run.info.run_id, "eval/aime/pass_at_1") == [
        (0, 0.1),
        (8, 0.3),
    ]
    assert cl.get_run(run.info.run_id).data.metrics["eval/aime/pass_at_1"] == 0.3


def test_a_fresh_summary_run_replaces_the_previous_one_and_carries_the_workflow_tags(tmp_path):
    from gspo.tracking import runs as tracking

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


def test_truncating_a_resumed_run_drops_training_metrics_past_the_step_but_keeps_eval_scores(
    tmp_path,
):
    from gspo.tracking import runs as tracking

    cl = _client(tmp_path / "db.sqlite")
    run = cl.create_run(tracking.experiment_id(cl, "e"))
    rid = run.info.run_id
    tracking.log_metrics(
        cl, rid, [(s, {"reward_mean": s / 10, "eval/aime/pass_at_1": s / 100}) for s in range(1, 6)]
    )
    assert tracking.truncate_metrics(cl, rid, 3) == 2
    assert [s for s, _ in _history(tmp_path / "db.sqlite", rid, "reward_mean")] == [1, 2, 3]
    assert len(_history(tmp_path / "db.sqlite", rid, "eval/aime/pass_at_1")) == 5
    assert cl.get_run(rid).data.metrics["reward_mean"] == pytest.approx(0.3)


def test_config_params_are_flattened_with_dotted_keys():
    from gspo.tracking.store import flatten

    flat = flatten(
        {
            "lr": 5e-5,
            "rollout": {"engine": "torch"},
            "eps_low": None,
            "train_data": [{"path": "a.jsonl", "weight": 1.0}],
            "sft_steps": [1, 2],
        }
    )
    assert flat == {
        "lr": "5e-05",
        "rollout.engine": "torch",
        "eps_low": "null",
        "train_data.0.path": "a.jsonl",
        "train_data.0.weight": "1.0",
        "sft_steps": "[1, 2]",
    }


def test_a_stop_signal_during_a_checkpoint_write_takes_effect_after_it():
    import os

    from gspo.infra.checkpoint import signals_deferred
    from gspo.tracking.runs import Terminated, terminate_as_exception

    done = []
    with pytest.raises(Terminated) as e, terminate_as_exception():
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # the handler would have run here
            done.append("written")  # ... yet the write completes
    assert done == ["written"] and e.value.code == 128 + signal.SIGTERM
    with signals_deferred():  # nothing received: nothing re-sent
        pass


def test_a_sigterm_whose_exception_a_finalizer_swallowed_still_stops_the_stage(
    tmp_path, monkeypatch
):
    import gc
    import os

    from gspo.tracking.runs import MetricsLog, Terminated, terminate_as_exception

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, and Python ignores its exception

    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: ignored.append(u.exc_type))
    log = MetricsLog(tmp_path / "metrics.jsonl")
    with pytest.raises(Terminated) as e, terminate_as_exception():
        obj = SignalledWhileCollected()
        del obj
        gc.collect()
        assert ignored == [Terminated]  # the first raise was lost
        log.log(1, {"x": 1.0})  # the next record stops it
    assert e.value.code == 128 + signal.SIGTERM
    assert (tmp_path / "metrics.jsonl").read_text() == ""
    with terminate_as_exception():  # a fresh block starts with nothing received
        pass


# -- exactly once: each window where a point could be sent twice (or never), forced ------------

LOCKED = "(sqlite3.OperationalError) database is locked"


class FaultyStore:
    """A real MlflowClient on a sqlite store whose writes are cut at a chosen moment: `after`
    runs once the store has committed a metrics batch (raise "locked", send a signal, kill the
    process), the first `times` times. Everything else is the real client's."""

    def __init__(self, uri: str, *, after, times: int = 1, creates: int = 0):
        from mlflow.tracking import MlflowClient

        self.real, self.after, self.left, self.creates = (
            MlflowClient(tracking_uri=uri),
            after,
            times,
            creates,
        )

    def __getattr__(self, name):
        return getattr(self.real, name)

    def log_batch(self, run_id, metrics=(), params=(), tags=()):
        self.real.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        if metrics and self.left:
            self.left -= 1
            self.after()

    def create_run(self, *a, **kw):
        run = self.real.create_run(*a, **kw)
        if self.creates:
            self.creates -= 1
            raise _locked()
        return run


def _locked():
    from mlflow.exceptions import MlflowException

    return MlflowException(LOCKED)


def _raise_locked():
    raise _locked()


def _stage_with(monkeypatch, tmp_path, store: FaultyStore):
    """A tracked stage in tmp_path/out whose MLflow client is `store`; its run_info.json holds a
    config so that the stage logs params too."""
    from gspo.tracking import runs as tracking

    out = tmp_path / "out"
    out.mkdir()
    (out / "run_info.json").write_text(json.dumps({"config": {"lr": 0.1, "steps": 5}, "seed": 0}))
    monkeypatch.setattr(tracking, "client", lambda uri: store)
    return out, tracking.Tracking(uri=f"sqlite:///{tmp_path / 'db.sqlite'}", experiment="e")


def _points(db, run_id, path) -> tuple[list, list]:
    """(MLflow's history of x, the metrics file's) as [(step, value)]."""
    return _history(db, run_id, "x"), [(r["step"], r["x"]) for r in read_metrics(path)]


def test_a_blind_retry_of_a_batch_the_store_committed_doubles_it(tmp_path):
    # the window is real: what mlflow_store.retry did with log_batch before StoredSteps
    from mlflow.entities import Metric

    from gspo.tracking import runs as tracking

    db = tmp_path / "db.sqlite"
    store = FaultyStore(f"sqlite:///{db}", after=_raise_locked)
    rid = store.create_run(tracking.experiment_id(store.real, "e")).info.run_id
    tracking.retry(store.log_batch, rid, metrics=[Metric("x", 1.0, 1, 1)])
    tracking.retry(store.log_batch, rid, metrics=[Metric("x", 1.0, 2, 1)])  # a later timestamp
    assert [s for s, _ in _history(db, rid, "x")] == [1, 1]


def test_a_store_that_commits_then_reports_locked_gets_every_point_param_and_run_once(
    tmp_path, monkeypatch
):
    from gspo.tracking.runs import MetricsLog, stage_run

    db = tmp_path / "db.sqlite"
    store = FaultyStore(f"sqlite:///{db}", after=_raise_locked, times=5, creates=1)
    out, tr = _stage_with(monkeypatch, tmp_path, store)
    with stage_run("sft", out, tracking=tr):
        log = MetricsLog(out / "metrics.jsonl")
        for s in range(1, 6):
            log.log(s, {"x": s / 10})
    assert store.left == 0 and store.creates == 0  # every send hit the window
    runs = store.real.search_runs([store.real.get_experiment_by_name("e").experiment_id])
    assert len(runs) == 1  # the create was not repeated
    run = runs[0]
    hist, file_points = _points(db, run.info.run_id, out / "metrics.jsonl")
    assert hist == file_points == [(s, s / 10) for s in range(1, 6)]
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1", "steps": "5"}


def test_params_already_logged_are_fine_when_equal_and_a_one_line_error_when_not(tmp_path):
    from gspo.tracking import runs as tracking

    cl = _client(tmp_path / "db.sqlite")
    rid = cl.create_run(tracking.experiment_id(cl, "e")).info.run_id
    tracking.log_params(cl, rid, {"lr": "0.1", "steps": "5"})
    tracking.log_params(cl, rid, {"lr": "0.1", "seed": "0"})
    assert cl.get_run(rid).data.params == {"lr": "0.1", "steps": "5", "seed": "0"}
    with pytest.raises(ValueError, match=r"param 'lr' is already '0.1', not '0.2'") as e:
        tracking.log_params(cl, rid, {"lr": "0.2"})
    assert "\n" not in str(e.value)


def _sigterm():
    os.kill(os.getpid(), signal.SIGTERM)  # the handler runs at the next bytecode: right here


@pytest.mark.parametrize(
    "where", ["inside the send, after the commit", "between the send and the buffer update"]
)
def test_a_sigterm_inside_flush_leaves_every_point_in_the_run_exactly_once(
    tmp_path, monkeypatch, where
):
    from gspo.tracking import runs as tracking
    from gspo.tracking.runs import MetricsLog, Terminated, stage_run

    db = tmp_path / "db.sqlite"
    store = FaultyStore(f"sqlite:///{db}", after=_sigterm, times=0)
    out, tr = _stage_with(monkeypatch, tmp_path, store)
    if where == "between the send and the buffer update":
        sent, fired = tracking.log_metrics, []

        def log_metrics(*a, **kw):
            n = sent(*a, **kw)
            if a[2][-1][0] == 3 and not fired:  # the first flush of step 3
                fired.append(3)
                _sigterm()
            return n

        monkeypatch.setattr(tracking, "log_metrics", log_metrics)
    with pytest.raises(Terminated), stage_run("sft", out, tracking=tr):
        log = MetricsLog(out / "metrics.jsonl")
        for s in range(1, 6):
            if s == 3 and where == "inside the send, after the commit":
                store.left = 1
            log.log(s, {"x": s / 10})
            assert s < 3, "the signal did not stop the stage at step 3"
    run_id = json.loads((out / "mlflow_run.json").read_text())["run_id"]
    hist, file_points = _points(db, run_id, out / "metrics.jsonl")
    assert hist == file_points == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert store.real.get_run(run_id).info.status == "KILLED"


KILL_DRIVER = """
import os, signal, sys
from mlflow.tracking import MlflowClient

real, when, sends = MlflowClient.log_batch, sys.argv[1], [0]

def log_batch(self, run_id, metrics=(), params=(), tags=(), **kw):
    if metrics:
        sends[0] += 1
    if metrics and sends[0] == 2 and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    out = real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)
    if metrics and sends[0] == 2 and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return out

MlflowClient.log_batch = log_batch
from pipeline.train import main
main(sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_9_during_a_send_then_a_resume_leaves_every_point_exactly_once(
    tmp_path, tiny_model_dir, aime_prompts, when
):
    # checkpoints every 2 steps: the second send carries steps 3-4 (once checkpoint 4 covers
    # them); the process dies just before or just after the store takes it
    db = tmp_path / "mlflow.db"
    cfg = _write_rl_config(tmp_path, tiny_model_dir, aime_prompts, steps=6, ckpt_every=2)
    r = subprocess.run(
        [sys.executable, "-c", KILL_DRIVER, when, "--config", str(cfg)],
        cwd=ROOT,
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    out = tmp_path / "rl"
    run = _run_of(out, db)
    assert run.info.status == "RUNNING"
    held = [s for s, _ in _history(db, run.info.run_id, "reward_mean")]
    assert held == ([1, 2] if when == "before" else [1, 2, 3, 4])

    r = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "--config", str(cfg)],
        cwd=ROOT,
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    again = _run_of(out, db)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert again.data.tags["resumed_at_step"] == "4"
    rows = read_metrics(out / "metrics.jsonl")
    assert [rec["step"] for rec in rows] == list(range(1, 7))
    from gspo.tracking.store import numeric_metrics

    keys = set(numeric_metrics({k: v for rec in rows for k, v in rec.items() if k != "step"}))
    assert "reward_mean" in keys and len(keys) > 10
    for key in sorted(keys):
        want = [(rec["step"], float(rec[key])) for rec in rows if key in numeric_metrics(rec)]
        got = _history(db, run.info.run_id, key)
        assert [(s, v) for s, v in got if v == v] == [(s, v) for s, v in want if v == v], key
        assert len(got) == len(want), key


def test_a_stage_starting_over_replaces_the_run_its_earlier_attempt_left(tmp_path):
    # an RL job killed before its first checkpoint starts from scratch: one run of it remains
    from gspo.tracking.runs import MetricsLog, Tracking, stage_run
    from gspo.tracking.store import stage_runs

    db = tmp_path / "db.sqlite"
    tr = Tracking(uri=f"sqlite:///{db}", experiment="e")
    (tmp_path / "run_info.json").write_text(json.dumps({"config": {"lr": 0.1}, "seed": 0}))
    ids = []
    for attempt in range(2):
        with stage_run("rl", tmp_path, tracking=tr):
            MetricsLog(tmp_path / "metrics.jsonl").log(1, {"x": float(attempt)})
        ids.append(json.loads((tmp_path / "mlflow_run.json").read_text())["run_id"])
    cl = _client(db)
    live = stage_runs(cl, cl.get_experiment_by_name("e").experiment_id, "rl")
    assert ids[0] != ids[1] and [r.info.run_id for r in live] == [ids[1]]
    assert _history(db, ids[1], "x") == [(1, 1.0)]
