# Validation, the plan (stage configs, paths, rule helpers) and the interpreter jobs use.

import os
import sys

sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))

from gspo_workflow import fair, invocation, plan, preflight  # noqa: E402  (workflow/gspo_workflow/)


validate(config, "../schemas/config.schema.yaml")

# Checks what the schema cannot (raising ConfigError naming the key) and writes each stage's
# resolved config under results/<experiment>/config/ when its content changed.
PLAN = plan.Plan(config, workdir=os.getcwd(), dry_run=invocation.is_dry_run())
PLAN.write_stage_configs()
# Once per invocation (not again in each cluster job): the sandbox, the MLflow store against
# the executor, and the compute the plan will spend (gspo_workflow.preflight).
if workflow.is_main_process:
    preflight.report(PLAN, invocation.executor(workflow.basedir),
                     runs_jobs=invocation.runs_jobs())
# Jobs run `python -m pipeline.<stage>` with this interpreter; everything else they need is on
# their command line (stage config files, the MLflow store, experiment and tags).
invocation.put_interpreter_first()


wildcard_constraints:
    experiment=plan.regex_of([PLAN.experiment]),
    variant=plan.regex_of(PLAN.variants),
    seed=r"\d+",
    budget=r"[1-9]\d*",
    vbench=plan.regex_of(PLAN.benchmarks),
