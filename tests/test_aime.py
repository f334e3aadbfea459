import json
import threading

import pytest

from evaluators import aime
from gspo.io import DataError


# -- generator ---------------------------------------------------------------------------------

def test_named_tiers_map_to_their_difficulty_and_are_recorded():
    recs = aime.generate(6, split="train", seed=1, difficulty=["easy", "hard"])
    assert [r["tier"] for r in recs] == ["easy", "hard"] * 3
    assert recs[0]["difficulty"] == {"steps": 2, "max_operand": 9}
    assert recs[1]["difficulty"] == {"steps": 6, "max_operand": 99}
    assert all(r["problem"].count("+") + r["problem"].count("-") == 6 for r in recs[1::2])


def test_tier_names_and_difficulty_objects_give_the_same_problems():
    by_name = aime.generate(5, split="test", seed=2, difficulty="medium")
    by_obj = aime.generate(5, split="test", seed=2, difficulty=aime.TIERS["medium"])
    assert by_name == by_obj


def test_an_unknown_tier_is_refused_by_name():
    with pytest.raises(ValueError, match="'extreme'"):
        aime.generate(1, split="train", seed=0, difficulty="extreme")


def test_worked_solutions_end_in_the_boxed_answer_and_score_full_marks():
    for tier in aime.TIERS:
        for r in aime.generate(20, split="train", seed=0, difficulty=tier):
            assert 0 <= r["answer"] <= 999
            assert r["solution"].endswith(f"\\boxed{{{r['answer']}}}")
            assert aime.score_answer(r["solution"], r["answer"]) == 1.0
            assert aime.score_answer(r["solution"], (r["answer"] + 1) % 1000) == 0.0
            assert r["prompt"].startswith(r["problem"])


def test_train_and_test_splits_are_disjoint_for_every_tier():
    for tier in aime.TIERS:
        train = {r["problem"] for r in aime.generate(300, split="train", seed=0, difficulty=tier)}
        test = {r["problem"] for r in aime.generate(60, split="test", seed=0, difficulty=tier)}
        assert len(train) == 300 and len(test) == 60
        assert not train & test


def test_generation_is_deterministic_in_the_seed():
    a = aime.generate(10, split="train", seed=5, difficulty="hard")
    b = aime.generate(10, split="train", seed=5, difficulty="hard")
    c = aime.generate(10, split="train", seed=6, difficulty="hard")
    assert a == b and a != c


# -- extraction and scoring --------------------------------------------------------------------

@pytest.mark.parametrize("completion,answer,expected", [
    ("so the answer is \\boxed{42}", 42, 1.0),
    ("\\boxed{\\frac{6}{3}}", 2, 1.0),             # math-verify: 6/3 = 2
    ("\\boxed{\\dfrac{84}{2}}", 42, 1.0),
    ("\\boxed{012}", 12, 1.0),                     # integer normalisation: leading zero
    ("\\boxed{12}", "012", 1.0),                   # ... on the gold side too
    ("\\boxed{12.0}", 12, 1.0),
    ("\\boxed{ $7$ }", 7, 1.0),
    ("\\boxed{1,000}", 1000, 1.0),
    ("\\boxed{2^{3}}", 8, 1.0),                    # nested braces, then math-verify
    ("\\boxed{\\text{12}}", 12, 1.0),
    ("\\boxed{13}", 12, 0.0),
    ("\\boxed{\\frac{1}{2}}", 0, 0.0),
    ("\\boxed{}", 0, 0.0),
    ("the answer is 12", 12, 0.0),                 # no box: no reward for a bare number
    ("first \\boxed{5} then \\boxed{7}", 7, 1.0),  # the last box counts
    ("first \\boxed{5} then \\boxed{7}", 5, 0.0),
    ("\\boxed{5} and an unterminated \\boxed{7", 5, 1.0),
    ("\\fbox{9}", 9, 1.0),                         # documented fallback
    ("hence \\boxed 42.", 42, 1.0),                # TeX's brace-less form; "42." is an integer
    ("hence \\boxed 41 .", 42, 0.0),
    ("\\boxed{" + "1+" * 150 + "1}", 151, 0.0),    # longer than MAX_ANSWER_CHARS
])
def test_score_of_boxed_answers(completion, answer, expected):
    assert aime.score_answer(completion, answer) == expected


def test_last_boxed_matches_nested_braces():
    assert aime.last_boxed("x \\boxed{\\frac{a}{b}} y") == "\\frac{a}{b}"
    assert aime.last_boxed("\\boxed{{1}{2}}") == "{1}{2}"
    assert aime.last_boxed("no box here") is None


def test_integer_answers_never_reach_math_verify(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("math-verify called on a plain integer")

    monkeypatch.setattr(aime, "_math_verify", boom)
    for i in range(2000):
        assert aime.score_answer(f"steps...\\boxed{{{i % 1000:03d}}}", i % 1000) == 1.0
        assert aime.score_answer(f"\\boxed{{{i}}}", i + 1) == 0.0
    assert aime.score_answer("nothing", 3) == 0.0


def test_math_verify_scoring_works_off_the_main_thread():
    out = {}

    def work():
        try:
            out["ok"] = aime.score_answer("\\boxed{\\frac{12}{4}}", 3)
            out["bad"] = aime.score_answer("\\boxed{\\sqrt{10}}", 3)
        except Exception as e:  # noqa: BLE001
            out["error"] = repr(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert out == {"ok": 1.0, "bad": 0.0}


def test_score_of_a_record_says_whether_it_passed_and_which_answer_it_read():
    rec = aime.generate(1, split="test", seed=0, difficulty="easy")[0]
    assert aime.score(rec, rec["solution"]) == {"passed": True, "answer": str(rec["answer"])}
    wrong = f"so \\boxed{{{(rec['answer'] + 1) % 1000}}}"
    assert aime.score(rec, wrong) == {"passed": False, "answer": str((rec["answer"] + 1) % 1000)}
    assert aime.score(rec, "no box") == {"passed": False, "answer": None}


def test_score_many_scores_in_order_on_the_calling_thread(monkeypatch):
    recs = aime.generate(4, split="test", seed=0, difficulty="easy")
    comps = [r["solution"] if i % 2 else "\\boxed{\\frac{1}{2}}" for i, r in enumerate(recs)]
    threads = set()
    real = aime._math_verify

    def spy(*a):
        threads.add(threading.current_thread())
        return real(*a)

    monkeypatch.setattr(aime, "_math_verify", spy)
    got = aime.score_many(recs, comps, workers=4, stop_at_first_failure=True)
    assert got == [aime.score(r, c) for r, c in zip(recs, comps)]
    assert [g["passed"] for g in got] == [False, True] * 2
    assert threads == {threading.current_thread()}   # math-verify's timeouts need the main thread
    with pytest.raises(ValueError, match="completions"):
        aime.score_many(recs, comps[:-1])


# -- loader ------------------------------------------------------------------------------------

def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loader_reads_the_capitalised_aime24_spelling_from_jsonl(tmp_path):
    f = write_jsonl(tmp_path / "aime24.jsonl", [
        {"ID": "2024-I-1", "Problem": "Find x.", "Solution": "x is \\boxed{33}.", "Answer": 33},
        {"ID": "2024-I-2", "Problem": "Find y.  ", "Solution": "It is 204.", "Answer": "204"},
    ])
    recs = aime.load(f, cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == ["aime-2024-I-1", "aime-2024-I-2"]
    assert recs[0]["task"] == "aime"
    assert recs[0]["problem"] == "Find x."
    assert recs[0]["prompt"] == ("Find x.\nPlease reason step by step, and put your final answer "
                                 "within \\boxed{}.\n")
    assert all(r["prompt"] == aime.format_prompt(r) for r in recs)
    assert recs[1]["answer"] == 204 and isinstance(recs[1]["answer"], int)
    assert recs[0]["solution"] == "x is \\boxed{33}."
    assert recs[1]["solution"].endswith("\\boxed{204}")      # a box is added when the source has none
    assert aime.score_answer(recs[1]["solution"], recs[1]["answer"]) == 1.0


def test_loader_reads_lowercase_fields_with_a_year_from_parquet(tmp_path):
    import datasets

    f = tmp_path / "aime25.parquet"
    datasets.Dataset.from_list([
        {"problem": "P one", "answer": "033", "year": 2025},
        {"problem": "P two", "answer": "7", "year": 2025},
    ]).to_parquet(str(f))
    recs = aime.load(f, cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == ["aime-2025-000", "aime-2025-001"]
    assert [r["answer"] for r in recs] == [33, 7]
    assert [r["year"] for r in recs] == [2025, 2025]
    assert recs[0]["solution"] == "\\boxed{33}"
    assert all(r["prompt"].endswith(aime.INSTRUCTION + "\n") for r in recs)


def test_loader_numbers_records_by_file_when_there_is_no_id(tmp_path):
    f = write_jsonl(tmp_path / "mine.jsonl", [{"question": "Q", "answer": 1}] * 3)
    recs = aime.load(f, limit=2, cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == ["aime-mine-00000", "aime-mine-00001"]


@pytest.mark.parametrize("row,field", [({"Problem": "P"}, "answer"), ({"answer": 3}, "problem"),
                                        ({"problem": "", "answer": 3}, "problem")])
def test_loader_names_the_file_and_the_missing_field_in_one_line(tmp_path, row, field):
    f = write_jsonl(tmp_path / "bad.jsonl", [{"problem": "ok", "answer": 1}, row])
    with pytest.raises(DataError) as e:
        aime.load(f, cache_dir=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg
    assert str(f) in msg and "row 2" in msg and f"'{field}'" in msg


def test_loader_refuses_an_unknown_file_type_and_an_unreadable_source(tmp_path):
    f = tmp_path / "data.txt"
    f.write_text("x")
    with pytest.raises(DataError, match="unsupported file type"):
        aime.load(f)
    with pytest.raises(DataError) as e:
        aime.load(tmp_path / "missing-folder" / "nothing", cache_dir=tmp_path / "cache")
    assert "\n" not in str(e.value) and "missing-folder" in str(e.value) and "not found" in str(e.value)
