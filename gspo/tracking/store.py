"""Helpers over an MLflow store: a client, retries while a SQLite store is locked, experiments
created once under concurrency, batched metrics / params / tags, metric replacement and truncation
on SQL stores, and the lookup of runs by their `stage` tag.

Every write here lands once however often it is retried (exactly once = at-least-once sends plus
de-duplication against the store): a store can commit a write and then report itself locked, and
a signal can cut a send short after the store took it, so a blind re-send would double it.
- metrics: StoredSteps knows which (metric, step) points a run holds and sends only the others;
  a send that ended without an answer makes it read the store again before the next one;
- runs: create_run tags each new run with a token and, after a failed create, looks the token up
  before creating again;
- params: an equal value already logged is fine, a different one is a one-line error naming it;
- tags: a key holds one value, so a re-sent tag cannot double (status tags change on purpose).

Nothing here reads the environment: every function is given its client, run or URI.
"""

from __future__ import annotations

import json
import pathlib
import time
import uuid

DEFAULT_EXPERIMENT = "gspo-bench"
DEFAULT_STORE = (
    "sqlite:///results/mlflow.db"  # where the workflow records, and what readers fall back to
)


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


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
            time.sleep(0.2 * 2**i)


def artifact_root_for(uri: str) -> str | None:
    """Artifacts of a sqlite store go next to the database file (`<db dir>/mlartifacts`)."""
    if uri.startswith("sqlite:///"):
        db = pathlib.Path(uri[len("sqlite:///") :])
        return (db.resolve().parent / "mlartifacts").as_uri()
    return None


# The experiment's kind, as MLflow records it. MLflow 3.17's UI does not read it to choose a
# view: it takes GenAI or Model training from the URL's workflowType parameter, else from the
# browser's last choice, else GenAI (an overview of traces: "No data available"). ui_link is the
# address that opens an experiment on its training runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
UI_VIEW = "workflowType=machine_learning"


def ui_link(experiment_id: str, base: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI address of an experiment's training runs (`mlflow ui` serves `base`)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}?{UI_VIEW}"


def experiment_id(cl, name: str, *, create: bool = True) -> str | None:
    """The id of experiment `name`, created (once, even with concurrent callers) when missing,
    tagged as a model-training experiment (EXPERIMENT_KIND)."""
    exp = retry(cl.get_experiment_by_name, name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            raise RuntimeError(
                f"MLflow experiment {name!r} (id {exp.experiment_id}) is deleted in "
                f"{cl.tracking_uri}: restore it (mlflow experiments restore --experiment-id "
                f"{exp.experiment_id}) or remove it for good (mlflow gc --backend-store-uri "
                f"{cl.tracking_uri} --experiment-ids {exp.experiment_id})"
            )
        return exp.experiment_id
    if not create:
        return None
    try:
        return retry(
            cl.create_experiment,
            name,
            artifact_location=artifact_root_for(cl.tracking_uri),
            tags=EXPERIMENT_KIND,
        )
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


class StoredSteps:
    """The (metric, step) points one run holds in the store, so that `send` logs each point once
    however often it is offered: by a retry after the store committed and then reported itself
    locked, by a flush that a signal cut short after the send, or by a resumed stage replaying
    its metrics file.

    A metric's history is read from the store at most once, at its first use, and kept up to date
    locally after each acknowledged send. A send that ends without an answer (an error, a signal)
    leaves its metrics unsure: the store, not this memory, then says what landed, and they are
    read again before the next send. `fresh`: the run is known to hold none of the points about to
    be sent (a run just created, or points just deleted), so nothing needs reading up front."""

    def __init__(self, cl, run_id: str, *, fresh: bool):
        self.cl, self.run_id, self.fresh = cl, run_id, fresh
        self._steps: dict[str, set[int]] = {}
        self._unsure: set[str] = set()

    def held(self, key: str) -> set[int]:
        """The steps at which the store holds `key`."""
        if key in self._unsure or (key not in self._steps and not self.fresh):
            hist = retry(self.cl.get_metric_history, self.run_id, key)
            self._steps[key] = {int(m.step) for m in hist}
            self._unsure.discard(key)
        return self._steps.setdefault(key, set())

    def send(self, rows: list[tuple[int, dict]], *, attempts: int = 8) -> int:
        """Log the points of [(step, {key: value})] that the store lacks, in batches of MLflow's
        1000-metric limit, retrying while the store is locked; returns the number sent."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        offered = {(k, int(step)): v for step, m in rows for k, v in numeric_metrics(m).items()}
        todo = [Metric(k, v, now, s) for (k, s), v in offered.items() if s not in self.held(k)]
        for i in range(0, len(todo), 1000):
            chunk = todo[i : i + 1000]
            for attempt in range(attempts):
                chunk = [m for m in chunk if m.step not in self.held(m.key)]
                if not chunk:
                    break
                keys = {m.key for m in chunk}
                self._unsure |= keys  # until the store answers
                try:
                    self.cl.log_batch(self.run_id, metrics=chunk)
                except Exception as e:  # noqa: BLE001 - MlflowException / OperationalError
                    if attempt == attempts - 1 or not _is_locked(e):
                        raise
                    time.sleep(0.2 * 2**attempt)
                    continue
                for m in chunk:
                    self._steps[m.key].add(m.step)
                self._unsure -= keys
                break
        return len(todo)


def log_metrics(
    cl, run_id: str, rows: list[tuple[int, dict]], stored: StoredSteps | None = None
) -> int:
    """Log [(step, {key: value})], each (key, step) once (StoredSteps). Without `stored` the
    run is taken to hold none of these points yet (a new run, or points just deleted)."""
    return (stored or StoredSteps(cl, run_id, fresh=True)).send(rows)


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
                        SqlMetric.run_uuid == run_id,
                        SqlMetric.key.in_(keys),
                        SqlMetric.step == int(step),
                    ).delete(synchronize_session=False)

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
            n = (
                session.query(SqlMetric)
                .filter(
                    SqlMetric.run_uuid == run_id,
                    SqlMetric.step > int(after_step),
                    ~SqlMetric.key.startswith(keep_prefix),
                )
                .delete(synchronize_session=False)
            )
            # latest_metrics rows pointing past the cut are rebuilt from what is left
            stale = (
                session.query(SqlLatestMetric)
                .filter(
                    SqlLatestMetric.run_uuid == run_id,
                    SqlLatestMetric.step > int(after_step),
                    ~SqlLatestMetric.key.startswith(keep_prefix),
                )
                .all()
            )
            for row in stale:
                last = (
                    session.query(SqlMetric)
                    .filter(SqlMetric.run_uuid == run_id, SqlMetric.key == row.key)
                    .order_by(SqlMetric.step.desc(), SqlMetric.timestamp.desc())
                    .first()
                )
                if last is None:
                    session.delete(row)
                else:
                    row.step, row.value, row.timestamp, row.is_nan = (
                        last.step,
                        last.value,
                        last.timestamp,
                        last.is_nan,
                    )
            return n

    return retry(delete)


def run_tags(info: dict, stage: str, extra: dict | None = None) -> dict[str, str]:
    """Tags of a stage's run from its run_info.json record, plus `extra` (the caller's own)."""
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
    tags.update({k: str(v) for k, v in (extra or {}).items()})
    return tags


def stage_runs(cl, exp_id: str, stage: str) -> list:
    """Every run of the experiment tagged `stage`, across result pages."""
    out, token = [], None
    while True:
        page = retry(
            cl.search_runs, [exp_id], f"tags.stage = '{stage}'", max_results=1000, page_token=token
        )
        out += list(page)
        token = page.token
        if not token:
            return out


CREATE_TOKEN = "gspo.create_token"  # the tag create_run finds a run it made by


def create_run(cl, exp_id: str, *, tags: dict[str, str], run_name: str) -> str:
    """A new run's id. The run carries a token tag, so that when the store commits the run and
    then reports itself locked, the retry finds that run instead of making a second one."""
    token = uuid.uuid4().hex
    tags = {**tags, CREATE_TOKEN: token}
    for attempt in range(8):
        try:
            return cl.create_run(exp_id, tags=tags, run_name=run_name).info.run_id
        except Exception as e:  # noqa: BLE001
            if attempt == 7 or not _is_locked(e):
                raise
            time.sleep(0.2 * 2**attempt)
            found = retry(cl.search_runs, [exp_id], f"tags.`{CREATE_TOKEN}` = '{token}'")
            if found:
                return found[0].info.run_id
    raise AssertionError("unreachable")


def fresh_summary_run(cl, exp_id: str, stage: str, tags: dict | None = None) -> str:
    """A new run for a once-per-experiment stage (aggregate, report), replacing earlier ones so the
    UI shows one current summary; tagged stage=<stage>, algorithm=all, plus `tags`."""
    for old in stage_runs(cl, exp_id, stage):
        retry(cl.delete_run, old.info.run_id)
    all_tags = {"stage": stage, "algorithm": "all", **{k: str(v) for k, v in (tags or {}).items()}}
    return create_run(cl, exp_id, tags=all_tags, run_name=stage)


def log_params(cl, run_id: str, params: dict[str, str]) -> None:
    """Log params the run lacks; one it holds with an equal value is fine (a retried or repeated
    call), one it holds with another value is a ValueError naming it (MLflow never changes a
    param, and a run whose config changed under it would no longer say what it ran)."""
    from mlflow.entities import Param

    params = {k[:250]: v[:6000] for k, v in params.items()}
    held = retry(cl.get_run, run_id).data.params
    for k, v in sorted(params.items()):
        if k in held and held[k] != v:
            raise ValueError(
                f"MLflow run {run_id}: param {k!r} is already {held[k]!r}, not "
                f"{v!r}: start a new run for a changed config"
            )
    items = [Param(k, v) for k, v in sorted(params.items()) if k not in held]
    for i in range(0, len(items), 100):
        retry(cl.log_batch, run_id, params=items[i : i + 100])


def set_tags(cl, run_id: str, tags: dict[str, str]) -> None:
    """Set tags (a key holds one value: a repeated call changes nothing)."""
    from mlflow.entities import RunTag

    items = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, len(items), 100):
        retry(cl.log_batch, run_id, tags=items[i : i + 100])
