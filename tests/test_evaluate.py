import json
import os
import subprocess
import sys

import pytest

from evaluators import evaluation as ev
from evaluators import tasks
from evaluators.benchmarks import aime
from evaluators.benchmarks.aime import answers as math_answers
from gspo.config.fields import ConfigError
from gspo.infra import provenance
from gspo.io import write_jsonl
from gspo.model.tokens import Codec
from toys import memorise, nested_draws

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def problems():
    return aime.generate(3, split="test", seed=0, difficulty="easy")


@pytest.fixture(scope="module")
def memorised(tiny_model_dir, tmp_path_factory, problems):
    """Answers problem 0 right, problem 1 wrong (answer + 1), problem 2 without a box."""
    p0, p1, p2 = problems
    pairs = [
        (p0["prompt"], f"\\boxed{{{p0['answer']}}}"),
        (p1["prompt"], f"\\boxed{{{(p1['answer'] + 1) % 1000}}}"),
        (p2["prompt"], "no idea"),
    ]
    return memorise(tiny_model_dir, tmp_path_factory.mktemp("memorised"), pairs)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, problems):
    d = tmp_path_factory.mktemp("data")
    write_jsonl(problems, d / "aime_test.jsonl")
    return d


def run_cli(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, "-m", "pipeline.evaluate", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_evaluates_a_checkpoint_end_to_end_and_writes_results_and_summary(
    memorised, data_dir, problems, tmp_path
):
    out = tmp_path / "eval"
    r = run_cli(
        "--model",
        memorised,
        "--benchmarks",
        "aime",
        "--samples",
        3,
        "--data-dir",
        data_dir,
        "--out",
        out,
        "--temperature",
        0,
        "--max-new-tokens",
        16,
        "--seed",
        1,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["aime"]  # one folder per benchmark
    rows = [json.loads(line) for line in (out / "aime" / "results.jsonl").read_text().splitlines()]
    assert [row["id"] for row in rows] == [p["id"] for p in problems]
    for row, p in zip(rows, problems):
        assert row["task"] == "aime" and row["n"] == 3 and len(row["completions"]) == 3
        assert row["scores"] == [
            math_answers.score_answer(c, p["answer"]) for c in row["completions"]
        ]
    right, wrong, unboxed = rows
    assert right["completions"] == ["\\boxed{%d}" % problems[0]["answer"]] * 3
    assert (right["c"], right["pass@1"], right["pass@k"]) == (3, 1.0, 1.0)
    assert wrong["completions"] == ["\\boxed{%d}" % ((problems[1]["answer"] + 1) % 1000)] * 3
    assert (wrong["c"], wrong["pass@k"]) == (0, 0.0)
    assert unboxed["completions"] == ["no idea"] * 3 and unboxed["c"] == 0
    summary = json.loads((out / "aime" / "summary.json").read_text())
    s = summary["benchmarks"]["aime"]
    assert s["n_problems"] == 3 and s["n_samples"] == 9 and s["k"] == 3
    assert s["avg@n"] == pytest.approx(1 / 3) and s["pass@k"] == pytest.approx(1 / 3)
    assert s["avg@n_ci"][0] <= 1 / 3 <= s["avg@n_ci"][1]
    # maj@k: the right one's majority answer is right, the wrong one's wrong, no answer: 0
    assert [row["maj@k"] for row in rows] == [1.0, 0.0, 0.0]
    assert right["answers"] == [str(problems[0]["answer"])] * 3 and unboxed["answers"] == [None] * 3
    assert s["maj@k"] == pytest.approx(1 / 3) and f"maj@3={1 / 3:.4f}" in r.stdout
    # the kept completions come with what the side-by-side view shows beside them
    assert right["prompt"] == problems[0]["prompt"] and right["answer"] == str(
        problems[0]["answer"]
    )
    assert "aime: 3/3 problems (100%)" in r.stderr  # the progress line
    assert summary["settings"]["samples"] == 3 and summary["settings"]["seed"] == 1
    assert summary["config"]["benchmark"] == "aime" and summary["config"]["max_new_tokens"] == 16
    assert summary["provenance"] == provenance.record() and summary["provenance"]["git_commit"]
    assert not [p for p in (out / "aime").iterdir() if p.name.startswith(".")]  # no temp files


def test_evaluate_records_scores_with_the_benchmark_and_is_deterministic_in_the_seed(
    memorised, problems
):
    from gspo.model.models import load_model
    from gspo.rollout import make_engine

    model, tok = load_model(memorised)
    engine = make_engine("torch", memorised, model=model)
    # hot enough that the memorised model's samples vary, so the seed shows
    kw = dict(samples=4, temperature=2.0, top_p=1.0, max_new_tokens=12, batch_prompts=2)
    a = ev.evaluate_records(engine, Codec(tok), problems, seed=0, **kw)
    b = ev.evaluate_records(engine, Codec(tok), problems, seed=0, **kw)
    c = ev.evaluate_records(engine, Codec(tok), problems, seed=7, **kw)
    assert a == b
    assert [r["completions"] for r in a] != [r["completions"] for r in c]
    for res, rec in zip(a, problems):
        assert res["scores"] == [
            math_answers.score_answer(t, rec["answer"]) for t in res["completions"]
        ]
        assert res["c"] == sum(res["scores"]) and res["n"] == 4
        assert set(res) >= {"id", "task", "n", "c", "pass@1", "pass@k", "avg@n", "completions"}
        assert all(n <= 12 for n in res["n_tokens"])


def test_progress_says_done_of_total_the_sampling_rate_and_the_time_left():
    import io

    ticks = iter([0.0, 10.0, 20.0, 30.0])
    p = ev.Progress("aime", 100, stream=io.StringIO(), clock=lambda: next(ticks))
    assert p.advance(25, sampled=False) == "aime: 25/100 problems (25%), 0.00 problems/s, ETA -"
    # a resumed chunk counts as done, not in the rate: 25 sampled in 20 s, 50 left at 1.25/s
    assert p.advance(25) == "aime: 50/100 problems (50%), 1.25 problems/s, ETA 0m40s"
    assert p.advance(50).startswith("aime: 100/100 problems (100%), 2.50 problems/s, ETA 0m00s")
    assert p.stream.getvalue().count("\n") == 3


def test_the_first_samples_of_a_larger_evaluation_are_the_smaller_evaluation(tiny_model_dir):
    """Nested draws (issue 40): a problem's j-th sample depends on (seed, id, j) alone, so the
    8 x 2 evaluation is exactly the first 2 samples of the 8 problems in a 24 x 8 one, whatever
    the batches and the order; and the draws differ between samples and problems."""
    from gspo.model.models import load_model
    from gspo.rollout import make_engine

    model, tok = load_model(tiny_model_dir)
    engine = make_engine("torch", tiny_model_dir, model=model)
    records = aime.generate(24, split="test", seed=3, difficulty="easy")
    small, first_two = nested_draws(engine, tok, records)
    assert small == first_two
    assert any(a != b for a, b in small)  # two samples, two draws
    assert len({tuple(c) for c in small}) == len(small)  # no problem repeats another's draws


def test_code_benchmarks_are_scored_by_their_own_batched_scorer(problems):
    lcb = pytest.importorskip("evaluators.benchmarks.livecodebench")
    rec = lcb.generate(1, split="test", seed=0)[0]
    scores = ev.score_completions(
        [rec, problems[0]],
        [[rec["solution"], "print(1)"], ["\\boxed{%d}" % problems[0]["answer"]]],
        workers=2,
    )
    assert scores == [[1.0, 0.0], [1.0]]


def test_summary_adds_a_codeforces_rating_from_rated_problems():
    cf = pytest.importorskip("evaluators.benchmarks.codeforces")
    results = [
        {"task": "cf", "id": f"cf-{i}", "n": 2, "c": c, "rating": r, "scores": s}
        for i, (r, c, s) in enumerate([(800, 2, [1, 1]), (1600, 1, [1, 0]), (2400, 0, [0, 0])])
    ]
    s = ev.summarize(results)["cf"]
    want = cf.estimate_rating(
        [(800, True), (800, True), (1600, True), (1600, False), (2400, False), (2400, False)]
    )
    assert s["rating"] == want
    assert s["n_problems"] == 3 and s["n_samples"] == 6


def test_an_unknown_benchmark_is_a_one_line_error_listing_the_valid_ones(tmp_path):
    r = run_cli("--model", tmp_path, "--benchmarks", "aime,gsm8k", "--out", tmp_path / "o")
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "'gsm8k'" in lines[0] and "aime, lcb, cf" in lines[0]
    assert not (tmp_path / "o").exists()


def test_a_malformed_data_line_is_a_one_line_error_naming_file_and_line(tmp_path, problems):
    bad = tmp_path / "aime_test.jsonl"
    bad.write_text(json.dumps(problems[0]) + "\n{not json\n")
    r = run_cli(
        "--model", tmp_path, "--benchmarks", "aime", "--data-dir", tmp_path, "--out", tmp_path / "o"
    )
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"{bad}:2" in lines[0] and "malformed JSON" in lines[0]


def test_a_record_without_its_answer_or_a_missing_file_is_a_one_line_error(tmp_path, problems):
    rec = dict(problems[0])
    del rec["answer"]
    (tmp_path / "aime_test.jsonl").write_text(json.dumps(rec) + "\n")
    r = run_cli(
        "--model", tmp_path, "--benchmarks", "aime", "--data-dir", tmp_path, "--out", tmp_path / "o"
    )
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "aime_test.jsonl:1" in r.stderr and "'answer'" in r.stderr
    r = run_cli(
        "--model", tmp_path, "--benchmarks", "lcb", "--data-dir", tmp_path, "--out", tmp_path / "o"
    )
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "lcb_test.jsonl" in r.stderr and "not found" in r.stderr


def test_parse_benchmarks_keeps_order_and_drops_repeats():
    assert tasks.parse("cf, aime,cf") == ["cf", "aime"]
    with pytest.raises(ValueError, match="'x'"):
        tasks.parse("aime,x")


def test_the_eval_engine_settings_reach_the_engine(memorised):
    import torch

    engine, _ = ev.make_engine(ev.EvalConfig(dtype="bfloat16"), memorised)
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    engine.close()
    with pytest.raises(
        ConfigError,
        match="tensor_parallel_size: and gpu_memory_utilization, max_model_len are vllm settings",
    ):
        ev.EvalConfig(tensor_parallel_size=2)
    with pytest.raises(ConfigError, match="dtype: must be float32, bfloat16 or float16"):
        ev.EvalConfig(dtype="int8")


@pytest.mark.slow
def test_two_ranks_evaluate_as_one_process(memorised, data_dir, tmp_path):
    """Data-parallel evaluation under torchrun: each rank samples every other chunk of
    batch_prompts problems (with the chunk's own seed) and rank 0 writes what one process would."""
    import pathlib

    out = {}
    for n in (1, 2):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={n}",
                "-m",
                "pipeline.evaluate",
                "--model",
                str(memorised),
                "--out",
                str(tmp_path / str(n)),
                "--benchmarks",
                "aime",
                "--data-dir",
                str(data_dir),
                "--samples",
                "4",
                "--batch-prompts",
                "1",
                "--max-new-tokens",
                "12",
            ],
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        out[n] = pathlib.Path(tmp_path / str(n) / "aime")
    assert (out[2] / "results.jsonl").read_text() == (out[1] / "results.jsonl").read_text()
    one, two = (json.loads((out[n] / "summary.json").read_text()) for n in (1, 2))
    assert one["benchmarks"] == two["benchmarks"]
    assert two["benchmarks"]["aime"]["n_problems"] == 3  # three chunks over two ranks


# -- resuming a partial evaluation (evaluators.partial) ------------------------------------------


class Counting:
    """The real engine, recording the seed of each generate call (one call per chunk) and
    raising at call `fail_at` (1-based), as a job killed partway would stop."""

    def __init__(self, engine, fail_at: int = 0):
        self.engine, self.fail_at, self.seeds = engine, fail_at, []

    def generate(self, prompts, **kw):
        if len(self.seeds) + 1 == self.fail_at:
            raise RuntimeError("killed")
        self.seeds.append(kw["seed"])
        return self.engine.generate(prompts, **kw)

    def __getattr__(self, name):
        return getattr(self.engine, name)


MAKE_ENGINE = ev.make_engine


def sampled(engine: Counting, problems) -> list[int]:
    """The problem each generate call sampled (one problem a chunk), read off its seeds: a
    problem's samples are seeded by its id (gspo.rollout.base.problem_seed), not its chunk."""
    from gspo.rollout.base import problem_seed

    index = {problem_seed(5, p["id"]): k for k, p in enumerate(problems)}
    return [index[call[0]] for call in engine.seeds]


def _cfg(data_dir, **kw):
    # hot enough that the samples vary with the seed; one problem a chunk: three chunks
    return ev.EvalConfig(
        **{
            **dict(
                benchmark="aime",
                data=str(data_dir / "aime_test.jsonl"),
                samples=4,
                temperature=2.0,
                max_new_tokens=12,
                seed=5,
                batch_prompts=1,
                bootstrap_iters=50,
                keep_completions=True,
            ),
            **kw,
        }
    )


def _evaluate(model, cfg, out, monkeypatch, fail_at=0):
    """ev.evaluate on the real torch engine, wrapped in Counting; (engines made, result)."""
    made = []

    def make(cfg, model, world=None):
        engine, tok = MAKE_ENGINE(cfg, model, world or ev.dist.World())
        made.append(Counting(engine, fail_at))
        return made[-1], tok

    monkeypatch.setattr(ev, "make_engine", make)
    try:
        return made, ev.evaluate(model, [cfg], out)
    except RuntimeError as e:
        assert str(e) == "killed"
        return made, None


def _files(out):
    d = out / "aime"
    return (d / "results.jsonl").read_text(), json.loads((d / "summary.json").read_text())


def test_a_killed_evaluation_resumes_from_its_chunks_and_gives_the_uninterrupted_results(
    memorised, problems, data_dir, tmp_path, monkeypatch, capsys
):
    cfg = _cfg(data_dir)
    made, _ = _evaluate(memorised, cfg, tmp_path / "fresh", monkeypatch)
    assert sampled(made[0], problems) == [0, 1, 2]
    fresh_results, fresh_summary = _files(tmp_path / "fresh")
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == ["aime"]  # store removed

    out = tmp_path / "resumed"
    made, result = _evaluate(memorised, cfg, out, monkeypatch, fail_at=3)  # dies in chunk 2
    assert result is None and sampled(made[0], problems) == [0, 1]
    store = out / "aime.partial"
    assert sorted(p.name for p in store.iterdir()) == [
        "chunk_00000.jsonl",
        "chunk_00001.jsonl",
        "key.json",
    ]
    assert not (out / "aime" / "summary.json").exists()
    (store / "chunk_00000.jsonl").unlink()  # as if chunk 0 had never finished
    capsys.readouterr()
    made, _ = _evaluate(memorised, cfg, out, monkeypatch)
    assert sampled(made[0], problems) == [0, 2]  # chunk 1 read back, not resampled
    assert "resuming a partial evaluation: 1 chunk(s) done" in capsys.readouterr().out
    results, summary = _files(out)
    assert results == fresh_results
    assert {k: v for k, v in summary.items() if k != "seconds"} == {
        k: v for k, v in fresh_summary.items() if k != "seconds"
    }
    assert sorted(p.name for p in out.iterdir()) == ["aime"]


def test_a_partial_evaluation_made_with_other_settings_is_discarded(
    memorised, problems, data_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    made, _ = _evaluate(memorised, _cfg(data_dir), out, monkeypatch, fail_at=3)
    assert sampled(made[0], problems) == [0, 1]
    assert (out / "aime.partial" / "chunk_00001.jsonl").is_file()
    capsys.readouterr()
    hotter = _cfg(data_dir, temperature=1.5)
    made, _ = _evaluate(memorised, hotter, out, monkeypatch)
    assert sampled(made[0], problems) == [0, 1, 2]  # every chunk sampled again
    lines = [line for line in capsys.readouterr().out.splitlines() if "aime.partial" in line]
    assert len(lines) == 1 and "other settings" in lines[0] and "discarded" in lines[0]
    _evaluate(memorised, hotter, tmp_path / "fresh", monkeypatch)
    assert _files(out)[0] == _files(tmp_path / "fresh")[0]


def test_the_store_key_changes_with_whatever_changes_a_result(
    memorised, tiny_model_dir, data_dir, problems, tmp_path
):
    from evaluators.partial import store_key

    cfg = _cfg(data_dir)
    key = store_key(cfg, memorised, problems)
    assert store_key(cfg, memorised, problems) == key
    # settings that change no per-record result keep the store
    for same in (dict(workers=3), dict(bootstrap_iters=7), dict(protocol="x")):
        assert store_key(_cfg(data_dir, **same), memorised, problems) == key, same
    for other in (
        dict(samples=3),
        dict(temperature=1.0),
        dict(top_p=0.9),
        dict(max_new_tokens=11),
        dict(seed=6),
        dict(batch_prompts=2),
        dict(limit=2),
        dict(dtype="bfloat16"),
        dict(keep_completions=False),
        dict(prompt=ev.PromptConfig(format="chat")),
    ):
        assert store_key(_cfg(data_dir, **other), memorised, problems) != key, other
    assert store_key(cfg, tiny_model_dir, problems) != key  # another model
    assert store_key(cfg, memorised, problems[:2]) != key  # other records
    edited = tmp_path / "aime_test.jsonl"  # the same ids, new data
    write_jsonl([{**problems[0], "answer": problems[0]["answer"] + 1}, *problems[1:]], edited)
    assert store_key(_cfg(data_dir, data=str(edited)), memorised, problems) != key


@pytest.mark.slow
def test_two_ranks_resume_a_partial_evaluation_of_one_process(
    memorised, data_dir, tmp_path, monkeypatch
):
    """Chunks stored by one process are read back by whichever rank owns them under torchrun."""
    from pipeline import evaluate as cli

    args = [
        "--model",
        str(memorised),
        "--benchmarks",
        "aime",
        "--data-dir",
        str(data_dir),
        "--samples",
        "4",
        "--batch-prompts",
        "1",
        "--max-new-tokens",
        "12",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    fresh = subprocess.run(
        [sys.executable, "-m", "pipeline.evaluate", *args, "--out", str(tmp_path / "fresh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    out = tmp_path / "resumed"
    configs = cli.configs_of(cli.parser().parse_args([*args, "--out", str(out)]))
    made, _ = _evaluate(memorised, configs[0], out, monkeypatch, fail_at=3)
    assert len(made[0].seeds) == 2 and len(list((out / "aime.partial").glob("chunk_*"))) == 2
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "pipeline.evaluate",
            *args,
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming a partial evaluation: 2 chunk(s) done" in r.stdout
    assert (out / "aime" / "results.jsonl").read_text() == (
        tmp_path / "fresh" / "aime" / "results.jsonl"
    ).read_text()
    assert sorted(p.name for p in out.iterdir()) == ["aime"]
