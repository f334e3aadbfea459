"""The report: its stability rule on hand-made reward curves, and a rebuild from an MLflow store
alone (the smoke run's store, read from another folder by `python -m pipeline.report`)."""

from __future__ import annotations

import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from pipeline.report import (
    collapse_check,
    final_scores,
    moe_summary,
    paired_diff,
    smooth,
    variant_comparisons,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
RULE = {"window": 5, "ratio": 0.5, "tail": 0.2, "min_best": 0.05}


def test_smoothing_is_a_trailing_moving_mean():
    assert smooth([0, 2, 4, 6, 8], 2) == [0, 1, 3, 5, 7]


def test_a_reward_that_falls_to_a_fraction_of_its_best_and_stays_there_is_a_collapse():
    rewards = [0.1] * 5 + [0.4] * 20 + [0.05] * 10
    c = collapse_check(rewards, **RULE)
    assert c["collapsed"] and c["best"] == pytest.approx(0.4)


def test_a_noisy_but_holding_reward_is_not_a_collapse():
    rewards = [0.3, 0.5, 0.2, 0.45, 0.35] * 8
    assert not collapse_check(rewards, **RULE)["collapsed"]


def test_a_dip_that_recovers_before_the_end_is_not_a_collapse():
    rewards = [0.4] * 20 + [0.0] * 10 + [0.4] * 10
    assert not collapse_check(rewards, **RULE)["collapsed"]


def test_a_run_that_never_learned_or_is_too_short_is_not_judged():
    assert not collapse_check([0.01] * 40, **RULE)["collapsed"]
    assert not collapse_check([0.5, 0.5, 0.0, 0.0], **RULE)["collapsed"]


# -- variants and the MoE verdict on hand-made runs ------------------------------------------------


def _run(
    variant,
    algorithm,
    seed,
    *,
    baseline="",
    replay=False,
    steps=10,
    step_s=1.0,
    old_s=0.2,
    gap=0.0,
    vol=None,
    reward=0.3,
):
    train = {
        "reward_mean": [(s, reward) for s in range(1, steps + 1)],
        "compute_flops": [(s, 1e9 * s) for s in range(1, steps + 1)],
        "time_rollout_s": [(s, step_s - old_s - 0.1) for s in range(1, steps + 1)],
        "time_old_logprob_s": [(s, old_s) for s in range(1, steps + 1)],
        "time_update_s": [(s, 0.1) for s in range(1, steps + 1)],
        "logprob_gap_token_mean": [(s, gap) for s in range(1, steps + 1)],
        "logprob_gap_seq_mean": [(s, gap / 4) for s in range(1, steps + 1)],
    }
    if vol is not None:
        train["moe/volatility"] = [(s, vol) for s in range(1, steps + 1)]
        train["moe/load_entropy"] = [(s, 0.9) for s in range(1, steps + 1)]
    params = {"routing_replay": "true" if replay else "false"}  # as tracking.flatten
    if replay == "engine":
        params["routing_replay_source"] = "engine"
        train["moe/engine_routing_mismatch"] = [(s, 0.005) for s in range(1, steps + 1)]
    return {
        "variant": variant,
        "algorithm": algorithm,
        "seed": seed,
        "baseline": baseline,
        "run_id": f"{variant}-{seed}",
        "status": "FINISHED",
        "train": train,
        "eval": {},
        "params": params,
    }


SEEDS = (0, 1, 2)  # resample.MIN_RUNS: fewer training runs give no verdict about an algorithm


def _row(variant, algorithm, problems, seeds=SEEDS):
    """A final_scores row whose runs (`seeds`) all scored `problems` alike."""
    return {
        "variant": variant,
        "algorithm": algorithm,
        "benchmark": "aime",
        "seeds": len(seeds),
        "pass_at_1": sum(problems.values()) / len(problems),
        "ci_low": 0.0,
        "ci_high": 1.0,
        "_runs": [(s, problems) for s in seeds],
    }


def test_a_paired_difference_is_taken_on_the_problems_both_sides_scored():
    a = {"_runs": [(0, {"p1": 1.0, "p2": 0.5, "p3": 0.0})]}
    b = {"_runs": [(0, {"p1": 0.5, "p2": 0.5, "p4": 1.0})]}
    d = paired_diff(a, b, iters=200, confidence=0.95)
    assert d["n_problems"] == 2 and d["diff"] == pytest.approx(0.25)
    assert d["diff_ci_low"] <= 0.25 <= d["diff_ci_high"]
    # one run: its run-to-run variance is unknown, not zero
    assert d["paired"] and d["runs"] == 1 and d["var_share_runs"] is None
    assert paired_diff(a, {"_runs": []}, iters=200, confidence=0.95) == {}


def test_a_variant_is_compared_with_its_baseline_on_score_step_time_and_logprob_gap():
    runs = [_run("gspo", "gspo", s, step_s=1.0, old_s=0.25, gap=1e-6) for s in (0, 1)] + [
        _run("gspo-bf16", "gspo", s, baseline="gspo", step_s=0.75, old_s=0.0, gap=0.02)
        for s in (0, 1)
    ]
    table = [
        _row("gspo", "gspo", {"p1": 0.5, "p2": 0.25}),
        _row("gspo-bf16", "gspo", {"p1": 0.75, "p2": 0.25}),
    ]
    (c,) = variant_comparisons({"rl": runs}, table, iters=200, confidence=0.95)
    assert (c["variant"], c["baseline"], c["benchmark"]) == ("gspo-bf16", "gspo", "aime")
    assert c["diff"] == pytest.approx(0.125) and c["n_problems"] == 2
    assert c["step_s"] == pytest.approx(0.75) and c["baseline_step_s"] == pytest.approx(1.0)
    assert c["step_time_saving"] == pytest.approx(0.25)
    assert c["old_logprob_s"] == 0.0 and c["baseline_old_logprob_s"] == pytest.approx(0.25)
    assert c["logprob_gap_token"] == pytest.approx(0.02)
    assert c["baseline_logprob_gap_token"] == pytest.approx(1e-6)


def test_plain_algorithms_are_not_compared_with_anything():
    runs = [_run("grpo", "grpo", 0), _run("gspo", "gspo", 0)]
    table = [_row("grpo", "grpo", {"p": 0.5}), _row("gspo", "gspo", {"p": 0.5})]
    assert variant_comparisons({"rl": runs}, table, iters=100, confidence=0.95) == []


def _moe_runs(grpo_reward_tail, seeds=SEEDS):
    runs = []
    for seed in seeds:
        r = _run("grpo", "grpo", seed, vol=0.02, steps=20)
        r["train"]["reward_mean"] = [
            (s, 0.4 if s <= 10 else grpo_reward_tail) for s in range(1, 21)
        ]
        runs += [
            r,
            _run("grpo-replay", "grpo", seed, baseline="grpo", replay=True, vol=0.01, steps=20),
            _run("gspo", "gspo", seed, vol=0.02, steps=20),
            _run("gspo-replay", "gspo", seed, baseline="gspo", replay=True, vol=0.01, steps=20),
        ]
    return runs


def _moe_ablation(grpo_reward_tail):
    """moe_summary of the four-variant ablation, every variant scoring the same problems alike,
    GRPO without replay ending at `grpo_reward_tail` training reward."""
    return _moe_ablation_of(_moe_runs(grpo_reward_tail))


def _moe_ablation_of(runs, seeds=SEEDS):
    from pipeline.report import stability

    same = {f"p{i}": 0.5 for i in range(20)}
    table = [
        _row(v, a, same, seeds)
        for v, a in (
            ("grpo", "grpo"),
            ("grpo-replay", "grpo"),
            ("gspo", "gspo"),
            ("gspo-replay", "gspo"),
        )
    ]
    return moe_summary(
        {"rl": runs}, table, stability({"rl": runs}, RULE), iters=200, confidence=0.95
    )


def test_the_moe_verdict_says_plainly_when_the_paper_s_effect_is_not_reproduced():
    moe = _moe_ablation(grpo_reward_tail=0.4)
    rows = {r["variant"]: r for r in moe["rows"]}
    assert rows["grpo-replay"]["routing_replay"] and not rows["grpo"]["routing_replay"]
    assert rows["grpo"]["volatility"] == pytest.approx(0.02)
    assert {p["comparison"] for p in moe["pairs"]} >= {
        "GRPO without vs with Routing Replay",
        "GSPO vs GRPO, both without replay",
    }
    assert "NOT reproduced" in moe["verdict"] and "Collapsed runs: grpo 0/3" in moe["verdict"]


def test_the_moe_verdict_agrees_with_the_paper_when_only_grpo_without_replay_collapses():
    moe = _moe_ablation(grpo_reward_tail=0.01)
    assert {r["variant"]: r["collapsed"] for r in moe["rows"]} == {
        "grpo": 3,
        "grpo-replay": 0,
        "gspo": 0,
        "gspo-replay": 0,
    }
    assert "consistent with the paper" in moe["verdict"]


def test_the_moe_verdict_names_a_significant_effect_in_the_opposite_direction():
    moe = _moe_ablation(grpo_reward_tail=0.4)
    pair = next(p for p in moe["pairs"] if p["comparison"].startswith("GRPO without"))
    pair.update(diff=0.05, diff_ci_low=0.01, diff_ci_high=0.09)
    from pipeline.report import moe_verdict

    text = " ".join(moe_verdict(moe["rows"], moe["pairs"], 0.95))
    assert (
        "NOT reproduced" in text
        and "opposite direction: GRPO without vs with Routing Replay" in text
    )


def test_the_engine_routing_replay_variant_is_labelled_and_compared_with_plain_grpo():
    from pipeline.report import stability

    runs = _moe_runs(0.4) + [
        _run("grpo-engine", "grpo", s, baseline="grpo", replay="engine", vol=0.01, steps=20)
        for s in SEEDS
    ]
    same = {f"p{i}": 0.5 for i in range(20)}
    table = [
        _row(v, a, same)
        for v, a in (
            ("grpo", "grpo"),
            ("grpo-replay", "grpo"),
            ("gspo", "gspo"),
            ("gspo-replay", "gspo"),
            ("grpo-engine", "grpo"),
        )
    ]
    moe = moe_summary(
        {"rl": runs}, table, stability({"rl": runs}, RULE), iters=200, confidence=0.95
    )
    rows = {r["variant"]: r for r in moe["rows"]}
    assert [rows[v]["replay_source"] for v in ("grpo", "grpo-replay", "grpo-engine")] == [
        "",
        "trainer",
        "engine",
    ]
    assert rows["grpo-engine"]["engine_routing_mismatch"] == pytest.approx(0.005)
    # the paper's comparison still pairs GRPO with the trainer-side replay, not the engine one
    paper = next(
        p for p in moe["pairs"] if p["comparison"] == "GRPO without vs with Routing Replay"
    )
    assert paper["against"] == "grpo-replay"
    engine = next(p for p in moe["pairs"] if p["comparison"].startswith("GRPO replaying"))
    assert (engine["variant"], engine["against"]) == ("grpo-engine", "grpo")
    assert "grpo-engine 0.50%" in moe["verdict"]


def test_a_replay_ablation_that_logged_no_drift_still_gets_its_moe_section():
    """verl's runs (config/moe-30b.yaml) log no moe/volatility: the paper's comparisons and
    verdict come from the scores alone."""
    runs = [
        _run(v, a, s, baseline=b, replay=rep, steps=20)
        for s in SEEDS
        for v, a, b, rep in (
            ("grpo", "grpo", "", False),
            ("grpo-r2", "grpo", "grpo", True),
            ("gspo", "gspo", "", False),
            ("gspo-r2", "gspo", "gspo", True),
        )
    ]
    for r in runs:
        r["variant"] = r["variant"].replace("-r2", "-replay")
    moe = _moe_ablation_of(runs)
    assert {r["variant"]: r["volatility"] for r in moe["rows"]} == dict.fromkeys(
        ("grpo", "grpo-replay", "gspo", "gspo-replay")
    )
    assert "GRPO without vs with Routing Replay" in {p["comparison"] for p in moe["pairs"]}
    assert moe["verdict"] and "volatility here" not in moe["verdict"]


def test_a_dense_experiment_has_no_moe_section():
    from pipeline.report import stability

    runs = [_run("grpo", "grpo", 0), _run("gspo", "gspo", 0)]
    assert (
        moe_summary({"rl": runs}, [], stability({"rl": runs}, RULE), iters=100, confidence=0.95)
        is None
    )


@pytest.mark.slow
def test_the_report_is_rebuilt_from_a_copy_of_the_mlflow_store_alone(smoke, tmp_path):
    a, _ = smoke
    # a copy of the database, in a folder without any of the run's files
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(a / "results" / "mlflow.db", store / "mlflow.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.report",
            "--experiment",
            "smoke",
            "--tracking-uri",
            f"sqlite:///{store / 'mlflow.db'}",
            "--out",
            "rep",
            "--no-mlflow-log",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = elsewhere / "rep"
    for name in (
        "index.html",
        "score_vs_compute.png",
        "final_scores.png",
        "reward_vs_compute.png",
        "clip_fraction.png",
        "final_scores.csv",
        "stability.csv",
    ):
        assert (out / name).stat().st_size > 0
    rebuilt = list(csv.DictReader((out / "final_scores.csv").open()))
    original = list(
        csv.DictReader((a / "results" / "smoke" / "report" / "final_scores.csv").open())
    )
    assert rebuilt == original
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["clip_frac_tokens"]) == {"grpo", "gspo", "gspo-bf16-rollout", "gspo-trl"}
    # GSPO on TRL logs the clipped share of sequences only; the native runs log both
    assert summary["clip_frac_tokens"]["gspo-trl"] is None
    assert all(summary["clip_frac_seqs"][v] is not None for v in ("gspo", "gspo-trl"))
    stab = list(csv.DictReader((out / "stability.csv").open()))
    assert {(s["variant"], s["algorithm"], s["seed"], s["status"]) for s in stab} == {
        (v, a, seed, "FINISHED")
        for v, a in (
            ("grpo", "grpo"),
            ("gspo", "gspo"),
            ("gspo-bf16-rollout", "gspo"),
            ("gspo-trl", "gspo"),
        )
        for seed in ("0", "1")
    }
    assert (
        sorted(r["variant"] for r in csv.DictReader((out / "variants.csv").open()))
        == ["gspo-bf16-rollout"] * 3 + ["gspo-trl"] * 3
    )
    assert "python -m pipeline.report --experiment smoke" in (out / "index.html").read_text()


def test_a_report_for_an_unknown_experiment_says_so(tmp_path):
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'db.sqlite'}").search_experiments()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.report",
            "--experiment",
            "nope",
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'db.sqlite'}",
            "--out",
            str(tmp_path / "rep"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0 and "no MLflow experiment 'nope'" in r.stderr


def test_codeforces_rows_carry_the_elo_of_the_problems_solved_with_interval_and_percentile():
    from evaluators.benchmarks.codeforces import estimate_rating

    ratings = {f"p{i}": 800 + 200 * i for i in range(8)}  # 800 .. 2200

    def ev(variant, seed, solved_below):
        probs = {p: float(r < solved_below) for p, r in ratings.items()}
        return {
            "variant": variant,
            "algorithm": variant,
            "seed": seed,
            "budget": 0 if variant == "sft" else 100,
            "step": 0 if variant == "sft" else 10,
            "benchmark": "cf",
            "pass_at_1": sum(probs.values()) / 8,
            "ci_low": 0,
            "ci_high": 1,
            "problems": probs,
            "ratings": ratings,
            "n_problems": 8,
        }

    data = {
        "evals": [ev("sft", 0, 1200), ev("sft", 1, 1200), ev("gspo", 0, 1700), ev("gspo", 1, 1500)],
        "rl": [],
    }
    sft, gspo = final_scores(data, iters=200, confidence=0.95)
    # a problem counts as solved when its score averaged over the seeds is at least 0.5
    want = estimate_rating([(r, r < 1700) for r in ratings.values()])
    assert gspo["elo"] == pytest.approx(want["rating"])
    assert gspo["elo_low"] < gspo["elo"] < gspo["elo_high"]
    assert gspo["elo_percentile"] == pytest.approx(want["percentile"])
    assert sft["elo"] < gspo["elo"]


def _curve_evals(budgets, *, r0=0.2, a=0.6, b=1.2, c_mid=5e10, seeds=(0, 1), n=40):
    """Eval records whose problems' mean follows R(C) exactly at each budget (the problems
    scatter around it by fixed offsets that average to 0)."""
    from pipeline.report.scaling import curve_values

    offsets = [0.1 * ((i % 5) - 2) for i in range(n)]  # mean 0
    out = []
    for budget in [0] + list(budgets):
        c = 1e12 * budget / 100
        mean = r0 if budget == 0 else float(curve_values([c], r0, a, b, c_mid)[0])
        for s in seeds:
            out.append(
                {
                    "variant": "sft" if budget == 0 else "gspo",
                    "algorithm": "gspo",
                    "seed": s,
                    "budget": budget,
                    "step": budget,
                    "benchmark": "aime",
                    "compute_flops": c,
                    "pass_at_1": mean,
                    "problems": {f"p{i}": mean + o for i, o in enumerate(offsets)},
                }
            )
    return out


def test_the_scaling_fit_recovers_a_known_curve_with_intervals_around_it():
    from pipeline.report.scaling import scaling_fits

    data = {"evals": _curve_evals([1, 2, 5, 10, 20, 50, 100])}
    (f,) = scaling_fits(data, iters=100, confidence=0.95)
    assert f["status"] == "fitted" and f["n_points"] == 7 and f["r0"] == pytest.approx(0.2)
    assert f["asymptote"] == pytest.approx(0.6, abs=0.01)
    assert f["efficiency"] == pytest.approx(1.2, rel=0.1)
    assert f["c_mid"] == pytest.approx(5e10, rel=0.15)
    for k in ("asymptote", "efficiency", "c_mid"):
        assert f[f"{k}_ci_low"] <= f[k] <= f[f"{k}_ci_high"], k
    assert f["fitted"][0][0] == pytest.approx(1e10) and len(f["fitted"]) == 50


def test_too_few_budgets_are_not_fitted_and_say_so():
    from pipeline.report.scaling import scaling_fits

    (f,) = scaling_fits({"evals": _curve_evals([25, 50, 100])}, iters=50, confidence=0.95)
    assert f["status"].startswith("too few points to fit (3 budgets above 0")
    assert "asymptote" not in f


def test_the_page_and_summary_show_the_fit_the_elo_and_the_elo_against_compute(tmp_path):
    from pipeline.report import figures, files, model

    evals = _curve_evals([10, 20, 50, 100])
    cf = [
        dict(e, benchmark="cf", ratings={f"p{i}": 800 + 50 * i for i in range(40)}) for e in evals
    ]
    runs = []
    for s in (0, 1):
        run = dict(_run("gspo", "gspo", s, steps=100), tags={})
        run["train"]["compute_flops"] = [(st, 1e10 * st) for st in range(1, 101)]
        for bench, es in (("aime", evals), ("cf", cf)):
            mine = [e for e in es if e["seed"] == s and e["variant"] == "gspo"]
            run["eval"][bench] = {
                "pass_at_1": [(0, 0.2)] + [(e["step"], e["pass_at_1"]) for e in mine]
            }
        run["eval"]["cf"]["rating"] = [(0, 900.0)] + [
            (e["step"], 900.0 + 5 * e["step"])
            for e in evals
            if e["seed"] == s and e["variant"] == "gspo"
        ]
        runs.append(run)
    data = {
        "experiment": "x",
        "experiment_id": "1",
        "tracking_uri": "sqlite:///x.db",
        "rl": runs,
        "sft": [],
        "evals": evals + cf,
    }
    report = model.from_data("x", data, {"bootstrap_iters": 50})
    head = files.write(report, tmp_path)
    figures.draw(report, tmp_path)
    fit = {f["benchmark"]: f for f in head["scaling_fits"]}["aime"]
    assert fit["status"] == "fitted" and {"asymptote", "efficiency", "c_mid"} <= set(fit)
    cf_row = [r for r in head["final_scores"] if r["benchmark"] == "cf" and r["variant"] == "gspo"]
    assert cf_row[0]["elo_low"] <= cf_row[0]["elo"] <= cf_row[0]["elo_high"]
    page = (tmp_path / "index.html").read_text().replace("<wbr>", "")  # header break points
    assert "Scaling-curve fit (ScaleRL)" in page and "elo_percentile" in page
    assert "intervals over training runs and problems" in page and "var_share_runs" in page
    assert head["intervals"]["min_runs_for_a_verdict"] == 3
    assert fit["asymptote_var_share_runs"] is not None
    for name in ("score_vs_compute", "final_scores"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0
        assert "<svg" in (tmp_path / f"{name}.svg").read_text()  # the vector copy beside it
    assert "asymptote" in (tmp_path / "scaling_fits.csv").read_text()


def _k_evals():
    """Final evaluations of sft, gspo and grpo (2 seeds, 4 samples) on 6 problems, with pass@k,
    maj@k and, for each seed-0 run, its results.jsonl rows with completions."""
    evals, rows = [], {}
    for var, solved in (("sft", 1), ("gspo", 4), ("grpo", 2)):
        for seed in (0, 1):
            ids = [f"p{i}" for i in range(6)]
            probs = {p: float(i < solved) for i, p in enumerate(ids)}
            run_id = f"{var}-{seed}"
            evals.append(
                {
                    "variant": var,
                    "algorithm": "gspo" if var == "sft" else var,
                    "seed": seed,
                    "budget": 0 if var == "sft" else 100,
                    "step": 0 if var == "sft" else 10,
                    "benchmark": "aime",
                    "pass_at_1": solved / 6,
                    "ci_low": 0,
                    "ci_high": 1,
                    "run_id": run_id,
                    "problems": probs,
                    "pass_k": {p: min(1.0, 2 * v) for p, v in probs.items()},
                    "maj": {p: float(i < solved - seed) for i, p in enumerate(ids)},
                    "k": 4,
                }
            )
            rows[run_id] = [
                {
                    "id": p,
                    "prompt": f"What is {p}?",
                    "answer": "7",
                    "scores": [probs[p]] * 4,
                    "answers": ["7" if probs[p] else "3"] * 4,
                    "completions": [f"{var} says <{p}>"] * 4,
                }
                for p in ids
            ]
    return evals, rows


def test_final_scores_add_pass_at_k_and_maj_at_k_and_paper_tables_and_the_side_by_side(tmp_path):
    from pipeline.report import files, model, sidebyside, tables

    evals, rows = _k_evals()
    runs = [dict(_run(v, v, s), tags={}) for v in ("gspo", "grpo") for s in (0, 1)]
    data = {
        "experiment": "x",
        "experiment_id": "1",
        "tracking_uri": "sqlite:///x.db",
        "rl": runs,
        "sft": [],
        "evals": evals,
    }
    report = model.from_data("x", data, {"bootstrap_iters": 50})
    report.side_by_side = sidebyside.side_by_side(report, lambda rid: rows[rid])
    head = files.write(report, tmp_path)
    gspo = {r["variant"]: r for r in head["final_scores"]}["gspo"]
    assert gspo["k"] == 4 and gspo["pass_at_k"] == pytest.approx(8 / 12)
    assert gspo["maj_at_k"] == pytest.approx(7 / 12)  # seed 0: 4 of 6, seed 1: 3 of 6
    assert gspo["maj_at_k_ci_low"] <= gspo["maj_at_k"] <= gspo["maj_at_k_ci_high"]
    md = (tmp_path / "final_scores.md").read_text().splitlines()
    assert md[0] == "| variant | benchmark | runs | k | pass@1 | pass@k | maj@k | vs SFT | Elo |"
    assert md[4].startswith(f"| gspo | aime | 2 | 4 | {gspo['pass_at_1']:.3f} [")
    tex = (tmp_path / "final_scores.tex").read_text()
    assert r"\toprule" in tex and f"{gspo['maj_at_k']:.3f} [" in tex
    assert len((tmp_path / "claims.md").read_text().splitlines()) == 2 + len(report.claims)
    assert tables.latex(["a_b"], [["50% & $1"]], "c", "l").count(r"50\% \& \$1") == 1
    # GSPO against GRPO where they differ most: p2 and p3 (GSPO solves them, GRPO does not)
    sbs = json.loads((tmp_path / "side_by_side.json").read_text())
    assert [(e["variant"], e["baseline"], e["problem"]) for e in sbs] == [
        ("gspo", "grpo", "p2"),
        ("gspo", "grpo", "p3"),
        ("gspo", "grpo", "p0"),
    ]
    assert sbs[0]["samples"][0] == {"completion": "gspo says <p2>", "score": 1.0, "answer": "7"}
    page = (tmp_path / "index.html").read_text()
    assert "Completions side by side" in page and "grpo says &lt;p2&gt;" in page


def _mixed_size_evals(seeds=(0, 1, 2)):
    """The workflow's evaluations as the default makes them: the SFT model and the last budget
    on 40 problems x 8 samples, the budgets between on the first 16 x 2. Every checkpoint passes
    a problem's first two samples more often than its other six (a lucky shared draw), so a
    curve that plotted each evaluation's own mean would fall at the last budget."""
    out = []
    for budget in (0, 25, 50, 75, 100):
        n, k = (16, 2) if budget in (25, 50, 75) else (40, 8)
        for s in seeds if budget else (0,):
            passes = 1 + (budget >= 50) + (budget == 100)  # of every 4 first samples
            samples = {}
            for i in range(n):
                first = [float(((i + j) % 4) < passes) for j in range(2)]
                rest = [float(((i + j) % 5) == 0) for j in range(k - 2)]
                samples[f"p{i}"] = first + rest
            out.append(
                {
                    "variant": "gspo" if budget else "sft",
                    "algorithm": "gspo",
                    "seed": s,
                    "budget": budget,
                    "step": budget,
                    "benchmark": "aime",
                    "compute_flops": 1e10 * budget,
                    "problems": {i: sum(v) / len(v) for i, v in samples.items()},
                    "samples": samples,
                    "pass_at_1": sum(map(sum, samples.values())) / (n * k),
                }
            )
    return out


def test_every_curve_point_uses_one_problem_set_and_sample_count(tmp_path):
    """Issue 40: evaluations of different sizes give one population per curve (the problems all
    scored, their first k samples): the SFT point, the intermediate ones, the last one and the
    fit; the final scores keep the full final evaluation."""
    from pipeline.report import figures, files, model

    evals = _mixed_size_evals()
    runs = [dict(_run("gspo", "gspo", s, steps=100), tags={}) for s in (0, 1, 2)]
    data = {
        "experiment": "x",
        "experiment_id": "1",
        "tracking_uri": "sqlite:///x.db",
        "rl": runs,
        "sft": [],
        "evals": evals,
    }
    report = model.from_data("x", data, {"bootstrap_iters": 200})
    assert [p["budget"] for p in report.curve] == [0, 25, 50, 75, 100]
    assert {(p["n_problems"], p["samples"]) for p in report.curve} == {(16, 2)}
    ids = [f"p{i}" for i in range(16)]
    for p in report.curve:
        es = [e for e in evals if e["budget"] == p["budget"]]
        want = sum(sum(e["samples"][i][:2]) / 2 for e in es for i in ids) / (16 * len(es))
        assert p["pass_at_1"] == pytest.approx(want)
        assert p["ci_low"] <= p["pass_at_1"] <= p["ci_high"]
    final = report.curve[-1]
    own = sum(e["problems"][i] for e in evals if e["budget"] == 100 for i in e["problems"]) / 120
    assert final["pass_at_1"] > report.curve[-2]["pass_at_1"] > own  # no artefactual drop
    (fit,) = report.fits
    assert (fit["n_problems"], fit["samples"]) == (16, 2)
    table = {r["variant"]: r for r in report.table}
    assert table["gspo"]["n_problems"] == table["sft"]["n_problems"] == 40
    (draws,) = report.draws
    assert draws["n_problems"] == 16 and 0 < draws["draw_share"] <= 1
    head = files.write(report, tmp_path)
    figures.draw(report, tmp_path)
    assert head["curves"]["draws"][0]["samples"] == 2
    assert "16 problems x 2 samples" in (tmp_path / "index.html").read_text()
    assert (tmp_path / "curve.csv").read_text().count("\n") == 1 + len(report.curve)


# ---------------------------------------------------------------------------------------------
# The claims table


def _claims_report(
    gspo_offset,
    *,
    n=300,
    noise=0.06,
    grpo_tail=0.3,
    gspo_clip=0.2,
    grpo_clip=0.002,
    gspo_flops=1.0,
    cf_offset=None,
    seeds=SEEDS,
    seed_shift=0.0,
    grpo_gain=0.15,
):
    """A report of GRPO and GSPO (`seeds`) on n AIME problems: GSPO's per-problem score is
    GRPO's + gspo_offset + a fixed zero-mean scatter of size `noise` (+ seed_shift x the seed's
    position, a run-to-run difference), GRPO's is the SFT model's + grpo_gain (so the
    non-inferiority margin is 20% of it: 0.03 by default); GRPO's reward falls to `grpo_tail`
    (from 0.4) in its last half; clip fractions and GSPO's compute as given."""
    from pipeline.report import model

    base = [0.3 + 0.2 * ((i % 5) - 2) / 2 for i in range(n)]
    scatter = [noise * (((i * 7) % 11) - 5) / 5 for i in range(n)]
    evals = []
    offsets = {"aime": gspo_offset, **({"cf": cf_offset} if cf_offset is not None else {})}
    for bench, offset in offsets.items():
        for k, s in enumerate(seeds):
            shift = seed_shift * k
            for var, budget, add in (
                ("sft", 0, [-grpo_gain] * n),
                ("grpo", 100, [0.0] * n),
                ("gspo", 100, [offset + shift + e for e in scatter]),
            ):
                probs = {f"p{i}": base[i] + add[i] for i in range(n)}
                evals.append(
                    {
                        "variant": var,
                        "algorithm": var,
                        "seed": s,
                        "budget": budget,
                        "step": budget // 5,
                        "benchmark": bench,
                        "compute_flops": 1e10,
                        "pass_at_1": sum(probs.values()) / n,
                        "problems": probs,
                    }
                )
    runs = []
    for s in seeds:
        for var, clip, flops in (("grpo", grpo_clip, 1.0), ("gspo", gspo_clip, gspo_flops)):
            run = dict(_run(var, var, s, steps=20), tags={})
            run["train"]["clip_frac_tokens"] = [(st, clip) for st in range(1, 21)]
            run["train"]["compute_flops"] = [(st, 1e9 * st * flops) for st in range(1, 21)]
            if var == "grpo":
                run["train"]["reward_mean"] = [
                    (st, 0.4 if st <= 10 else grpo_tail) for st in range(1, 21)
                ]
            runs.append(run)
    data = {
        "experiment": "x",
        "experiment_id": "1",
        "tracking_uri": "sqlite:///x.db",
        "rl": runs,
        "sft": [],
        "evals": evals,
    }
    return model.from_data("x", data, {"bootstrap_iters": 300})


def _verdicts(report):
    return {c["key"]: c["verdict"] for c in report.claims}


def test_claims_are_reproduced_only_as_far_as_their_intervals_allow():
    v = _verdicts(_claims_report(0.0))
    assert v["clipping"] == "reproduced"  # 100x clipping, no loss beyond 0.03
    assert v["compute"] == "inconclusive at this sample size"  # interval around 0
    assert v["stability"] == "inconclusive at this sample size"  # nothing collapsed
    assert v["moe"] == v["engine"] == "not measured here"
    better = _verdicts(_claims_report(0.05))
    assert better["compute"] == "reproduced" and better["clipping"] == "reproduced"
    worse = _verdicts(_claims_report(-0.1))
    assert worse["clipping"] == worse["compute"] == "not reproduced"


def test_a_benchmark_that_goes_the_other_way_makes_the_verdict_inconclusive():
    v = _verdicts(_claims_report(0.05, cf_offset=-0.03))
    assert v["compute"] == "inconclusive at this sample size"  # higher on aime, lower on cf
    assert v["clipping"] == "inconclusive at this sample size"  # cf may be 0.03 worse
    assert _verdicts(_claims_report(0.05, cf_offset=-0.2))["clipping"] == "not reproduced"
    assert _verdicts(_claims_report(0.05, cf_offset=0.0))["compute"] == "reproduced"


def test_the_margin_is_a_share_of_grpos_own_gain_over_the_sft_model():
    # GRPO gains 0.5 over SFT: GSPO may lose up to 0.1 and still learn "at least as well"
    assert (
        _verdicts(_claims_report(0.05, cf_offset=-0.03, grpo_gain=0.5))["clipping"] == "reproduced"
    )
    assert (
        _verdicts(_claims_report(0.05, cf_offset=-0.2, grpo_gain=0.5))["clipping"]
        == "not reproduced"
    )
    # GRPO gains nothing: there is no gain to keep, and only a higher score shows GSPO at least
    # as good (a fixed 0.03 margin called equal scores "reproduced" here)
    flat = {c["key"]: c for c in _claims_report(0.0, grpo_gain=0.0).claims}["clipping"]
    assert flat["verdict"] == "inconclusive at this sample size"
    assert flat["margins"] == {"aime": 0.0} and "no gain over the SFT model" in flat["why"]
    assert _verdicts(_claims_report(0.05, grpo_gain=0.0))["clipping"] == "reproduced"
    assert _verdicts(_claims_report(-0.1, grpo_gain=0.0))["clipping"] == "not reproduced"


def test_a_small_noisy_sample_is_inconclusive_not_a_verdict_either_way():
    v = _verdicts(_claims_report(-0.02, n=12, noise=0.5))
    assert v["clipping"] == v["compute"] == "inconclusive at this sample size"


def test_equal_clipping_or_unmatched_compute_cannot_reproduce_the_claims():
    assert _verdicts(_claims_report(0.0, gspo_clip=0.002))["clipping"] == "not reproduced"
    assert (
        _verdicts(_claims_report(0.05, gspo_flops=1.5))["compute"]
        == "inconclusive at this sample size"
    )


def test_the_stability_claim_needs_grpo_to_collapse_where_gspo_does_not():
    report = _claims_report(0.0, grpo_tail=0.05)
    row = {c["key"]: c for c in report.claims}["stability"]
    assert row["verdict"] == "reproduced" and "GRPO collapsed 3/3" in row["measured"]


def test_the_claims_come_first_on_the_page_and_in_summary_json_with_links(tmp_path):
    from pipeline.report import claims, files

    out = tmp_path / "results" / "tiny" / "report"
    other = tmp_path / "results" / "moe" / "report"
    other.mkdir(parents=True)
    (other / "index.html").write_text("<html></html>")
    out.mkdir(parents=True)
    report = _claims_report(0.05)
    claims.link_related(report.claims, out)
    head = files.write(report, out)
    assert [c["key"] for c in head["claims"]] == [
        "clipping",
        "compute",
        "stability",
        "moe",
        "engine",
        "onpolicy",  # the GSPO follow-up's (pipeline.report.offpolicy): not measured here
        "offpolicy_clip",
    ]
    rows = {c["key"]: c for c in head["claims"]}
    assert rows["moe"]["link"] == "../../moe/report/index.html" and "link" not in rows["engine"]
    page = (out / "index.html").read_text()
    assert page.index("The paper's claims") < page.index("Score against training compute")
    assert "../../moe/report/index.html" in page and "config/precision.yaml" in page


def test_a_fit_to_noise_keeps_the_asymptote_in_the_score_range_and_says_it_is_not_identified():
    from pipeline.report.scaling import scaling_fits

    evals = _curve_evals([25, 50, 75, 100], a=0.21, n=12)  # a gain of 0.01: all noise
    for e in evals:  # scatter the budgets' means
        if e["budget"]:
            shift = 0.02 * (-1) ** (e["budget"] // 25 + e["seed"])
            e["problems"] = {k: v + shift for k, v in e["problems"].items()}
    (f,) = scaling_fits({"evals": evals}, iters=100, confidence=0.95)
    assert 0.0 <= f["asymptote_ci_low"] <= f["asymptote"] <= f["asymptote_ci_high"] <= 1.0
    assert f["status"].startswith("fitted; ") and "not identified" in f["status"], f["status"]


def test_two_very_different_training_runs_give_too_few_training_runs_not_a_verdict():
    from types import SimpleNamespace

    from pipeline.report import claims

    # GSPO far ahead in one run and a little in the other: the numbers are shown, no verdict
    report = _claims_report(0.05, seeds=(0, 1), seed_shift=0.3, grpo_tail=0.05)
    rows = {c["key"]: c for c in report.claims}
    for key in ("clipping", "compute", "stability"):
        assert rows[key]["verdict"] == "too few training runs", rows[key]
    assert "GSPO - GRPO" in rows["compute"]["measured"] and "at least 3" in rows["compute"]["why"]
    gspo = next(r for r in report.table if r["variant"] == "gspo")
    assert gspo["seeds"] == 2 and gspo["per_seed"][1] - gspo["per_seed"][0] == pytest.approx(0.3)
    assert gspo["var_share_runs"] > 0.9  # the runs, not the problems, spread it
    moe = _moe_ablation_of(_moe_runs(0.01, seeds=(0, 1)), seeds=(0, 1))
    assert "Verdict: too few training runs" in moe["verdict"]
    assert claims.moe(SimpleNamespace(moe=moe))["verdict"] == "too few training runs"


# -- the fair protocol's learning-rate choice (pipeline.report.selection, pipeline.select) ------

FAIR = {"grpo": {1e-4: 0.30, 5e-5: 0.40}, "gspo": {1e-4: 0.45, 5e-5: 0.35}}  # val pass@1


def _fair_files(tmp_path, val=FAIR, seeds=SEEDS, n=200) -> dict:
    """select.yaml's content over toy validation results: each run of (algorithm, rate) solves
    a share val[alg][lr] of n problems (shifted a little per seed)."""
    grid = {}
    for alg, rates in val.items():
        grid[alg] = []
        for lr, share in rates.items():
            name = f"{alg}-lr{lr:.0e}".replace("e-0", "e-")
            files = []
            for k, s in enumerate(seeds):
                p = tmp_path / name / f"seed{s}" / "results.jsonl"
                p.parent.mkdir(parents=True, exist_ok=True)
                solved = int(n * (share + 0.01 * (k - 1)))
                p.write_text(
                    "".join(
                        json.dumps({"id": f"v{i}", "pass@1": float(i < solved)}) + "\n"
                        for i in range(n)
                    )
                )
                files.append(str(p))
            grid[alg].append({"lr": lr, "variant": name, "results": files})
    return {"benchmark": "aime", "seeds": list(seeds), "grid": grid}


def test_each_algorithm_gets_the_rate_its_validation_runs_score_best_with_an_interval(tmp_path):
    from pipeline.report.selection import choose

    sel = choose(_fair_files(tmp_path), iters=300)
    assert sel["algorithms"]["grpo"]["chosen_variant"] == "grpo-lr5e-5"
    assert sel["algorithms"]["gspo"]["chosen_variant"] == "gspo-lr1e-4"
    for a in sel["algorithms"].values():
        for p in a["points"]:
            assert p["ci_low"] < p["pass_at_1"] < p["ci_high"] and p["seeds"] == len(SEEDS)
    flipped = {"grpo": {1e-4: 0.40, 5e-5: 0.30}, "gspo": FAIR["gspo"]}
    again = choose(_fair_files(tmp_path / "b", flipped), iters=300)
    assert again["algorithms"]["grpo"]["chosen_lr"] == 1e-4  # the data decide, not the grid


def test_the_report_compares_the_algorithms_at_their_chosen_rates_and_plots_score_against_rate(
    tmp_path,
):
    from pipeline.report import figures, files, model
    from pipeline.report.selection import choose

    sel = choose(_fair_files(tmp_path), iters=200)
    report = _claims_report(0.05)  # GRPO and GSPO evals as plain variants
    data = report.data
    rename = {"grpo": "grpo-lr5e-5", "gspo": "gspo-lr1e-4"}  # the chosen grid points
    runs = [{**r, "variant": rename[r["variant"]]} for r in data["rl"]]
    runs += [
        {
            **r,
            "variant": r["variant"].replace("5e-5", "1e-4")
            if "grpo" in r["variant"]
            else r["variant"].replace("1e-4", "5e-5"),
        }
        for r in runs
    ]  # the other rates
    evals = [{**e, "variant": rename.get(e["variant"], e["variant"])} for e in data["evals"]]
    evals += [
        {
            **e,
            "variant": e["variant"].replace("5e-5", "1e-4")
            if "grpo" in e["variant"]
            else e["variant"].replace("1e-4", "5e-5"),
        }
        for e in evals
        if e["variant"] != "sft"
    ]
    fair = model.from_data(
        "x", {**data, "rl": runs, "evals": evals}, {"bootstrap_iters": 200}, selection=sel
    )
    assert {r["variant"] for r in fair.table} >= {"grpo", "gspo", "grpo-lr1e-4", "gspo-lr5e-5"}
    assert _verdicts(fair) == _verdicts(report)  # the claims read the chosen rates
    rows = {(r["algorithm"], r["lr"]): r for r in fair.selection_rows}
    assert rows["grpo", 5e-5]["chosen"] and not rows["grpo", 1e-4]["chosen"]
    by_name = {r["variant"]: r for r in fair.table if r["benchmark"] == "aime"}
    assert rows["gspo", 1e-4]["test_pass_at_1"] == by_name["gspo"]["pass_at_1"]
    assert rows["gspo", 5e-5]["test_pass_at_1"] == by_name["gspo-lr5e-5"]["pass_at_1"]
    out = tmp_path / "report"
    out.mkdir()
    figures.draw(fair, out)
    head = files.write(fair, out)
    assert head["selection"]["chosen_lr"] == {"grpo": 5e-5, "gspo": 1e-4}
    assert (out / "lr.png").stat().st_size > 0 and (out / "selection.csv").is_file()
    page = (out / "index.html").read_text()
    assert page.index("Learning rates chosen on validation") < page.index("<h2>Final scores</h2>")
    plain = model.from_data("x", data, {"bootstrap_iters": 50})  # no grid: no section
    assert plain.selection_rows == [] and "Learning rates chosen" not in html_of(plain)


def html_of(report) -> str:
    from pipeline.report import html

    return html.render(report)


def test_the_select_stage_writes_its_choice_and_names_a_missing_result_in_one_line(tmp_path):
    import subprocess
    import sys

    cfg = _fair_files(tmp_path)
    (tmp_path / "select.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "select" / "lr.json"
    cmd = [
        sys.executable,
        "-m",
        "pipeline.select",
        "--config",
        str(tmp_path / "select.yaml"),
        "--out",
        str(out),
        "--bootstrap-iters",
        "100",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["algorithms"]["gspo"]["chosen_lr"] == 1e-4
    assert "gspo-lr1e-4" in r.stdout and r.stdout.count("(chosen)") == 2
    assert (tmp_path / "select" / "lr.csv").read_text().count("\n") == 5
    missing = cfg["grid"]["grpo"][0]["results"][1]
    pathlib.Path(missing).unlink()
    out.unlink()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip().count("\n") == 0 and missing in r.stderr
