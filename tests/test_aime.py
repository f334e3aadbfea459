import json
import pathlib
import threading

import pytest

from evaluators.benchmarks import aime
from evaluators.benchmarks.aime import answers as math_answers
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
            assert math_answers.score_answer(r["solution"], r["answer"]) == 1.0
            assert math_answers.score_answer(r["solution"], (r["answer"] + 1) % 1000) == 0.0
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


def test_an_unboxed_worked_solution_keeps_its_arithmetic_and_scores_nothing():
    r = aime.generate(1, split="train", seed=0, difficulty="hard")[0]
    bare = aime.without_box(r)
    assert bare["solution"] == r["solution"][: r["solution"].rindex("\n")]
    assert str(r["answer"]) in bare["solution"].splitlines()[-1]  # the last line computes it
    assert math_answers.score_answer(bare["solution"], r["answer"]) == 0.0
    assert r["solution"].endswith("}")  # the record itself is left as it was
    with pytest.raises(ValueError, match="no final"):
        aime.without_box(bare)


def test_the_data_stage_unboxes_a_seeded_share_of_the_sft_set_only():
    from gspo.config.data import DataGenConfig
    from gspo.config.fields import from_dict
    from pipeline.data import generated

    cfg = from_dict(
        DataGenConfig,
        {"tasks": ["aime"], "aime": {"sft_n": 400, "rl_n": 50, "test_n": 20, "sft_unboxed": 0.5}},
    )
    plain = from_dict(
        DataGenConfig, {"tasks": ["aime"], "aime": {"sft_n": 400, "rl_n": 50, "test_n": 20}}
    )
    sft, ref = generated("aime", "sft", cfg), generated("aime", "sft", plain)
    bare = [r for r in sft if "\\boxed{" not in r["solution"]]
    assert 150 < len(bare) < 250  # about half, not all, not none
    assert [r["id"] for r in sft] == [r["id"] for r in ref]  # the same problems
    assert all(a == b or a == aime.without_box(b) for a, b in zip(sft, ref))
    assert generated("aime", "sft", cfg) == sft  # seeded
    for part in ("rl", "test"):
        assert generated("aime", part, cfg) == generated("aime", part, plain)
    with pytest.raises(Exception, match="sft_unboxed"):
        from_dict(DataGenConfig, {"aime": {"sft_unboxed": 1.0}})


def test_the_validation_split_is_held_out_of_the_rl_prompts_and_shares_no_problem(tmp_path):
    from gspo.config.data import DataGenConfig
    from gspo.config.fields import from_dict
    from gspo.io import DataError
    from pipeline.data import generate, held_out

    cfg = {
        "out_dir": str(tmp_path),
        "tasks": ["aime"],
        "val_n": 40,
        "aime": {"sft_n": 3000, "rl_n": 200, "test_n": 30},
    }
    paths = generate(from_dict(DataGenConfig, cfg))
    sets = {
        k: [json.loads(x)["problem"] for x in p.read_text().splitlines()] for k, p in paths.items()
    }
    assert len(sets["aime_val"]) == 40 and len(sets["aime_rl"]) == 160  # held out, not added
    val = set(sets["aime_val"])
    assert not val & (set(sets["aime_rl"]) | set(sets["aime_sft"]) | set(sets["aime_test"]))
    rl = [{"problem": f"q{i}"} for i in range(5)]
    keep, v = held_out(rl, [{"problem": "q4"}], 2, "aime")  # q4 is an SFT problem
    assert [r["problem"] for r in v] == ["q2", "q3"] and len(keep) == 3
    with pytest.raises(DataError, match="val_n=5 asks for more validation problems"):
        held_out(rl, [{"problem": "q4"}], 5, "aime")


# -- extraction and scoring --------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion,answer,expected",
    [
        ("so the answer is \\boxed{42}", 42, 1.0),
        ("\\boxed{\\frac{6}{3}}", 2, 1.0),  # math-verify: 6/3 = 2
        ("\\boxed{\\dfrac{84}{2}}", 42, 1.0),
        ("\\boxed{012}", 12, 1.0),  # integer normalisation: leading zero
        ("\\boxed{12}", "012", 1.0),  # ... on the gold side too
        ("\\boxed{12.0}", 12, 1.0),
        ("\\boxed{ $7$ }", 7, 1.0),
        ("\\boxed{1,000}", 1000, 1.0),
        ("\\boxed{2^{3}}", 8, 1.0),  # nested braces, then math-verify
        ("\\boxed{\\text{12}}", 12, 1.0),
        ("\\boxed{13}", 12, 0.0),
        ("\\boxed{\\frac{1}{2}}", 0, 0.0),
        ("\\boxed{}", 0, 0.0),
        ("the answer is 12", 12, 0.0),  # no box: no reward for a bare number
        ("first \\boxed{5} then \\boxed{7}", 7, 1.0),  # the last box counts
        ("first \\boxed{5} then \\boxed{7}", 5, 0.0),
        ("\\boxed{5} and an unterminated \\boxed{7", 5, 1.0),
        ("\\fbox{9}", 9, 1.0),  # documented fallback
        ("hence \\boxed 42.", 42, 1.0),  # TeX's brace-less form; "42." is an integer
        ("hence \\boxed 41 .", 42, 0.0),
        ("\\boxed{" + "1+" * 150 + "1}", 151, 0.0),  # longer than MAX_ANSWER_CHARS
    ],
)
def test_score_of_boxed_answers(completion, answer, expected):
    assert math_answers.score_answer(completion, answer) == expected


def test_last_boxed_matches_nested_braces():
    assert math_answers.last_boxed("x \\boxed{\\frac{a}{b}} y") == "\\frac{a}{b}"
    assert math_answers.last_boxed("\\boxed{{1}{2}}") == "{1}{2}"
    assert math_answers.last_boxed("no box here") is None


def test_integer_answers_never_reach_math_verify(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("math-verify called on a plain integer")

    monkeypatch.setattr(math_answers, "_math_verify", boom)
    for i in range(2000):
        assert math_answers.score_answer(f"steps...\\boxed{{{i % 1000:03d}}}", i % 1000) == 1.0
        assert math_answers.score_answer(f"\\boxed{{{i}}}", i + 1) == 0.0
    assert math_answers.score_answer("nothing", 3) == 0.0


def test_math_verify_scoring_works_off_the_main_thread():
    out = {}

    def work():
        try:
            out["ok"] = math_answers.score_answer("\\boxed{\\frac{12}{4}}", 3)
            out["bad"] = math_answers.score_answer("\\boxed{\\sqrt{10}}", 3)
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
    real = math_answers._math_verify

    def spy(*a):
        threads.add(threading.current_thread())
        return real(*a)

    monkeypatch.setattr(math_answers, "_math_verify", spy)
    got = aime.score_many(recs, comps, workers=4, stop_at_first_failure=True)
    assert got == [aime.score(r, c) for r, c in zip(recs, comps)]
    assert [g["passed"] for g in got] == [False, True] * 2
    assert threads == {threading.current_thread()}  # math-verify's timeouts need the main thread
    with pytest.raises(ValueError, match="completions"):
        aime.score_many(recs, comps[:-1])


# -- loader ------------------------------------------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loader_reads_the_capitalised_aime24_spelling_from_jsonl(tmp_path):
    f = write_jsonl(
        tmp_path / "aime24.jsonl",
        [
            {"ID": "2024-I-1", "Problem": "Find x.", "Solution": "x is \\boxed{33}.", "Answer": 33},
            {"ID": "2024-I-2", "Problem": "Find y.  ", "Solution": "It is 204.", "Answer": "204"},
        ],
    )
    recs = aime.load(f, cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == ["aime-2024-I-1", "aime-2024-I-2"]
    assert recs[0]["task"] == "aime"
    assert recs[0]["problem"] == "Find x."
    assert recs[0]["prompt"] == (
        "Find x.\nPlease reason step by step, and put your final answer within \\boxed{}.\n"
    )
    assert all(r["prompt"] == aime.format_prompt(r) for r in recs)
    assert recs[1]["answer"] == 204 and isinstance(recs[1]["answer"], int)
    assert recs[0]["solution"] == "x is \\boxed{33}."
    assert recs[1]["solution"].endswith("\\boxed{204}")  # a box is added when the source has none
    assert math_answers.score_answer(recs[1]["solution"], recs[1]["answer"]) == 1.0


def test_loader_reads_lowercase_fields_with_a_year_from_parquet(tmp_path):
    import datasets

    f = tmp_path / "aime25.parquet"
    datasets.Dataset.from_list(
        [
            {"problem": "P one", "answer": "033", "year": 2025},
            {"problem": "P two", "answer": "7", "year": 2025},
        ]
    ).to_parquet(str(f))
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


@pytest.mark.parametrize(
    "row,field",
    [
        ({"Problem": "P"}, "answer"),
        ({"answer": 3}, "problem"),
        ({"problem": "", "answer": 3}, "problem"),
    ],
)
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
    assert (
        "\n" not in str(e.value)
        and "missing-folder" in str(e.value)
        and "not found" in str(e.value)
    )


# -- the public math datasets' published layouts (tests/fixtures/aime, made by make_fixtures.py) -

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "aime"


def rewrite_parquet(src, dst, change):
    """`src`'s rows, with `change(rows)` applied, written to `dst` with `src`'s own schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(src)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), dst)
    return dst


def test_aime24_hf_h4_parquet_loads_as_published(tmp_path):
    recs = aime.load(FIXTURES / "aime_2024.parquet", cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == ["aime-2024-60", "aime-2024-61", "aime-2024-62"]
    assert [r["answer"] for r in recs] == [204, 33, 32]
    assert recs[0]["prompt"] == aime.make_prompt("Find $x$ if $x + 1 = 205$.")
    assert recs[0]["solution"] == "So $x = \\boxed{204}$."
    assert recs[1]["solution"] == "It is 33.\n\\boxed{33}"
    assert all(r["task"] == "aime" and r["year"] == "2024" for r in recs)


def test_aime25_opencompass_jsonl_loads_question_and_answer(tmp_path):
    recs = aime.load(FIXTURES / "aime2025-I.jsonl", cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == [f"aime-aime2025-I-{i:05d}" for i in range(3)]
    assert [r["answer"] for r in recs] == [70, 56, 6]
    assert recs[0]["prompt"] == aime.make_prompt("Find the sum of 40 and 30.")


def test_aime25_by_hub_name_reads_and_concatenates_both_configs(monkeypatch):
    import datasets

    calls = []

    def fake(name, config, split, cache_dir=None):
        calls.append((name, config, split))
        return [{"question": f"{config} q{k}", "answer": str(k)} for k in (1, 2)]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    recs = aime.load("opencompass/AIME2025")
    assert calls == [
        ("opencompass/AIME2025", "AIME2025-I", "test"),
        ("opencompass/AIME2025", "AIME2025-II", "test"),
    ]
    assert [r["id"] for r in recs] == [
        "aime-AIME2025-I-01",
        "aime-AIME2025-I-02",
        "aime-AIME2025-II-01",
        "aime-AIME2025-II-02",
    ]
    assert recs[2]["problem"] == "AIME2025-II q1" and recs[3]["answer"] == 2


def test_a_hub_dataset_out_of_reach_is_one_line_saying_what_to_download(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError(
            "Couldn't reach 'opencompass/AIME2025' on the Hub (LocalEntryNotFoundError)\nmore"
        )

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as e:
        aime.load("opencompass/AIME2025")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(
        "opencompass/AIME2025 (configs AIME2025-I, AIME2025-II): not in the local"
    )
    assert "huggingface-cli download opencompass/AIME2025 --repo-type dataset" in msg
    assert "data.files" in msg


def test_dapo_math_parquet_gives_the_bare_problem_and_the_ground_truth(tmp_path, capsys):
    recs = aime.load(FIXTURES / "dapo_math_17k.parquet", cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == [
        "aime-dapo-a1b2c3d4-0001",
        "aime-dapo-a1b2c3d4-0002",
        "aime-dapo-a1b2c3d4-0003",
    ]
    assert [r["answer"] for r in recs] == [34, 11, 4]
    assert recs[0]["problem"] == "What is $6 + 28$?"  # DAPO's Answer: wrapper is stripped
    assert recs[0]["prompt"] == aime.make_prompt("What is $6 + 28$?")
    assert recs[0]["solution"] == "\\boxed{34}"
    skips = [ln for ln in capsys.readouterr().err.splitlines() if "skipped" in ln]
    assert skips == [
        f"{FIXTURES / 'dapo_math_17k.parquet'}: skipped 1 rows repeating an earlier "
        "problem (same extra_info.index)"
    ]


def test_dapo_user_content_without_the_wrapper_is_kept_whole():
    from evaluators.benchmarks.aime import sources as math_sources

    row = {
        "prompt": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "  What is 1+1?  "},
        ],
        "reward_model": {"ground_truth": "2", "style": "rule"},
        "extra_info": {"index": "7"},
    }
    assert math_sources.dapo_row(row, "f: row 1") == {
        "problem": "What is 1+1?",
        "answer": "2",
        "id": "dapo-7",
    }


def test_integer_only_skips_and_counts_rows_whose_answer_is_not_an_integer(tmp_path, capsys):
    f = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"problem": "a", "answer": "12"},
            {"problem": "b", "answer": "\\frac{1}{2}"},
            {"problem": "c", "answer": "x=3"},
            {"problem": "d", "answer": "5"},
        ],
    )
    recs = aime.load(f, integer_only=True, cache_dir=tmp_path / "cache")
    assert [r["answer"] for r in recs] == [12, 5]
    assert "skipped 2 rows without an integer answer" in capsys.readouterr().err
    assert len(aime.load(f, cache_dir=tmp_path / "cache")) == 4  # kept by default


def test_openr1_takes_the_first_verified_generation_and_skips_rows_with_none(tmp_path, capsys):
    recs = aime.load(FIXTURES / "openr1_math_220k.parquet", cache_dir=tmp_path / "cache")
    assert [r["id"] for r in recs] == [
        "aime-openr1-0f1e-01",
        "aime-openr1-0f1e-02",
        "aime-openr1-0f1e-04",
    ]
    assert recs[0]["solution"] == "<think>10-3=7</think>\n$\\boxed{7}$."  # the 2nd, verified one
    assert recs[0]["answer"] == 7 and recs[0]["prompt"] == aime.make_prompt("Solve $x + 3 = 10$.")
    assert recs[2]["answer"] == "\\frac{1}{2}"
    assert all(math_answers.score_answer(r["solution"], r["answer"]) == 1.0 for r in recs)
    assert (
        "skipped 1 rows with no generation that math-verify found correct"
        in capsys.readouterr().err
    )
    got = aime.load(
        FIXTURES / "openr1_math_220k.parquet",
        integer_only=True,
        limit=2,
        cache_dir=tmp_path / "cache",
    )
    assert [r["answer"] for r in got] == [7, 144]


def _drop_truth(rows):
    rows[1]["reward_model"]["ground_truth"] = None


def _drop_user(rows):
    rows[1]["prompt"] = []


def _drop_generations(rows):
    rows[1]["generations"] = None


def _drop_problem(rows):
    rows[1]["problem"] = None


@pytest.mark.parametrize(
    "fixture,change,field",
    [
        ("dapo_math_17k.parquet", _drop_truth, "reward_model.ground_truth"),
        ("dapo_math_17k.parquet", _drop_user, "prompt[role=user].content"),
        ("openr1_math_220k.parquet", _drop_generations, "generations"),
        ("openr1_math_220k.parquet", _drop_problem, "problem"),
        ("aime_2024.parquet", _drop_problem, "problem"),
    ],
)
def test_a_published_layout_row_missing_a_field_is_one_line_naming_file_row_and_field(
    tmp_path, fixture, change, field
):
    f = rewrite_parquet(FIXTURES / fixture, tmp_path / fixture, change)
    with pytest.raises(DataError) as e:
        aime.load(f, cache_dir=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{f}: row 2: ") and f"'{field}'" in msg


def test_a_corrupt_parquet_is_one_line_naming_the_file(tmp_path):
    f = tmp_path / "dapo.parquet"
    f.write_bytes((FIXTURES / "dapo_math_17k.parquet").read_bytes()[:300])
    with pytest.raises(DataError) as e:
        aime.load(f, cache_dir=tmp_path / "cache")
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{f}: cannot load AIME data")


# -- the "Answer: X" line (DAPO-Math's convention), a fallback when nothing is boxed -------------


@pytest.mark.parametrize(
    "completion,answer,expected",
    [
        ("6 + 28 = 34.\nAnswer: 34", 34, 1.0),
        ("Some work.\n\nAnswer: $34$", 34, 1.0),
        ("**Answer:** 34.", 34, 1.0),
        ("work\nFinal Answer: 034\n", 34, 1.0),
        ("answer: \\frac{1}{2}", "\\frac{1}{2}", 1.0),
        ("Answer: 1/2", "\\frac{1}{2}", 1.0),
        ("Answer: 33\nhmm, no.\nAnswer: 35", 34, 0.0),  # the last Answer line counts
        ("Answer: 33\nhmm, no.\nAnswer: 34", 34, 1.0),
        ("Answer: 33\nso \\boxed{34}", 34, 1.0),  # a box wins over the Answer line
        ("\\boxed{33}\nAnswer: 34", 34, 0.0),
        ("The answer: 34", 34, 0.0),  # not at the start of a line
        ("Answer:\n34", 34, 0.0),  # nothing on the Answer line
        ("I think it is 34", 34, 0.0),
    ],
)
def test_score_reads_the_answer_line_when_there_is_no_box(completion, answer, expected):
    assert math_answers.score_answer(completion, answer) == expected
    assert aime.score({"answer": answer}, completion)["passed"] is (expected == 1.0)


def test_the_answer_line_text_drops_dollars_and_a_full_stop():
    assert math_answers.extract_answer("x\nAnswer: $\\frac{3}{4}$.") == "\\frac{3}{4}"
    assert math_answers.answer_line("no answer here") is None


def test_sft_takes_worked_solutions_and_refuses_a_set_of_bare_answers(tmp_path):
    traces = aime.load_sft(FIXTURES / "openr1_math_220k.parquet", cache_dir=tmp_path / "cache")
    assert traces == aime.load(FIXTURES / "openr1_math_220k.parquet", cache_dir=tmp_path / "cache")
    assert all(len(r["solution"]) > len(f"\\boxed{{{r['answer']}}}") for r in traces)
    with pytest.raises(DataError, match=r"aime2025-I.jsonl: no worked solutions .*OpenR1-Math"):
        aime.load_sft(FIXTURES / "aime2025-I.jsonl", cache_dir=tmp_path / "cache")


def test_a_glob_pattern_reads_one_splits_shards_and_an_empty_one_is_one_line(tmp_path):
    got = aime.load(str(FIXTURES / "aime_2*.parquet"), cache_dir=tmp_path / "cache")
    want = aime.load(FIXTURES / "aime_2024.parquet", cache_dir=tmp_path / "cache")
    assert [dict(r, source="") for r in got] == [dict(r, source="") for r in want]
    with pytest.raises(DataError, match=r"test-\*.parquet: no files match"):
        aime.load(str(FIXTURES / "test-*.parquet"), cache_dir=tmp_path / "cache")
