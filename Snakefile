# gspo-bench: the whole GRPO / GSPO / GSPO-token comparison in one command.
#
#     snakemake --cores 2                                  # config/default.yaml, local profile
#     snakemake --cores 2 --configfile config/smoke.yaml   # the ~2-minute smoke run
#     snakemake --report results/<experiment>/snakemake-report.html
#
# DAG: data -> sft -> rl (one per variant x seed) -> eval (each run's checkpoint at every
# budget, on every benchmark; budget 0 = the SFT model) -> track (record in MLflow) ->
# aggregate -> report. Every rule runs the stage command a user would run by hand,
# `python -m pipeline.<stage>`, on the stage config the plan wrote for it
# (workflow/gspo_workflow/plan.py: config -> stage configs, paths and rule helpers). Rules live
# in workflow/rules/, the config schema in workflow/schemas/. Every output and log lies under
# results/<experiment>/; runs are tracked in MLflow (default sqlite:///results/mlflow.db, or
# $MLFLOW_TRACKING_URI, or the config's tracking.uri), passed to each command as flags.

import os

from snakemake.utils import min_version, validate

min_version("9.0")


# config/default.yaml unless --configfile names another (which then replaces it, rather than
# being merged into it key by key).
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "default.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/sft.smk"
include: "workflow/rules/rl.smk"
include: "workflow/rules/verl.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/fair.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        PLAN.report_outputs().values(),
    default_target: True
