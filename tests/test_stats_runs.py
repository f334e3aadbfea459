"""Intervals over training runs and problems (pipeline.report.resample): on synthetic experiments
with a known run-to-run variance they cover the true difference at about their nominal rate,
where the old interval over problems alone does not; pairing by seed, the SFT model as one fixed
run, the variance split, and the Student quantile behind the few-run widening."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from evaluators.metrics import bootstrap_ci
from pipeline.report import resample
from pipeline.report.stats import final_scores, paired_diff

# the synthetic experiment: per arm, seed s scores problem i with probability
# MU[arm] + u_s + b_i + c_arm_i (u_s ~ N(0, TAU^2) the run-to-run variance, b_i the problem's
# difficulty shared by both arms, c_arm_i each arm's own problem effect), SAMPLES samples each
MU = {"gspo": 0.50, "grpo": 0.45}
TAU, SEEDS, PROBLEMS, SAMPLES = 0.03, 5, 300, 8
EXPERIMENTS, ITERS = 200, 1000


def _experiment(rng) -> dict:
    """One synthetic experiment as pipeline.aggregate.collect's eval records (final budget)."""
    b = rng.uniform(-0.2, 0.2, PROBLEMS)
    evals = []
    for var, mu in MU.items():
        c = rng.uniform(-0.1, 0.1, PROBLEMS)
        u = np.clip(rng.normal(0.0, TAU, SEEDS), -4 * TAU, 4 * TAU)  # symmetric: mean 0
        q = mu + u[:, None] + b[None, :] + c[None, :]
        assert 0 <= q.min() and q.max() <= 1  # no clipping bias
        scores = rng.binomial(SAMPLES, q) / SAMPLES
        for s in range(SEEDS):
            probs = {f"p{i}": float(scores[s, i]) for i in range(PROBLEMS)}
            evals.append(
                {
                    "variant": var,
                    "algorithm": var,
                    "seed": s,
                    "budget": 100,
                    "step": 20,
                    "benchmark": "aime",
                    "problems": probs,
                    "pass_at_1": float(scores[s].mean()),
                }
            )
    return {"evals": evals, "rl": []}


def _old_interval(gspo: dict, grpo: dict) -> tuple[float, float]:
    """The report's former interval: a bootstrap over problems of each problem's difference,
    its scores averaged over the seeds first."""
    ids = sorted(gspo["_runs"][0][1])
    per_problem = [
        np.mean([p[i] for _, p in gspo["_runs"]]) - np.mean([p[i] for _, p in grpo["_runs"]])
        for i in ids
    ]
    return bootstrap_ci(per_problem, iters=ITERS, confidence=0.95, seed=0)


@functools.lru_cache(maxsize=1)
def _coverage() -> dict:
    """How often each interval holds its true value over EXPERIMENTS synthetic experiments."""
    rng = np.random.default_rng(2025)
    true_diff = MU["gspo"] - MU["grpo"]
    hits = {"diff": 0, "old_diff": 0, "gspo": 0, "grpo": 0}
    shares = []
    for _ in range(EXPERIMENTS):
        rows = {
            r["variant"]: r for r in final_scores(_experiment(rng), iters=ITERS, confidence=0.95)
        }
        d = paired_diff(rows["gspo"], rows["grpo"], iters=ITERS, confidence=0.95)
        hits["diff"] += d["diff_ci_low"] <= true_diff <= d["diff_ci_high"]
        lo, hi = _old_interval(rows["gspo"], rows["grpo"])
        hits["old_diff"] += lo <= true_diff <= hi
        for var in ("gspo", "grpo"):
            hits[var] += rows[var]["ci_low"] <= MU[var] <= rows[var]["ci_high"]
        shares.append(d["var_share_runs"])
    return {**{k: v / EXPERIMENTS for k, v in hits.items()}, "share": float(np.mean(shares))}


def test_intervals_over_runs_and_problems_cover_the_true_values_at_their_nominal_rate():
    cov = _coverage()
    print("coverage (95% nominal):", cov)
    # 200 experiments: a 95% interval covers 0.95 +- 0.015 (one standard error)
    assert 0.88 <= cov["diff"] <= 0.99, cov
    assert 0.88 <= cov["gspo"] <= 0.99 and 0.88 <= cov["grpo"] <= 0.99, cov
    # the setting is one where the runs matter: most of the difference's variance is theirs
    assert cov["share"] > 0.5, cov


def test_the_old_interval_over_problems_alone_undercovers_in_the_same_setting():
    cov = _coverage()
    assert cov["old_diff"] < 0.75, cov  # about half the time (tests/ measured 0.5-0.6)


def test_two_levels_widen_the_interval_by_what_the_runs_add():
    rng = np.random.default_rng(0)
    problems = rng.uniform(0.2, 0.8, 200)
    same = np.tile(problems, (5, 1))  # every run alike
    spread = same + np.array([-0.06, -0.03, 0.0, 0.03, 0.06])[:, None]  # runs differ
    a = resample.interval([resample.Arm(1.0, same)], iters=500, confidence=0.95)
    b = resample.interval([resample.Arm(1.0, spread)], iters=500, confidence=0.95)
    assert a["var_runs"] == pytest.approx(0.0) and a["var_share_runs"] == pytest.approx(0.0)
    assert b["var_share_runs"] > 0.6 and b["dof"] < 10
    assert b["ci_high"] - b["ci_low"] > 2 * (a["ci_high"] - a["ci_low"])
    assert b == resample.interval([resample.Arm(1.0, spread)], iters=500, confidence=0.95)


def _row(seed_scores: dict, fixed: bool = False) -> dict:
    return {
        "_runs": [
            (s, {f"p{i}": float(v) for i, v in enumerate(x)}) for s, x in seed_scores.items()
        ],
        "_fixed": fixed,
    }


def test_variants_with_the_same_seeds_are_paired_by_seed():
    rng = np.random.default_rng(1)
    problems = rng.uniform(0.2, 0.8, 100)
    shift = {s: 0.1 * (s - 2) for s in range(5)}  # seed s moves both variants alike
    a = _row({s: problems + shift[s] + 0.02 for s in range(5)})
    b = _row({s: problems + shift[s] for s in range(5)})
    d = paired_diff(a, b, iters=500, confidence=0.95)
    assert d["paired"] and d["runs"] == 5 and d["diff"] == pytest.approx(0.02)
    assert d["per_seed_diff"] == pytest.approx([0.02] * 5)
    assert d["diff_ci_high"] - d["diff_ci_low"] < 1e-9  # the shared seed effect cancels
    # other seeds: nothing to pair, each side's runs drawn on their own
    c = _row({s + 10: problems + shift[s] for s in range(5)})
    u = paired_diff(a, c, iters=500, confidence=0.95)
    assert not u["paired"] and u["per_seed_diff"] is None
    assert u["diff_ci_low"] < 0.0 < 0.04 < u["diff_ci_high"] and u["var_share_runs"] > 0.9


def test_the_sft_model_is_one_fixed_run_and_its_difference_keeps_the_per_seed_numbers():
    problems = np.linspace(0.1, 0.9, 50)
    sft = _row({0: problems}, fixed=True)
    runs = _row({s: problems + 0.01 * s for s in range(4)})
    d = paired_diff(runs, sft, iters=500, confidence=0.95)
    assert not d["paired"] and d["runs"] == 4
    assert d["per_seed_diff"] == pytest.approx([0.0, 0.01, 0.02, 0.03])
    # the per-problem differences are constant within a run: all of the variance is the runs'
    assert d["var_share_runs"] == pytest.approx(1.0)
    assert d["diff_ci_low"] <= 0.015 <= d["diff_ci_high"]


def test_final_scores_treat_the_sft_evaluations_as_one_run():
    evals = [
        {
            "variant": "sft",
            "algorithm": "sft",
            "seed": s,
            "budget": 0,
            "step": 0,
            "benchmark": "aime",
            "pass_at_1": 0.5,
            "problems": {"p0": 0.25 + 0.5 * s, "p1": 0.75 - 0.25 * s},
        }
        for s in (0, 1)
    ]
    (row,) = final_scores({"evals": evals, "rl": []}, iters=200, confidence=0.95)
    assert row["var_share_runs"] == 0.0 and row["var_runs"] == 0.0
    assert [p for _, p in row["_runs"]] == [{"p0": 0.5, "p1": 0.625}]
    assert row["per_seed"] == [0.5, 0.5] and row["seed_ids"] == [0, 1]


@pytest.mark.parametrize(
    "p,dof,want",
    [
        (0.975, 1, 12.706205),
        (0.975, 2, 4.302653),
        (0.975, 4, 2.776445),
        (0.975, 4.5, 2.658912),
        (0.95, 10, 1.812461),
        (0.975, 1e6, 1.959966),
    ],
)
def test_the_student_quantile_behind_the_few_run_widening(p, dof, want):
    assert resample.t_quantile(p, dof) == pytest.approx(want, rel=1e-5)
    assert resample.widening(float("inf"), 0.95) == 1.0


def test_an_interval_holds_its_estimate_where_nothing_varies():
    x = np.full((3, 7), 0.1)  # 0.1 has no exact binary form: draws round
    for arms in ([resample.Arm(1.0, x)], [resample.Arm(1.0, x), resample.Arm(-1.0, x * 0.3)]):
        ci = resample.interval(arms, iters=300, confidence=0.95)
        assert ci["ci_low"] <= ci["estimate"] <= ci["ci_high"]


def test_the_elo_interval_adds_what_the_runs_add_to_the_likelihood_ratio_one():
    from pipeline.report.stats import elo

    rng = np.random.default_rng(3)
    ratings = {f"p{i}": float(r) for i, r in enumerate(rng.uniform(800, 2000, 60))}
    ids = sorted(ratings)
    es = [{"ratings": ratings}]
    base = np.array([1.0 if ratings[i] < 1300 else 0.0 for i in ids])
    alike = [base.tolist()] * 5
    # runs that differ: each solves up to its own rating (1100 ... 1500), the mean as `alike`
    differ = [[1.0 if ratings[i] < c else 0.0 for i in ids] for c in (1100, 1200, 1300, 1400, 1500)]
    lr = elo(es, ids, base.tolist(), confidence=0.95)  # over problems alone
    same = elo(es, ids, base.tolist(), confidence=0.95, per_run=alike)
    spread = elo(es, ids, np.mean(differ, axis=0).tolist(), confidence=0.95, per_run=differ)
    assert same["elo_low"] == pytest.approx(lr["elo_low"]) and same["elo_var_share_runs"] == 0.0
    assert same["elo_per_seed"] == pytest.approx([lr["elo"]] * 5)
    assert spread["elo_per_seed"] == sorted(spread["elo_per_seed"])  # in run order
    assert spread["elo_var_share_runs"] > 0.3
    assert spread["elo_low"] < spread["elo"] < spread["elo_high"]
    assert spread["elo_high"] - spread["elo_low"] > 1.3 * (lr["elo_high"] - lr["elo_low"])
    assert "elo_per_seed" not in lr and "elo_per_seed" not in elo(
        es, ids, base.tolist(), confidence=0.95, per_run=alike[:1]
    )  # one run: nothing to add
