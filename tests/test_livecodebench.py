"""LiveCodeBench-style records, generator, loader and scoring, judged in the real sandbox."""

import base64
import dataclasses
import json
import os
import pathlib
import pickle
import zlib

import pytest

from evaluators import tasks
from evaluators.benchmarks import livecodebench as lcb
from evaluators.execution import sandbox
from gspo.io import DataError
from toys import offline_errors

# Skipped only where bubblewrap is not installed at all; an installed bwrap that fails its probe
# makes these tests fail (SandboxUnavailable names the reason) rather than skip.
needs_bwrap = pytest.mark.skipif(
    sandbox.bwrap_path() is None, reason="bubblewrap not installed (apt-get install bubblewrap)"
)


def _blob(tests):
    """LiveCodeBench's private-test encoding, written out independently of the module."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _stdin_record(**extra):
    tests = [
        {"input": "2 3\n", "output": "5\n", "testtype": "stdin"},
        {"input": "10 -4\n", "output": "6\n", "testtype": "stdin"},
    ]
    rec = {
        "id": "add",
        "task": "lcb",
        "question_id": "add",
        "question_title": "Add",
        "question_content": "Read a and b, print a+b.",
        "platform": "atcoder",
        "contest_id": "abc000",
        "contest_date": "2024-06-01T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(tests[:1]),
        "private_test_cases": _blob(tests[1:]),
        "metadata": "{}",
        "time_limit": 1.0,
        "memory_limit": 256,
        "import_header": "",
    }
    rec.update(extra)
    return rec


def _functional_record(**extra):
    tests = [
        {"input": "[1, 2, 3]\n4", "output": "[5, 6, 7]", "testtype": "functional"},
        {"input": "[]\n1", "output": "[]", "testtype": "functional"},
        {"input": "[10]\n-10", "output": "[0]", "testtype": "functional"},
    ]
    rec = {
        "id": "addall",
        "task": "lcb",
        "question_id": "addall",
        "question_title": "Add all",
        "question_content": "Return each item plus k.",
        "platform": "leetcode",
        "contest_id": "weekly-000",
        "contest_date": "2024-07-01T00:00:00",
        "starter_code": "class Solution:\n    def addAll(self, nums: List[int], k: int) -> List[int]:\n        ",
        "difficulty": "easy",
        "public_test_cases": json.dumps(tests[:1]),
        "private_test_cases": _blob(tests[1:]),
        "metadata": json.dumps({"func_name": "addAll"}),
        "time_limit": 1.0,
        "memory_limit": 256,
    }
    rec.update(extra)
    return rec


FUNCTIONAL_OK = "```python\nclass Solution:\n    def addAll(self, nums: List[int], k: int) -> List[int]:\n        return [x + k for x in nums]\n```"


# ---------------------------------------------------------------------------------------------
# Generator


def test_generated_problems_are_deterministic_in_the_seed_and_splits_are_disjoint():
    a = lcb.generate(60, split="train", seed=3)
    assert a == lcb.generate(60, split="train", seed=3)
    assert [r["prompt"] for r in a] != [
        r["prompt"] for r in lcb.generate(60, split="train", seed=4)
    ]
    train = {
        r["question_content"] for s in (0, 1) for r in lcb.generate(300, split="train", seed=s)
    }
    test = {r["question_content"] for s in (0, 1) for r in lcb.generate(100, split="test", seed=s)}
    assert train and test and not train & test
    assert len({r["id"] for r in a}) == 60 and len({r["prompt"] for r in a}) == 60


def test_asking_for_more_problems_than_exist_is_an_error():
    with pytest.raises(ValueError, match="distinct"):
        lcb.generate(50, split="test", seed=0, templates=["repeat"])
    with pytest.raises(ValueError, match="unknown templates"):
        lcb.generate(1, split="train", seed=0, templates=["nope"])


def test_generated_records_carry_the_project_fields_and_the_livecodebench_layout():
    recs = lcb.generate(len(lcb.TEMPLATES) * 3, split="train", seed=0)
    assert {r["template"] for r in recs} == set(lcb.TEMPLATE_NAMES)
    for r in recs:
        for k in (
            "id",
            "task",
            "prompt",
            "solution",
            "question_title",
            "question_content",
            "platform",
            "question_id",
            "contest_id",
            "contest_date",
            "starter_code",
            "difficulty",
            "public_test_cases",
            "private_test_cases",
            "metadata",
        ):
            assert k in r, k
        assert r["task"] == "lcb" and r["difficulty"] in ("easy", "medium", "hard")
        assert len(r["prompt"]) < 120 and r["prompt"].endswith("\n")
        assert r["solution"].startswith("```python\n") and r["solution"].endswith("\n```")
        assert 15 <= len(lcb.extract_code(r["solution"]).strip()) <= 70
        public = json.loads(r["public_test_cases"])
        private = lcb.decode_private_tests(r["private_test_cases"])
        assert len(public) == 2 and len(private) == 3
        kinds = {t["testtype"] for t in public + private}
        assert kinds == ({"functional"} if r["platform"] == "leetcode" else {"stdin"})
        if "functional" in kinds:
            assert json.loads(r["metadata"])["func_name"]
        lo, hi = lcb.DATE_RANGE
        assert lo <= r["contest_date"][:10] <= hi
    assert {r["platform"] for r in recs} == {"atcoder", "leetcode"}


@needs_bwrap
def test_every_template_s_worked_solution_passes_its_own_tests_and_a_wrong_one_fails():
    recs = lcb.generate(len(lcb.TEMPLATES) * 2, split="train", seed=1)
    results = lcb.score_many(recs, [r["solution"] for r in recs], workers=2)
    assert all(res["passed"] for res in results), [
        (r["template"], res["verdicts"]) for r, res in zip(recs, results) if not res["passed"]
    ]
    assert all(res["verdicts"] == ["passed"] * 5 for res in results)
    # Off by one in every constant: some test of every problem catches it.
    wrong = [r["solution"].replace("1", "2").replace("3", "4").replace("5", "6") for r in recs]
    changed = [(r, w) for r, w in zip(recs, wrong) if w != r["solution"]]
    results = lcb.score_many([r for r, _ in changed], [w for _, w in changed], workers=2)
    assert changed and not any(res["passed"] for res in results)


@needs_bwrap
def test_the_task_dispatcher_turns_the_score_into_a_reward():
    rec = lcb.generate(1, split="train", seed=0)[0]
    assert tasks.reward(rec, rec["solution"]) == 1.0
    assert tasks.reward(rec, "```python\nprint('no')\n```") == 0.0


# ---------------------------------------------------------------------------------------------
# Private tests


def test_private_tests_round_trip_through_base64_zlib_pickle_json():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    blob = lcb.encode_private_tests(tests)
    assert json.loads(pickle.loads(zlib.decompress(base64.b64decode(blob)))) == tests
    assert lcb.decode_private_tests(blob) == tests
    assert lcb.decode_private_tests(_blob(tests)) == tests
    assert lcb.decode_private_tests(json.dumps(tests)) == tests  # plain-JSON copies


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_private_test_pickle_that_would_run_code_is_rejected_without_running_it(tmp_path):
    flag = tmp_path / "pwned"
    blob = base64.b64encode(zlib.compress(pickle.dumps(_Evil(flag)))).decode()
    with pytest.raises(DataError, match=r"private_test_cases.*refusing to load global"):
        lcb.decode_private_tests(blob)
    assert not flag.exists()
    # Also inside a list, and through an object's class (copyreg reconstructor).
    blob = base64.b64encode(zlib.compress(pickle.dumps([{"input": _Evil(flag)}]))).decode()
    with pytest.raises(DataError, match="refusing"):
        lcb.decode_private_tests(blob)
    blob = base64.b64encode(zlib.compress(pickle.dumps(DataError("x")))).decode()
    with pytest.raises(DataError, match="refusing"):
        lcb.decode_private_tests(blob)
    assert not flag.exists()


@pytest.mark.parametrize(
    "blob,why",
    [
        ("not base64 at all!!", "undecodable"),
        (base64.b64encode(b"not zlib").decode(), "undecodable"),
        (base64.b64encode(zlib.compress(b"not a pickle")).decode(), "undecodable"),
        (base64.b64encode(zlib.compress(pickle.dumps("{broken json"))).decode(), "undecodable"),
        (
            base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1"}])))).decode(),
            "output",
        ),
    ],
    ids=["base64", "zlib", "pickle", "json", "shape"],
)
def test_undecodable_private_tests_raise_a_one_line_error_naming_the_field(blob, why):
    with pytest.raises(DataError, match="private_test_cases") as e:
        lcb.decode_private_tests(blob)
    assert why in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------
# Contamination window


def test_the_contamination_window_keeps_only_problems_released_inside_it():
    recs = lcb.generate(200, split="train", seed=0)
    dates = sorted(r["contest_date"][:10] for r in recs)
    assert dates[0] < "2024-01-01" < dates[-1], "generated dates should spread over the range"
    cut = dates[100]
    after = lcb.filter_by_date(recs, start_date=cut)
    before = lcb.filter_by_date(recs, end_date=cut)
    assert all(r["contest_date"][:10] >= cut for r in after)
    assert all(r["contest_date"][:10] <= cut for r in before)
    same_day = sum(d == cut for d in dates)
    assert len(after) + len(before) == len(recs) + same_day  # both ends inclusive
    window = lcb.filter_by_date(recs, "2024-01-01", "2024-06-30")
    assert window and len(window) == sum("2024-01-01" <= d <= "2024-06-30" for d in dates)
    assert lcb.filter_by_date(recs) == recs
    with pytest.raises(ValueError, match="after"):
        lcb.filter_by_date(recs, "2025-01-01", "2024-01-01")
    with pytest.raises(DataError, match="contest_date"):
        lcb.filter_by_date([{"id": "x", "contest_date": "yesterday"}], start_date="2024-01-01")


# ---------------------------------------------------------------------------------------------
# Loader


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _upstream_shape(rec):
    return {
        k: v
        for k, v in rec.items()
        if k not in ("id", "task", "time_limit", "memory_limit", "import_header")
    }


@needs_bwrap
def test_the_loader_reads_a_livecodebench_jsonl_file_with_real_private_test_blobs(tmp_path):
    path = _write_jsonl(
        tmp_path / "test6.jsonl",
        [_upstream_shape(_stdin_record()), _upstream_shape(_functional_record())],
    )
    recs = lcb.load(path)
    assert [r["id"] for r in recs] == ["add", "addall"] and {r["task"] for r in recs} == {"lcb"}
    assert "### Question:" in recs[0]["prompt"] and "starter code" in recs[1]["prompt"]
    assert [len(lcb.tests_of(r)) for r in recs] == [2, 3]
    ok = lcb.score(recs[0], "```python\na,b=map(int,input().split())\nprint(a+b)\n```", timeout_s=2)
    assert ok["passed"] and ok["verdicts"] == ["passed", "passed"]
    bad = lcb.score(
        recs[0], "```python\na,b=map(int,input().split())\nprint(a-b)\n```", timeout_s=2
    )
    assert not bad["passed"] and bad["verdicts"] == ["wrong answer", "wrong answer"]
    res = lcb.score(recs[1], FUNCTIONAL_OK, timeout_s=2)  # needs the typing import header
    assert res["passed"], res
    assert [r["id"] for r in lcb.load(path, start_date="2024-06-15")] == ["addall"]
    assert [r["id"] for r in lcb.load(path, end_date="2024-06-01")] == ["add"]


def test_the_loader_reads_a_json_list_file(tmp_path):
    path = tmp_path / "lcb.json"
    path.write_text(json.dumps([_upstream_shape(_stdin_record())]))
    assert [r["question_id"] for r in lcb.load(path)] == ["add"]


def test_a_malformed_jsonl_line_is_reported_with_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_upstream_shape(_stdin_record())) + "\n{not json\n")
    with pytest.raises(DataError, match=rf"{path}:2: malformed JSON"):
        lcb.load(path)


def test_a_record_missing_a_field_is_reported_with_its_line_and_field(tmp_path):
    rec = _upstream_shape(_stdin_record())
    del rec["contest_date"]
    path = _write_jsonl(tmp_path / "missing.jsonl", [_upstream_shape(_stdin_record()), rec])
    with pytest.raises(DataError, match=rf"{path}:2: record is missing field 'contest_date'"):
        lcb.load(path)


def test_an_undecodable_private_test_is_reported_with_its_line_and_field(tmp_path):
    rec = _upstream_shape(_stdin_record(private_test_cases="@@@garbage@@@"))
    path = _write_jsonl(tmp_path / "blob.jsonl", [rec])
    with pytest.raises(DataError, match=rf"{path}:1: private_test_cases: undecodable") as e:
        lcb.load(path)
    assert "\n" not in str(e.value)


def test_functional_tests_without_a_func_name_are_refused(tmp_path):
    rec = _upstream_shape(_functional_record(metadata="{}"))
    path = _write_jsonl(tmp_path / "nofunc.jsonl", [rec])
    with pytest.raises(DataError, match=r":1: functional tests need metadata.func_name"):
        lcb.load(path)


def test_a_missing_file_is_reported():
    with pytest.raises(DataError, match="not found"):
        lcb.load("/nonexistent/lcb.jsonl")


def test_hub_release_tags_map_to_livecodebench_files():
    assert lcb.hub_data_files("release_v2") == ["test.jsonl", "test2.jsonl"]
    assert lcb.hub_data_files("v6") == ["test6.jsonl"]
    assert len(lcb.hub_data_files(None)) == 6
    with pytest.raises(ValueError):
        lcb.hub_data_files("v9")


# ---------------------------------------------------------------------------------------------
# Extraction and comparison


@pytest.mark.parametrize(
    "completion,code",
    [
        ("text\n```python\nprint(1)\n```\nmore\n```python\nprint(2)\n```\nbye", "print(2)\n"),
        ("```\nprint(3)\n```", "print(3)\n"),
        ("```py\nprint(4)\n```", "print(4)\n"),
        ("intro\n```python\nprint(5)", "print(5)"),  # opened, never closed
        ("print(6)", "print(6)"),  # no fence: the whole completion
        ("```print(7)```", "print(7)"),
    ],
    ids=["last-of-two", "no-tag", "py-tag", "unterminated", "no-fence", "one-line"],
)
def test_extract_code_takes_the_last_fenced_block_with_documented_fallbacks(completion, code):
    assert lcb.extract_code(completion) == code


@pytest.mark.parametrize(
    "got,want,same",
    [
        ("5\n", "5", True),
        ("  5  \n\n", "5\n", True),
        ("1 2\n3\n", "1 2\n3", True),
        ("1.0\n", "1\n", True),
        ("2.50 3\n", "2.5 3\n", True),
        ("1e2", "100", True),
        ("5\n6\n", "5\n", False),
        ("abc", "abd", False),
        ("1.0001", "1", False),
        ("1  2", "1 2", True),
        ("", "0", False),
    ],
)
def test_stdin_outputs_are_compared_line_by_line_with_the_numeric_fallback(got, want, same):
    assert lcb.outputs_match(got, want) is same


def test_the_shared_judge_uses_the_comparison_each_benchmark_gives_it():
    from evaluators.benchmarks import codeforces, judge

    assert lcb.extract_code is judge.extract_code and lcb.VERDICTS is judge.VERDICTS
    stdin = {"input": "", "output": "1.0000001\n", "testtype": "stdin"}
    ran = sandbox.Result(status="ok", stdout="1\n", stderr="", returncode=0)
    assert judge.judge(stdin, ran, lcb.outputs_match) == "wrong answer"
    assert judge.judge(stdin, ran, codeforces.tokens_match) == "passed"
    assert (
        judge.judge(stdin, dataclasses.replace(ran, status="timeout"), codeforces.tokens_match)
        == "time limit"
    )
    functional = {"input": "[1]", "output": "[1, 2]", "testtype": "functional"}
    said = sandbox.Result(
        status="ok", stdout="", stderr="", returncode=0, channel=b'{"result": [1, 2]}\n'
    )
    assert judge.judge(functional, said, lambda got, want: False) == "passed"
    job = judge.make_job(
        "print(1)", functional, func_name="f", header="H\n", timeout_s=1.0, memory_mb=64
    )
    assert job["code"] == judge.DRIVER and job["files"] == {"solution.py": "H\nprint(1)"}


# ---------------------------------------------------------------------------------------------
# Verdicts and hostile programs


@needs_bwrap
@pytest.mark.parametrize(
    "code,verdict",
    [
        ("a,b=map(int,input().split())\nprint(a+b)", "passed"),
        ("print(0)", "wrong answer"),
        ("raise RuntimeError('x')", "runtime error"),
        ("while True: pass", "time limit"),
        ("def f(:\n  pass", "compile error"),
        ("x = bytearray(10 ** 10)", "memory limit"),
        ("while True: print('z' * 10000)", "output limit"),
    ],
    ids=["passed", "wrong", "runtime", "timeout", "syntax", "memory", "flood"],
)
def test_each_failure_kind_gets_its_verdict(code, verdict):
    res = lcb.score(_stdin_record(), f"```python\n{code}\n```", timeout_s=1.0)
    assert res["verdicts"] == [verdict, verdict] and res["passed"] is (verdict == "passed")
    assert res["n_tests"] == 2 and res["n_passed"] == (2 if verdict == "passed" else 0)


@needs_bwrap
def test_stopping_at_the_first_failure_skips_the_rest():
    res = lcb.score(_stdin_record(), "```python\nprint(5)\n```", stop_at_first_failure=True)
    assert res["verdicts"] == ["passed", "wrong answer"]
    res = lcb.score(_stdin_record(), "```python\nprint(6)\n```", stop_at_first_failure=True)
    assert res["verdicts"] == ["wrong answer", "skipped"] and not res["passed"]


@needs_bwrap
def test_a_functional_solution_passes_and_wrong_or_crashing_ones_fail():
    rec = _functional_record()
    assert lcb.score(rec, FUNCTIONAL_OK)["verdicts"] == ["passed"] * 3
    wrong = FUNCTIONAL_OK.replace("x + k", "x - k")
    assert lcb.score(rec, wrong)["verdicts"] == ["wrong answer", "passed", "wrong answer"]
    crash = FUNCTIONAL_OK.replace("return", "raise ValueError; return")
    assert lcb.score(rec, crash)["verdicts"] == ["runtime error"] * 3
    tuples = FUNCTIONAL_OK.replace("[x + k for x in nums]", "tuple(x + k for x in nums)")
    assert lcb.score(rec, tuples)["passed"]  # tuples compare as lists, as upstream
    toplevel = "```python\ndef addAll(nums, k):\n    return [x + k for x in nums]\n```"
    assert lcb.score(rec, toplevel)["passed"]  # no Solution class: a module function


STDIN_HOSTILE = {
    "sys.exit before printing": "import sys\nsys.exit(0)\nprint(5)",
    "os._exit before printing": "import os\nos._exit(0)",
    "raise SystemExit": "raise SystemExit(0)",
    "print a fake verdict": "print('passed')\nprint('All tests passed')",
    "print a fake judge record": 'print(\'{"passed": true, "verdicts": ["passed"]}\')',
    "delete its own files": "import os\nfor f in os.listdir('.'):\n    os.remove(f)\nprint('gone')",
    "overwrite builtins": "import builtins\nbuiltins.print = lambda *a, **k: None\nbuiltins.input = lambda: '0'",
    "write the channel fd": "import os\nfor fd in range(3, 20):\n    try: os.write(fd, b'{\"result\": 5}\\n')\n    except OSError: pass",
    "search memory for the expected output": (
        "import gc\nhits = [o for o in gc.get_objects() if isinstance(o, dict) and 'output' in o]\n"
        "print(hits[0]['output'] if hits else 'nothing')"
    ),
}


@needs_bwrap
@pytest.mark.parametrize("name", list(STDIN_HOSTILE))
def test_hostile_stdin_programs_never_pass(name):
    res = lcb.score(_stdin_record(), f"```python\n{STDIN_HOSTILE[name]}\n```", timeout_s=2.0)
    assert not res["passed"] and "passed" not in res["verdicts"], res


FUNCTIONAL_HOSTILE = {
    "object equal to everything": (
        "class Any:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
        "class Solution:\n    def addAll(self, nums, k): return Any()"
    ),
    "list subclass equal to everything": (
        "class L(list):\n    def __eq__(self, o): return True\n"
        "class Solution:\n    def addAll(self, nums, k): return L([42])"
    ),
    "int subclass equal to everything": (
        "class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
        "class Solution:\n    def addAll(self, nums, k): return I(99)"
    ),
    "sys.exit inside the call": (
        "import sys\nclass Solution:\n    def addAll(self, nums, k): sys.exit(0)"
    ),
    "os._exit inside the call": (
        "import os\nclass Solution:\n    def addAll(self, nums, k): os._exit(0)"
    ),
    "raise SystemExit at import": "raise SystemExit(0)",
    "print a forged channel record": (
        "print('{\"result\": [5, 6, 7]}')\nclass Solution:\n    def addAll(self, nums, k): return None"
    ),
    "forge the channel then exit": (
        "import os\nos.write(int(os.environ.get('GSPO_CHANNEL_FD', '3')), b'{\"result\": \"passed\"}\\n')\n"
        "os._exit(0)"
    ),
    "write two claims to the channel": (
        "import os\nfor fd in range(3, 30):\n    try: os.write(fd, b'{\"result\": [5, 6, 7]}\\n')\n"
        "    except OSError: pass\n"
        "class Solution:\n    def addAll(self, nums, k): return [x + k for x in nums]"
    ),
    "walk stack frames for the answer": (
        "import sys\nclass Solution:\n    def addAll(self, nums, k):\n        f = sys._getframe()\n"
        "        seen = []\n        while f:\n            seen += [v for v in f.f_locals.values()]\n"
        "            f = f.f_back\n        return [s for s in seen if isinstance(s, str)]"
    ),
    "patch json.dumps": (
        'import json\njson.dumps = lambda *a, **k: \'{"result": "forged"}\'\n'
        "class Solution:\n    def addAll(self, nums, k): return None"
    ),
    "overwrite builtins": (
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.list = lambda *a: []\n"
        "class Solution:\n    def addAll(self, nums, k): return 'x'"
    ),
    "delete the driver and solution files": (
        "import os\nfor f in os.listdir('.'):\n    os.remove(f)\n"
        "class Solution:\n    def addAll(self, nums, k): return []"
    ),
    "unserialisable return value": (
        "class Solution:\n    def addAll(self, nums, k): return {1, 2, 3}"
    ),
    "atexit handler printing a verdict": (
        "import atexit\natexit.register(lambda: print('passed'))\n"
        "class Solution:\n    def addAll(self, nums, k): return 0"
    ),
}


@needs_bwrap
@pytest.mark.parametrize("name", list(FUNCTIONAL_HOSTILE))
def test_hostile_functional_programs_never_pass(name):
    res = lcb.score(
        _functional_record(), f"```python\n{FUNCTIONAL_HOSTILE[name]}\n```", timeout_s=2.0
    )
    assert not res["passed"], res
    # Test 2 expects [], which a program that returns an empty list legitimately gets right;
    # tests 1 and 3 can only pass by computing the answer.
    assert res["verdicts"][0] != "passed" and res["verdicts"][2] != "passed", res


@needs_bwrap
def test_score_many_matches_score_one_by_one():
    recs = lcb.generate(6, split="test", seed=0)
    comps = [r["solution"] if i % 2 else "```python\nprint(0)\n```" for i, r in enumerate(recs)]
    many = lcb.score_many(recs, comps, workers=2)
    assert many == [lcb.score(r, c) for r, c in zip(recs, comps)]
    assert [m["passed"] for m in many] == [False, True] * 3
    with pytest.raises(ValueError, match="completions"):
        lcb.score_many(recs, comps[:-1])


def test_the_data_stage_keeps_only_the_windowed_test_problems_of_a_loaded_file(tmp_path):
    from gspo.config.data import DataFiles, DataGenConfig, TaskFiles
    from gspo.config.fields import ConfigError
    from gspo.io import read_jsonl, write_jsonl
    from pipeline import data

    src = tmp_path / "lcb_release.jsonl"
    write_jsonl(lcb.generate(60, split="test", seed=0), src)
    cfg = DataGenConfig(
        out_dir=str(tmp_path / "out"),
        tasks=["lcb"],
        files=DataFiles(
            lcb=TaskFiles(test=str(src), test_start="2024-01-01", test_end="2024-06-30")
        ),
    )
    kept = read_jsonl(data.generate(cfg)["lcb_test"])
    dates = [r["contest_date"][:10] for r in read_jsonl(src)]
    assert len(kept) == sum("2024-01-01" <= d <= "2024-06-30" for d in dates) > 0
    assert all("2024-01-01" <= r["contest_date"][:10] <= "2024-06-30" for r in kept)
    with pytest.raises(ConfigError, match="test_start: must be an ISO date YYYY-MM-DD"):
        TaskFiles(test=str(src), test_start="Oct 2024")
    with pytest.raises(ConfigError, match="test_start: filters a loaded test file"):
        TaskFiles(test_start="2024-10-01")
    with pytest.raises(ConfigError, match="aime.test_start: a release-date window is for lcb"):
        DataFiles(aime=TaskFiles(test="x.jsonl", test_start="2024-10-01"))


FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "lcb"


def test_the_published_release_layout_loads_and_the_papers_window_keeps_its_problems():
    rows = [json.loads(x) for x in (FIXTURES / "test5.jsonl").open()]
    assert set(rows[0]) == set(lcb.REQUIRED_FIELDS) | {
        "question_title",
        "platform",
        "contest_id",
        "starter_code",
        "difficulty",
    }
    recs = lcb.load(FIXTURES / "test5.jsonl", start_date="2024-10-01", end_date="2025-02-01")
    assert [r["contest_date"][:10] for r in recs] == [
        "2024-10-05",
        "2024-11-16",
        "2024-12-07",
        "2025-01-11",
        "2025-01-25",
    ]
    assert all(r["prompt"] == lcb.format_prompt(r) and lcb.tests_of(r) for r in recs)


def test_the_sft_set_gives_the_evaluation_prompt_and_a_fenced_solution_that_passes():
    recs = lcb.load_sft(FIXTURES / "sft.jsonl")
    assert len(recs) == 8 and all(r["task"] == "lcb" for r in recs)
    rows = {r["question_id"]: r for r in map(json.loads, (FIXTURES / "sft.jsonl").open())}
    for rec in recs[:2]:  # one bare program, one fenced completion
        row = rows[rec["id"]]
        assert rec["prompt"] == lcb.format_prompt(row)
        assert rec["solution"].startswith("```") and rec["solution"].rstrip().endswith("```")
        assert lcb.score(row, rec["solution"])["passed"]
    assert lcb.load_sft(FIXTURES / "sft.jsonl", limit=3) == recs[:3]


def test_an_sft_row_without_a_solution_names_the_row_and_the_field(tmp_path):
    rows = [json.loads(x) for x in (FIXTURES / "sft.jsonl").open()]
    del rows[2]["solution"]
    bad = tmp_path / "sft.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"^\S+sft.jsonl:3: missing field 'solution'"):
        lcb.load_sft(bad)


def test_the_data_stage_reads_sft_files_with_the_sft_loader(tmp_path):
    from gspo.config.data import DataFiles, DataGenConfig, TaskFiles
    from gspo.io import read_jsonl
    from pipeline import data

    cfg = DataGenConfig(
        out_dir=str(tmp_path),
        tasks=["lcb"],
        files=DataFiles(
            lcb=TaskFiles(
                sft=str(FIXTURES / "sft.jsonl"),
                rl=str(FIXTURES / "train.jsonl"),
                test=str(FIXTURES / "test5.jsonl"),
                test_start="2024-10-01",
                test_end="2025-02-01",
            )
        ),
    )
    paths = data.generate(cfg)
    sft, rl, test = (read_jsonl(paths[f"lcb_{p}"]) for p in ("sft", "rl", "test"))
    assert len(sft) == 8 and all(r["solution"] for r in sft)
    assert len(rl) == 8 and all(lcb.tests_of(r) for r in rl) and len(test) == 5
    # a problem file without worked solutions is no SFT set
    cfg.files.lcb.sft = str(FIXTURES / "train.jsonl")
    with pytest.raises(DataError, match="train.jsonl:1: missing field 'solution'"):
        data.generate(cfg)


def test_a_hub_release_out_of_reach_is_one_line_saying_what_to_download(tmp_path):
    lines = offline_errors(
        "lcb.load('livecodebench/code_generation_lite', version='v5')\n"
        "lcb.load_sft('someone/lcb-style-sft')",
        tmp_path,
    )
    assert lines[0].startswith(
        "livecodebench/code_generation_lite (files test5.jsonl): not in "
        "the local Hugging Face cache"
    )
    assert "huggingface-cli download someone/lcb-style-sft" in lines[1]


def test_the_release_version_and_window_from_the_config_reach_the_hub_loader(monkeypatch, tmp_path):
    import datasets

    from gspo.config.data import TaskFiles
    from gspo.config.fields import ConfigError
    from pipeline import data

    asked = []

    def hub(name, split=None, data_files=None, **kw):  # stands in for the hub: no network here
        asked.append((name, data_files))
        return [json.loads(x) for x in (FIXTURES / "test5.jsonl").open()]

    monkeypatch.setattr(datasets, "load_dataset", hub)
    files = TaskFiles(
        test="livecodebench/code_generation_lite",
        version="v5",
        test_start="2024-10-01",
        test_end="2025-02-01",
    )
    recs = data.loaded("lcb", files.test, 0, files.load_kwargs("test"))
    assert asked == [("livecodebench/code_generation_lite", ["test5.jsonl"])] and len(recs) == 5
    with pytest.raises(ConfigError, match="version: must be release_vN, vN or release_latest"):
        TaskFiles(test="livecodebench/code_generation_lite", version="5")
