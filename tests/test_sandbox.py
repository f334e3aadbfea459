"""The sandbox against hostile programs: real subprocesses, real bubblewrap, no mocks.

Every test checks afterwards that no process of ours is left (no descendants of the test process,
no zombie, nothing carrying the test's marker in its command line) and that files outside the
sandbox are intact.
"""

import concurrent.futures
import os
import pathlib
import shutil
import stat
import tempfile
import time
import uuid

import pytest

from evaluators.execution import batch, pool, sandbox

# Skipped only where bubblewrap is not installed at all; an installed bwrap that fails its probe
# makes these tests fail (SandboxUnavailable names the reason) rather than skip.
needs_bwrap = pytest.mark.skipif(
    sandbox.bwrap_path() is None, reason="bubblewrap not installed (apt-get install bubblewrap)"
)

LIMITS = dict(timeout_s=2.0, memory_mb=256)


# ---------------------------------------------------------------------------------------------
# Process accounting


def _proc_table():
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        rest = data[data.rindex(")") + 2 :].split()
        table[int(entry)] = (rest[0], int(rest[1]), cmd)  # state, ppid, cmdline
    return table


def _descendants(root: int):
    table = _proc_table()
    children = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append((c, table[c][0], table[c][2]))
            todo.append(c)
    return out


def _with_marker(marker: str):
    return [(pid, cmd) for pid, (_, _, cmd) in _proc_table().items() if marker in cmd]


@pytest.fixture
def marker():
    return f"gspo-marker-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def nothing_left_behind(marker):
    yield
    pool.shutdown()  # the warm workers are ours too: stopped, they must leave nothing
    # Give the kernel a moment to finish tearing down namespaces, then insist on a clean table.
    deadline = time.monotonic() + 3.0
    while True:
        left = _descendants(os.getpid())
        tagged = _with_marker(marker)
        if (not left and not tagged) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"processes left under the harness: {left}"
    assert not tagged, f"processes carrying the test marker survived: {tagged}"


def _run_in_program_sandbox(code, stdin="", **kw):
    """One job through evaluators.execution.batch: the program sandbox's runner forks it as a child."""
    return batch.run_program([dict(code=code, stdin=stdin, **kw)])[0]


@pytest.fixture(params=["own sandbox", "program sandbox"])
def run(request):
    """Each behaviour and hostile program below runs both ways: as a sandbox of its own
    (sandbox.run) and as a test forked by the runner of a program's sandbox (batch)."""
    return sandbox.run if request.param == "own sandbox" else _run_in_program_sandbox


@pytest.fixture
def canary():
    """A world-writable file outside the sandbox's /tmp: only the read-only mount protects it."""
    d = tempfile.mkdtemp(prefix="gspo-canary-", dir="/var/tmp")
    os.chmod(d, 0o777)
    p = pathlib.Path(d, "canary.txt")
    p.write_text("intact\n")
    os.chmod(p, 0o666)
    yield p
    shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Ordinary behaviour


@needs_bwrap
def test_a_well_behaved_program_reads_stdin_and_its_output_is_captured(run):
    r = run("n=int(input())\nprint(n*3+1)", "5\n", **LIMITS)
    assert (r.status, r.stdout, r.returncode, r.isolated) == ("ok", "16\n", 0, True)


@needs_bwrap
def test_a_nonzero_exit_or_exception_is_a_runtime_error(run):
    r = run("import sys\nsys.exit(3)", **LIMITS)
    assert (r.status, r.returncode) == ("runtime_error", 3)
    r = run("raise ValueError('boom')", **LIMITS)
    assert r.status == "runtime_error" and "ValueError: boom" in r.stderr


@needs_bwrap
def test_a_signal_death_is_reported_with_the_signal_number(run):
    r = run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", **LIMITS)
    assert r.status == "runtime_error" and r.returncode == -11


@needs_bwrap
def test_the_program_sees_a_cleared_environment_and_a_fresh_private_working_directory(
    monkeypatch, run
):
    monkeypatch.setenv("GSPO_TEST_SECRET", "s3cret")
    code = (
        "import os, json\nprint(json.dumps([os.getcwd(), sorted(os.listdir('.')), dict(os.environ)]))\n"
        "open('left_over.txt', 'w').write('x')\n"
    )
    first = run(code, **LIMITS)
    second = run(code, **LIMITS)
    import json

    cwd, files, env = json.loads(first.stdout)
    assert cwd == "/tmp" and files == ["main.py"]
    assert "GSPO_TEST_SECRET" not in env and "s3cret" not in first.stdout
    assert set(env) <= {"PATH", "HOME", "LANG", "PYTHONHASHSEED", "PWD", "LC_CTYPE"}
    assert json.loads(second.stdout)[1] == ["main.py"], "a file from the previous run leaked"


@needs_bwrap
def test_the_program_runs_without_capabilities_and_not_as_root(run):
    r = run(
        "import os\nprint(os.getuid())\n"
        "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].strip())",
        **LIMITS,
    )
    uid, capeff = r.stdout.splitlines()
    if os.geteuid() == 0:
        assert int(uid) != 0
    assert capeff.split()[1] == "0000000000000000"


@needs_bwrap
def test_the_program_has_its_own_pid_namespace_and_cannot_see_the_harness(run):
    r = run(
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        f"print(os.path.exists('/proc/{os.getpid()}/cmdline'))",
        **LIMITS,
    )
    pids, harness_visible = r.stdout.splitlines()
    assert max(eval(pids)) < 10 and harness_visible == "False"


@needs_bwrap
def test_the_harness_working_directory_is_hidden_from_the_program(run):
    # Hidden means empty, or absent where the harness runs under /tmp (the sandbox's /tmp is
    # its own private one).
    code = (
        f"import os\ntry:\n    print(os.listdir({os.getcwd()!r}))\n"
        "except FileNotFoundError:\n    print('absent')\n"
    )
    r = run(code, **LIMITS)
    assert r.stdout.strip() in ("[]", "absent")


@needs_bwrap
def test_the_network_is_unreachable(run):
    code = (
        "import socket\nfor host in ['1.1.1.1', '8.8.8.8']:\n"
        "    s = socket.socket(); s.settimeout(1)\n"
        "    try:\n        s.connect((host, 53)); print('connected')\n"
        "    except OSError as e:\n        print('refused', e.errno)\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    r = run(code, **LIMITS)
    assert "connected" not in r.stdout and r.stdout.count("refused") == 2
    assert r.stdout.strip().splitlines()[-1] == "['lo']"


@needs_bwrap
def test_files_outside_the_sandbox_cannot_be_modified_or_deleted(canary, run):
    code = f"""
import os, shutil
p = {str(canary)!r}
for attempt in (lambda: open(p, 'w').write('pwned'), lambda: os.remove(p),
                lambda: os.rename(p, p + '.moved'), lambda: os.chmod(p, 0),
                lambda: shutil.rmtree(os.path.dirname(p)), lambda: open('/etc/gspo-pwned', 'w'),
                lambda: os.remove({sandbox.__file__!r})):
    try:
        attempt(); print('succeeded')
    except OSError as e:
        print('failed', e.errno)
"""
    r = run(code, **LIMITS)
    assert "succeeded" not in r.stdout and r.stdout.count("failed") == 7
    assert canary.read_text() == "intact\n" and stat.S_IMODE(canary.stat().st_mode) == 0o666
    assert not os.path.exists("/etc/gspo-pwned") and os.path.exists(sandbox.__file__)


@needs_bwrap
def test_extra_files_and_arguments_reach_the_program(run):
    r = run(
        "import sys\nprint(open('data/x.txt').read(), sys.argv[1:])",
        files={"data/x.txt": "hello"},
        args=["a", "b"],
        **LIMITS,
    )
    assert r.stdout == "hello ['a', 'b']\n"


@needs_bwrap
def test_the_side_channel_returns_what_the_program_wrote_and_stdout_stays_separate(run):
    r = run(
        "import os\nprint('on stdout')\nos.write(int(os.environ['GSPO_CHANNEL_FD']), b'value')",
        channel=True,
        **LIMITS,
    )
    assert (r.stdout, r.channel) == ("on stdout\n", b"value")


def test_bad_arguments_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="timeout_s"):
        sandbox.run("print(1)", timeout_s=0, memory_mb=256)
    with pytest.raises(ValueError, match="memory_mb"):
        sandbox.run("print(1)", timeout_s=1, memory_mb=1)
    with pytest.raises(ValueError, match="file name"):
        sandbox.run("print(1)", files={"../escape.py": "x"}, **LIMITS)


# ---------------------------------------------------------------------------------------------
# Hostile programs


@needs_bwrap
def test_an_infinite_loop_is_stopped_at_the_time_limit(marker, run):
    t0 = time.monotonic()
    r = run("while True:\n    pass", timeout_s=1.0, memory_mb=256, args=[marker])
    assert r.status == "timeout" and r.returncode is None
    assert time.monotonic() - t0 < 3.0


@needs_bwrap
def test_a_sleeping_program_is_stopped_by_the_wall_clock_limit(marker, run):
    t0 = time.monotonic()
    r = run("import time\ntime.sleep(120)", timeout_s=0.8, memory_mb=256, args=[marker])
    assert r.status == "timeout" and 0.7 < time.monotonic() - t0 < 3.0


@needs_bwrap
def test_the_cpu_time_limit_stops_a_program_even_with_a_generous_wall_clock(marker, run):
    # Busy threads burn CPU time faster than wall time; RLIMIT_CPU (1 s) fires first.
    code = (
        "import threading\ndef spin():\n    while True: pass\n"
        "for _ in range(3): threading.Thread(target=spin, daemon=True).start()\nspin()\n"
    )
    r = run(code, timeout_s=1.0, memory_mb=256, args=[marker])
    assert r.status == "timeout"


@needs_bwrap
@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(8 * 1024 ** 3)",
        "xs = []\nwhile True:\n    xs.append(' ' * 10 ** 6)",
    ],
    ids=["one-huge-allocation", "growing-list"],
)
def test_a_memory_bomb_is_reported_as_a_memory_verdict(code, marker, run):
    r = run(code, timeout_s=5.0, memory_mb=128, args=[marker])
    assert r.status == "memory", (r.status, r.stderr[-300:])


@needs_bwrap
def test_a_fork_bomb_is_contained_and_leaves_no_process_behind(marker, run):
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    t0 = time.monotonic()
    r = run(code, timeout_s=1.0, memory_mb=256, args=[marker])
    assert r.status in ("timeout", "runtime_error")
    assert time.monotonic() - t0 < 4.0
    after = run("print('still fine')", **LIMITS)
    assert after.stdout == "still fine\n"


@needs_bwrap
def test_the_process_limit_caps_how_many_processes_a_program_can_start(marker, run):
    code = """
import os, time
started = 0
for _ in range(60):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    started += 1
print(started)
"""
    r = run(code, timeout_s=3.0, memory_mb=256, max_procs=12, args=[marker])
    assert r.status == "ok" and 0 < int(r.stdout) < 12


@needs_bwrap
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_an_output_flood_is_cut_at_the_output_cap(stream, marker, run):
    code = f"import sys\nwhile True:\n    sys.{stream}.write('x' * 4096)\n"
    t0 = time.monotonic()
    r = run(
        code, timeout_s=10.0, memory_mb=256, max_output=1 << 20, max_stderr=1 << 16, args=[marker]
    )
    assert r.status == "output_limit"
    assert len(getattr(r, stream)) == (1 << 20 if stream == "stdout" else 1 << 16)
    assert time.monotonic() - t0 < 5.0


@needs_bwrap
def test_a_background_child_holding_the_pipes_does_not_hang_the_harness(marker, run):
    code = f"""
import subprocess, sys
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}],
                 start_new_session=True)
print('parent done')
"""
    t0 = time.monotonic()
    r = run(code, timeout_s=10.0, memory_mb=256, args=[marker])
    assert (r.status, r.stdout) == ("ok", "parent done\n")
    assert time.monotonic() - t0 < 3.0, "the harness waited for a descendant holding the pipes"


@needs_bwrap
def test_a_double_forked_daemon_is_killed_with_the_sandbox(marker, run):
    code = f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])
    os._exit(0)
time.sleep(60)
"""
    r = run(code, timeout_s=1.0, memory_mb=256, args=[marker])
    assert r.status == "timeout"


@needs_bwrap
def test_killing_everything_it_can_see_does_not_harm_the_harness(marker, run):
    code = f"""
import os, signal
for target in (lambda: os.kill(-1, signal.SIGKILL), lambda: os.kill(1, signal.SIGKILL),
               lambda: os.kill(os.getppid(), signal.SIGKILL), lambda: os.kill({os.getpid()}, 9)):
    try:
        target()
    except OSError:
        pass
print('survived')
"""
    r = run(code, **LIMITS, args=[marker])
    assert r.status in ("ok", "runtime_error")
    assert run("print(2)", **LIMITS).stdout == "2\n"


@needs_bwrap
def test_parallel_runs_are_isolated_from_hostile_neighbours(marker):
    hostile = {
        "fork bomb": "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n",
        "memory bomb": "xs = []\nwhile True: xs.append(bytearray(10 ** 7))\n",
        "infinite loop": "while True: pass\n",
        "output flood": "while True: print('y' * 1000)\n",
    }
    jobs = [dict(code=c, timeout_s=1.5, memory_mb=128, args=[marker]) for c in hostile.values()]
    normal = [
        dict(
            code="n=int(input())\nprint(n*n)",
            stdin=f"{i}\n",
            timeout_s=10.0,
            memory_mb=256,
            args=[marker],
        )
        for i in range(8)
    ]
    order = [jobs[0], normal[0], jobs[1], normal[1], jobs[2], normal[2], jobs[3], *normal[3:]]
    results = sandbox.run_many(order, workers=2)
    by_code = {id(j): r for j, r in zip(order, results)}
    assert [by_code[id(j)].stdout for j in normal] == [f"{i * i}\n" for i in range(8)]
    assert all(by_code[id(j)].status == "ok" for j in normal)
    assert by_code[id(jobs[0])].status in ("timeout", "runtime_error")
    assert by_code[id(jobs[1])].status == "memory"
    assert by_code[id(jobs[2])].status == "timeout"
    assert by_code[id(jobs[3])].status == "output_limit"


@needs_bwrap
def test_run_many_keeps_at_most_workers_sandboxes_running_and_keeps_job_order():
    jobs = [
        sandbox.Job(f"import time\ntime.sleep(0.4)\nprint({i})", timeout_s=5.0, memory_mb=256)
        for i in range(4)
    ]
    t0 = time.monotonic()
    results = sandbox.run_many(jobs, workers=2)
    assert time.monotonic() - t0 >= 0.8, "more than 2 sandboxes ran at once"
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", "3\n"]
    with pytest.raises(ValueError):
        sandbox.run_many(jobs, workers=0)


# ---------------------------------------------------------------------------------------------
# Without isolation


def test_code_benchmarks_refuse_to_run_without_isolation_unless_unsafe_is_requested(
    monkeypatch, marker, tmp_path
):
    from evaluators.benchmarks import livecodebench as lcb

    monkeypatch.setenv("GSPO_SANDBOX_BWRAP", str(tmp_path / "no-such-bwrap"))
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    assert not sandbox.isolation_available()
    with pytest.raises(sandbox.SandboxUnavailable, match=sandbox.UNSAFE_ENV):
        sandbox.run("print(1)", **LIMITS)
    rec = lcb.generate(1, split="train", seed=0)[0]
    with pytest.raises(sandbox.SandboxUnavailable):
        lcb.score(rec, rec["solution"])
    with pytest.raises(sandbox.SandboxUnavailable):
        sandbox.run_many([dict(code="print(1)", **LIMITS)])

    # The documented opt-out: plain subprocesses, still limited, killed and reaped.
    monkeypatch.setenv(sandbox.UNSAFE_ENV, "1")
    with pytest.warns(UserWarning, match="WITHOUT isolation"):
        sandbox._warned_unsafe = False
        r = sandbox.run("print(int(input()) + 1)", "41\n", **LIMITS)
    assert (r.status, r.stdout, r.isolated) == ("ok", "42\n", False)
    code = (
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', "
        f"'import time; time.sleep(60)', {marker!r}])\ntime.sleep(60)\n"
    )
    r = sandbox.run(code, timeout_s=0.8, memory_mb=256, args=[marker])
    assert r.status == "timeout"
    assert lcb.score(rec, rec["solution"])["passed"]


# ---------------------------------------------------------------------------------------------
# One sandbox per program (evaluators.execution.batch): nothing a program leaves behind reaches another,
# after it or beside it, and nothing a test leaves behind reaches the program's next test.

# Solves "print the square of n" and caches every answer everywhere it can: files in /tmp,
# /dev/shm and /dev, the environment, a daemon serving the cache on an abstract unix socket and on
# a loopback TCP port, a SysV shared-memory segment, a key in every keyring it can reach (session,
# user, user-session, persistent), a POSIX message queue.
CACHING = r"""
import ctypes, os, socket, sys, time
n = int(input())
answer = str(n * n)
for d in ("/tmp", "/dev/shm"):
    with open(f"{d}/cache-{n}", "w") as f:
        f.write(answer)
os.environ["GSPO_CACHE"] = answer
os.putenv("GSPO_CACHE", answer)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for ring in (-3, -4, -5, libc.syscall(250, 22, -1, -2)):     # @s, @u, @us, persistent
    libc.syscall(248, b"user", b"gspo-cache", answer.encode(), len(answer), ring)
q = libc.mq_open(b"/gspo-cache", os.O_CREAT | os.O_WRONLY, 0o666, None)
if q >= 0:
    libc.mq_send(q, answer.encode(), len(answer), 0)
try:
    open("/dev/gspo-cache", "w").write(answer)
except OSError:
    pass
shm = libc.shmget(0x6a5b0, 4096, 0o1666)       # IPC_CREAT | 0666
if shm >= 0:
    libc.shmat.restype = ctypes.c_void_p
    ctypes.memmove(libc.shmat(shm, None, 0), answer.encode() + b"\0", len(answer) + 1)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        servers = []
        for family, address in ((socket.AF_UNIX, "\0gspo-cache"), (socket.AF_INET, ("127.0.0.1", 47613))):
            try:
                s = socket.socket(family, socket.SOCK_STREAM)
                s.bind(address)
                s.listen()
                servers.append(s)
            except OSError:
                pass
        deadline = time.time() + 30
        while servers and time.time() < deadline:
            for s in servers:
                s.settimeout(0.05)
                try:
                    c, _ = s.accept()
                    c.sendall(answer.encode())
                    c.close()
                except OSError:
                    pass
        os._exit(0)
    os._exit(0)
print(answer)
"""

# Answers only from a cache: it passes only if some earlier program's leftovers reach it.
READER = r"""
import ctypes, os, socket, sys, time
WHICH = False    # True: print which of the mechanisms found an answer, not the answer
n = int(input())
found = []
deadline = time.time() + float(sys.argv[1])
while (WHICH or not found) and time.time() < deadline:
    for path in (f"/tmp/cache-{n}", f"/dev/shm/cache-{n}", "/dev/gspo-cache"):
        try:
            found.append(("file", open(path).read()))
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    buf = ctypes.create_string_buffer(64)
    for ring in (-3, -4, -5, libc.syscall(250, 22, -1, -2)):
        key = libc.syscall(250, 10, ring, b"user", b"gspo-cache", 0)      # KEYCTL_SEARCH
        if key > 0 and libc.syscall(250, 11, key, buf, 64) > 0:          # KEYCTL_READ
            found.append(("key", buf.value.decode()))
    q = libc.mq_open(b"/gspo-cache", os.O_RDONLY | os.O_NONBLOCK)
    if q >= 0:
        big = ctypes.create_string_buffer(8192)
        if libc.mq_receive(q, big, 8192, None) > 0:
            found.append(("mq", big.value.decode()))
    if os.environ.get("GSPO_CACHE"):
        found.append(("env", os.environ["GSPO_CACHE"]))
    for family, address in ((socket.AF_UNIX, "\0gspo-cache"), (socket.AF_INET, ("127.0.0.1", 47613))):
        try:
            s = socket.create_connection(address, 0.1) if family == socket.AF_INET else socket.socket(family)
            if family == socket.AF_UNIX:
                s.connect(address)
            found.append(("socket", s.recv(64).decode()))
        except OSError:
            pass
    shm = libc.shmget(0x6a5b0, 4096, 0o666)
    if shm >= 0:
        libc.shmat.restype = ctypes.c_void_p
        found.append(("shm", ctypes.string_at(libc.shmat(shm, None, 0)).decode()))
    time.sleep(0.05)
print(sorted({k for k, _ in found}) if WHICH else (found[0][1] if found else "nothing"))
"""


def _square_tests(ns):
    return [{"input": f"{n}\n", "output": f"{n * n}\n", "testtype": "stdin"} for n in ns]


@needs_bwrap
def test_a_program_cannot_read_what_an_earlier_program_cached(marker):
    from evaluators.benchmarks import judge
    from evaluators.benchmarks import livecodebench as lcb

    pool.shutdown()
    tests = _square_tests([3, 7, 12])
    kw = dict(compare=lcb.outputs_match, timeout_s=3.0, memory_mb=256)
    assert judge.run_tests(CACHING, tests, **kw)["passed"], "the caching program must itself pass"
    (worker,) = pool._POOL.idle  # the reader runs next in this same worker
    reader = READER.replace("sys.argv[1]", "0.3")
    got = judge.run_tests(reader, tests, **kw)
    assert pool._POOL.idle == [worker]
    assert got["verdicts"] == ["wrong answer"] * 3, got
    # Control: inside one program's test, every mechanism does carry the answer (but a POSIX
    # message queue, which a pooled test cannot create: RLIMIT_MSGQUEUE is 0).
    both = CACHING.replace("print(answer)", "") + reader.replace("n = int(input())", "")
    r = batch.run_program(
        [
            dict(
                code=both.replace("WHICH = False", "WHICH = True"),
                stdin="3\n",
                timeout_s=3.0,
                memory_mb=256,
            )
        ]
    )[0]
    assert r.stdout.strip() == str(["env", "file", "key", "shm", "socket"]), r
    assert judge.run_tests(both, tests, **kw)["passed"]


@needs_bwrap
def test_a_program_cannot_read_what_a_program_running_beside_it_caches(marker):
    from evaluators.benchmarks import judge
    from evaluators.benchmarks import livecodebench as lcb

    tests = _square_tests([5])
    kw = dict(compare=lcb.outputs_match, timeout_s=4.0, memory_mb=256)
    reader = READER.replace("sys.argv[1]", "2.0")  # keeps looking while the cacher runs
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got_reader = pool.submit(judge.run_tests, reader, tests, **kw)
        time.sleep(0.2)
        got_cacher = pool.submit(judge.run_tests, CACHING, tests, **kw)
        assert got_cacher.result()["passed"]
        assert got_reader.result()["verdicts"] == ["wrong answer"]


@needs_bwrap
def test_each_test_of_a_program_starts_from_a_fresh_sandbox_state(marker):
    code = (
        "import os, sys\nseen = sorted(os.listdir('/tmp')) + sorted(os.listdir('/dev/shm'))\n"
        "left = os.environ.get('LEFT')\n"
        "open('/tmp/mine', 'w').write('x'); open('/dev/shm/mine', 'w').write('x')\n"
        "os.environ['LEFT'] = '1'\n"
        "if os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(30)\n"
        "print(seen, left)\n"
    )
    results = batch.run_program([dict(code=code, args=[marker], **LIMITS)] * 3)
    assert [r.stdout for r in results] == ["['main.py'] None\n"] * 3
    others = (
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit() "
        "and int(p) != os.getpid()))"
    )
    # Only bwrap's init (1) and the runner (2) are left when the next test starts.
    assert (
        batch.run_program([dict(code=code, args=[marker], **LIMITS), dict(code=others, **LIMITS)])[
            1
        ].stdout
        == "[1, 2]\n"
    )


@needs_bwrap
def test_a_program_cannot_forge_the_runner_s_result_frames(marker):
    # It tries every descriptor of the runner through /proc (the runner is non-dumpable, so
    # /proc/<runner>/fd is closed to it), then hangs: it must end as a time limit.
    code = (
        "import json, os, time\nparent = os.getppid()\nopened = []\n"
        "for n in range(64):\n    try:\n"
        "        fd = os.open(f'/proc/{parent}/fd/{n}', os.O_WRONLY)\n"
        "        os.write(fd, json.dumps({'rc': 0, 'killed': None, 'wall': 0.0, 'n': [3, 0]})"
        ".encode() + b'\\n' + b'49\\n')\n        opened.append(n)\n    except OSError:\n        pass\n"
        "print(opened, flush=True)\ntime.sleep(60)\n"
    )
    jobs = [
        dict(code=code, args=[marker], timeout_s=1.0, memory_mb=256),
        dict(code="print(int(input()) ** 2)", stdin="7\n", **LIMITS),
    ]
    hung, fine = batch.run_program(jobs)
    assert (hung.status, hung.stdout) == ("timeout", "[]\n")
    assert (fine.status, fine.stdout) == ("ok", "49\n")


@needs_bwrap
def test_a_program_that_stops_its_runner_loses_only_its_own_tests(marker):
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nprint(1)\n"
    jobs = [dict(code=code, args=[marker], timeout_s=0.5, memory_mb=256)] * 2
    assert [r.status for r in batch.run_program(jobs)] == ["timeout", "timeout"]
    assert batch.run_program([dict(code="print(2)", **LIMITS)])[0].stdout == "2\n"


@needs_bwrap
def test_stop_on_failure_runs_no_test_after_a_failing_run():
    jobs = [
        dict(code="import sys\nn = int(input())\nsys.exit(n)", stdin=f"{n}\n", **LIMITS)
        for n in (0, 0, 3, 0)
    ]
    assert [r.status for r in batch.run_program(jobs, stop_on_failure=True)] == [
        "ok",
        "ok",
        "runtime_error",
    ]
    assert len(batch.run_program(jobs)) == 4


@needs_bwrap
def test_a_program_that_sabotages_the_reset_leaves_nothing_to_the_next_one_in_its_worker(marker):
    # It locks its files and keyring away from the worker and keeps an IPC segment hidden by
    # its permissions; the next program in the same worker must find none of it.
    saboteur = r"""
import ctypes, os, sys
LOCK_KEYRING = sys.argv[1] == "lock"
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
os.makedirs("/tmp/d/e")
open("/tmp/d/e/answer", "w").write("49")
os.chmod("/tmp/d/e", 0)
os.chmod("/tmp/d", 0)
libc.syscall(248, b"user", b"gspo-cache", b"49", 2, -4)
if LOCK_KEYRING:
    libc.syscall(250, 5, -4, 0)                  # KEYCTL_SETPERM @u: nobody may do anything
libc.shmget(0x6a5b1, 4096, 0o1000)               # IPC_CREAT, mode 000
os.chmod("/tmp", 0)
print("done")
"""
    looker = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
print(sorted(os.listdir("/tmp")), libc.syscall(250, 10, -4, b"user", b"gspo-cache", 0) > 0,
      libc.shmget(0x6a5b1, 0, 0) >= 0, os.listdir("/dev/shm"))
"""
    pool.shutdown()
    first = batch.run_program([dict(code=saboteur, args=["keep", marker], **LIMITS)])[0]
    assert (first.status, first.stdout) == ("ok", "done\n"), first
    (worker,) = pool._POOL.idle
    second = batch.run_program([dict(code=looker, **LIMITS)])[0]
    assert pool._POOL.idle == [worker], "the looker ran in another worker"
    assert second.stdout == "['main.py'] False False []\n", second
    # A keyring the worker cannot empty any more: it refuses to go on and is replaced.
    first = batch.run_program([dict(code=saboteur, args=["lock", marker], **LIMITS)])[0]
    assert (first.status, first.stdout) == ("ok", "done\n"), first
    assert pool._POOL.idle == []
    second = batch.run_program([dict(code=looker, **LIMITS)])[0]
    assert second.stdout == "['main.py'] False False []\n", second


@needs_bwrap
def test_a_program_that_kills_its_worker_loses_only_its_own_tests(marker):
    pool.shutdown()
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(1)\n"
    results = batch.run_program([dict(code=code, args=[marker], **LIMITS)] * 2)
    assert [r.status for r in results] == ["runtime_error"] * 2
    assert pool._POOL.idle == []  # the broken worker was discarded
    assert batch.run_program([dict(code="print(2)", **LIMITS)])[0].stdout == "2\n"


@needs_bwrap
def test_where_a_fresh_worker_cannot_start_programs_run_in_sandboxes_of_their_own(monkeypatch):
    start = sandbox.start_bwrap

    def broken_worker(backend, code, stdin, **kw):  # only the pool asks for a read-only /dev
        return start(
            backend, "raise SystemExit('broken')" if kw.get("ro_dev") else code, stdin, **kw
        )

    pool.shutdown()
    monkeypatch.setattr(pool, "_unavailable", [])
    monkeypatch.setattr(sandbox, "start_bwrap", broken_worker)
    jobs = [dict(code="print(int(input()) + 1)", stdin=f"{i}\n", **LIMITS) for i in range(3)]
    with pytest.warns(UserWarning, match="did not answer: broken"):
        results = batch.run_program(jobs)
    assert [r.stdout for r in results] == ["1\n", "2\n", "3\n"]
    assert pool._unavailable and not pool.fits([], [])
    assert [r.stdout for r in batch.run_program(jobs)] == ["1\n", "2\n", "3\n"]  # no retry
