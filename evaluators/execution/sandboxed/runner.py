"""The runner evaluators.execution.batch starts in each program sandbox: shipped into the sandbox as text
(evaluators.execution.frames.RUNNER) and run there as its main script; never run in the harness. It reads
one program's tests at a time from stdin (evaluators.execution.frames.request), runs each test in a fresh
forked child and sends one result frame per test on its channel (evaluators.execution.frames.next_frame
reads them); evaluators.execution.batch's docstring says what it resets between tests and why.

Every name is private (`_gspo_` or `_`-prefixed), and the program runs in a fresh `__main__`
module of its own, so nothing of the runner shows in the program's globals; the program's code
is exec'd in this module's frame, which its tracebacks hide (`_gspo_hook`).
"""

import ctypes as _ctypes
import json as _json
import os as _os
import resource as _res
import selectors as _sel
import signal as _signal
import stat as _st
import sys as _sys
import time as _time

_gspo_libc = _ctypes.CDLL(None, use_errno=True)
_gspo_libc.syscall.restype = _ctypes.c_long
_gspo_prctl = _gspo_libc.prctl
_GSPO_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(_os.uname().machine)


def _gspo_keyctl(*args):
    return _gspo_libc.syscall(_GSPO_KEYCTL, *args)


def _gspo_kill_others(wait=True):
    # All but PID 1 (bwrap's init, which reaps the orphans) and this process; with `wait`, until
    # /proc lists no other (a killed process stays listed until init has reaped it).
    me = str(_os.getpid())
    for _ in range(2000):
        try:
            _os.kill(-1, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not wait or not [p for p in _os.listdir("/proc") if p.isdigit() and p not in ("1", me)]:
            return
        _time.sleep(0.0005)
    raise SystemExit("runner: processes survive SIGKILL")


def _gspo_wipe(top):
    for name in _os.listdir(top):
        path = top + "/" + name
        mode = _os.lstat(path).st_mode
        if _st.S_ISDIR(mode):
            _os.chmod(path, 0o700)
            _gspo_wipe(path)
            _os.rmdir(path)
        else:
            _os.unlink(path)


def _gspo_reset():
    """Between programs: no process, file, SysV IPC object or key of the last one remains."""
    _gspo_kill_others()
    _os.chmod("/tmp", 0o1777)
    _gspo_wipe("/tmp")
    _gspo_wipe("/dev/shm")
    for kind, rmid in (
        ("shm", lambda i: _gspo_libc.shmctl(i, 0, None)),
        ("sem", lambda i: _gspo_libc.semctl(i, 0, 0)),
        ("msg", lambda i: _gspo_libc.msgctl(i, 0, None)),
    ):
        path = "/proc/sysvipc/" + kind
        for line in open(path).read().splitlines()[1:]:
            rmid(int(line.split()[1]))  # IPC_RMID
        if open(path).read().splitlines()[1:]:
            raise SystemExit("runner: a SysV IPC object survives")
    # The user, user-session and persistent keyrings outlive processes: empty them (restoring
    # their permissions first, which a program may have taken away). Where a seccomp filter
    # refuses keyctl (ENOSYS, EPERM), it refuses it to every program too: nothing to empty.
    if _gspo_keyctl(11, -4, None, 0) < 0 and _ctypes.get_errno() in (1, 38):
        return
    rings = [-4, -5]
    persistent = _gspo_keyctl(22, -1, -2)  # KEYCTL_GET_PERSISTENT
    if persistent > 0:
        rings.append(persistent)
    for ring in rings:
        _gspo_keyctl(5, ring, 0x3F3F0000)  # KEYCTL_SETPERM
        if _gspo_keyctl(7, ring) != 0 or _gspo_keyctl(11, ring, None, 0) != 0:
            raise SystemExit("runner: a keyring cannot be emptied")  # CLEAR, READ


def _gspo_prepare(test):
    _gspo_kill_others()
    _os.chmod("/tmp", 0o1777)
    _gspo_wipe("/tmp")
    _gspo_wipe("/dev/shm")
    for name, data in [("main.py", test["code"]), *sorted(test["files"].items())]:
        path = "/tmp/" + name
        _os.makedirs(_os.path.dirname(path), exist_ok=True)
        fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL | _os.O_NOFOLLOW, 0o644)
        view = memoryview(data.encode("utf-8", "surrogateescape"))
        while view:
            view = view[_os.write(fd, view) :]
        _os.close(fd)


def _gspo_child(test, env, ends):
    """In the forked child: take the test's descriptors and limits; return the code to run."""
    stdin_fd, out_w, err_w, chan_w = ends
    _os.dup2(stdin_fd, 0)
    _os.dup2(out_w, 1)
    _os.dup2(err_w, 2)
    env = dict(env)
    first_free = 3
    if chan_w is not None:
        _os.dup2(chan_w, 3)
        env["GSPO_CHANNEL_FD"] = "3"
        first_free = 4
    _os.closerange(first_free, 1 << 16)
    # One second above the wall limit's: a fresh interpreter spent its start-up inside that
    # limit, a forked child does not, and the wall clock should fire first as it did there.
    cpu = max(1, int(-(-test["timeout_s"] // 1))) + 1
    _res.setrlimit(_res.RLIMIT_CPU, (cpu, cpu + 1))
    _res.setrlimit(_res.RLIMIT_AS, (test["memory_mb"] << 20,) * 2)
    _res.setrlimit(_res.RLIMIT_FSIZE, (test["max_file_mb"] << 20,) * 2)
    _res.setrlimit(_res.RLIMIT_NPROC, (test["max_procs"] + 1,) * 2)  # + the runner
    _res.setrlimit(_res.RLIMIT_MSGQUEUE, (0, 0))  # a POSIX queue would outlive the program
    _gspo_keyctl(1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a fresh session keyring of its own
    _gspo_prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: the program's own /proc works as usual
    _os.environ.clear()
    _os.environ.update(env)
    _os.chdir("/tmp")
    _sys.argv = ["/tmp/main.py", *test["args"]]
    return test["code"]


def _gspo_watch(pid, test, fds, start):
    caps = {fds[0]: test["max_output"], fds[1]: test["max_stderr"]}
    if len(fds) > 2:
        caps[fds[2]] = test["max_output"]
    bufs = {fd: bytearray() for fd in fds}
    sel = _sel.DefaultSelector()
    for fd in fds:
        sel.register(fd, _sel.EVENT_READ)
    exit_fd = _os.pidfd_open(pid)  # readable once the child has exited
    sel.register(exit_fd, _sel.EVENT_READ)
    killed, status, deadline = None, None, start + test["timeout_s"]
    while len(sel.get_map()) and killed is None:
        left = deadline - _time.monotonic()
        if left <= 0:
            killed = "timeout"
            break
        for key, _ in sel.select(left):
            if key.fd == exit_fd:
                sel.unregister(exit_fd)
                status = _os.waitpid(pid, 0)[1]
                _gspo_kill_others(wait=False)  # its descendants die with it, as with PID 2
                continue
            chunk = _os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fd)
                continue
            room = caps[key.fd] - len(bufs[key.fd])
            bufs[key.fd] += chunk[: max(room, 0)]
            if len(chunk) > room:
                killed = "output_limit"
    sel.close()
    _os.close(exit_fd)
    _gspo_kill_others(wait=False)
    if status is None:
        status = _os.waitpid(pid, 0)[1]
    _gspo_kill_others()
    rc = None if killed else _os.waitstatus_to_exitcode(status)
    return rc, killed, _time.monotonic() - start, [bytes(bufs[fd]) for fd in fds]


def _gspo_memfd(data):
    fd = _os.memfd_create("stdin", 0)
    view = memoryview(data.encode("utf-8", "surrogateescape"))
    while view:
        view = view[_os.write(fd, view) :]
    _os.lseek(fd, 0, _os.SEEK_SET)
    return fd


def _gspo_runner():
    raw = int(_os.environ.pop("GSPO_CHANNEL_FD"))
    chan = _os.dup(raw)
    _os.close(raw)
    if _gspo_prctl(4, 0, 0, 0, 0) != 0 or _os.getpid() != 2:
        raise SystemExit("runner: cannot make itself non-dumpable or is not PID 2 of a sandbox")
    if _GSPO_KEYCTL is None:
        raise SystemExit("runner: unknown machine " + _os.uname().machine)
    env = dict(_os.environ)
    while True:  # one request per program: 8-byte length, then JSON
        spec = _gspo_request()
        if spec is None:
            _gspo_kill_others()
            _os._exit(0)
        code = _gspo_program(spec, env, chan)
        if code is not None:
            return code  # in a forked child: run the test
        _gspo_reset()
        _gspo_send(chan, {"done": True, "n": []}, [])


def _gspo_request():
    def read(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = _os.read(0, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    size = read(8)
    return None if size is None else _json.loads(read(int.from_bytes(size, "big")))


def _gspo_send(chan, head, outs):
    frame = memoryview(_json.dumps(head).encode() + b"\n" + b"".join(outs))
    while frame:
        frame = frame[_os.write(chan, frame) :]


def _gspo_program(spec, env, chan):
    """Run one program's tests, a frame each; returns the code to run in a forked child."""
    for test in spec["tests"]:
        _gspo_prepare(test)
        stdin_fd = _gspo_memfd(test["stdin"])
        pipes = [_os.pipe() for _ in range(3 if test["channel"] else 2)]
        start = _time.monotonic()
        pid = _os.fork()
        if pid == 0:
            chan_w = pipes[2][1] if test["channel"] else None
            try:
                _os.close(chan)
                return _gspo_child(test, env, (stdin_fd, pipes[0][1], pipes[1][1], chan_w))
            except BaseException:
                _os._exit(125)
        for _, w in pipes:
            _os.close(w)
        _os.close(stdin_fd)
        rc, killed, wall, outs = _gspo_watch(pid, test, [r for r, _ in pipes], start)
        for r, _ in pipes:
            _os.close(r)
        _gspo_send(
            chan, {"rc": rc, "killed": killed, "wall": wall, "n": [len(x) for x in outs]}, outs
        )
        if spec["stop"] and (killed or rc != 0):
            break
    return None


if __name__ == "__main__":
    _gspo_code = _gspo_runner()
    import types as _types

    _gspo_main = _types.ModuleType("__main__")
    _gspo_main.__file__ = "/tmp/main.py"
    _sys.modules["__main__"] = _gspo_main

    def _gspo_hook(t, v, tb, _hook=_sys.__excepthook__):
        tb = tb and tb.tb_next  # hide this frame: tracebacks start in the program
        _hook(t, v.with_traceback(tb) if isinstance(v, BaseException) else v, tb)

    _sys.excepthook = _gspo_hook

    def _gspo_exit_code(e):
        if e.code is None or isinstance(e.code, bool):
            return int(bool(e.code))
        if isinstance(e.code, int):
            return e.code & 0xFF
        print(e.code, file=_sys.stderr)
        return 1

    # The interpreter's own exit would tear down every module of this forked copy (~5 ms a test), so
    # do what a program can observe of it and leave: join its threads, run its atexit handlers, drop
    # its globals (closing and flushing the files it left open), flush stdout and stderr.
    try:
        exec(compile(_gspo_code, "/tmp/main.py", "exec"), _gspo_main.__dict__)
        _gspo_rc = 0
    except SystemExit as _e:
        _gspo_rc = _gspo_exit_code(_e)
    except BaseException as _e:
        _sys.excepthook(type(_e), _e, _e.__traceback__)
        _gspo_rc = 1
    try:
        if "threading" in _sys.modules:
            _sys.modules["threading"]._shutdown()
        import atexit as _atexit

        _atexit._run_exitfuncs()
        _gspo_main.__dict__.clear()
    except SystemExit as _e:
        _gspo_rc = _gspo_exit_code(_e)
    except BaseException as _e:
        _sys.excepthook(type(_e), _e, _e.__traceback__)
    for _f in (_sys.stdout, _sys.stderr):
        try:
            _f.flush()
        except BaseException:
            _gspo_rc = 120
    _os._exit(_gspo_rc)
