"""Per-step metrics: an append-only JSONL file per run, mirrored into MLflow when tracking is on.

`metrics.jsonl` (MetricsLog) is the source of truth a run writes locally. MLflow tracking is
given explicitly, as a `Tracking` value (store URI, experiment, run name, extra tags): the stage
commands build it from their flags (`pipeline._cli`), and `Tracking()` (no URI) switches it off.
Nothing here reads the environment.

`stage_run(stage, out_dir, tracking=...)` wraps a stage (gspo.native.sft.run_sft, gspo.native.trainer.run_rl).
Inside it, every MetricsLog whose file lies in `out_dir` mirrors its records into one MLflow run:

- the run is created at the stage's first record, with params = the resolved config of
  `out_dir/run_info.json` (flattened, dotted keys) and tags stage, algorithm, seed, config_hash,
  git_commit, data_hash.<file> (sha256 of each training file), versions, the command and the
  Tracking's own tags;
- its id is kept in `out_dir/mlflow_run.json`; a stage that starts over there replaces (deletes)
  the run an earlier attempt left, so the experiment holds one run per stage; a resumed stage
  (MetricsLog(resume_step=...)) with that file reopens the same run instead of making a new
  one, first dropping any training metric it holds beyond the resume step (truncate_metrics),
  as MetricsLog does with its file;
- commit="checkpoint" (RL) sends records to MLflow only once a complete checkpoint covers their
  step (out_dir/checkpoints/step_N), and everything at a clean end: MLflow then never holds a
  step that a resume would log a second time. commit="immediate" (SFT, no resume) sends each
  record at once;
- every point reaches the run exactly once, whatever stops the stage: sends are at least once
  (the buffer keeps records until their send is acknowledged, and a resumed stage offers again
  the records its metrics file keeps, which a kill -9 may have left unsent) and StoredSteps
  drops what the run already holds (a send a signal cut short, a store that committed and then
  reported itself locked, a record an earlier attempt sent);
- at the end the run is marked FINISHED, FAILED (an exception) or KILLED (SIGTERM, SIGINT), and
  run_info.json, summary.json and metrics.jsonl are attached as artifacts.

A tracking failure after the run exists (a locked or unreachable store, after retries) is
reported on stderr and never stops training: metrics.jsonl still has everything.

`supersede(out_dir, tracking)` forgets the run a stage's previous attempt left (a stage about to
start over); evaluations are recorded by gspo.tracking.evals.record_evaluations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pathlib
import signal
import sys
import threading
import typing

from gspo.tracking.store import (  # noqa: F401
    DEFAULT_EXPERIMENT,
    StoredSteps,
    artifact_root_for,
    client,
    create_run,
    experiment_id,
    flatten,
    fresh_summary_run,
    log_metrics,
    log_params,
    numeric_metrics,
    replace_metrics,
    retry,
    run_tags,
    set_tags,
    stage_runs,
    truncate_metrics,
)

RUN_FILE = "mlflow_run.json"
ARTIFACTS = ("run_info.json", "summary.json", "metrics.jsonl")


@dataclasses.dataclass(frozen=True)
class Tracking:
    """Where a stage's MLflow run goes. `uri` None: no tracking at all."""

    uri: str | None = None
    experiment: str = DEFAULT_EXPERIMENT
    run_name: str = ""  # "": <stage>-<algorithm>-seed<seed>
    tags: dict = dataclasses.field(default_factory=dict)  # extra tags of every run it makes

    @property
    def enabled(self) -> bool:
        return self.uri is not None

    def client(self):
        assert self.uri is not None, "tracking is off: no store"
        return client(self.uri)

    def experiment_id(self) -> str:
        """The experiment's id, created (once, even with concurrent callers) when missing; a
        SQLite store's folder is created first."""
        assert self.uri is not None, "tracking is off: no store to hold an experiment"
        if self.uri.startswith("sqlite:///"):
            pathlib.Path(self.uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        exp_id = experiment_id(self.client(), self.experiment)  # created when missing
        assert exp_id is not None
        return exp_id

    def with_(self, **changes) -> "Tracking":
        """A copy with fields replaced; `tags` are merged into the current ones."""
        if "tags" in changes:
            changes["tags"] = {**self.tags, **changes["tags"]}
        return dataclasses.replace(self, **changes)


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
            self._mirror.attach(resume_step, kept)

    def log(self, step: int, metrics: dict) -> None:
        raise_if_terminated()
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


def supersede(out_dir, tracking: Tracking) -> None:
    """A stage about to start over in `out_dir`: soft-delete the MLflow run its previous attempt
    left (the experiment then shows one live run per stage, variant and seed) and forget it."""
    run_file = pathlib.Path(out_dir) / RUN_FILE
    if not run_file.is_file():
        return
    prev = json.loads(run_file.read_text())
    if tracking.enabled and prev.get("tracking_uri") == tracking.uri:
        try:
            retry(tracking.client().delete_run, prev["run_id"])
            print(f"mlflow: superseded run {prev['run_id']} deleted")
        except Exception as e:  # noqa: BLE001 - already gone
            print(f"mlflow: previous run {prev['run_id']} not deleted ({e})")
    run_file.unlink()


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


_RECEIVED: list[int] = []  # SIGTERMs the active terminate_as_exception received


@contextlib.contextmanager
def terminate_as_exception():
    """While active, SIGTERM raises Terminated (so `finally` blocks and run status run).

    A handler's exception is lost when Python runs the handler inside a `__del__` or a weakref
    callback (it prints "Exception ignored" and goes on): a CI run finished all its steps with
    exit status 0 after a SIGTERM. So the signal is also remembered, and raise_if_terminated
    (called at every metrics record) and the end of the block raise it again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _RECEIVED.append(signum)
        raise Terminated(128 + signum)

    _RECEIVED.clear()
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
        raise_if_terminated()
    finally:
        signal.signal(signal.SIGTERM, old)
        _RECEIVED.clear()


def raise_if_terminated() -> None:
    """Raise Terminated if a SIGTERM arrived whose exception something swallowed."""
    if _RECEIVED:
        raise Terminated(128 + _RECEIVED[0])


# -- one stage's run ----------------------------------------------------------------------------

_ACTIVE: list["StageRun"] = []


def _active_for(folder: pathlib.Path) -> "StageRun | None":
    folder = pathlib.Path(folder).resolve()
    for run in reversed(_ACTIVE):
        if run.out_dir == folder:
            return run
    return None


def log_artifact(out_dir, path, artifact_path: str) -> None:
    """`path` as an artifact of the stage run tracking `out_dir`, if one is (gspo.tracking.samples)."""
    run = _active_for(pathlib.Path(out_dir))
    if run is not None:
        run.log_artifact(path, artifact_path)


def _warn(msg: str) -> None:
    print(f"tracking: {msg}", file=sys.stderr, flush=True)


class StageRun:
    """The MLflow run of one stage (see the module doc); inert when tracking is off."""

    def __init__(
        self, stage: str, out_dir, *, commit: str = "immediate", tracking: Tracking | None = None
    ):
        if commit not in ("immediate", "checkpoint"):
            raise ValueError(f"commit must be 'immediate' or 'checkpoint', got {commit!r}")
        self.stage = stage
        self.out_dir = pathlib.Path(out_dir).resolve()
        self.commit_mode = commit
        self.tracking = tracking or Tracking()
        self.uri = self.tracking.uri
        self.enabled = self.tracking.enabled
        self.run_id: str | None = None
        self.resume_step: int | None = None
        self._buffer: list[tuple[int, dict]] = []  # records not yet acknowledged by the store
        self._client: typing.Any = None  # the store's MlflowClient, once a run exists
        self._stored: StoredSteps | None = None
        self._broken = False

    # MetricsLog calls these
    def attach(self, resume_step: int | None, kept: list[dict]) -> None:
        """A metrics file opened; `kept`: the records it keeps from an earlier attempt, offered
        again because that attempt may have stopped before sending them (the run drops those it
        holds)."""
        self.resume_step = resume_step
        self._buffer = [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in kept]

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

    def log_artifact(self, path, artifact_path: str) -> None:
        """`path` as an artifact of the run now (one logged again under its name replaces it);
        a failure is a warning, never the stage's end, and stops nothing else."""
        if not self.enabled or self._broken:
            return
        try:
            self._ensure_run()
            retry(self._client.log_artifact, self.run_id, str(path), artifact_path)
        except Exception as e:  # noqa: BLE001 - tracking must never stop training
            _warn(f"could not log {path} ({type(e).__name__}: {e}); it stays in {self.out_dir}")

    def flush(self, upto: int | None = None) -> None:
        """Send buffered records with step <= upto (all when None). They leave the buffer only
        once the store has them: a signal arriving in between leaves them buffered, and the next
        flush finds them in the run and sends nothing twice."""
        if self.run_id is None or not self._buffer:
            return
        ready = [(s, m) for s, m in self._buffer if upto is None or s <= upto]
        if not ready:
            return
        log_metrics(self._client, self.run_id, ready, self._stored)
        self._buffer = [(s, m) for s, m in self._buffer if not (upto is None or s <= upto)]

    def _latest_checkpoint_step(self) -> int:
        from gspo.infra.checkpoint import list_checkpoints

        ckpts = list_checkpoints(self.out_dir / "checkpoints")
        return int(ckpts[-1].name.split("_")[-1]) if ckpts else -1

    def _info(self) -> dict:
        p = self.out_dir / "run_info.json"
        return json.loads(p.read_text()) if p.is_file() else {}

    def _ensure_run(self) -> str:
        """The stage's run id, the run reopened or created at the first call."""
        if self.run_id is not None:
            return self.run_id
        assert self.uri is not None, "tracking is off: no run to make"
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
                    self._stored = StoredSteps(cl, self.run_id, fresh=False)
                    retry(cl.update_run, self.run_id, status="RUNNING")
                    set_tags(cl, self.run_id, {"resumed_at_step": str(self.resume_step)})
                    return self.run_id
        # a stage starting over where an earlier attempt left a run (one killed before its first
        # checkpoint): that run is replaced, or the experiment would hold two runs of one seed
        supersede(self.out_dir, self.tracking)
        exp_name = self.tracking.experiment
        exp_id = self.tracking.experiment_id()
        tags = run_tags(info, self.stage, self.tracking.tags)
        name = self.tracking.run_name or f"{self.stage}-{tags['algorithm']}-seed{tags['seed']}"
        self.run_id = create_run(cl, exp_id, tags=tags, run_name=name)
        self._stored = StoredSteps(cl, self.run_id, fresh=True)
        from gspo.io import write_json

        write_json(
            run_file,
            {
                "run_id": self.run_id,
                "experiment_id": exp_id,
                "experiment": exp_name,
                "tracking_uri": self.uri,
            },
        )
        if info.get("config"):
            log_params(cl, self.run_id, flatten(info["config"]))
        return self.run_id

    def close(self, exc: BaseException | None) -> None:
        if not self.enabled or self._broken:
            return
        status = status_for(exc)
        try:
            if self.run_id is None and (
                not (self.out_dir / "run_info.json").is_file()
                or (status == "FINISHED" and not self._buffer)
            ):
                return  # nothing began, or nothing was recorded and nothing went wrong
            run_id = self._ensure_run()
            if status == "FINISHED":
                self.flush()
            else:
                self.flush(
                    self._latest_checkpoint_step() if self.commit_mode == "checkpoint" else None
                )
                set_tags(self._client, run_id, {"error": f"{type(exc).__name__}: {exc}"[:5000]})
            for name in ARTIFACTS:
                if (self.out_dir / name).is_file():
                    retry(self._client.log_artifact, run_id, str(self.out_dir / name))
            retry(self._client.set_terminated, run_id, status)
        except Exception as e:  # noqa: BLE001
            _warn(f"could not close MLflow run {self.run_id} ({type(e).__name__}: {e})")


@contextlib.contextmanager
def stage_run(stage: str, out_dir, *, commit: str = "immediate", tracking: Tracking | None = None):
    """Track the stage writing into `out_dir` (see the module doc); yields the StageRun."""
    run = StageRun(stage, out_dir, commit=commit, tracking=tracking)
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
