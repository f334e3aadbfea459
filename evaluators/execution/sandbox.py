"""Run untrusted Python programs, one fresh sandboxed process per run, never in this process.

Isolation (the default, and the only mode code benchmarks accept without an explicit opt-out):

* every program runs in a fresh `bwrap` (bubblewrap) sandbox: its own user, PID, mount, network,
  IPC, UTS and cgroup namespaces (`--unshare-all --unshare-user`), no network (only a loopback
  interface), a read-only view of `/`, a private size-capped tmpfs `/tmp` that is the working
  directory and holds the program, a private `/dev` and `/dev/shm`, the harness's working
  directory hidden under an empty tmpfs, a cleared environment, a new session
  (`--new-session`), `--die-with-parent` and no further user namespaces (`--disable-userns`).
  When the harness runs as root, bwrap itself is started as user `nobody` (uid 65534) and
  builds an unprivileged user namespace, so nothing in the sandbox has root's real uid or any
  capability (this needs unprivileged user namespaces, on by default on current kernels; where
  they are off the probe fails and code benchmarks refuse to run, naming the reason);
* inside, `prlimit` sets CPU-time, address-space, file-size, open-file, process-count and core
  limits before exec'ing the interpreter. The process limit is set after the sandbox's user
  namespace exists, so it counts the sandbox's own processes only: a fork bomb in one program
  cannot starve its neighbours of process slots;
* the harness feeds stdin from a memory file, reads stdout, stderr and an optional side channel
  (a separate pipe, `GSPO_CHANNEL_FD`) through size caps, and enforces the wall-time limit. On a
  timeout, an output flood, or when the program exits, the sandbox's PID-1 is killed (through a
  pidfd) and with it every process the program started; the bwrap process group is killed and
  everything is reaped, so no stray process or zombie remains, and a descendant holding the pipes
  open cannot make the harness hang.

`Result.status` reports how the process ended ("ok" = exit status 0). It says nothing about
correctness: callers (evaluators.benchmarks.livecodebench, evaluators.benchmarks.codeforces) decide verdicts by
comparing the captured stdout or side-channel value with expected outputs the child never sees,
so a program that exits early, fakes a verdict or lies about its exit status gains nothing.

Without a working bwrap, `run` raises SandboxUnavailable, unless the caller passes `unsafe=True`
or the environment sets GSPO_UNSAFE_SANDBOX=1: then programs run as plain subprocesses (own
session and process group, temp working directory, cleaned environment, the same rlimits, the
group killed afterwards) with NO file-system, network or PID isolation. A process that escapes
into a new session can outlive the run in that mode, and run as root the process-count limit is
not enforced by the kernel. Use it only on a throw-away machine.

The sandbox's makings on this machine (bwrap, the interpreter run inside, the directories
hidden, the unsafe opt-out) come from the environment: evaluators.execution.sandbox_env.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Iterable, Mapping

from evaluators.execution.sandbox_env import (
    SANDBOX_UID,
    UNSAFE_ENV,
    bwrap_path,
    hidden_dirs,
    sandbox_python,
    switch_user,
    unsafe_requested,
)
from evaluators.execution.supervise import STATUSES, Result, supervise  # noqa: F401 (public here)

DEFAULT_MAX_OUTPUT = 4 << 20
DEFAULT_MAX_STDERR = 256 << 10
DEFAULT_MAX_PROCS = 16
DEFAULT_MAX_FILE_MB = 16
DEFAULT_TMP_MB = 32
DEFAULT_MAX_OPEN_FILES = 64


class SandboxUnavailable(RuntimeError):
    """No isolating sandbox here and the unsafe mode was not asked for."""


# ---------------------------------------------------------------------------------------------
# The one-time probe


@dataclasses.dataclass(frozen=True)
class _Backend:
    mode: str  # "bwrap" or "unsafe"
    python: str
    bwrap: str | None
    python_version: tuple[int, int] | None
    reason: str = ""  # why bwrap is not usable, when it is not


_probe_lock = threading.Lock()
_probe_cache: dict[tuple, _Backend | str] = {}
_warned_unsafe = False


def _probe() -> _Backend | str:
    """The working bwrap backend, or a string saying why there is none (cached per config)."""
    python, bwrap = sandbox_python(), bwrap_path()
    key = (python, bwrap, os.getcwd(), os.environ.get("GSPO_SANDBOX_HIDE", ""))
    with _probe_lock:
        if key in _probe_cache:
            return _probe_cache[key]
        if python is None:
            why = (
                "no Python interpreter the sandbox user can run; set GSPO_SANDBOX_PYTHON "
                "to a world-readable python3"
            )
        elif bwrap is None:
            why = "bubblewrap (bwrap) not found; install it (e.g. apt-get install bubblewrap)"
        else:
            backend = _Backend("bwrap", python, bwrap, None)
            code = "import sys,socket\nprint(sys.version_info[0], sys.version_info[1])\n"
            try:
                r = _run_bwrap(
                    backend,
                    code,
                    "",
                    timeout_s=20.0,
                    memory_mb=512,
                    files=None,
                    args=(),
                    channel=False,
                    max_output=4096,
                    max_stderr=65536,
                    max_procs=DEFAULT_MAX_PROCS,
                    max_file_mb=1,
                    tmp_mb=4,
                )
                parts = r.stdout.split()
                if r.status == "ok" and len(parts) == 2:
                    result = dataclasses.replace(
                        backend, python_version=(int(parts[0]), int(parts[1]))
                    )
                    _probe_cache[key] = result
                    return result
                why = (
                    f"bwrap probe failed ({r.status}, rc={r.returncode}): {r.stderr.strip()[-300:]}"
                )
            except OSError as e:
                why = f"bwrap probe could not start: {e}"
        _probe_cache[key] = why
        return why


def isolation_available() -> bool:
    """Whether programs can run in the bwrap sandbox here."""
    return isinstance(_probe(), _Backend)


def sandbox_python_version() -> tuple[int, int] | None:
    """(major, minor) of the interpreter programs run under, when the sandbox works."""
    b = _probe()
    return b.python_version if isinstance(b, _Backend) else None


def _backend(unsafe: bool | None) -> _Backend:
    global _warned_unsafe
    b = _probe()
    if isinstance(b, _Backend):
        return b
    if not unsafe_requested(unsafe):
        raise SandboxUnavailable(
            f"cannot isolate untrusted code: {b}. Refusing to run it unsandboxed; pass unsafe=True "
            f"or set {UNSAFE_ENV}=1 to run it as plain subprocesses (no file-system, network or "
            "PID isolation), only on a throw-away machine"
        )
    if not _warned_unsafe:
        warnings.warn(f"{UNSAFE_ENV}: running untrusted code WITHOUT isolation ({b})", stacklevel=3)
        _warned_unsafe = True
    python = sandbox_python() or os.path.realpath(sys.executable)
    return _Backend("unsafe", python, None, sys.version_info[:2], reason=b)


def backend(unsafe: bool | None = None) -> _Backend:
    """The backend programs run under (raises SandboxUnavailable where they must not run)."""
    return _backend(unsafe)


def check_available(unsafe: bool | None = None) -> str:
    """'bwrap' or 'unsafe'; raises SandboxUnavailable where code benchmarks must refuse to run."""
    return _backend(unsafe).mode


def reset_probe() -> None:
    """Forget the probe result (after installing bwrap or changing the GSPO_SANDBOX_* env)."""
    with _probe_lock:
        _probe_cache.clear()


# ---------------------------------------------------------------------------------------------
# Running


def _limits_argv(timeout_s: float, memory_mb: int, max_procs: int, max_file_mb: int) -> list[str]:
    cpu = max(1, math.ceil(timeout_s))
    prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
    return [
        prlimit,
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={int(memory_mb) << 20}",
        f"--fsize={int(max_file_mb) << 20}",
        f"--nofile={DEFAULT_MAX_OPEN_FILES}",
        f"--nproc={int(max_procs)}",
        "--core=0",
        "--",
    ]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # not inheritable; pass_fds makes it so in the child only
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _as_bytes(x) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode("utf-8")


def run(
    code: str,
    stdin: str = "",
    *,
    timeout_s: float,
    memory_mb: int,
    files: Mapping[str, str | bytes] | None = None,
    args: Iterable[str] = (),
    channel: bool = False,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_stderr: int = DEFAULT_MAX_STDERR,
    max_procs: int = DEFAULT_MAX_PROCS,
    max_file_mb: int = DEFAULT_MAX_FILE_MB,
    tmp_mb: int = DEFAULT_TMP_MB,
    unsafe: bool | None = None,
) -> Result:
    """Run the Python program `code` on `stdin` in a fresh sandbox and capture what it printed.

    `timeout_s` bounds wall time (and, rounded up, CPU time); `memory_mb` the address space.
    `files` are extra files put beside the program (names relative to its working directory);
    `args` become sys.argv[1:]. With `channel=True` the program may write to the file descriptor
    named by its GSPO_CHANNEL_FD environment variable, returned as Result.channel (capped at
    `max_output`). stdout beyond `max_output` bytes or stderr beyond `max_stderr` bytes stops
    the program with status "output_limit".
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if memory_mb < 16:
        raise ValueError(f"memory_mb must be >= 16, got {memory_mb}")
    for name in files or {}:
        if (
            not name
            or name.startswith("/")
            or ".." in pathlib.PurePosixPath(name).parts
            or name == "main.py"
        ):
            raise ValueError(f"bad sandbox file name {name!r}")
    backend = _backend(unsafe)
    kw = dict(
        timeout_s=float(timeout_s),
        memory_mb=int(memory_mb),
        files=files,
        args=tuple(args),
        channel=channel,
        max_output=int(max_output),
        max_stderr=int(max_stderr),
        max_procs=int(max_procs),
        max_file_mb=int(max_file_mb),
        tmp_mb=int(tmp_mb),
    )
    if backend.mode == "bwrap":
        return _run_bwrap(backend, code, stdin, **kw)
    return _run_unsafe(backend, code, stdin, **kw)


def _run_bwrap(
    backend: _Backend,
    code,
    stdin,
    *,
    timeout_s,
    memory_mb,
    files,
    args,
    channel,
    max_output,
    max_stderr,
    max_procs,
    max_file_mb,
    tmp_mb,
) -> Result:
    proc, start, streams = start_bwrap(
        backend,
        code,
        stdin,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        files=files,
        args=args,
        channel=channel,
        max_procs=max_procs,
        max_file_mb=max_file_mb,
        tmp_mb=tmp_mb,
    )
    try:
        return supervise(
            proc,
            streams,
            start,
            timeout_s=timeout_s,
            max_output=max_output,
            max_stderr=max_stderr,
            isolated=True,
            pid1_from_info=True,
        )
    finally:
        for fd in streams.values():
            os.close(fd)


def _namespace_argv(backend: _Backend, tmp_mb: int, ro_dev: bool) -> list[str]:
    """bwrap's namespaces and mounts: read-only /, private /dev, /dev/shm and /tmp (tmpfs of
    `tmp_mb` each), the hidden directories under empty read-only tmpfs."""
    cmd = [
        backend.bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--hostname",
        "sandbox",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(max(1, tmp_mb) << 20),
        "--tmpfs",
        "/dev/shm",
    ]
    if ro_dev:
        cmd += ["--remount-ro", "/dev"]
    for d in hidden_dirs(backend.python):
        cmd += ["--size", str(1 << 16), "--tmpfs", d, "--remount-ro", d]
    return cmd + ["--size", str(max(1, tmp_mb) << 20), "--perms", "1777", "--tmpfs", "/tmp"]


def start_bwrap(
    backend: _Backend,
    code,
    stdin,
    *,
    timeout_s,
    memory_mb,
    files,
    args,
    channel,
    max_procs,
    max_file_mb,
    tmp_mb,
    ro_dev: bool = False,
):
    """Start `code` in a fresh bwrap sandbox: (the bwrap process, its start time, the read ends
    {"info": bwrap's --info-fd, "channel": GSPO_CHANNEL_FD when `channel`}, which the caller
    closes). `stdin` is the program's whole input (a memory file), or None for a pipe the caller
    writes (proc.stdin). `ro_dev` mounts /dev read-only (its /dev/shm stays writable)."""
    fds: list[int] = []
    try:
        cmd = _namespace_argv(backend, tmp_mb, ro_dev)
        for name, data in [("main.py", code), *sorted((files or {}).items())]:
            fd = _memfd(name, _as_bytes(data))
            fds.append(fd)
            parent = pathlib.PurePosixPath("/tmp", name).parent
            if str(parent) != "/tmp":
                cmd += ["--dir", str(parent)]
            cmd += ["--file", str(fd), f"/tmp/{name}"]
        info_r, info_w = os.pipe()
        fds += [info_r, info_w]
        cmd += ["--info-fd", str(info_w)]
        chan_r = chan_w = None
        if channel:
            chan_r, chan_w = os.pipe()
            fds += [chan_r, chan_w]
            cmd += ["--setenv", "GSPO_CHANNEL_FD", str(chan_w)]
        cmd += [
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "PYTHONHASHSEED",
            "0",
            "--chdir",
            "/tmp",
            "--",
        ]
        cmd += _limits_argv(timeout_s, memory_mb, max_procs, max_file_mb)
        cmd += [backend.python, "-I", "-B", "/tmp/main.py", *args]
        stdin_fd = _memfd("stdin", _as_bytes(stdin)) if stdin is not None else None
        if stdin_fd is not None:
            fds.append(stdin_fd)
        pass_fds = [f for f in fds if f not in (info_r, chan_r, stdin_fd)]
        user_kw = {}
        if switch_user():
            user_kw = dict(user=SANDBOX_UID, group=SANDBOX_UID, extra_groups=[])
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if stdin_fd is None else stdin_fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=pass_fds,
            start_new_session=True,
            **user_kw,
        )
        streams = {"info": info_r}
        if chan_r is not None:
            streams["channel"] = chan_r
        # Close our copies of what the child alone should hold, so EOF means the sandbox is gone.
        for f in fds:
            if f not in streams.values():
                os.close(f)
        fds = []
        return proc, start, streams
    finally:
        for f in fds:
            try:
                os.close(f)
            except OSError:
                pass


def _run_unsafe(
    backend: _Backend,
    code,
    stdin,
    *,
    timeout_s,
    memory_mb,
    files,
    args,
    channel,
    max_output,
    max_stderr,
    max_procs,
    max_file_mb,
    tmp_mb,
) -> Result:
    work = tempfile.mkdtemp(prefix="gspo-unsafe-")
    fds: list[int] = []
    try:
        for name, data in [("main.py", code), *sorted((files or {}).items())]:
            p = pathlib.Path(work, name)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(_as_bytes(data))
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": work,
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
        }
        chan_r = None
        pass_fds = []
        if channel:
            chan_r, chan_w = os.pipe()
            fds += [chan_r, chan_w]
            pass_fds = [chan_w]
            env["GSPO_CHANNEL_FD"] = str(chan_w)
        stdin_fd = _memfd("stdin", _as_bytes(stdin))
        fds.append(stdin_fd)
        cmd = _limits_argv(timeout_s, memory_mb, max_procs, max_file_mb)
        cmd += [backend.python, "-I", "-B", os.path.join(work, "main.py"), *args]
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdin=stdin_fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=pass_fds,
            start_new_session=True,
            cwd=work,
            env=env,
        )
        for f in pass_fds + [stdin_fd]:
            os.close(f)
            fds.remove(f)
        streams = {"channel": chan_r} if chan_r is not None else {}
        return supervise(
            proc,
            streams,
            start,
            timeout_s=timeout_s,
            max_output=max_output,
            max_stderr=max_stderr,
            isolated=False,
            pid1_from_info=False,
        )
    finally:
        for f in fds:
            try:
                os.close(f)
            except OSError:
                pass
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Batches


@dataclasses.dataclass(frozen=True)
class Job:
    code: str
    stdin: str = ""
    timeout_s: float = 6.0
    memory_mb: int = 512
    options: Mapping = dataclasses.field(default_factory=dict)  # further run() keywords


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def run_many(
    jobs: Iterable[Job | Mapping], workers: int | None = None, unsafe: bool | None = None
) -> list[Result]:
    """Run `jobs` (Job objects or dicts of run() keywords) with at most `workers` sandboxes at a
    time; results in job order. Each run is its own sandbox, so a hostile program in one job
    cannot touch another's result."""
    jobs = list(jobs)
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    _backend(unsafe)  # refuse up front, not once per job

    def one(job):
        if isinstance(job, Job):
            return run(
                job.code,
                job.stdin,
                timeout_s=job.timeout_s,
                memory_mb=job.memory_mb,
                unsafe=unsafe,
                **dict(job.options),
            )
        kw = dict(job)
        kw.setdefault("unsafe", unsafe)
        return run(kw.pop("code"), kw.pop("stdin", ""), **kw)

    if workers == 1 or len(jobs) <= 1:
        return [one(j) for j in jobs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(one, jobs))
