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
    want = ["grpo", "gspo"] + [f"{a}-stale{k}" for a in ("grpo", "gspo") for k in (1, 2, 4)]
    assert list(plan.variants) == want
    assert plan.seeds == [0, 1, 2] and plan.budgets == [0, 100] and plan.benchmarks == ["aime"]
    for name, v in plan.variants.items():
        k = int(name.split("stale")[1]) if "stale" in name else 0
        assert v["baseline"] == (name.split("-stale")[0] if k else "")
        for seed in plan.seeds:
            cfg = plan.rl_cfgs[name, seed]
            assert (cfg.staleness, cfg.algorithm, cfg.seed) == (k, v["algorithm"], seed)
            assert cfg.out_dir.endswith(f"results/offpolicy/rl/{name}/seed{seed}")
    assert len(plan.rl_dirs()) == 24  # 2 objectives x 4 staleness x 3 seeds


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
