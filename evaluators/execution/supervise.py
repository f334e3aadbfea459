"""Watch one sandboxed child (evaluators.execution.sandbox): read its stdout, stderr and side channel
through size caps until EOF, the wall deadline or an overflow, then kill whatever is left of it
(the sandbox's PID 1 through a pidfd, the process group) and reap it, so that no stray process
or zombie remains and a descendant holding the pipes open cannot make the harness hang."""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import subprocess
import time

STATUSES = ("ok", "timeout", "memory", "runtime_error", "output_limit")
_EXIT_GRACE_S = 0.5  # how long pipes may stay open after the program's process has exited
_READ_CHUNK = 1 << 16


@dataclasses.dataclass(frozen=True)
class Result:
    status: str  # one of STATUSES
    stdout: str
    stderr: str
    returncode: int | None  # the program's exit status (negative: killed by that signal);
    # None when the harness killed it (timeout, output limit)
    wall_s: float = 0.0
    channel: bytes = b""  # what the program wrote to GSPO_CHANNEL_FD (when channel=True)
    isolated: bool = True  # False: ran in the unsafe mode

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _drain(fd: int, buf: bytearray, cap: int) -> str | None:
    """Read what `fd` has into `buf`, keeping at most `cap` bytes: "eof", "overflow" or None."""
    try:
        chunk = os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return None
    if not chunk:
        return "eof"
    room = cap - len(buf)
    buf += chunk[: max(room, 0)]
    return "overflow" if len(chunk) > room else None


def supervise(
    proc: subprocess.Popen,
    extra: dict[str, int],
    start: float,
    *,
    timeout_s: float,
    max_output: int,
    max_stderr: int,
    isolated: bool,
    pid1_from_info: bool,
) -> Result:
    """Read the child's streams through caps until EOF, the wall deadline or an overflow; then
    kill whatever is left of it and reap it."""
    caps = {"stdout": max_output, "stderr": max_stderr, "channel": max_output, "info": 65536}
    fds = {"stdout": proc.stdout.fileno(), "stderr": proc.stderr.fileno(), **extra}
    bufs = {name: bytearray() for name in fds}
    sel = selectors.DefaultSelector()
    for name, fd in fds.items():
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, name)
    pidfd = None
    killed_for = None
    exited_at = None
    deadline = start + timeout_s
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                killed_for = "timeout"
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                if not isolated:
                    _killpg(proc.pid)  # descendants left in the group
            if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
                break  # something still holds a pipe: stop waiting for it
            wait = min(deadline - now, 0.05 if exited_at is None else _EXIT_GRACE_S)
            for key, _ in sel.select(max(wait, 0.001)):
                what = _drain(key.fd, bufs[key.data], caps[key.data])
                if what == "eof":
                    sel.unregister(key.fd)
                    if key.data == "info" and pid1_from_info:
                        pidfd = _open_pid1(bytes(bufs["info"]), proc.pid)
                elif what == "overflow":
                    killed_for = "output_limit"
                    break
            if killed_for:
                break
    finally:
        sel.close()
        if pidfd is None and pid1_from_info and bufs.get("info"):
            pidfd = _open_pid1(bytes(bufs["info"]), proc.pid)
        terminate(proc, pidfd)
    wall = time.monotonic() - start
    rc = proc.returncode
    stdout = bytes(bufs["stdout"]).decode("utf-8", "replace")
    stderr = bytes(bufs["stderr"]).decode("utf-8", "replace")
    chan = bytes(bufs.get("channel", b""))
    if killed_for:
        return Result(killed_for, stdout, stderr, None, wall, chan, isolated)
    if isolated and rc is not None and rc > 128:  # bwrap reports a signal death as 128 + signal
        rc = -(rc - 128)
    return Result(_classify(rc, stderr), stdout, stderr, rc, wall, chan, isolated)


def _classify(rc: int | None, stderr: str) -> str:
    if rc == 0:
        return "ok"
    if rc in (-signal.SIGXCPU,):
        return "timeout"
    tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
    if tail and tail[0].startswith("MemoryError"):
        return "memory"
    if rc == -signal.SIGKILL:
        return "memory"  # killed from outside the harness: the kernel's OOM killer
    return "runtime_error"


def _open_pid1(info: bytes, bwrap_pid: int):
    """A pidfd for the sandbox's PID-1, named in bwrap's --info-fd JSON; only if that process is
    still bwrap's own child (the JSON is written before the program starts, so the program
    cannot forge it, and the parent check rules out a stale pid)."""
    try:
        obj, _ = json.JSONDecoder().raw_decode(info.decode())
        pid = int(obj["child-pid"])
        fd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError, AttributeError, UnicodeDecodeError):
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == bwrap_pid:
            return fd
    except (OSError, ValueError, IndexError):
        pass
    os.close(fd)
    return None


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def terminate(proc: subprocess.Popen, pidfd) -> None:
    """Kill the sandbox (its PID-1 first, so bwrap reaps it), then bwrap's group; reap."""
    try:
        if pidfd is not None:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            _killpg(proc.pid)
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        else:
            _killpg(proc.pid)  # leftovers of the group (its id is not reused while they live)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        for f in (proc.stdout, proc.stderr):
            try:
                f.close()
            except OSError:
                pass
