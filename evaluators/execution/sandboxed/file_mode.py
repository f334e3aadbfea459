"""The child side of file tests (input_mode 'file'). Takes the channel before anything else and
makes itself non-dumpable (so the program, its child, cannot open /proc/<driver>/fd/*), runs
solution.py as a child with no access to the channel (not inherited, fds closed), waits, then
sends "F" + output.txt's bytes (at most argv[1] + 1 of them) or "N" when there is no regular
file output.txt, and ends the way the child did. It decides nothing: the harness compares.

Shipped into the sandbox as text (evaluators.benchmarks.judge.FILE_DRIVER) and run there as its main
script; never run in the harness."""

import os as _os
import signal as _signal
import stat as _stat
import subprocess as _sp
import sys as _sys


def _gspo_file_main():
    raw = int(_os.environ.pop("GSPO_CHANNEL_FD"))
    fd = _os.dup(raw)
    _os.close(raw)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass
    cap = int(_sys.argv[1])
    child = _sp.Popen(
        [_sys.executable, "-I", "-B", "solution.py"], stdin=_sp.DEVNULL, close_fds=True
    )
    rc = child.wait()
    if rc == 0:
        msg = b"N"
        try:
            out = _os.open("output.txt", _os.O_RDONLY | _os.O_NONBLOCK | _os.O_NOFOLLOW)
        except OSError:
            out = None
        if out is not None:
            if _stat.S_ISREG(_os.fstat(out).st_mode):
                data = bytearray()
                while len(data) <= cap:
                    chunk = _os.read(out, 1 << 16)
                    if not chunk:
                        break
                    data += chunk
                msg = b"F" + bytes(data[: cap + 1])
            _os.close(out)
        view = memoryview(msg)
        while view:
            view = view[_os.write(fd, view) :]
        _os._exit(0)
    if rc < 0:
        _signal.signal(-rc, _signal.SIG_DFL)
        _os.kill(_os.getpid(), -rc)
        _os._exit(128 - rc)
    _os._exit(rc)


if __name__ == "__main__":
    _gspo_file_main()
