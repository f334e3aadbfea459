"""This project's records and reward as verl reads and calls them (evaluators.for_verl, issue 24):
the parquet through verl's own RLHFDataset with the tiny BPE model's chat template, and
compute_score through verl's own NaiveRewardManager, both run by verl 0.9.1 as installed, in a
process of its own (tests/verl_reference.py: its import pulls in ray)."""

from __future__ import annotations

import json

import pytest
import torch

from evaluators import for_verl, tasks
from evaluators.benchmarks import aime
from gspo.io import DataError
from test_conformance_verl import ROOT, run_verl


def records() -> list[dict]:
    """Two problems of each benchmark, with the worked solutions their own scoring passes."""
    return (
        aime.generate(2, split="train", seed=0, difficulty=aime.Difficulty(1, 3))
        + tasks.module("lcb").generate(2, split="train", seed=0)
        + tasks.module("cf").generate(2, split="train", seed=0)
    )


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """The tiny-bpe preset (a chat template, as real checkpoints have), its BPE trained on the
    records' texts."""
    from gspo.model.models import build_tiny

    corpus = [r["prompt"] + r["solution"] for r in records()]
    return build_tiny("tiny-bpe", tmp_path_factory.mktemp("bpe") / "m", seed=0, corpus=corpus)


def _batch(tok, model_dir, recs: list[dict], completions: list[str]) -> dict:
    """Tokenized prompts (left-padded) and responses (right-padded) as verl's rollout gives
    them to its reward manager."""
    prompts = [tok(r["prompt"], add_special_tokens=False).input_ids for r in recs]
    responses = [tok(c, add_special_tokens=False).input_ids for c in completions]
    P, R = max(map(len, prompts)), max(map(len, responses))
    ids_p = torch.zeros(len(recs), P, dtype=torch.long)
    ids_r = torch.zeros(len(recs), R, dtype=torch.long)
    mask = torch.zeros(len(recs), P + R, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, responses)):
        ids_p[i, P - len(p) :], mask[i, P - len(p) : P] = torch.tensor(p), 1
        ids_r[i, : len(c)], mask[i, P : P + len(c)] = torch.tensor(c), 1
    rows = [for_verl.row(r, i) for i, r in enumerate(recs)]
    return {
        "kind": "reward",
        "tokenizer": str(model_dir),
        "prompts": ids_p,
        "responses": ids_r,
        "attention_mask": mask,
        "data_source": [x["data_source"] for x in rows],
        "reward_model": [x["reward_model"] for x in rows],
        "extra_info": [x["extra_info"] for x in rows],
    }


@pytest.fixture(scope="module")
def verl(tmp_path_factory, bpe_dir):
    """verl's RLHFDataset over our parquet and its NaiveRewardManager over our compute_score."""
    from transformers import AutoTokenizer

    tmp = tmp_path_factory.mktemp("for_verl")
    recs = records()
    path = for_verl.write_parquet(recs, tmp / "rl.parquet")
    tok = AutoTokenizer.from_pretrained(bpe_dir)
    # each record's worked solution (passes) and a wrong answer (fails)
    completions = [r["solution"] for r in recs] + [
        "\\boxed{-1}" if r["task"] == "aime" else "```python\nprint(0)\n```" for r in recs
    ]
    reward_case = {
        **_batch(tok, bpe_dir, recs + recs, completions),
        "score_path": str(ROOT / "evaluators" / "for_verl.py"),
    }
    out = run_verl(
        {
            "dataset": {
                "kind": "dataset",
                "path": str(path),
                "tokenizer": str(bpe_dir),
                "max_prompt_length": 4096,
                "cache_dir": str(tmp / "cache"),
            },
            "reward": reward_case,
        },
        tmp,
    )
    return recs, completions, tok, out


@pytest.mark.slow
def test_verls_dataset_reads_the_records_with_their_benchmark_ground_truth_and_id(verl):
    recs, _, _, out = verl
    rows = out["dataset"]["rows"]
    assert len(rows) == len(recs)
    for rec, got in zip(recs, rows):
        assert got["data_source"] == rec["task"]
        assert json.loads(got["reward_model"]["ground_truth"]) == rec
        assert got["extra_info"]["id"] == rec["id"]
        assert list(got["raw_prompt"]) == [{"role": "user", "content": rec["prompt"]}]


@pytest.mark.slow
def test_verls_reward_manager_scores_with_the_benchmarks_own_scoring(verl):
    recs, completions, tok, out = verl
    got = out["reward"]["rewards"].tolist()
    # what verl's manager hands compute_score: the response decoded without special tokens
    want = [
        tasks.reward(
            r, tok.decode(tok(c, add_special_tokens=False).input_ids, skip_special_tokens=True)
        )
        for r, c in zip(recs + recs, completions)
    ]
    assert got == want
    assert got == [1.0] * len(recs) + [0.0] * len(recs)


def test_a_record_without_its_task_is_a_one_line_error_and_nothing_is_written(tmp_path):
    recs = records()
    del recs[3]["task"]
    with pytest.raises(DataError, match="^record 3: no 'task'"):
        for_verl.write_parquet(recs, tmp_path / "rl.parquet")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(autouse=True)
def scoring_workers_stopped():
    """compute_score's scoring workers are this process's children: stopped after each test,
    so no later test (tests/test_sandbox.py counts the harness's processes) sees them."""
    yield
    for_verl.close()
    assert for_verl._pool is None


def test_compute_score_refuses_a_record_of_another_benchmark():
    rec = records()[0]
    with pytest.raises(DataError, match="is not the record's task"):
        for_verl.compute_score("lcb", rec["solution"], json.dumps(rec))
    assert for_verl.compute_score("aime", rec["solution"], json.dumps(rec)) == 1.0


def test_an_answer_that_stalls_scoring_times_out_alone_and_scores_zero(monkeypatch):
    """Issue 42 row 9: verl calls compute_score from threads. `9^{9^{9^{9}}}` holds the GIL in
    one big-integer power for good (in a thread it stalls the whole process: tried); here it
    scores 0 after the limit while another thread's answer is scored meanwhile, and the next
    answer gets a fresh worker."""
    import threading
    import time

    monkeypatch.setenv("GSPO_SCORE_TIMEOUT_S", "3")
    rec = json.dumps({"id": "p", "task": "aime", "prompt": "?", "answer": 2})
    got, t0 = {}, time.monotonic()

    def score(name, answer, delay=0.0):
        time.sleep(delay)
        got[name] = (
            for_verl.compute_score("aime", f"\\boxed{{{answer}}}", rec),
            time.monotonic() - t0,
        )

    # two workers started (their start is outside a call's limit), \frac{6}{3}: math-verify's
    warm = [threading.Thread(target=score, args=(n, "\\frac{6}{3}")) for n in ("w1", "w2")]
    for t in warm:
        t.start()
    for t in warm:
        t.join(300)
    assert (got["w1"][0], got["w2"][0]) == (1.0, 1.0)
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=score, args=("stall", "9^{9^{9^{9}}}")),
        threading.Thread(target=score, args=("fine", "2", 0.3)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got["stall"][0] == 0.0 and 3.0 <= got["stall"][1] < 10.0
    assert got["fine"][0] == 1.0 and got["fine"][1] < got["stall"][1]
    assert for_verl.compute_score("aime", "\\boxed{\\frac{6}{3}}", rec) == 1.0
    workers = [w.proc for w in list(for_verl._pool._idle.queue)]
    assert workers and all(p.poll() is None for p in workers)
    for_verl.close()
    assert all(p.poll() is not None for p in workers)  # stopped, none left behind
