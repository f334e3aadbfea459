"""The fair comparison protocol's part of the plan (config `fair`, config/fair.yaml).

With a learning-rate grid, every algorithm trains at every rate of it: one variant per
(algorithm, rate), named `<algorithm>-lr<rate>`, each measured against GRPO at the same rate.
Each run's final model is also scored on a validation split (RL prompts held out of RL by the
data stage, pipeline.data.held_out), pipeline.select picks each algorithm's rate on it, and the
report compares the algorithms at their chosen rates on the test problems. Every grid point is
evaluated on the test problems too, so that the plan is fixed before any job runs (no
Snakemake checkpoint); the choice reads the validation scores alone.
"""

from __future__ import annotations


def lr_name(lr: float) -> str:
    """A rate as it appears in a variant's name: 5e-05 -> '5e-5', 2.5e-4 -> '2.5e-4'."""
    mant, exp = f"{lr:.6e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


def variant_name(algorithm: str, lr: float) -> str:
    return f"{algorithm}-lr{lr_name(lr)}"


def grid(config: dict) -> list[float]:
    return [float(x) for x in (config.get("fair") or {}).get("lr_grid") or []]


def settings(config: dict) -> dict:
    """The `fair` section with its defaults."""
    return {"benchmark": "aime", "problems": 500, "samples": 4, **(config.get("fair") or {})}


def variants(algorithms: list[str], rates: list[float]) -> dict[str, dict]:
    """{name: {algorithm, baseline, description, rl}} of every (algorithm, rate)."""
    out = {}
    for lr in rates:
        for a in algorithms:
            base = variant_name("grpo", lr) if a != "grpo" and "grpo" in algorithms else ""
            out[variant_name(a, lr)] = {
                "algorithm": a,
                "baseline": base,
                "rl": {"lr": lr},
                "description": f"{a.upper()} at lr {lr_name(lr)} (fair protocol grid)",
            }
    return out


def val_eval_config(eval_cfg: dict, val_file: str, samples: int) -> dict:
    """The validation evaluation: the benchmark's final evaluation settings on its
    validation split, every problem, `samples` samples each."""
    return {**eval_cfg, "data": val_file, "limit": 0, "samples": samples}


def select_config(config: dict, base: str, algorithms: list[str], seeds: list[int]) -> dict:
    """pipeline.select's config: per algorithm, each rate's variant and the validation
    summaries of its runs."""
    s = settings(config)
    bench = s["benchmark"]
    return {
        "benchmark": bench,
        "seeds": seeds,
        "grid": {
            a: [
                {
                    "lr": lr,
                    "variant": variant_name(a, lr),
                    "results": [
                        f"{base}/eval/{variant_name(a, lr)}/seed{sd}/val/{bench}/results.jsonl"
                        for sd in seeds
                    ],
                }
                for lr in grid(config)
            ]
            for a in algorithms
        },
    }


def val_bench(config: dict, benchmarks: list[str], rl_tasks) -> str:
    """The validation benchmark: one the runs train on (its validation problems are held out
    of its RL prompts) and are scored on."""
    from gspo.config.fields import ConfigError

    b = settings(config)["benchmark"]
    if b not in benchmarks or not rl_tasks.get(b):
        raise ConfigError(
            f"config: fair.benchmark: {b!r} must be in benchmarks and in the RL "
            "mix (its validation problems are held out of its RL prompts)"
        )
    return b


def stage_configs(plan) -> dict[str, dict]:
    """{config name: content} of the protocol's stages (none without a grid): the validation
    evaluation's and pipeline.select's."""
    if not plan.lr_grid:
        return {}
    b = plan.val_bench()
    return {
        f"eval/{b}-val": val_eval_config(
            plan.eval_cfgs[b], plan.data_file(b, "val"), settings(plan.config)["samples"]
        ),
        "select": select_config(plan.config, plan.base, plan.algorithms, plan.seeds),
    }


def val_results(plan) -> list[str]:
    """Every grid run's validation results (pipeline.select's inputs)."""
    if not plan.lr_grid:
        return []
    return [
        p
        for pts in select_config(plan.config, plan.base, plan.algorithms, plan.seeds)[
            "grid"
        ].values()
        for pt in pts
        for p in pt["results"]
    ]


def selection(plan) -> list[str]:
    """The choice the report reads: pipeline.select's JSON, when there is a grid."""
    return [f"{plan.base}/select/lr.json"] if plan.lr_grid else []
