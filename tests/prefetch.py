"""The session's workflow fixtures, built in one background process while the other tests run.

A workflow fixture keeps ~1.65 of 2 cores busy and the ~800 light tests ~0.9, so built one after
the other the suite leaves a third of the machine idle; side by side they fill it. conftest's
`prefetched` fixture starts this file as a detached process (its parent exits at once, so the
workflows are not descendants of pytest: test_sandbox's check that nothing is left under the
harness process still sees only the sandboxes' programs), with the fixtures the collected tests
need, in the order the tests first need them. Each builder writes its result to
ROOT/NAME.json ({"value": ...} or {"error": traceback}); a fixture waits for its file. If the
pytest process PID goes away (killed, or stopped early), the builder ends its own process group.

    python tests/prefetch.py PID ROOT NAME...
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import traceback


def _smoke(d: pathlib.Path):
    from test_workflow import smoke_runs

    return [str(p) for p in smoke_runs(d)]


def _rehearsal(d: pathlib.Path):
    from test_rehearsal import run_rehearsal

    out, log = run_rehearsal(d)
    return [str(out), log]


def _shrunk_zoo(d: pathlib.Path):
    from test_experiments import build_shrunk_zoo

    out, cfg = build_shrunk_zoo(d)
    return [str(out), cfg]


def _moe_ablation(d: pathlib.Path):
    from test_experiments import build_moe_ablation

    return str(build_moe_ablation(d))


# fixture name -> builder(empty folder) -> a JSON value (the fixture turns it back into paths)
BUILDERS = {
    "smoke": _smoke,
    "rehearsal": _rehearsal,
    "shrunk_zoo": _shrunk_zoo,
    "moe_ablation": _moe_ablation,
}


def _alive(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class Background:
    """The detached builder of `names` under `root`; `result(name)` waits for one of them."""

    def __init__(self, root: pathlib.Path, names: list[str]):
        self.root, self.names, self.pid = root, names, None
        if not names:
            return
        root.mkdir(parents=True, exist_ok=True)
        # sh starts the builder in the background and exits: the builder is re-parented away
        # from pytest, in sh's new process group (no job control in a script), kept for stop().
        launch = '"$0" "$@" </dev/null >"$3/log" 2>&1 & echo $!'
        sh = subprocess.Popen(
            ["sh", "-c", launch, sys.executable, __file__, str(os.getpid()), str(root), *names],
            start_new_session=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid, self.pgid = int(sh.communicate()[0]), sh.pid  # sh led the new group

    def result(self, name: str, timeout: float = 3600.0):
        import pytest

        if name not in self.names:
            raise KeyError(f"{name} was not built in the background (built: {self.names})")
        path, deadline = self.root / f"{name}.json", time.monotonic() + timeout
        while not path.exists():
            if not _alive(self.pid) or time.monotonic() > deadline:
                log = (self.root / "log").read_text()[-4000:]
                pytest.fail(
                    f"the background build of {name} gave no result; its log:\n{log}", pytrace=False
                )
            time.sleep(0.5)
        rec = json.loads(path.read_text())
        if "error" in rec:
            pytest.fail(f"building {name} in the background failed:\n{rec['error']}", pytrace=False)
        return rec["value"]

    def stop(self):
        """Ends a build the session no longer waits for (a -x stop, an interrupt)."""
        if self.pid is None or not _alive(self.pid):
            return
        os.killpg(self.pgid, signal.SIGTERM)  # snakemake stops its jobs on SIGTERM
        deadline = time.monotonic() + 20
        while _alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(self.pid):
            os.killpg(self.pgid, signal.SIGKILL)


def _orphaned(pytest_pid: int):
    while _alive(pytest_pid):
        time.sleep(1)
    os.killpg(0, signal.SIGTERM)  # this builder, snakemake and its jobs


def main(pytest_pid: int, root: pathlib.Path, names: list[str]):
    threading.Thread(target=_orphaned, args=(pytest_pid,), daemon=True).start()
    for name in names:
        try:
            d = root / name
            d.mkdir()
            rec = {"value": BUILDERS[name](d)}
        except BaseException:  # the waiting fixture reports it, as if it had built it itself
            rec = {"error": traceback.format_exc()}
        tmp = root / f".{name}.json"
        tmp.write_text(json.dumps(rec))
        tmp.rename(root / f"{name}.json")  # whole, or not there


if __name__ == "__main__":
    main(int(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:])
