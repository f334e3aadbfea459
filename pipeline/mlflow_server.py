"""An MLflow tracking server for many concurrent writers (a cluster's training and eval jobs).

    python -m pipeline.mlflow_server --backend-store-uri sqlite:///results/mlflow-server.db \\
        --artifacts-destination results/mlartifacts --host 127.0.0.1 --port 5000

starts the real `mlflow server` (a subprocess, `python -m mlflow server ...`), waits until its
/health endpoint answers, prints the tracking URI the stages take (`--tracking-uri
http://HOST:PORT`, `MLFLOW_TRACKING_URI`, or the workflow config's `tracking: {uri: ...}`) and
runs until interrupted: SIGINT or SIGTERM stop the server (its whole process group) cleanly; if
the server dies on its own, the command exits 1 with a one-line error. A port already in use or
a server that does not come up is a one-line error and exit 2.

Why: every job writing to one sqlite file on a shared file system (NFS, Lustre) is unsafe -- its
locking is unreliable there and 32 writers contend for one lock. With a server only the server
touches the store. On a real cluster give it a database: `--backend-store-uri
postgresql://USER:PASS@DBHOST/mlflow` (needs `pip install psycopg2-binary`) and `--host 0.0.0.0`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class ServerError(RuntimeError):
    """The server could not start, or stopped on its own."""


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _public_host(host: str) -> str:
    """The name clients use: the machine's name when bound to every interface."""
    return socket.getfqdn() if host in ("0.0.0.0", "::", "") else host


def _default_allowed_hosts(host: str) -> str | None:
    """Beyond loopback, MLflow's Host-header check would refuse clients that name this machine
    by its host name (it allows localhost and private IPs only): add the machine's names."""
    if host in LOOPBACK:
        return None
    from mlflow.server.security_utils import get_default_allowed_hosts

    names = {socket.gethostname(), socket.getfqdn(), host} - {"", "0.0.0.0", "::"}
    return ",".join(
        [*get_default_allowed_hosts(), *sorted(names), *(f"{n}:*" for n in sorted(names))]
    )


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def _last_line(log) -> str:
    if not log or not os.path.exists(log):
        return ""
    with open(log, errors="replace") as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    return f": {lines[-1]}" if lines else ""


def _wait_healthy(proc, health: str, timeout: float, log) -> None:
    deadline = time.monotonic() + timeout
    while not _healthy(health):
        if proc.poll() is not None:
            raise ServerError(
                f"mlflow server exited with code {proc.returncode} before "
                f"answering on {health}{_last_line(log)}"
            )
        if time.monotonic() > deadline:
            raise ServerError(f"mlflow server did not answer on {health} within {timeout:.0f} s")
        time.sleep(0.3)


def server_command(
    backend_store_uri: str,
    artifacts_destination: str,
    host: str,
    port: int,
    workers: int,
    allowed_hosts: str | None = None,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend_store_uri,
        "--serve-artifacts",
        "--artifacts-destination",
        artifacts_destination,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    allowed = allowed_hosts or _default_allowed_hosts(host)
    return cmd + (["--allowed-hosts", allowed] if allowed else [])


def start(
    backend_store_uri: str = "sqlite:///results/mlflow-server.db",
    artifacts_destination: str = "results/mlartifacts",
    host: str = "127.0.0.1",
    port: int = 5000,
    workers: int = 4,
    allowed_hosts: str | None = None,
    log: str | None = None,
    timeout: float = 120.0,
):
    """Start `mlflow server` and wait until /health answers. Returns (process, tracking URI);
    stop it with `stop(process)`. `log`: a file for the server's output (default: ours).
    Raises ServerError when the port is taken or the server exits or stays silent."""
    if not _port_free(host, port):
        raise ServerError(
            f"port {port} on {host} is already in use (another server?); pick another with --port"
        )
    if backend_store_uri.startswith("sqlite:///"):
        parent = os.path.dirname(backend_store_uri[len("sqlite:///") :])
        os.makedirs(parent or ".", exist_ok=True)
    if "://" not in artifacts_destination:
        os.makedirs(artifacts_destination, exist_ok=True)
    cmd = server_command(
        backend_store_uri, artifacts_destination, host, port, workers, allowed_hosts
    )
    out = open(log, "ab") if log else None
    try:
        # the server's background job runner (GenAI scorers; 7 processes) is not needed for
        # tracking and slows the start: off unless MLFLOW_SERVER_ENABLE_JOB_EXECUTION says so
        env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    finally:
        if out:
            out.close()
    probe = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    health = f"http://{f'[{probe}]' if ':' in probe else probe}:{port}/health"
    try:
        _wait_healthy(proc, health, timeout, log)
    except BaseException:  # not up, or interrupted meanwhile: leave no server behind
        stop(proc)
        raise
    public = _public_host(host)
    return proc, f"http://{f'[{public}]' if ':' in public else public}:{port}"


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM to the server's process group (its workers too, even when the server itself has
    died), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(proc.pid, wait):
            break
    proc.poll()


def _group_alive(pgid: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop(signum)


def parser():
    from pipeline._cli import Parser

    ap = Parser("python -m pipeline.mlflow_server", __doc__.splitlines()[0])
    ap.add_argument(
        "--backend-store-uri",
        default="sqlite:///results/mlflow-server.db",
        help="the server's store; on a cluster postgresql://USER:PASS@DBHOST/DB "
        "(default: %(default)s)",
    )
    ap.add_argument(
        "--artifacts-destination",
        default="results/mlartifacts",
        help="where logged artifacts go (a folder or s3://...; default: %(default)s)",
    )
    ap.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind; 0.0.0.0 for other machines (default: %(default)s)",
    )
    ap.add_argument("--port", type=int, default=5000, help="(default: %(default)s)")
    ap.add_argument(
        "--workers", type=int, default=4, help="server worker processes (default: %(default)s)"
    )
    ap.add_argument(
        "--allowed-hosts",
        default=None,
        help="Host headers the server accepts (default: localhost, private IPs and, "
        "beyond loopback, this machine's names)",
    )
    ap.add_argument("--log", default=None, help="file for the server's output (default: here)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the server to answer (default: %(default)s)",
    )
    return ap


def parse_args(argv=None):
    return parser().parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    old = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    proc = None
    try:
        proc, uri = start(
            args.backend_store_uri,
            args.artifacts_destination,
            args.host,
            args.port,
            args.workers,
            args.allowed_hosts,
            args.log,
            args.timeout,
        )
        print(
            f"MLflow tracking server at {uri} (store {args.backend_store_uri}); point the "
            f"stages at it with --tracking-uri {uri}, MLFLOW_TRACKING_URI={uri} or the "
            f"workflow config's tracking: {{uri: {uri}}}. Ctrl-C stops it.",
            flush=True,
        )
        code = proc.wait()
        print(f"error: mlflow server exited on its own with code {code}", file=sys.stderr)
        return 1
    except ServerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (_Stop, KeyboardInterrupt):
        print("stopping the MLflow tracking server", file=sys.stderr, flush=True)
        return 0
    finally:
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        if proc is not None:
            stop(proc)
        for s, handler in old.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    from pipeline._cli import run

    run(main)
