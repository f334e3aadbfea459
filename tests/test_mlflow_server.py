"""pipeline.mlflow_server for real: a local `mlflow server` (sqlite store in tmp) that 8 writer
processes log to at once, as a cluster's jobs would; no value may be lost. Also: a second server
on a taken port, and a server that cannot start, are one-line errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from pipeline.mlflow_server import ServerError, start, stop

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
WRITERS, STEPS = 8, 200

# one writer process: a run in the shared experiment; metric `loss` logged one value per call
# for half its steps and by log_batch for the rest, `reward` all by log_batch; params, tags
WRITER = r"""
import json, sys, time
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
uri, exp, i, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = MlflowClient(uri)
t0 = time.time()
run = c.create_run(exp, run_name=f"writer{i}", tags={"writer": str(i)})
rid = run.info.run_id
c.log_batch(rid, params=[Param("writer", str(i)), Param("lr", "1e-6"), Param("seed", str(i))],
            tags=[RunTag("kind", "concurrency"), RunTag("host", "local")])
half, ms = steps // 2, 1_000_000
for s in range(half):
    c.log_metric(rid, "loss", i * 1000 + s / 4, timestamp=ms + s, step=s)
for a in range(half, steps, 25):
    c.log_batch(rid, metrics=[Metric("loss", i * 1000 + s / 4, ms + s, s)
                              for s in range(a, min(a + 25, steps))])
for a in range(0, steps, 50):
    c.log_batch(rid, metrics=[Metric("reward", i + s / 1000, ms + s, s)
                              for s in range(a, min(a + 50, steps))])
c.set_terminated(rid, "FINISHED")
print(json.dumps({"run_id": rid, "start": t0, "end": time.time(), "calls": half + 2 + 4 + 4 + 1}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlflow-server")
    proc, uri = start(
        f"sqlite:///{tmp}/mlflow.db",
        str(tmp / "artifacts"),
        "127.0.0.1",
        _free_port(),
        log=str(tmp / "server.log"),
    )
    try:
        yield proc, uri
    finally:
        stop(proc)
        assert proc.poll() is not None


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(server):
    from mlflow import MlflowClient

    proc, uri = server
    client = MlflowClient(uri)
    exp = client.create_experiment("concurrency")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, uri, exp, str(i), str(STEPS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WRITERS)
    ]
    results = []
    for w in writers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)

    runs = client.search_runs([exp], max_results=100)
    assert len(runs) == WRITERS
    by_id = {r.info.run_id: r for r in runs}
    for i, res in enumerate(results):
        run = by_id[res["run_id"]]
        assert run.info.status == "FINISHED"
        assert run.data.params == {"writer": str(i), "lr": "1e-6", "seed": str(i)}
        assert {
            "writer": str(i),
            "kind": "concurrency",
            "host": "local",
        }.items() <= run.data.tags.items()
        loss = sorted((m.step, m.value) for m in client.get_metric_history(res["run_id"], "loss"))
        reward = sorted(
            (m.step, m.value) for m in client.get_metric_history(res["run_id"], "reward")
        )
        assert loss == [(s, i * 1000 + s / 4) for s in range(STEPS)]
        assert reward == [(s, i + s / 1000) for s in range(STEPS)]
    values = WRITERS * STEPS * 2
    calls = sum(r["calls"] for r in results)
    print(
        f"\nmlflow server ({uri}, sqlite, 4 workers): {WRITERS} writer processes, {WRITERS} runs, "
        f"{values} metric values in {calls} requests, {seconds:.1f} s, "
        f"{values / seconds:.0f} values/s, {calls / seconds:.0f} requests/s; none lost"
    )
    assert proc.poll() is None


def test_second_server_on_the_same_port_is_a_one_line_error(server, tmp_path):
    proc, uri = server
    port = int(uri.rsplit(":", 1)[1])
    with pytest.raises(ServerError, match=f"port {port} .* already in use"):
        start(f"sqlite:///{tmp_path}/other.db", str(tmp_path / "a"), "127.0.0.1", port)
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.mlflow_server",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path}/other.db",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: port {port} on 127.0.0.1 is already")
    assert proc.poll() is None  # the first server is untouched


def test_a_server_that_cannot_start_is_a_one_line_error(tmp_path):
    port = _free_port()
    t0 = time.time()
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.mlflow_server",
            "--port",
            str(port),
            "--backend-store-uri",
            "nosuchdb://nowhere/x",
            "--log",
            str(tmp_path / "server.log"),
            "--artifacts-destination",
            str(tmp_path / "a"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2, cli.stderr
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: mlflow server exited with code"), lines
    assert time.time() - t0 < 100
