"""Warm program sandboxes: each worker is one bwrap sandbox running evaluators/execution/sandboxed/runner.py, which
stays up and runs program after program, each test in a fresh forked child.

A sandbox and interpreter start (~20 ms) is then paid once per worker, not once per program or
test. Between two programs the runner resets everything a program can leave behind in its
sandbox (evaluators/execution/sandboxed/runner.py's `_gspo_reset`): it kills every process but itself and bwrap's init and
waits until /proc lists none, empties /tmp and /dev/shm (the only writable file systems: /dev is
mounted read-only in a worker), removes every SysV shared-memory segment, semaphore set and
message queue, and empties the user, user-session and persistent keyrings; POSIX message queues
cannot be created at all (RLIMIT_MSGQUEUE 0) and each test joins a fresh session keyring of its
own; the environment, limits and working directory are the child's own. If any step fails the
runner exits and the worker is discarded. The runner is non-dumpable, so a program cannot read
or write its memory or descriptors; a program that stops or kills it loses its own tests and the
worker. Workers are replaced after MAX_PROGRAMS programs. Programs running at the same time are
in different workers, i.e. different sandboxes.

A test whose limits exceed a worker's (POOL_MEMORY_MB, POOL_TMP_MB, POOL_MAX_FILE_MB, more
processes) runs in a sandbox of its own program instead (batch.run_program's one-shot path). So
does every program once a fresh worker has failed its first, empty request (a kernel or seccomp
filter without something the runner needs): pooling is then off for the process, with a warning.

Workers are started from one long-lived thread, because bwrap's --die-with-parent fires when the
*thread* that started it ends, and callers score from short-lived thread pools. `shutdown()`
stops them all (also at exit); a forked child of the harness forgets its parent's workers.
"""

from __future__ import annotations

import atexit
import os
import queue
import selectors
import subprocess
import threading
import time
import warnings

from evaluators.execution import sandbox
from evaluators.execution.frames import RUNNER, next_frame, request
from evaluators.execution.supervise import _open_pid1, terminate

POOL_MEMORY_MB = 4096
POOL_TMP_MB = 64
POOL_MAX_FILE_MB = 64
MAX_PROGRAMS = 500
_START_TIMEOUT_S = 20.0


class WorkerError(RuntimeError):
    """The worker stopped answering: it was discarded."""


class PoolUnavailable(RuntimeError):
    """A fresh worker failed its first, empty request: pooling does not work here."""


class Worker:
    """One warm sandbox and the read end of its results channel."""

    def __init__(self, backend):
        self.proc, _, streams = sandbox.start_bwrap(
            backend,
            RUNNER,
            None,
            timeout_s=10**6,
            memory_mb=POOL_MEMORY_MB,
            files=None,
            args=(),
            channel=True,
            max_procs=sandbox.DEFAULT_MAX_PROCS + 1,
            max_file_mb=POOL_MAX_FILE_MB,
            tmp_mb=POOL_TMP_MB,
            ro_dev=True,
        )
        self.chan, self.programs, self.buf = streams["channel"], 0, bytearray()
        info, deadline = bytearray(), time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:  # bwrap writes its info JSON, then closes it
            chunk = _read_ready(streams["info"], deadline)
            if not chunk:
                break
            info += chunk
        os.close(streams["info"])
        self.pidfd = _open_pid1(bytes(info), self.proc.pid)
        os.set_blocking(self.chan, False)
        try:  # an empty program: the runner starts, resets and answers
            self.run(request([], False), time.monotonic() + _START_TIMEOUT_S)
        except WorkerError:
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
            err = self.proc.stderr.read1(4096) if self.proc.poll() is not None else b""
            self.close()
            raise PoolUnavailable(
                f"a fresh sandbox worker did not answer: "
                f"{err.decode('utf-8', 'replace').strip()[-300:]}"
            ) from None
        self.programs = 0

    def run(self, request: bytes, deadline: float) -> list[tuple[dict, list[bytes]]]:
        """Send one program's request; its frames until the runner's "done" (fewer when it
        stopped at a failure). Raises WorkerError when the worker broke or overran."""
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerError(f"worker gone: {e}") from None
        self.programs += 1
        frames = []
        while True:
            frame = self._frame(deadline)
            if frame is None:
                raise WorkerError("worker ended or overran", frames)
            if frame[0].get("done"):
                return frames
            frames.append(frame)

    def _frame(self, deadline):
        while True:
            frame = next_frame(self.buf)
            if frame is not None:
                del self.buf[: frame[2]]
                return frame[:2]
            chunk = _read_ready(self.chan, deadline)
            if not chunk:
                return None
            self.buf += chunk

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        terminate(self.proc, self.pidfd)
        os.close(self.chan)


def _read_ready(fd: int, deadline: float) -> bytes:
    """What `fd` has before `deadline` (b"" at EOF or when the deadline passes)."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            if sel.select(left):
                try:
                    return os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue


class _Pool:
    def __init__(self):
        self.lock = threading.Lock()
        self.idle: list[Worker] = []
        self.starts: queue.Queue = queue.Queue()
        self.spawner = None

    def _spawn_forever(self):
        while True:
            backend, reply = self.starts.get()
            try:
                reply.put(Worker(backend))
            except BaseException as e:  # noqa: BLE001 (handed to the caller)
                reply.put(e)

    def checkout(self, backend) -> Worker:
        with self.lock:
            if self.idle:
                return self.idle.pop()
            if self.spawner is None:
                self.spawner = threading.Thread(
                    target=self._spawn_forever, daemon=True, name="gspo-sandbox-spawner"
                )
                self.spawner.start()
        reply: queue.Queue = queue.Queue()
        self.starts.put((backend, reply))
        got = reply.get()
        if isinstance(got, BaseException):
            raise got
        return got

    def checkin(self, w: Worker):
        if w.programs >= MAX_PROGRAMS:
            w.close()
            return
        with self.lock:
            self.idle.append(w)

    def shutdown(self):
        with self.lock:
            idle, self.idle = self.idle, []
        for w in idle:
            w.close()

    def forget(self):
        """In a forked child: the workers are the parent's."""
        self.lock = threading.Lock()
        self.idle, self.starts, self.spawner = [], queue.Queue(), None


_POOL = _Pool()
atexit.register(_POOL.shutdown)
os.register_at_fork(after_in_child=_POOL.forget)


def shutdown() -> None:
    """Stop every idle worker (the next program starts a fresh one)."""
    _POOL.shutdown()


_unavailable: list[str] = []  # why pooling does not work here, once a fresh worker failed


def fits(specs: list[dict], jobs: list[dict]) -> bool:
    """Whether pooling works here and every test fits a worker's limits."""
    return (
        not _unavailable
        and all(
            s["memory_mb"] <= POOL_MEMORY_MB and s["max_file_mb"] <= POOL_MAX_FILE_MB for s in specs
        )
        and all(
            int(j.get("tmp_mb", sandbox.DEFAULT_TMP_MB)) <= POOL_TMP_MB
            and int(j.get("max_procs", sandbox.DEFAULT_MAX_PROCS)) <= sandbox.DEFAULT_MAX_PROCS
            for j in jobs
        )
    )


def run(backend, request: bytes, deadline: float):
    """One program's frames from a warm worker: (frames, complete). Incomplete means the worker
    broke or overran (it is discarded); the frames it sent are still the program's."""
    try:
        w = _POOL.checkout(backend)
    except PoolUnavailable as e:
        if not _unavailable:
            _unavailable.append(str(e))
            warnings.warn(f"{e}; each program runs in a sandbox of its own", stacklevel=3)
        raise
    try:
        frames = w.run(request, deadline)
    except WorkerError as e:
        w.close()
        return (e.args[1] if len(e.args) > 1 else []), False
    _POOL.checkin(w)
    return frames, True
