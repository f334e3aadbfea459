"""Experiments of config/ shrunk to toy sizes and run through the workflow for real: the MoE
ablation (its report section) and the objective zoo (every registered objective trains, is
evaluated and reaches the report through the one config field `algorithm`). Each builds its
own experiment from scratch; test_workflow.py holds the tests of the smoke runs."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from gspo.core.objectives import OBJECTIVES
from test_workflow import ROOT, SMOKE, snakemake


def build_moe_ablation(tmp: pathlib.Path) -> pathlib.Path:
    """config/moe.yaml shrunk to toy sizes, run from scratch in `tmp`: its report folder."""
    cfg = yaml.safe_load((ROOT / "config" / "moe.yaml").read_text())
    smoke = yaml.safe_load(SMOKE.read_text())
    cfg.update(
        experiment="moe-smoke",
        seeds=[0],
        budgets=[0, 100],
        benchmarks=["aime"],
        train_tasks={"aime": 1.0},
        data={"aime": smoke["data"]["aime"]},
        sft={**smoke["sft"], "model": "tiny-moe"},
        rl={**smoke["rl"], "moe_metrics": True},
        eval={**smoke["eval"], "lcb": {}, "cf": {}},
        report=smoke["report"],
    )
    path = tmp / "moe-smoke.yaml"
    path.write_text(yaml.safe_dump(cfg))
    snakemake(tmp, "--cores", "2", configfile=path)
    return tmp / "results" / "moe-smoke" / "report"


@pytest.fixture(scope="module")
def moe_ablation(prefetched):
    return pathlib.Path(prefetched("moe_ablation"))  # built in the background (conftest)


@pytest.mark.slow
def test_a_shrunk_moe_ablation_runs_end_to_end_and_its_report_has_the_moe_section(moe_ablation):
    report = moe_ablation
    import csv

    rows = {r["variant"]: r for r in csv.DictReader((report / "moe.csv").open())}
    assert {v: r["replay_source"] for v, r in rows.items()} == {
        "grpo": "",
        "gspo": "",
        "grpo-replay": "trainer",
        "gspo-replay": "trainer",
        "grpo-engine-replay": "engine",
    }
    for r in rows.values():
        assert 0.0 <= float(r["volatility"]) <= 1.0 and 0.0 < float(r["load_entropy"]) <= 1.0
        assert 0.0 <= float(r["engine_routing_mismatch"]) <= 1.0
    # the replay cache's size is measured where replay is on
    assert float(rows["grpo-replay"]["routing_cache_mb"]) > 0
    html = (report / "index.html").read_text()
    assert (
        "Mixture of experts" in html
        and "Verdict:" in html
        and "GRPO without vs with Routing Replay" in html
    )
    assert (report / "moe.png").stat().st_size > 0
    variants = {
        r["variant"]: r["baseline"] for r in csv.DictReader((report / "variants.csv").open())
    }
    assert variants == {"grpo-replay": "grpo", "gspo-replay": "gspo", "grpo-engine-replay": "grpo"}


# config/zoo.yaml shrunk to toy sizes (one seed, AIME-style only, the smoke's SFT and RL sizes,
# no clip sweep): every registered objective trains, is evaluated and reaches the report
# through the one config field `algorithm`. Made once for the per-objective tests below.
def build_shrunk_zoo(tmp: pathlib.Path) -> tuple[pathlib.Path, dict]:
    cfg = yaml.safe_load((ROOT / "config" / "zoo.yaml").read_text())
    smoke = yaml.safe_load(SMOKE.read_text())
    cfg.update(
        experiment="zoo-smoke",
        seeds=[0],
        budgets=[0, 100],
        benchmarks=["aime"],
        train_tasks={"aime": 1.0},
        data={"aime": smoke["data"]["aime"]},
        sft={**smoke["sft"], "steps": 20},
        rl={**smoke["rl"], "steps": 2},
        eval={**smoke["eval"], "lcb": {}, "cf": {}},
        report=smoke["report"],
        variants={k: v for k, v in cfg["variants"].items() if not k.startswith("gspo-clip")},
    )
    path = tmp / "zoo-smoke.yaml"
    path.write_text(yaml.safe_dump(cfg))
    snakemake(tmp, "--cores", "2", configfile=path)
    return tmp / "results" / "zoo-smoke", cfg


@pytest.fixture(scope="module")
def shrunk_zoo(prefetched):
    out, cfg = prefetched("shrunk_zoo")  # build_shrunk_zoo, in the background (conftest)
    return pathlib.Path(out), cfg


@pytest.mark.slow
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_trains_evaluates_and_reaches_the_report_in_the_workflow(
    shrunk_zoo, objective
):
    import csv

    out, cfg = shrunk_zoo
    variant = objective  # grpo and gspo are the zoo's algorithms, the others its variants
    run = out / "rl" / variant / "seed0"
    assert json.loads((run / "summary.json").read_text())["algorithm"] == objective
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == cfg["rl"]["steps"]
    for s in steps:
        assert all(v == v for v in (s["loss"], s["grad_norm"], s["clip_frac_tokens"]))  # finite
        assert 0.0 <= s["clip_frac_tokens"] <= 1.0 and 0.0 <= s["clip_frac_seqs"] <= 1.0
    summary = json.loads(
        (out / "eval" / variant / "seed0" / "b100" / "aime" / "summary.json").read_text()
    )
    assert 0.0 <= summary["benchmarks"]["aime"]["pass@1"] <= 1.0
    rows = list(csv.DictReader((out / "report" / "final_scores.csv").open()))
    assert any(r["variant"] == variant for r in rows)
    if objective not in ("grpo", "gspo"):
        base = {
            r["variant"]: r["baseline"]
            for r in csv.DictReader((out / "report" / "variants.csv").open())
        }
        assert base[variant] == "grpo"
