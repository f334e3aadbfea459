"""The off-policy experiment (issue 45): config/offpolicy.yaml's plan (each objective at each
staleness, against its on-policy run; engines that cannot lag refused at plan time) and the
report's follow-up claims and figure on synthetic runs."""

import pathlib

import pytest
import yaml

from gspo.config.fields import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow" / "schemas" / "config.schema.yaml")


def offpolicy_config(**over) -> dict:
    from snakemake.utils import update_config, validate

    cfg = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    update_config(cfg, yaml.safe_load((ROOT / "config" / "offpolicy.yaml").read_text()))
    update_config(cfg, over)
    validate(cfg, SCHEMA, set_default=True)
    return cfg


def plan_of(cfg):
    import sys

    sys.path.insert(0, str(ROOT / "workflow"))
    from gspo_workflow import plan

    return plan.Plan(cfg, workdir=ROOT, dry_run=True)


def test_the_offpolicy_plan_trains_each_objective_at_each_staleness_against_its_on_policy_run():
    plan = plan_of(offpolicy_config())
    assert plan.experiment == "offpolicy" and plan.base == "results/offpolicy"
    objectives = ["grpo", "gspo", "dppo_tv", "clip_cov", "gspo-noclip", "grpo-opsm"]
    want = objectives + [f"{a}-stale{k}" for a in objectives for k in (1, 2, 4)]
    assert list(plan.variants) == want
    assert plan.seeds == [0, 1, 2] and plan.budgets == [0, 100] and plan.benchmarks == ["aime"]
    # the on-policy arms keep their own baselines (a variant its algorithm's run); each stale
    # run is measured against its own on-policy run
    on_policy = {"gspo-noclip": "gspo", "grpo-opsm": "grpo"}
    for name, v in plan.variants.items():
        k = int(name.split("stale")[1]) if "stale" in name else 0
        assert v["baseline"] == (name.split("-stale")[0] if k else on_policy.get(name, ""))
        for seed in plan.seeds:
            cfg = plan.rl_cfgs[name, seed]
            assert (cfg.staleness, cfg.algorithm, cfg.seed) == (k, v["algorithm"], seed)
            assert cfg.out_dir.endswith(f"results/offpolicy/rl/{name}/seed{seed}")
    assert plan.rl_cfgs["grpo-opsm-stale4", 0].opsm_threshold == 0.5
    assert len(plan.rl_dirs()) == 72  # 6 objectives x 4 staleness x 3 seeds


def test_an_objective_added_to_the_experiment_is_one_entry_and_gets_every_staleness():
    cfg = offpolicy_config(
        variants={"gspo-noclip": {"algorithm": "gspo", "rl": {"eps_low": 1.0, "eps_high": 1e9}}}
    )
    plan = plan_of(cfg)
    assert [v for v in plan.variants if v.startswith("gspo-noclip")] == [
        "gspo-noclip",
        "gspo-noclip-stale1",
        "gspo-noclip-stale2",
        "gspo-noclip-stale4",
    ]
    stale = plan.rl_cfgs["gspo-noclip-stale2", 1]
    assert (stale.eps_high, stale.staleness) == (1e9, 2)
    assert plan.variants["gspo-noclip-stale2"]["baseline"] == "gspo-noclip"
    # a variant that sets its own staleness is a stale run already: not repeated
    cfg = offpolicy_config(variants={"gspo-k3": {"algorithm": "gspo", "rl": {"staleness": 3}}})
    assert not any(v.startswith("gspo-k3-") for v in plan_of(cfg).variants)


def test_the_schema_refuses_a_staleness_below_1_in_the_grid_and_a_negative_one_in_rl():
    from snakemake.utils import validate

    for bad in ({"offpolicy": {"staleness": [0]}}, {"rl": {"staleness": -1}}):
        cfg = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
        cfg.update(bad)
        with pytest.raises(Exception, match="minimum"):
            validate(cfg, SCHEMA, set_default=True)


def test_an_engine_that_cannot_lag_is_refused_when_the_plan_is_made():
    cfg = offpolicy_config(variants={"gspo-trl": {"algorithm": "gspo", "rl": {"engine": "trl"}}})
    with pytest.raises(ConfigError) as e:
        plan_of(cfg)
    msg = str(e.value)
    assert msg.startswith("config: variants.gspo-trl-stale1.rl.staleness: ") and "\n" not in msg
    assert "engine: trl" in msg and "max_staleness" in msg


# -- the report: the follow-up's claims and the figure, on hand-made runs --------------------------


def _offpolicy_report(offset, *, noclip=None, collapse=(), seeds=(0, 1, 2), n=200):
    """GRPO and GSPO at staleness 0, 1, 2 (`seeds` each) on n AIME problems: a stale run's
    per-problem score is its on-policy one + offset(algorithm, k) + a fixed zero-mean scatter;
    `collapse`: the (variant) whose reward falls to a tenth in its second half; `noclip`:
    offset(k) of an unclipped GSPO arm at staleness 1 and 2, None for none."""
    from pipeline.report import model
    from test_report import _run

    arms = [(a, 0, a) for a in ("grpo", "gspo")]
    arms += [(f"{a}-stale{k}", k, a) for a in ("grpo", "gspo") for k in (1, 2)]
    if noclip is not None:
        arms += [(f"gspo-noclip-stale{k}", k, "gspo") for k in (1, 2)]
    base = [0.3 + 0.2 * ((i % 5) - 2) / 2 for i in range(n)]
    scatter = [0.05 * (((i * 7) % 11) - 5) / 5 for i in range(n)]
    evals, runs = [], []
    for s in seeds:
        for var, k, alg in [("sft", 0, "sft")] + arms:
            add = -0.1 if var == "sft" else 0.0
            if k:
                add = noclip(k) if "noclip" in var else offset(alg, k)
            probs = {f"p{i}": base[i] + add + (scatter[i] if k else 0.0) for i in range(n)}
            evals.append(
                {
                    "variant": var,
                    "algorithm": alg,
                    "seed": s,
                    "budget": 0 if var == "sft" else 100,
                    "step": 0 if var == "sft" else 20,
                    "benchmark": "aime",
                    "compute_flops": 1e10,
                    "pass_at_1": sum(probs.values()) / n,
                    "problems": probs,
                }
            )
            if var == "sft":
                continue
            baseline = var.split("-stale")[0] if k else ""
            run = dict(_run(var, alg, s, baseline=baseline, steps=20), tags={})
            run["params"] = {"staleness": str(k)}
            if "noclip" in var:
                run["params"].update(eps_low="1.0", eps_high="1000000000.0")
            run["train"]["clip_frac_tokens"] = [(t, 0.01 * (1 + k)) for t in range(1, 21)]
            run["train"]["behaviour_log_ratio_std"] = [(t, 0.05 * k) for t in range(1, 21)]
            if var in collapse:
                run["train"]["reward_mean"] = [(t, 0.4 if t <= 10 else 0.04) for t in range(1, 21)]
            runs.append(run)
    data = {
        "experiment": "offpolicy",
        "experiment_id": "1",
        "tracking_uri": "sqlite:///x.db",
        "rl": runs,
        "sft": [],
        "evals": evals,
    }
    return model.from_data("offpolicy", data, {"bootstrap_iters": 300})


def _claims(report):
    return {c["key"]: c for c in report.claims}


def test_the_follow_up_claims_are_decided_by_the_intervals_against_on_policy_runs():
    # stale runs score lower the staler they are: on-policy is the most stable
    worse = _offpolicy_report(lambda alg, k: -0.05 * k)
    row = _claims(worse)["onpolicy"]
    assert row["verdict"] == "reproduced" and "gspo k=2" in row["measured"]
    assert _claims(worse)["offpolicy_clip"]["verdict"] == "not measured here"
    # a stale run that does better: not reproduced
    better = _offpolicy_report(lambda alg, k: 0.05 if (alg, k) == ("grpo", 1) else 0.0)
    assert _claims(better)["onpolicy"]["verdict"] == "not reproduced"
    assert "grpo k=1" in _claims(better)["onpolicy"]["why"]
    # nothing differs: inconclusive; a collapse of a stale run alone decides it
    same = _offpolicy_report(lambda alg, k: 0.0)
    assert _claims(same)["onpolicy"]["verdict"] == "inconclusive at this sample size"
    collapsed = _offpolicy_report(lambda alg, k: 0.0, collapse=("gspo-stale2",))
    assert _claims(collapsed)["onpolicy"]["verdict"] == "reproduced"
    # two runs per arm: too few for a verdict, the numbers still shown
    few = _offpolicy_report(lambda alg, k: -0.05 * k, seeds=(0, 1))
    assert _claims(few)["onpolicy"]["verdict"] == "too few training runs"
    assert _claims(few)["onpolicy"]["measured"] != "-"


def test_the_clipping_claim_compares_an_unclipped_arm_with_clipped_gspo_at_each_staleness():
    off = lambda alg, k: 0.0  # noqa: E731
    row = _claims(_offpolicy_report(off, noclip=lambda k: -0.05 * k))["offpolicy_clip"]
    assert row["verdict"] == "reproduced" and "gspo-noclip-stale2 - gspo-stale2" in row["measured"]
    row = _claims(_offpolicy_report(off, noclip=lambda k: 0.05))["offpolicy_clip"]
    assert row["verdict"] == "not reproduced"
    row = _claims(_offpolicy_report(off, noclip=lambda k: 0.0))["offpolicy_clip"]
    assert row["verdict"] == "inconclusive at this sample size"


def test_an_experiment_without_stale_runs_leaves_the_follow_up_unmeasured_and_draws_nothing(
    tmp_path,
):
    from pipeline.report import figures, files

    report = _offpolicy_report(lambda alg, k: 0.0)
    report.data["rl"] = [r for r in report.data["rl"] if "stale" not in r["variant"]]
    from pipeline.report import offpolicy

    assert offpolicy.points(report) == []
    report.offpolicy = []
    rows = offpolicy.claim_rows(report)
    assert [r["verdict"] for r in rows] == ["not measured here"] * 2
    assert all("config/offpolicy.yaml" in r["why"] for r in rows)
    figures.draw(report, tmp_path)
    files.write(report, tmp_path)
    assert not (tmp_path / "offpolicy.png").exists()
    assert (tmp_path / "offpolicy.csv").read_text().startswith("objective,algorithm,staleness")


def test_the_report_draws_score_and_stability_against_staleness_per_objective(tmp_path):
    import csv

    from pipeline.report import figures, files

    report = _offpolicy_report(lambda alg, k: -0.05 * k, collapse=("grpo-stale2",))
    figures.draw(report, tmp_path)
    head = files.write(report, tmp_path)
    assert (tmp_path / "offpolicy.png").stat().st_size > 0 and (tmp_path / "offpolicy.svg").exists()
    rows = list(csv.DictReader((tmp_path / "offpolicy.csv").open()))
    got = {(r["objective"], int(r["staleness"])): r for r in rows}
    assert sorted(got) == [(a, k) for a in ("grpo", "gspo") for k in (0, 1, 2)]
    assert got["grpo", 2]["collapsed"] == "3" and got["gspo", 2]["collapsed"] == "0"
    assert float(got["gspo", 2]["diff"]) == pytest.approx(-0.1, abs=1e-3)  # + the scatter
    assert float(got["gspo", 2]["clip_frac_tokens"]) == pytest.approx(0.03)
    assert float(got["gspo", 1]["ratio_spread"]) == pytest.approx(0.05)
    assert got["gspo", 0]["diff"] == ""  # the on-policy run is the reference
    assert [c["key"] for c in head["claims"]][-2:] == ["onpolicy", "offpolicy_clip"]
    page = (tmp_path / "index.html").read_text()
    assert "Score and stability against staleness" in page and "offpolicy.png" in page
