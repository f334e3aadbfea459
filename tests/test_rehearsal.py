"""The real-scale configuration rehearsed on CPU, for real (config/rehearsal.yaml layered over
config/real-scale.yaml and config/paper-protocol.yaml, with profiles/rehearsal): the loaders on
the published layouts, the tiny-bpe model in chat format, bf16 training on 2 torchrun ranks,
vLLM CPU rollouts and evaluation, the paper's protocol at toy counts, MLflow and the report."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = [
    ROOT / "config" / f for f in ("real-scale.yaml", "paper-protocol.yaml", "rehearsal.yaml")
]


def _leaves(d: dict, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def _get(d: dict, path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return KeyError
        d = d[k]
    return d


def _commented_keys(text: str) -> dict:
    """{key path: whether its line carries a '#' comment} of a block-style YAML text."""
    out, stack = {}, []
    for line in text.splitlines():
        body = line.split("#")[0]
        if not body.strip() or ":" not in body:
            continue
        indent = len(line) - len(line.lstrip())
        stack = [(i, k) for i, k in stack if i < indent]
        stack.append((indent, body.strip().split(":")[0]))
        out[tuple(k for _, k in stack)] = "#" in line
    return out


def test_every_rehearsal_field_differs_from_the_real_scale_config_and_says_why():
    from snakemake.utils import update_config

    base = yaml.safe_load(CONFIGS[0].read_text())
    update_config(base, yaml.safe_load(CONFIGS[1].read_text()))
    text = CONFIGS[2].read_text()
    comments = _commented_keys(text)
    for path, value in _leaves(yaml.safe_load(text)):
        assert _get(base, path) != value, f"{'.'.join(path)} repeats real-scale's value"
        # the reason is on the field's line or on the line of a key that holds it
        assert any(comments.get(path[:n]) for n in range(1, len(path) + 1)), (
            f"{'.'.join(path)}: no reason given"
        )


def run_rehearsal(work: pathlib.Path) -> tuple[pathlib.Path, str]:
    """The rehearsal from scratch in `work`: its results folder and snakemake's log."""
    (work / "tests").symlink_to(ROOT / "tests")  # the fixture files, at their relative paths
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "GSPO_MLFLOW"))}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(work),
        "--workflow-profile",
        str(ROOT / "profiles" / "rehearsal"),
        "--configfile",
        *CONFIGS,
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return work / "results" / "rehearsal", r.stdout + r.stderr


@pytest.fixture(scope="module")
def rehearsal(prefetched):
    out, log = prefetched("rehearsal")  # run_rehearsal, in the background (conftest)
    return pathlib.Path(out), log


@pytest.mark.slow
def test_the_rehearsal_trains_on_two_ranks_with_vllm_and_the_real_data_layouts(rehearsal):
    out, log = rehearsal
    # sft, and rl for gspo and the gspo-trl variant
    assert log.count("torchrun --standalone --nproc-per-node=2 -m pipeline.") == 3
    sft = json.loads((out / "sft" / "summary.json").read_text())
    assert sft["world_size"] == 2 and sft["steps"] == 20
    cfg = yaml.safe_load((out / "config" / "sft.yaml").read_text())
    assert cfg["precision"] == "bfloat16" and cfg["prompt"]["format"] == "chat"
    rl = json.loads((out / "rl" / "gspo" / "seed0" / "summary.json").read_text())
    assert rl["world_size"] == 2 and rl["steps"] == 2 and rl["tokens_generated"] > 0
    rcfg = yaml.safe_load((out / "config" / "rl" / "gspo-seed0.yaml").read_text())
    assert rcfg["rollout"]["engine"] == "vllm" and rcfg["rollout"]["dtype"] == "bfloat16"
    # the TRL engine rehearsed as the native one: FSDP2 over the same 2 ranks, bf16
    trl = json.loads((out / "rl" / "gspo-trl" / "seed0" / "summary.json").read_text())
    assert (trl["engine"], trl["world_size"], trl["steps"], trl["sharding"]) == (
        "trl",
        2,
        2,
        "fsdp2",
    )
    tcfg = yaml.safe_load((out / "config" / "rl" / "gspo-trl-seed0.yaml").read_text())
    assert (tcfg["engine"], tcfg["precision"]) == ("trl", "bfloat16")
    # real-scale's peak_flops gives MFU under TRL too, from the harness's clock
    trl_recs = [json.loads(x) for x in (out / "rl" / "gspo-trl" / "seed0" / "metrics.jsonl").open()]
    assert trl_recs and all(r["mfu_rollout"] > 0 and r["mfu_update"] > 0 for r in trl_recs)
    data = {p.stem: [json.loads(x) for x in p.open()] for p in (out / "data").glob("*.jsonl")}
    # the loaders' records: OpenR1 traces, DAPO prompts, AIME 2024, LiveCodeBench in the window
    from evaluators.benchmarks import aime

    fixtures = ROOT / "tests" / "fixtures" / "aime"
    traces = aime.load_sft(fixtures / "openr1_math_220k.parquet")
    assert [r["solution"] for r in data["aime_sft"]] == [r["solution"] for r in traces]
    dapo = aime.load(fixtures / "dapo_math_17k.parquet")
    assert [r["prompt"] for r in data["aime_rl"]] == [r["prompt"] for r in dapo]
    assert len(data["aime_test"]) == 3 and len(data["lcb_test"]) == 5
    assert all("2024-10-01" <= r["contest_date"][:10] <= "2025-02-01" for r in data["lcb_test"])
    # open-r1/codeforces: unusable rows skipped, generated tests joined, a checker and a
    # file-mode problem kept; codeforces-cots: the finished Python trace
    assert [r["id"] for r in data["cf_test"]] == ["2000/A", "2000/B", "2000/C"]
    assert {r["input_mode"] for r in data["cf_test"]} == {"stdio", "file"}
    assert any(r["generated_checker"] for r in data["cf_test"])
    assert {r["id"]: len(r["tests"]) for r in data["cf_rl"]}["1900/D"] == 3
    assert [r["id"] for r in data["cf_sft"]] == ["1900/A"]


@pytest.mark.slow
def test_the_rehearsal_evaluates_with_vllm_under_the_paper_protocol_at_toy_counts(rehearsal):
    out, _ = rehearsal
    for folder in ("sft", "gspo/seed0/b100", "gspo-trl/seed0/b100"):
        for bench, n in (("aime", 3), ("lcb", 5), ("cf", 3)):
            s = json.loads((out / "eval" / folder / bench / "summary.json").read_text())
            assert s["settings"]["protocol"] == "gspo-paper-2025-rehearsal"
            assert s["settings"]["engine"] == "vllm" and s["settings"]["dtype"] == "bfloat16"
            assert s["config"]["temperature"] == 0.6 and s["config"]["top_p"] == 0.95
            assert s["benchmarks"][bench]["n_samples"] == 2 * n
    assert "gspo" in (out / "report" / "index.html").read_text()
