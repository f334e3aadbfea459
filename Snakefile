# gspo-bench: the whole GRPO / GSPO / GSPO-token comparison in one command.
#
#     snakemake --cores 2                                  # config/default.yaml, local profile
#     snakemake --cores 2 --configfile config/smoke.yaml   # the ~2-minute smoke run
#     snakemake --report results/<experiment>/snakemake-report.html
#
# DAG: data -> sft -> rl (one per algorithm x seed) -> eval (each run's checkpoint at every
# budget, on every benchmark; budget 0 = the SFT model) -> track (record in MLflow) ->
# aggregate -> report. Rules live in workflow/rules/, their Python in workflow/gspo_workflow/
# (plan.py: config -> stage configs, paths and rule helpers; steps.py: the jobs,
# `python -m gspo_workflow.steps <stage>`), the config schema in workflow/schemas/. Every output
# and log lies under results/<experiment>/; runs are tracked in MLflow (default
# sqlite:///results/mlflow.db, or $MLFLOW_TRACKING_URI).

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
include: "workflow/rules/eval.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        PLAN.report_outputs().values(),
    default_target: True
