"""The gspo_* lm-eval tasks, run by the real lm-eval on the tiny model, against the harness's own scoring."""

import json

import pytest
import yaml

from evaluators import evaluation as ev
from evaluators import lm_eval_tasks as tasks
from evaluators.benchmarks import aime
from evaluators.benchmarks.aime import answers as math_answers
from evaluators.lm_eval_tasks import utils as task_utils
from gspo.io import write_jsonl
from gspo.model.tokens import Codec
from toys import memorise


@pytest.fixture(scope="module")
def problems():
    return aime.generate(3, split="test", seed=0, difficulty="easy")


@pytest.fixture(scope="module")
def memorised(tiny_model_dir, tmp_path_factory, problems):
    p0, p1, p2 = problems
    pairs = [
        (p0["prompt"], f"\\boxed{{{p0['answer']}}}"),
        (p1["prompt"], f"work: \\boxed{{{(p1['answer'] + 1) % 1000}}}"),
        (p2["prompt"], f"\\boxed{{{p2['answer']:03d}}}"),
    ]
    return memorise(tiny_model_dir, tmp_path_factory.mktemp("memorised"), pairs)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, problems):
    d = tmp_path_factory.mktemp("data")
    write_jsonl(problems, d / "aime_test.jsonl")
    return d


def simple_evaluate(model_dir, task_manager, task, **kw):
    import lm_eval

    return lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model_dir},dtype=float32",
        tasks=[task],
        task_manager=task_manager,
        device="cpu",
        batch_size=4,
        log_samples=True,
        **kw,
    )


def recompute(samples):
    """avg@n / pass@n per document from lm-eval's logged outputs, by the harness's own scoring."""
    from evaluators.metrics import pass_at_k

    out = []
    for s in samples:
        rec = json.loads(s["doc"]["record"])
        (outs,) = s["filtered_resps"]  # one request per document, holding all its samples
        scores = [math_answers.score_answer(o, rec["answer"]) for o in outs]
        n, c = len(scores), int(sum(scores))
        out.append({"id": rec["id"], "outputs": outs, "avg": c / n, "pass": pass_at_k(n, c, n)})
    return out


# -- the task folder ---------------------------------------------------------------------------


def test_shipped_yamls_are_the_generated_defaults_and_code_tasks_are_unsafe():
    for bench in tasks.BENCHMARKS:
        text = (tasks.TASKS_DIR / f"gspo_{bench}.yaml").read_text()
        assert text == tasks.task_yaml(bench)
        cfg = yaml.safe_load(text.replace("!function ", ""))
        assert cfg["task"] == f"gspo_{bench}"
        assert cfg.get("unsafe_code", False) is (bench != "aime")
        assert cfg["filter_list"][0]["filter"][0]["filter_fn"] == "utils.keep_all_samples"
        assert cfg["process_results"] == "utils.process_results"


def test_shipped_generation_defaults_are_the_project_evaluators():
    d = ev.EvalConfig()
    assert (tasks.REPEATS, tasks.TEMPERATURE, tasks.TOP_P, tasks.MAX_GEN_TOKS) == (
        d.samples,
        d.temperature,
        d.top_p,
        d.max_new_tokens,
    )


def test_process_results_scores_every_sample_with_the_aime_scorer():
    rec = {"id": "x", "task": "aime", "prompt": "p", "answer": 12}
    doc = {"record": json.dumps(rec)}
    outs = ["\\boxed{12}", "\\boxed{13}", "\\boxed{\\frac{24}{2}}", "12"]
    assert task_utils.process_results(doc, [outs]) == {"avg_at_n": 0.5, "pass_at_n": 1.0}
    assert task_utils.process_results(doc, ["\\boxed{13}"]) == {"avg_at_n": 0.0, "pass_at_n": 0.0}


def test_process_results_runs_the_code_benchmark_scorer_on_every_sample():
    lcb = pytest.importorskip("evaluators.benchmarks.livecodebench")
    rec = lcb.generate(1, split="test", seed=0)[0]
    doc = {"record": json.dumps(rec)}
    got = task_utils.process_results(doc, [[rec["solution"], "print(1)"]])
    assert got == {"avg_at_n": 0.5, "pass_at_n": 1.0}


def test_keep_all_samples_keeps_every_repeat():
    assert task_utils.keep_all_samples([["a", "b", "c"], ["d", "e", "f"]], [{}, {}]) == [
        ["a", "b", "c"],
        ["d", "e", "f"],
    ]


def test_data_file_prefers_metadata_then_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(task_utils.DATA_DIR_ENV, str(tmp_path / "env"))
    assert task_utils.data_file("cf", {}) == tmp_path / "env" / "cf_test.jsonl"
    assert task_utils.data_file("cf", {"data_dir": str(tmp_path)}) == tmp_path / "cf_test.jsonl"
    assert task_utils.data_file("cf", {"cf_file": "x.jsonl", "data_dir": "y"}).name == "x.jsonl"
    monkeypatch.delenv(task_utils.DATA_DIR_ENV)
    assert str(task_utils.data_file("lcb", {})) == "data/lcb_test.jsonl"


def test_write_tasks_cli_writes_a_loadable_folder(tmp_path):
    assert (
        tasks.main(
            [
                "--out",
                str(tmp_path / "t"),
                "--benchmarks",
                "aime",
                "--repeats",
                "8",
                "--data-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    cfg = yaml.safe_load((tmp_path / "t" / "gspo_aime.yaml").read_text().replace("!function ", ""))
    assert cfg["repeats"] == 8 and cfg["metadata"]["data_dir"] == str(tmp_path)
    assert (tmp_path / "t" / "utils.py").read_text() == (tasks.TASKS_DIR / "utils.py").read_text()


# -- the real lm-eval ----------------------------------------------------------------------------


@pytest.mark.slow
def test_lm_eval_greedy_scores_agree_with_the_harness_and_the_rollout_engine(
    memorised, data_dir, problems, tmp_path
):
    from lm_eval.tasks import TaskManager

    from gspo.model.models import load_model
    from gspo.rollout import make_engine

    folder = tasks.write_tasks(
        tmp_path / "tasks",
        benchmarks=["aime"],
        repeats=2,
        temperature=0.0,
        max_gen_toks=16,
        data_dir=str(data_dir),
    )
    res = simple_evaluate(memorised, TaskManager(include_path=str(folder)), "gspo_aime")
    reported = res["results"]["gspo_aime"]
    samples = sorted(res["samples"]["gspo_aime"], key=lambda s: s["doc_id"])
    assert [s["arguments"][0][0] for s in samples] == [
        p["prompt"] for p in problems
    ]  # exact prompts

    mine = recompute(samples)
    assert [len(m["outputs"]) for m in mine] == [2, 2, 2]
    assert [m["avg"] for m in mine] == [s["avg_at_n"] for s in samples]
    assert reported["avg_at_n,all_samples"] == pytest.approx(sum(m["avg"] for m in mine) / 3)
    assert reported["pass_at_n,all_samples"] == pytest.approx(sum(m["pass"] for m in mine) / 3)
    # The memorised model answers problems 0 and 2 (the latter as "012"-style) right, 1 wrong.
    assert [m["avg"] for m in mine] == [1.0, 0.0, 1.0]
    assert reported["avg_at_n,all_samples"] == pytest.approx(2 / 3)

    # The harness's own evaluation of the same checkpoint, greedy: the same text, the same scores.
    model, tok = load_model(memorised)
    own = ev.evaluate_records(
        make_engine("torch", memorised, model=model),
        Codec(tok),
        problems,
        samples=2,
        temperature=0.0,
        max_new_tokens=16,
    )
    assert [r["completions"] for r in own] == [m["outputs"] for m in mine]
    assert [r["avg@n"] for r in own] == [m["avg"] for m in mine]


@pytest.mark.slow
def test_lm_eval_shipped_task_reads_data_dir_from_metadata_and_keeps_all_samples(
    memorised, data_dir
):
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(tasks.TASKS_DIR), metadata={"data_dir": str(data_dir)})
    # A hot temperature so that the samples of a document can differ (avg@n != pass@n).
    res = simple_evaluate(
        memorised, tm, "gspo_aime", gen_kwargs={"max_gen_toks": 16, "temperature": 1.5}, limit=2
    )
    samples = res["samples"]["gspo_aime"]
    assert len(samples) == 2
    mine = recompute(samples)
    assert [len(m["outputs"]) for m in mine] == [tasks.REPEATS] * 2  # all repeats kept
    assert [len(r) for s in samples for r in s["resps"]] == [tasks.REPEATS] * 2
    assert [m["avg"] for m in mine] == [s["avg_at_n"] for s in samples]
    assert [m["pass"] for m in mine] == [s["pass_at_n"] for s in samples]
    assert res["results"]["gspo_aime"]["avg_at_n,all_samples"] == pytest.approx(
        sum(m["avg"] for m in mine) / 2
    )


@pytest.mark.slow
def test_lm_eval_refuses_the_code_tasks_without_confirm_run_unsafe_code(memorised, tmp_path):
    from lm_eval.tasks import TaskManager

    rec = {"id": "lcb-0", "task": "lcb", "prompt": "Write a program.\n", "solution": "print(1)"}
    (tmp_path / "lcb_test.jsonl").write_text(json.dumps(rec) + "\n")
    tm = TaskManager(include_path=str(tasks.TASKS_DIR), metadata={"data_dir": str(tmp_path)})
    with pytest.raises(ValueError, match="unsafe"):
        simple_evaluate(memorised, tm, "gspo_lcb", limit=1)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_the_documented_lm_eval_commands_run_as_written(memorised, data_dir, tmp_path, backend):
    """evaluators/lm_eval_tasks/README.md's CPU commands (hf, and vllm through the CPU build's
    metadata alias), unchanged but for MODEL_DIR, run by bash from a folder that holds data/
    (their --metadata data_dir) and, like the repository root, evaluators/."""
    import os
    import pathlib
    import re
    import shutil
    import subprocess
    import sys

    readme = (tasks.TASKS_DIR / "README.md").read_text()
    start = {"hf": "lm_eval --model hf ", "vllm": "VLLM_CPU_KVCACHE_SPACE=1 "}[backend]
    block = re.search(rf"^ {{4}}({re.escape(start)}.*?)\n\n", readme, re.S | re.M).group(1)
    shutil.copytree(data_dir, tmp_path / "data")
    (tmp_path / "evaluators").symlink_to(tasks.TASKS_DIR.parent)
    env = {
        **os.environ,
        "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    r = subprocess.run(
        ["bash", "-c", block.replace("MODEL_DIR", str(memorised))],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (results,) = (tmp_path / "out").rglob("results_*.json")
    scores = json.loads(results.read_text())["results"]["gspo_aime"]
    # the memorised model answers problems 0 and 2 right and 1 wrong, nearly every sample (the
    # task samples at temperature 1)
    assert 0.5 <= scores["avg_at_n,all_samples"] <= 2 / 3
    (samples,) = (tmp_path / "out").rglob("samples_gspo_aime_*.jsonl")
    logged = [json.loads(x) for x in samples.read_text().splitlines()]
    assert len(logged) == 3 and all(len(s["resps"][0]) == 8 for s in logged)  # repeats: 8
