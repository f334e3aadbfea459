"""docs/EXTENDING.md's examples at work, run by tests/test_extending.py inside a copy of the
repository the page's edits were applied to: the registry checks pass on the extension, the
workflow validates and plans a config of both, and the data stage, one RL step of `pg` on
`parity` and an evaluation of its checkpoint run. Prints one JSON line of what they gave.

    python tests/extending_check.py OUT_DIR      (from the extended copy's root)
"""

# ruff: noqa: E402  (imports follow the sys.path set-up for the copy under test)
import json
import pathlib
import sys

import pytest
import yaml

root = pathlib.Path.cwd()
sys.path[:0] = [str(root / "tests"), str(root / "workflow")]
out = pathlib.Path(sys.argv[1])

import test_registry as reg  # the copy's registry checks, on the extension

for test in (
    reg.test_the_schema_names_the_registered_objectives_and_benchmarks_in_one_place_each,
    reg.test_every_benchmark_has_its_data_and_eval_sections_in_the_schema_and_the_data_config,
    reg.test_the_objectives_page_has_one_row_per_objective_with_its_engines_names,
):
    test()
with pytest.MonkeyPatch.context() as mp:
    reg.test_the_engines_maps_are_the_registrys(mp)

from evaluators import lm_eval_tasks

assert (lm_eval_tasks.TASKS_DIR / "gspo_parity.yaml").read_text() == lm_eval_tasks.task_yaml(
    "parity"
)

# the workflow takes both: schema and plan
from snakemake.utils import validate

from gspo_workflow.plan import Plan

cfg = yaml.safe_load((root / "config" / "smoke.yaml").read_text())
cfg.update(
    algorithms=["pg"], variants={}, benchmarks=["parity"], train_tasks={"parity": 1.0}, rl_tasks={}
)
validate(cfg, str(root / "workflow" / "schemas" / "config.schema.yaml"))
plan = Plan(cfg, workdir=out / "wf", dry_run=True)
assert plan.rl_cfgs[("pg", cfg["seeds"][0])].algorithm == "pg"
assert plan.data_cfg.tasks == ["parity"] and "parity" in plan.eval_cfgs

# the data stage, one RL step of pg on parity, an evaluation of its checkpoint
from evaluators import tasks
from evaluators.evaluation import EvalConfig, evaluate
from gspo.config.data import DataGenConfig, GeneratedDataConfig
from gspo.config.train import DataSource, RLConfig
from gspo.model.models import build_tiny
from gspo.native.trainer import run_rl
from pipeline.data import generate

files = generate(
    DataGenConfig(
        out_dir=str(out / "data"),
        tasks=["parity"],
        parity=GeneratedDataConfig(sft_n=4, rl_n=8, test_n=4),
    )
)
model = build_tiny("tiny", out / "tiny", seed=0)
rl = RLConfig(
    algorithm="pg",
    model=str(model),
    out_dir=str(out / "rl"),
    steps=1,
    prompts_per_step=2,
    group_size=2,
    minibatches=2,
    max_new_tokens=4,
    train_data=[DataSource(str(files["parity_rl"]))],
    threads=1,
)
run_rl(rl, tasks.rewards)
(record,) = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").open()]
summary = evaluate(
    out / "rl" / "model",
    [
        EvalConfig(
            benchmark="parity",
            data=str(files["parity_test"]),
            samples=2,
            max_new_tokens=4,
            bootstrap_iters=10,
        )
    ],
    out / "eval",
)
s = summary["parity"]["benchmarks"]["parity"]
print(
    json.dumps(
        {
            "step": record["step"],
            "clip_frac_tokens": record["clip_frac_tokens"],
            "n_problems": s["n_problems"],
            "samples": s["samples_per_problem"],
            "maj@k": "maj@k" in s,  # its scoring extracts answers
            "tasks": sorted(json.loads(line)["task"] for line in files["parity_test"].open()),
        }
    )
)
