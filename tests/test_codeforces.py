"""CodeForces-style problems: generator, open-r1 loader, scoring in the sandbox, rating estimate."""

import json
import pathlib
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluators import tasks
from evaluators.benchmarks import codeforces as cf
from evaluators.execution import sandbox
from gspo.io import DataError
from toys import offline_errors

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "codeforces"
PROBLEMS = FIXTURES / "codeforces_train.parquet"
GENERATED = FIXTURES / "generated_tests"
COTS = FIXTURES / "codeforces_cots.parquet"

# Skipped only where bubblewrap is not installed at all; an installed bwrap that fails its probe
# makes these tests fail (SandboxUnavailable names the reason) rather than skip.
needs_bwrap = pytest.mark.skipif(
    sandbox.bwrap_path() is None, reason="bubblewrap not installed (apt-get install bubblewrap)"
)


def _open_r1_record(**extra):
    rec = {
        "id": "1950/A",
        "contest_id": 1950,
        "index": "A",
        "title": "Sum",
        "description": "Print a+b.",
        "input_format": "Two integers.",
        "output_format": "One integer.",
        "rating": 800,
        "time_limit": 1.0,
        "memory_limit": 256,
        "tags": ["math"],
        "examples": [{"input": "1 2\n", "output": "3\n"}],
        "official_tests": [
            {"input": "1 2\n", "output": "3\n"},
            {"input": "-5 5\n", "output": "0\n"},
            {"input": "1000000000 1000000000\n", "output": "2000000000\n"},
        ],
    }
    rec.update(extra)
    return rec


# ---------------------------------------------------------------------------------------------
# Generator


def test_generated_ratings_grow_with_difficulty_and_cover_800_to_3500():
    ratings = [t.rating for t in cf.TEMPLATES]
    assert ratings == sorted(ratings) and len(set(ratings)) == len(ratings)
    assert ratings[0] == cf.MIN_RATING and ratings[-1] == cf.MAX_RATING
    assert all(r % 100 == 0 for r in ratings)
    recs = cf.generate(len(cf.TEMPLATES) * 2, split="train", seed=0)
    assert {r["rating"] for r in recs} == set(ratings)
    # Higher-rated problems need longer programs: the mean solution length rises with rating.
    by_rating = sorted(recs, key=lambda r: r["rating"])
    half = len(by_rating) // 2
    low = sum(len(r["solution"]) for r in by_rating[:half]) / half
    high = sum(len(r["solution"]) for r in by_rating[half:]) / (len(by_rating) - half)
    assert high > low * 1.4


def test_generated_problems_are_deterministic_disjoint_and_filterable_by_rating():
    a = cf.generate(40, split="train", seed=2)
    assert a == cf.generate(40, split="train", seed=2)
    train = {r["description"] for s in (0, 1) for r in cf.generate(200, split="train", seed=s)}
    test = {r["description"] for s in (0, 1) for r in cf.generate(60, split="test", seed=s)}
    assert train and test and not train & test
    easy = cf.generate(20, split="train", seed=0, max_rating=1200)
    assert easy and all(r["rating"] <= 1200 for r in easy)
    with pytest.raises(ValueError):
        cf.generate(1, split="train", seed=0, min_rating=3600)


def test_generated_records_have_the_open_r1_shape_and_project_fields():
    for r in cf.generate(30, split="train", seed=0):
        for k in (
            "id",
            "task",
            "prompt",
            "solution",
            "contest_id",
            "rating",
            "time_limit",
            "memory_limit",
            "tests",
        ):
            assert k in r, k
        assert r["task"] == "cf" and cf.MIN_RATING <= r["rating"] <= cf.MAX_RATING
        assert len(r["prompt"]) < 120 and r["solution"].startswith("```python\n")
        assert len(r["tests"]) == 5 and all(set(t) == {"input", "output"} for t in r["tests"])
        assert r["time_limit"] > 0 and r["memory_limit"] >= 64
    assert cf.normalize(r) == {**r, "input_mode": "stdio", "generated_checker": None}


@needs_bwrap
def test_every_template_s_worked_solution_passes_and_a_wrong_constant_fails():
    recs = cf.generate(len(cf.TEMPLATES), split="train", seed=1)
    assert {r["template"] for r in recs} == set(cf.TEMPLATE_NAMES)
    results = cf.score_many(recs, [r["solution"] for r in recs], workers=2)
    assert all(res["passed"] for res in results), [
        (r["template"], res["verdicts"]) for r, res in zip(recs, results) if not res["passed"]
    ]
    assert tasks.reward(recs[0], recs[0]["solution"]) == 1.0
    wrong = [r["solution"].replace("print(", "print(1+") for r in recs]
    assert not any(res["passed"] for res in cf.score_many(recs, wrong, workers=2))


# ---------------------------------------------------------------------------------------------
# Loader


@needs_bwrap
def test_the_loader_reads_open_r1_records_and_filters_by_rating(tmp_path):
    path = tmp_path / "cf.jsonl"
    rows = [_open_r1_record(), _open_r1_record(id="1950/F", index="F", rating=2400)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = cf.load(path)
    assert [r["id"] for r in recs] == ["1950/A", "1950/F"] and {r["task"] for r in recs} == {"cf"}
    assert "Time limit: 1.0 s" in recs[0]["prompt"] and "Example input" in recs[0]["prompt"]
    assert [r["id"] for r in cf.load(path, max_rating=2000)] == ["1950/A"]
    res = cf.score(recs[0], "```python\na,b=map(int,input().split())\nprint(a+b)\n```")
    assert res["passed"] and res["verdicts"] == ["passed"] * 3


@pytest.mark.parametrize(
    "change,message",
    [
        ({"rating": "hard"}, "field 'rating' must be a number, got 'hard'"),
        ({"official_tests": [{"input": "1"}]}, r"tests\[0\] needs string fields"),
        ({"input_mode": "socket"}, r"field 'input_mode' must be one of \['stdio', 'file'\]"),
        ({"generated_checker": 7}, "field 'generated_checker' must be a string"),
    ],
    ids=["rating", "test-shape", "input-mode", "checker-type"],
)
def test_bad_records_are_reported_with_file_line_and_field(tmp_path, change, message):
    path = tmp_path / "bad.jsonl"
    rows = [_open_r1_record(), _open_r1_record(**change)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=rf"{path}:2: .*{message}"):
        cf.load(path)


def test_a_missing_field_and_a_malformed_line_are_reported(tmp_path):
    row = _open_r1_record()
    del row["memory_limit"]
    path = tmp_path / "missing.jsonl"
    path.write_text(json.dumps(_open_r1_record()) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match=rf"{path}:2: record is missing field 'memory_limit'"):
        cf.load(path)
    path.write_text(json.dumps(_open_r1_record()) + "\n\n[1, 2\n")
    with pytest.raises(DataError, match=rf"{path}:3: malformed JSON"):
        cf.load(path)


def test_unusable_rows_are_skipped_and_counted_unless_asked_to_raise(tmp_path, capsys):
    path = tmp_path / "mixed.jsonl"
    rows = [
        _open_r1_record(rating=None),
        _open_r1_record(id="2/B", official_tests=[]),
        _open_r1_record(id="3/C", interaction_format="interactive"),
        _open_r1_record(id="4/D"),
        _open_r1_record(id="5/E", time_limit=None),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["id"] for r in cf.load(path)] == ["4/D"]
    err = capsys.readouterr().err.strip()
    assert err == (
        f"{path}: skipped 1 rows without a rating; 1 rows without tests; "
        "1 rows interactive; 1 rows without a time or memory limit"
    )
    with pytest.raises(DataError, match=rf"{path}:1: field 'rating' must be a number, got None"):
        cf.load(path, skip_unusable=False)


def test_records_carry_their_checker_and_input_mode_and_interactive_ones_are_refused():
    rec = cf.normalize(_open_r1_record(generated_checker="print(1)", input_mode="file"))
    assert rec["generated_checker"] == "print(1)" and rec["input_mode"] == "file"
    assert "checker" not in rec and "Read input.txt, write output.txt." in rec["prompt"]
    plain = cf.normalize(_open_r1_record(generated_checker="  ", checker=True))
    assert plain["generated_checker"] is None and plain["input_mode"] == "stdio"
    assert "checker" not in plain and "Read stdin, write stdout." in plain["prompt"]
    with pytest.raises(DataError, match="interactive problems"):
        cf.normalize(_open_r1_record(interaction_format="Ask '? x'."))
    with pytest.raises(DataError, match="interactive problems"):
        cf.score(_open_r1_record(interaction_format="Ask '? x'."), "print(3)")


# ---------------------------------------------------------------------------------------------
# The published layouts (tests/fixtures/codeforces, made by make_fixtures.py)


def _plain_types(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_types(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain_types(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def test_the_published_parquet_loads_skipping_and_counting_unusable_rows(capsys):
    recs = cf.load(PROBLEMS)
    assert [r["id"] for r in recs] == ["1900/A", "1900/E", "1900/F"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{PROBLEMS}: skipped 1 rows without a rating; 1 rows interactive; 1 rows "
        "without official tests (their generated tests need generated_tests=FOLDER)"
    ]
    a, e, f = recs
    assert a["task"] == "cf" and a["rating"] == 800 and a["memory_limit"] == 256
    assert a["time_limit"] == 1.0 and a["contest_id"] == "1900" and a["tags"] == ["implementation"]
    assert a["tests"] == [{"input": "1 2\n", "output": "3\n"}, {"input": "-5 5\n", "output": "0\n"}]
    assert "official_tests" not in a and a["n_official_tests"] == 2
    assert a["generated_checker"] is None and a["input_mode"] == "stdio"
    assert e["generated_checker"].startswith("import sys") and f["input_mode"] == "file"
    assert a["prompt"] == cf.format_prompt(a) and "Read stdin, write stdout." in a["prompt"]
    assert "Read input.txt, write output.txt." in f["prompt"]
    assert all(_plain_types(r) for r in recs)
    assert json.loads(json.dumps(recs)) == recs
    assert [r["id"] for r in cf.load(PROBLEMS, min_rating=900, max_rating=1000)] == ["1900/E"]
    assert [r["id"] for r in cf.load(PROBLEMS, limit=2)] == ["1900/A", "1900/E"]
    with pytest.raises(DataError, match=rf"{PROBLEMS}: row 2: field 'rating' must be a number"):
        cf.load(PROBLEMS, skip_unusable=False)


@pytest.mark.parametrize(
    "where", [GENERATED, GENERATED / "test_cases_00.parquet"], ids=["folder", "file"]
)
def test_generated_tests_follow_the_official_ones_in_test_case_order(where, capsys):
    recs = {r["id"]: r for r in cf.load(PROBLEMS, generated_tests=where)}
    assert list(recs) == ["1900/A", "1900/D", "1900/E", "1900/F"]
    assert capsys.readouterr().err.strip() == (
        f"{PROBLEMS}: skipped 1 rows without a rating; 1 rows interactive"
    )
    assert recs["1900/A"]["tests"][2:] == [{"input": "100 23\n", "output": "123\n"}]
    assert recs["1900/A"]["n_official_tests"] == 2
    assert recs["1900/D"]["tests"] == [
        {"input": "1\n", "output": "2\n"},
        {"input": "-4\n", "output": "-8\n"},
        {"input": "7\n", "output": "14\n"},
    ]
    assert recs["1900/D"]["n_official_tests"] == 0 and len(recs["1900/E"]["tests"]) == 2
    assert json.loads(json.dumps(list(recs.values()))) == list(recs.values())


def test_a_problem_whose_generated_tests_are_missing_from_the_folder_is_skipped(tmp_path, capsys):
    folder = tmp_path / "generated_tests"
    folder.mkdir()
    rows = [{"problem_id": "1900/A", "input": "1 1\n", "output": "2\n", "test_case_i": 0}]
    pq.write_table(pa.Table.from_pylist(rows), folder / "part.parquet")
    assert [r["id"] for r in cf.load(PROBLEMS, generated_tests=folder)] == [
        "1900/A",
        "1900/E",
        "1900/F",
    ]
    assert "1 rows without tests" in capsys.readouterr().err
    with pytest.raises(
        DataError, match=rf"^{tmp_path / 'nowhere'}: generated tests folder not found$"
    ):
        cf.load(PROBLEMS, generated_tests=tmp_path / "nowhere")


def test_bad_generated_test_files_are_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "g1"
    bad.mkdir()
    (bad / "broken.parquet").write_bytes(b"PAR1 this is not parquet at all")
    with pytest.raises(DataError) as e:
        cf.load(PROBLEMS, generated_tests=bad)
    assert str(e.value).startswith(f"{bad / 'broken.parquet'}: not a readable parquet file")
    assert "\n" not in str(e.value)
    cols = tmp_path / "g2"
    cols.mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"problem_id": "1900/A", "input": "1 1\n", "test_case_i": 0}]),
        cols / "t.parquet",
    )
    with pytest.raises(DataError, match=r"t\.parquet: missing column 'output'"):
        cf.load(PROBLEMS, generated_tests=cols)
    kind = tmp_path / "g3"
    kind.mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [{"problem_id": "1900/A", "input": "1 1\n", "output": 2, "test_case_i": 0}]
        ),
        kind / "t.parquet",
    )
    with pytest.raises(DataError, match=r"t\.parquet: column 'output' must be a string, got int64"):
        cf.load(PROBLEMS, generated_tests=kind)


def test_a_corrupt_or_missing_parquet_is_one_line_naming_the_file(tmp_path):
    broken = tmp_path / "train-00000-of-00001.parquet"
    broken.write_bytes(PROBLEMS.read_bytes()[:300])
    for fn in (cf.load, cf.load_sft):
        with pytest.raises(DataError) as e:
            fn(broken)
        assert str(e.value).startswith(f"{broken}: not a readable parquet file (")
        assert "\n" not in str(e.value)
    with pytest.raises(DataError, match=rf"^{tmp_path / 'gone.parquet'}: file not found$"):
        cf.load(tmp_path / "gone.parquet")


def test_a_published_row_missing_a_column_or_with_a_wrong_type_names_file_row_and_field(tmp_path):
    table = pq.read_table(PROBLEMS)
    missing = tmp_path / "missing.parquet"
    pq.write_table(table.drop_columns(["memory_limit"]), missing)
    with pytest.raises(
        DataError, match=rf"^{missing}: row 1: record is missing field 'memory_limit'$"
    ):
        cf.load(missing)
    rows = table.to_pylist()
    rows[4]["official_tests"] = [{"input": "1 2\n", "output": None}]
    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), wrong)
    with pytest.raises(DataError, match=rf"^{wrong}: row 5: tests\[0\] needs string fields"):
        cf.load(wrong)


def test_a_folder_of_parquet_shards_loads_like_the_files_in_it(tmp_path):
    table = pq.read_table(PROBLEMS)
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(table.slice(0, 3), data / "train-00000-of-00002.parquet")
    pq.write_table(table.slice(3), data / "train-00001-of-00002.parquet")
    assert cf.load(data) == cf.load(PROBLEMS)


def test_the_sft_set_given_to_load_and_the_problem_set_given_to_load_sft_say_so():
    with pytest.raises(DataError) as e:
        cf.load(COTS)
    assert str(e.value).startswith(f"{COTS}: an SFT set (open-r1/codeforces-cots layout")
    assert "load_sft" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DataError) as e:
        cf.load_sft(PROBLEMS)
    assert str(e.value).startswith(f"{PROBLEMS}: SFT needs worked solutions")
    assert "codeforces-cots" in str(e.value) and "\n" not in str(e.value)


def test_codeforces_cots_gives_sft_records_with_the_evaluation_prompt(tmp_path, capsys):
    recs = cf.load_sft(COTS)
    assert [r["id"] for r in recs] == ["1900/A"]
    assert capsys.readouterr().err.strip() == (
        f"{COTS}: skipped 1 rows not finished (finish_reason is not 'stop'); "
        "1 rows without a ```python block"
    )
    (sft,) = recs
    assert set(sft) == {"id", "task", "prompt", "solution"} and sft["task"] == "cf"
    problem = cf.load(PROBLEMS, limit=1)[0]
    assert sft["prompt"] == problem["prompt"]  # SFT trains on the prompt evaluation gives
    assert sft["solution"].startswith("<think>") and sft["solution"].endswith("```")
    assert (
        cf.judge.extract_code(sft["solution"]) == "a, b = map(int, input().split())\nprint(a + b)\n"
    )
    table = pq.read_table(COTS)
    path = tmp_path / "twice.parquet"
    pq.write_table(pa.concat_tables([table, table]), path)
    assert [r["id"] for r in cf.load_sft(path)] == ["1900/A", "1900/A#2"]
    assert [r["id"] for r in cf.load_sft(path, limit=1)] == ["1900/A"]


def test_hub_rows_come_out_as_plain_values(monkeypatch):
    import datasets

    calls = []
    row = pq.read_table(PROBLEMS).slice(0, 1).to_pylist()[0]
    row["tags"] = np.array(["math", "greedy"], dtype=object)
    row["official_tests"] = np.array([{"input": "1 2\n", "output": "3\n"}], dtype=object)
    row["rating"] = np.int64(800)

    def fake(name, config=None, split=None):
        calls.append((name, config, split))
        return [row]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    (rec,) = cf.load("open-r1/codeforces", split="test", config="verifiable")
    assert calls == [("open-r1/codeforces", "verifiable", "test")]
    assert rec["tags"] == ["math", "greedy"] and type(rec["tags"]) is list
    assert rec["tests"] == [{"input": "1 2\n", "output": "3\n"}] and type(rec["rating"]) is int
    assert _plain_types(rec)
    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda name, config=None, split=None: calls.append((name, config, split)) or [],
    )
    assert cf.load_sft("open-r1/codeforces-cots") == []
    assert calls[-1] == ("open-r1/codeforces-cots", "solutions_py", "train")


def test_a_hub_dataset_out_of_reach_is_one_line_saying_what_to_download(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError(
            "Couldn't reach 'open-r1/codeforces' on the Hub (LocalEntryNotFoundError)\nmore"
        )

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as e:
        cf.load("open-r1/codeforces", config="default")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("open-r1/codeforces (config default, split train): not in the local")
    assert "huggingface-cli download open-r1/codeforces --repo-type dataset" in msg
    assert "generated_tests" in msg and "data.files.cf" in msg


def test_offline_for_real_the_hub_names_give_the_one_line(tmp_path):
    lines = offline_errors(
        "cf.load('open-r1/codeforces')\ncf.load_sft('open-r1/codeforces-cots')", tmp_path
    )
    assert lines[0].startswith("open-r1/codeforces (split train): not in the local Hugging Face")
    assert lines[1].startswith("open-r1/codeforces-cots (config solutions_py, split train): not in")


# ---------------------------------------------------------------------------------------------
# Scoring


@pytest.mark.parametrize(
    "got,want,same",
    [
        ("1 2 3\n", "1\n2\n3", True),
        ("3", "3.0", True),
        ("3.0", "3", False),
        ("0.3333333", "0.333333333", True),
        ("0.34", "0.333333333", False),
        ("1e9", "1000000000.0", True),
        ("YES", "yes", False),
        ("1 2", "1 2 3", False),
        ("nan", "1.5", False),
    ],
)
def test_outputs_are_compared_as_tokens_with_a_float_tolerance(got, want, same):
    assert cf.tokens_match(got, want) is same


@needs_bwrap
def test_the_time_and_memory_limits_come_from_the_record():
    rec = _open_r1_record(time_limit=0.5, memory_limit=64)
    slow = "```python\nimport time\ntime.sleep(1.5)\na,b=map(int,input().split())\nprint(a+b)\n```"
    res = cf.score(rec, slow, stop_at_first_failure=True)
    assert res["verdicts"] == ["time limit", "skipped", "skipped"]
    one_test = dict(rec, official_tests=rec["official_tests"][:1])
    assert cf.score(one_test, slow, time_scale=8.0)["verdicts"] == ["passed"]
    hungry = "```python\nx = bytearray(200 * 2 ** 20)\nx[-1] = 1\nprint(3)\n```"
    roomy = dict(one_test, time_limit=5.0)
    assert cf.score(roomy, hungry)["verdicts"] == ["memory limit"]
    assert cf.score(dict(roomy, memory_limit=512), hungry)["verdicts"] == ["passed"]


@needs_bwrap
def test_hostile_programs_never_pass_a_codeforces_problem():
    rec = _open_r1_record()
    for code in [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        "print('Accepted')",
        "import os\nos.kill(os.getppid(), 9)",
        "while True: pass",
    ]:
        res = cf.score(rec, f"```python\n{code}\n```", time_scale=1.0)
        assert not res["passed"] and "passed" not in res["verdicts"], (code, res)


# ---------------------------------------------------------------------------------------------
# Rating estimate


def _contestant(rating, problems, rng):
    return [(d, rng.random() < cf.solve_probability(rating, d)) for d in problems]


@pytest.mark.parametrize("true_rating", [900, 1500, 2100, 2800])
def test_the_rating_estimate_recovers_simulated_contestants(true_rating):
    rng = random.Random(true_rating)
    problems = [800 + 100 * (i % 28) for i in range(560)]
    est = cf.estimate_rating(_contestant(true_rating, problems, rng))
    assert abs(est["rating"] - true_rating) < 120, est
    assert est["low"] < true_rating < est["high"] and est["high"] - est["low"] < 300
    assert not est["bounded"] and est["n"] == 560


def test_the_confidence_interval_covers_the_true_rating_about_as_often_as_claimed():
    rng = random.Random(0)
    hits, trials = 0, 120
    for _ in range(trials):
        r = rng.uniform(1000, 2600)
        problems = [rng.choice(range(800, 3600, 100)) for _ in range(60)]
        est = cf.estimate_rating(_contestant(r, problems, rng), confidence=0.9)
        hits += est["low"] <= r <= est["high"]
    assert 0.8 <= hits / trials <= 0.98, hits


def test_all_solved_and_none_solved_give_bounded_estimates():
    top = cf.estimate_rating([(d, True) for d in range(800, 3600, 100)])
    assert top["rating"] == cf.RATING_RANGE[1] == top["high"] and top["bounded"]
    assert 3000 < top["low"] < top["rating"]
    bottom = cf.estimate_rating([(d, False) for d in range(800, 3600, 100)])
    assert bottom["rating"] == cf.RATING_RANGE[0] == bottom["low"] and bottom["bounded"]
    assert 0 < bottom["high"] < 900
    narrow = cf.estimate_rating([(800, True)], lo=500, hi=1500)
    assert narrow["rating"] == 1500


def test_more_solves_never_lower_the_rating():
    problems = list(range(800, 3600, 100))
    ratings = [
        cf.estimate_rating([(d, i < k) for i, d in enumerate(problems)])["rating"]
        for k in range(len(problems) + 1)
    ]
    assert ratings == sorted(ratings) and ratings[0] < ratings[-1]


def test_percentile_follows_the_documented_reference_distribution():
    assert abs(cf.percentile(cf.REFERENCE_MEAN) - 50.0) < 0.5
    assert cf.percentile(cf.REFERENCE_MEAN + cf.REFERENCE_SD) == pytest.approx(84.13, abs=0.2)
    assert cf.percentile(0) == 0.0 and cf.percentile(4000) == 100.0
    assert cf.percentile(1500, population=[1000, 1400, 1600, 2000]) == 50.0
    est = cf.estimate_rating([(1400, True), (1400, False)])
    assert abs(est["rating"] - 1400) < 1e-3 and abs(est["percentile"] - 50) < 0.5
    assert est["percentile_low"] < est["percentile"] < est["percentile_high"]


def test_the_rating_estimate_rejects_empty_input():
    with pytest.raises(ValueError):
        cf.estimate_rating([])
    with pytest.raises(ValueError):
        cf.estimate_rating([(800, True)], confidence=1.5)


def test_a_glob_pattern_reads_the_shards_it_matches_in_order(capsys):
    shards = str(FIXTURES / "codeforces_t*.parquet")  # test then train, sorted by path
    got = cf.load(shards)
    assert got == cf.load(FIXTURES / "codeforces_test.parquet") + cf.load(
        FIXTURES / "codeforces_train.parquet"
    )
    with pytest.raises(DataError, match=r"train-\*.parquet: no files match"):
        cf.load(str(FIXTURES / "train-*.parquet"))


def test_the_data_stage_joins_the_generated_tests_folder_to_rl_and_test_problems(tmp_path):
    from gspo.config.data import DataFiles, DataGenConfig, TaskFiles
    from gspo.config.fields import ConfigError
    from gspo.io import read_jsonl
    from pipeline import data

    cfg = DataGenConfig(
        out_dir=str(tmp_path),
        tasks=["cf"],
        files=DataFiles(
            cf=TaskFiles(
                sft=str(FIXTURES / "codeforces_cots.parquet"),
                rl=str(FIXTURES / "codeforces_train.parquet"),
                test=str(FIXTURES / "codeforces_test.parquet"),
                generated_tests=str(FIXTURES / "generated_tests"),
            )
        ),
    )
    paths = data.generate(cfg)
    rl = {r["id"]: r for r in read_jsonl(paths["cf_rl"])}
    assert [t["output"] for t in rl["1900/D"]["tests"]] == ["2\n", "-8\n", "14\n"]
    assert [r["id"] for r in read_jsonl(paths["cf_sft"])] == ["1900/A"]
    with pytest.raises(ConfigError, match="aime.generated_tests: is for cf only"):
        DataFiles(aime=TaskFiles(generated_tests=str(FIXTURES / "generated_tests")))


def test_a_hub_name_as_test_reads_the_split_named_by_test_split(monkeypatch, tmp_path):
    import datasets

    from gspo.config.data import DataFiles, DataGenConfig, TaskFiles
    from pipeline import data

    asked = []

    def hub(name, config=None, split=None, **kw):  # stands in for the hub: no network here
        asked.append((name, split))
        return (
            pq.read_table(FIXTURES / "codeforces_test.parquet").to_pylist()
            if split == "test"
            else []
        )

    monkeypatch.setattr(datasets, "load_dataset", hub)
    cfg = DataGenConfig(
        out_dir=str(tmp_path),
        tasks=["cf"],
        files=DataFiles(cf=TaskFiles(test="open-r1/codeforces", test_split="test")),
    )
    assert [
        r["id"]
        for r in data.loaded("cf", "open-r1/codeforces", 0, cfg.files.cf.load_kwargs("test"))
    ] == ["2000/A", "2000/B", "2000/C"]
    assert asked == [("open-r1/codeforces", "test")]


def test_the_first_problems_of_a_generated_test_set_are_a_random_sample_of_it():
    """An evaluation's `limit` takes the test set's first N problems: they must mix the
    templates as the whole set does (issue 40: the generator writes them round-robin until the
    short templates run out, so the last third were all `linear`, and the first 20 problems
    scored 0.48 where all 60 scored 0.73); the order is deterministic in the data seed."""
    from gspo.config.data import DataGenConfig
    from pipeline.data import generated

    cfg = DataGenConfig(tasks=["cf"])
    cfg.cf.test_n, cfg.cf.max_rating = 60, 1400
    recs = generated("cf", "test", cfg)
    share = lambda rs: sum(r["template"] == "linear" for r in rs) / len(rs)  # noqa: E731
    assert 0.4 < share(recs) < 0.7
    assert abs(share(recs[:20]) - share(recs)) < 0.2
    assert [r["id"] for r in generated("cf", "test", cfg)] == [r["id"] for r in recs]
