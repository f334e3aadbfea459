"""The child side of functional tests. Reads the arguments from stdin before any user code runs,
executes solution.py in its own namespace, calls the function and writes one JSON line to the
side channel, then leaves without running user atexit handlers. It decides nothing: the harness
compares the value it reads with the expected output, which the child never sees.

Shipped into the sandbox as text (evaluators.benchmarks.judge.DRIVER) and run there as its main script;
never run in the harness."""

import json as _json
import os as _os
import sys as _sys


def _gspo_main():
    dumps, write, exit_ = _json.dumps, _os.write, _os._exit
    fd = _os.dup(int(_os.environ.pop("GSPO_CHANNEL_FD")))
    args = [_json.loads(line) for line in _sys.stdin.read().split("\n") if line.strip()]
    func_name = _sys.argv[1]
    with open("solution.py") as f:
        src = f.read()
    try:
        code = compile(src, "solution.py", "exec")
    except (SyntaxError, ValueError) as e:
        write(fd, (dumps({"error": "compile", "detail": repr(e)}) + "\n").encode())
        exit_(0)
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    exec(code, ns)
    if "Solution" in ns:
        target = getattr(ns["Solution"](), func_name)
    else:
        target = ns[func_name]
    result = target(*args)
    if isinstance(result, tuple):
        result = list(result)
    try:
        payload = dumps({"result": result})
    except (TypeError, ValueError, RecursionError):
        write(
            fd,
            (dumps({"error": "unserializable", "detail": type(result).__name__}) + "\n").encode(),
        )
        exit_(0)
    _sys.stdout.flush()
    write(fd, (payload + "\n").encode())
    exit_(0)


if __name__ == "__main__":
    _gspo_main()
