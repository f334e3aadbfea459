"""A function called with a time limit per call, in worker processes that are killed when the
limit passes (evaluators.for_verl's reward under verl).

verl calls its reward function from executor threads. There math-verify runs without its own
timeouts (they use SIGALRM, main thread only), and an answer such as `9^{9^{9^{9}}}` holds the
GIL in one big-integer power for good: every thread of the process stalls, not only the one
scoring it. So each call goes to a worker process, whose main thread runs it, with
math-verify's timeouts on; a call still running after `timeout` seconds is answered None and
its worker killed and replaced. Workers are fresh interpreters (no fork under threads, and
unlike multiprocessing's spawn they never re-import the caller's main module, a Ray worker's
here), talking over a socket pair.
"""

from __future__ import annotations

import pathlib
import queue
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _serve(fd: int) -> None:
    """A worker: call the warm-up function it is sent first (its imports), say it is ready,
    then call what it is sent and send back (True, value) or (False, error text)."""
    conn = Connection(fd)
    warm = conn.recv()
    if warm is not None:
        warm()
    conn.send("ready")
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send((True, fn(*args)))
        except Exception as e:  # noqa: BLE001 - the caller raises it
            conn.send((False, f"{type(e).__name__}: {e}"))


def warm_math_scoring() -> None:
    """A math-scoring worker's imports, before its first answer's time limit starts. Here, not
    in evaluators.for_verl: verl loads that file under a module name of its own, which a
    worker could not import to find the function."""
    import sympy  # noqa: F401

    import evaluators.tasks  # noqa: F401

    try:
        import math_verify  # noqa: F401
    except ImportError:
        pass


START_TIMEOUT_S = 120.0  # a worker's interpreter and imports: not part of a call's limit


class _Worker:
    def __init__(self, warm):
        parent, child = socket.socketpair()
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            f"from evaluators.timed import _serve; _serve({child.fileno()})"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL
        )
        child.close()
        self.conn = Connection(parent.detach())
        try:
            self.conn.send(warm)
            ready = self.conn.poll(START_TIMEOUT_S) and self.conn.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise RuntimeError(
                f"evaluators.timed: a worker did not start in "
                f"{START_TIMEOUT_S:g} s (warm-up {getattr(warm, '__name__', warm)})"
            )

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.conn.close()


class TimedPool:
    """Up to `size` worker processes, started as calls need them, each calling `warm` (an
    importable function, sent by reference: its imports) before its first call, so a call's
    limit is the call's, not the imports'."""

    def __init__(self, size: int, warm=None):
        self.size, self.warm = size, warm
        self._idle, self._lock, self._started = queue.Queue(), threading.Lock(), 0

    def _take(self) -> _Worker:
        """An idle worker, or a new one while fewer than `size` run (a killed one frees its
        place for whoever waits)."""
        while True:
            with self._lock:
                start = self._idle.empty() and self._started < self.size
                if start:
                    self._started += 1
            if start:
                try:
                    return _Worker(self.warm)
                except BaseException:
                    with self._lock:
                        self._started -= 1
                    raise
            try:
                return self._idle.get(timeout=0.05)
            except queue.Empty:
                continue

    def close(self) -> None:
        """Stop the idle workers (a busy one is stopped by its caller's call): what this pool
        started leaves no process behind."""
        while True:
            try:
                w = self._idle.get_nowait()
            except queue.Empty:
                return
            w.kill()
            with self._lock:
                self._started -= 1

    def call(self, fn, args: tuple, timeout: float):
        """fn(*args) in a worker (fn importable by name: it is sent by reference); None when it
        ran past `timeout` seconds or its worker died. An exception it raised is re-raised as
        RuntimeError with its text."""
        w = self._take()
        try:
            w.conn.send((fn, args))
            if w.conn.poll(timeout):
                ok, value = w.conn.recv()
                self._idle.put(w)
                w = None
                if not ok:
                    raise RuntimeError(value)
                return value
            return None
        except (EOFError, OSError):
            return None
        finally:
            if w is not None:  # ran past its time or died: replaced by a fresh one
                w.kill()
                with self._lock:
                    self._started -= 1
