"""CodeForces-style problems: generator, open-r1 loader, scoring in the sandbox, rating estimate."""

import json
import random

import pytest

from evaluators import codeforces as cf
from evaluators import sandbox, tasks
from gspo.io import DataError

# Skipped only where bubblewrap is not installed at all; an installed bwrap that fails its probe
# makes these tests fail (SandboxUnavailable names the reason) rather than skip.
needs_bwrap = pytest.mark.skipif(sandbox.bwrap_path() is None,
                                 reason="bubblewrap not installed (apt-get install bubblewrap)")


def _open_r1_record(**extra):
    rec = {"id": "1950/A", "contest_id": 1950, "index": "A", "title": "Sum",
           "description": "Print a+b.", "input_format": "Two integers.", "output_format": "One integer.",
           "rating": 800, "time_limit": 1.0, "memory_limit": 256, "tags": ["math"],
           "examples": [{"input": "1 2\n", "output": "3\n"}],
           "official_tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "-5 5\n", "output": "0\n"},
                              {"input": "1000000000 1000000000\n", "output": "2000000000\n"}]}
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
        for k in ("id", "task", "prompt", "solution", "contest_id", "rating", "time_limit",
                  "memory_limit", "tests"):
            assert k in r, k
        assert r["task"] == "cf" and cf.MIN_RATING <= r["rating"] <= cf.MAX_RATING
        assert len(r["prompt"]) < 120 and r["solution"].startswith("```python\n")
        assert len(r["tests"]) == 5 and all(set(t) == {"input", "output"} for t in r["tests"])
        assert r["time_limit"] > 0 and r["memory_limit"] >= 64
    assert cf.normalize(r) == {**r, "checker": False}


@needs_bwrap
def test_every_template_s_worked_solution_passes_and_a_wrong_constant_fails():
    recs = cf.generate(len(cf.TEMPLATES), split="train", seed=1)
    assert {r["template"] for r in recs} == set(cf.TEMPLATE_NAMES)
    results = cf.score_many(recs, [r["solution"] for r in recs], workers=2)
    assert all(res["passed"] for res in results), [
        (r["template"], res["verdicts"]) for r, res in zip(recs, results) if not res["passed"]]
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


@pytest.mark.parametrize("change,message", [
    ({"rating": None}, "rating, time_limit and memory_limit must be numbers"),
    ({"official_tests": [{"input": "1"}]}, r"tests\[0\] needs string fields"),
    ({"official_tests": []}, "non-empty list"),
], ids=["rating", "test-shape", "no-tests"])
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


def test_unusable_rows_can_be_skipped_instead_of_raising(tmp_path):
    path = tmp_path / "mixed.jsonl"
    rows = [_open_r1_record(rating=None), _open_r1_record(id="2/B", official_tests=[]),
            _open_r1_record(id="3/C", interaction_format="interactive"), _open_r1_record(id="4/D")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["id"] for r in cf.load(path, skip_unusable=True)] == ["4/D"]
    with pytest.raises(DataError, match=rf"{path}:1: "):
        cf.load(path)


def test_records_needing_a_special_checker_are_flagged():
    assert cf.normalize(_open_r1_record(generated_checker="def check(): ..."))["checker"] is True
    assert cf.normalize(_open_r1_record())["checker"] is False


# ---------------------------------------------------------------------------------------------
# Scoring

@pytest.mark.parametrize("got,want,same", [
    ("1 2 3\n", "1\n2\n3", True), ("3", "3.0", True), ("3.0", "3", False), ("0.3333333", "0.333333333", True),
    ("0.34", "0.333333333", False), ("1e9", "1000000000.0", True), ("YES", "yes", False),
    ("1 2", "1 2 3", False), ("nan", "1.5", False),
])
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
    for code in ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "print('Accepted')",
                 "import os\nos.kill(os.getppid(), 9)", "while True: pass"]:
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
    ratings = [cf.estimate_rating([(d, i < k) for i, d in enumerate(problems)])["rating"]
               for k in range(len(problems) + 1)]
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
