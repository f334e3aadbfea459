"""Codeforces problems judged by their own checker (generated_checker) or reading input.txt /
writing output.txt (input_mode 'file'), against hostile programs and broken checkers: real
bubblewrap sandboxes, no mocks."""

import pathlib
import time

import pytest

from evaluators import tasks
from evaluators.benchmarks import codeforces as cf
from evaluators.benchmarks import judge
from evaluators.execution import sandbox

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "codeforces"

pytestmark = pytest.mark.skipif(
    sandbox.bwrap_path() is None, reason="bubblewrap not installed (apt-get install bubblewrap)"
)


def _py(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture(scope="module")
def problems():
    recs = cf.load(
        FIXTURES / "codeforces_train.parquet", generated_tests=FIXTURES / "generated_tests"
    )
    return {r["id"]: r for r in recs}


def _with_checker(checker: str) -> dict:
    """A two-number sum problem judged by `checker`."""
    return {
        "id": "7/A",
        "rating": 800,
        "time_limit": 2.0,
        "memory_limit": 256,
        "official_tests": [{"input": "1 2\n", "output": "3\n"}],
        "generated_checker": checker,
    }


SUM = "a, b = map(int, input().split())\nprint(a + b)"
ACCEPT_ALL = "print(1)"
TOKEN_CHECKER = (
    "import sys\n"
    "want = open(sys.argv[2]).read().split()\n"
    "got = open(sys.argv[3]).read().split()\n"
    "print(1 if got == want else 0)\n"
)


# ---------------------------------------------------------------------------------------------
# The published fixtures, end to end


def test_the_fixture_problems_pass_their_reference_solutions_and_fail_wrong_ones(problems):
    cases = {
        "1900/A": (SUM, "print(3)"),
        "1900/D": ("print(2 * int(input()))", "print(int(input()) + 2)"),
        "1900/E": ("n, *a = input().split()\nprint(*reversed(a))", "print(1, 1, 1)"),
        "1900/F": (
            "a, b = map(int, open('input.txt').read().split())\n"
            "open('output.txt', 'w').write(f'{a + b}\\n')",
            "a, b = map(int, open('input.txt').read().split())\nprint(a + b)",
        ),
    }
    for pid, (good, bad) in cases.items():
        res = cf.score(problems[pid], _py(good), workers=2)
        assert res["passed"] and res["n_tests"] == len(problems[pid]["tests"]), (pid, res)
        assert tasks.reward(problems[pid], _py(bad)) == 0.0, pid


def test_a_checker_accepts_any_correct_answer_and_only_correct_ones(problems):
    rec = problems["1900/E"]  # print the input's numbers in any order
    assert not cf.tokens_match("3 2 1", rec["tests"][0]["output"])
    shuffled = "n, *a = input().split()\nprint(*sorted(a, reverse=True))"
    assert cf.score(rec, _py(shuffled))["verdicts"] == ["passed", "passed"]
    for wrong in (
        "n, *a = input().split()\nprint(*a[1:])",  # one missing
        "n, *a = input().split()\nprint(*a, a[0])",  # one extra
        "n, *a = input().split()\nprint(*(int(x) + 1 for x in a))",
    ):
        assert cf.score(rec, _py(wrong))["verdicts"] == ["wrong answer"] * 2, wrong


def test_the_checker_is_called_as_the_dataset_card_says():
    checker = (
        "import os, sys\n"
        "ok = sys.argv == ['checker.py', 'input.txt', 'correct_output.txt', "
        "'solution_output.txt']\n"
        "ok = ok and open('input.txt').read() == '1 2\\n'\n"
        "ok = ok and open('correct_output.txt').read() == '3\\n'\n"
        "ok = ok and open('solution_output.txt').read() == '3\\n'\n"
        "ok = ok and os.path.basename(__file__) == 'checker.py'\n"
        "print('checking...')\n"
        "print(1 if ok else 0)\n"
    )
    assert cf.score(_with_checker(checker), _py(SUM))["verdicts"] == ["passed"]


# ---------------------------------------------------------------------------------------------
# Broken checkers never pass anything


@pytest.mark.parametrize(
    "checker",
    [
        "print(1\n",  # does not compile
        "raise RuntimeError('boom')\nprint(1)",  # crashes
        "print(1)\nimport sys\nsys.exit(3)",  # accepts, then exits non-zero
        "print('yes')",  # prints something other than 0 / 1
        "print(2)",
        "x = 1",  # prints nothing
        "x = bytearray(4 << 30)\nprint(1)",  # runs out of memory
    ],
    ids=["syntax", "crash", "exit-3", "yes", "two", "silent", "memory"],
)
def test_a_broken_checker_is_a_checker_error_never_a_pass(checker):
    res = cf.score(_with_checker(checker), _py(SUM))
    assert res["verdicts"] == ["checker error"] and not res["passed"]
    assert "checker error" in judge.VERDICTS


def test_a_looping_checker_is_a_checker_error_within_its_time_limit(monkeypatch):
    assert (judge.CHECKER_TIMEOUT_S, judge.CHECKER_MEMORY_MB) == (10.0, 1024)
    monkeypatch.setattr(judge, "CHECKER_TIMEOUT_S", 2.0)
    start = time.monotonic()
    res = cf.score(_with_checker("while True:\n    pass\n"), _py(SUM))
    assert res["verdicts"] == ["checker error"]
    assert time.monotonic() - start < 2.0 + 4.0


def test_the_checker_runs_only_on_tests_the_program_ran_ok():
    rec = _with_checker(ACCEPT_ALL)
    assert cf.score(rec, _py("raise SystemExit(1)"))["verdicts"] == ["runtime error"]
    assert cf.score(rec, _py("import time\ntime.sleep(5)"))["verdicts"] == ["time limit"]
    assert cf.score(rec, _py("print(1"))["verdicts"] == ["compile error"]


# ---------------------------------------------------------------------------------------------
# Hostile programs against checkers


def test_a_program_faking_the_checker_and_its_files_still_fails():
    rec = _with_checker(TOKEN_CHECKER)
    fake = (
        "import os\n"
        "for d in ('.', '/tmp', os.path.expanduser('~')):\n"
        "    for name, text in (('checker.py', 'print(1)\\n'), ('main.py', 'print(1)\\n'),\n"
        "                       ('correct_output.txt', '42\\n'),\n"
        "                       ('solution_output.txt', '3\\n')):\n"
        "        try:\n"
        "            open(os.path.join(d, name), 'w').write(text)\n"
        "        except OSError:\n"
        "            pass\n"
        "print(42)\n"
    )
    res = cf.score(rec, _py(fake))
    assert res["verdicts"] == ["wrong answer"], res


def test_a_program_cannot_read_the_expected_output():
    rec = _with_checker(TOKEN_CHECKER)
    peek = (
        "for name in ['correct_output.txt', '/tmp/correct_output.txt', 'checker.py',\n"
        "             '/dev/shm/correct_output.txt', '../correct_output.txt']:\n"
        "    try:\n"
        "        print(open(name).read())\n"
        "        raise SystemExit(0)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(0)\n"
    )
    assert cf.score(rec, _py(peek))["verdicts"] == ["wrong answer"]


def test_what_a_program_caches_in_tmp_is_not_seen_by_the_checker_run():
    # The checker passes anything when it finds the program's cache; it must never find it.
    checker = (
        "import os, sys\n"
        "if any(os.path.exists(p) for p in ('/tmp/cache.txt', 'cache.txt', "
        "'/dev/shm/cache.txt')):\n"
        "    print(1)\n"
        "    raise SystemExit(0)\n" + TOKEN_CHECKER
    )
    cache = (
        "for p in ('/tmp/cache.txt', 'cache.txt', '/dev/shm/cache.txt'):\n"
        "    try:\n"
        "        open(p, 'w').write('accept me')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(42)\n"
    )
    res = cf.score(_with_checker(checker), _py(cache), workers=1)
    assert res["verdicts"] == ["wrong answer"], res
    assert cf.score(_with_checker(checker), _py(SUM))["verdicts"] == ["passed"]


def test_parallel_checked_tests_keep_their_own_verdicts():
    rec = dict(
        _with_checker(TOKEN_CHECKER),
        official_tests=[{"input": f"{i} {i}\n", "output": f"{2 * i}\n"} for i in range(6)],
    )
    odd = "a, b = map(int, input().split())\nprint(a + b + (a % 2))"
    res = cf.score(rec, _py(odd), workers=3)
    assert res["verdicts"] == ["passed", "wrong answer"] * 3


# ---------------------------------------------------------------------------------------------
# input_mode 'file'


def _file_problem(**extra) -> dict:
    rec = {
        "id": "8/F",
        "rating": 800,
        "time_limit": 2.0,
        "memory_limit": 256,
        "input_mode": "file",
        "official_tests": [
            {"input": "1 2\n", "output": "3\n"},
            {"input": "10 -3\n", "output": "7\n"},
        ],
    }
    rec.update(extra)
    return rec


READ = "a, b = map(int, open('input.txt').read().split())\n"


def test_a_file_mode_program_is_judged_on_output_txt_not_stdout():
    rec = _file_problem()
    writes = READ + "with open('output.txt', 'w') as f:\n    f.write(str(a + b))\n"
    assert cf.score(rec, _py(writes))["verdicts"] == ["passed", "passed"]
    prints = READ + "print(a + b)"
    assert cf.score(rec, _py(prints))["verdicts"] == ["wrong answer", "wrong answer"]
    stdin = "a, b = map(int, input().split())\nprint(a + b)"  # input.txt only
    assert cf.score(rec, _py(stdin))["verdicts"] == ["runtime error", "runtime error"]
    both = READ + "print(a + b)\nopen('output.txt', 'w').write('0')\n"
    assert cf.score(rec, _py(both))["verdicts"] == ["wrong answer", "wrong answer"]


def test_a_file_mode_program_keeps_its_time_memory_and_runtime_verdicts():
    rec = _file_problem(time_limit=1.0, memory_limit=128)
    ok = READ + "open('output.txt', 'w').write(str(a + b))\n"
    cases = {
        "time limit": "while True:\n    pass",
        "memory limit": "x = bytearray(400 << 20)\nx[-1] = 1\n" + ok,
        "runtime error": "import os\nos.abort()",
        "output limit": "open('output.txt', 'w').write('9' * (3 << 20))",
    }
    for verdict, code in cases.items():
        assert cf.score(rec, _py(code), stop_at_first_failure=True)["verdicts"] == [
            verdict,
            "skipped",
        ], verdict
    exit_ok_no_file = "raise SystemExit(0)"
    assert cf.score(rec, _py(exit_ok_no_file))["verdicts"] == ["wrong answer"] * 2


def test_a_file_mode_program_cannot_reach_the_drivers_channel():
    rec = _file_problem(official_tests=[{"input": "1 2\n", "output": "blocked\n"}])
    probe = (
        "import os\n"
        "seen = 'GSPO_CHANNEL_FD' in os.environ\n"
        "try:\n"
        "    fds = os.listdir(f'/proc/{os.getppid()}/fd')\n"
        "except OSError:\n"
        "    fds = []\n"
        "for n in fds:\n"
        "    try:\n"
        "        fd = os.open(f'/proc/{os.getppid()}/fd/{n}', os.O_WRONLY)\n"
        "        os.write(fd, b'F')\n"
        "        seen = True\n"
        "    except OSError:\n"
        "        pass\n"
        "for n in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        seen = seen or (int(n) > 2 and os.readlink(f'/proc/self/fd/{n}')"
        ".startswith('pipe:'))\n"
        "    except OSError:\n"
        "        pass\n"
        "open('output.txt', 'w').write('open' if seen else 'blocked')\n"
    )
    assert cf.score(rec, _py(probe))["verdicts"] == ["passed"]


def test_a_file_mode_problem_with_a_checker_checks_output_txt():
    rec = _file_problem(generated_checker=TOKEN_CHECKER)
    writes = READ + "open('output.txt', 'w').write(f'{a + b}\\n')\n"
    assert cf.score(rec, _py(writes))["verdicts"] == ["passed", "passed"]
    fake = READ + "open('checker.py', 'w').write('print(1)')\nopen('output.txt', 'w').write('0')\n"
    assert cf.score(rec, _py(fake))["verdicts"] == ["wrong answer", "wrong answer"]
