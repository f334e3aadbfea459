"""Per-step metrics: an append-only JSONL file per run, mirrored into MLflow when tracking is on.

`metrics.jsonl` (MetricsLog) is the source of truth a run writes locally. MLflow tracking is
switched on by the environment, so that a stage's code never needs to know about it:

    MLFLOW_TRACKING_URI       where the runs go (sqlite:///results/mlflow.db, http://host:5000, ...);
                              unset: no tracking at all
    MLFLOW_EXPERIMENT_NAME    the experiment (created when missing; default "gspo-bench")
    GSPO_MLFLOW_RUN_NAME      the run's name (default "<stage>-<algorithm>-seed<seed>")
    GSPO_MLFLOW_TAGS          a JSON object of extra tags (the workflow adds its experiment, ...)

`stage_run(stage, out_dir)` wraps a stage (gspo.sft.run_sft, gspo.trainer.run_rl). Inside it,
every MetricsLog whose file lies in `out_dir` mirrors its records into one MLflow run:

- the run is created at the stage's first record, with params = the resolved config of
  `out_dir/run_info.json` (flattened, dotted keys) and tags stage, algorithm, seed, config_hash,
  git_commit, data_hash.<file> (sha256 of each training file), versions and the command;
- its id is kept in `out_dir/mlflow_run.json`; a resumed stage (MetricsLog(resume_step=...)) with
  that file reopens the same run instead of making a new one, first dropping any training
  metric it holds beyond the resume step (truncate_metrics), as MetricsLog does with its file;
- commit="checkpoint" (RL) sends records to MLflow only once a complete checkpoint covers their
  step (out_dir/checkpoints/step_N), and everything at a clean end: MLflow then never holds a
  step that a resume would log a second time. commit="immediate" (SFT, no resume) sends each
  record at once;
- at the end the run is marked FINISHED, FAILED (an exception) or KILLED (SIGTERM, SIGINT), and
  run_info.json, summary.json and metrics.jsonl are attached as artifacts.

A tracking failure after the run exists (a locked or unreachable store, after retries) is
reported on stderr and never stops training: metrics.jsonl still has everything.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import signal
import sys
import threading
import time

DEFAULT_EXPERIMENT = "gspo-bench"
RUN_FILE = "mlflow_run.json"
ARTIFACTS = ("run_info.json", "summary.json", "metrics.jsonl")


class MetricsLog:
    """`metrics.jsonl` of {"step": s, ...} records.

    On resume, records after the checkpoint's step are dropped so that the file matches an
    uninterrupted run exactly. Inside `stage_run(...)` for the file's folder, records are also
    mirrored into the stage's MLflow run.
    """

    def __init__(self, path, *, resume_step: int | None = None):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if resume_step is not None and self.path.exists():
            kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
        with open(self.path, "w") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in kept)
        self._mirror = _active_for(self.path.parent)
        if self._mirror is not None:
            self._mirror.attach(resume_step)

    def log(self, step: int, metrics: dict) -> None:
        rec = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            f.flush()
        if self._mirror is not None:
            self._mirror.record(step, metrics)


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no nan/inf; keep them visible rather than crash
    return v


def read_metrics(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# -- MLflow helpers (also used by the workflow and the report) ----------------------------------

def tracking_uri() -> str | None:
    """The tracking URI from the environment, or None (tracking off)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def client(uri: str | None = None):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri or tracking_uri())


def _is_locked(e: Exception) -> bool:
    text = str(e).lower()
    return "locked" in text or "busy" in text


def retry(fn, *args, attempts: int = 8, **kwargs):
    """fn(*args, **kwargs), retried with back-off while the store reports it is locked/busy."""
    for i in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - MlflowException / sqlalchemy OperationalError
            if i == attempts - 1 or not _is_locked(e):
                raise
            time.sleep(0.2 * 2 ** i)


def artifact_root_for(uri: str) -> str | None:
    """Artifacts of a sqlite store go next to the database file (`<db dir>/mlartifacts`)."""
    if uri.startswith("sqlite:///"):
        db = pathlib.Path(uri[len("sqlite:///"):])
        return (db.resolve().parent / "mlartifacts").as_uri()
    return None


def experiment_id(cl, name: str, *, create: bool = True) -> str | None:
    """The id of experiment `name`, created (once, even with concurrent callers) when missing."""
    exp = retry(cl.get_experiment_by_name, name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            raise RuntimeError(
                f"MLflow experiment {name!r} (id {exp.experiment_id}) is deleted in "
                f"{cl.tracking_uri}: restore it (mlflow experiments restore --experiment-id "
                f"{exp.experiment_id}) or remove it for good (mlflow gc --backend-store-uri "
                f"{cl.tracking_uri} --experiment-ids {exp.experiment_id})")
        return exp.experiment_id
    if not create:
        return None
    try:
        return retry(cl.create_experiment, name,
                     artifact_location=artifact_root_for(cl.tracking_uri))
    except Exception:  # noqa: BLE001 - another process created it first
        exp = retry(cl.get_experiment_by_name, name)
        if exp is None:
            raise
        return exp.experiment_id


def flatten(d, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b": "value"}; lists of mappings are indexed (train_data.0.path)."""
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list) and any(isinstance(v, (dict, list)) for v in d):
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        key = prefix[:-1]
        out[key] = json.dumps(d) if isinstance(d, (list, bool)) or d is None else str(d)
    return out


def numeric_metrics(metrics: dict) -> dict[str, float]:
    """The entries MLflow can take as metrics (numbers; 'nan'/'inf' strings of MetricsLog)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, (int, float)):
            out[k] = float(v)
        elif isinstance(v, str) and v.lower() in ("nan", "inf", "-inf"):
            out[k] = float(v)
    return out


def log_metrics(cl, run_id: str, rows: list[tuple[int, dict]]) -> None:
    """Log [(step, {key: value})] in batches of MLflow's 1000-metric limit."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, v, now, int(step)) for step, m in rows for k, v in numeric_metrics(m).items()]
    for i in range(0, len(batch), 1000):
        retry(cl.log_batch, run_id, metrics=batch[i:i + 1000])


def replace_metrics(cl, run_id: str, step: int, metrics: dict) -> None:
    """Log `metrics` at `step`, first removing values already logged for those keys at that step
    (an evaluation re-run with new settings must not leave two points at one step). The removal
    works on SQL stores (sqlite, postgres, ...); elsewhere the new value is simply added."""
    keys = list(numeric_metrics(metrics))
    try:
        from mlflow.store.tracking.dbmodels.models import SqlMetric
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = cl._tracking_client.store
        if isinstance(store, SqlAlchemyStore) and keys:
            def delete():
                with store.ManagedSessionMaker(read_only=False) as session:
                    session.query(SqlMetric).filter(
                        SqlMetric.run_uuid == run_id, SqlMetric.key.in_(keys),
                        SqlMetric.step == int(step)).delete(synchronize_session=False)
            retry(delete)
    except ImportError:
        pass
    log_metrics(cl, run_id, [(step, metrics)])


def truncate_metrics(cl, run_id: str, after_step: int, *, keep_prefix: str = "eval") -> int:
    """Drop a run's metric values logged at steps > `after_step` (keys starting with
    `keep_prefix` are kept: those are evaluation scores, re-logged by their own jobs). A resumed
    stage calls this so that MLflow, like metrics.jsonl, holds exactly one value per step even
    when the earlier attempt had logged beyond the checkpoint it resumes from. SQL stores only;
    returns the number of values dropped."""
    try:
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    except ImportError:
        return 0
    store = cl._tracking_client.store
    if not isinstance(store, SqlAlchemyStore):
        return 0

    def delete():
        with store.ManagedSessionMaker(read_only=False) as session:
            n = session.query(SqlMetric).filter(
                SqlMetric.run_uuid == run_id, SqlMetric.step > int(after_step),
                ~SqlMetric.key.startswith(keep_prefix)).delete(synchronize_session=False)
            # latest_metrics rows pointing past the cut are rebuilt from what is left
            stale = session.query(SqlLatestMetric).filter(
                SqlLatestMetric.run_uuid == run_id, SqlLatestMetric.step > int(after_step),
                ~SqlLatestMetric.key.startswith(keep_prefix)).all()
            for row in stale:
                last = session.query(SqlMetric).filter(
                    SqlMetric.run_uuid == run_id, SqlMetric.key == row.key).order_by(
                    SqlMetric.step.desc(), SqlMetric.timestamp.desc()).first()
                if last is None:
                    session.delete(row)
                else:
                    row.step, row.value, row.timestamp, row.is_nan = \
                        last.step, last.value, last.timestamp, last.is_nan
            return n
    return retry(delete)


def run_tags(info: dict, stage: str) -> dict[str, str]:
    """Tags of a stage's run from its run_info.json record."""
    cfg = info.get("config", {})
    tags = {
        "stage": stage,
        "algorithm": str(info.get("algorithm") or cfg.get("algorithm") or stage),
        "seed": str(info.get("seed", cfg.get("seed"))),
        "config_hash": str(info.get("config_hash", "")),
        "git_commit": str(info.get("git_commit", "")),
        "mlflow.source.git.commit": str(info.get("git_commit", "")).replace("-dirty", ""),
        "command": str(info.get("command", ""))[:5000],
    }
    for path, digest in (info.get("data_hashes") or {}).items():
        tags[f"data_hash.{pathlib.Path(path).name}"] = digest
    for name, version in (info.get("versions") or {}).items():
        tags[f"version.{name}"] = str(version)
    extra = os.environ.get("GSPO_MLFLOW_TAGS")
    if extra:
        tags.update({k: str(v) for k, v in json.loads(extra).items()})
    return tags


def stage_runs(cl, exp_id: str, stage: str) -> list:
    """Every run of the experiment tagged `stage`, across result pages."""
    out, token = [], None
    while True:
        page = retry(cl.search_runs, [exp_id], f"tags.stage = '{stage}'", max_results=1000,
                     page_token=token)
        out += list(page)
        token = page.token
        if not token:
            return out


def fresh_summary_run(cl, exp_id: str, stage: str) -> str:
    """A new run for a once-per-experiment stage (aggregate, report), replacing earlier ones so the
    UI shows one current summary; tagged like stage runs, including GSPO_MLFLOW_TAGS."""
    for old in stage_runs(cl, exp_id, stage):
        retry(cl.delete_run, old.info.run_id)
    tags = {"stage": stage, "algorithm": "all"}
    extra = os.environ.get("GSPO_MLFLOW_TAGS")
    if extra:
        tags.update({k: str(v) for k, v in json.loads(extra).items()})
    return retry(cl.create_run, exp_id, tags=tags, run_name=stage).info.run_id


def log_params(cl, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(k[:250], v[:6000]) for k, v in sorted(params.items())]
    for i in range(0, len(items), 100):
        retry(cl.log_batch, run_id, params=items[i:i + 100])


def set_tags(cl, run_id: str, tags: dict[str, str]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, len(items), 100):
        retry(cl.log_batch, run_id, tags=items[i:i + 100])


def status_for(exc: BaseException | None) -> str:
    """FINISHED (no exception or exit 0), KILLED (a signal / interrupt) or FAILED (anything else)."""
    if exc is None:
        return "FINISHED"
    if isinstance(exc, KeyboardInterrupt) or isinstance(exc, Terminated):
        return "KILLED"
    if isinstance(exc, SystemExit) and exc.code in (0, None):
        return "FINISHED"
    return "FAILED"


class Terminated(SystemExit):
    """Raised in the main thread when the process receives SIGTERM (exit status 128 + signum)."""


@contextlib.contextmanager
def terminate_as_exception():
    """While active, SIGTERM raises Terminated (so `finally` blocks and run status run)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# -- one stage's run ----------------------------------------------------------------------------

_ACTIVE: list["StageRun"] = []


def _active_for(folder: pathlib.Path) -> "StageRun | None":
    folder = pathlib.Path(folder).resolve()
    for run in reversed(_ACTIVE):
        if run.out_dir == folder:
            return run
    return None


def _warn(msg: str) -> None:
    print(f"tracking: {msg}", file=sys.stderr, flush=True)


class StageRun:
    """The MLflow run of one stage (see the module doc); inert when tracking is off."""

    def __init__(self, stage: str, out_dir, *, commit: str = "immediate"):
        if commit not in ("immediate", "checkpoint"):
            raise ValueError(f"commit must be 'immediate' or 'checkpoint', got {commit!r}")
        self.stage = stage
        self.out_dir = pathlib.Path(out_dir).resolve()
        self.commit_mode = commit
        self.uri = tracking_uri()
        self.enabled = self.uri is not None
        self.run_id: str | None = None
        self.resume_step: int | None = None
        self._buffer: list[tuple[int, dict]] = []
        self._client = None
        self._broken = False

    # MetricsLog calls these
    def attach(self, resume_step: int | None) -> None:
        self.resume_step = resume_step

    def record(self, step: int, metrics: dict) -> None:
        if not self.enabled or self._broken:
            return
        try:
            self._ensure_run()
            self._buffer.append((step, dict(metrics)))
            if self.commit_mode == "immediate":
                self.flush()
            else:
                self.flush(self._latest_checkpoint_step())
        except Exception as e:  # noqa: BLE001 - tracking must never stop training
            self._broken = True
            _warn(f"MLflow logging stopped ({type(e).__name__}: {e}); metrics.jsonl has everything")

    def flush(self, upto: int | None = None) -> None:
        """Send buffered records with step <= upto (all when None)."""
        if self.run_id is None or not self._buffer:
            return
        ready = [(s, m) for s, m in self._buffer if upto is None or s <= upto]
        if not ready:
            return
        log_metrics(self._client, self.run_id, ready)
        self._buffer = [(s, m) for s, m in self._buffer if not (upto is None or s <= upto)]

    def _latest_checkpoint_step(self) -> int:
        from gspo.checkpoint import list_checkpoints

        ckpts = list_checkpoints(self.out_dir / "checkpoints")
        return int(ckpts[-1].name.split("_")[-1]) if ckpts else -1

    def _info(self) -> dict:
        p = self.out_dir / "run_info.json"
        return json.loads(p.read_text()) if p.is_file() else {}

    def _ensure_run(self) -> None:
        if self.run_id is not None:
            return
        cl = self._client = client(self.uri)
        info = self._info()
        run_file = self.out_dir / RUN_FILE
        if self.resume_step is not None and run_file.is_file():
            prev = json.loads(run_file.read_text())
            if prev.get("tracking_uri") == self.uri:
                try:
                    run = retry(cl.get_run, prev["run_id"])
                except Exception:  # noqa: BLE001 - gone from this store: start a new one
                    run = None
                if run is not None and run.info.lifecycle_stage == "active":
                    self.run_id = run.info.run_id
                    truncate_metrics(cl, self.run_id, self.resume_step)
                    retry(cl.update_run, self.run_id, status="RUNNING")
                    set_tags(cl, self.run_id, {"resumed_at_step": str(self.resume_step)})
                    return
        exp_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        exp_id = experiment_id(cl, exp_name)
        tags = run_tags(info, self.stage)
        name = os.environ.get("GSPO_MLFLOW_RUN_NAME") or \
            f"{self.stage}-{tags['algorithm']}-seed{tags['seed']}"
        run = retry(cl.create_run, exp_id, tags=tags, run_name=name)
        self.run_id = run.info.run_id
        from gspo.io import write_json

        write_json(run_file, {"run_id": self.run_id, "experiment_id": exp_id,
                              "experiment": exp_name, "tracking_uri": self.uri})
        if info.get("config"):
            log_params(cl, self.run_id, flatten(info["config"]))

    def close(self, exc: BaseException | None) -> None:
        if not self.enabled or self._broken:
            return
        status = status_for(exc)
        try:
            if self.run_id is None:
                if status == "FINISHED" or not (self.out_dir / "run_info.json").is_file():
                    return  # nothing was recorded and nothing went wrong, or nothing began
                self._ensure_run()
            if status == "FINISHED":
                self.flush()
            else:
                self.flush(self._latest_checkpoint_step() if self.commit_mode == "checkpoint"
                           else None)
                set_tags(self._client, self.run_id,
                         {"error": f"{type(exc).__name__}: {exc}"[:5000]})
            for name in ARTIFACTS:
                if (self.out_dir / name).is_file():
                    retry(self._client.log_artifact, self.run_id, str(self.out_dir / name))
            retry(self._client.set_terminated, self.run_id, status)
        except Exception as e:  # noqa: BLE001
            _warn(f"could not close MLflow run {self.run_id} ({type(e).__name__}: {e})")


@contextlib.contextmanager
def stage_run(stage: str, out_dir, *, commit: str = "immediate"):
    """Track the stage writing into `out_dir` (see the module doc); yields the StageRun."""
    run = StageRun(stage, out_dir, commit=commit)
    _ACTIVE.append(run)
    exc: BaseException | None = None
    try:
        with terminate_as_exception():
            yield run
    except BaseException as e:
        exc = e
        raise
    finally:
        _ACTIVE.remove(run)
        run.close(exc)
